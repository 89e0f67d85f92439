"""Our Producer and Fetcher against the real daemon, and against kafka-python's producer and consumer.

Each test uses its own topic on one daemon per module (4 partitions unless the test creates the topic).
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTP
from kafka.partitioner.default import murmur2 as kp_murmur2

from client.cluster import Cluster
from client.consumer_protocol import TopicPartition as TP
from client.errors import BrokerResponseError
from client.fetcher import ConsumerRecord, Fetcher
from client.producer import Producer, RecordMetadata

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from server_process import ServerProcess

PARTITIONS = 4


@pytest.fixture(scope="module")
def topics_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path_factory.mktemp("producer") / "data", "--num-partitions", str(PARTITIONS)).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def cluster(topics_server: ServerProcess) -> Iterator[Cluster]:
    c = Cluster(topics_server.bootstrap, client_id="fetcher-test")
    try:
        yield c
    finally:
        c.close()


def new_topic() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def kafka_python_partition(key: bytes, n: int = PARTITIONS) -> int:
    """kafka-python's DefaultPartitioner.partition for a keyed record (all partitions available)."""
    return (kp_murmur2(key) & 0x7FFFFFFF) % n


def read_all(fetcher: Fetcher, expected: int, timeout_s: float = 10.0) -> dict[TP, list[ConsumerRecord]]:
    got: dict[TP, list[ConsumerRecord]] = {}
    deadline = time.monotonic() + timeout_s
    while sum(map(len, got.values())) < expected and time.monotonic() < deadline:
        for tp, recs in fetcher.poll(timeout_ms=200).items():
            got.setdefault(tp, []).extend(recs)
    return got


def earliest_fetcher(cluster: Cluster, topic: str, **kw: object) -> Fetcher:
    cluster.refresh_metadata([topic])
    f = Fetcher(cluster, auto_offset_reset="earliest", **kw)  # type: ignore[arg-type]
    f.assign({TP(topic, p): None for p in range(PARTITIONS)})
    return f


@pytest.mark.parametrize("acks", [0, 1, "all"])
@pytest.mark.parametrize("compression", [None, "gzip"])
def test_keyed_records_come_back_once_in_order_on_kafka_pythons_partitions(
        topics_server: ServerProcess, cluster: Cluster, acks: object, compression: str | None) -> None:
    topic, n = new_topic(), 400
    with Producer(topics_server.bootstrap, acks=acks, compression_type=compression, linger_ms=2,
                  batch_size=2048) as producer:
        futures = [producer.send(topic, f"value-{i}".encode(), key=f"key-{i % 37}".encode(), timestamp_ms=1000 + i)
                   for i in range(n)]
        producer.flush(10)
    metas = [f.get(1) for f in futures]
    assert [m.partition for m in metas] == [kafka_python_partition(f"key-{i % 37}".encode()) for i in range(n)]
    got = read_all(earliest_fetcher(cluster, topic), n)
    for p in range(PARTITIONS):
        recs = got.get(TP(topic, p), [])
        sent = [i for i in range(n) if metas[i].partition == p]
        assert [r.offset for r in recs] == list(range(len(sent)))  # exactly once, in order
        assert [r.value for r in recs] == [f"value-{i}".encode() for i in sent]
        assert [r.timestamp for r in recs] == [1000 + i for i in sent]
        if acks != 0:
            assert [metas[i].offset for i in sent] == list(range(len(sent)))
    if acks == 0:
        assert {m.offset for m in metas} == {-1}


def test_keyless_records_stick_to_one_partition_per_batch(topics_server: ServerProcess, cluster: Cluster) -> None:
    topic = new_topic()
    with Producer(topics_server.bootstrap, linger_ms=1000, batch_size=100_000) as producer:
        futures = [producer.send(topic, b"x" * 10) for _ in range(50)]
        producer.flush(10)
    assert len({f.get(1).partition for f in futures}) == 1  # one batch: one sticky partition
    assert [f.get(1).offset for f in futures] == list(range(50))


def test_headers_and_explicit_partition_round_trip(topics_server: ServerProcess, cluster: Cluster) -> None:
    topic = new_topic()
    with Producer(topics_server.bootstrap) as producer:
        meta = producer.send(topic, b"v", key=b"k", headers=[("h1", b"a"), ("h2", None)], partition=2,
                             timestamp_ms=42).get(10)
    assert meta == RecordMetadata(topic, 2, 0, 42)
    got = read_all(earliest_fetcher(cluster, topic), 1)
    (rec,) = got[TP(topic, 2)]
    assert (rec.key, rec.value, rec.headers, rec.timestamp) == (b"k", b"v", (("h1", b"a"), ("h2", None)), 42)


def test_oversized_record_fails_its_future_clearly(topics_server: ServerProcess) -> None:
    with Producer(topics_server.bootstrap, max_request_size=1000) as producer:
        fut = producer.send(new_topic(), b"x" * 2000)
        with pytest.raises(BrokerResponseError, match="MESSAGE_TOO_LARGE"):
            fut.get(1)


