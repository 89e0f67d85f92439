"""The fetch loop (seed 003) driven against a fake cluster whose responses each test completes by hand."""

from __future__ import annotations

import struct
from typing import Any

import crc32c
import pytest

from client.consumer_protocol import TopicPartition as TP
from client.errors import NoOffsetForPartitionError
from client.fetcher import Fetcher, FetcherRecordSource, OffsetOutOfRangeError
from client.offsets import Positions
from protocol.errors import ErrorCode
from protocol.record_batch import CONTROL_MASK, CRC_START, Compression, build_batch

FETCH, LIST_OFFSETS = 1, 2
A, B, C = TP("t", 0), TP("t", 1), TP("u", 0)
LEADERS = {A: 1, B: 2, C: 1}


class FakeFuture:
    def __init__(self, api_key: int, version: int, body: dict[str, Any]) -> None:
        self.api_key, self.version, self.body = api_key, version, body
        self._value: dict[str, Any] | None = None

    def done(self) -> bool:
        return self._value is not None

    def wait(self, timeout: float | None = None) -> bool:
        return self.done()

    def result(self, timeout: float | None = None) -> dict[str, Any]:
        assert self._value is not None, "the fetcher only reads results of completed fetches"
        return self._value

    def offsets(self) -> dict[TP, int]:
        return {TP(t["topic"], p["partition"]): p["fetch_offset"] for t in self.body["topics"]
                for p in t["partitions"]}

    def answer(self, per_partition: dict[TP, dict[str, Any]]) -> None:
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp, data in per_partition.items():
            entry = {"partition_index": tp.partition, "error_code": 0, "high_watermark": 100, "records": b""}
            entry.update(data)
            topics.setdefault(tp.topic, []).append(entry)
        self._value = {"error_code": 0, "responses": [{"topic": t, "partitions": ps} for t, ps in topics.items()]}


class FakeConnection:
    def __init__(self, node_id: int, log_start: dict[TP, int]) -> None:
        self.node_id, self.log_start = node_id, log_start
        self.sent: list[FakeFuture] = []

    def version_for(self, api_key: int, max_version: int | None = None, min_version: int | None = None) -> int:
        return min(12, max_version or 12)

    def send_async(self, api_key: int, body: Any, *, version: int | None = None) -> FakeFuture:
        fut = FakeFuture(api_key, version or 12, body(version) if callable(body) else body)
        self.sent.append(fut)
        return fut

    def send(self, api_key: int, body: Any, **kw: Any) -> tuple[int, dict[str, Any]]:
        assert api_key == LIST_OFFSETS
        req = body(7)
        topics = [{"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": 0,
             "offset": self.log_start[TP(t["name"], p["partition_index"])] if p["timestamp"] == -2 else 100}
            for p in t["partitions"]]} for t in req["topics"]]
        return 7, {"topics": topics}


class FakeCluster:
    def __init__(self, log_start: dict[TP, int] | None = None) -> None:
        self.conns = {n: FakeConnection(n, log_start or {}) for n in (1, 2)}
        self.refreshes = 0

    def leader_for(self, topic: str, partition: int) -> int | None:
        return LEADERS.get(TP(topic, partition))

    def connection(self, node_id: int) -> FakeConnection:
        return self.conns[node_id]

    def refresh_metadata(self, topics: Any = None) -> dict[str, Any]:
        self.refreshes += 1
        return {}

    def fetches(self, node: int) -> list[FakeFuture]:
        return [f for f in self.conns[node].sent if f.api_key == FETCH]


def batch(base: int, n: int, compression: int = Compression.NONE, prefix: str = "v") -> bytes:
    records = [(None, f"{prefix}{base + i}".encode(), (), 1000 + base + i) for i in range(n)]
    return build_batch(records, base_offset=base, compression=compression)


def control_batch(base: int) -> bytes:
    raw = bytearray(build_batch([(b"\x00\x00\x00\x00", b"\x00" * 6, (), 0)], base_offset=base))
    attrs = struct.unpack_from(">h", raw, 21)[0] | CONTROL_MASK
    struct.pack_into(">h", raw, 21, attrs)
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[CRC_START:])))
    return bytes(raw)


def offsets_of(records: dict[TP, list[Any]]) -> dict[TP, list[int]]:
    return {tp: [r.offset for r in recs] for tp, recs in records.items()}


