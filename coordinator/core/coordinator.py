"""The group coordinator: N shards (offsets partitions), one request entry point, timers, writes.

Runtime contract (all calls take ``now_ms``; nothing here reads a clock or does I/O):
- ``handle(api_key, version, request, token, now_ms, client_id=, client_host=) -> Outcome`` for the group
  APIs in SUPPORTED_APIS. Requests are decoded dicts (Kafka JSON field names in snake_case). A request
  whose answer must wait (JoinGroup during a rebalance, a follower's SyncGroup) gets no completion yet;
  a later Outcome (of any call) completes it. Tokens must be hashable and unique per request.
- ``Outcome.records`` must be appended in order; then ``on_appended(write_id, now_ms)`` (replays them and
  finishes bookkeeping; returns an Outcome to apply in turn) and release ``Outcome.completions``; or, if they are not durable,
  ``on_append_failed(write_id, now_ms, error)`` whose Outcome replaces those completions. An Outcome
  without records has ``write_id`` None and its completions may be released at once.
- ``on_timers(now_ms)`` fires due timers; ``next_deadline()`` says when to call it next. ``handle`` also
  fires timers that are already due.
- Loading: ``begin_loading(shard)``, ``replay(shard, key, value)`` for every stored record in order (or
  ``replay_many``), ``finish_loading(shard, now_ms)``; ``unload(shard, now_ms)`` answers parked requests NOT_COORDINATOR.
- Following (cluster mode): ``begin_following(shard)`` empties a shard this node replicates but does not lead
  (FOLLOWING: NOT_COORDINATOR to requests, no timers), then ``replay``/``replay_many`` of its log as it grows;
  ``finish_loading`` turns it ACTIVE at once (sessions start then, as after a load). ``unload(shard, now_ms,
  following=True)`` is a lost leadership: parked requests answered NOT_COORDINATOR, timers cancelled, and the
  shard left FOLLOWING and empty, to be replayed from its log again (the leader's in-memory groups hold
  what no record says, such as a rebalance in progress, so only its log says what a follower holds).
- ``connection_closed(tokens)``: parked requests of those tokens will never be answered.
- Hot paths: ``heartbeat(...)`` and ``commit_offset(...)``/``commit_settled(...)`` serve the common shapes
  without dicts. ``lease(...)`` right after a heartbeat that re-armed a session returns a
  ``HeartbeatLease``; ``renew(lease, now_ms)`` repeats that heartbeat (same answer, session re-armed) while
  the epoch is unchanged. Every call that can change a heartbeat's answer (``handle``, ``on_timers``, writes
  settling, loading, unloading, closed connections) bumps the epoch; heartbeats and offset commits do not:
  a heartbeat only re-arms its own member's session, and a commit only re-arms sessions, stores offsets or
  creates an Empty group where none existed.
- KIP-848 consumer groups live in each shard (``Shard.consumer``; served by runtime/consumer_groups.py).
  Here only their meeting points with the classic APIs (``consumer_routing``): OffsetCommit/OffsetFetch of
  a consumer group are checked as Kafka 4.0's ConsumerGroup.validateOffsetCommit/validateOffsetFetch (an
  accepted commit is then stored as an anonymous one: the classic checks do not apply to it; a classic-protocol
  member's commit is checked by generation = its member epoch), and a JoinGroup naming an empty consumer group
  deletes it (its tombstones are written with the join's records) and goes on as a classic join. Classic
  members inside a consumer group (consumer_group/migration.py) are served by the runtime's consumer groups,
  not here: ``heartbeat`` hands theirs back (None); a JoinGroup reaching ``handle`` for a non-empty consumer
  group (no runtime to take it) answers INCONSISTENT_GROUP_PROTOCOL. Migration meets the classic groups in
  ``classic_group`` (what an upgrade converts), ``classic_group_upgraded`` and ``classic_group_downgraded``
  (after the conversion's write is durable).
- Transactions (txn_offset_commit.py, txn_offsets.py): TxnOffsetCommit's Outcome carries ``producer`` (one
  transactional batch, one shard, nothing else: ``handle`` fires no due timers into it, the next call or
  ``on_timers`` does); once durable its offsets are pending for the producer id. ``complete_txn(shard, pid,
  commit, now_ms)`` once a COMMIT/ABORT marker for the pid is durable in that offsets partition.
  Loading/following: ``replay_txn_batch(shard, pid, records)`` for a stored transactional batch and
  ``replay_marker(shard, pid, commit)`` for a control batch, in log order with ``replay``/``replay_many``.
  DeleteGroups drops a deleted group's pending transactional offsets.
- Rebalance history (rebalance_history.py): a group metadata tombstone written by DeleteGroups or the offsets
  expiry takes the group's history records with it (in the same write); DescribeGroups v5+ answers carry each
  group's history in our tagged field ``history`` (protocol/messages/describe_groups.py). KIP-848 consumer groups
  alike (consumer_group/history.py): their entries come with the outcome that bumps the epoch
  (``consumer_history`` gives its records), a consumer group deleted (DeleteGroups, or an empty one replaced by
  a classic JoinGroup) takes its history with it, and DescribeGroups' answer for a consumer group id (Dead, or
  GROUP_ID_NOT_FOUND "not a classic group" from v6, as Kafka 4) carries its history in the same tagged field.
- Offset history (offset_history.py): the offset tombstones a handler or the retention timer writes (DeleteGroups,
  OffsetDelete, expiry) take their partitions' history records with them (in the same write); DescribeGroups v5+
  answers carry each group's in our tagged field ``offset_history``.
  ``commit_offset`` takes the connection's client id and host for it.
- Group configs (group_configs.py): ``group_configs(group_id)`` reads a group's overrides (durable ones) and
  ``alter_group_configs(group_id, change, token, now_ms)`` writes the record ``change(latest overrides)`` makes
  (the token is completed with ``{"error_code", "error_message"}`` once durable, or with the write's error, or
  at once with NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS for a shard not ACTIVE, INVALID_CONFIG /
  INVALID_REQUEST for a change refused). DeleteGroups takes a deleted group's configs with it (the tombstone in
  the same write). ``offsets_expiring(now_ms, within_ms)`` counts, chunk by chunk, the offsets the retention
  checks of the next ``within_ms`` would remove (the gauge; read-only).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from .admin import handle_delete_groups, handle_describe_groups, handle_list_groups, handle_offset_delete
from .bulk_replay import replay_records
from .config import GroupConfig
from .consumer_group import ConsumerGroupConfig, ConsumerGroups
from .consumer_group import records as cg_records
from .consumer_group.group import ConsumerGroup
from .consumer_group.migration import Downgrade
from .consumer_group.model import Err as CgErr
from .consumer_group.model import GroupState as ConsumerGroupState
from .env import Env
from .errors import Err
from .group import DEAD, EMPTY, STABLE, Group
from .group_configs import InvalidGroupConfig, InvalidGroupConfigRequest
from .group_configs import encode_key as encode_configs_key
from .group_configs import encode_value as encode_configs_value
from .group_configs import forget as forget_configs
from .join import handle_join
from .member import DROPPED
from .membership import handle_heartbeat, handle_leave, handle_sync, heartbeat
from .offset_history import OffsetHistory, forget_tombstoned
from .offset_history import attach as attach_offset_history
from .offset_store import OffsetStore
from .offsets import (
    PendingCommit,
    commit_one,
    commit_settled,
    count_expiring,
    expire_offsets,
    handle_offset_commit,
    handle_offset_fetch,
)
from .outcome import Effects, Outcome, Record
from .rebalance import (
    fence_parked,
    member_key,
    on_join_timer,
    on_member_timer,
    on_sync_timer,
    prepare_rebalance,
    schedule_session,
)
from .rebalance_history import History, Rebalance, append, close_reconciling, forget, tombstone_deleted, wire
from .records import OffsetCommitValue
from .responses import join_response, offset_commit_response
from .shard import Shard, ShardStatus, group_from_record
from .sharding import partition_for
from .txn_offset_commit import forget_deleted_groups, handle_txn_offset_commit
from .waits import Waiting, classic_waiting, consumer_waiting

_INVALID_CONFIG = 40  # Kafka's INVALID_CONFIG (only the group configs answer it)

# api key -> (name, lowest version, highest version) served by the core
SUPPORTED_APIS: dict[int, tuple[str, int, int]] = {
    8: ("OffsetCommit", 2, 9), 9: ("OffsetFetch", 1, 9), 11: ("JoinGroup", 0, 9), 12: ("Heartbeat", 0, 4),
    13: ("LeaveGroup", 0, 5), 14: ("SyncGroup", 0, 5), 15: ("DescribeGroups", 0, 6),
    16: ("ListGroups", 0, 5), 28: ("TxnOffsetCommit", 0, 4), 42: ("DeleteGroups", 0, 2), 47: ("OffsetDelete", 0, 0),
}

_HANDLERS = {
    8: handle_offset_commit, 9: handle_offset_fetch, 11: handle_join, 12: handle_heartbeat, 13: handle_leave,
    14: handle_sync, 15: handle_describe_groups, 16: handle_list_groups, 28: handle_txn_offset_commit,
    42: handle_delete_groups, 47: handle_offset_delete,
}


# ---------------------------------------------------------------- consumer groups meet the classic APIs
_ROUTED = frozenset((8, 9, 11))
_ACCEPTED = object()


def _consumer_group(env: Env, group_id: str | None) -> ConsumerGroup | None:
    if group_id is None:
        return None
    shard = env.shard_of(group_id)
    return shard.consumer.groups.get(group_id) if shard.status is ShardStatus.ACTIVE else None


def _check_commit(env: Env, group_id: str, version: int, epoch: int, member_id: str) -> object | None:
    """None: not a consumer group (the classic rules apply); _ACCEPTED; or the error of every partition.
    Kafka 4.0's ConsumerGroup.validateOffsetCommit (non-transactional): a negative epoch commits to a group
    without members (admin, manual assignment); else the member must exist (UNKNOWN_MEMBER_ID), commit with
    v9+ (UNSUPPORTED_VERSION) and carry an epoch it may still commit with (STALE_MEMBER_EPOCH otherwise): its
    current one or, KIP-1251's relaxed check, one since its previous epoch (previous <= epoch <= current). A
    commit sent while the heartbeat answer moving the member to its next epoch is on its way is not refused
    (Kafka 4.0-4.2 refused it: node-rdkafka#1146). The previous epoch stands for the partitions' assignment
    epochs (a member is moved on only once it has given up what it had to revoke), without them per partition."""
    group = _consumer_group(env, group_id)
    if group is None:
        return None
    if epoch < 0 and not group.members:
        return _ACCEPTED
    member = group.members.get(member_id)
    if member is None:
        return CgErr.UNKNOWN_MEMBER_ID
    if member.classic is not None:  # a classic-protocol member: checked by generation (migration.py)
        return Err.ILLEGAL_GENERATION if epoch != member.member_epoch else _ACCEPTED
    if version < 9:
        return CgErr.UNSUPPORTED_VERSION
    if not min(member.previous_member_epoch, member.member_epoch) <= epoch <= member.member_epoch:
        return CgErr.STALE_MEMBER_EPOCH
    return _ACCEPTED


def _check_fetch(env: Env, group_id: str, member_id: str | None, epoch: int) -> CgErr | None:
    """Kafka 4.0's ConsumerGroup.validateOffsetFetch: no member id and a negative epoch (admin, or a client
    that does not say) is accepted; else UNKNOWN_MEMBER_ID / STALE_MEMBER_EPOCH."""
    group = _consumer_group(env, group_id)
    if group is None or (member_id is None and epoch < 0):
        return None
    member = group.members.get(member_id or "")
    if member is None:
        return CgErr.UNKNOWN_MEMBER_ID
    if epoch != member.member_epoch:
        return CgErr.STALE_MEMBER_EPOCH
    return None


def _route(env: Env, fx: Effects, api_key: int, version: int, req: dict, token: object, client_id: str,
           client_host: str, handler: Callable) -> None:
    """OffsetCommit, OffsetFetch v9+ and JoinGroup when they name a consumer group (see the rules)."""
    if api_key == 8:
        group_id = req.get("group_id")
        if group_id and env.status_error(group_id) is None:
            epoch = req.get("generation_id_or_member_epoch", req.get("generation_id", -1))
            routed = _check_commit(env, group_id, version, -1 if epoch is None else epoch,
                                   req.get("member_id") or "")
            if routed is _ACCEPTED:
                req = {**req, "generation_id_or_member_epoch": -1, "generation_id": -1, "member_id": "",
                       "group_instance_id": None}
            elif routed is not None:
                fx.complete(token, offset_commit_response(
                    [(t["name"], [(p["partition_index"], int(routed)) for p in t["partitions"]])  # type: ignore
                     for t in req.get("topics") or []]))
                return
    elif api_key == 9 and version >= 9:
        refused: dict[int, dict] = {}
        kept = []
        for i, g in enumerate(req.get("groups") or ()):
            gid = g.get("group_id")
            error = (_check_fetch(env, gid, g.get("member_id"), g.get("member_epoch", -1))
                     if gid and env.status_error(gid) is None else None)
            if error is None:
                kept.append(g)
            else:
                refused[i] = {"group_id": gid, "topics": [], "error_code": int(error)}
        if refused:
            inner = Effects(fx.now_ms)
            handler(env, inner, version, {**req, "groups": kept}, token, client_id, client_host)
            answered = iter(inner.completions[0][1]["groups"]) if inner.completions else iter(())
            groups = [refused[i] if i in refused else next(answered) for i in range(len(refused) + len(kept))]
            fx.complete(token, {**(inner.completions[0][1] if inner.completions else {}), "groups": groups})
            return
    elif api_key == 11:
        group_id = req.get("group_id")
        group = _consumer_group(env, group_id) if group_id else None
        if group is not None:
            if group.members:  # Kafka 4.0 would take the member into the consumer group (migration)
                fx.complete(token, join_response(version, Err.INCONSISTENT_GROUP_PROTOCOL,
                                                 req.get("member_id") or ""))
                return
            shard = env.shard_of(group_id)
            first = len(fx.records)
            for record in shard.consumer.delete_records(group_id):  # Kafka deletes an empty consumer group
                fx.write(shard.shard_id, *cg_records.encode_record(record))
            tombstone_deleted([s.history for s in env.shards], fx, first)  # its rebalance history goes with it
    handler(env, fx, version, req, token, client_id, client_host)


def _attach_history(env: Env, fx: Effects, token: object) -> None:
    """Ours (DescribeGroups v5+, tagged): each described group's rebalance history, newest first."""
    response = next((r for t, r in fx.completions if t is token), None)
    for g in response["groups"] if response is not None else ():
        gid = g.get("group_id")
        if gid and env.status_error(gid) is None:
            history = wire(env.shard_of(gid).history, gid)
            if history:
                g["history"] = history


