"""``__consumer_offsets`` as Kafka serves it to clients: readable by anyone, written only by the coordinator.

Rules:
- Fetch and ListOffsets serve the offsets partitions like a user topic's partitions (any client, any offset;
  earliest, latest, by time, max timestamp), and only below the high watermark. An offsets partition's high
  watermark advances when the journal fsync covering a group-commit round has returned
  (``PartitionLog.note_durable``), so no commit is readable before it is durable; that is the rule the
  topic logs follow. Produce to it stays refused (INVALID_TOPIC_EXCEPTION, topics.py). Other names starting
  with ``__`` stay unknown (``hidden``).
- ``__transaction_state`` is served the same way (Fetch, ListOffsets; Metadata names it when asked for by
  name): Kafka's TransactionLog key and value layouts, as kafka-console-consumer's formatter reads them.
- What is read is what the coordinator wrote (``coordinator.core.records``): Kafka's key and value layouts
  (OffsetCommitKey v1, OffsetCommitValue v1/v3, GroupMetadataKey v2, GroupMetadataValue v3) and its
  tombstones (null values) for deleted groups and for expired or deleted offsets, in commit order.
- Cluster mode: a partition is served only by its leader, as a user topic's (``ClusterTopics.lead_error``
  runs before anything here); elsewhere NOT_LEADER_OR_FOLLOWER.
- Waking long polls: a waiting Fetch wakes on ``TopicService.hw_advanced``, which group commit does not
  set (its path is left exactly as it is: a reader must never slow it). While a fetch of an offsets
  partition waits, one ``TailWatcher`` task compares the offsets partitions' high watermarks (the ones Fetch
  reads below: in cluster mode the replicated ones) every ``WATCH_INTERVAL_S`` and wakes the fetchers when
  one advanced; it stops when no such fetch waits any more
  (each is answered, its connection closed, or its deadline passed). Cost: one task, a read of at most
  ``offsets.topic.num.partitions`` integers a tick, and nothing while nobody waits.
- By-time lookups (``offset_for_timestamp``, ``offset_of_max_timestamp``): the log's own lookups stop at its
  recovery point, which for a journaled log lags the high watermark until the journal's next checkpoint.
  The durable tail between the two (at most a checkpoint's worth of journal) is scanned here, batch by
  batch. For any other log the two are equal and this adds nothing. ``upper`` (cluster mode: the
  replicated high watermark) bounds what they may answer: an offset at or past it is not answered (None).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import trio

from coordinator.storage.log import PartitionLog
from protocol.record_batch import UnsupportedCompressionError, decode_batch, parse_header, split_batches

if TYPE_CHECKING:
    from coordinator.runtime.dispatch import Slot

OFFSETS_TOPIC = "__consumer_offsets"  # groups.OFFSETS_TOPIC (not imported: groups imports the runtime)
WATCH_INTERVAL_S = 0.005
_TAIL_CHUNK = 1 << 20


TXN_TOPIC = "__transaction_state"  # transactions.TXN_TOPIC


def hidden(name: str) -> bool:
    """Whether Fetch/ListOffsets must answer a topic as unknown: internal names other than the offsets and the
    transaction state topics (both readable, in Kafka's layouts, as Kafka's tools read them)."""
    return name.startswith("__") and name not in (OFFSETS_TOPIC, TXN_TOPIC)


def reads_offsets_topic(fetch_body: dict) -> bool:
    return any(t.get("topic") == OFFSETS_TOPIC for t in fetch_body["topics"])


class TailWatcher:
    """Wakes waiting fetches when an offsets partition's high watermark advances (see the module rules)."""

    def __init__(self, high_watermarks: Callable[[], list[int]], wake: Callable[[], None]) -> None:
        self._high_watermarks = high_watermarks  # of the offsets partitions, as Fetch reads below them
        self._wake = wake
        self._waiting: list[tuple[Slot, float]] = []  # fetches of offsets partitions that wait, their deadlines
        self._running = False

    def watch(self, nursery: trio.Nursery, slot: Slot, deadline: float) -> None:
        """The fetch answering ``slot`` reads an offsets partition and waits until ``deadline`` (trio time)."""
        self._waiting.append((slot, deadline))
        if not self._running:
            self._running = True
            nursery.start_soon(self._run)

    def _still_waiting(self) -> bool:
        now = trio.current_time()
        self._waiting = [(s, d) for s, d in self._waiting if not s.done and not s.conn.closed and d >= now]
        return bool(self._waiting)

    async def _run(self) -> None:
        try:
            seen = self._high_watermarks()
            while self._still_waiting():
                await trio.sleep(WATCH_INTERVAL_S)
                now = self._high_watermarks()
                if now != seen:
                    seen = now
                    self._wake()
        finally:
            self._running = False


def _durable_tail(plog: PartitionLog, end: int) -> Iterator[tuple[int, int, memoryview]]:
    """(base offset, max timestamp, batch) of each batch between the recovery point and ``end``."""
    offset = plog.recovery_point
    while offset < end:
        data = plog.read(offset, _TAIL_CHUNK, upper_bound=end)
        if not data:
            return
        batches, _ = split_batches(data)
        if not batches:
            return
        for batch in batches:
            header = parse_header(batch)
            if header.base_offset + header.last_offset_delta >= offset:
                yield header.base_offset, header.max_timestamp, batch
        offset = max(offset, header.base_offset + header.last_offset_delta + 1)


def _first_at(batch: memoryview, timestamp: int, log_start: int) -> tuple[int, int]:
    """(offset, timestamp) of the batch's first record at or after ``timestamp`` (as PartitionLog does)."""
    try:
        header, records = decode_batch(bytes(batch), verify_crc=False)
    except UnsupportedCompressionError:
        header = parse_header(batch)
        return header.base_offset, header.max_timestamp
    for rec in records:
        if rec.timestamp >= timestamp and rec.offset >= log_start:
            return rec.offset, rec.timestamp
    return header.base_offset, header.max_timestamp


def _below(found: tuple[int, int] | None, upper: int) -> tuple[int, int] | None:
    return found if found is not None and found[0] < upper else None


def offset_for_timestamp(plog: PartitionLog, timestamp: int, upper: int | None = None) -> tuple[int, int] | None:
    """ListOffsets by time: the first durable record with a timestamp >= ``timestamp``, or None."""
    end = plog.high_watermark if upper is None else min(upper, plog.high_watermark)
    found = plog.offset_for_timestamp(timestamp)
    if found is not None or end <= plog.recovery_point:
        return _below(found, end)
    for _, max_ts, batch in _durable_tail(plog, end):
        if max_ts >= timestamp:
            return _below(_first_at(batch, timestamp, plog.log_start_offset), end)
    return None


def offset_of_max_timestamp(plog: PartitionLog, upper: int | None = None) -> tuple[int, int] | None:
    """ListOffsets -3 (KIP-734): the first durable record carrying the largest timestamp, or None."""
    end = plog.high_watermark if upper is None else min(upper, plog.high_watermark)
    found = plog.offset_of_max_timestamp()
    if end <= plog.recovery_point:
        return _below(found, end)
    best: tuple[int, memoryview] | None = None
    for _, max_ts, batch in _durable_tail(plog, end):
        if max_ts >= 0 and (best is None or max_ts > best[0]):
            best = (max_ts, batch)
    if best is None or (found is not None and found[1] >= best[0]):
        return _below(found, end)
    return _below(_first_at(best[1], best[0], plog.log_start_offset), end)
