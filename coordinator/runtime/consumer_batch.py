"""Batches of one consumer group's operations: many heartbeats in one durable write (Kafka's CoordinatorRuntime).

Rules (runtime/consumer_groups.py drives them):
- A batch is opened when a group's operation writes records (or leaves its target to the batch, ``pending``)
  while more operations of the group are queued behind it. Each operation of the batch computes from the state
  the previous one left: its records, and the history records of its epoch bump, are replayed into the shard
  AT ONCE (speculatively: ``add``), as Kafka's CoordinatorRuntime applies a write operation's records to its
  timeline structures before they are committed. Its response and deadlines are held (``parts``), even when it
  wrote nothing (it read uncommitted state): they go out only once the batch is durable.
- Before the first speculative replay the batch takes a snapshot of everything its replays and history calls
  can change: the group (``ConsumerGroup.copy``, with its O(1) counters), its rebalance history ring (slots and
  next seq) and its open history entry. A failed write (or a replay that raises: a bug) restores it
  (``restore``: Kafka's SnapshotRegistry.revertToSnapshot) and bumps ``ConsumerGroups.written`` for the group,
  so no lease granted on the rolled-back state can be renewed; each operation is then answered with the
  mapped error. Nothing of the batch was sent, so a failed write changes nothing a client can see. A shard that
  was unloaded meanwhile has new state objects: nothing to restore there.
- Only plain operations join a batch: ConsumerGroupHeartbeats and timer expiries of a consumer group with no
  classic group of that id, no upgrade, no downgrade. Anything else (classic-protocol members, migrations, a
  replaced classic group) runs alone after the batch settles (``LATER``).
- Deferred target (core heartbeat.py ``defer_target``): heartbeats of a batch leave the group ASSIGNING; at the
  flush the target is computed ONCE over the members as they are then (``assign_target``) and each pending
  heartbeat reconciles to it in order (``finish``), records replayed and appended like the others.
- Bounded: at most MAX_OPS operations or MAX_RECORDS records per batch; the rest of the queue waits for the
  next one (each batch computes at most one target).
- A follower or a restart replays the same records in the same order: the durable state equals the speculative
  one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from coordinator.core.consumer_group import ConsumerGroups, Deadline, HeartbeatOutcome
    from coordinator.core.consumer_group.group import ConsumerGroup
    from coordinator.core.rebalance_history import History

MAX_OPS = 2000
MAX_RECORDS = 50_000
LATER = "later"  # an operation's answer: it must run alone, after the open batch settles


@dataclass(slots=True)
class Part:
    outcome: HeartbeatOutcome | None  # its deadlines armed once durable (None: nothing to arm)
    settled: Callable[[Exception | None], None]  # answers it (the error on failure)

    @property
    def deadlines(self) -> list[Deadline]:
        return self.outcome.deadlines if self.outcome is not None else []


class Batch:
    __slots__ = ("group_id", "groups", "history", "items", "ops", "parts", "replay", "saved_group",
                 "saved_reconciling", "saved_ring", "shard")

    def __init__(self, shard: int, group_id: str, groups: ConsumerGroups, history: History,
                 replay: Callable[[bytes, bytes | None], None]) -> None:
        self.shard, self.group_id, self.groups, self.history, self.replay = shard, group_id, groups, history, replay
        group = groups.groups.get(group_id)
        self.saved_group: ConsumerGroup | None = group.copy() if group is not None else None
        ring = history.rings.get(group_id)
        self.saved_ring = (ring, dict(ring.slots), ring.next_seq) if ring is not None else None
        self.saved_reconciling = history.reconciling.get(group_id)
        self.items: list[tuple[bytes, bytes | None]] = []
        self.parts: list[Part] = []
        self.ops = 0

    def full(self) -> bool:
        return self.ops >= MAX_OPS or len(self.items) >= MAX_RECORDS

    def add(self, items: list[tuple[bytes, bytes | None]], part: Part) -> None:
        """One operation: its records replayed now (speculatively) and appended; its answer held."""
        self.ops += 1
        self.parts.append(part)
        self.append(items)

    def append(self, items: list[tuple[bytes, bytes | None]]) -> None:
        for key, value in items:
            self.replay(key, value)
        self.items.extend(items)

    def restore(self) -> None:
        """Back to the snapshot taken before the first speculative replay."""
        groups, group_id, history = self.groups, self.group_id, self.history
        if self.saved_group is None:
            groups.groups.pop(group_id, None)
        else:
            groups.groups[group_id] = self.saved_group
        if self.saved_group is None:
            groups.written.pop(group_id, None)
        else:
            groups.written.setdefault(group_id, 0)
            groups.touch(group_id)  # no lease granted on the rolled-back state holds (lease.py)
        if self.saved_ring is None:
            history.rings.pop(group_id, None)
        else:
            ring, slots, next_seq = self.saved_ring
            ring.slots, ring.next_seq = slots, next_seq
            history.rings[group_id] = ring
        if self.saved_reconciling is None:
            history.reconciling.pop(group_id, None)
        else:
            history.reconciling[group_id] = self.saved_reconciling