def _forget_deleted_configs(env: Env, fx: Effects, token: object) -> None:
    """DeleteGroups: the configs of every group it deleted go in the same write (a failed write answers those
    groups the error, as admin.handle_delete_groups does for the groups whose deletion wrote records)."""
    response = next((r for t, r in fx.completions if t is token), None)
    if response is None:
        return
    deleted = [r["group_id"] for r in response["results"] if r["error_code"] == 0 and r["group_id"] is not None]
    wrote = bool(fx.records)
    for gid in deleted:
        shard = env.shard_of(gid)
        for key in forget_configs(shard.configs, gid):
            fx.write(shard.shard_id, key, None)
    if fx.records and not wrote:  # only configs to remove: nothing else registered the failure's answer
        results = response["results"]

        def on_fail(fail_fx: Effects, error: int) -> None:
            fail_fx.complete(token, {"results": [{"group_id": r["group_id"], "error_code": error
                                                  if r["group_id"] in deleted else r["error_code"]} for r in results]})

        fx.on_fail(on_fail)


class SeededIds:
    """Deterministic UUID-4-shaped id generator (inject ``lambda: str(uuid.uuid4())`` in production)."""

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)

    def __call__(self) -> str:
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))


@dataclass(frozen=True, slots=True)
class GroupView:
    group_id: str
    shard_id: int
    state: str
    generation: int
    protocol_type: str | None
    protocol: str | None
    leader: str | None
    members: tuple[str, ...]
    pending_members: int
    last_rebalance_ms: int | None


