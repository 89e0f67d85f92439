"""Serving KIP-848 consumer groups: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69), on trio.

Rules:
- The state is the offsets shards' (``Shard.consumer``, a ``consumer_group.ConsumerGroups`` per shard,
  rebuilt by replaying records 3-8 at load, the classic load path's, and after each durable write here).
  The core never changes itself: a heartbeat or timer gives a response, ONE batch of records and deadlines;
  the batch is staged through the offsets partition's group commit (the GroupService's ``_stage``: in
  cluster mode answered once replicated) and only once it is durable is it replayed, are the deadlines
  armed and is the response sent. A failed write answers Kafka's mapped error
  (appendGroupMetadataErrorToResponseError) and changes nothing. A request with no records answers at once.
  An outcome that bumps the group epoch carries its rebalance history entry (core/consumer_group/history.py):
  its records (``core.consumer_history``) follow the outcome's in the same batch and replay with them; a
  durable write that leaves the group reconciled writes that entry again with its end (``_end_rebalance``,
  a write of its own, answering nobody; once per rebalance).
- One write per group at a time: the operations of a group (heartbeats, timer expiries, classic members'
  requests) queue behind the write in flight, and each computes from the state its predecessor left. A lone
  operation computes, writes, and its records replay once durable (above). When the write settles and several
  operations are queued, the plain ones run now, one after another, into ONE batch (runtime/consumer_batch.py:
  each replayed speculatively as it runs, every answer and deadline held until the batch is durable, a failed
  batch reverted and every operation answered the mapped error; the heartbeats' target assignment computed
  once per batch); an operation that must run alone waits for the batch to settle.
- Describe reads the group as last committed while a batch of it is in flight (Kafka's read operations read
  the last committed offset).
- Routing as Kafka's GroupCoordinatorService: the request-level checks first (INVALID_REQUEST,
  UNSUPPORTED_ASSIGNOR), then the group's offsets shard: COORDINATOR_LOAD_IN_PROGRESS while it loads,
  NOT_COORDINATOR when this node does not lead it. Group ids are shared with classic groups: a heartbeat
  for a non-empty classic group upgrades it when it may (core/consumer_group/migration.py: the classic
  GroupMetadata tombstone first, then the conversion's and the heartbeat's records, one batch; once durable
  the classic core lets the group go, its parked requests answered REBALANCE_IN_PROGRESS), else answers
  GROUP_ID_NOT_FOUND "Group <id> is not a consumer group."; an empty classic group is replaced, its
  GroupMetadata tombstone (when it had a record) and its history written first in the same batch.
- Classic members inside a consumer group: GroupService hands JoinGroup/SyncGroup/Heartbeat/LeaveGroup here
  (``take_classic``) when the group id is a consumer group or has an operation queued here (a conversion may
  be in flight); they queue with the group's other operations, and one that finds no consumer group (or an
  empty one, for a JoinGroup) goes back to the classic core. A write whose outcome downgrades the group
  (``HeartbeatOutcome.downgrade``: the consumer tombstones and the classic GroupMetadata) hands the group to
  the classic core once durable (``classic_group_downgraded``), whose answers GroupService releases.
- Timers: session and rebalance deadlines (keyed kind/group/member, re-armed or cancelled by the core's
  ``Deadline``s) in one heap and one task (a deadline pushed back stays at its earlier place in the heap and
  is pushed again when that comes up: one entry per deadline, not per heartbeat); every member's deadlines are armed when its shard is served
  (``loaded_deadlines``) and dropped when it stops being served.
- Describe: per group, INVALID_GROUP_ID for an empty id, the shard's routing error, else the core's entry
  (GROUP_ID_NOT_FOUND for an unknown or classic group); topic names by id from the topic catalogue.
- Hot path (``hot_heartbeat``, consumer_heartbeat_lease.py): a steady heartbeat the core leased is answered
  again for the same request bytes without decoding or queueing it, while nothing it depends on changed and
  no operation of its group is queued or in flight; the generic path leases what it answers steadily.
- ACLs are checked before a request gets here (security/api_acls.py: READ on the group and DESCRIBE on
  each subscribed topic for 68, DESCRIBE per group for 69). A regex subscription is resolved by the core
  against the topic catalogue (every heartbeat gets it as the snapshot; records 16 are replayed like
  3-8); with an authorizer, the topics it resolves to are those the member's principal may DESCRIBE.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import trio

from coordinator.core.consumer_group import Deadline, HeartbeatOutcome, TopicInfo, migration
from coordinator.core.consumer_group import records as R
from coordinator.core.consumer_group.heartbeat import TargetJob, error_response
from coordinator.core.consumer_group.model import Reject
from coordinator.core.consumer_group.regex import allow_all
from coordinator.core.records import encode_group_key, encode_group_value
from coordinator.core.responses import error_response as classic_error_response
from coordinator.core.responses import join_response, leave_response
from coordinator.core.shard import ShardStatus
from coordinator.runtime.consumer_assignment import AssignmentWorker
from coordinator.runtime.consumer_batch import LATER, Batch, Part
from coordinator.runtime.consumer_heartbeat_lease import HotConsumerHeartbeats
from coordinator.runtime.groups import now_ms
from coordinator.runtime.topics import topic_id
from coordinator.storage.errors import StorageError
from protocol.acl_types import AclOperation, ResourceType
from protocol.codec import Request
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from coordinator.runtime.dispatch import Slot
    from coordinator.runtime.groups import GroupService
    from coordinator.runtime.services import ServerContext

log = logging.getLogger("groupcoord.consumer_groups")

_ROUTING_MESSAGES = {
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: "The coordinator is loading and hence can't process requests.",
    ErrorCode.NOT_COORDINATOR: "This is not the correct coordinator.",
}
# Kafka's CoordinatorRuntime / GroupMetadataManager.appendGroupMetadataErrorToResponseError
_APPEND_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.UNKNOWN_SERVER_ERROR,
}


class _ShardMoved(Exception):
    """The group's shard was unloaded or reloaded while its batch waited for a worker thread (NOT_COORDINATOR)."""


