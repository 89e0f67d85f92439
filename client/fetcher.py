"""Fetcher: the consumer's fetch loop (seed 003), usable standalone with manual assignment.

Rules and invariants:
- State: a ``client.offsets.Positions`` (assigned partitions, next offset to consume, paused set) — the
  consumer's own when it drives the fetcher, or a private one for ``assign()``/``seek()``/``pause()``.
- ``send_fetches()`` sends one Fetch request per leader node that has no fetch in flight, covering the
  node's *fetchable* partitions: assigned, not paused, position known, and with nothing buffered (neither in
  the completed-fetch queue nor the partition being drained). Version: the highest both sides support,
  at most 12. It never waits for a response.
- A finished request becomes one ``CompletedFetch`` per partition, queued FIFO with the offset it was
  fetched from; nothing is parsed until ``poll`` reaches it.
- ``poll(max_records, timeout_ms)`` returns up to ``max_records`` records from the queue, waiting at most
  ``timeout_ms`` for a response when nothing is buffered; it sends the next fetches *before* returning
  records. A partition's records are returned only if it is still assigned and not paused and the fetch
  offset equals its position (otherwise the buffered data is stale and discarded). The position advances
  past every record returned, past skipped control batches and past the end of fully consumed batches.
- Decoding: CRC checked (``check_crcs``), every codec decompressed (gzip, snappy, lz4, zstd: see
  ``protocol.compression``), control batches skipped, records below the fetch offset (a batch starting before it)
  skipped, a partial trailing batch ignored.
- Unknown positions (None) are set with the reset policy before fetching (policy "none" raises
  ``NoOffsetForPartitionError``); a consumer sets them from committed offsets first.
- Errors per partition: OFFSET_OUT_OF_RANGE at the current position resets it with the reset policy
  (ListOffsets earliest/latest; policy "none" raises ``OffsetOutOfRangeError``); leadership/unknown-topic
  and other retriable errors refresh metadata; any other code raises ``error_for(code)``. A failed request
  (connection lost, timed out) drops that node's fetch and refreshes metadata.
- Not thread-safe: one application thread drives it; connection reader threads only complete futures.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from client.connection import ResponseFuture
from client.consumer_protocol import TopicPartition, group_by_topic
from client.errors import (
    KafkaConnectionError,
    KafkaError,
    NoOffsetForPartitionError,
    RequestTimedOutError,
    error_for,
)
from client.offsets import LIST_OFFSETS, RESET_POLICIES, Positions, list_offsets_body, parse_list_offsets
from protocol.errors import ErrorCode, is_retriable
from protocol.record_batch import (
    CODEC_MASK,
    CONTROL_MASK,
    HEADER,
    TIMESTAMP_TYPE_MASK,
    parse_header,
    split_batches,
    validate_batch,
)
from protocol.record_reader import c_reader
from protocol.record_reader import records as records_of  # decode_batch's result, via the C reader

log = logging.getLogger(__name__)

FETCH = 1
MAX_FETCH_VERSION = 12
ISOLATION = {"read_uncommitted": 0, "read_committed": 1}


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int  # 0 = create time, 1 = log append time
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


class OffsetOutOfRangeError(KafkaError):
    """A fetch position is outside the log and the reset policy is "none"."""

    def __init__(self, positions: Mapping[TopicPartition, int]) -> None:
        super().__init__(f"fetch positions out of range and no reset policy: {dict(positions)}")
        self.positions = dict(positions)


class ClusterLike(Protocol):
    """What the fetcher needs from ``client.cluster.Cluster`` (tests pass a fake)."""

    def leader_for(self, topic: str, partition: int) -> int | None: ...

    def connection(self, node_id: int) -> Any: ...

    def refresh_metadata(self, topics: Iterable[str] | None = None) -> Any: ...


@dataclass(slots=True)
class CompletedFetch:
    tp: TopicPartition
    fetch_offset: int
    data: dict[str, Any]


@dataclass(slots=True)
class _InFlight:
    future: ResponseFuture
    offsets: dict[TopicPartition, int]
    sent_at: float


class PartitionRecords:
    """The records of one completed fetch, decoded one batch at a time as they are taken."""

    __slots__ = (
        "_batch_end",
        "_batches",
        "_check_crcs",
        "_index",
        "_next_batch",
        "_records",
        "exhausted",
        "fetch_offset",
        "tp",
    )

    def __init__(self, tp: TopicPartition, fetch_offset: int, raw: bytes, check_crcs: bool) -> None:
        self.tp = tp
        self.fetch_offset = fetch_offset  # next offset expected: equals the position while not stale
        self._batches, _ = split_batches(raw) if raw else ([], 0)
        self._next_batch = 0
        self._records: list[ConsumerRecord] = []
        self._index = 0
        self._batch_end = -1
        self._check_crcs = check_crcs
        self.exhausted = False

    def take(self, n: int) -> list[ConsumerRecord]:
        """Up to ``n`` records from ``fetch_offset`` on; ``fetch_offset`` moves past what was consumed."""
        out: list[ConsumerRecord] = []
        while len(out) < n:
            if self._index >= len(self._records) and not self._load_batch():
                self.exhausted = True
                break
            k = min(n - len(out), len(self._records) - self._index)
            chunk = self._records[self._index:self._index + k]
            self._index += k
            out += chunk
            self.fetch_offset = chunk[-1].offset + 1
            if self._index >= len(self._records):
                self.fetch_offset = max(self.fetch_offset, self._batch_end)
        return out

    def _load_batch(self) -> bool:
        """Decode the next batch that has records at or above ``fetch_offset``; False when none is left."""
        topic, partition = self.tp
        while self._next_batch < len(self._batches):
            batch = self._batches[self._next_batch]
            self._next_batch += 1
            base, _, _, _, _, attrs, last_delta, *_ = HEADER.unpack_from(batch, 0)
            end = base + last_delta + 1
            if end <= self.fetch_offset:
                continue  # wholly below the fetch offset
            if attrs & CONTROL_MASK:
                self.fetch_offset = max(self.fetch_offset, end)
                continue
            self._records = consumer_records(batch, attrs, topic, partition, self.fetch_offset, self._check_crcs)
            self._index = 0
            self._batch_end = end
            if self._records:
                return True
            self.fetch_offset = max(self.fetch_offset, end)
        self._batches = []
        return False


def consumer_records(batch: bytes | memoryview, attrs: int, topic: str, partition: int, first: int,
                     check_crcs: bool) -> list[ConsumerRecord]:
    """The records of one batch at or above offset ``first``, as ``records_of`` reads them. An uncompressed batch
    the C reader takes whole is read straight into ``ConsumerRecord`` (no ``Record`` in between: a third fewer
    objects per record); anything else goes through ``records_of``, which decides and explains."""
    ts_type = 1 if attrs & TIMESTAMP_TYPE_MASK else 0
    new = tuple.__new__
    reader = c_reader()
    if reader is not None and not attrs & CODEC_MASK:
        try:
            header = validate_batch(batch) if check_crcs else parse_header(batch)
            if header.size == len(batch):
                out = [new(ConsumerRecord, (topic, partition, r.offset, r.timestamp, ts_type, r.key, r.value,
                                            tuple(h) if (h := r.headers) else ()))
                       for r in reader(bytearray(batch))]
                if len(out) == header.record_count:
                    return out if first <= header.base_offset else [r for r in out if r[2] >= first]
        except Exception:  # refused (or corrupt): records_of below decides and says why
            pass
    _, records = records_of(batch, verify_crc=check_crcs)
    return [new(ConsumerRecord, (topic, partition, r[0], r[1], ts_type, r[2], r[3], r[4]))
            for r in records if r[0] >= first]


class Fetcher:
    def __init__(self, cluster: ClusterLike, *, positions: Positions | None = None, max_poll_records: int = 500,
                 fetch_max_wait_ms: int = 500, fetch_min_bytes: int = 1, fetch_max_bytes: int = 52428800,
                 max_partition_fetch_bytes: int = 1048576, isolation_level: str = "read_uncommitted",
                 auto_offset_reset: str = "latest", check_crcs: bool = True, request_timeout_ms: int = 30000,
                 retry_backoff_ms: int = 100) -> None:
        if auto_offset_reset not in RESET_POLICIES:
            raise ValueError(f"auto_offset_reset must be one of {sorted(RESET_POLICIES)}")
        if isolation_level not in ISOLATION:
            raise ValueError(f"isolation_level must be one of {sorted(ISOLATION)}")
        self.cluster = cluster
        self.positions = positions if positions is not None else Positions()
        self.max_poll_records = max_poll_records
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.isolation_level = ISOLATION[isolation_level]
        self.auto_offset_reset = auto_offset_reset
        self.check_crcs = check_crcs
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.high_watermarks: dict[TopicPartition, int] = {}
        self._in_flight: dict[int, _InFlight] = {}
        self._completed: deque[CompletedFetch] = deque()
        self._next_in_line: PartitionRecords | None = None
        self._metadata_stale = False

    # ------------------------------------------------------------------ manual assignment
    def assign(self, partitions: Mapping[TopicPartition, int | None] | Iterable[TopicPartition]) -> None:
        """Replace the assignment; a mapping also sets positions (None = use the reset policy)."""
        items = dict(partitions) if isinstance(partitions, Mapping) else {tp: None for tp in partitions}
        items = {TopicPartition(*tp): pos for tp, pos in items.items()}
        self.positions.assign(items)
        for tp, pos in items.items():
            if pos is not None:
                self.positions.seek(tp, pos)

    def assignment(self) -> set[TopicPartition]:
        return self.positions.assigned()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if offset < 0:
            raise ValueError("offset must be >= 0")
        self.positions.seek(TopicPartition(*tp), offset)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._seek_to(partitions, RESET_POLICIES["earliest"])

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._seek_to(partitions, RESET_POLICIES["latest"])

    def position(self, tp: TopicPartition) -> int:
        tp = TopicPartition(*tp)
        if self.positions.position(tp) is None:
            self.reset_positions([tp])
        pos = self.positions.position(tp)
        assert pos is not None
        return pos

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        self.positions.paused.update(TopicPartition(*tp) for tp in partitions
                                     if self.positions.is_assigned(TopicPartition(*tp)))

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self.positions.paused.difference_update(TopicPartition(*tp) for tp in partitions)

    def paused(self) -> set[TopicPartition]:
        return set(self.positions.paused)

    # ------------------------------------------------------------------ the loop
    def poll(self, max_records: int | None = None, timeout_ms: int = 0) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records ready now, else wait up to ``timeout_ms`` for a fetch to complete."""
        limit = max_records or self.max_poll_records
        deadline = time.monotonic() + max(0, timeout_ms) / 1000
        while True:
            self._reap()
            records = self.fetched_records(limit)
            if records:
                self.send_fetches()  # the next fetch goes out before the application gets these records
                return records
            self.send_fetches()
            left = deadline - time.monotonic()
            if left <= 0:
                return {}
            self._wait(left)

    def send_fetches(self) -> int:
        """Send a Fetch to every node with fetchable partitions and no fetch in flight; returns how many."""
        self._reap()
        self._maybe_refresh_metadata()
        missing = [tp for tp in self.positions.missing() if tp not in self.positions.paused]
        if missing:
            self.reset_positions(missing)
        sent = 0
        for node_id, offsets in self._fetchable_by_node().items():
            try:
                conn = self.cluster.connection(node_id)
                version = conn.version_for(FETCH, max_version=MAX_FETCH_VERSION)
                fut = conn.send_async(FETCH, self._fetch_body(offsets), version=version)
            except (KafkaConnectionError, RequestTimedOutError) as e:
                log.info("fetch to node %s failed: %s", node_id, e)
                self._metadata_stale = True
                continue
            self._in_flight[node_id] = _InFlight(fut, offsets, time.monotonic())
            sent += 1
        return sent

    def fetched_records(self, max_records: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Drain up to ``max_records`` from the completed fetches (seed 003's fetchedRecords)."""
        drained: dict[TopicPartition, list[ConsumerRecord]] = {}
        remaining = max_records
        while remaining > 0:
            pr = self._next_in_line
            if pr is None or pr.exhausted:
                self._next_in_line = None
                if not self._completed:
                    break
                self._next_in_line = self._initialize(self._completed.popleft())
            else:
                remaining -= self._append(drained, pr, remaining)
        return drained

    def close(self) -> None:
        """Forget buffered data and in-flight fetches (their responses are dropped when they arrive)."""
        self._in_flight.clear()
        self._completed.clear()
        self._next_in_line = None

    # ------------------------------------------------------------------ internals
    def _append(self, drained: dict[TopicPartition, list[ConsumerRecord]], pr: PartitionRecords, n: int) -> int:
        tp = pr.tp
        if not self.positions.is_assigned(tp):
            log.debug("discarding fetched records for %s: no longer assigned", tp)
        elif tp in self.positions.paused:
            log.debug("discarding fetched records for %s: paused", tp)
        elif pr.fetch_offset == self.positions.position(tp):
            records = pr.take(n)
            self.positions.seek(tp, pr.fetch_offset)  # past the records, control batches, batch ends
            if records:
                drained.setdefault(tp, []).extend(records)
            return len(records)
        else:
            log.debug("discarding stale fetch for %s at %s (position %s)", tp, pr.fetch_offset,
                      self.positions.position(tp))
        pr.exhausted = True
        return 0

    def _initialize(self, cf: CompletedFetch) -> PartitionRecords | None:
        tp, data = cf.tp, cf.data
        code = data["error_code"]
        if code == ErrorCode.NONE:
            self.high_watermarks[tp] = data["high_watermark"]
            return PartitionRecords(tp, cf.fetch_offset, data["records"] or b"", self.check_crcs)
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if self.positions.is_assigned(tp) and self.positions.position(tp) == cf.fetch_offset:
                if RESET_POLICIES[self.auto_offset_reset] is None:
                    raise OffsetOutOfRangeError({tp: cf.fetch_offset})
                log.info("fetch offset %d of %s is out of range; resetting (%s)", cf.fetch_offset, tp,
                         self.auto_offset_reset)
                self.reset_positions([tp])
            return None
        if is_retriable(code):
            log.info("fetch of %s failed with %s; refreshing metadata", tp, code)
            self._metadata_stale = True
            return None
        raise error_for(code, f"Fetch of {tp}")

    def _fetchable_by_node(self) -> dict[int, dict[TopicPartition, int]]:
        buffered = {cf.tp for cf in self._completed}
        if self._next_in_line is not None and not self._next_in_line.exhausted:
            buffered.add(self._next_in_line.tp)
        out: dict[int, dict[TopicPartition, int]] = {}
        for tp in self.positions.assigned():
            if tp in self.positions.paused or tp in buffered:
                continue
            pos = self.positions.position(tp)
            if pos is None:
                continue
            leader = self.cluster.leader_for(tp.topic, tp.partition)
            if leader is None:
                self._metadata_stale = True
                continue
            if leader in self._in_flight:
                continue
            out.setdefault(leader, {})[tp] = pos
        return out

    def _fetch_body(self, offsets: dict[TopicPartition, int]) -> dict[str, Any]:
        return {"cluster_id": None, "replica_id": -1, "max_wait_ms": self.fetch_max_wait_ms,
                "min_bytes": self.fetch_min_bytes, "max_bytes": self.fetch_max_bytes,
                "isolation_level": self.isolation_level, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": topic, "partitions": [
                    {"partition": p, "current_leader_epoch": -1, "fetch_offset": offsets[TopicPartition(topic, p)],
                     "last_fetched_epoch": -1, "log_start_offset": -1,
                     "partition_max_bytes": self.max_partition_fetch_bytes} for p in parts]}
                    for topic, parts in group_by_topic(sorted(offsets))],
                "forgotten_topics_data": [], "rack_id": ""}

    def _reap(self) -> None:
        """Move finished fetches into the completed queue; give up on ones past their deadline."""
        if not self._in_flight:
            return
        now = time.monotonic()
        limit = (self.request_timeout_ms + self.fetch_max_wait_ms) / 1000
        for node_id, inf in list(self._in_flight.items()):
            fut = inf.future
            if not fut.done() and now - inf.sent_at < limit:
                continue
            del self._in_flight[node_id]
            try:
                resp = fut.result(0)
            except KafkaError as e:
                log.info("fetch from node %s failed: %s", node_id, e)
                self._metadata_stale = True
                continue
            if resp.get("error_code", 0):
                log.info("fetch from node %s answered error %s", node_id, resp["error_code"])
                self._metadata_stale = True
                continue
            for t in resp["responses"]:
                for p in t["partitions"]:
                    tp = TopicPartition(t["topic"], p["partition_index"])
                    if tp in inf.offsets:
                        self._completed.append(CompletedFetch(tp, inf.offsets[tp], p))

    def _wait(self, seconds: float) -> None:
        """Block until a fetch completes or ``seconds`` pass."""
        futures = [inf.future for inf in self._in_flight.values()]
        if len(futures) == 1:
            futures[0].wait(seconds)
            return
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or any(f.done() for f in futures):
                return
            if futures:
                futures[0].wait(min(left, 0.005))
            else:
                time.sleep(min(left, self.retry_backoff_s))
                return

    def _maybe_refresh_metadata(self) -> None:
        if not self._metadata_stale:
            return
        self._metadata_stale = False
        topics = {tp.topic for tp in self.positions.assigned()}
        try:
            self.cluster.refresh_metadata(topics)
        except KafkaError as e:
            log.info("metadata refresh failed: %s", e)
            self._metadata_stale = True

    def _seek_to(self, partitions: Iterable[TopicPartition] | None, timestamp: int | None) -> None:
        tps = self.positions.assigned() if partitions is None else {TopicPartition(*tp) for tp in partitions}
        assert timestamp is not None
        for tp, offset in self.list_offsets({tp: timestamp for tp in tps}).items():
            if self.positions.is_assigned(tp):
                self.positions.seek(tp, offset)

    def reset_positions(self, partitions: Iterable[TopicPartition]) -> None:
        """Set positions with the reset policy (ListOffsets earliest/latest)."""
        tps = list(partitions)
        timestamp = RESET_POLICIES[self.auto_offset_reset]
        if timestamp is None:
            raise NoOffsetForPartitionError(sorted(tps))
        self._seek_to(tps, timestamp)

    def list_offsets(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """One ListOffsets round trip per leader; retriable errors refresh metadata and retry once."""
        found: dict[TopicPartition, int] = {}
        wanted = dict(timestamps)
        for attempt in range(2):
            by_leader: dict[int, dict[TopicPartition, int]] = {}
            retry: dict[TopicPartition, int] = {}
            for tp, ts in wanted.items():
                leader = self.cluster.leader_for(tp.topic, tp.partition)
                if leader is None:
                    retry[tp] = ts
                else:
                    by_leader.setdefault(leader, {})[tp] = ts
            for leader, part in by_leader.items():
                try:
                    _, resp = self.cluster.connection(leader).send(LIST_OFFSETS, list_offsets_body(part))
                except (KafkaConnectionError, RequestTimedOutError):
                    retry.update(part)
                    continue
                for tp, (code, offset) in parse_list_offsets(resp).items():
                    if code == ErrorCode.NONE:
                        found[tp] = offset
                    elif is_retriable(code) and attempt == 0:
                        retry[tp] = part[tp]
                    else:
                        raise error_for(code, f"ListOffsets for {tp}")
            if not retry:
                return found
            wanted = retry
            self.cluster.refresh_metadata({tp.topic for tp in retry})
        raise KafkaError(f"no offsets for {sorted(wanted)}")


class FetcherRecordSource:
    """Adapter to ``client.consumer.RecordSource``: the consumer's ``Positions`` must be the fetcher's."""

    def __init__(self, fetcher: Fetcher) -> None:
        self.fetcher = fetcher

    def poll(self, positions: Positions, timeout_ms: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        if positions is not self.fetcher.positions:
            raise ValueError("the fetcher must share the consumer's Positions")
        return self.fetcher.poll(timeout_ms=timeout_ms)