@dataclass(slots=True)
class _PendingWrite:
    records: list[Record]
    completions: list[tuple[object, dict]]
    done: list
    fail: list
    producer: tuple[int, int] | None = None


@dataclass(slots=True)
class HeartbeatLease:
    """A heartbeat that re-armed ``key`` to now + ``session_ms`` and answered ``error``, repeatable by
    ``Coordinator.renew`` while the coordinator's epoch is still ``epoch``."""

    epoch: int
    key: tuple[str, str, str]
    session_ms: int
    error: int


def _let_go(env: Env, fx: Effects, group: Group, error: Err) -> None:
    """The classic core lets ``group`` go: its parked requests answered ``error``, its members' and its join and
    sync timers cancelled."""
    gid = group.group_id
    for member in group.members.values():
        fence_parked(env, fx, group, member, error)
        env.timers.cancel(member_key(gid, member.member_id))
    for member_id in group.pending_members:
        env.timers.cancel(member_key(gid, member_id))
    env.timers.cancel(("join", gid))
    env.timers.cancel(("sync", gid))


class Coordinator:
    def __init__(self, config: GroupConfig | None = None, new_id: Callable[[], str] | None = None, *,
                 consumer: ConsumerGroupConfig | None = None) -> None:
        cfg = config or GroupConfig()
        self.config = cfg
        self._env = Env(cfg, new_id or SeededIds(),
                        [Shard(i, consumer) for i in range(cfg.offsets_topic_num_partitions)])
        self._writes: dict[int, _PendingWrite] = {}
        self._next_write = 1
        self._epoch = 0  # bumped by every call that may change a heartbeat's answer (see renew)
        self._last_beat: tuple[int, str, str] | None = None  # (epoch, group, member) of the last ``heartbeat``

    # ------------------------------------------------------------ routing

    def shard_for(self, group_id: str) -> int:
        return partition_for(group_id, self.config.offsets_topic_num_partitions)

    def shard_status(self, shard_id: int) -> ShardStatus:
        return self._env.shards[shard_id].status

    def shard_states(self) -> Sequence[Shard]:
        """Every shard, by id (the list never changes; a shard changes status and contents, never identity): for
        a hot path that reads a shard's ``status`` and ``consumer`` without two calls (read them only)."""
        return self._env.shards

    def consumer_groups(self, shard_id: int) -> ConsumerGroups:
        """The shard's KIP-848 consumer groups (read them; change them only by appending and replaying)."""
        return self._env.shards[shard_id].consumer

    def shard_rebalance_history(self, shard_id: int) -> History:
        """The shard's rebalance histories (runtime/consumer_batch.py snapshots a group's ring to revert a batch)."""
        return self._env.shards[shard_id].history

    def classic_group_state(self, group_id: str) -> tuple[bool, bool] | None:
        """(empty, has a GroupMetadata record) of the group id's classic group on an ACTIVE shard, or None when
        there is none (a group that only holds committed offsets is an empty classic group)."""
        group = self._env.group(group_id)
        if group is None:
            return None
        return group.state is EMPTY, group.generation > 0 or group.protocol_type is not None

    def classic_group(self, group_id: str) -> Group | None:
        """The group id's classic group on an ACTIVE shard (read it; an upgrade converts it), or None."""
        return self._env.group(group_id)

    def classic_group_upgraded(self, group_id: str, now_ms: int) -> Outcome:
        """The classic group was converted to a consumer group (migration.py; its tombstone is durable): its parked
        JoinGroups and SyncGroups answer REBALANCE_IN_PROGRESS, its timers stop, the id keeps a bare offsets
        holder, an open rebalance of its history is dropped (its records stay)."""
        self._epoch += 1
        env, fx = self._env, Effects(now_ms)
        group = env.group(group_id)
        if group is not None:
            _let_go(env, fx, group, Err.REBALANCE_IN_PROGRESS)
            env.shard_of(group_id).history.open.pop(group_id, None)
            self.classic_group_replaced(group_id)
        return self._finish(fx)

    def classic_group_downgraded(self, downgrade: Downgrade, now_ms: int) -> Outcome:
        """The consumer group's tombstones and its classic GroupMetadata are durable (migration.py): the classic
        group holds its members (all protocols kept), their sessions start and a rebalance makes them rejoin."""
        self._epoch += 1
        env, fx = self._env, Effects(now_ms)
        group_id = downgrade.group_id
        shard = env.shard_of(group_id)
        if shard.status is not ShardStatus.ACTIVE:
            return self._finish(fx)
        group = group_from_record(group_id, downgrade.value)
        for member in group.members.values():
            protocols = downgrade.protocols.get(member.member_id)
            if protocols:
                group.update_protocols(member, list(protocols))
        shard.groups[group_id] = group
        for member in group.members.values():
            schedule_session(env, now_ms, group, member)
        prepare_rebalance(env, fx, group, "downgrade")
        return self._finish(fx)

    def classic_group_replaced(self, group_id: str) -> None:
        """A consumer group replaced the empty classic group (its tombstone is durable): the id keeps only a
        bare offsets holder, as after a load."""
        self._epoch += 1
        shard = self._env.shard_of(group_id)
        if shard.offsets.has_group(group_id):
            shard.groups[group_id] = Group(group_id)
        else:
            shard.groups.pop(group_id, None)

    # ------------------------------------------------------------ requests and timers

    def handle(self, api_key: int, version: int, request: dict, token: object, now_ms: int, *,
               client_id: str = "", client_host: str = "") -> Outcome:
        self._epoch += 1
        handler = _HANDLERS.get(api_key)
        if handler is None:
            raise ValueError(f"api key {api_key} is not served by the group coordinator")
        fx = Effects(now_ms)
        if api_key in _ROUTED:
            _route(self._env, fx, api_key, version, request, token, client_id, client_host, handler)
        else:
            handler(self._env, fx, version, request, token, client_id, client_host)
            if api_key == 42:
                forget_deleted_groups(self._env, request.get("groups_names") or ())
                tombstone_deleted([s.history for s in self._env.shards], fx)
                _forget_deleted_configs(self._env, fx, token)
            elif api_key == 15 and version >= 5:
                _attach_history(self._env, fx, token)
                if request.get("include_offset_history"):  # ours: only when asked (describe_groups.py)
                    attach_offset_history(fx.completions, token, self._offset_history_of)
            if api_key == 42 or api_key == 47:
                fx.records.extend(forget_tombstoned([s.offset_history for s in self._env.shards], fx.records))
        if fx.producer is None and self._may_be_due(now_ms):  # a transactional batch holds nothing else
            self._fire_due(fx)
        return self._finish(fx)

    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                  now_ms: int) -> int | None:
        """A Heartbeat's error code, without the request dict, token and Outcome of ``handle`` (the hot
        path). None when a timer is due: then ``handle`` must serve it, since it fires due timers too; None also
        for a consumer group (its classic members are served by the runtime's consumer groups)."""
        if self._may_be_due(now_ms):
            return None
        shard = self._env.shard_of(group_id)
        if group_id in shard.consumer.groups and shard.status is ShardStatus.ACTIVE:
            return None  # a consumer group's classic member (migration.py): served by the runtime's consumer groups
        self._last_beat = (self._epoch, group_id, member_id)
        return heartbeat(self._env, now_ms, group_id, generation, member_id, instance_id)

    def lease(self, group_id: str, member_id: str, error: int) -> HeartbeatLease | None:
        """Called right after ``heartbeat`` answered ``error`` to this member: a lease to repeat that
        heartbeat with ``renew``, or None when it re-armed no session (an error, or a shard still loading), or
        when that ``heartbeat`` was not the last call (an answer from ``handle`` is never leased: it may have
        fired timers after answering, which changes the next answer)."""
        if self._last_beat != (self._epoch, group_id, member_id):
            return None
        if error != Err.NONE and error != Err.REBALANCE_IN_PROGRESS:
            return None
        group = self._env.group(group_id)
        member = group.members.get(member_id) if group is not None else None
        if member is None:
            return None
        return HeartbeatLease(self._epoch, member_key(group_id, member_id), member.session_timeout_ms, int(error))

    def renew(self, lease: HeartbeatLease, now_ms: int) -> int | None:
        """The lease's heartbeat again: its session re-armed from ``now_ms`` and its answer, exactly what
        ``heartbeat`` would do, as long as only heartbeats and commits happened since the lease was granted, no
        timer is due and the session only moves later (so the timers' lower bound is unchanged: the caller
        need not re-arm its timer task). None otherwise: ask ``heartbeat``."""
        if lease.epoch != self._epoch or self._may_be_due(now_ms):
            return None
        # the session moves later, as every heartbeat's does: nothing queued changes (else: not renewed)
        if not self._env.timers.extend(lease.key, now_ms + lease.session_ms):
            return None
        return lease.error

    def commit_offset(self, now_ms: int, version: int, group_id: str | None, generation: int, member_id: str,
                      instance_id: str | None, topic: str, partition: int, offset: int, leader_epoch: int | None,
                      metadata: str | None, retention_ms: int | None, client_id: str = "",
                      client_host: str = "") -> Err | PendingCommit | None:
        """An OffsetCommit of one partition without the dicts, Effects and Outcome of ``handle`` (the hot
        path): the partition's error (nothing to write; answer now), or the record to append durably, then
        ``commit_settled``. None when a timer is due: then ``handle`` must serve it."""
        if self._may_be_due(now_ms):
            return None
        if group_id is not None:
            routed = _check_commit(self._env, group_id, version, generation, member_id)
            if routed is not None:
                if routed is not _ACCEPTED:
                    return routed  # type: ignore[return-value]
                generation, member_id, instance_id = -1, "", None  # stored as an anonymous commit
        return commit_one(self._env, now_ms, version, group_id, generation, member_id, instance_id, topic,
                          partition, offset, leader_epoch, metadata, retention_ms, client_id, client_host)

    def commit_settled(self, pending: PendingCommit, durable: bool) -> None:
        """``commit_offset``'s record is durable (the offset becomes visible) or failed (answer the
        runtime's error)."""
        commit_settled(self._env, pending, durable)

    def _may_be_due(self, now_ms: int) -> bool:
        """O(1): False means no timer is due; True may also be a stale entry waiting to be dropped."""
        bound = self._env.timers.lower_bound()
        return bound is not None and bound <= now_ms

    def deadline_lower_bound(self) -> int | None:
        """O(1): never later than ``next_deadline()``; None when no timer is queued."""
        return self._env.timers.lower_bound()

    def on_timers(self, now_ms: int) -> Outcome:
        self._epoch += 1
        fx = Effects(now_ms)
        self._fire_due(fx)
        return self._finish(fx)

    def next_deadline(self) -> int | None:
        return self._env.timers.next_deadline()

    def _fire_due(self, fx: Effects) -> None:
        env = self._env
        while (key := env.timers.pop_due(fx.now_ms)) is not None:
            kind = key[0]
            if kind == "retention":
                shard = env.shards[key[1]]
                if shard.status is ShardStatus.ACTIVE:
                    first = len(fx.records)
                    expire_offsets(env, fx, shard)
                    if len(fx.records) > first:
                        tombstone_deleted([s.history for s in env.shards], fx, first)
                        fx.records.extend(forget_tombstoned([s.offset_history for s in env.shards], fx.records,
                                                            first))
                    env.timers.schedule(key, fx.now_ms + max(env.cfg.offsets_retention_check_interval_ms, 1))
                continue
            group = env.group(key[1])
            if group is None:
                continue
            if kind == "member":
                on_member_timer(env, fx, group, key[2])
            elif kind == "join":
                on_join_timer(env, fx, group)
            elif kind == "sync":
                on_sync_timer(env, fx, group)

    def connection_closed(self, tokens: Iterable[object]) -> None:
        self._epoch += 1
        env = self._env
        for token in tokens:
            where = env.parked.pop(token, None)
            group = env.group(where[0]) if where else None
            member = group.members.get(where[1]) if group else None
            if member is None:
                continue
            if member.join is not None and member.join[0] == token:
                member.join = (DROPPED, member.join[1])
            if member.sync is not None and member.sync[0] == token:
                member.sync = (DROPPED, member.sync[1])

    # ------------------------------------------------------------ writes

    def _finish(self, fx: Effects) -> Outcome:
        if not fx.records:
            assert not fx.done_hooks and not fx.fail_hooks, "write hooks without records"
            return Outcome([], fx.completions, None)
        write_id = self._next_write
        self._next_write += 1
        producer = fx.producer
        assert producer is None or len({r[0] for r in fx.records}) == 1, "a transactional batch spans one shard"
        self._writes[write_id] = _PendingWrite(fx.records, fx.completions, fx.done_hooks, fx.fail_hooks, producer)
        return Outcome(fx.records, fx.completions, write_id, producer)

    def on_appended(self, write_id: int, now_ms: int = 0) -> Outcome:
        """The write is durable: replay it, run its done hooks; their answers come back as an Outcome
        (release the write's own completions first, then this one's)."""
        self._epoch += 1
        write = self._writes.pop(write_id)
        shards = self._env.shards
        if write.producer is not None:  # a TxnOffsetCommit: pending for its producer id until the marker
            pid = write.producer[0]
            for shard_id, key, value in write.records:
                shard = shards[shard_id]
                if shard.status is ShardStatus.ACTIVE:
                    shard.replay_txn(pid, key, value)
        else:
            for shard_id, key, value in write.records:
                shard = shards[shard_id]
                if shard.status is ShardStatus.ACTIVE:
                    shard.replay(key, value)
        fx = Effects(now_ms)
        for hook in write.done:
            hook(fx)
        return self._finish(fx)

    def on_append_failed(self, write_id: int, now_ms: int, error: int = Err.NOT_COORDINATOR) -> Outcome:
        self._epoch += 1
        write = self._writes.pop(write_id)
        fx = Effects(now_ms)
        for hook in write.fail:
            hook(fx, int(error))
        replaced = {id(token) for token, _ in fx.completions}
        for token, response in write.completions:
            if id(token) not in replaced:
                fx.complete(token, response)
        return self._finish(fx)

    def pending_writes(self) -> int:
        return len(self._writes)

    # ------------------------------------------------------------ loading

    def begin_loading(self, shard_id: int) -> None:
        self._begin(shard_id, ShardStatus.LOADING)

    def begin_following(self, shard_id: int) -> None:
        """Empty the shard and keep it FOLLOWING: the runtime replays its log into it from the start."""
        self._begin(shard_id, ShardStatus.FOLLOWING)

    def _begin(self, shard_id: int, status: ShardStatus) -> None:
        self._epoch += 1
        shard = self._env.shards[shard_id]
        if shard.status is ShardStatus.ACTIVE:
            raise ValueError(f"shard {shard_id} is active: unload it before loading")
        shard.reset(status)

    def replay(self, shard_id: int, key: bytes, value: bytes | None) -> None:
        # no epoch bump: replay changes group metadata only while the shard loads (and no lease names a group
        # of a loading shard: begin_loading bumped); offsets and new Empty groups change no heartbeat answer
        self._env.shards[shard_id].replay(key, value)

    def replay_many(self, shard_id: int, records: Iterable[tuple[bytes, bytes | None]],
                    skipped: Callable[[bytes, ValueError], None]) -> None:
        """``replay`` of each record in order (the load path: one call for many records); a record that
        cannot be decoded (ValueError) is reported to ``skipped`` and the rest still apply. Same result as
        ``replay`` one by one, in a faster loop (``bulk_replay``)."""
        replay_records(self._env.shards[shard_id], records, skipped)

    def replay_txn_batch(self, shard_id: int, producer_id: int, records: Iterable[tuple[bytes, bytes | None]],
                         skipped: Callable[[bytes, ValueError], None] | None = None) -> None:
        """A stored transactional batch of ``producer_id`` (loading or following): its offset commits become
        pending for that producer; a record that cannot be decoded goes to ``skipped`` (raised without it)."""
        shard = self._env.shards[shard_id]
        for key, value in records:
            try:
                shard.replay_txn(producer_id, key, value)
            except ValueError as e:
                if skipped is None:
                    raise
                skipped(key, e)

    def replay_marker(self, shard_id: int, producer_id: int, commit: bool) -> None:
        """A stored COMMIT/ABORT marker of ``producer_id`` (loading or following), in log order."""
        self._env.shards[shard_id].complete_txn(producer_id, commit)

    def complete_txn(self, shard_id: int, producer_id: int, commit: bool, now_ms: int) -> Outcome:
        """A COMMIT/ABORT marker of ``producer_id`` is durable in offsets partition ``shard_id``: COMMIT installs
        the producer's pending offsets there (each unless a later commit of that partition won), ABORT drops
        them; either way the producer id is forgotten in that shard. A shard not ACTIVE is left alone (its
        load or follower replay reads the marker from the log)."""
        self._epoch += 1
        shard = self._env.shards[shard_id]
        if shard.status is ShardStatus.ACTIVE:
            shard.complete_txn(producer_id, commit)
        return self._finish(Effects(now_ms))

    def pending_txn_producers(self, shard_id: int) -> set[int]:
        """The producer ids with pending transactional offsets in this shard (each awaits its marker)."""
        return self._env.shards[shard_id].txn.producers()

    def finish_loading(self, shard_id: int, now_ms: int) -> Outcome:
        self._epoch += 1
        env, fx = self._env, Effects(now_ms)
        shard = env.shards[shard_id]
        if shard.status is not ShardStatus.LOADING and shard.status is not ShardStatus.FOLLOWING:
            raise ValueError(f"shard {shard_id} is not loading or following")
        shard.finish_loading()
        for group in shard.groups.values():
            for member in group.members.values():
                schedule_session(env, fx.now_ms, group, member)
        env.timers.schedule(("retention", shard_id), now_ms + max(env.cfg.offsets_retention_check_interval_ms, 1))
        return self._finish(fx)

    def unload(self, shard_id: int, now_ms: int, *, following: bool = False) -> Outcome:
        """Stop serving the shard: parked requests answer NOT_COORDINATOR, its timers are cancelled, its
        groups go Dead; it is left empty, NOT_OWNED (or FOLLOWING: a follower that replays its log again)."""
        self._epoch += 1
        env, fx = self._env, Effects(now_ms)
        shard = env.shards[shard_id]
        for group in shard.groups.values():
            _let_go(env, fx, group, Err.NOT_COORDINATOR)
            group.transition(DEAD, now_ms)
        env.timers.cancel(("retention", shard_id))
        shard.reset(ShardStatus.FOLLOWING if following else ShardStatus.NOT_OWNED)
        return self._finish(fx)

    # ------------------------------------------------------------ introspection (read-only)

    def _all_groups(self):
        for shard in self._env.shards:
            if shard.status is ShardStatus.ACTIVE:
                yield from shard.groups.values()

    def groups(self) -> list[GroupView]:
        return [self._view(g) for g in self._all_groups()]

    def group(self, group_id: str) -> GroupView | None:
        group = self._env.group(group_id)
        return None if group is None else self._view(group)

    def _view(self, g) -> GroupView:
        return GroupView(g.group_id, self.shard_for(g.group_id), g.state.value, g.generation, g.protocol_type,
                         g.protocol_name, g.leader_id, tuple(g.members), len(g.pending_members),
                         g.last_rebalance_ms)

    def groups_by_state(self) -> dict[str, int]:
        """Classic groups by state (a KIP-848 group's offsets holder, a memberless classic group object, is not
        one: it counts in ``consumer_groups_by_state``)."""
        counts: dict[str, int] = {}
        for shard in self._env.shards:
            if shard.status is not ShardStatus.ACTIVE:
                continue
            consumer = shard.consumer.groups
            for g in shard.groups.values():
                if g.group_id not in consumer:
                    counts[g.state.value] = counts.get(g.state.value, 0) + 1
        return counts

    def consumer_groups_by_state(self) -> dict[str, int]:
        """KIP-848 consumer groups by state (Empty, Assigning, Reconciling, Stable; O(1) each)."""
        counts: dict[str, int] = {}
        for shard in self._env.shards:
            if shard.status is ShardStatus.ACTIVE:
                for g in shard.consumer.groups.values():
                    counts[g.state.value] = counts.get(g.state.value, 0) + 1
        return counts

    def member_counts(self) -> dict[str, int]:
        return {g.group_id: len(g.members) for g in self._all_groups()}

    def rebalances_by_reason(self) -> dict[str, int]:
        return dict(self._env.stats.rebalances)

    @property
    def last_rebalance_ms(self) -> int | None:
        return self._env.stats.last_rebalance_ms

    @property
    def rebalance_events(self) -> int:
        """Grows whenever a rebalance starts or finishes."""
        return self._env.stats.events

    def take_rebalance_durations(self) -> list[int]:
        """Durations (ms) of rebalances finished since the last call, oldest first."""
        pending = self._env.stats.unreported_durations_ms
        out = list(pending)
        pending.clear()
        return out

    @property
    def completed_rebalances(self) -> int:
        return self._env.stats.completed_rebalances

    @property
    def offsets_refused(self) -> int:
        """Partition commits refused by offsets.max.committed so far."""
        return self._env.stats.offsets_refused

    def offsets_held(self) -> int:
        """Committed offsets in memory, all shards (what offsets.max.committed bounds)."""
        return sum(len(s.offsets) for s in self._env.shards)

    def waiting_groups(self, only: Iterable[str] | None = None) -> list[Waiting]:
        """Every group this coordinator serves that waits for members in a rebalance (``waits``); with ``only``,
        just those of these groups (no walk over every group)."""
        out = []
        if only is not None:
            for group_id in only:
                shard = self._env.shard_of(group_id)
                if shard.status is not ShardStatus.ACTIVE:
                    continue
                g = shard.groups.get(group_id)
                w = classic_waiting(g) if g is not None else None
                cg = shard.consumer.groups.get(group_id)
                w = w or (consumer_waiting(cg) if cg is not None else None)
                if w is not None:
                    out.append(w)
            return out
        for shard in self._env.shards:
            if shard.status is not ShardStatus.ACTIVE:
                continue
            for g in shard.groups.values():
                if g.state is not EMPTY and (g.state is not STABLE or g.pending_sync):
                    w = classic_waiting(g)
                    if w is not None:
                        out.append(w)
            for cg in shard.consumer.groups.values():
                w = consumer_waiting(cg)
                if w is not None:
                    out.append(w)
        return out

    def loading(self) -> bool:
        """Whether an offsets partition is being loaded (or rebuilt) now."""
        return any(s.status is ShardStatus.LOADING for s in self._env.shards)

    def active_offset_stores(self) -> list[OffsetStore]:
        """The committed offsets of every offsets partition this coordinator serves now (the lag gauges)."""
        return [s.offsets for s in self._env.shards if s.status is ShardStatus.ACTIVE]

    def committed_offsets(self, group_id: str) -> dict[tuple[str, int], OffsetCommitValue]:
        shard = self._env.shard_of(group_id)
        return shard.offsets.group_dict(group_id) if shard.status is ShardStatus.ACTIVE else {}

    def history_tombstones(self, group_id: str) -> list[tuple[bytes, None]]:
        """(key, None) for each of the group's history records: to write with a group tombstone the core does not
        write itself (a consumer group replacing an empty classic group, runtime/consumer_groups.py)."""
        shard = self._env.shard_of(group_id)
        return [(key, None) for key in forget(shard.history, group_id)]

    def consumer_history(self, shard_id: int, group_id: str, entry: Rebalance) -> list[tuple[bytes, bytes | None]]:
        """The records of a consumer group's epoch-bump history entry (core/consumer_group/history.py), to write
        in the batch of the outcome that carries it (runtime/consumer_groups.py); none with group.history.size 0."""
        history = self._env.shards[shard_id].history
        size = self._env.cfg.group_history_size
        if size <= 0:
            return []
        overtaken = close_reconciling(history, group_id, entry.start_ms)  # the previous bump's, still open
        return overtaken + append(history, group_id, entry, size)

    def consumer_rebalance_end(self, shard_id: int, group_id: str, now_ms: int) -> list[tuple[bytes, bytes | None]]:
        """After a durable write of a consumer group (runtime/consumer_groups.py): the record ending its open
        history entry when the group is now Stable or Empty (consumer_group/history.py), else none. O(1)."""
        history = self._env.shards[shard_id].history
        if group_id not in history.reconciling or self._env.cfg.group_history_size <= 0:
            return []
        group = self.consumer_groups(shard_id).groups.get(group_id)
        if group is not None and group.state not in (ConsumerGroupState.STABLE, ConsumerGroupState.EMPTY):
            return []
        return close_reconciling(history, group_id, now_ms)

    def group_configs(self, group_id: str) -> dict[str, str] | Err:
        """The group's config overrides (durable ones), or the shard's status error (not ACTIVE here)."""
        error = self._env.status_error(group_id)
        return error if error is not None else self._env.shard_of(group_id).configs.of(group_id)

    def alter_group_configs(self, group_id: str, change: Callable[[dict[str, str]], Mapping[str, str]],
                            token: object, now_ms: int) -> Outcome:
        """Write the group's new overrides, ``change`` of its latest ones (see the module rules)."""
        self._epoch += 1
        fx = Effects(now_ms)
        error = self._env.status_error(group_id)
        if error is not None:
            fx.complete(token, {"error_code": int(error), "error_message": None})
            return self._finish(fx)
        configs = self._env.shard_of(group_id).configs
        try:
            new = dict(change(configs.latest(group_id)))
        except InvalidGroupConfig as e:
            fx.complete(token, {"error_code": _INVALID_CONFIG, "error_message": str(e)})
            return self._finish(fx)
        except InvalidGroupConfigRequest as e:
            fx.complete(token, {"error_code": int(Err.INVALID_REQUEST), "error_message": str(e)})
            return self._finish(fx)
        key, value = encode_configs_key(group_id), encode_configs_value(new)  # encoded before anything changes
        ticket = configs.stage(group_id, new)
        fx.write(self.shard_for(group_id), key, value)
        fx.complete(token, {"error_code": 0, "error_message": None})

        def on_fail(fail_fx: Effects, error: int) -> None:
            configs.unstage(group_id, ticket)
            fail_fx.complete(token, {"error_code": error, "error_message": None})

        fx.on_done(lambda _fx: configs.unstage(group_id, ticket))
        fx.on_fail(on_fail)
        return self._finish(fx)

    def offsets_expiring(self, now_ms: int, within_ms: int, chunk: int = 2000) -> Iterator[int]:
        """Offsets the retention checks of the next ``within_ms`` would remove, counted ``chunk`` groups at a
        time (each count yielded: the caller may yield to others between chunks; groups that went meanwhile
        are skipped)."""
        env = self._env
        for shard in env.shards:
            if shard.status is not ShardStatus.ACTIVE:
                continue
            ids = list(shard.groups)
            for i in range(0, len(ids), chunk):
                if shard.status is not ShardStatus.ACTIVE:
                    break
                yield count_expiring(env, shard, ids[i:i + chunk], now_ms, within_ms)

    def _offset_history_of(self, group_id: str) -> OffsetHistory | None:
        shard = self._env.shard_of(group_id)
        return shard.offset_history if shard.status is ShardStatus.ACTIVE else None

    def rebalance_history(self, group_id: str) -> list[Rebalance]:
        """The group's recorded rebalances, newest first (empty when its shard is not ACTIVE)."""
        shard = self._env.shard_of(group_id)
        return shard.history.entries(group_id) if shard.status is ShardStatus.ACTIVE else []

    def stable_groups(self) -> int:
        return sum(1 for g in self._all_groups() if g.state is STABLE)
