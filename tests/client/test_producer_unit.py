"""The producer's batching, per-node requests, retries and failures against a fake two-node cluster."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from client.cluster import PartitionMetadata, TopicMetadata
from client.errors import BrokerResponseError
from client.producer import Producer, ProducerTimeoutError
from protocol.errors import ErrorCode
from protocol.record_batch import iter_records, split_batches

PRODUCE = 0
LEADERS = {0: 1, 1: 1, 2: 2}  # partition -> node of topic "t"


class FakeFuture:
    def __init__(self, version: int, body: dict[str, Any]) -> None:
        self.version, self.body = version, body
        self.correlation_id = id(self)
        self._event = threading.Event()
        self._value: dict[str, Any] | None = None

    def complete(self, value: dict[str, Any]) -> None:
        self._value = value
        self._event.set()

    def result(self, timeout: float | None = None) -> dict[str, Any]:
        assert self._event.wait(timeout)
        assert self._value is not None
        return self._value

    def batches(self) -> dict[int, list[tuple[int, bytes | None]]]:
        """partition -> [(batch count, values)] of this request (one entry per partition)."""
        out = {}
        for t in self.body["topic_data"]:
            for p in t["partition_data"]:
                batches, _ = split_batches(p["records"])
                out[p["index"]] = [(len(batches), r.value) for r in iter_records(p["records"])]
        return out


class FakeConnection:
    """Answers each Produce at once: scripted error codes first, then success with per-partition offsets."""

    def __init__(self, node_id: int, script: list[int], log_end: dict[int, int]) -> None:
        self.node_id, self.script, self.log_end = node_id, script, log_end
        self.sent: list[FakeFuture] = []
        self._pending_lock = threading.Lock()
        self._pending: dict[int, FakeFuture] = {}

    def version_for(self, api_key: int, max_version: int | None = None, min_version: int | None = None) -> int:
        assert api_key == PRODUCE and min_version == 3
        return 9

    def send_async(self, api_key: int, body: dict[str, Any], *, version: int) -> FakeFuture:
        fut = FakeFuture(version, body)
        self.sent.append(fut)
        self._pending[fut.correlation_id] = fut
        if body["acks"] == 0:
            return fut
        parts = []
        for t in body["topic_data"]:
            for p in t["partition_data"]:
                code = self.script.pop(0) if self.script else 0
                base = -1
                if code == 0:
                    base = self.log_end.get(p["index"], 0)
                    self.log_end[p["index"]] = base + sum(1 for _ in iter_records(p["records"]))
                parts.append({"index": p["index"], "error_code": code, "base_offset": base,
                              "log_append_time_ms": -1})
        self._pending.pop(fut.correlation_id)
        fut.complete({"responses": [{"name": "t", "partition_responses": parts}]})
        return fut


class FakeCluster:
    def __init__(self, script: list[int] | None = None) -> None:
        log_end: dict[int, int] = {}
        self.conns = {n: FakeConnection(n, script if n == 1 else [], log_end) for n in (1, 2)}
        self.topics = {"t": TopicMetadata("t", tuple(PartitionMetadata(p, LEADERS[p]) for p in range(3)))}
        self.refreshes = 0

    def refresh_metadata(self, topics: Any = None, *, allow_auto_topic_creation: bool = False) -> dict[str, Any]:
        self.refreshes += 1
        return {t: self.topics[t] for t in (topics or []) if t in self.topics}

    def leader_for(self, topic: str, partition: int) -> int | None:
        return LEADERS.get(partition) if topic == "t" else None

    def connection(self, node_id: int) -> FakeConnection:
        return self.conns[node_id]

    def requests(self, node: int) -> list[FakeFuture]:
        return self.conns[node].sent


def producer(cluster: FakeCluster, **kw: Any) -> Producer:
    kw.setdefault("linger_ms", 10_000)  # nothing leaves before flush() unless a batch is full
    kw.setdefault("retry_backoff_ms", 1)
    return Producer("unused:9092", cluster=cluster, **kw)  # type: ignore[arg-type]


def test_ready_batches_go_out_as_one_request_per_leader_node_with_one_batch_per_partition() -> None:
    cluster = FakeCluster()
    with producer(cluster) as p:
        futures = [p.send("t", f"v{i}".encode(), partition=i % 3) for i in range(6)]
        p.flush(5)
    assert [f.get(0).offset for f in futures] == [0, 0, 0, 1, 1, 1]
    (req1,), (req2,) = cluster.requests(1), cluster.requests(2)
    assert req1.version == 9
    assert req1.batches() == {0: [(1, b"v0"), (1, b"v3")], 1: [(1, b"v1"), (1, b"v4")]}
    assert req2.batches() == {2: [(1, b"v2"), (1, b"v5")]}


def test_a_partition_over_batch_size_is_sent_as_consecutive_requests_in_order() -> None:
    cluster = FakeCluster()
    with producer(cluster, batch_size=200) as p:
        futures = [p.send("t", b"x" * 40, partition=0) for _ in range(10)]
        p.flush(5)
    assert [f.get(0).offset for f in futures] == list(range(10))
    sizes = [len(r.batches()[0]) for r in cluster.requests(1)]
    assert len(sizes) > 1 and sum(sizes) == 10
    assert all(set(r.batches()) == {0} for r in cluster.requests(1))


def test_a_retriable_error_refreshes_metadata_and_retries_the_batch() -> None:
    cluster = FakeCluster(script=[ErrorCode.NOT_LEADER_OR_FOLLOWER])
    with producer(cluster, retries=2) as p:
        fut = p.send("t", b"v", partition=0)
        p.flush(5)
    assert fut.get(0).offset == 0
    assert len(cluster.requests(1)) == 2 and cluster.refreshes >= 1


def test_retries_are_bounded_then_the_future_fails_with_the_last_error() -> None:
    cluster = FakeCluster(script=[ErrorCode.NOT_LEADER_OR_FOLLOWER] * 5)
    with producer(cluster, retries=2) as p:
        fut = p.send("t", b"v", partition=1)
        p.flush(5)
    with pytest.raises(BrokerResponseError, match="NOT_LEADER_OR_FOLLOWER"):
        fut.get(0)
    assert len(cluster.requests(1)) == 3  # first attempt + 2 retries


def test_by_default_retries_go_on_like_kafkas_past_what_a_leader_move_takes() -> None:
    # Kafka's producer (2.1+): retries unbounded, delivery.timeout.ms bounds them; a topic just created whose
    # leader has not taken over yet answers NOT_LEADER_OR_FOLLOWER for a while (CI: > 5 retries of 100 ms)
    cluster = FakeCluster(script=[ErrorCode.NOT_LEADER_OR_FOLLOWER] * 12)
    with producer(cluster) as p:
        fut = p.send("t", b"v", partition=1)
        p.flush(10)
    assert fut.get(0).offset == 0
    assert len(cluster.requests(1)) == 13


def test_the_delivery_timeout_bounds_retries_and_the_backoff_doubles_up_to_its_max() -> None:
    cluster = FakeCluster(script=[ErrorCode.NOT_LEADER_OR_FOLLOWER] * 1000)
    started = time.monotonic()
    with producer(cluster, retry_backoff_ms=20, retry_backoff_max_ms=80, delivery_timeout_ms=600) as p:
        fut = p.send("t", b"v", partition=1)
        p.flush(10)
    with pytest.raises(BrokerResponseError, match="NOT_LEADER_OR_FOLLOWER"):
        fut.get(0)
    took = time.monotonic() - started
    sent = len(cluster.requests(1))
    # backoffs 20, 40, 80, 80, ... ms: about 9 attempts in 600 ms (fewer on a slow machine), never 30 (20 ms each)
    assert 3 <= sent <= 12, sent
    assert 0.55 <= took < 5, took


def test_a_non_retriable_error_fails_the_batch_at_once() -> None:
    cluster = FakeCluster(script=[ErrorCode.MESSAGE_TOO_LARGE])
    with producer(cluster, retries=5) as p:
        futures = [p.send("t", b"v", partition=0) for _ in range(3)]
        p.flush(5)
    for f in futures:
        with pytest.raises(BrokerResponseError) as err:
            f.get(0)
        assert err.value.code == ErrorCode.MESSAGE_TOO_LARGE
    assert len(cluster.requests(1)) == 1


def test_acks_zero_completes_without_a_response_and_leaves_nothing_pending() -> None:
    cluster = FakeCluster()
    with producer(cluster, acks=0) as p:
        futures = [p.send("t", b"v", partition=0) for _ in range(3)]
        p.flush(5)
    assert [f.get(0).offset for f in futures] == [-1, -1, -1]
    assert cluster.requests(1)[0].body["acks"] == 0
    assert cluster.conns[1]._pending == {}


def test_keyed_records_use_murmur2_and_acks_all_is_minus_one() -> None:
    cluster = FakeCluster()
    with producer(cluster, acks="all") as p:
        fut = p.send("t", b"v", key=b"foobar")  # murmur2(b"foobar") = -790332482 -> positive % 3 == 0
        p.flush(5)
    assert fut.get(0).partition == (-790332482 & 0x7FFFFFFF) % 3 == 0
    assert cluster.requests(1)[0].body["acks"] == -1


def test_flush_times_out_when_the_leader_is_unknown() -> None:
    cluster = FakeCluster()
    cluster.topics["u"] = TopicMetadata("u", (PartitionMetadata(0, -1),))
    p = producer(cluster, linger_ms=0)
    try:
        fut = p.send("u", b"v")
        with pytest.raises(ProducerTimeoutError):
            p.flush(0.2)
        assert not fut.done() and cluster.refreshes >= 1
    finally:
        p.close(0.5)
    assert fut.done() and fut.exception() is not None  # close fails what it could not send
