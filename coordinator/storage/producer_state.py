"""Idempotent and transactional producers: per partition, what each producer id appended, its open
transaction, the last stable offset and the aborted transactions (Kafka's ``ProducerStateManager``,
``ProducerAppendInfo`` and ``ProducerStateEntry``).

Rules for a data batch (``check`` before the append, ``record`` once it succeeded; Kafka's ``ProducerAppendInfo``):
- A batch without a producer id (-1) is never checked. An unknown producer id is accepted at any sequence (its
  state may have gone with retention or expiry, as Kafka accepts after KIP-360).
- Per producer id we keep its epoch and its last ``BATCHES_KEPT`` (5) batches' sequence ranges with the
  offsets they got. A batch whose (first, last) sequence equals a kept one of the same epoch is a retry: it is
  answered with the original offsets (``Duplicate``) and not appended again.
- An epoch below the kept one: INVALID_PRODUCER_EPOCH. A higher epoch must start at sequence 0 (else
  OUT_OF_ORDER_SEQUENCE_NUMBER) and forgets the older epoch's batches. In the same epoch the first sequence
  must follow the last kept one (int32 wraps to 0), else OUT_OF_ORDER_SEQUENCE_NUMBER; with no batch kept for
  the epoch (only a marker seen) any sequence is accepted.
- Once those pass: a non-transactional batch from a producer id with an open transaction is INVALID_TXN_STATE;
  a transactional batch from one without opens a transaction at its base offset.
Rules for a marker (``check_marker``, then ``record_marker`` with the marker's offset):
- An epoch below the kept one: INVALID_PRODUCER_EPOCH; a coordinator epoch below the kept one:
  TRANSACTION_COORDINATOR_FENCED. A marker of a higher epoch forgets the kept batches.
- It closes the producer id's open transaction and returns it as a ``CompletedTxn``; an ABORT goes into the
  aborted index with Kafka's last stable offset (txn_index.py). A marker with no open transaction (an "empty"
  marker) returns None and changes only the kept epoch, coordinator epoch and timestamp.
Offsets (Kafka's ``firstUnstableOffset``/``lastStableOffset``):
- ``first_unstable_offset()`` is the first offset of the oldest open transaction (None without one).
- ``last_stable_offset(hw)`` is min(that, the first offset of any completed transaction whose marker is not yet
  below ``hw``, hw): a transaction is readable by read_committed consumers only once its marker is below the high
  watermark (Kafka's unreplicated transactions; here, not yet durable). It forgets completed transactions whose
  marker is below ``hw``, so ``hw`` must not go backwards between calls: pass the one high watermark readers
  are bounded by (cluster mode: the replicated one). A rebuild keeps them all until that first call.
- ``aborted_between(fetch_offset, upper_bound)`` lists (producer id, first offset) of the aborted transactions a
  read_committed Fetch returns.
Memory and time:
- At most ``MAX_PRODUCERS`` ids a partition; past it the least recently active id *without an open transaction*
  is forgotten (an id with one is never forgotten: its marker must find it, or the LSO could never move again).
  ``expire_producers`` forgets ids idle for ``producer.id.expiration.ms``, never one with an open transaction.
- Completed transactions wait for the high watermark in a table of at most ``MAX_UNREPLICATED`` (the oldest
  goes first if nobody reports the high watermark); the aborted index costs 32 bytes an aborted transaction.
- ``truncate_before(log_start)`` forgets aborted transactions wholly below the log start (retention).
Rebuild: ``scan_producer_states`` replays the batch headers of the whole log from its start (markers are the one
batch whose record is read), so state is as durable as the log and a rebuilt state equals the incremental one
(a transaction whose first batches went with retention restarts at its first retained batch). The replay reads
every byte of the log once, 1 MiB at a time (about 4 us a batch in Python): callers run it off the event loop.
``ProducerStates`` is pure (time comes in as ``now_ms``); ``scan_producer_states`` reads a partition log.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from protocol.control_batch import parse_marker
from protocol.errors import ErrorCode
from protocol.record_batch import (
    CONTROL_MASK,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MIN_BATCH_LENGTH,
    BatchHeader,
    CorruptBatchError,
)

from .txn_index import AbortedTxn, AbortedTxnIndex, CompletedTxn

if TYPE_CHECKING:
    from coordinator.storage.log import PartitionLog

__all__ = [
    "BATCHES_KEPT", "MAX_PRODUCERS", "AbortedTxn", "Appended", "CompletedTxn", "Duplicate", "OpenTxn",
    "ProducerInfo", "ProducerStates", "scan_producer_states",
]

BATCHES_KEPT = 5
MAX_PRODUCERS = 10_000  # per partition; past it the least recently active id without an open transaction goes
MAX_UNREPLICATED = 1_000  # completed transactions whose marker the high watermark has not passed yet
_INT32_MAX = 2**31 - 1


class Appended(NamedTuple):
    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int


@dataclass(slots=True)
class _Producer:
    epoch: int
    batches: deque[Appended] = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    txn_first_offset: int | None = None


class Duplicate(NamedTuple):
    """A retried batch already in the log: answer its original offsets."""
    base_offset: int
    last_offset: int


class OpenTxn(NamedTuple):
    """An open transaction (for tools: hanging-transaction searches)."""
    producer_id: int
    producer_epoch: int
    first_offset: int
    last_timestamp: int


class ProducerInfo(NamedTuple):
    """One producer id as DescribeProducers shows it (-1: none)."""
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


def _last_seq(first: int, count: int) -> int:
    last = first + count - 1
    return last - _INT32_MAX - 1 if last > _INT32_MAX else last


class ProducerStates:
    """The producer ids, open transactions and aborted transactions of one partition."""

    __slots__ = ("_aborted", "_ongoing", "_producers", "_unreplicated")

    def __init__(self) -> None:
        self._producers: dict[int, _Producer] = {}  # least recently active first
        self._ongoing: dict[int, int] = {}  # first offset -> producer id, in first-offset order (appends are)
        self._unreplicated: dict[int, int] = {}  # completed: first offset -> marker offset, until below the hw
        self._aborted = AbortedTxnIndex()

    def __len__(self) -> int:
        return len(self._producers)

    # ------------------------------------------------------------------ data batches

    def check(self, h: BatchHeader) -> int | Duplicate | None:
        """None to append; a ``Duplicate`` to answer without appending; or an error code."""
        if h.producer_id < 0:
            return None
        p = self._producers.get(h.producer_id)
        if p is None:
            return None
        if h.producer_epoch < p.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if h.producer_epoch > p.epoch:
            if h.base_sequence != 0:
                return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        else:
            last = _last_seq(h.base_sequence, h.record_count)
            for b in p.batches:
                if b.first_seq == h.base_sequence and b.last_seq == last:
                    return Duplicate(b.base_offset, b.last_offset)
            if p.batches:
                kept = p.batches[-1].last_seq
                if h.base_sequence != (0 if kept == _INT32_MAX else kept + 1):
                    return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        if p.txn_first_offset is not None and not h.is_transactional:
            return ErrorCode.INVALID_TXN_STATE
        return None

    def record(self, h: BatchHeader, base_offset: int) -> None:
        """``h`` (a data batch) was appended at ``base_offset`` (also used to replay the log)."""
        if h.producer_id < 0 or h.is_control:
            return
        p = self._touch(h.producer_id, h.producer_epoch)
        if h.producer_epoch < p.epoch:
            return
        if h.producer_epoch > p.epoch:
            p.epoch = h.producer_epoch
            p.batches.clear()
        p.batches.append(Appended(h.base_sequence, _last_seq(h.base_sequence, h.last_offset_delta + 1), base_offset,
                                  base_offset + h.last_offset_delta))
        p.last_timestamp = h.max_timestamp
        if h.is_transactional and p.txn_first_offset is None:
            p.txn_first_offset = base_offset
            self._ongoing[base_offset] = h.producer_id

    observe = record

    # ------------------------------------------------------------------ markers

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> int | None:
        """None when a marker of (``epoch``, ``coordinator_epoch``) may be appended, else an error code."""
        p = self._producers.get(producer_id)
        if p is None:
            return None
        if epoch < p.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if coordinator_epoch < p.coordinator_epoch:
            return ErrorCode.TRANSACTION_COORDINATOR_FENCED
        return None

    def record_marker(self, producer_id: int, epoch: int, coordinator_epoch: int, commit: bool, offset: int,
                      timestamp: int | None = None) -> CompletedTxn | None:
        """A marker was appended at ``offset``: the transaction it completed, or None for an empty marker."""
        p = self._touch(producer_id, epoch)
        if epoch != p.epoch:
            p.epoch = epoch
            p.batches.clear()
        p.coordinator_epoch = coordinator_epoch
        if timestamp is not None:
            p.last_timestamp = timestamp
        first, p.txn_first_offset = p.txn_first_offset, None
        if first is None:
            return None
        completed = CompletedTxn(producer_id, first, offset, not commit)
        if not commit:
            self._aborted.append(AbortedTxn(producer_id, first, offset, self._lso_after(completed)))
        del self._ongoing[first]
        if len(self._unreplicated) >= MAX_UNREPLICATED:  # the high watermark is not being reported
            del self._unreplicated[next(iter(self._unreplicated))]
        self._unreplicated[first] = offset
        return completed

    def _lso_after(self, txn: CompletedTxn) -> int:
        """Kafka's ``lastStableOffset(completedTxn)``: the oldest open transaction of another producer id."""
        for first, pid in self._ongoing.items():  # at most two steps: one open transaction per producer id
            if pid != txn.producer_id:
                return first
        return txn.last_offset + 1

    # ------------------------------------------------------------------ offsets and reads

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction."""
        return next(iter(self._ongoing), None)

    def last_stable_offset(self, high_watermark: int) -> int:
        """What read_committed consumers may read below (see the rules; forgets what ``high_watermark`` passed)."""
        self.on_high_watermark(high_watermark)
        lso = high_watermark
        first = next(iter(self._ongoing), None)
        if first is not None and first < lso:
            lso = first
        for first in self._unreplicated:
            if first < lso:
                lso = first
        return lso

    def on_high_watermark(self, high_watermark: int) -> None:
        """Forget completed transactions whose marker is below ``high_watermark``."""
        if self._unreplicated:
            self._unreplicated = {f: last for f, last in self._unreplicated.items() if last >= high_watermark}

    def aborted_between(self, fetch_offset: int, upper_bound: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of each aborted transaction overlapping [fetch_offset, upper_bound)."""
        return [(t.producer_id, t.first_offset) for t in self._aborted.collect(fetch_offset, upper_bound)]

    def aborted_transactions(self) -> list[AbortedTxn]:
        """The whole aborted index, in marker order."""
        return list(self._aborted)

    # ------------------------------------------------------------------ views

    def has_open_txn(self, producer_id: int, epoch: int | None = None) -> bool:
        """Whether ``producer_id`` (at ``epoch``, when given) has an open transaction here."""
        p = self._producers.get(producer_id)
        return p is not None and p.txn_first_offset is not None and (epoch is None or p.epoch == epoch)

    def open_transactions(self) -> list[OpenTxn]:
        """Open transactions, oldest first."""
        out = []
        for first, pid in self._ongoing.items():
            p = self._producers[pid]
            out.append(OpenTxn(pid, p.epoch, first, p.last_timestamp))
        return out

    def producers(self) -> list[ProducerInfo]:
        """Every producer id kept, least recently active first."""
        return [ProducerInfo(pid, p.epoch, p.batches[-1].last_seq if p.batches else -1, p.last_timestamp,
                             p.coordinator_epoch, -1 if p.txn_first_offset is None else p.txn_first_offset)
                for pid, p in self._producers.items()]

    # ------------------------------------------------------------------ memory and retention

    def _touch(self, producer_id: int, epoch: int) -> _Producer:
        """The producer's entry, now the most recently active (created, evicting one if full)."""
        p = self._producers.pop(producer_id, None)
        if p is None:
            self._evict(MAX_PRODUCERS - 1)
            p = _Producer(epoch)
        self._producers[producer_id] = p
        return p

    def _evict(self, keep: int) -> None:
        """Forget the least recently active ids without an open transaction until at most ``keep`` are left
        (ids with one are moved to the back; when all have one, none is forgotten)."""
        producers = self._producers
        for _ in range(len(producers)):
            if len(producers) <= keep:
                return
            pid = next(iter(producers))
            p = producers.pop(pid)
            if p.txn_first_offset is not None:
                producers[pid] = p

    def expire_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget ids idle for ``expiration_ms`` (never one with an open transaction); how many went."""
        idle = [pid for pid, p in self._producers.items()
                if p.txn_first_offset is None and now_ms - p.last_timestamp >= expiration_ms]
        for pid in idle:
            del self._producers[pid]
        return len(idle)

    def truncate_before(self, log_start_offset: int) -> None:
        """Retention moved the log start: forget aborted transactions wholly below it."""
        self._aborted.truncate_before(log_start_offset)
        if self._unreplicated:
            self._unreplicated = {f: last for f, last in self._unreplicated.items() if last >= log_start_offset}


# ---------------------------------------------------------------------- rebuild from the log

_CHUNK = 1 << 20


def scan_producer_states(plog: PartitionLog, states: ProducerStates) -> None:
    """Replay the whole log into ``states``, from its start to its end, 1 MiB at a time: data batch headers go to
    ``record``, markers to ``record_marker``. A corrupt batch stops the replay there (recovery cuts torn tails)."""
    end = plog.log_end_offset
    offset = plog.log_start_offset
    while offset < end:
        data = plog.read(offset, _CHUNK, upper_bound=end)
        if not data:
            return
        next_offset = _replay(data, states)
        if next_offset is None or next_offset <= offset:
            return
        offset = next_offset


def _replay(data: bytes, states: ProducerStates) -> int | None:
    """Replay the whole batches in ``data``; the offset after the last one, None if one was corrupt or none
    was whole."""
    unpack_from = HEADER.unpack_from
    total = len(data)
    pos = 0
    next_offset = None
    while total - pos >= HEADER_SIZE:
        fields = unpack_from(data, pos)
        base, length, _, magic, _, attributes, last_delta, _, max_ts, pid, epoch, _, count = fields
        stop = pos + LOG_OVERHEAD + length
        if magic != MAGIC or length < MIN_BATCH_LENGTH or last_delta < 0 or count < 0:
            return None
        if stop > total:
            break
        if pid >= 0:
            if attributes & CONTROL_MASK:
                try:
                    marker = parse_marker(data[pos:stop])
                except CorruptBatchError:
                    return None
                if marker is not None:
                    states.record_marker(pid, epoch, marker.coordinator_epoch, marker.commit, base, max_ts)
            else:
                states.record(BatchHeader(*fields), base)
        next_offset = base + last_delta + 1
        pos = stop
    return next_offset
