"""RangeReader: stateless reads of one partition's offset range ``[start, end)``, without a group.

This is the executor side of a planned read (Spark's Kafka source design: a driver plans offset ranges,
tasks fetch them): nothing is subscribed, nothing is committed, no position outlives a call.

Rules and invariants:
- Connections open lazily, on the first read, never in ``__init__`` (a reader may be pickled and shipped
  to another process before it is used). ``close()`` drops them; a closed reader opens new ones when used
  again.
- ``read(tp, start, end)`` yields ``(timestamp_type, records)`` per record batch, in offset order, with
  only the records whose offset is in ``[start, end)`` (``protocol.record_batch.Record`` tuples). Control
  batches are skipped; offsets may have gaps (compaction, transaction markers), so a read ends as soon as
  the next offset to fetch is ``>= end``.
- One Fetch is kept in flight ahead of decoding: as soon as a response arrives, the next offset is taken
  from the last complete batch header and the next Fetch is sent, then the batches are decoded.
- A range the log no longer (or never) holds raises ``RangeUnavailableError`` naming the partition, the
  wanted offset and the log's bounds: OFFSET_OUT_OF_RANGE, an unknown topic or partition, or a log whose
  end is below ``end``. The caller decides whether that is data loss to fail on or to skip (it may call
  ``log_bounds`` and read on from the log start).
- Leadership changes and lost connections refresh metadata and retry, at most ``retries`` times per
  range; any other error code raises ``client.errors.error_for(code)``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from typing import Any

from client.cluster import Cluster
from client.connection import ResponseFuture
from client.consumer_protocol import TopicPartition
from client.errors import KafkaConnectionError, KafkaError, RequestTimedOutError, error_for
from client.offsets import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    LIST_OFFSETS,
    list_offsets_body,
    parse_list_offsets,
)
from client.security import SecurityConfig
from protocol.errors import ErrorCode, is_retriable
from protocol.record_batch import (
    CONTROL_MASK,
    HEADER,
    TIMESTAMP_TYPE_MASK,
    Record,
    split_batches,
)
from protocol.record_reader import records as records_of  # decode_batch's result, via the C reader

log = logging.getLogger(__name__)

FETCH = 1
MAX_FETCH_VERSION = 12
_GONE = frozenset({ErrorCode.OFFSET_OUT_OF_RANGE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})


class RangeUnavailableError(KafkaError):
    """The log does not hold the offsets a read asked for (retention, deletion, a recreated topic)."""

    def __init__(self, tp: TopicPartition, offset: int, log_start: int | None, log_end: int | None,
                 reason: str) -> None:
        bounds = "the partition does not exist" if log_start is None else f"the log holds [{log_start}, {log_end})"
        super().__init__(f"{tp.topic}-{tp.partition}: offset {offset} is not available ({reason}; {bounds})")
        self.tp, self.offset, self.log_start, self.log_end = tp, offset, log_start, log_end


class RangeReader:
    def __init__(self, bootstrap_servers: str | Iterable[str], *, client_id: str = "groupcoord-range-reader",
                 request_timeout_ms: int = 30000, max_partition_fetch_bytes: int = 4 * 1024 * 1024,
                 fetch_max_wait_ms: int = 100, check_crcs: bool = True, retries: int = 5,
                 retry_backoff_ms: int = 100, security: SecurityConfig | None = None,
                 **security_settings: Any) -> None:
        self.security = SecurityConfig.resolve(security, security_settings, "RangeReader")
        self.bootstrap_servers = bootstrap_servers
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.check_crcs = check_crcs
        self.retries = retries
        self.retry_backoff_s = retry_backoff_ms / 1000
        self._cluster: Cluster | None = None

    # ------------------------------------------------------------------ lifecycle
    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            self._cluster = Cluster(self.bootstrap_servers, client_id=self.client_id,
                                    request_timeout_ms=self.request_timeout_ms, security=self.security)
        return self._cluster

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    def __enter__(self) -> RangeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_cluster"] = None  # connections never travel
        return state

    # ------------------------------------------------------------------ reads
    def log_bounds(self, tp: TopicPartition) -> tuple[int, int]:
        """(log start offset, log end offset) of one partition, by ListOffsets at its leader."""
        tp = TopicPartition(*tp)
        found = self._list_offsets({tp: EARLIEST_TIMESTAMP}), self._list_offsets({tp: LATEST_TIMESTAMP})
        return found[0][tp], found[1][tp]

    def read(self, tp: TopicPartition, start: int, end: int) -> Iterator[tuple[int, list[Record]]]:
        """``(timestamp_type, records)`` per batch for offsets ``[start, end)`` (see the module rules)."""
        tp = TopicPartition(*tp)
        offset = start
        failures = 0
        fut: ResponseFuture | None = None
        while offset < end:
            try:
                if fut is None:
                    fut = self._send(tp, offset)
                resp = fut.result(self.request_timeout_ms / 1000 + self.fetch_max_wait_ms / 1000)
            except (KafkaConnectionError, RequestTimedOutError) as e:
                fut = None
                failures = self._retry(tp, failures, e)
                continue
            fut = None
            part = _partition(resp, tp)
            code = part["error_code"] if part is not None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if code in _GONE:
                bounds = self._bounds_or_none(tp)
                raise RangeUnavailableError(tp, offset, *(bounds or (None, None)), reason=_name(code))
            if code:
                if is_retriable(code):
                    failures = self._retry(tp, failures, error_for(code, f"Fetch {tp}"))
                    continue
                raise error_for(code, f"Fetch {tp} at offset {offset}")
            assert part is not None
            batches, _ = split_batches(part["records"] or b"")
            if not batches:
                high = part["high_watermark"]
                if high <= offset:
                    raise RangeUnavailableError(tp, offset, part.get("log_start_offset", -1), high,
                                                reason=f"the log ends at {high}, below the range end {end}")
                failures = self._retry(tp, failures, KafkaError(f"empty fetch below the high watermark for {tp}"))
                continue
            base, _, _, _, _, _, last_delta, *_ = HEADER.unpack_from(batches[-1], 0)
            next_offset = max(offset, base + last_delta + 1)
            if next_offset < end:
                try:
                    fut = self._send(tp, next_offset)  # in flight while this response is decoded
                except (KafkaConnectionError, RequestTimedOutError):
                    fut = None
            first = offset
            for batch in batches:
                base, _, _, _, _, attrs, last_delta, *_ = HEADER.unpack_from(batch, 0)
                if base + last_delta < first or attrs & CONTROL_MASK:
                    continue
                _, records = records_of(batch, verify_crc=self.check_crcs)
                if records[0].offset < first or records[-1].offset >= end:
                    records = [r for r in records if first <= r.offset < end]
                if records:
                    yield (1 if attrs & TIMESTAMP_TYPE_MASK else 0), records
                if base + last_delta + 1 >= end:
                    break
            offset = next_offset
            failures = 0

    # ------------------------------------------------------------------ internals
    def _send(self, tp: TopicPartition, offset: int) -> ResponseFuture:
        leader = self.cluster.leader_for(tp.topic, tp.partition)
        if leader is None:
            self.cluster.refresh_metadata([tp.topic])
            leader = self.cluster.leader_for(tp.topic, tp.partition)
            if leader is None:
                raise RangeUnavailableError(tp, offset, None, None, reason="no such topic or partition in the metadata")
        conn = self.cluster.connection(leader)
        version = conn.version_for(FETCH, max_version=MAX_FETCH_VERSION)
        body = {"cluster_id": None, "replica_id": -1, "max_wait_ms": self.fetch_max_wait_ms, "min_bytes": 1,
                "max_bytes": self.max_partition_fetch_bytes, "isolation_level": 0, "session_id": 0,
                "session_epoch": -1,
                "topics": [{"topic": tp.topic, "partitions": [
                    {"partition": tp.partition, "current_leader_epoch": -1, "fetch_offset": offset,
                     "last_fetched_epoch": -1, "log_start_offset": -1,
                     "partition_max_bytes": self.max_partition_fetch_bytes}]}],
                "forgotten_topics_data": [], "rack_id": ""}
        return conn.send_async(FETCH, body, version=version)

    def _retry(self, tp: TopicPartition, failures: int, error: KafkaError) -> int:
        if failures >= self.retries:
            raise error
        log.info("fetch of %s failed (%s); refreshing metadata and retrying", tp, error)
        time.sleep(self.retry_backoff_s)
        try:
            self.cluster.refresh_metadata([tp.topic])
        except KafkaError as e:
            log.info("metadata refresh failed: %s", e)
        return failures + 1

    def _bounds_or_none(self, tp: TopicPartition) -> tuple[int, int] | None:
        try:
            return self.log_bounds(tp)
        except KafkaError:
            return None

    def _list_offsets(self, timestamps: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        cluster = self.cluster
        topics = {tp.topic for tp in timestamps}
        if any(cluster.leader_for(tp.topic, tp.partition) is None for tp in timestamps):
            cluster.refresh_metadata(topics)
        found: dict[TopicPartition, int] = {}
        for tp, ts in timestamps.items():
            leader = cluster.leader_for(tp.topic, tp.partition)
            if leader is None:
                raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp}")
            _, resp = cluster.connection(leader).send(LIST_OFFSETS, list_offsets_body({tp: ts}))
            for got, (code, off) in parse_list_offsets(resp).items():
                if code:
                    raise error_for(code, f"ListOffsets for {got}")
                found[got] = off
        return found


def _partition(resp: dict[str, Any], tp: TopicPartition) -> dict[str, Any] | None:
    for t in resp.get("responses", ()):
        if t.get("topic") == tp.topic:
            for p in t["partitions"]:
                if p["partition_index"] == tp.partition:
                    return p
    return None


def _name(code: int) -> str:
    return error_for(code).name
