"""`groupcoord retry status` and `groupcoord retry replay`, run as the real command against the daemon after a
RetryingConsumer left two records waiting in a retry topic and one in the failed topic."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kafka import KafkaConsumer

from client.fetcher import ConsumerRecord
from client.producer import Producer
from client.retry import RetryingConsumer, RetryPolicy

REPO = Path(__file__).resolve().parents[2]

from server_process import ServerProcess


class BadInput(ValueError):
    pass


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(tmp_path_factory.mktemp("retrycli") / "data", "--num-partitions", "1",
                           "--group-min-session-timeout-ms", "1000", "--group-initial-rebalance-delay-ms", "0").start()
    try:
        yield server
    finally:
        server.stop()


def cli(bootstrap: str, *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "coordinator.cli", "retry", *args, "-b", bootstrap], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def read(bootstrap: str, topic: str) -> list[object]:
    kc = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None,
                       enable_auto_commit=False, consumer_timeout_ms=1500)
    try:
        return list(kc)
    finally:
        kc.close()


def rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines()]


def test_status_then_replay_dry_run_then_execute(srv: ServerProcess) -> None:
    topic = f"cli-{uuid.uuid4().hex[:6]}"
    group = f"g-{topic}"
    with Producer(srv.bootstrap, acks="all") as producer:
        for i in range(5):
            producer.send(topic, b"r%d" % i, key=b"k%d" % i, headers=[("trace", b"t%d" % i)])
        producer.flush(10)

    def handler(rec: ConsumerRecord) -> None:
        if rec.value in (b"r0", b"r1"):
            raise RuntimeError("later")
        if rec.value == b"r2":
            raise BadInput("never")

    rc = RetryingConsumer(bootstrap_servers=srv.bootstrap, group_id=group, topics=[topic], handler=handler,
                          policy=RetryPolicy.parse("1m,1h", not_retryable=[BadInput]), fetch_max_wait_ms=100)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (rc.stats.failed == 1 and rc.consumer.paused()):
            rc.poll_once(100)
        assert rc.stats.retried == {"1m": 2} and rc.stats.failed == 1
    finally:
        rc.close()

    dues = sorted(int(dict(r.headers)["retry_timestamp"]) for r in read(srv.bootstrap, f"{topic}-retry-1m"))
    next_due = datetime.fromtimestamp(dues[0] / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    status = rows(cli(srv.bootstrap, "status", topic, "--group", group))
    assert status[1] == ["TOPIC", "DELAY", "PARTITIONS", "WAITING", "NEXT-DUE"]
    assert status[2:4] == [[f"{topic}-retry-1m", "1m", "1", "2", next_due], [f"{topic}-retry-1h", "1h", "1", "0", "-"]]
    assert status[4] == ["FAILED", f"{topic}-failed:", "1", "records"]
    with_policy = rows(cli(srv.bootstrap, "status", topic, "--policy", "1m,1h"))  # no group: every record waits
    assert with_policy[0][-1] == "records)" and with_policy[2:] == status[2:]

    dry = cli(srv.bootstrap, "replay", f"{topic}-failed")
    table = rows(dry)
    assert table[0] == ["PARTITION", "OFFSET", "KEY", "RETRIES", "EXCEPTION", "TO"]
    assert table[1][:4] == ["0", "0", "k2", "0"] and table[1][-1] == topic and "BadInput:" in dry
    assert "dry run: 1 records would be replayed" in dry
    assert len(read(srv.bootstrap, topic)) == 5

    done = cli(srv.bootstrap, "replay", f"{topic}-failed", "--execute")
    assert f"replayed 1 records: 1 to {topic}" in done
    main = read(srv.bootstrap, topic)
    assert len(main) == 6
    replayed = main[-1]
    assert (replayed.key, replayed.value, replayed.headers) == (b"k2", b"r2", [("trace", b"t2")])