def test_kafka_python_consumer_reads_what_our_producer_wrote(topics_server: ServerProcess) -> None:
    topic, n = new_topic(), 200
    with Producer(topics_server.bootstrap, compression_type="gzip") as producer:
        metas = [f.get(10) for f in [producer.send(topic, f"v{i}".encode(), key=f"k{i}".encode())
                                     for i in range(n)]]
    consumer = KafkaConsumer(bootstrap_servers=topics_server.bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest")
    seen: list[tuple[int, int, bytes, bytes]] = []
    try:
        consumer.assign([KTP(topic, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 10
        while len(seen) < n and time.monotonic() < deadline:
            for msgs in consumer.poll(timeout_ms=200).values():
                seen += [(m.partition, m.offset, m.key, m.value) for m in msgs]
        seen += [(m.partition, m.offset, m.key, m.value) for msgs in consumer.poll(timeout_ms=100).values()
                 for m in msgs]  # nothing more: exactly n
    finally:
        consumer.close()
    assert sorted(seen) == sorted((m.partition, m.offset, f"k{i}".encode(), f"v{i}".encode())
                                  for i, m in enumerate(metas))


def test_our_fetcher_reads_what_kafka_pythons_producer_wrote(topics_server: ServerProcess, cluster: Cluster) -> None:
    topic, n = new_topic(), 200
    producer = KafkaProducer(bootstrap_servers=topics_server.bootstrap, compression_type="gzip", linger_ms=5)
    try:
        metas = [f.get(10) for f in [producer.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode())
                                     for i in range(n)]]
    finally:
        producer.close(5)
    got = read_all(earliest_fetcher(cluster, topic), n)
    ours = sorted((tp.partition, r.offset, r.key, r.value) for tp, recs in got.items() for r in recs)
    assert ours == sorted((m.partition, m.offset, f"k{i}".encode(), f"v{i}".encode()) for i, m in enumerate(metas))
    assert all(m.partition == kafka_python_partition(f"k{i}".encode()) for i, m in enumerate(metas))


def produce_to_partition(bootstrap: str, topic: str, partition: int, n: int) -> None:
    with Producer(bootstrap) as producer:
        for f in [producer.send(topic, f"v{i}".encode(), partition=partition) for i in range(n)]:
            f.get(10)


def test_max_poll_records_seek_and_seek_to_beginning_and_end(topics_server: ServerProcess, cluster: Cluster) -> None:
    topic = new_topic()
    produce_to_partition(topics_server.bootstrap, topic, 1, 30)
    cluster.refresh_metadata([topic])
    tp = TP(topic, 1)
    f = Fetcher(cluster, max_poll_records=7, auto_offset_reset="earliest")
    f.assign({tp: 0})
    first = read_until(f, tp, 1)
    assert [r.offset for r in first] == list(range(7))
    assert f.position(tp) == 7
    f.seek(tp, 20)
    assert [r.offset for r in read_until(f, tp, 1)] == list(range(20, 27))
    f.seek_to_end([tp])
    assert f.position(tp) == 30
    assert f.poll(timeout_ms=300) == {}
    f.seek_to_beginning([tp])
    assert [r.value for r in read_until(f, tp, 1)] == [f"v{i}".encode() for i in range(7)]


def read_until(f: Fetcher, tp: TP, polls: int, timeout_ms: int = 3000) -> list[ConsumerRecord]:
    """The records of the first ``polls`` non-empty polls (stale ones are discarded by the fetcher)."""
    out: list[ConsumerRecord] = []
    for _ in range(polls):
        deadline = time.monotonic() + timeout_ms / 1000
        while time.monotonic() < deadline:
            recs = f.poll(timeout_ms=200).get(tp)
            if recs:
                out += recs
                break
    return out


def test_pause_stops_returning_records_and_resume_continues_at_the_position(
        topics_server: ServerProcess, cluster: Cluster) -> None:
    topic = new_topic()
    produce_to_partition(topics_server.bootstrap, topic, 0, 10)
    produce_to_partition(topics_server.bootstrap, topic, 3, 10)
    cluster.refresh_metadata([topic])
    a, b = TP(topic, 0), TP(topic, 3)
    f = Fetcher(cluster, max_poll_records=4)
    f.assign({a: 0, b: 0})
    f.pause([a])
    got = read_all_for(f, 10, timeout_s=3)
    assert a not in got and [r.offset for r in got[b]] == list(range(10))
    assert f.positions.position(a) == 0
    f.resume([a])
    got = read_all_for(f, 10, timeout_s=3)
    assert [r.offset for r in got[a]] == list(range(10)) and b not in got


def read_all_for(f: Fetcher, n: int, timeout_s: float) -> dict[TP, list[ConsumerRecord]]:
    got: dict[TP, list[ConsumerRecord]] = {}
    deadline = time.monotonic() + timeout_s
    while sum(map(len, got.values())) < n and time.monotonic() < deadline:
        for tp, recs in f.poll(timeout_ms=100).items():
            got.setdefault(tp, []).extend(recs)
    return got


def test_out_of_range_position_resets_with_the_policy(topics_server: ServerProcess, cluster: Cluster) -> None:
    topic = new_topic()
    produce_to_partition(topics_server.bootstrap, topic, 2, 5)
    cluster.refresh_metadata([topic])
    tp = TP(topic, 2)
    f = Fetcher(cluster, auto_offset_reset="earliest")
    f.assign({tp: 1000})
    assert [r.offset for r in read_until(f, tp, 1)] == list(range(5))
