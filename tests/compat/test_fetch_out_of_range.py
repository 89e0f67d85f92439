"""librdkafka at an offset the log does not hold (issue #26): Apache Kafka answers such a Fetch partition with
OFFSET_OUT_OF_RANGE and *empty* records; librdkafka rejects null records as a malformed answer, so its
consumers never reset. Each story runs the real server and a real librdkafka client (confluent-kafka, kcat);
the autouse guard (tests/rdkafka_guard.py) fails any of them on a protocol parse failure."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from compat_support import call, wait_for
from server_process import ServerProcess  # type: ignore[import-not-found]

from protocol.errors import ErrorCode

RECORDS = 60


@pytest.fixture
def small_log_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """1-KiB segments and 2 KiB of retention a partition: a few dozen records push the log start forward."""
    srv = ServerProcess(tmp_path / "data", "--group-min-session-timeout-ms", "1000",
                        "--group-initial-rebalance-delay-ms", "0", "--num-partitions", "1",
                        "--log-segment-bytes", "1024", "--log-retention-bytes", "2048",
                        "--log-retention-check-interval-ms", "100").start()
    try:
        yield srv
    finally:
        srv.stop()


def produce(bootstrap: str, topic: str, n: int, partitions: int = 1) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        fut.result(10)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for i in range(n):
        p.produce(topic, key=b"k%d" % i, value=b"v" * 80, partition=i % partitions)
        p.poll(0)
    assert p.flush(20) == 0


def list_offset(port: int, topic: str, timestamp: int) -> int:
    """Partition 0's offset for ``timestamp`` (-2: log start, -1: log end)."""
    body = {"replica_id": -1, "isolation_level": 0,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": timestamp}]}]}
    return call(port, 2, 5, body)["topics"][0]["partitions"][0]["offset"]


def read_from(bootstrap: str, topic: str, offset: int, reset: str, timeout: float = 10.0) -> tuple[list[int], Any]:
    """Assign partition 0 at ``offset`` with ``auto.offset.reset=reset``; returns (offsets read, the event
    that ended the read: partition EOF or an error) within ``timeout`` seconds."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"oor-{reset}", "auto.offset.reset": reset,
                  "enable.partition.eof": True, "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, offset)])
        offsets: list[int] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error() is None:
                offsets.append(m.offset())
                continue
            if m.error().code() == KafkaError._PARTITION_EOF or not m.error().retriable():
                return offsets, m.error()
        raise AssertionError(f"no end of partition nor error within {timeout} s; read {len(offsets)} records")
    finally:
        c.close()


@pytest.mark.compat
def test_offset_past_the_end_resets_to_latest(small_log_server: ServerProcess) -> None:
    from confluent_kafka import KafkaError

    produce(small_log_server.bootstrap, "oor-end", 10)
    offsets, event = read_from(small_log_server.bootstrap, "oor-end", 1_000_000, "latest")
    assert offsets == []
    assert event.code() == KafkaError._PARTITION_EOF, event


@pytest.mark.compat
def test_offset_before_the_log_start(small_log_server: ServerProcess) -> None:
    from confluent_kafka import KafkaError

    srv = small_log_server
    produce(srv.bootstrap, "oor-start", RECORDS)
    wait_for("retention to move the log start", lambda: list_offset(srv.port, "oor-start", -2) > 0, 10)
    start, end = list_offset(srv.port, "oor-start", -2), list_offset(srv.port, "oor-start", -1)
    assert end == RECORDS

    offsets, event = read_from(srv.bootstrap, "oor-start", 0, "earliest")
    assert event.code() == KafkaError._PARTITION_EOF, event
    assert offsets == list(range(start, end)), "earliest reads every record the log still holds, once"

    offsets, event = read_from(srv.bootstrap, "oor-start", 0, "latest")
    assert (offsets, event.code()) == ([], KafkaError._PARTITION_EOF)

    offsets, event = read_from(srv.bootstrap, "oor-start", 0, "error")
    assert offsets == []
    assert event.code() == KafkaError._AUTO_OFFSET_RESET, event


@pytest.mark.compat
def test_fetch_errors_carry_empty_records(small_log_server: ServerProcess) -> None:
    """The wire itself: every partition of a Fetch answer has records (empty), errors included, in the
    non-flexible (v11) and flexible (v12) encodings."""
    srv = small_log_server
    produce(srv.bootstrap, "oor-wire", 3)
    for version in (4, 11, 12):
        body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 1,
                "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
                "topics": [{"topic": "oor-wire", "partitions": [
                    {"partition": p, "fetch_offset": off, "partition_max_bytes": 1 << 20}
                    for p, off in ((0, 0), (0, 999), (7, 0))]},
                    {"topic": "no-such-topic", "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]}
        resp = call(srv.port, 1, version, body)
        parts = [p for t in resp["responses"] for p in t["partitions"]]
        codes = [p["error_code"] for p in parts]
        assert codes == [0, ErrorCode.OFFSET_OUT_OF_RANGE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                         ErrorCode.UNKNOWN_TOPIC_OR_PARTITION], (version, codes)
        assert len(parts[0]["records"]) > 0
        assert [p["records"] for p in parts[1:]] == [b"", b"", b""], version


@pytest.mark.compat
@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is installed by make test (apt-deps)")
def test_kcat_past_the_end_exits_at_end_of_partition(small_log_server: ServerProcess) -> None:
    produce(small_log_server.bootstrap, "oor-kcat", 10)
    out = subprocess.run(["kcat", "-C", "-b", small_log_server.bootstrap, "-t", "oor-kcat", "-p", "0",
                          "-o", "1000000", "-e", "-d", "protocol,fetch"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Reached end of topic oor-kcat [0]" in out.stderr, out.stderr[-3000:]
    bad = [line for line in out.stderr.splitlines()
           if "ERROR" in line or "Protocol parse failure" in line or "MessageSetSize" in line]
    assert bad == [], "\n".join(bad[:20])
    assert out.stdout == ""


@pytest.mark.compat
def test_deleted_topic_does_not_stop_the_group(small_log_server: ServerProcess) -> None:
    """A consumer subscribed to two topics, one of which is deleted: no protocol parse failure (the guard),
    and the group goes on consuming and committing the other."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    srv = small_log_server
    produce(srv.bootstrap, "doomed", 5)
    produce(srv.bootstrap, "kept", 5)
    c = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "survivor", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": 6000, "topic.metadata.refresh.interval.ms": 500})
    seen: dict[str, set[int]] = {"doomed": set(), "kept": set()}

    def consume_until(cond: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not cond():
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                seen[m.topic()].add(m.offset())
                c.commit(message=m, asynchronous=False)
        assert cond(), seen

    try:
        c.subscribe(["doomed", "kept"])
        consume_until(lambda: len(seen["doomed"]) == 5 and len(seen["kept"]) == 5, 20)
        admin = AdminClient({"bootstrap.servers": srv.bootstrap})
        for fut in admin.delete_topics(["doomed"]).values():
            fut.result(10)
        admin.poll(0)
        # Produce to the kept topic only: the consumer must keep fetching it while the other is gone.
        from confluent_kafka import Producer
        p = Producer({"bootstrap.servers": srv.bootstrap})
        for i in range(5):
            p.produce("kept", value=b"after %d" % i)
        assert p.flush(10) == 0
        consume_until(lambda: len(seen["kept"]) == 10, 20)
        committed = c.committed([TopicPartition("kept", 0)], timeout=10)
        assert committed[0].offset == 10
        for _ in range(10):  # serve librdkafka's logs for a while after the deletion (the guard reads them)
            c.poll(0.1)
    finally:
        c.close()
