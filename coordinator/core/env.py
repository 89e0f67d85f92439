"""Shared context of all handlers: config, shards, timers, id generator, stats, parked-token index.

Rules:
- A group lives on shard ``partition_for(group_id)``; ``status_error`` says whether this node can serve
  it now (None), or answers COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR.
- ``shards`` is fixed at construction (a shard changes status and contents, never identity), so
  ``shard_of`` caches each group id's Shard object (bounded: cleared past 100,000 ids).
- ``parked`` maps every token parked in a member (pending JoinGroup/SyncGroup) to (group id, member id),
  so a closed connection can be detached from its member; ``park``/``unpark`` keep it exact.
- Timer keys: ("member", group, member) heartbeat/session/pending-member expiry; ("join", group) initial
  delay or rebalance timeout; ("sync", group) pending SyncGroups; ("retention", shard) offsets expiry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .config import GroupConfig
from .errors import Err
from .group import Group
from .shard import Shard, ShardStatus
from .sharding import partition_for
from .stats import Stats
from .timers import Timers


@dataclass(slots=True)
class Env:
    cfg: GroupConfig
    new_id: Callable[[], str]
    shards: list[Shard]
    timers: Timers = field(default_factory=Timers)
    stats: Stats = field(default_factory=Stats)
    parked: dict[object, tuple[str, str]] = field(default_factory=dict)
    _shard_cache: dict[str, Shard] = field(default_factory=dict)  # group id -> its shard (shards never change)

    def shard_of(self, group_id: str) -> Shard:
        shard = self._shard_cache.get(group_id)
        if shard is None:
            if len(self._shard_cache) > 100_000:
                self._shard_cache.clear()
            shard = self._shard_cache[group_id] = self.shards[partition_for(group_id, len(self.shards))]
        return shard

    def status_error(self, group_id: str) -> Err | None:
        status = self.shard_of(group_id).status
        if status is ShardStatus.ACTIVE:
            return None
        if status is ShardStatus.LOADING:
            return Err.COORDINATOR_LOAD_IN_PROGRESS
        return Err.NOT_COORDINATOR

    def group(self, group_id: str) -> Group | None:
        shard = self.shard_of(group_id)
        return shard.groups.get(group_id) if shard.status is ShardStatus.ACTIVE else None

    def park(self, token: object, group_id: str, member_id: str) -> None:
        self.parked[token] = (group_id, member_id)

    def unpark(self, token: object) -> None:
        self.parked.pop(token, None)
