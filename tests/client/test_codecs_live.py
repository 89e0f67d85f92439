"""Compressed batches over the wire: kcat (librdkafka) produces snappy, lz4 and zstd batches that our
Consumer reads; our Producer's snappy/lz4/zstd batches are read by kcat and (lz4, zstd) by kafka-python.
Each case first checks, with a raw Fetch, that the stored batch really carries the codec. kcat's topic is
created before it produces: were it auto-created by kcat's own Metadata (answered LEADER_NOT_AVAILABLE
first, as Kafka does), librdkafka may send a lone first record while the rest wait, and it sends a batch
uncompressed when compressing does not shrink it."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KTP

from client.admin import AdminClient
from client.cluster import Cluster
from client.consumer import Consumer
from client.producer import Producer
from protocol.record_batch import CODEC_MASK, split_batches

REPO = Path(__file__).resolve().parents[2]

from server_process import ServerProcess

CODEC_NUMBER = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
COUNT = 200


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(tmp_path_factory.mktemp("codecs") / "data", "--num-partitions", "1",
                           "--group-min-session-timeout-ms", "1000", "--group-initial-rebalance-delay-ms", "0").start()
    try:
        yield server
    finally:
        server.stop()


def stored_codecs(bootstrap: str, topic: str) -> set[int]:
    """The codec bits of every batch stored in partition 0, read with a raw Fetch (no decoding)."""
    cluster = Cluster(bootstrap, client_id="codec-check")
    try:
        cluster.refresh_metadata([topic])
        leader = cluster.leader_for(topic, 0)
        assert leader is not None
        body = {"cluster_id": None, "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 24,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": topic, "partitions": [
                    {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                     "log_start_offset": -1, "partition_max_bytes": 1 << 24}]}],
                "forgotten_topics_data": [], "rack_id": ""}
        _, resp = cluster.connection(leader).send(1, body, max_version=12)  # names topics by name (v13+ by id)
    finally:
        cluster.close()
    raw = resp["responses"][0]["partitions"][0]["records"] or b""
    batches, _ = split_batches(raw)
    assert batches, f"nothing stored in {topic}"
    return {b[22] & CODEC_MASK for b in batches}


def consume_with_ours(bootstrap: str, topic: str, expected: int) -> list[tuple[bytes | None, bytes | None]]:
    out: list[tuple[bytes | None, bytes | None]] = []
    with Consumer(bootstrap_servers=bootstrap, group_id=f"g-{uuid.uuid4().hex[:8]}",
                  auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 15
        while len(out) < expected and time.monotonic() < deadline:
            for recs in consumer.poll(200).values():
                out += [(r.key, r.value) for r in recs]
    return out


@pytest.mark.parametrize("codec", ["snappy", "lz4", "zstd"])
def test_kcat_compressed_batches_are_read_by_our_consumer(srv: ServerProcess, codec: str) -> None:
    topic = f"kcat-{codec}-{uuid.uuid4().hex[:6]}"
    with AdminClient(srv.bootstrap) as admin:
        assert admin.create_topics({topic: 1})[0].error_code == 0
    lines = "".join(f"k{i}:value {i} {'x' * (i % 50)}\n" for i in range(COUNT))
    # linger 1 s: on a busy machine (`make test` runs several workers) kcat may read its lines more slowly than a
    # 50 ms linger, and librdkafka would send a lone first record, uncompressed (see the module docstring)
    subprocess.run(["kcat", "-b", srv.bootstrap, "-P", "-t", topic, "-K:", "-z", codec, "-p", "0",
                    "-X", "linger.ms=1000"], input=lines.encode(), check=True, timeout=30)
    assert stored_codecs(srv.bootstrap, topic) == {CODEC_NUMBER[codec]}
    got = consume_with_ours(srv.bootstrap, topic, COUNT)
    assert got == [(f"k{i}".encode(), f"value {i} {'x' * (i % 50)}".encode()) for i in range(COUNT)]


@pytest.mark.parametrize("codec", ["snappy", "lz4", "zstd"])
def test_our_compressed_batches_are_read_by_kcat_and_kafka_python(srv: ServerProcess, codec: str) -> None:
    topic = f"ours-{codec}-{uuid.uuid4().hex[:6]}"
    with Producer(srv.bootstrap, compression_type=codec, linger_ms=20, acks="all") as producer:
        for i in range(COUNT):
            producer.send(topic, f"v{i}".encode(), key=f"k{i}".encode(), headers=[("n", str(i).encode())])
        producer.flush(15)
    assert stored_codecs(srv.bootstrap, topic) == {CODEC_NUMBER[codec]}
    out = subprocess.run(["kcat", "-b", srv.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
                          "-f", "%k=%s\n"], capture_output=True, check=True, timeout=30)
    assert out.stdout.decode().splitlines() == [f"k{i}=v{i}" for i in range(COUNT)]
    if codec == "snappy":
        return  # kafka-python needs python-snappy for snappy, which is not installed; kcat read it above
    kc = KafkaConsumer(bootstrap_servers=srv.bootstrap, enable_auto_commit=False, consumer_timeout_ms=10000)
    try:
        kc.assign([KTP(topic, 0)])
        kc.seek_to_beginning()
        seen = []
        deadline = time.monotonic() + 15
        while len(seen) < COUNT and time.monotonic() < deadline:
            for recs in kc.poll(timeout_ms=500).values():
                seen += [(r.key, r.value, r.headers) for r in recs]
    finally:
        kc.close()
    assert seen == [(f"k{i}".encode(), f"v{i}".encode(), [("n", str(i).encode())]) for i in range(COUNT)]
