"""Time retention deletes the active segment too (Kafka's ``UnifiedLog``), against the real server over TCP
with kafka-python: a topic with a 2 s ``retention.ms`` whose writes stop loses its only, non-empty segment
at a retention check (no later write or roll needed): ListOffsets earliest = latest, the old segment file is
gone, a consumer from the earliest offset reads nothing old, and new records continue at the old end."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from server_process import ServerProcess

TOPIC = "short-lived"
RECORDS = 20


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path / "data", "--log-retention-check-interval-ms", "500").start()
    try:
        yield srv
    finally:
        srv.stop()
        print(srv.log()[-20000:])  # shown only when the test failed


def wait_for(cond: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.2)
    return cond()


def produce(producer: KafkaProducer, n: int, tag: str, timestamp_ms: int | None = None) -> list[int]:
    futures = [producer.send(TOPIC, key=b"k%d" % i, value=f"{tag}-{i}".encode(), partition=0,
                             timestamp_ms=timestamp_ms) for i in range(n)]
    producer.flush(20)
    return [f.get(timeout=10).offset for f in futures]


def test_an_idle_topic_loses_its_expired_active_segment_and_produce_continues_at_the_same_offsets(
        server: ServerProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, client_id="retention-admin")
    try:
        admin.create_topics([NewTopic(TOPIC, 1, 1, topic_configs={"retention.ms": "2000"})])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, acks="all", linger_ms=0)
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=1000)
    tp = TopicPartition(TOPIC, 0)
    partition_dir = server.data_dir / f"{TOPIC}-0"
    try:
        assert produce(producer, RECORDS, "old") == list(range(RECORDS))
        assert (partition_dir / f"{0:020d}.log").exists()

        def offsets() -> tuple[int, int]:
            return consumer.beginning_offsets([tp])[tp], consumer.end_offsets([tp])[tp]

        # the only segment is the active one: without a write it is deleted only when retention rolls it
        assert wait_for(lambda: offsets()[0] > 0), f"log start still 0: {offsets()}"
        assert offsets() == (RECORDS, RECORDS)
        assert not (partition_dir / f"{0:020d}.log").exists()
        assert not (partition_dir / f"{0:020d}.index").exists()
        assert (partition_dir / f"{RECORDS:020d}.log").exists()

        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        seen = []
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=300).values():
                seen += [(r.offset, r.value) for r in records]
        assert seen == [] and consumer.position(tp) == RECORDS

        # stamped 10 minutes ahead: however slow this machine, retention keeps them while they are read
        later = int(time.time() * 1000) + 600_000
        assert produce(producer, 3, "new", later) == [RECORDS, RECORDS + 1, RECORDS + 2]
        deadline = time.monotonic() + 20.0
        while len(seen) < 3 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=300).values():
                seen += [(r.offset, r.value) for r in records]
        assert seen == [(RECORDS + i, b"new-%d" % i) for i in range(3)]
    finally:
        producer.close(5)
        consumer.close()
