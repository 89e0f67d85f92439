"""Serving the group APIs: the sans-IO core, its offsets partitions on disk, and its timers, on trio.

Rules:
- Each offsets partition ``__consumer_offsets-<shard>`` is a compacted partition log. At startup every shard
  is marked loading at once (requests answer COORDINATOR_LOAD_IN_PROGRESS), then loaded one by one: its
  batches are read and decoded in a worker thread and replayed into the core on the trio thread. Every
  batch's CRC is checked at load (storage trusts what a clean shutdown checkpointed); a corrupt batch or an
  undecodable record is logged and skipped, never a reason for the load (and so the server) to die.
- A core ``Outcome`` with records is appended as one batch per shard through group commit; only when every
  shard's fsync has covered it does the core replay it (``on_appended``) and are its completions released.
  If a write fails, the core's ``on_append_failed`` decides the answers; the partition stays offline.
- OffsetCommits of one topic with one partition (the common shape), when ``hot.path.enable``, skip the
  Outcome: ``Coordinator.commit_offset`` validates and returns the record, group commit stages it, and
  its callback settles the core's pending commit (``commit_settled``) and answers with a hand-built frame.
  Same rules, same bytes as the generic path (tests/integration/test_hot_path_server.py compares them).
- Heartbeats on the hot path renew the core's lease for the same request bytes when they can
  (``Coordinator.renew``), else go through ``Coordinator.heartbeat`` and take a lease.
- A failed offsets write is logged once at once, then at most once a second with a count (``RateLimitedLog``):
  a dead disk under load fails thousands of writes a second.
- offsets.max.committed refusals (the core counts them) are logged as one WARNING per 10 s at most, with
  the count since the last line; ``groupcoord_offsets_committed{,_max}`` and ``_refused_total`` show them.
- Loading decodes in a second process while it replays (``parallel_load``) when the offsets partitions hold
  at least ``offsets.load.worker.min.bytes``.
- Garbage collection: off while loading; after it, everything alive is frozen and the young generation
  is collected every ``GC_YOUNG_THRESHOLD`` net new containers (not 700).
- Timers: one task sleeps until the core's next deadline (re-armed after every call) and fires them.
- ``now_ms`` is wall-clock milliseconds (commit timestamps and retention outlive the process).
- OffsetDelete's partitions are checked against the hosted topics here (``unknown_partitions``).
- Group configs (``alter_group_configs``, for configs.py): the core's record goes through ``apply`` like any
  outcome, and the caller's answer waits until it is durable (replicated in cluster mode) or failed.
- FindCoordinator is answered here: a single node coordinates every group (key type 0) and every
  transactional id (key type 1, when ``verify_txn`` is set: transactions are served); in cluster mode the
  leader of the key's ``__consumer_offsets`` / ``__transaction_state`` partition (created on first use).
- Transactions: a TxnOffsetCommit's Outcome (``Outcome.producer``) is appended at once as ONE transactional
  batch (the producer's id and epoch, base sequence 0, as Kafka's storeOffsets) with ``GroupCommit.append``,
  and answered (and replayed into the core's pending offsets) once ``when_durable`` covers it.
  ``write_marker`` appends a COMMIT/ABORT control batch to an offsets partition the same way and, once
  durable, applies it to the core (``complete_txn``) before calling back. In cluster mode both wait for
  replication (``batch_append``: the high watermark covers the batch with enough in-sync replicas), as
  offsets commits do. TxnOffsetCommit's partitions of topics this node
  does not host answer UNKNOWN_TOPIC_OR_PARTITION (``unknown_partitions``, Kafka's metadata check). KIP-890
  part 1: with ``verify_txn`` set (the transaction coordinator's local check: is the group's offsets partition
  in the producer's ongoing transaction), a refusal answers every partition with its error before the core
  sees the request (TRANSACTION_ABORTABLE only to v4+, INVALID_TXN_STATE below, as Kafka's
  transactionSupportedOperation).
- Cluster mode (``broker.cluster`` set): offsets writes are answered once replicated (``use_replication``;
  a write the replicas did not take in time answers COORDINATOR_NOT_AVAILABLE, a lost leadership
  NOT_COORDINATOR); no ``load_all``; ``follow_leadership`` gets the offsets partitions
  this node leads (and, from replication's logs, the ones it replicates) and ``leadership_loop`` serves
  the led ones, keeps the followed ones replayed as their logs grow (FOLLOWING: ``follower_replay``, so a
  led one that was followed serves at once; one that was not is loaded, one at a time, as at startup) and
  unloads the others; a lost leadership answers NOT_COORDINATOR, parked requests included. FindCoordinator
  names the leader of the group's offsets partition, or COORDINATOR_NOT_AVAILABLE while it has none.
"""

from __future__ import annotations

import gc
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import trio
import trio.lowlevel

