"""Serving transactions on one node: the transaction coordinator core, ``__transaction_state``, markers, timers.

Rules:
- The core (``coordinator/core/transactions``) decides; this module does its IO. Every record the core asks
  for is appended to ``__transaction_state-<partition>`` through group commit (journaled, one fsync per
  round with the offsets commits) and only then reported back (``write_done``): a reply that depends on a
  write is released by the core's answer to that report, never before the fsync.
- Markers: after PrepareCommit/PrepareAbort is durable the core hands over a ``MarkerTask``. Each of its
  partitions gets one COMMIT/ABORT control batch: ``__consumer_offsets-N`` through the group service
  (``GroupService.write_marker``: the pending transactional offsets become committed or go), user partitions
  through the topic service (``TopicService.write_marker``: producer state, LSO, aborted index). Once every
  one is durable the core writes CompleteCommit/CompleteAbort (``markers_done``). A partition whose topic is
  gone counts as done (Kafka skips deleted topics); INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED
  means a newer decision superseded this one (done); any other failure (a storage error) is retried every
  ``MARKER_RETRY_S`` until it succeeds, as Kafka's marker channel retries.
- Startup: every partition is loaded (records replayed, last value wins) before ``loaded`` is set; until then
  the core answers COORDINATOR_LOAD_IN_PROGRESS. ``finish_loading`` re-drives the markers of every
  transaction that was prepared but not completed; ongoing ones keep their start time and time out.
- Producer ids come from ``storage.producer_ids.ProducerIds`` (durable blocks): idempotent producers
  (InitProducerId without a transactional id) and transactional ones share it.
- Timers: one task sleeps until the core's next deadline (timeouts abort, ids expire) and ticks it.
- Waiting out a transition (ours; Kafka answers at once): a request the core answers CONCURRENT_TRANSACTIONS
  while its transactional id has a state write or its markers under way (the next transaction's first
  AddPartitionsToTxn right after EndTxn, typically) is held and handed to the core again once they are done,
  at most ``PARK_S`` (then the answer goes out as it is) and ``PARK_MAX`` per id. The client would retry after
  a backoff (librdkafka ~20 ms, Java 20 ms); the answer is the one a retry at that moment would get.
- The coordinator epoch is 0 on a single node; in cluster mode it is the ``__transaction_state``
  partition's leader epoch, as in Kafka.
- Cluster mode (``use_cluster``): ``__transaction_state`` is a replicated internal topic (created on the
  first FindCoordinator for a transactional id, ``transaction.state.log.replication.factor``); each node
  coordinates the partitions it leads (``leadership_loop``: a newly led partition is loaded from its whole
  local log at its new epoch, prepared transactions get their markers re-driven; a lost one is unloaded, its
  waiting requests answer NOT_COORDINATOR and its markers in flight are left to the new coordinator). State
  writes are answered once replicated (``Replication.staging``). A marker for a partition led here is
  written locally and waits for its replication; for a partition led elsewhere it is one WriteTxnMarkers
  call to that leader on the inter-broker listener (its TLS and login), retried until it is answered.
  Producer ids come from ZooKeeper blocks (``cluster_producer_ids``). Produce verification (KIP-890) is done
  only for transactional ids coordinated on the partition's own node; elsewhere batches are not verified,
  as with Kafka's ``transaction.partition.verification.enable=false``.
- Requests: AddPartitionsToTxn checks every partition first (internal topic -> TOPIC_AUTHORIZATION_FAILED, as
  Kafka's filter never authorizes internal topics; missing -> UNKNOWN_TOPIC_OR_PARTITION) and if one fails
  the others answer OPERATION_NOT_ATTEMPTED without reaching the core, which writes every other answer (with
  the error codes each request version understands).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from coordinator.core.sharding import partition_for
from coordinator.core.transactions import PidAllocationError, TxnConfig, TxnCoordinator
from coordinator.core.transactions.state import PREPARING
from coordinator.runtime.internal_topics import OFFSETS_TOPIC
from coordinator.runtime.offsets_reader import read_offsets_from
from coordinator.storage.errors import StorageError
from coordinator.storage.log import LogConfig, PartitionLog
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from coordinator.runtime.dispatch import Slot
    from coordinator.runtime.group_commit import GroupCommit
    from coordinator.runtime.groups import GroupService
    from coordinator.runtime.services import ServerContext
    from coordinator.runtime.topics import TopicService
    from coordinator.storage.manager import LogManager
    from protocol.codec import Request

log = logging.getLogger("groupcoord.transactions")

TXN_TOPIC = "__transaction_state"
TXN_LOG_CONFIG = LogConfig(segment_bytes=100 * 1024 * 1024, compact=True, retention_ms=None, retention_bytes=None,
                           verify_crc_on_append=False)
MARKER_RETRY_S = 1.0
PARK_S = 0.5  # longest a request waits out its transactional id's write or markers before CONCURRENT_TRANSACTIONS
PARK_MAX = 8  # requests held per transactional id
REMOTE_TIMEOUT_S = 10.0  # cluster mode: one WriteTxnMarkers call to a partition's leader
_DONE_MARKER_ERRORS = frozenset((ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_PRODUCER_EPOCH,
                                 ErrorCode.TRANSACTION_COORDINATOR_FENCED))


def now_ms() -> int:
    return int(time.time() * 1000)


def txn_config(cfg: Any) -> TxnConfig:
    return TxnConfig(max_timeout_ms=cfg["transaction.max.timeout.ms"],
                     abort_timed_out_interval_ms=cfg["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
                     id_expiration_ms=cfg["transactional.id.expiration.ms"],
                     remove_expired_interval_ms=cfg["transaction.remove.expired.transaction.cleanup.interval.ms"])


def _concurrent(body: dict[str, Any]) -> bool:
    """Whether a core answer is CONCURRENT_TRANSACTIONS (AddPartitionsToTxn: for its partitions)."""
    if body.get("error_code") == ErrorCode.CONCURRENT_TRANSACTIONS:
        return True
    topics = body.get("results_by_topic_v3_and_below")
    return bool(topics) and all(p["partition_error_code"] == ErrorCode.CONCURRENT_TRANSACTIONS
                                for t in topics for p in t["results_by_partition"])


class _Request:
    """A client request handed to the core: its slot, and how to hand it over again (``_park``)."""

    __slots__ = ("deadline", "retry", "slot", "txn_id")

    def __init__(self, slot: Slot, txn_id: str, deadline: float) -> None:
        self.slot = slot
        self.txn_id = txn_id
        self.deadline = deadline
        self.retry: Callable[[], Any] = lambda: None


class _Marking:
    """One MarkerTask in flight: the partitions still without their durable marker."""

    __slots__ = ("left", "task")

    def __init__(self, task: Any) -> None:
        self.task = task
        self.left: set[tuple[str, int]] = set(task.partitions)


class TransactionService:
    def __init__(self, broker: ServerContext, logs: LogManager, commit: GroupCommit, groups: GroupService,
                 topics: TopicService, allocate_producer_id: Callable[[], int]) -> None:
        self.broker = broker
        self.config = broker.config
        self.logs = logs
        self.commit = commit
        self.groups = groups
        self.topics = topics
        self.allocate_producer_id = allocate_producer_id
        self.partitions = self.config["transaction.state.log.num.partitions"]
        self.core = TxnCoordinator(txn_config(self.config), num_partitions=self.partitions,
                                   allocate_producer_id=self._allocate)
        self._logs: dict[int, PartitionLog] = {}
        self._timer_changed = trio.Event()
        self._armed: int | None = None
        self._marking: dict[str, _Marking] = {}  # transactional id -> its markers in flight
        self._parked: dict[str, list[_Request]] = {}  # transactional id -> requests waiting for it (``_park``)
        self.loaded = trio.Event()
        self.nursery: trio.Nursery | None = None
        self._stage = commit.stage  # cluster mode: answered once replicated (``use_cluster``)
        self.member: Any = None  # cluster mode: the ClusterMember (views, leaders)
        self.replication: Any = None
        self._wanted: dict[int, int] = {}  # cluster mode: partition -> leader epoch, the ones this node leads
        self._serving: dict[int, int] = {}  # partition -> the coordinator epoch it is loaded with
        self._leadership_changed = trio.Event()
        self.commits = self.aborts = 0  # transactions decided (metrics)

    def _allocate(self) -> int:
        """A producer id for the core; a failed reservation answers COORDINATOR_NOT_AVAILABLE."""
        try:
            return self.allocate_producer_id()
        except StorageError as e:
            if getattr(e, "retriable_load", False):  # cluster mode: the first block is not claimed yet
                raise PidAllocationError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS) from None
            log.error("%s", e)
            raise PidAllocationError(ErrorCode.COORDINATOR_NOT_AVAILABLE) from None

    # ---------------------------------------------------------------- storage
    def txn_log(self, partition: int) -> PartitionLog:
        plog = self._logs.get(partition)
        if plog is None:
            plog = self.logs.get(TXN_TOPIC, partition)
            if plog is None:
                plog = self.logs.create(TXN_TOPIC, partition, TXN_LOG_CONFIG)
            self._logs[partition] = plog
        return plog

    async def load_all(self) -> None:
        """Replay every partition (records in a worker thread), then serve it."""
        t0 = time.perf_counter()
        total = 0
        for p in range(self.partitions):
            self.core.begin_loading(p, 0)
        for p in range(self.partitions):
            problems: list[str] = []
            try:
                plog = self.txn_log(p)
                records, _ = await trio.to_thread.run_sync(read_offsets_from, plog, plog.log_start_offset, problems)
            except (StorageError, OSError) as e:
                log.error("transaction state partition %d could not be read: %s; it stays unavailable", p, e)
                continue
            for problem in problems:
                log.error("transaction state partition %d: %s", p, problem)
            for key, value in records:
                try:
                    self.core.replay(p, key, value)
                except ValueError as e:
                    log.error("transaction state partition %d: skipping undecodable record (key %s): %s",
                              p, key[:64].hex(), e)
            total += len(records)
            self.apply(self.core.finish_loading(p, now_ms()))
            await trio.lowlevel.checkpoint()
        log.info("loaded %d transaction state partitions (%d records) in %.2f s", self.partitions, total,
                 time.perf_counter() - t0)
        self.loaded.set()

    # ---------------------------------------------------------------- outcomes
    def apply(self, outcome: Any) -> None:
        bound = self.core.next_deadline()
        if bound is not None and (self._armed is None or bound < self._armed):
            self._timer_changed.set()
        for token, body in outcome.replies:
            self._reply(token, body)
        for write in outcome.writes:
            self._write(write)
        for task in outcome.markers:
            self._send_markers(task)
        if self._parked:
            self._wake_parked()

    def _reply(self, token: Any, body: dict[str, Any]) -> None:
        if isinstance(token, _Request):
            if _concurrent(body) and self._park(token):
                return
            token = token.slot
        token.complete({"throttle_time_ms": 0, **body})  # the core wrote the version's error codes (errors.py)

    # ---------------------------------------------------------------- waiting out a transition
    def _busy(self, txn_id: str) -> bool:
        view = self.core.view(txn_id)
        return view is not None and (view.pending is not None or view.state in PREPARING)

    def _park(self, req: _Request) -> bool:
        """Hold a request the core answered CONCURRENT_TRANSACTIONS while its transactional id has a write or
        its markers under way: it is handled again once they are done, or at its deadline (then answered)."""
        parked = self._parked.setdefault(req.txn_id, [])
        if self.nursery is None or trio.current_time() >= req.deadline or len(parked) >= PARK_MAX \
                or not self._busy(req.txn_id):
            if not parked:
                del self._parked[req.txn_id]
            return False
        parked.append(req)
        self.nursery.start_soon(self._park_deadline, req)
        return True

    async def _park_deadline(self, req: _Request) -> None:
        await trio.sleep_until(req.deadline)
        parked = self._parked.get(req.txn_id)
        if parked is not None and req in parked:
            parked.remove(req)
            if not parked:
                del self._parked[req.txn_id]
            self.apply(req.retry())

    def _wake_parked(self) -> None:
        for txn_id in [t for t in self._parked if not self._busy(t)]:
            for req in self._parked.pop(txn_id):
                if not req.slot.done:
                    self.apply(req.retry())

    def _write(self, write: Any) -> None:
        def done(err: Exception | None) -> None:
            if err is not None:
                log.error("transaction state write to partition %d failed: %s", write.partition, err)
            code = None if err is None else getattr(err, "commit_error", ErrorCode.NOT_COORDINATOR)
            self.apply(self.core.write_done(write.write_id, code, now_ms()))

        try:
            plog = self.txn_log(write.partition)
        except (StorageError, OSError) as e:
            done(e)
            return
        self._stage(plog, write.records, done)

    # ---------------------------------------------------------------- markers
    def _send_markers(self, task: Any) -> None:
        marking = _Marking(task)
        self._marking[task.txn_id] = marking
        if task.commit:
            self.commits += 1
        else:
            self.aborts += 1
        if not marking.left:
            self._markers_finished(marking)
            return
        for topic, partition in sorted(marking.left):
            self._send_marker(marking, topic, partition)

    def _send_marker(self, marking: _Marking, topic: str, partition: int) -> None:
        task = marking.task

        def done(error: int | Exception | None) -> None:
            if self._marking.get(task.txn_id) is not marking:
                return  # superseded (the partition was unloaded and loaded again)
            if isinstance(error, Exception):  # a storage error, or the offsets partition is not served (yet)
                error = getattr(error, "error_code", getattr(error, "commit_error", ErrorCode.KAFKA_STORAGE_ERROR))
            if not error or error in _DONE_MARKER_ERRORS:  # None or 0 (NONE, a remote leader's answer)
                marking.left.discard((topic, partition))
                if not marking.left:
                    self._markers_finished(marking)
                return
            log.warning("marker for transactional id %r on %s-%d failed (%s); retrying in %.0f s", task.txn_id,
                        topic, partition, ErrorCode(error).name if error in ErrorCode._value2member_map_ else error,
                        MARKER_RETRY_S)
            if self.nursery is not None:
                self.nursery.start_soon(self._retry_marker, marking, topic, partition)

        leader = self.leader_of(topic, partition)
        if leader is None and not self._topic_gone(topic):
            done(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        elif leader is None:
            done(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)  # deleted: Kafka skips it
        elif leader != self.config["node.id"]:
            assert self.nursery is not None
            self.nursery.start_soon(self._remote_marker, leader, task, topic, partition, done)
        elif topic == OFFSETS_TOPIC:
            self.groups.write_marker(partition, task.producer_id, task.producer_epoch, task.commit,
                                     task.coordinator_epoch, done)
        else:
            self.topics.txn.write_marker(topic, partition, task.producer_id, task.producer_epoch, task.commit,
                                         task.coordinator_epoch, done)

    def _topic_gone(self, topic: str) -> bool:
        return self.member is not None and topic not in self.member.view.assignments

    async def _retry_marker(self, marking: _Marking, topic: str, partition: int) -> None:
        await trio.sleep(MARKER_RETRY_S)
        if self._marking.get(marking.task.txn_id) is marking:
            self._send_marker(marking, topic, partition)

    def _markers_finished(self, marking: _Marking) -> None:
        task = marking.task
        del self._marking[task.txn_id]
        self.apply(self.core.markers_done(task.txn_id, task.producer_id, task.producer_epoch, now_ms()))

    # ---------------------------------------------------------------- timers
    async def timer_loop(self) -> None:
        while True:
            self._timer_changed = trio.Event()
            deadline = self._armed = self.core.next_deadline()
            if deadline is None:
                await self._timer_changed.wait()
                continue
            delay = (deadline - now_ms()) / 1000
            if delay > 0:
                with trio.move_on_after(delay):
                    await self._timer_changed.wait()
                    continue
            self.apply(self.core.tick(now_ms()))

    async def run(self, nursery: trio.Nursery) -> None:
        """Single node: load once the offsets partitions are loaded (their load goes first, and the markers that
        loading re-drives into them need them served), then keep the timers. Cluster mode: serve the
        partitions this node leads as leadership moves (``leadership_loop``)."""
        self.nursery = nursery
        nursery.start_soon(self.timer_loop)
        if self.member is not None:
            await self.leadership_loop()
            return
        await self.groups.loaded.wait()
        await self.load_all()

    # ---------------------------------------------------------------- cluster mode
    def use_cluster(self, member: Any, replication: Any, timeout_s: float) -> None:
        """Writes wait for the in-sync replicas; the partitions served follow the leaderships; markers go to
        each partition's leader."""
        self.member = member
        self.replication = replication
        self._stage = replication.staging(self.commit.stage, timeout_s)
        member.on_txn_leadership = self.follow_leadership

    def follow_leadership(self, led: dict[int, int]) -> None:
        if led != self._wanted:
            self._wanted = dict(led)
            self._leadership_changed.set()

    async def leadership_loop(self) -> None:
        while True:
            await self._leadership_changed.wait()
            self._leadership_changed = trio.Event()
            await self._follow_once()

    async def _follow_once(self) -> None:
        """Unload what this node no longer leads (or leads at a newer epoch), then load what it leads: its
        whole local log is the truth (a follower's appends included), read to the log end."""
        for p, epoch in sorted(self._serving.items()):
            if self._wanted.get(p) != epoch:
                self._unload(p)
        for p, epoch in sorted(self._wanted.items()):
            if p in self._serving or self._wanted.get(p) != epoch:
                continue
            self.core.begin_loading(p, epoch)
            problems: list[str] = []
            try:
                plog = self.txn_log(p)
                records, _ = await trio.to_thread.run_sync(
                    partial(read_offsets_from, plog, plog.log_start_offset, problems, to_log_end=True))
            except (StorageError, OSError) as e:
                log.error("transaction state partition %d could not be read: %s", p, e)
                self.apply(self.core.unload(p))
                continue
            if self._wanted.get(p) != epoch:  # moved on while reading
                self.apply(self.core.unload(p))
                continue
            for problem in problems:
                log.error("transaction state partition %d: %s", p, problem)
            for key, value in records:
                try:
                    self.core.replay(p, key, value)
                except ValueError as e:
                    log.error("transaction state partition %d: skipping undecodable record: %s", p, e)
            self._serving[p] = epoch
            self.apply(self.core.finish_loading(p, now_ms()))
            log.info("transaction state partition %d: coordinating at epoch %d (%d records)", p, epoch, len(records))

    def _unload(self, p: int) -> None:
        self._serving.pop(p, None)
        for txn_id in [t for t in self._marking if self.core.partition_for(t) == p]:
            del self._marking[txn_id]  # the new coordinator re-drives them
        self.apply(self.core.unload(p))

    def leader_of(self, topic: str, partition: int) -> int | None:
        """The node leading a participant partition (this node's id on a single node); None: no leader now."""
        if self.member is None:
            return self.config["node.id"]
        from coordinator.cluster.state import NO_LEADER

        leader = self.member.view.leader(topic, partition)
        return None if leader == NO_LEADER else leader

    async def _remote_marker(self, node: int, task: Any, topic: str, partition: int,
                             done: Callable[[int | Exception | None], None]) -> None:
        """One WriteTxnMarkers to the partition's leader on the inter-broker listener (its TLS and login)."""
        from coordinator.runtime.replica_fetcher import PeerConnection
        from coordinator.runtime.security.peer_login import PeerAuthenticationError
        from protocol.errors import ProtocolError

        peer = self.replication.peer
        info = self.member.view.brokers.get(node)
        at = info.endpoint(peer.listener) if info is not None else None
        if at is None:
            done(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return
        body = {"markers": [{"producer_id": task.producer_id, "producer_epoch": task.producer_epoch,
                             "transaction_result": task.commit, "coordinator_epoch": task.coordinator_epoch,
                             "topics": [{"name": topic, "partition_indexes": [partition]}]}]}
        try:
            with trio.fail_after(REMOTE_TIMEOUT_S):
                stream = await peer.open(*at)
                async with stream:
                    conn = PeerConnection(stream, f"txn-markers-{self.config['node.id']}")
                    await peer.login(lambda k, v, b: conn.call(k, v, b, REMOTE_TIMEOUT_S))
                    resp = await conn.call(27, 1, body, REMOTE_TIMEOUT_S)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, ProtocolError,
                PeerAuthenticationError) as e:
            log.warning("marker for %s-%d to node %d failed: %r", topic, partition, node, e)
            done(ErrorCode.NETWORK_EXCEPTION)
            return
        if resp is None:
            done(ErrorCode.NETWORK_EXCEPTION)
            return
        codes = [p["error_code"] for m in resp.get("markers") or () for t in m["topics"] for p in t["partitions"]]
        done(codes[0] if codes else ErrorCode.UNKNOWN_SERVER_ERROR)

    # ---------------------------------------------------------------- requests
    def handle_init_producer_id(self, req: Request, slot: Slot) -> None:
        body = req.body
        txn_id = body.get("transactional_id")
        if txn_id is None:  # an idempotent producer: a fresh id, epoch 0, no state kept
            pid, epoch = body.get("producer_id", -1), body.get("producer_epoch", -1)
            if (pid == -1) != (epoch == -1):
                slot.complete({"throttle_time_ms": 0, "error_code": ErrorCode.INVALID_REQUEST,
                               "producer_id": -1, "producer_epoch": -1})
                return
            try:
                new = self.allocate_producer_id()
            except StorageError as e:
                log.error("%s", e)
                slot.complete({"throttle_time_ms": 0, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
                               "producer_id": -1, "producer_epoch": -1})
                return
            slot.complete({"throttle_time_ms": 0, "error_code": 0, "producer_id": new, "producer_epoch": 0})
            return
        pid, epoch = body.get("producer_id", -1), body.get("producer_epoch", -1)
        if (pid == -1) != (epoch == -1):
            slot.complete({"throttle_time_ms": 0, "error_code": ErrorCode.INVALID_REQUEST, "producer_id": -1,
                           "producer_epoch": -1})
            return
        self._submit(slot, txn_id, lambda token: self.core.init_producer_id(
            token, req.version, txn_id, body["transaction_timeout_ms"], pid, epoch, now_ms()))

    def handle_add_partitions(self, req: Request, slot: Slot) -> None:
        body = req.body
        topics = body["v3_and_below_topics"] or []
        errors: dict[tuple[str, int], int] = {}
        wanted: list[tuple[str, int]] = []
        for t in topics:
            name = t["name"]
            count = self.topics.partition_count(name)
            for p in t["partitions"] or ():
                if name.startswith("__"):
                    errors[(name, p)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif count is None or not 0 <= p < count:
                    errors[(name, p)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    wanted.append((name, p))
        if errors:
            for tp in wanted:
                errors[tp] = ErrorCode.OPERATION_NOT_ATTEMPTED
            slot.complete(_add_partitions_answer(topics, lambda tp: errors[tp]))
            return
        txn_id = body["v3_and_below_transactional_id"]
        self._submit(slot, txn_id, lambda token: self.core.add_partitions(
            token, req.version, txn_id, body["v3_and_below_producer_id"], body["v3_and_below_producer_epoch"],
            sorted(set(wanted)), now_ms()))

    def handle_add_offsets(self, req: Request, slot: Slot) -> None:
        body = req.body
        shard = partition_for(body["group_id"], self.config["offsets.topic.num.partitions"])
        self._submit(slot, body["transactional_id"], lambda token: self.core.add_offsets(
            token, req.version, body["transactional_id"], body["producer_id"], body["producer_epoch"],
            (OFFSETS_TOPIC, shard), now_ms()))

    def handle_end_txn(self, req: Request, slot: Slot) -> None:
        body = req.body
        self._submit(slot, body["transactional_id"], lambda token: self.core.end_txn(
            token, req.version, body["transactional_id"], body["producer_id"], body["producer_epoch"],
            bool(body["committed"]), now_ms()))

    def _submit(self, slot: Slot, txn_id: str | None, call: Callable[[Any], Any]) -> None:
        token = _Request(slot, txn_id or "", trio.current_time() + PARK_S)
        token.retry = lambda: call(token)
        self.apply(call(token))

    def handle_describe_transactions(self, req: Request, slot: Slot) -> None:
        slot.complete({"throttle_time_ms": 0,
                       "transaction_states": self.core.describe(list(req.body["transactional_ids"] or ()))})

    def handle_list_transactions(self, req: Request, slot: Slot) -> None:
        body = req.body
        answer = self.core.list_transactions(list(body.get("state_filters") or ()),
                                             list(body.get("producer_id_filters") or ()),
                                             body.get("duration_filter", -1) if req.version >= 1 else -1, now_ms())
        slot.complete({"throttle_time_ms": 0, **answer})

    def handle_write_txn_markers(self, req: Request, slot: Slot) -> None:
        """Markers from outside (Kafka's brokers send them to partition leaders; here: an operator aborting a
        hanging transaction, ``groupcoord transactions abort``, as kafka-transactions.sh does through the
        Admin API). Each partition's marker is checked and appended like the coordinator's own; the answer
        waits until every one is durable. Missing partitions: UNKNOWN_TOPIC_OR_PARTITION."""
        out: list[dict[str, Any]] = []
        waiting = [1]

        def settle() -> None:
            waiting[0] -= 1
            if waiting[0] == 0:
                slot.complete({"markers": out})

        for m in req.body["markers"] or ():
            topics: list[dict[str, Any]] = []
            out.append({"producer_id": m["producer_id"], "topics": topics})
            for t in m["topics"] or ():
                parts: list[dict[str, Any]] = []
                topics.append({"name": t["name"], "partitions": parts})
                for index in t["partition_indexes"] or ():
                    res = {"partition_index": index, "error_code": 0}
                    parts.append(res)
                    waiting[0] += 1

                    def done(error: int | Exception | None, res: dict[str, Any] = res) -> None:
                        if isinstance(error, Exception):
                            error = getattr(error, "commit_error", ErrorCode.KAFKA_STORAGE_ERROR)
                        res["error_code"] = int(error or 0)
                        settle()

                    args = (m["producer_id"], m["producer_epoch"], bool(m["transaction_result"]),
                            m["coordinator_epoch"], done)
                    if t["name"] == OFFSETS_TOPIC:
                        if 0 <= index < self.config["offsets.topic.num.partitions"]:
                            self.groups.write_marker(index, *args)
                        else:
                            done(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    elif t["name"].startswith("__"):
                        done(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    elif (lead := self.topics.lead_error(t["name"], index)) is not None:
                        done(lead)  # cluster mode: not the leader (the sender asks the new one)
                    else:
                        self.topics.txn.write_marker(t["name"], index, *args)
        settle()

    def verify(self, txn_id: str, producer_id: int, epoch: int, topic: str, partition: int) -> int:
        """KIP-890 part 1, locally: 0 when the partition is in the producer's ongoing transaction. Cluster mode:
        only for transactional ids coordinated here; others are not verified (0), as with Kafka's
        ``transaction.partition.verification.enable=false`` (the AddPartitionsToTxn v4 verify call between
        nodes is not built yet)."""
        if self.member is not None and self.core.partition_for(txn_id) not in self._serving:
            return 0
        return self.core.verify(txn_id, producer_id, epoch, topic, partition)

    def metrics(self) -> tuple[int, int, int, int, list[tuple[str, int, int]]]:
        """(open transactions, commits, aborts, timeout aborts, [(topic, partition, HW - LSO)]) for a scrape
        (runs in the metrics thread: it reads, and a dict that changes meanwhile is read again)."""
        for _ in range(5):
            try:
                ongoing = len(self.core.ongoing())
                return ongoing, self.commits, self.aborts, self.core.timed_out, self.topics.txn.lso_lags()
            except RuntimeError:  # changed size during iteration
                continue
        return 0, self.commits, self.aborts, self.core.timed_out, []


def _add_partitions_answer(topics: list[dict[str, Any]], error_of: Callable[[tuple[str, int]], int]) -> dict:
    return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
        {"name": t["name"], "results_by_partition": [
            {"partition_index": p, "partition_error_code": int(error_of((t["name"], p)))}
            for p in t["partitions"] or ()]}
        for t in topics]}