def test_one_fetch_per_node_covering_its_partitions_and_none_while_in_flight() -> None:
    cluster = FakeCluster()
    f = Fetcher(cluster)  # type: ignore[arg-type]
    f.assign({A: 5, B: 7, C: 0})
    assert f.send_fetches() == 2
    assert [x.offsets() for x in cluster.fetches(1)] == [{A: 5, C: 0}]
    assert [x.offsets() for x in cluster.fetches(2)] == [{B: 7}]
    assert cluster.fetches(1)[0].version == 12 and cluster.fetches(1)[0].body["isolation_level"] == 0
    assert f.send_fetches() == 0  # both nodes have a fetch in flight


def test_the_next_fetch_is_sent_before_records_are_returned() -> None:
    cluster = FakeCluster()
    f = Fetcher(cluster)  # type: ignore[arg-type]
    f.assign({A: 0})
    f.send_fetches()
    cluster.fetches(1)[0].answer({A: {"records": batch(0, 3)}})
    records = f.poll(timeout_ms=0)
    assert offsets_of(records) == {A: [0, 1, 2]}
    assert [x.offsets() for x in cluster.fetches(1)] == [{A: 0}, {A: 3}]  # already sent, from position 3
    assert f.positions.position(A) == 3


def test_max_poll_records_drains_a_buffered_fetch_over_several_polls_without_refetching() -> None:
    cluster = FakeCluster()
    f = Fetcher(cluster, max_poll_records=4)  # type: ignore[arg-type]
    f.assign({A: 0})
    f.send_fetches()
    cluster.fetches(1)[0].answer({A: {"records": batch(0, 6) + batch(6, 4)}})
    assert offsets_of(f.poll()) == {A: [0, 1, 2, 3]}
    assert len(cluster.fetches(1)) == 1  # A still has buffered records: not fetchable
    assert offsets_of(f.poll()) == {A: [4, 5, 6, 7]}
    assert offsets_of(f.poll()) == {A: [8, 9]}
    assert cluster.fetches(1)[-1].offsets() == {A: 10}


def test_a_response_whose_fetch_offset_no_longer_matches_the_position_is_discarded() -> None:
    cluster = FakeCluster()
    f = Fetcher(cluster)  # type: ignore[arg-type]
    f.assign({A: 0})
    f.send_fetches()
    f.seek(A, 50)  # the application seeks while the fetch from 0 is in flight
    cluster.fetches(1)[0].answer({A: {"records": batch(0, 3)}})
    assert f.poll() == {}
    assert f.positions.position(A) == 50
    assert cluster.fetches(1)[-1].offsets() == {A: 50}


def test_records_of_partitions_paused_or_revoked_since_the_fetch_are_discarded() -> None:
    cluster = FakeCluster()
    f = Fetcher(cluster)  # type: ignore[arg-type]
    f.assign({A: 0, C: 0})
    f.send_fetches()
    f.pause([A])
    f.assign({A: 0})  # C revoked (A stays, still paused)
    cluster.fetches(1)[0].answer({A: {"records": batch(0, 2)}, C: {"records": batch(0, 2)}})
    assert f.poll() == {}
    assert len(cluster.fetches(1)) == 1  # A paused, C gone: nothing fetchable
    f.resume([A])
    f.send_fetches()
    cluster.fetches(1)[-1].answer({A: {"records": batch(0, 2)}})
    assert offsets_of(f.poll()) == {A: [0, 1]}


def test_records_below_the_fetch_offset_and_control_batches_are_skipped() -> None:
    cluster = FakeCluster()
    f = Fetcher(cluster)  # type: ignore[arg-type]
    f.assign({A: 3})
    f.send_fetches()
    cluster.fetches(1)[0].answer({A: {"records": batch(0, 5) + control_batch(5) + batch(6, 2)}})
    assert offsets_of(f.poll()) == {A: [3, 4, 6, 7]}
    assert f.positions.position(A) == 8


def test_gzip_batches_are_decompressed_and_a_partial_tail_is_ignored() -> None:
    cluster = FakeCluster()
    f = Fetcher(cluster)  # type: ignore[arg-type]
    f.assign({A: 0})
    f.send_fetches()
    tail = batch(4, 2)[:30]
    cluster.fetches(1)[0].answer({A: {"records": batch(0, 4, Compression.GZIP) + tail}})
    records = f.poll()
    assert [r.value for r in records[A]] == [b"v0", b"v1", b"v2", b"v3"]
    assert cluster.fetches(1)[-1].offsets() == {A: 4}  # the partial batch is fetched again