from coordinator.core.config import GroupConfig
from coordinator.core.consumer_group import ConsumerGroupConfig
from coordinator.core.coordinator import Coordinator, HeartbeatLease
from coordinator.core.errors import Err
from coordinator.core.group_configs import Limits
from coordinator.core.offsets import PendingCommit
from coordinator.core.outcome import Outcome
from coordinator.core.shard import ShardStatus
from coordinator.core.sharding import partition_for
from coordinator.core.txn_offset_commit import refuse_all
from coordinator.runtime.batch_append import append_batch
from coordinator.runtime.follower_replay import FollowerReplay
from coordinator.runtime.offsets_reader import log_skipped_record as _log_skipped_record
from coordinator.runtime.offsets_reader import (
    read_offsets_partition,  # noqa: F401 (re-exported)
    replay_steps,
)
from coordinator.runtime.parallel_load import DecodedPartitions
from coordinator.runtime.rate_limited_log import RateLimitedLog
from coordinator.storage.errors import StorageError
from coordinator.storage.log import LogConfig, PartitionLog
from coordinator.storage.manager import LogManager
from protocol.codec import Request
from protocol.control_batch import build_marker_batch
from protocol.errors import ErrorCode
from protocol.hotpath import (
    MEMO_ENTRIES,
    MEMO_MAX_FRAME,
    HeartbeatDecoder,
    OneCommit,
    heartbeat_answer_parts,
    offset_commit_answer,
)
from protocol.record_batch import build_batch

if TYPE_CHECKING:
    from coordinator.runtime.dispatch import ClientConnection, Slot
    from coordinator.runtime.group_commit import GroupCommit
    from coordinator.runtime.replication import Replication
    from coordinator.runtime.services import ServerContext

GC_YOUNG_THRESHOLD = 10_000

log = logging.getLogger("groupcoord.groups")

OFFSETS_TOPIC = "__consumer_offsets"
# Kafka's offsets topic: compacted, 100 MiB segments (offsets.topic.segment.bytes), no time/size retention
# (batches there are built by this process, so append skips re-verifying their CRC)
OFFSETS_LOG_CONFIG = LogConfig(segment_bytes=100 * 1024 * 1024, compact=True, retention_ms=None,
                               retention_bytes=None, verify_crc_on_append=False)
OFFSET_DELETE = 47
TXN_OFFSET_COMMIT = 28
_CLASSIC_MEMBER_APIS = frozenset((11, 12, 13, 14))  # JoinGroup, Heartbeat, LeaveGroup, SyncGroup
_PARKING_APIS = frozenset((11, 14))  # JoinGroup and SyncGroup wait in their member for the rebalance


def offset_key_group(key: bytes) -> str:
    """The group of an OffsetCommitKey (v0/v1: int16 version, int16 length, the group's UTF-8 bytes, ...)."""
    n = int.from_bytes(key[2:4], "big", signed=True)
    return key[4:4 + max(n, 0)].decode("utf-8", "replace")


def now_ms() -> int:
    return int(time.time() * 1000)


def group_config(cfg: Any) -> GroupConfig:
    keys = GroupConfig.kafka_keys()
    return GroupConfig.from_kafka_keys({k: cfg[k] for k in keys if cfg.get(k) is not None})


def consumer_group_config(cfg: Any) -> ConsumerGroupConfig:
    """group.consumer.* (KIP-848 groups; served by consumer_groups.py)."""
    from coordinator.config import split_list

    d = ConsumerGroupConfig()
    return ConsumerGroupConfig(session_timeout_ms=cfg.get("group.consumer.session.timeout.ms", d.session_timeout_ms),
                               heartbeat_interval_ms=cfg.get("group.consumer.heartbeat.interval.ms",
                                                             d.heartbeat_interval_ms),
                               max_size=cfg.get("group.consumer.max.size", d.max_size),
                               assignors=split_list(cfg.get("group.consumer.assignors", ",".join(d.assignors))),
                               migration_policy=cfg.get("group.consumer.migration.policy", d.migration_policy),
                               classic_max_size=cfg.get("group.max.size", d.classic_max_size))


def group_config_limits(cfg: Any) -> Limits:
    """The server's values behind the per-group configs (coordinator/core/group_configs.py)."""
    d = Limits()
    return Limits(*(cfg.get(k, getattr(d, f)) for k, f in (
        ("offsets.retention.minutes", "retention_minutes"),
        ("group.consumer.session.timeout.ms", "session_timeout_ms"),
        ("group.consumer.min.session.timeout.ms", "min_session_timeout_ms"),
        ("group.consumer.max.session.timeout.ms", "max_session_timeout_ms"),
        ("group.consumer.heartbeat.interval.ms", "heartbeat_interval_ms"),
        ("group.consumer.min.heartbeat.interval.ms", "min_heartbeat_interval_ms"),
        ("group.consumer.max.heartbeat.interval.ms", "max_heartbeat_interval_ms"))))


class _ConfigsAnswer:
    """The token of one ``alter_group_configs``: the core completes it like a request's slot."""

    api_key = 44

    def __init__(self) -> None:
        self.event = trio.Event()
        self.response: dict[str, Any] = {}

    def complete(self, response: dict[str, Any]) -> None:
        self.response = response
        self.event.set()


TRANSACTIONS_UNSUPPORTED = "transactions are not supported by this server"


