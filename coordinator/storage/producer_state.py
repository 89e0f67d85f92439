"""Idempotent producers: per partition, what each producer id last appended (Kafka's ProducerStateManager,
reduced to what deduplication needs).

Rules (Kafka's ``ProducerAppendInfo.checkSequence``):
- A batch without a producer id (-1) is never checked.
- Per producer id we keep its epoch and its last ``BATCHES_KEPT`` (5) batches' sequence ranges with the
  offsets they got. A batch whose (first, last) sequence equals a kept one is a retry: it is answered with
  the original base offset and not appended again.
- An epoch below the kept one: INVALID_PRODUCER_EPOCH. A higher epoch must start at sequence 0 (else
  OUT_OF_ORDER_SEQUENCE_NUMBER) and forgets the older epoch's batches. In the same epoch the first sequence
  must follow the last kept one (int32 wraps to 0); otherwise OUT_OF_ORDER_SEQUENCE_NUMBER.
- At most ``MAX_PRODUCERS`` ids a partition (memory stays bounded whatever ids clients send); past it the
  id added longest ago is forgotten, as Kafka expires idle producer ids.
- An unknown producer id is accepted at any sequence (its state may have gone with retention, as Kafka
  accepts after KIP-360).
- The state is rebuilt from the batch headers in the log (``observe``), so it is as durable as the log: a
  server restarted between an append and the client's retry still finds the first append. ``observe``
  replays a scan of the log's tail; ``check`` is pure; ``record`` is called once the append succeeded.
``ProducerStates`` is pure; ``scan_producer_states`` reads a partition log's tail.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from protocol.errors import ErrorCode
from protocol.record_batch import BatchHeader, CorruptBatchError, parse_header, split_batches

if TYPE_CHECKING:
    from coordinator.storage.log import PartitionLog

BATCHES_KEPT = 5
MAX_PRODUCERS = 10_000  # per partition; past it the least recently added producer id is forgotten
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


class Duplicate(NamedTuple):
    """A retried batch already in the log: answer its original offsets."""
    base_offset: int
    last_offset: int


def _last_seq(first: int, count: int) -> int:
    last = first + count - 1
    return last - _INT32_MAX - 1 if last > _INT32_MAX else last


class ProducerStates:
    """The producer ids of one partition."""

    __slots__ = ("_producers",)

    def __init__(self) -> None:
        self._producers: dict[int, _Producer] = {}

    def __len__(self) -> int:
        return len(self._producers)

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
            return None if h.base_sequence == 0 else ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        last = _last_seq(h.base_sequence, h.record_count)
        for b in p.batches:
            if b.first_seq == h.base_sequence and b.last_seq == last:
                return Duplicate(b.base_offset, b.last_offset)
        if not p.batches:
            return None
        expected = 0 if p.batches[-1].last_seq == _INT32_MAX else p.batches[-1].last_seq + 1
        return None if h.base_sequence == expected else ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER

    def record(self, h: BatchHeader, base_offset: int) -> None:
        """``h`` was appended at ``base_offset`` (also used to replay the log's tail)."""
        if h.producer_id < 0:
            return
        p = self._producers.get(h.producer_id)
        if p is None or h.producer_epoch != p.epoch:
            if p is not None and h.producer_epoch < p.epoch:
                return
            self._producers.pop(h.producer_id, None)
            if len(self._producers) >= MAX_PRODUCERS:
                del self._producers[next(iter(self._producers))]
            p = self._producers[h.producer_id] = _Producer(h.producer_epoch)
        p.batches.append(Appended(h.base_sequence, _last_seq(h.base_sequence, h.record_count), base_offset,
                                  base_offset + h.last_offset_delta))

    observe = record


SCAN_TAILS = (2_000, 200, 20)  # offsets back from the log end, tried in turn
SCAN_MAX_BYTES = 32 << 20
_CHUNK = 1 << 20


def scan_producer_states(plog: PartitionLog, states: ProducerStates) -> None:
    """Replay the batch headers of the log's last records into ``states``: the last 2,000 offsets when they
    fit in 32 MiB, else the last 200, else 20 (a retry follows its first attempt closely; bounded I/O)."""
    end = plog.log_end_offset
    for tail in SCAN_TAILS:
        found: list[BatchHeader] = []
        offset, read = max(plog.log_start_offset, end - tail), 0
        while offset < end and read <= SCAN_MAX_BYTES:
            data = plog.read(offset, _CHUNK, upper_bound=end)
            if not data:
                break
            read += len(data)
            batches, _ = split_batches(data)
            for b in batches:
                try:
                    found.append(parse_header(b))
                except CorruptBatchError:
                    return
            if not batches:
                break
            offset = found[-1].base_offset + found[-1].last_offset_delta + 1
        if offset >= end or read == 0:
            for h in found:
                states.observe(h, h.base_offset)
            return
