"""Mixed groups: our Consumer shares one group with kafka-python and confluent-kafka consumers.

Every partition must have exactly one owner, as the coordinator records it (DescribeGroups decodes each
member's assignment), whichever client the group elected as leader.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from client import AdminClient, Consumer
from client.assignors import RangeAssignor, RoundRobinAssignor

SESSION_MS = 3000


class ThreadedPoller:
    """Keeps a third-party consumer in the group by polling it on its own thread."""

    def __init__(self, poll: Callable[[], Any], close: Callable[[], Any]) -> None:
        self._poll, self._close = poll, close
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            self._poll()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(15)
        self._close()


def ownership(bootstrap: str, group: str) -> tuple[str, dict[int, list[str]]]:
    with AdminClient(bootstrap) as admin:
        d = admin.describe_groups([group])[0]
    owners: dict[int, list[str]] = {}
    for m in d.members:
        for tp in m.assignment:
            owners.setdefault(tp.partition, []).append(m.client_id)
    return d.state, owners


def wait_for_ownership(bootstrap: str, group: str, clients: set[str], partitions: int,
                       timeout_s: float = 40) -> dict[int, list[str]]:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        state, owners = ownership(bootstrap, group)
        last = (state, owners)
        owning = {c for ids in owners.values() for c in ids}
        if state == "Stable" and sorted(owners) == list(range(partitions)) and owning == clients:
            return owners
        time.sleep(0.2)
    raise AssertionError(f"group never settled with every client owning partitions: {last}")


@pytest.fixture
def topic(broker: Any) -> str:
    name = f"mixed-{uuid.uuid4().hex[:8]}"
    with AdminClient(broker.bootstrap) as admin:
        assert admin.create_topics({name: 6})[0].error_code == 0
    return name


def ours(bootstrap: str, group: str, topic: str, client_id: str, assignor: Any) -> ThreadedPoller:
    c = Consumer(bootstrap_servers=bootstrap, group_id=group, client_id=client_id, session_timeout_ms=SESSION_MS,
                 heartbeat_interval_ms=300, partition_assignment_strategy=[assignor])
    c.subscribe([topic])
    return ThreadedPoller(lambda: c.poll(100), lambda: c.close(timeout_ms=5000))


def kafka_python(bootstrap: str, group: str, topic: str, client_id: str, assignor: Any) -> ThreadedPoller:
    from kafka import KafkaConsumer

    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, client_id=client_id,
                      session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300,
                      partition_assignment_strategy=[assignor])
    return ThreadedPoller(lambda: c.poll(100), c.close)


@pytest.mark.parametrize("assignor", ["range", "roundrobin"])
def test_ours_and_kafka_python_share_a_group(broker: Any, topic: str, assignor: str) -> None:
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    theirs = RangePartitionAssignor if assignor == "range" else RoundRobinPartitionAssignor
    mine = RangeAssignor() if assignor == "range" else RoundRobinAssignor()
    group = f"mixed-kp-{assignor}"
    members = [kafka_python(broker.bootstrap, group, topic, "kp-1", theirs),
               ours(broker.bootstrap, group, topic, "ours-1", mine),
               kafka_python(broker.bootstrap, group, topic, "kp-2", theirs)]
    try:
        owners = wait_for_ownership(broker.bootstrap, group, {"kp-1", "ours-1", "kp-2"}, 6)
        assert all(len(ids) == 1 for ids in owners.values()), owners
        assert sorted(sum(1 for ids in owners.values() if c in ids) for c in ("kp-1", "ours-1", "kp-2")) == [2, 2, 2]
        # one leaves cleanly: the other two take its partitions, still exactly one owner each
        members.pop(0).close()
        owners = wait_for_ownership(broker.bootstrap, group, {"ours-1", "kp-2"}, 6)
        assert all(len(ids) == 1 for ids in owners.values()), owners
    finally:
        for m in members:
            m.close()


def test_ours_and_confluent_kafka_share_a_group(broker: Any, topic: str) -> None:
    from confluent_kafka import Consumer as ConfluentConsumer

    group = "mixed-confluent"
    conf = ConfluentConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "client.id": "rdk-1",
                              "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 300,
                              "partition.assignment.strategy": "range", "broker.address.family": "v4"})
    conf.subscribe([topic])
    members = [ThreadedPoller(lambda: conf.poll(0.1), conf.close),
               ours(broker.bootstrap, group, topic, "ours-1", RangeAssignor())]
    try:
        owners = wait_for_ownership(broker.bootstrap, group, {"rdk-1", "ours-1"}, 6)
        assert all(len(ids) == 1 for ids in owners.values()), owners
        assert sorted(sum(1 for ids in owners.values() if c in ids) for c in ("rdk-1", "ours-1")) == [3, 3]
    finally:
        for m in members:
            m.close()