class MarkerRefused(Exception):
    """``write_marker`` could not append: ``error_code`` is the Kafka error for the marker's sender."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


class _CommitSettled:
    """The group-commit callback of one ``_commit_one``: settle the core's pending commit, then answer. Its
    success answer may be handed to the fsync child (hand_off.py ``HandOff``): the child then writes it,
    and ``written`` completes the slot with nothing (or what the child could not write) left to send."""

    __slots__ = ("durable", "handed", "index", "pending", "service", "slot", "topic")

    def __init__(self, service: GroupService, slot: Slot, pending: PendingCommit, topic: str, index: int) -> None:
        self.service, self.slot, self.pending, self.topic, self.index = service, slot, pending, topic, index
        self.handed = False
        self.durable = False  # called back with success (while handed, the answer was left to the child)

    def __call__(self, err: Exception | None) -> None:
        self.durable = err is None
        service = self.service
        service.core.commit_settled(self.pending, durable=err is None)
        if err is None:
            service.broker.metrics.offset_commits.inc()
            service.broker.metrics.group_commits.add(self.pending.group_id)
            error = 0
        else:
            service.write_failures.error("offset commit of %s failed: %s", self.pending.group_id, err)
            error = getattr(err, "commit_error", ErrorCode.NOT_COORDINATOR)  # replication.ReplicationError
        if self.handed:  # the child writes the success answer; an error here may come too late to stop it
            if err is not None:
                self.abandon()
            return
        self.slot.complete_frame(self._answer(error))

    def _answer(self, error: int) -> bytes:
        slot = self.slot
        return offset_commit_answer(slot.version, slot.correlation_id, self.topic, self.index, error)

    def offer(self) -> tuple[int, int, bytes] | None:
        slot = self.slot
        conn = slot.conn
        if slot.done or self.handed or not conn.can_hand_off(slot):
            return None
        fd = conn.fd
        assert fd is not None  # can_hand_off holds only for a socket
        self.handed = True
        conn.handed += 1
        return conn.key, fd, self._answer(0)

    def _unhand(self) -> bool:
        if not self.handed:
            return False
        self.handed = False
        self.slot.conn.handed -= 1
        return True

    def written(self, rest: bytes | None) -> None:
        if self._unhand():
            if rest is not None:  # the child could not write it all: never hand this connection's again
                self.slot.conn.hand_off_ok = False
            self.slot.complete_frame(rest)

    def take_back(self) -> None:
        # already durable (e.g. a checkpoint fsynced its log before the child failed): the answer is owed here
        if self._unhand() and self.durable:
            self.slot.complete_frame(self._answer(0))

    def abandon(self) -> None:
        if self._unhand():
            self.slot.conn.abort()


class GroupService:
    def __init__(self, broker: ServerContext, logs: LogManager, commit: GroupCommit) -> None:
        self.broker = broker
        self.logs = logs
        self.commit = commit
        self.core = Coordinator(group_config(broker.config), new_id=lambda: str(uuid.uuid4()),
                                consumer=consumer_group_config(broker.config))
        # consumer_groups.py's hooks: a shard starts / stops being served (its deadlines are armed / dropped)
        self.on_shard_served: Callable[[int], None] | None = None
        self.on_shard_unserved: Callable[[int], None] | None = None
        # consumer_groups.py's hook: takes a JoinGroup/SyncGroup/Heartbeat/LeaveGroup of a consumer group (True)
        self.classic_router: Callable[[Request, Slot], bool] | None = None
        self.shards = self.core.config.offsets_topic_num_partitions
        self._timer_changed = trio.Event()
        self._armed: int | None = None  # the deadline the timer task sleeps until
        self._rebalance_events = 0
        self._by_conn: dict[ClientConnection, set[Slot]] = defaultdict(set)
        self.loaded = trio.Event()
        broker.metrics.groups.source = self.core.groups_by_state
        broker.metrics.groups.members = lambda: sum(self.core.member_counts().values())
        broker.metrics.groups.offsets = lambda: (self.core.offsets_held(), self.core.config.offsets_max_committed,
                                                 self.core.offsets_refused)
        self._refused_seen = 0  # core.offsets_refused already logged
        self._refusals_next_log = float("-inf")  # monotonic time the next refusal line may be written
        self._rebalances_seen: dict[str, int] = {}
        self._heartbeats = HeartbeatDecoder()
        self.write_failures = RateLimitedLog(log)
        # heartbeat request bytes after the correlation id -> (version, its lease, the answer around the
        # correlation id); bounded like the memo
        self._leases: dict[bytes, tuple[int, HeartbeatLease, tuple[bytes, bytes]]] = {}
        self._offsets_logs: dict[int, PartitionLog] = {}  # shard -> its log (offsets partitions are never deleted)
        self._led: set[int] = set()  # cluster mode: the offsets partitions this node leads
        self._followed: set[int] = set()  # cluster mode: the ones it replicates without leading
        self._roles = 0  # cluster mode: bumped whenever the led or followed set changes
        self._unavailable: set[int] = set()  # led shards whose load failed (tried again when roles change)
        self._stage = commit.stage  # cluster mode: answered once replicated (``use_replication``)
        # KIP-890 part 1 for TxnOffsetCommit: (txn id, pid, epoch, topic, partition) -> error code (0: in the txn)
        self.verify_txn: Callable[[str, int, int, str, int], int] | None = None
        self._leadership_changed = trio.Event()
        self._replication: Replication | None = None
        self._replication_timeout_s = 30.0
        # cluster mode: followed shards replayed as their logs grow (wired to replication in use_replication)
        self.replica = FollowerReplay(self.core, OFFSETS_TOPIC, self._offsets_logs, self.offsets_log,
                                      lambda: self._leadership_changed.set())

    # ---------------------------------------------------------------- loading
    def _finish_loading(self, shard: int) -> None:
        self.apply(self.core.finish_loading(shard, now_ms()))
        if self.on_shard_served is not None:
            self.on_shard_served(shard)

    def _unload(self, shard: int, now: int, *, following: bool = False) -> None:
        self.apply(self.core.unload(shard, now, following=following))
        if self.on_shard_unserved is not None:
            self.on_shard_unserved(shard)

    def offsets_log(self, shard: int) -> PartitionLog:
        plog = self._offsets_logs.get(shard)
        if plog is None:
            plog = self.logs.get(OFFSETS_TOPIC, shard)
            if plog is None:
                plog = self.logs.create(OFFSETS_TOPIC, shard, OFFSETS_LOG_CONFIG)
            self._offsets_logs[shard] = plog
        return plog

    def _load_in_parallel(self) -> bool:
        """offsets.load.worker.min.bytes (ours): decode in a second process (parallel_load) when the offsets
        partitions hold at least that many bytes (0: always; -1: never)."""
        threshold = self.broker.config.get("offsets.load.worker.min.bytes", -1)
        if threshold is None or threshold < 0:
            return False
        size = 0
        for shard in range(self.shards):
            try:
                size += self.offsets_log(shard).size_bytes()
            except (StorageError, OSError):
                continue  # the load reports it
            if size >= threshold:
                return True
        return size >= threshold

    async def load_all(self) -> None:
        for shard in range(self.shards):
            self.core.begin_loading(shard)
        total = unavailable = 0
        t_all = time.perf_counter()
        gc_enabled = gc.isenabled()
        gc.disable()  # loading builds millions of long-lived objects: collecting meanwhile finds nothing
        partitions = DecodedPartitions(range(self.shards), self.offsets_log, self._load_in_parallel())
        try:
            t0 = time.perf_counter()
            async for shard, plog, records, problems, error in partitions:
                if error is not None or records is None:
                    log.error("offsets partition %d could not be read: %s; it stays unavailable", shard, error)
                    unavailable += 1
                    t0 = time.perf_counter()
                    continue
                for problem in problems:
                    log.error("offsets partition %d (%s): %s", shard, plog.directory, problem)
                skipped = partial(_log_skipped_record, shard)
                for _ in replay_steps(self.core, shard, records, skipped):  # transactional events in log order
                    await trio.lowlevel.checkpoint()
                self._finish_loading(shard)
                total += len(records)
                t1 = time.perf_counter()
                self.broker.metrics.load_seconds.observe(t1 - t0)
                t0 = t1
        finally:
            partitions.close()
            if gc_enabled:
                # everything alive now (code, codecs, the loaded groups and offsets) lives as long as the
                # process: freeze it into the permanent generation, so no collection ever rescans it (a
                # full collection over millions of loaded offsets pauses the server for hundreds of ms).
                # Cyclic garbage among frozen objects is never reclaimed: loaded state is acyclic records.
                gc.freeze()
                # and collect the young generation after 10,000 net new containers instead of 700: a busy
                # server allocates (and frees) containers per read and per request, and at the default it
                # ran a collection every few hundred requests (measured: ~5% of heartbeat throughput);
                # cyclic garbage waits at most that much longer
                gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
                gc.enable()
        log.info("loaded %d offsets partitions (%d records, %d unavailable) in %.2f s%s",
                 self.shards - unavailable, total, unavailable, time.perf_counter() - t_all,
                 ", decoded by a second process" if partitions.parallel else "")
        self.loaded.set()

    # ---------------------------------------------------------------- requests
    def handle(self, request: Request, slot: Slot, *, routed: bool = False) -> None:
        if not routed and request.api_key in _CLASSIC_MEMBER_APIS and self.classic_router is not None \
                and self.classic_router(request, slot):
            return  # a consumer group's classic member (consumer_groups.py; ``routed`` when it hands one back)
        if request.api_key == 8 and type(request.body) is OneCommit:
            if self._commit_one(request, slot):
                return
            request = Request(request.header, request.body.as_body(request.header.api_version))
        self.commit.poll_answers()  # read-your-writes: a client may have seen an answer the child wrote
        if request.api_key in _PARKING_APIS:  # only these can be parked in a member (connection_closed)
            self._by_conn[slot.conn].add(slot)
        if request.api_key == TXN_OFFSET_COMMIT:
            refused = self._txn_refused(request)
            if refused:
                slot.complete(refuse_all(request.body, refused))
                return
            request = Request(request.header, self._with_unknown_partitions(request.body))
        if request.api_key == OFFSET_DELETE:
            request = Request(request.header, self._with_unknown_partitions(request.body))
        outcome = self.core.handle(request.api_key, request.version, request.body, slot, now_ms(),
                                   client_id=request.header.client_id or "", client_host=slot.conn.host)
        if self.core.offsets_refused != self._refused_seen:
            self._log_refusals()
        self.apply(outcome)

    def _txn_refused(self, request: Request) -> int:
        """KIP-890 part 1 for a TxnOffsetCommit (see the rules): 0, or the error for every partition. Only for a
        group this node serves now (otherwise the core answers the group's status error)."""
        body = request.body
        group_id = body.get("group_id")
        if self.verify_txn is None or not group_id:
            return 0
        shard = self.core.shard_for(group_id)
        if self.core.shard_status(shard) is not ShardStatus.ACTIVE:
            return 0
        error = self.verify_txn(body.get("transactional_id") or "", body["producer_id"], body["producer_epoch"],
                                OFFSETS_TOPIC, shard)
        if error == ErrorCode.TRANSACTION_ABORTABLE and request.version < 4:
            return ErrorCode.INVALID_TXN_STATE
        return error

    def _log_refusals(self) -> None:
        """offsets.max.committed refused commits: one WARNING per 10 s at most (the counter metric has each)."""
        refused, now = self.core.offsets_refused, time.monotonic()
        if refused != self._refused_seen and now >= self._refusals_next_log:
            log.warning("offsets.max.committed (%d) reached: %d partition commit(s) that would add an offset "
                        "refused with POLICY_VIOLATION since the last such line; %d offsets held",
                        self.core.config.offsets_max_committed, refused - self._refused_seen,
                        self.core.offsets_held())
            self._refused_seen, self._refusals_next_log = refused, now + 10.0

    def _with_unknown_partitions(self, body: dict[str, Any]) -> dict[str, Any]:
        """OffsetDelete: the request's partitions of topics (or partitions) this node does not host, which
        the core answers UNKNOWN_TOPIC_OR_PARTITION (Kafka checks its metadata before the coordinator)."""
        counts = self.broker.topic_service.topics() if self.broker.topic_service is not None else {}
        unknown = {(t["name"], p["partition_index"]) for t in body.get("topics") or ()
                   for p in t.get("partitions") or () if not 0 <= p["partition_index"] < counts.get(t["name"], 0)}
        return {**body, "unknown_partitions": frozenset(unknown)}

    def _commit_one(self, request: Request, slot: Slot) -> bool:
        """An OffsetCommit of one topic with one partition (a ``OneCommit`` body from the hot decoder) through
        ``Coordinator.commit_offset``: no Outcome, hooks or response dicts; the answer frame is built by
        hand. False = a timer is due: the generic path serves it (with the body as the generic dict)."""
        c: OneCommit = request.body  # type: ignore[assignment]
        version = request.header.api_version
        result = self.core.commit_offset(now_ms(), version, c.group_id, c.generation, c.member_id, c.instance_id,
                                         c.topic, c.partition, c.offset, c.leader_epoch, c.metadata,
                                         c.retention_ms, request.header.client_id or "", slot.conn.host)
        if result is None:
            return False
        self._rearm_if_earlier()  # a member's commit re-arms its session
        if type(result) is not PendingCommit:
            if result is Err.POLICY_VIOLATION:
                self._log_refusals()
            slot.complete_frame(offset_commit_answer(version, slot.correlation_id, c.topic, c.partition, result))
            return True
        settle = _CommitSettled(self, slot, result, c.topic, c.partition)
        try:
            plog = self.offsets_log(result.shard_id)
        except (StorageError, OSError) as e:
            settle(e)
            return True
        history = result.history  # offset_history.py: its records go in the same batch, right after the commit's
        self._stage(plog, [(result.key, result.value)] if history is None else [(result.key, result.value),
                                                                               *history.records], settle)
        return True

    def hot_heartbeat(self, payload: bytes) -> bytes | None:
        """A Heartbeat on the hot path: the same request bytes as a leased heartbeat (all but the correlation
        id) are answered by ``Coordinator.renew``; otherwise hand-decoded (memoised) and answered by
        ``Coordinator.heartbeat``, which may grant a lease. None = use the generic path (an unusual shape, or
        a timer is due)."""
        now = now_ms()
        key = payload[8:] if len(payload) <= MEMO_MAX_FRAME else None
        if key is not None:
            leased = self._leases.get(key)
            # renewed: same answer, and no timer moved earlier (the timer task's deadline holds)
            if leased is not None and leased[0] == (payload[2] << 8 | payload[3]) \
                    and self.core.renew(leased[1], now) is not None:
                return payload[4:8].join(leased[2])
        hb = self._heartbeats.decode(payload)
        if hb is None:
            return None
        version, group_id, generation, member_id, instance_id = hb
        error = self.core.heartbeat(group_id, generation, member_id, instance_id, now)
        if error is None:
            return None
        self._rearm_if_earlier()
        parts = heartbeat_answer_parts(version, error)
        if key is not None and (lease := self.core.lease(group_id, member_id, error)) is not None:
            leases = self._leases
            if len(leases) >= MEMO_ENTRIES:
                leases.clear()
            leases[key] = (version, lease, parts)
        return payload[4:8].join(parts)

    def handle_find_coordinator(self, request: Request, slot: Slot) -> None:
        """Kafka's handler: v0-3 carry one key and a top-level error_message ("NONE" on success, as Kafka's
        ``Errors.NONE.message()``); v4+ carry per-key answers whose error_message Kafka leaves null. Key type
        1 (transaction) names this node when it serves transactions (a single node: transactions.py); else it
        is refused at once, never with a retriable error that clients would retry forever (so are other key
        types)."""
        body, v = request.body, request.version
        me = self.broker.broker_entry(slot.conn.listener)
        node = {"node_id": me["node_id"], "host": me["host"], "port": me["port"]}
        refused = {"node_id": -1, "host": "", "port": -1, "error_message": TRANSACTIONS_UNSUPPORTED,
                   "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
        if self.broker.cluster is not None:
            self._find_coordinator_in_cluster(body, v, refused, slot)
            return
        served = (0, 1) if getattr(self.broker, "transactions", None) is not None else (0,)
        if v >= 4:
            coords = [{"key": key, **refused} if body["key_type"] not in served else
                      {"key": key, **node, "error_code": 0, "error_message": None}
                      for key in body["coordinator_keys"]]
            slot.complete({"throttle_time_ms": 0, "coordinators": coords})
            return
        if body.get("key_type", 0) not in served:
            slot.complete({"throttle_time_ms": 0, **refused})
            return
        slot.complete({"throttle_time_ms": 0, "error_code": 0, "error_message": "NONE", **node})

    # ---------------------------------------------------------------- cluster mode
    def _find_coordinator_in_cluster(self, body: dict[str, Any], v: int, refused: dict[str, Any],
                                     slot: Slot) -> None:
        """The leader of the group's offsets partition, or COORDINATOR_NOT_AVAILABLE while it has none (the
        offsets topic is then created if it does not exist yet: Kafka creates it on first use)."""
        cluster = self.broker.cluster
        assert cluster is not None

        def answer(key: str) -> dict[str, Any]:
            leader = cluster.leader_of(OFFSETS_TOPIC, self.core.shard_for(key))
            at = leader.endpoint(slot.conn.listener) if leader is not None else None
            if leader is None or at is None:  # no leader, or none this client's listener reaches (Kafka's)
                if leader is None:
                    cluster.request_offsets_topic()
                return {"node_id": -1, "host": "", "port": -1, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
                        "error_message": "The coordinator is not available."}
            return {"node_id": leader.node_id, "host": at[0], "port": at[1], "error_code": 0,
                    "error_message": None if v >= 4 else "NONE"}

        def answer_txn(key: str) -> dict[str, Any]:
            txn_partition = partition_for(key, self.broker.config["transaction.state.log.num.partitions"])
            leader = cluster.leader_of(cluster.txn_topic, txn_partition)
            at = leader.endpoint(slot.conn.listener) if leader is not None else None
            if leader is None or at is None:
                if leader is None:
                    cluster.request_txn_topic()
                return {"node_id": -1, "host": "", "port": -1, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
                        "error_message": "The coordinator is not available."}
            return {"node_id": leader.node_id, "host": at[0], "port": at[1], "error_code": 0,
                    "error_message": None if v >= 4 else "NONE"}

        key_type = body.get("key_type", 0)
        served = answer if key_type == 0 else answer_txn if key_type == 1 and self.verify_txn is not None else None
        if v >= 4:
            coords = [{"key": key, **(refused if served is None else served(key))} for key in body["coordinator_keys"]]
            slot.complete({"throttle_time_ms": 0, "coordinators": coords})
        elif served is None:
            slot.complete({"throttle_time_ms": 0, **refused})
        else:
            slot.complete({"throttle_time_ms": 0, **served(body["key"])})

    def use_replication(self, replication: Replication, timeout_s: float) -> None:
        """Cluster mode: every offsets write is answered once the high watermark covers it with enough
        in-sync replicas (``Replication.staging``), and followed offsets partitions are replayed as their
        logs grow (``follower_replay``); single-node mode never calls this."""
        self._stage = replication.staging(self.commit.stage, timeout_s)
        self._replication = replication
        self._replication_timeout_s = timeout_s
        replication.on_follower_append = self.replica.on_append
        replication.on_follower_truncate = self.replica.on_truncate

    def follow_leadership(self, led: set[int]) -> None:
        """The offsets partitions this node now leads (called on the trio thread by the cluster member, after
        replication followed the same view: its logs are the partitions this node replicates)."""
        replication = self._replication
        followed = {p for t, p in replication.logs if t == OFFSETS_TOPIC} - led if replication is not None else set()
        if led != self._led or followed != self._followed:
            self._led = set(led)
            self._followed = followed
            self._roles += 1
            self._unavailable.clear()
            self._leadership_changed.set()

    async def leadership_loop(self) -> None:
        """Serve the shards this node leads, replay the ones it follows, unload the others (see the rules)."""
        while True:
            await self._leadership_changed.wait()
            self._leadership_changed = trio.Event()
            before = self._serving()
            await self._follow_once()
            if self._serving() != before:
                log.info("serving offsets partitions %s (%d): leadership moved", sorted(self._serving()),
                         len(self._serving()))

    def _serving(self) -> set[int]:
        return {s for s in range(self.shards) if self.core.shard_status(s) is ShardStatus.ACTIVE}

    async def _follow_once(self) -> None:
        core, replica, roles = self.core, self.replica, self._roles
        now = now_ms()
        for shard in range(self.shards):  # leaderships lost: back to following, or not owned
            status = core.shard_status(shard)
            if status is ShardStatus.NOT_OWNED or shard in self._led:
                continue
            if shard in self._followed:
                if status is not ShardStatus.FOLLOWING:
                    self._unload(shard, now, following=True)
                    replica.restart(shard)
            else:
                self._unload(shard, now)
                replica.forget(shard)
        for shard in sorted(self._led):  # current followers lead at once
            if core.shard_status(shard) is ShardStatus.FOLLOWING and await replica.catch_up_tail(shard) \
                    and shard in self._led and core.shard_status(shard) is ShardStatus.FOLLOWING:
                replica.leave(shard)
                self._finish_loading(shard)
                log.info("offsets partition %d: leading, served at once from the follower replay", shard)
        for shard in sorted(self._led):  # the others load, one at a time
            if shard in self._led and core.shard_status(shard) is not ShardStatus.ACTIVE \
                    and shard not in self._unavailable:
                await self._load_led_shard(shard)
        for shard in sorted(self._followed):  # followers rebuilt or caught up; leadership changes first
            if self._roles != roles:
                return
            if shard not in self._followed or shard in self._led:
                continue
            status = core.shard_status(shard)
            if status is ShardStatus.NOT_OWNED:
                replica.restart(shard)
            elif status is not ShardStatus.FOLLOWING:
                continue
            if shard in replica.stale:
                await replica.catch_up(shard, full=True)
            elif shard in replica.behind:
                await replica.catch_up(shard)

    async def _load_led_shard(self, shard: int) -> None:
        """A led shard with no current replay: loaded from its log (LOADING meanwhile; the load time is
        ``groupcoord_partition_load_seconds``). A load cut short by a truncation is tried again; one that
        keeps failing leaves the shard unavailable until the led or followed set changes."""
        t0 = time.perf_counter()
        for _ in range(3):
            if await self.replica.catch_up(shard, full=True, loading=True):
                break
            if shard not in self._led:
                return
        else:
            log.error("offsets partition %d could not be loaded; it stays unavailable", shard)
            self._unavailable.add(shard)
            return
        if shard not in self._led or self.core.shard_status(shard) is not ShardStatus.LOADING:
            return  # lost while loading: the next pass follows or unloads it
        self.replica.leave(shard)
        self._finish_loading(shard)
        self.broker.metrics.load_seconds.observe(time.perf_counter() - t0)

    def connection_closed(self, conn: ClientConnection) -> None:
        slots = self._by_conn.pop(conn, None)
        if slots:
            self.core.connection_closed([s for s in slots if not s.done])

    # ---------------------------------------------------------------- group configs
    async def alter_group_configs(self, group_id: str, change: Callable[[dict[str, str]], dict[str, str]]
                                  ) -> tuple[int, str | None]:
        """Write the group's new configs (``change`` of its latest); (error code, message) once durable."""
        answer = _ConfigsAnswer()
        self.apply(self.core.alter_group_configs(group_id, change, answer, now_ms()))
        await answer.event.wait()
        return answer.response.get("error_code", ErrorCode.UNKNOWN_SERVER_ERROR), answer.response.get("error_message")

    # ---------------------------------------------------------------- outcomes
    def _rearm_if_earlier(self) -> None:
        """Wake the timer task when a deadline may now come before the one it sleeps until. The O(1) lower
        bound can wake it spuriously (a stale heap entry); it then re-arms on the exact next deadline."""
        bound = self.core.deadline_lower_bound()
        if bound is not None and (self._armed is None or bound < self._armed):
            self._timer_changed.set()

    def apply(self, outcome: Outcome) -> None:
        self._rearm_if_earlier()
        stats = self.core.rebalance_events
        if stats != self._rebalance_events:
            self._rebalance_events = stats
            self._count_rebalances()
        if not outcome.records:
            self._release(outcome.completions)
            return
        if outcome.producer is not None:
            self._append_transactional(outcome)
            return
        per_shard: dict[int, list[tuple[bytes, bytes | None]]] = defaultdict(list)
        for shard, key, value in outcome.records:
            per_shard[shard].append((key, value))
        remaining = [len(per_shard)]
        errors: list[Exception] = []
        write_id = outcome.write_id
        assert write_id is not None
        by_group: dict[str, int] = {}  # offset commit records per group (groupcoord_group_offset_commits_total)
        for _, k, v in outcome.records:
            if v is not None and k[:2] in (b"\x00\x00", b"\x00\x01"):
                group = offset_key_group(k)
                by_group[group] = by_group.get(group, 0) + 1
        commits = sum(by_group.values())

        def done(err: Exception | None) -> None:
            if err is not None:
                errors.append(err)
            remaining[0] -= 1
            if remaining[0]:
                return
            if errors:
                self.write_failures.error("offsets write %s failed: %s", write_id, errors[0])
                error = getattr(errors[0], "commit_error", ErrorCode.NOT_COORDINATOR)  # replication.py's
                self.apply(self.core.on_append_failed(write_id, now_ms(), error))
            else:
                after = self.core.on_appended(write_id, now_ms())
                if commits:
                    self.broker.metrics.offset_commits.inc(commits)
                    for group, n in by_group.items():
                        self.broker.metrics.group_commits.add(group, n)
                self._release(outcome.completions)
                if after.records or after.completions:
                    self.apply(after)

        for shard, items in per_shard.items():
            try:
                plog = self.offsets_log(shard)
            except (StorageError, OSError) as e:
                done(e)
                continue
            self._stage(plog, items, done)

    def _append_transactional(self, outcome: Outcome) -> None:
        """A TxnOffsetCommit's records as one transactional batch, answered once durable (see the rules)."""
        write_id = outcome.write_id
        assert write_id is not None and outcome.producer is not None
        shard = outcome.records[0][0]
        producer_id, producer_epoch = outcome.producer

        def done(err: Exception | None) -> None:
            if err is not None:
                self.write_failures.error("transactional offsets write %s failed: %s", write_id, err)
                error = getattr(err, "commit_error", ErrorCode.NOT_COORDINATOR)
                self.apply(self.core.on_append_failed(write_id, now_ms(), error))
                return
            after = self.core.on_appended(write_id, now_ms())
            self._release(outcome.completions)
            if after.records or after.completions:
                self.apply(after)

        now = now_ms()
        try:
            plog = self.offsets_log(shard)
            batch = build_batch([(key, value, (), now) for _, key, value in outcome.records],
                                producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=0,
                                transactional=True)
            append_batch(self.commit, plog, batch, done, self._replication, self._replication_timeout_s)
        except (StorageError, OSError, ValueError) as e:
            done(e)

    def write_marker(self, shard: int, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                     callback: Callable[[Exception | None], None]) -> None:
        """Append the COMMIT/ABORT marker of ``producer_id`` to offsets partition ``shard``; once durable, apply
        it to the core (its pending offsets there are installed or dropped) and call ``callback(None)``. On
        failure ``callback(error)`` and no state changes. A shard not served here (loading, not owned) calls
        back at once with a ``MarkerRefused`` carrying the error code (nothing appended). Cluster mode: once
        replicated (``batch_append``)."""
        status = self.core.shard_status(shard)
        if status is not ShardStatus.ACTIVE:
            code = (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if status is ShardStatus.LOADING
                    else ErrorCode.NOT_COORDINATOR)
            callback(MarkerRefused(code, f"offsets partition {shard} cannot take a marker now ({status.value})"))
            return
        def done(err: Exception | None) -> None:
            if err is None:
                self.apply(self.core.complete_txn(shard, producer_id, commit, now_ms()))
            else:
                self.write_failures.error("transaction marker for producer %d in offsets partition %d failed: %s",
                                          producer_id, shard, err)
            callback(err)

        try:
            plog = self.offsets_log(shard)
            batch = build_marker_batch(producer_id, producer_epoch, commit, coordinator_epoch, now_ms(),
                                       partition_leader_epoch=-1)
            append_batch(self.commit, plog, batch, done, self._replication, self._replication_timeout_s)
        except (StorageError, OSError, ValueError) as e:
            self.write_failures.error("transaction marker for producer %d in offsets partition %d failed: %s",
                                      producer_id, shard, e)
            callback(e)

    def _release(self, completions: list[tuple[object, dict]]) -> None:
        by_conn = self._by_conn
        for token, response in completions:
            slot: Slot = token  # type: ignore[assignment]
            slot.complete(response)
            if slot.api_key in _PARKING_APIS:
                conn_slots = by_conn.get(slot.conn)
                if conn_slots is not None:
                    conn_slots.discard(slot)

    def _count_rebalances(self) -> None:
        for ms in self.core.take_rebalance_durations():
            self.broker.metrics.rebalance_seconds.observe(ms / 1000)
        for reason, n in self.core.rebalances_by_reason().items():
            seen = self._rebalances_seen.get(reason, 0)
            if n > seen:
                self.broker.metrics.rebalances.labels(reason).inc(n - seen)
                self._rebalances_seen[reason] = n

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
            self.apply(self.core.on_timers(now_ms()))