# runs one operation of a group: True: a write of its own is in flight (call _settled later); False: done or in
# the open batch; LATER: it must run alone once the open batch settles (consumer_batch.py)
Op = Callable[[], "bool | str"]


def append_error(err: Exception) -> int:
    code = int(getattr(err, "commit_error", ErrorCode.NOT_COORDINATOR))  # replication.ReplicationError's
    return int(_APPEND_ERRORS.get(code, code))  # type: ignore[call-overload]


class _Topics:
    """The topic catalogue as the core reads it: name -> TopicInfo (only ``in`` and ``[]``)."""

    def __init__(self, broker: ServerContext) -> None:
        self.broker = broker

    def _count(self, name: str) -> int | None:
        ts = self.broker.topic_service
        return ts.partition_count(name) if ts is not None else None

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and bool(self._count(name))

    def __iter__(self) -> Iterator[str]:
        ts = self.broker.topic_service
        return iter([n for n, count in ts.topics().items() if count] if ts is not None else [])

    def __getitem__(self, name: str) -> TopicInfo:
        count = self._count(name)
        if not count:
            raise KeyError(name)
        return TopicInfo(topic_id(name), count)


class _TopicNames:
    """Topic id -> name, as describe reads it (only ``in`` and ``[]``)."""

    def __init__(self, broker: ServerContext) -> None:
        self.broker = broker

    def get(self, tid: uuid.UUID) -> str | None:
        ts = self.broker.topic_service
        return ts.topic_ids.name_of(tid) if ts is not None else None

    def __contains__(self, tid: object) -> bool:
        return isinstance(tid, uuid.UUID) and self.get(tid) is not None

    def __getitem__(self, tid: uuid.UUID) -> str:
        name = self.get(tid)
        if name is None:
            raise KeyError(tid)
        return name


