"""The transaction coordinator: a pure state machine over the ``__transaction_state`` partitions we own
(Kafka 3.9 ``TransactionCoordinator`` + ``TransactionStateManager`` + the completion half of
``TransactionMarkerChannelManager``; TV0/TV1 only).

Rules:
- Ownership: ``begin_loading(p, coordinator_epoch)`` starts a partition (its txn ids answer
  COORDINATOR_LOAD_IN_PROGRESS), ``replay`` feeds its log (last value wins, a tombstone removes),
  ``finish_loading`` makes it active and re-drives every PrepareCommit/PrepareAbort (its markers are
  emitted again, then Complete* is written). A partition we do not own answers NOT_COORDINATOR.
  ``unload(p)`` drops it: requests waiting on its writes are answered NOT_COORDINATOR; a write that turns
  durable later is ignored. A write finishing after its partition was reloaded answers
  COORDINATOR_LOAD_IN_PROGRESS (still loading) or NOT_COORDINATOR (another coordinator epoch), as Kafka.
- Every change is prepare -> write -> complete (see metadata.py): the record goes out in the outcome's
  ``writes``, and the state changes (and the request is answered) only in ``write_done``. While a write for
  a txn id is pending, other requests for it get CONCURRENT_TRANSACTIONS. A failed write clears the pending
  state and answers the request with ``append_error`` of the failure.
- InitProducerId: exactly one of producer id / epoch -1 -> INVALID_REQUEST; no txn id -> a fresh producer
  id at epoch 0 and no state; "" -> INVALID_REQUEST; timeout <= 0 or > max -> INVALID_TRANSACTION_TIMEOUT.
  An unknown id gets a new producer id (epoch -1 until written). Pending -> CONCURRENT_TRANSACTIONS; a
  given (pid, epoch) that is not the current pid, not a just-created id, and not the previous pid at an
  exhausted epoch -> PRODUCER_FENCED. Prepare* -> CONCURRENT_TRANSACTIONS. Empty/Complete*: epoch + 1, or a
  new producer id at epoch 0 once the epoch is exhausted (>= 32766); with KIP-360 (v3+) the expected epoch
  must be the current one (bump, remembered as the last epoch) or the last one (a retry: the same answer
  again), else PRODUCER_FENCED. Ongoing: fence (epoch + 1), abort, and answer CONCURRENT_TRANSACTIONS once
  the PrepareAbort is durable; the client's retry then gets epoch old + 2.
- AddPartitionsToTxn / AddOffsetsToTxn: "" -> INVALID_REQUEST; unknown id or other producer id ->
  INVALID_PRODUCER_ID_MAPPING; other epoch -> PRODUCER_FENCED; pending or Prepare* ->
  CONCURRENT_TRANSACTIONS; Ongoing with nothing new -> NONE without a write; else write Ongoing with the
  union (the transaction starts now unless it was already Ongoing).
- EndTxn: "" -> INVALID_REQUEST; unknown id or other producer id -> INVALID_PRODUCER_ID_MAPPING; other epoch
  (internal aborts: a lower one) -> PRODUCER_FENCED; pending -> CONCURRENT_TRANSACTIONS. Ongoing -> write
  Prepare*, answer NONE once durable, then emit the MarkerTask; Complete* with the same result -> NONE;
  Prepare* with the same result -> CONCURRENT_TRANSACTIONS; anything else (and Empty) -> INVALID_TXN_STATE.
- Markers: ``markers_done`` empties the partition set and writes Complete*. A transaction with no
  partitions writes Complete* at once. A failed Complete* write is retried (``complete_retry_backoff_ms``)
  while we still own the partition at the same epoch (Kafka gives up on NOT_COORDINATOR because
  leadership moved; here leadership moves only through unload/begin_loading).
- ``tick``: every abort interval, each Ongoing, non-pending transaction with start + timeout < now is
  fenced (epoch + 1) and aborted; every expiry interval, each non-pending Empty/Complete* id idle for
  id_expiration_ms gets a tombstone (one write per partition and TOMBSTONES_PER_WRITE ids) and is removed
  once it is durable; a failed tombstone write leaves the id as it was.
- Error codes in replies are rewritten for old request versions (errors.client_error). Partition sets and
  every list we emit are sorted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple

from protocol.errors import ErrorCode

from ..sharding import partition_for as _partition_for
from .config import TxnConfig
from .errors import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    INIT_PRODUCER_ID,
    TRANSACTION_ABORTABLE,
    TRANSACTIONAL_ID_NOT_FOUND,
    append_error,
    client_error,
)
from .metadata import EPOCH_MAX, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, Transit, TxnMetadata, epoch_exhausted
from .outcome import MarkerTask, TxnOutcome, TxnWrite
from .records import RecordError, decode_key, decode_value, encode_key, encode_value
from .state import BY_NAME, EXPIRATION_ALLOWED, PREPARING, TxnState

_NONE = int(ErrorCode.NONE)
TOMBSTONES_PER_WRITE = 500  # Kafka fills one batch up to max.message.bytes; we bound the record count
_S = TxnState


class PidAllocationError(Exception):
    """Raised by ``allocate_producer_id`` when no id can be handed out now; ``error_code`` is the answer
    (e.g. COORDINATOR_LOAD_IN_PROGRESS while a block of ids is being reserved)."""

    def __init__(self, error_code: int, message: str = "") -> None:
        super().__init__(message or f"producer id allocation failed ({error_code})")
        self.error_code = int(error_code)


class TxnView(NamedTuple):
    """A read-only snapshot of one transactional id (metrics, CLI, tests)."""

    txn_id: str
    producer_id: int
    producer_epoch: int
    last_producer_id: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: tuple[tuple[str, int], ...]
    start_ms: int
    last_update_ms: int
    pending: TxnState | None


class _Kind(IntEnum):
    INIT = 0
    ADD = 1
    END = 2
    COMPLETE = 3
    EXPIRE = 4


@dataclass(slots=True)
class _Shard:
    coordinator_epoch: int
    loading: bool
    txns: dict[str, TxnMetadata] = field(default_factory=dict)


@dataclass(slots=True)
class _Waiter:
    token: object
    api: int
    version: int
    partitions: tuple[tuple[str, int], ...] = ()
    success_error: int = _NONE  # an InitProducerId that fenced an Ongoing transaction: CONCURRENT


@dataclass(slots=True)
class _Write:
    kind: _Kind
    partition: int
    coordinator_epoch: int
    txn_id: str = ""
    md: TxnMetadata | None = None
    transit: Transit | None = None
    waiter: _Waiter | None = None
    commit: bool = False
    epoch_fence: bool = False
    expired: tuple[tuple[str, int], ...] = ()  # EXPIRE: (txn id, producer epoch at prepare)
    retry_at: int = 0


@dataclass(slots=True)
class _MarkerWait:
    partition: int
    coordinator_epoch: int
    md: TxnMetadata
    transit: Transit


class TxnCoordinator:
    def __init__(self, config: TxnConfig, *, num_partitions: int,
                 allocate_producer_id: Callable[[], int]) -> None:
        if num_partitions <= 0:
            raise ValueError("num_partitions must be positive")
        self.config = config
        self.num_partitions = num_partitions
        self._allocate = allocate_producer_id
        self.timed_out = 0  # transactions aborted by the timeout sweep (metrics)
        self._shards: dict[int, _Shard] = {}
        self._writes: dict[int, _Write] = {}
        self._next_write_id = 1
        self._marker_waits: dict[str, _MarkerWait] = {}
        self._retries: list[_Write] = []
        self._next_abort_at: int | None = None
        self._next_expire_at: int | None = None

    # ------------------------------------------------------------ ownership

    def partition_for(self, txn_id: str) -> int:
        return _partition_for(txn_id, self.num_partitions)

    def begin_loading(self, p: int, coordinator_epoch: int) -> None:
        self._check_partition(p)
        self._drop_marker_work(p)
        self._shards[p] = _Shard(coordinator_epoch, loading=True)

    def replay(self, p: int, key: bytes, value: bytes | None) -> None:
        shard = self._shards.get(p)
        if shard is None or not shard.loading:
            raise RuntimeError(f"__transaction_state-{p} is not loading")
        txn_id = decode_key(key)
        if txn_id is None:
            return
        if value is None:
            shard.txns.pop(txn_id, None)
            return
        v = decode_value(value)
        if v.state in (_S.DEAD, _S.PREPARE_EPOCH_FENCE):
            raise RecordError(f"{txn_id}: state {v.state.kafka_name} is never written")
        shard.txns[txn_id] = TxnMetadata.from_log(txn_id, v)

    def finish_loading(self, p: int, now_ms: int) -> TxnOutcome:
        shard = self._shards.get(p)
        if shard is None or not shard.loading:
            raise RuntimeError(f"__transaction_state-{p} is not loading")
        shard.loading = False
        if self._next_abort_at is None:
            self._next_abort_at = now_ms + self.config.abort_timed_out_interval_ms
        if self._next_expire_at is None:
            self._next_expire_at = now_ms + self.config.remove_expired_interval_ms
        out = TxnOutcome()
        for txn_id in sorted(shard.txns):
            md = shard.txns[txn_id]
            if md.state in PREPARING:
                self._send_markers(out, p, shard, md, md.prepare_complete(now_ms))
        return out

    def unload(self, p: int) -> TxnOutcome:
        out = TxnOutcome()
        self._shards.pop(p, None)
        self._drop_marker_work(p)
        for write_id in [w for w, pw in self._writes.items() if pw.partition == p]:
            pw = self._writes.pop(write_id)
            if pw.waiter is not None:
                self._reply(out, pw.waiter, ErrorCode.NOT_COORDINATOR)
        return out

    def status_error(self, txn_id: str) -> int | None:
        return self._lookup(txn_id)[0]

    # ------------------------------------------------------------ InitProducerId

    def init_producer_id(self, token: object, version: int, txn_id: str | None, timeout_ms: int,
                         producer_id: int, producer_epoch: int, now_ms: int) -> TxnOutcome:
        out = TxnOutcome()
        waiter = _Waiter(token, INIT_PRODUCER_ID, version)
        if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
            return self._reply(out, waiter, ErrorCode.INVALID_REQUEST)
        if txn_id is None:
            try:
                pid = self._allocate()
            except PidAllocationError as e:
                return self._reply(out, waiter, e.error_code)
            out.replies.append((token, _init_body(_NONE, pid, 0)))
            return out
        if not txn_id:
            return self._reply(out, waiter, ErrorCode.INVALID_REQUEST)
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return self._reply(out, waiter, ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        err, shard = self._lookup(txn_id)
        if shard is None:
            return self._reply(out, waiter, err)
        md = shard.txns.get(txn_id)
        if md is None:
            try:
                md = TxnMetadata.new(txn_id, self._allocate(), timeout_ms, now_ms)
            except PidAllocationError as e:
                return self._reply(out, waiter, e.error_code)
            shard.txns[txn_id] = md
        expected = None if producer_id == NO_PRODUCER_ID else (producer_id, producer_epoch)
        p = self.partition_for(txn_id)

        if md.pending is not None:
            return self._reply(out, waiter, ErrorCode.CONCURRENT_TRANSACTIONS)
        if expected is not None and not (
                md.producer_epoch == NO_PRODUCER_EPOCH or expected[0] == md.producer_id
                or (expected[0] == md.last_producer_id and epoch_exhausted(expected[1]))):
            return self._reply(out, waiter, ErrorCode.PRODUCER_FENCED)
        if md.state in PREPARING:
            return self._reply(out, waiter, ErrorCode.CONCURRENT_TRANSACTIONS)
        if md.state is _S.ONGOING:
            if md.producer_epoch == EPOCH_MAX and not md.failed_epoch_fence:
                return self._reply(out, waiter, ErrorCode.UNKNOWN_SERVER_ERROR)  # Kafka: IllegalStateException
            fence = md.prepare_fence_epoch()
            waiter.success_error = int(ErrorCode.CONCURRENT_TRANSACTIONS)
            error = self._end(out, p, shard, md, fence.producer_id, fence.producer_epoch, False, False, waiter,
                              now_ms)
            if error is not None:
                self._reply(out, waiter, error)
            return out
        # Empty, CompleteCommit, CompleteAbort
        if epoch_exhausted(md.producer_epoch) and (expected is None or expected[1] == md.producer_epoch):
            try:
                new_pid = self._allocate()
            except PidAllocationError as e:
                return self._reply(out, waiter, e.error_code)
            transit = md.prepare_rotation(new_pid, timeout_ms, now_ms, expected is not None)
        else:
            result = md.prepare_increment_epoch(timeout_ms, None if expected is None else expected[1], now_ms)
            if not isinstance(result, Transit):
                return self._reply(out, waiter, result)
            transit = result
        self._append(out, _Write(_Kind.INIT, p, shard.coordinator_epoch, txn_id, md, transit, waiter))
        return out

    # ------------------------------------------------------------ AddPartitionsToTxn / AddOffsetsToTxn

    def add_partitions(self, token: object, version: int, txn_id: str, producer_id: int, epoch: int,
                       partitions: list[tuple[str, int]], now_ms: int) -> TxnOutcome:
        parts = tuple(sorted(set(partitions)))
        return self._add(_Waiter(token, ADD_PARTITIONS_TO_TXN, version, parts), txn_id, producer_id, epoch,
                         now_ms)

    def add_offsets(self, token: object, version: int, txn_id: str, producer_id: int, epoch: int,
                    offsets_partition: tuple[str, int], now_ms: int) -> TxnOutcome:
        return self._add(_Waiter(token, ADD_OFFSETS_TO_TXN, version, (offsets_partition,)), txn_id, producer_id,
                         epoch, now_ms)

    def _add(self, waiter: _Waiter, txn_id: str, producer_id: int, epoch: int, now_ms: int) -> TxnOutcome:
        out = TxnOutcome()
        if not txn_id:
            return self._reply(out, waiter, ErrorCode.INVALID_REQUEST)
        err, shard = self._lookup(txn_id)
        if shard is None:
            return self._reply(out, waiter, err)
        md = shard.txns.get(txn_id)
        if md is None or md.producer_id != producer_id:
            return self._reply(out, waiter, ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if md.producer_epoch != epoch:
            return self._reply(out, waiter, ErrorCode.PRODUCER_FENCED)
        if md.pending is not None or md.state in PREPARING:
            return self._reply(out, waiter, ErrorCode.CONCURRENT_TRANSACTIONS)
        added = frozenset(waiter.partitions)
        if md.state is _S.ONGOING and added <= md.partitions:
            return self._reply(out, waiter, ErrorCode.NONE)
        transit = md.prepare_add_partitions(added, now_ms)
        p = self.partition_for(txn_id)
        self._append(out, _Write(_Kind.ADD, p, shard.coordinator_epoch, txn_id, md, transit, waiter))
        return out

    # ------------------------------------------------------------ EndTxn

    def end_txn(self, token: object, version: int, txn_id: str, producer_id: int, epoch: int, commit: bool,
                now_ms: int) -> TxnOutcome:
        out = TxnOutcome()
        waiter = _Waiter(token, END_TXN, version)
        if not txn_id:
            return self._reply(out, waiter, ErrorCode.INVALID_REQUEST)
        err, shard = self._lookup(txn_id)
        if shard is None:
            return self._reply(out, waiter, err)
        md = shard.txns.get(txn_id)
        if md is None:
            return self._reply(out, waiter, ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        error = self._end(out, self.partition_for(txn_id), shard, md, producer_id, epoch, commit, True, waiter,
                          now_ms)
        if error is not None:
            self._reply(out, waiter, error)
        return out

    def _end(self, out: TxnOutcome, p: int, shard: _Shard, md: TxnMetadata, producer_id: int, epoch: int,
             commit: bool, from_client: bool, waiter: _Waiter | None, now_ms: int) -> int | None:
        """Kafka's endTransaction up to the Prepare* append; an error code, or None once a write is out."""
        error = self._end_error(md, producer_id, epoch, commit, from_client)
        if error is not None:
            if md.pending is _S.PREPARE_EPOCH_FENCE:
                md.pending = None  # unreachable (the fence carries md's own ids) but never leave it set
            return error
        epoch_fence = False
        if not commit and md.pending is _S.PREPARE_EPOCH_FENCE:
            epoch_fence = True
            md.pending = None
            md.producer_epoch = epoch
            md.last_producer_epoch = NO_PRODUCER_EPOCH
        transit = md.prepare_end(_S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT, now_ms)
        self._append(out, _Write(_Kind.END, p, shard.coordinator_epoch, md.txn_id, md, transit, waiter,
                                 commit=commit, epoch_fence=epoch_fence))
        return None

    @staticmethod
    def _end_error(md: TxnMetadata, producer_id: int, epoch: int, commit: bool, from_client: bool) -> int | None:
        if md.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if (from_client and epoch != md.producer_epoch) or epoch < md.producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if md.pending is not None and md.pending is not _S.PREPARE_EPOCH_FENCE:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        state = md.state
        if state is _S.ONGOING:
            return None
        if state is _S.COMPLETE_COMMIT:
            return ErrorCode.NONE if commit else ErrorCode.INVALID_TXN_STATE
        if state is _S.COMPLETE_ABORT:
            return ErrorCode.INVALID_TXN_STATE if commit else ErrorCode.NONE
        if state is _S.PREPARE_COMMIT:
            return ErrorCode.CONCURRENT_TRANSACTIONS if commit else ErrorCode.INVALID_TXN_STATE
        if state is _S.PREPARE_ABORT:
            return ErrorCode.INVALID_TXN_STATE if commit else ErrorCode.CONCURRENT_TRANSACTIONS
        if state is _S.EMPTY:
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.UNKNOWN_SERVER_ERROR  # Dead / PrepareEpochFence are never current states

    # ------------------------------------------------------------ KIP-890 part 1 verification

    def verify(self, txn_id: str, producer_id: int, epoch: int, topic: str, partition: int) -> int:
        if not txn_id:
            return int(ErrorCode.INVALID_REQUEST)
        err, shard = self._lookup(txn_id)
        if shard is None:
            return int(err)
        md = shard.txns.get(txn_id)
        if md is None or md.producer_id != producer_id:
            return int(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if md.producer_epoch != epoch:
            return int(ErrorCode.PRODUCER_FENCED)
        if md.state in PREPARING:
            return int(ErrorCode.CONCURRENT_TRANSACTIONS)
        return _NONE if (topic, partition) in md.partitions else int(TRANSACTION_ABORTABLE)

    # ------------------------------------------------------------ durability callbacks

    def write_done(self, write_id: int, error: int | None, now_ms: int) -> TxnOutcome:
        out = TxnOutcome()
        pw = self._writes.pop(write_id, None)
        if pw is None:
            return out
        if pw.kind is _Kind.EXPIRE:
            self._expire_done(pw, error)
            return out
        owned, md = self._owner_of(pw)
        if error is not None:
            mapped = append_error(error)
            if pw.kind is _Kind.COMPLETE:
                if owned is not None and md is pw.md:
                    pw.retry_at = now_ms + self.config.complete_retry_backoff_ms
                    self._retries.append(pw)
                return out
            if owned is not None and md is pw.md:
                md.pending = None
                if pw.epoch_fence:
                    md.failed_epoch_fence = True
            if pw.waiter is not None:
                self._reply(out, pw.waiter, mapped)
            return out
        if owned is None or md is not pw.md:
            if pw.waiter is not None:
                self._reply(out, pw.waiter, self._late_error(pw))
            return out
        md.complete(pw.transit)
        if pw.kind is _Kind.INIT:
            if pw.waiter is not None:
                out.replies.append((pw.waiter.token,
                                    _init_body(_NONE, pw.transit.producer_id, pw.transit.producer_epoch)))
        elif pw.kind is _Kind.ADD:
            if pw.waiter is not None:
                self._reply(out, pw.waiter, ErrorCode.NONE)
        elif pw.kind is _Kind.END:
            self._prepared(out, pw, owned, md, now_ms)
        return out

    def _prepared(self, out: TxnOutcome, pw: _Write, shard: _Shard, md: TxnMetadata, now_ms: int) -> None:
        """The Prepare* record is durable: answer, then send the markers (Kafka's sendTxnMarkersCallback)."""
        t = pw.transit
        if md.producer_id != t.producer_id:
            error: int | None = ErrorCode.INVALID_PRODUCER_ID_MAPPING
        elif md.producer_epoch != t.producer_epoch:
            error = ErrorCode.PRODUCER_FENCED
        elif md.pending is not None:
            error = ErrorCode.CONCURRENT_TRANSACTIONS
        elif md.state is not (_S.PREPARE_COMMIT if pw.commit else _S.PREPARE_ABORT):
            error = ErrorCode.INVALID_TXN_STATE
        else:
            error = None
        if error is not None:
            if pw.waiter is not None:
                self._reply(out, pw.waiter, error)
            return
        complete = md.prepare_complete(now_ms)
        if pw.waiter is not None:
            self._reply(out, pw.waiter, pw.waiter.success_error)
        self._send_markers(out, pw.partition, shard, md, complete)

    def markers_done(self, txn_id: str, producer_id: int, epoch: int, now_ms: int) -> TxnOutcome:
        out = TxnOutcome()
        wait = self._marker_waits.get(txn_id)
        if wait is None or wait.md.producer_id != producer_id or wait.md.producer_epoch != epoch:
            return out
        del self._marker_waits[txn_id]
        shard = self._shards.get(wait.partition)
        if (shard is None or shard.loading or shard.coordinator_epoch != wait.coordinator_epoch
                or shard.txns.get(txn_id) is not wait.md):
            return out
        wait.md.partitions = frozenset()  # Kafka removes each partition as its marker lands
        self._append(out, _Write(_Kind.COMPLETE, wait.partition, wait.coordinator_epoch, txn_id, wait.md,
                                 wait.transit))
        return out

    def _send_markers(self, out: TxnOutcome, p: int, shard: _Shard, md: TxnMetadata, complete: Transit) -> None:
        if not md.partitions:
            self._append(out, _Write(_Kind.COMPLETE, p, shard.coordinator_epoch, md.txn_id, md, complete))
            return
        self._marker_waits[md.txn_id] = _MarkerWait(p, shard.coordinator_epoch, md, complete)
        out.markers.append(MarkerTask(md.txn_id, md.producer_id, md.producer_epoch,
                                      md.state is _S.PREPARE_COMMIT, shard.coordinator_epoch,
                                      sorted(md.partitions)))

    # ------------------------------------------------------------ timers

    def tick(self, now_ms: int) -> TxnOutcome:
        out = TxnOutcome()
        if self._retries:
            due = [pw for pw in self._retries if pw.retry_at <= now_ms]
            self._retries = [pw for pw in self._retries if pw.retry_at > now_ms]
            for pw in due:
                owned, md = self._owner_of(pw)
                if owned is not None and md is pw.md and md.pending is pw.transit.state:
                    self._append(out, _Write(_Kind.COMPLETE, pw.partition, pw.coordinator_epoch, pw.txn_id, md,
                                             pw.transit))
        if self._next_abort_at is not None and now_ms >= self._next_abort_at:
            self._next_abort_at = now_ms + self.config.abort_timed_out_interval_ms
            self._abort_timed_out(out, now_ms)
        if self._next_expire_at is not None and now_ms >= self._next_expire_at:
            self._next_expire_at = now_ms + self.config.remove_expired_interval_ms
            self._expire(out, now_ms)
        return out

    def next_deadline(self) -> int | None:
        times = [pw.retry_at for pw in self._retries]
        if self._shards:
            times += [t for t in (self._next_abort_at, self._next_expire_at) if t is not None]
        return min(times) if times else None

    def _abort_timed_out(self, out: TxnOutcome, now_ms: int) -> None:
        for p in sorted(self._shards):
            shard = self._shards[p]
            if shard.loading:
                continue
            timed_out = [md for _, md in sorted(shard.txns.items())
                         if md.pending is None and md.state is _S.ONGOING and md.start_ms + md.timeout_ms < now_ms]
            for md in timed_out:
                if md.producer_epoch == EPOCH_MAX and not md.failed_epoch_fence:
                    continue
                self.timed_out += 1
                fence = md.prepare_fence_epoch()
                self._end(out, p, shard, md, fence.producer_id, fence.producer_epoch, False, False, None, now_ms)

    def _expire(self, out: TxnOutcome, now_ms: int) -> None:
        cutoff = now_ms - self.config.id_expiration_ms
        for p in sorted(self._shards):
            shard = self._shards[p]
            if shard.loading:
                continue
            expired = []
            for txn_id in sorted(shard.txns):
                md = shard.txns[txn_id]
                if md.pending is None and md.state in EXPIRATION_ALLOWED and md.last_update_ms <= cutoff:
                    md.prepare_dead()
                    expired.append((txn_id, md.producer_epoch))
            for i in range(0, len(expired), TOMBSTONES_PER_WRITE):
                chunk = tuple(expired[i:i + TOMBSTONES_PER_WRITE])
                write_id = self._new_write_id()
                self._writes[write_id] = _Write(_Kind.EXPIRE, p, shard.coordinator_epoch, expired=chunk)
                out.writes.append(TxnWrite(write_id, p, [(encode_key(t), None) for t, _ in chunk]))

    def _expire_done(self, pw: _Write, error: int | None) -> None:
        shard = self._shards.get(pw.partition)
        if shard is None or shard.loading:
            return
        for txn_id, epoch in pw.expired:
            md = shard.txns.get(txn_id)
            if md is None:
                continue
            if (error is None and shard.coordinator_epoch == pw.coordinator_epoch and md.pending is _S.DEAD
                    and md.producer_epoch == epoch):
                del shard.txns[txn_id]
            elif md.pending is _S.DEAD:
                md.pending = None

    # ------------------------------------------------------------ Describe / List / views

    def describe(self, txn_ids: list[str]) -> list[dict]:
        return [self._describe_one(txn_id) for txn_id in txn_ids]

    def _describe_one(self, txn_id: str) -> dict:
        entry = {"error_code": _NONE, "transactional_id": txn_id, "transaction_state": "",
                 "transaction_timeout_ms": 0, "transaction_start_time_ms": 0, "producer_id": 0,
                 "producer_epoch": 0, "topics": []}
        if not txn_id:
            entry["error_code"] = int(ErrorCode.INVALID_REQUEST)
            return entry
        err, shard = self._lookup(txn_id)
        if shard is None:
            entry["error_code"] = int(err)
            return entry
        md = shard.txns.get(txn_id)
        if md is None or md.state is _S.DEAD:
            entry["error_code"] = int(TRANSACTIONAL_ID_NOT_FOUND)
            return entry
        topics: dict[str, list[int]] = {}
        for topic, part in sorted(md.partitions):
            topics.setdefault(topic, []).append(part)
        entry.update(transaction_state=md.state.kafka_name, transaction_timeout_ms=md.timeout_ms,
                     transaction_start_time_ms=md.start_ms, producer_id=md.producer_id,
                     producer_epoch=md.producer_epoch,
                     topics=[{"topic": t, "partitions": ps} for t, ps in topics.items()])
        return entry

    def list_transactions(self, state_filters: Iterable[str], producer_id_filters: Iterable[int],
                          duration_filter_ms: int, now_ms: int) -> dict:
        if any(shard.loading for shard in self._shards.values()):
            return {"error_code": int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), "unknown_state_filters": [],
                    "transaction_states": []}
        names = list(dict.fromkeys(state_filters))
        pids = set(producer_id_filters)
        states = {BY_NAME[n] for n in names if n in BY_NAME}
        unknown = [n for n in names if n not in BY_NAME]
        found = []
        for md in self._all():
            if md.state is _S.DEAD:
                continue
            if pids and md.producer_id not in pids:
                continue
            if names and md.state not in states:
                continue
            if duration_filter_ms >= 0 and now_ms - md.start_ms <= duration_filter_ms:
                continue
            found.append({"transactional_id": md.txn_id, "producer_id": md.producer_id,
                          "transaction_state": md.state.kafka_name})
        return {"error_code": _NONE, "unknown_state_filters": unknown, "transaction_states": found}

    def ongoing(self) -> list[TxnView]:
        """Snapshots of the transactions that are open (Ongoing) or being completed (Prepare*)."""
        return [_view(md) for md in self._all() if md.state is _S.ONGOING or md.state in PREPARING]

    def view(self, txn_id: str) -> TxnView | None:
        shard = self._shards.get(self.partition_for(txn_id))
        md = None if shard is None else shard.txns.get(txn_id)
        return None if md is None else _view(md)

    # ------------------------------------------------------------ internals

    def _all(self) -> Iterator[TxnMetadata]:
        for p in sorted(self._shards):
            shard = self._shards[p]
            if not shard.loading:
                for txn_id in sorted(shard.txns):
                    yield shard.txns[txn_id]

    def _check_partition(self, p: int) -> None:
        if not 0 <= p < self.num_partitions:
            raise ValueError(f"__transaction_state has no partition {p} (of {self.num_partitions})")

    def _lookup(self, txn_id: str) -> tuple[int | None, _Shard | None]:
        shard = self._shards.get(self.partition_for(txn_id))
        if shard is None:
            return int(ErrorCode.NOT_COORDINATOR), None
        if shard.loading:
            return int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), None
        return None, shard

    def _owner_of(self, pw: _Write) -> tuple[_Shard | None, TxnMetadata | None]:
        """The partition and metadata a finished write may still apply to (same coordinator epoch)."""
        shard = self._shards.get(pw.partition)
        if shard is None or shard.loading or shard.coordinator_epoch != pw.coordinator_epoch:
            return None, None
        return shard, shard.txns.get(pw.txn_id)

    def _late_error(self, pw: _Write) -> int:
        """Why a durable write no longer applies: still loading, or another coordinator (epoch) owns it."""
        shard = self._shards.get(pw.partition)
        if shard is not None and shard.loading:
            return int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        return int(ErrorCode.NOT_COORDINATOR)

    def _drop_marker_work(self, p: int) -> None:
        for txn_id in [t for t, w in self._marker_waits.items() if w.partition == p]:
            del self._marker_waits[txn_id]
        self._retries = [pw for pw in self._retries if pw.partition != p]

    def _new_write_id(self) -> int:
        write_id = self._next_write_id
        self._next_write_id += 1
        return write_id

    def _append(self, out: TxnOutcome, pw: _Write) -> None:
        assert pw.transit is not None
        try:
            record = (encode_key(pw.txn_id), encode_value(pw.transit.log_value()))
        except RecordError:
            if pw.md is not None and pw.md.pending is pw.transit.state:
                pw.md.pending = None
            raise
        write_id = self._new_write_id()
        self._writes[write_id] = pw
        out.writes.append(TxnWrite(write_id, pw.partition, [record]))

    @staticmethod
    def _reply(out: TxnOutcome, waiter: _Waiter, error: int) -> TxnOutcome:
        code = client_error(waiter.api, waiter.version, error)
        if waiter.api == INIT_PRODUCER_ID:
            body = _init_body(code, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        elif waiter.api == ADD_PARTITIONS_TO_TXN:
            topics: dict[str, list[dict]] = {}
            for topic, part in waiter.partitions:
                topics.setdefault(topic, []).append({"partition_index": part, "partition_error_code": code})
            body = {"results_by_topic_v3_and_below": [{"name": t, "results_by_partition": r}
                                                      for t, r in topics.items()]}
        else:
            body = {"error_code": code}
        out.replies.append((waiter.token, body))
        return out


def _init_body(error: int, producer_id: int, producer_epoch: int) -> dict:
    return {"error_code": int(error), "producer_id": producer_id, "producer_epoch": producer_epoch}


def _view(md: TxnMetadata) -> TxnView:
    return TxnView(md.txn_id, md.producer_id, md.producer_epoch, md.last_producer_id, md.last_producer_epoch,
                   md.timeout_ms, md.state, tuple(sorted(md.partitions)), md.start_ms, md.last_update_ms,
                   md.pending)

