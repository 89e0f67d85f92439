"""`groupcoord groups list / describe` on a KIP-848 consumer group: two confluent-kafka consumers
(``group.protocol=consumer``) against a real ``groupcoord serve``; the CLI lists the group with TYPE
consumer (ListGroups v5) and describes it with ConsumerGroupDescribe (69): state, epochs, assignor and each
member's id, host, client id, epoch and partitions (named). A classic group beside it is still described
with DescribeGroups, and an unknown group is still GROUP_ID_NOT_FOUND. Every wait is bounded."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from server_process import REPO, ServerProcess  # type: ignore[import-not-found]

pytestmark = pytest.mark.serial

TOPIC = "cli848"
GROUP = "cli-848"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """The shared fixture's server, telling consumer-protocol members 1 s heartbeats (Kafka's default 5 s): the
    second member's partitions come a revocation round sooner."""
    srv = ServerProcess(tmp_path / "data", "--group-min-session-timeout-ms", "1000",
                        "--group-initial-rebalance-delay-ms", "0", "--num-partitions", "4",
                        "--group-consumer-min-heartbeat-interval-ms", "1000",
                        "--group-consumer-heartbeat-interval-ms", "1000").start()
    try:
        yield srv
    finally:
        srv.stop()


def gc(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coordinator.cli", *args, "-b", server.bootstrap],
                          capture_output=True, text=True, timeout=60, cwd=REPO)


def rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line.strip()]


def test_groups_list_and_describe_a_consumer_group(server: ServerProcess) -> None:
    from confluent_kafka import Consumer
    from kafka import KafkaConsumer

    assert gc(server, "topics", "create", TOPIC, "--partitions", "4").returncode == 0
    conf: dict[str, Any] = {"bootstrap.servers": server.bootstrap, "group.id": GROUP, "group.protocol": "consumer",
                            "auto.offset.reset": "earliest"}
    consumers = [Consumer({**conf, "client.id": f"cli-client-{i}"}) for i in range(2)]
    classic = KafkaConsumer(TOPIC, bootstrap_servers=server.bootstrap, group_id="cli-classic",
                            session_timeout_ms=10000, heartbeat_interval_ms=1000)
    try:
        for c in consumers:
            c.subscribe([TOPIC])
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            for c in consumers:
                c.poll(0.2)
            classic.poll(100)
            if all(len(c.assignment()) == 2 for c in consumers) and classic.assignment():
                break
        assert [len(c.assignment()) for c in consumers] == [2, 2]

        listed = {r[0]: r for r in rows(gc(server, "groups", "list").stdout)}
        assert listed["GROUP"] == ["GROUP", "STATE", "PROTOCOL-TYPE", "TYPE"]
        assert listed[GROUP][-1] == "consumer" and listed["cli-classic"][-1] == "classic"

        # the members settle at the group epoch: wait for a Stable describe
        deadline = time.monotonic() + 20
        while True:
            r = gc(server, "groups", "describe", GROUP)
            assert r.returncode == 0, r.stderr
            if "STATE Stable" in r.stdout or time.monotonic() > deadline:
                break
            for c in consumers:
                c.poll(0.2)
        header, *table = r.stdout.strip().splitlines()
        words = header.split()
        assert words[:5] == ["GROUP", GROUP, "TYPE", "consumer", "STATE"] and "STATE Stable" in header
        epoch = words[words.index("GROUP-EPOCH") + 1]
        assert int(epoch) >= 2 and words[words.index("ASSIGNMENT-EPOCH") + 1] == epoch
        assert words[words.index("ASSIGNOR") + 1] == "uniform" and words[-2:] == ["MEMBERS", "2"]
        assert table[0].split() == ["CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "MEMBER-EPOCH",
                                    "#PARTITIONS", "ASSIGNMENT"]
        members = [line.split() for line in table[1:]]
        assert len(members) == 2
        assert sorted(m[3] for m in members) == ["cli-client-0", "cli-client-1"]
        assert all(m[1] == "-" and m[2] == "/127.0.0.1" and m[4] == epoch and m[5] == "2" for m in members)
        owned = sorted(p for m in members for p in m[6].split(","))
        assert owned == [f"{TOPIC}-{p}" for p in range(4)]

        # the classic group and an unknown one: DescribeGroups, as before
        r = gc(server, "groups", "describe", "cli-classic", "no-such-group")
        assert "GROUP cli-classic  STATE Stable  PROTOCOL" in r.stdout and "TYPE consumer" not in r.stdout
        assert r.returncode == 1 and "group no-such-group: GROUP_ID_NOT_FOUND" in r.stderr  # DescribeGroups v6
    finally:
        for c in consumers:
            c.close()
        classic.close()