class ConsumerGroupService:
    def __init__(self, broker: ServerContext, groups: GroupService) -> None:
        self.broker = broker
        self.groups = groups
        self.core = groups.core
        self.topics = _Topics(broker)
        self.topic_names = _TopicNames(broker)
        self._queues: dict[str, deque[Op]] = {}  # group id -> operations waiting (present: one is running)
        self._draining: set[str] = set()  # groups whose queue is being run now (on this call stack)
        self._batches: dict[str, Batch] = {}  # group id -> its batch being filled (on this call stack)
        self._inflight: dict[str, Batch] = {}  # group id -> its batch being written (describe: the committed group)
        self._more: str | None = None  # the group whose running operation has more queued behind it
        self._deadlines: dict[tuple[str, str, str], Deadline] = {}
        self._heap: list[tuple[int, int, tuple[str, str, str]]] = []
        self._seq = itertools.count()
        self._timer_changed = trio.Event()
        self.hot = HotConsumerHeartbeats(self, now_ms)
        self.assignments = AssignmentWorker()  # big target assignments on a worker thread (consumer_assignment.py)
        self.hot_heartbeat = self.hot.hot  # (connection, payload) -> answer frame or None (broker.py registers it)
        broker.metrics.groups.consumer = self.core.consumer_groups_by_state
        assignment_seconds = broker.metrics.assignment_seconds

        def timed(fn: Callable[[], object]) -> object:  # each target assignment computation, into the histogram
            start = time.perf_counter()
            try:
                return fn()
            finally:
                assignment_seconds.observe(time.perf_counter() - start)

        for state in self.core.shard_states():
            state.consumer.timed = timed  # Shard.reset carries it over to a reloaded shard's groups
        groups.on_shard_served = self.shard_served
        groups.classic_router = self.take_classic
        groups.on_shard_unserved = self.shard_unserved

    # ---------------------------------------------------------------- routing
    def _routing_error(self, group_id: str) -> int | None:
        status = self.core.shard_status(self.core.shard_for(group_id))
        if status is ShardStatus.ACTIVE:
            return None
        if status is ShardStatus.LOADING:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NOT_COORDINATOR

    def catalogue(self) -> object:
        """The topic catalogue's token (changes whenever a topic is created, deleted or grown)."""
        ts = self.broker.topic_service
        return ts.catalogue_version if ts is not None else None

    # ---------------------------------------------------------------- ConsumerGroupHeartbeat
    def handle_heartbeat(self, request: Request, slot: Slot) -> None:
        body, version = request.body, request.version
        passed = self.hot.taken(slot)  # the request's bytes, when the hot path passed it on (to lease its answer)
        group_id = body["group_id"]
        shard = self.core.shard_for(group_id)
        refused = self.core.consumer_groups(shard).validate(body, version)
        if refused is not None:
            slot.complete(refused)
            return
        error = self._routing_error(group_id)
        if error is not None:
            slot.complete(error_response(error, _ROUTING_MESSAGES.get(error)))  # type: ignore[arg-type]
            return
        client_id, client_host = request.header.client_id or "", "/" + slot.conn.host
        may_describe = self._may_describe(slot)

        def op() -> bool:
            error = self._routing_error(group_id)
            if error is not None:
                slot.complete(error_response(error, _ROUTING_MESSAGES.get(error)))  # type: ignore[arg-type]
                return False
            groups = self.core.consumer_groups(shard)
            prefix: list[tuple[bytes, bytes | None]] = []
            replaced = False
            classic = self.core.classic_group_state(group_id)
            if classic is not None and group_id in self._batches:
                return LATER  # a classic group of that id: upgrades and replacements run alone
            upgraded = False
            if classic is not None and group_id not in groups.groups:
                empty, has_record = classic
                if not empty:
                    source = self.core.classic_group(group_id)
                    assert source is not None
                    outcome = migration.upgrade(groups, source, body, version, now_ms(), self.topics, client_id,
                                                client_host, may_describe)
                    if outcome.records:
                        upgraded = True
                        prefix.append((encode_group_key(group_id), None))
                        log.info("group %s: upgraded from classic to consumer (%d members)", group_id,
                                 len(source.members))
                else:
                    replaced = True
                    if has_record:
                        prefix.append((encode_group_key(group_id), None))
                    prefix.extend(self.core.history_tombstones(group_id))  # its rebalance history goes with it
            batching = classic is None and self._batching(group_id)
            # a big group's target is deferred even for a lone heartbeat: a batch computes it on a worker thread
            deferred = batching or (classic is None and self.assignments.running
                                    and groups.is_heavy(group_id, self.assignments.min_weight))
            if not upgraded:
                if classic is not None and not classic[0] and group_id not in groups.groups:
                    if group_id in self._batches:
                        return LATER
                    slot.complete(outcome.response)  # the upgrade was refused
                    return False
                now, catalogue = now_ms(), self.catalogue()
                outcome = groups.heartbeat(body, version, now, self.topics, client_id, client_host,
                                           may_describe, defer_target=deferred)
                if passed is not None and not prefix and not outcome.records and may_describe is allow_all:
                    self.hot.granted(passed, shard, body, outcome, now, self.topics, catalogue)

            def settled(err: Exception | None) -> None:
                if err is None:
                    if replaced:
                        self.core.classic_group_replaced(group_id)
                    if upgraded:
                        self.groups.apply(self.core.classic_group_upgraded(group_id, now_ms()))
                    slot.complete(outcome.response)
                else:
                    self.groups.write_failures.error("consumer group %s: write failed: %s", group_id, err)
                    slot.complete(error_response(append_error(err), None))  # type: ignore[arg-type]

            if batching or group_id in self._batches or (deferred and outcome.pending is not None):
                return self._batched(shard, group_id, prefix, outcome, settled)  # (a lone one: a batch of one)
            if not outcome.records:
                self._arm(outcome.deadlines)
                slot.complete(outcome.response)
                return False
            return self._write(shard, group_id, prefix, outcome, settled)

        self._run(group_id, op)

    # ---------------------------------------------------------------- classic members (migration.py)
    def take_classic(self, request: Request, slot: Slot) -> bool:
        """GroupService's hook for JoinGroup/SyncGroup/Heartbeat/LeaveGroup: True when this service serves it
        (the group is a consumer group here, or has operations queued here)."""
        group_id = request.body.get("group_id")
        if not group_id or self._routing_error(group_id) is not None:
            return False
        shard = self.core.shard_for(group_id)
        if group_id not in self.core.consumer_groups(shard).groups and group_id not in self._queues:
            return False
        self._run(group_id, lambda: self._classic_op(request, slot, shard))
        return True

    def _classic_op(self, request: Request, slot: Slot, shard: int) -> bool | str:
        api, version, body = request.api_key, request.version, request.body
        group_id = body["group_id"]
        if group_id in self._batches:
            return LATER  # classic members are never batched
        groups = self.core.consumer_groups(shard)
        group = groups.groups.get(group_id) if self._routing_error(group_id) is None else None
        if group is None or (api == 11 and not group.members):
            self.groups.handle(request, slot, routed=True)  # the classic core's (an empty one is deleted there)
            return False
        now = now_ms()
        if api == 12:
            error, deadlines = migration.classic_heartbeat(groups, group, body, now)
            self._arm(deadlines)
            slot.complete(classic_error_response(error))
            return False
        if api == 14:
            response, deadlines = migration.classic_sync(groups, group, body, now)
            self._arm(deadlines)
            slot.complete(response)
            return False
        if api == 11:
            outcome = migration.classic_join(groups, group, body, version, now, self.topics,
                                             request.header.client_id or "", "/" + slot.conn.host)
        else:
            outcome = migration.classic_leave(groups, group, body, version, self.topics, now)
        if not outcome.records:
            self._arm(outcome.deadlines)
            slot.complete(outcome.response)
            return False

        def settled(err: Exception | None) -> None:
            if err is None:
                slot.complete(outcome.response)
                return
            self.groups.write_failures.error("consumer group %s: write failed: %s", group_id, err)
            code = append_error(err)
            if api == 11:
                slot.complete(join_response(version, code, body.get("member_id") or ""))
            else:
                slot.complete(leave_response(version, code, []))

        return self._write(shard, group_id, [], outcome, settled)

    def _may_describe(self, slot: Slot) -> Callable[[str], bool]:
        """Whether the member's principal may DESCRIBE a topic (regex resolution); all without an authorizer."""
        authorization = getattr(self.broker, "authorization", None)  # the Broker's (authorizer.class.name set)
        if authorization is None:
            return allow_all
        authorizer, principal, host = authorization.authorizer, slot.conn.principal, slot.conn.host
        return lambda topic: bool(authorizer.authorize(principal, host, AclOperation.DESCRIBE,
                                                       ResourceType.TOPIC, topic))

    # ---------------------------------------------------------------- writes
    def _write(self, shard: int, group_id: str, prefix: list[tuple[bytes, bytes | None]], outcome: HeartbeatOutcome,
               settled: Callable[[Exception | None], None]) -> bool:
        """Stage the outcome's records as one batch; once durable replay them and arm its deadlines, then
        ``settled`` (also on failure, with the error: nothing changed) and the group's next operation."""
        items = prefix + [R.encode_record(r) for r in outcome.records]
        if outcome.rebalance is not None:  # the epoch bump's history entry (core/consumer_group/history.py)
            items += self.core.consumer_history(shard, group_id, outcome.rebalance)
        if outcome.downgrade is not None:
            items.append((encode_group_key(group_id), encode_group_value(outcome.downgrade.value)))

        def done(err: Exception | None) -> None:
            try:
                if err is None and self.core.shard_status(shard) is ShardStatus.ACTIVE:
                    for key, value in items:
                        self.core.replay(shard, key, value)
                    self._arm(outcome.deadlines)
                    self._end_rebalance(shard, group_id)
                    if outcome.downgrade is not None:
                        log.info("group %s: downgraded from consumer to classic", group_id)
                        self.groups.apply(self.core.classic_group_downgraded(outcome.downgrade, now_ms()))
                settled(err)
            except Exception:  # a bug: logged, never left to the group commit's callback loop
                log.exception("consumer group %s: applying a durable write failed", group_id)
            finally:
                self._settled(group_id)

        try:
            plog = self.groups.offsets_log(shard)
        except (StorageError, OSError) as e:
            done(e)
            return False
        self.groups._stage(plog, items, done)
        return True

    # ---------------------------------------------------------------- batches (consumer_batch.py)
    def _batching(self, group_id: str) -> bool:
        """Whether the running operation of the group goes into a batch: one is open, or more are queued."""
        return group_id in self._batches or self._more == group_id

    def _batched(self, shard: int, group_id: str, prefix: list[tuple[bytes, bytes | None]],
                 outcome: HeartbeatOutcome, settled: Callable[[Exception | None], None]) -> bool | str:
        """A plain operation's outcome into the group's batch (opened now if need be): its records replayed at
        once, its answer held. LATER for one that must run alone; an outcome with nothing to write or complete
        and no batch open is answered at once, as alone."""
        batch = self._batches.get(group_id)
        if prefix or outcome.downgrade is not None:
            if batch is not None:
                return LATER
            return self._write(shard, group_id, prefix, outcome, settled)
        if batch is None:
            if not outcome.records and outcome.pending is None:
                self._arm(outcome.deadlines)
                settled(None)
                return False
            batch = self._batches[group_id] = Batch(
                shard, group_id, self.core.consumer_groups(shard), self.core.shard_rebalance_history(shard),
                lambda key, value: self.core.replay(shard, key, value))
        items = [R.encode_record(r) for r in outcome.records]
        if outcome.rebalance is not None:
            items += self.core.consumer_history(shard, group_id, outcome.rebalance)
        try:
            batch.add(items, Part(outcome, settled))
        except Exception as e:  # a bug (a record the state refuses): nothing of the batch stays
            log.exception("consumer group %s: a batched operation could not be applied", group_id)
            self._abort(group_id, e)
        return False

    def _abort(self, group_id: str, err: Exception) -> None:
        self._abort_batch(self._batches.pop(group_id), err)

    def _abort_batch(self, batch: Batch, err: Exception) -> None:
        batch.restore()
        for part in batch.parts:
            try:
                part.settled(err)
            except Exception:
                log.exception("consumer group %s: answering a reverted operation failed", batch.group_id)

    def _flush(self, group_id: str) -> bool:
        """Write the group's open batch (its deferred target first); True while the write (or the target's
        computation on a worker thread, consumer_assignment.py) is in flight, False when it was answered at once
        (nothing to write, or it failed before it was staged)."""
        batch = self._batches.pop(group_id)
        job = None
        try:
            if any(p.outcome is not None and p.outcome.pending is not None for p in batch.parts):
                job = batch.groups.target_job(group_id)
            if job is not None and self.assignments.wants(job):
                self._inflight[group_id] = batch  # describe reads the committed group meanwhile
                self.assignments.submit(job, lambda targets, err: self._assigned(batch, job, targets, err))
                return True
            targets = None
            if job is not None:
                try:
                    targets = job.run()
                except Reject:  # the assignor failed: no target (the next heartbeat that computes it answers it)
                    targets = None
            return self._complete(batch, job, targets)
        except Exception as e:
            log.exception("consumer group %s: completing a batch failed", group_id)
            self._abort_batch(batch, e)
            return False

    def _assigned(self, batch: Batch, job: TargetJob, targets: object, err: Exception | None) -> None:
        """The batch's target, computed on a worker thread, is back (on the loop): complete and write the batch,
        then go on with the group's queue."""
        group_id = batch.group_id
        self._draining.add(group_id)  # a write settled at once must not drain from inside (see _settled)
        try:
            try:
                if self.core.consumer_groups(batch.shard) is not batch.groups or \
                        self.core.shard_status(batch.shard) is not ShardStatus.ACTIVE:
                    raise _ShardMoved(f"the offsets shard of group {group_id} moved while its target was computed")
                if err is not None and not isinstance(err, Reject):
                    raise err
                in_flight = self._complete(batch, job, targets if err is None else None)
            except Exception as e:
                if not isinstance(e, _ShardMoved):
                    log.exception("consumer group %s: completing a batch failed", group_id)
                self._inflight.pop(group_id, None)
                self._batch_done(batch, e)
                in_flight = False
        finally:
            self._draining.discard(group_id)
        if not in_flight:
            self._settled(group_id)

    def _complete(self, batch: Batch, job: TargetJob | None, targets: object) -> bool:
        """The batch's target records (when computed) and each deferred heartbeat's reconciliation, then the write
        (``_flush``'s answer)."""
        group_id, shard, groups = batch.group_id, batch.shard, batch.groups
        if job is not None:
            if targets is not None:
                batch.append([R.encode_record(r) for r in groups.target_records(job, targets)])  # type: ignore[arg-type]
            now = now_ms()
            for part in batch.parts:
                if part.outcome is not None and part.outcome.pending is not None:
                    batch.append([R.encode_record(r) for r in groups.finish(group_id, part.outcome, now)])
        if not batch.items:  # nothing written: every answer at once
            self._inflight.pop(group_id, None)
            self._batch_done(batch, None)
            return False
        self._inflight[group_id] = batch
        settled_now = []  # settled before _stage_batch returned (a write failing at once): the drain goes on

        def done(err: Exception | None) -> None:
            try:
                self._batch_done(batch, err)
            finally:
                self._inflight.pop(group_id, None)
                settled_now.append(True)
                self._settled(group_id)

        try:
            plog = self.groups.offsets_log(shard)
        except (StorageError, OSError) as e:
            self._inflight.pop(group_id, None)
            self._batch_done(batch, e)
            return False
        self._stage_batch(plog, batch, done)
        return not settled_now

    def _stage_batch(self, plog: object, batch: Batch, done: Callable[[Exception | None], None]) -> None:
        self.groups._stage(plog, batch.items, done)  # type: ignore[arg-type]

    def _batch_done(self, batch: Batch, err: Exception | None) -> None:
        """The batch settled: once durable its deadlines armed, the end of a rebalance it completed written, every
        operation answered in order; on failure the state restored first, every operation answered the error."""
        shard, group_id = batch.shard, batch.group_id
        active = self.core.shard_status(shard) is ShardStatus.ACTIVE
        same = self.core.consumer_groups(shard) is batch.groups  # else the shard was reloaded: nothing to revert
        if err is None:
            if active:
                for part in batch.parts:
                    self._arm(part.deadlines)
                self._end_rebalance(shard, group_id)
        elif same:
            batch.restore()
        for part in batch.parts:
            try:
                part.settled(err)
            except Exception:
                log.exception("consumer group %s: answering a batched operation failed", group_id)

    def _end_rebalance(self, shard: int, group_id: str) -> None:
        """After a durable write of the group: when it left the group reconciled, its open rebalance history entry
        gets its end (core/consumer_group/history.py), in a write of its own that answers nobody."""
        items = self.core.consumer_rebalance_end(shard, group_id, now_ms())
        if not items:
            return

        def done(err: Exception | None) -> None:
            if err is not None:
                self.groups.write_failures.error("consumer group %s: the end of its rebalance was not recorded: %s",
                                                 group_id, err)
            elif self.core.shard_status(shard) is ShardStatus.ACTIVE:
                for key, value in items:
                    self.core.replay(shard, key, value)

        try:
            self.groups._stage(self.groups.offsets_log(shard), items, done)
        except (StorageError, OSError) as e:
            done(e)

    def _run(self, group_id: str, op: Op) -> None:
        queue = self._queues.get(group_id)
        if queue is not None:
            queue.append(op)
            return
        self._queues[group_id] = deque()
        self._drain(group_id, op)

    def _drain(self, group_id: str, op: Op | None) -> None:
        queue = self._queues[group_id]
        self._draining.add(group_id)
        try:
            while True:
                if op is None:
                    batch = self._batches.get(group_id)
                    if batch is not None and (not queue or batch.full()):
                        if self._flush(group_id):
                            return
                        continue
                    if not queue:
                        del self._queues[group_id]
                        return
                    op = queue.popleft()
                self._more = group_id if queue else None
                try:
                    result = op()
                except Exception:
                    log.exception("consumer group %s: operation failed", group_id)
                    result = False
                finally:
                    self._more = None
                if result is LATER:  # it runs alone, after the open batch
                    queue.appendleft(op)
                    if group_id in self._batches and self._flush(group_id):
                        return
                    if group_id in self._batches:  # cannot be: LATER only while a batch is open
                        self._abort(group_id, RuntimeError("batch left open"))
                elif result:
                    return
                op = None
        finally:
            self._draining.discard(group_id)

    def _settled(self, group_id: str) -> None:
        # a write settled at once (it failed before it was staged) is settled inside this group's drain, which
        # goes on by itself: draining again from here would run the queue twice
        if group_id in self._queues and group_id not in self._draining:
            self._drain(group_id, None)

    # ---------------------------------------------------------------- ConsumerGroupDescribe
    def handle_describe(self, request: Request, slot: Slot) -> None:
        out = []
        for group_id in request.body.get("group_ids") or ():
            if not group_id:
                out.append({"group_id": group_id or "", "error_code": ErrorCode.INVALID_GROUP_ID,
                            "error_message": None})
                continue
            error = self._routing_error(group_id)
            if error is not None:
                out.append({"group_id": group_id, "error_code": error, "error_message": None})
                continue
            groups = self.core.consumer_groups(self.core.shard_for(group_id))
            inflight = self._inflight.get(group_id)
            if inflight is not None and inflight.groups is groups:  # the group as last committed
                committed, cfg = inflight.saved_group, groups.config
                entry = (committed.describe(self.topic_names, cfg.assignors[0], cfg.assignors)  # type: ignore[arg-type]
                         if committed is not None else
                         {"error_code": 69, "error_message": f"Group {group_id} not found.", "group_id": group_id})
            else:
                entry = groups.describe([group_id], self.topic_names)[0]  # type: ignore[arg-type]
            if entry["error_code"] and self.core.classic_group_state(group_id) is not None:
                entry["error_message"] = f"Group {group_id} is not a consumer group."
            out.append(entry)
        slot.complete({"throttle_time_ms": 0, "groups": out})

    # ---------------------------------------------------------------- timers
    def _arm(self, deadlines: list[Deadline]) -> None:
        earliest = self._heap[0][0] if self._heap else None
        for d in deadlines:
            if d.at_ms is None:
                self._deadlines.pop(d.key, None)
                continue
            old = self._deadlines.get(d.key)
            self._deadlines[d.key] = d
            if old is None or old.at_ms is None or d.at_ms < old.at_ms:
                heapq.heappush(self._heap, (d.at_ms, next(self._seq), d.key))
            # else: pushed back (a heartbeat re-arming a session): the earlier entry stays in the heap and, when it
            # comes up, is pushed again at the deadline's time (timer_loop): one heap entry per member, not one per
            # heartbeat
        if self._heap and (earliest is None or self._heap[0][0] < earliest):
            self._timer_changed.set()

    def shard_served(self, shard: int) -> None:
        """The shard was loaded (or a followed one now leads): every member's deadlines start now."""
        self._arm(self.core.consumer_groups(shard).loaded_deadlines(now_ms()))

    def shard_unserved(self, shard: int) -> None:
        self.hot.forget()
        for key in [k for k in self._deadlines if self.core.shard_for(k[1]) == shard]:
            del self._deadlines[key]

    async def timer_loop(self) -> None:
        while True:
            self._timer_changed = trio.Event()
            heap = self._heap
            while heap and self._deadlines.get(heap[0][2], None) is None:
                heapq.heappop(heap)
            if not heap:
                await self._timer_changed.wait()
                continue
            delay = (heap[0][0] - now_ms()) / 1000
            if delay > 0:
                with trio.move_on_after(delay):
                    await self._timer_changed.wait()
                continue
            at_ms, _, key = heapq.heappop(heap)
            d = self._deadlines.get(key)
            if d is None or d.at_ms != at_ms:  # cancelled, or re-armed: later ones wait in the heap again
                if d is not None and d.at_ms is not None and d.at_ms > at_ms:
                    heapq.heappush(heap, (d.at_ms, next(self._seq), key))
                continue
            del self._deadlines[key]
            self._run(d.group_id, lambda d=d: self._expire(d))

    def _expire(self, d: Deadline) -> bool | str:
        shard = self.core.shard_for(d.group_id)
        if self.core.shard_status(shard) is not ShardStatus.ACTIVE:
            return False
        if d.group_id in self._batches and self.core.classic_group_state(d.group_id) is not None:
            return LATER
        groups = self.core.consumer_groups(shard)
        if d.kind == "session":
            outcome = groups.expire_session(d.group_id, d.member_id, now_ms(), self.topics)
        else:
            outcome = groups.expire_rebalance(d.group_id, d.member_id, d.epoch, now_ms(), self.topics)
        if outcome.records:
            log.info("consumer group %s: member %s fenced (%s timeout)", d.group_id, d.member_id, d.kind)

        def settled(err: Exception | None) -> None:
            if err is not None and outcome.records:
                self.groups.write_failures.error("consumer group %s: fencing %s failed: %s", d.group_id,
                                                 d.member_id, err)
                self._arm([Deadline(d.kind, d.group_id, d.member_id, now_ms() + 1000, d.epoch)])  # try again

        if self._batching(d.group_id) and self.core.classic_group_state(d.group_id) is None:
            return self._batched(shard, d.group_id, [], outcome, settled)
        if not outcome.records:
            self._arm(outcome.deadlines)
            return False
        return self._write(shard, d.group_id, [], outcome, settled)