def test_a_control_batch_alone_still_advances_the_position() -> None:
    cluster = FakeCluster()
    f = Fetcher(cluster)  # type: ignore[arg-type]
    f.assign({A: 9})
    f.send_fetches()
    cluster.fetches(1)[0].answer({A: {"records": control_batch(9)}})
    assert f.poll() == {}
    assert f.positions.position(A) == 10


def test_offset_out_of_range_resets_to_earliest_with_list_offsets() -> None:
    cluster = FakeCluster(log_start={A: 40})
    f = Fetcher(cluster, auto_offset_reset="earliest")  # type: ignore[arg-type]
    f.assign({A: 7})
    f.send_fetches()
    cluster.fetches(1)[0].answer({A: {"error_code": ErrorCode.OFFSET_OUT_OF_RANGE}})
    assert f.poll() == {}
    assert f.positions.position(A) == 40
    assert cluster.fetches(1)[-1].offsets() == {A: 40}


def test_offset_out_of_range_for_a_stale_offset_does_not_reset() -> None:
    cluster = FakeCluster(log_start={A: 40})
    f = Fetcher(cluster, auto_offset_reset="earliest")  # type: ignore[arg-type]
    f.assign({A: 7})
    f.send_fetches()
    f.seek(A, 60)
    cluster.fetches(1)[0].answer({A: {"error_code": ErrorCode.OFFSET_OUT_OF_RANGE}})
    f.poll()
    assert f.positions.position(A) == 60


def test_offset_out_of_range_without_a_reset_policy_raises() -> None:
    cluster = FakeCluster()
    f = Fetcher(cluster, auto_offset_reset="none")  # type: ignore[arg-type]
    f.assign({A: 7})
    f.send_fetches()
    cluster.fetches(1)[0].answer({A: {"error_code": ErrorCode.OFFSET_OUT_OF_RANGE}})
    with pytest.raises(OffsetOutOfRangeError):
        f.poll()


def test_leader_errors_refresh_metadata_and_fetch_again() -> None:
    cluster = FakeCluster()
    f = Fetcher(cluster)  # type: ignore[arg-type]
    f.assign({A: 2})
    f.send_fetches()
    cluster.fetches(1)[0].answer({A: {"error_code": ErrorCode.NOT_LEADER_OR_FOLLOWER}})
    assert f.poll() == {}
    assert cluster.refreshes == 1
    assert [x.offsets() for x in cluster.fetches(1)] == [{A: 2}, {A: 2}]


def test_unknown_positions_are_initialised_with_the_reset_policy_before_fetching() -> None:
    cluster = FakeCluster(log_start={A: 12})
    f = Fetcher(cluster, auto_offset_reset="earliest")  # type: ignore[arg-type]
    f.assign([A])
    f.send_fetches()
    assert cluster.fetches(1)[0].offsets() == {A: 12}


def test_read_committed_is_sent_as_isolation_level_one() -> None:
    cluster = FakeCluster()
    f = Fetcher(cluster, isolation_level="read_committed")  # type: ignore[arg-type]
    f.assign({A: 0})
    f.send_fetches()
    assert cluster.fetches(1)[0].body["isolation_level"] == 1


def test_unknown_positions_without_a_reset_policy_raise_no_offset_for_partition() -> None:
    f = Fetcher(FakeCluster(), auto_offset_reset="none")  # type: ignore[arg-type]
    f.assign([A])
    with pytest.raises(NoOffsetForPartitionError):
        f.send_fetches()


def test_the_record_source_adapter_serves_the_consumers_positions() -> None:
    cluster = FakeCluster()
    positions = Positions()
    positions.assign([A])
    positions.seek(A, 4)
    source = FetcherRecordSource(Fetcher(cluster, positions=positions))  # type: ignore[arg-type]
    assert source.poll(positions, 0) == {}
    cluster.fetches(1)[0].answer({A: {"records": batch(4, 2)}})
    assert offsets_of(source.poll(positions, 0)) == {A: [4, 5]}
    assert positions.position(A) == 6
    with pytest.raises(ValueError):
        source.poll(Positions(), 0)
