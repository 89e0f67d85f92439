"""At least once across a crash: a retrying consumer process is SIGKILLed after a copy was acknowledged and
before its source offset was committed; a restarted one handles that record again and nothing is lost."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer

from client.admin import AdminClient, NewTopic
from client.consumer_protocol import TopicPartition
from client.producer import Producer

REPO = Path(__file__).resolve().parents[2]

from server_process import ServerProcess

CHILD = Path(__file__).with_name("retry_child.py")
VALUES = [str(i).encode() for i in range(30)]


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(tmp_path / "data", "--num-partitions", "2", "--group-min-session-timeout-ms", "1000",
                           "--group-initial-rebalance-delay-ms", "0").start()
    try:
        yield server
    finally:
        server.stop()


def start_child(bootstrap: str, group: str, topic: str, logfile: Path, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(CHILD), bootstrap, group, topic, str(logfile), mode], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def read_line(proc: subprocess.Popen[str], prefix: str, timeout: float) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"child exited (status {proc.poll()}) before printing {prefix}")
        if line.startswith(prefix):
            return line.strip()
    raise AssertionError(f"no {prefix} line in {timeout}s")


def attempts(logfile: Path) -> list[tuple[bytes, int, str]]:
    if not logfile.exists():
        return []
    return [(v.encode(), int(n), r) for v, n, r in (line.split() for line in logfile.read_text().splitlines())]


def read_all(bootstrap: str, topics: list[str]) -> dict[str, list[tuple[bytes, int]]]:
    """(value, retry_number) of every record in each topic, read with kafka-python."""
    out: dict[str, list[tuple[bytes, int]]] = {}
    for topic in topics:
        kc = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None,
                           enable_auto_commit=False, consumer_timeout_ms=1500)
        try:
            out[topic] = [(r.value, int(dict(r.headers).get("retry_number", b"0"))) for r in kc]
        finally:
            kc.close()
    return out


def test_sigkill_between_republish_and_commit_loses_nothing(srv: ServerProcess, tmp_path: Path) -> None:
    topic, group, logfile = f"crash-{uuid.uuid4().hex[:6]}", "g-crash", tmp_path / "attempts.log"
    with AdminClient(srv.bootstrap) as admin:
        assert not admin.create_topics([NewTopic(topic, 2)])[0].error_code
    with Producer(srv.bootstrap, acks="all") as producer:
        for v in VALUES:
            producer.send(topic, v, key=v)
        producer.flush(10)

    child = start_child(srv.bootstrap, group, topic, logfile, "kill")
    try:
        line = read_line(child, "REPUBLISHED", 30)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    _, src_topic, src_partition, src_offset, killed_value = line.split()
    assert src_topic == topic
    with AdminClient(srv.bootstrap) as admin:
        committed = admin.list_group_offsets(group)
    at = committed.get(TopicPartition(topic, int(src_partition)))
    assert at is None or at.offset <= int(src_offset), "the source offset was committed before the kill"
    copies = read_all(srv.bootstrap, [f"{topic}-retry-1s"])[f"{topic}-retry-1s"]
    assert (killed_value.encode(), 1) in copies, "the acknowledged copy is not in the retry topic"

    child = start_child(srv.bootstrap, group, topic, logfile, "run")
    try:
        read_line(child, "STARTED", 30)
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            log = attempts(logfile)
            ok = {v for v, _, r in log if r == "ok"}
            if ok >= set(VALUES) - {b"7"} and sum(1 for v, n, _ in log if v == b"7" and n == 2) >= 1:
                break
            time.sleep(0.1)
        time.sleep(0.5)  # let the failed copy of 7 be acknowledged
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(15)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(5)

    log = attempts(logfile)
    ok = {v for v, _, r in log if r == "ok"}
    assert ok == set(VALUES) - {b"7"}, "some record was never handled successfully"
    first_attempts = [v for v, n, _ in log if v == killed_value.encode() and n == 0]
    assert len(first_attempts) == 2, "the record killed between ack and commit was not handled again"
    topics = read_all(srv.bootstrap, [topic, f"{topic}-retry-1s", f"{topic}-failed"])
    assert sorted(v for v, _ in topics[topic]) == sorted(VALUES)
    retried = {v for v, n in topics[f"{topic}-retry-1s"] if n == 1}
    assert retried == {v for v in VALUES if int(v) % 3 == 0 or v == b"7"}
    assert topics[f"{topic}-failed"] == [(b"7", 2)]
