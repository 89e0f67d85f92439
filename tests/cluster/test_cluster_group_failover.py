"""A consumer group through its coordinator's SIGKILL, in a real 3-node cluster (real ZooKeeper, real
`groupcoord serve` processes): kafka-python, confluent-kafka and our producer write acks=all to a
replication-factor-3 topic; a group of three (a kafka-python, a confluent-kafka and one of our consumers, each
in its own thread, committing after every poll) consumes it; the group's coordinator node is SIGKILLed (or
SIGTERMed: a controlled shutdown) half-way. The members find the new coordinator
and commit there; nothing consumed after the kill lies below what the group had committed (acknowledged)
before it; every acknowledged record was consumed, read from the new leaders; and the group's committed
offsets, read from the new coordinator, reach the end of every partition."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from cluster_nodes import find_coordinator, logs, stop_nodes, wait_for
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTP
from test_cluster_replication import TOPIC, three_with_topic

from client import Consumer, Producer
from client import TopicPartition as OTP

GROUP = "failover-group"
PER_PARTITION = 200
DEADLINE_S = 120


class Member(threading.Thread):
    """One group member polling and committing until told to stop (bounded by DEADLINE_S)."""

    def __init__(self, name: str, make: Any) -> None:
        super().__init__(name=name, daemon=True)
        self.make = make
        self.consumed: list[tuple[int, int, bytes, float]] = []  # partition, offset, value, when
        self.acked: list[tuple[float, dict[int, int]]] = []  # when, partition -> committed offset
        self.stop_at = time.monotonic() + DEADLINE_S
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # reported by the test
            self.error = e

    def _run(self) -> None:
        consumer, kind = self.make()
        try:
            while not self.stopping.is_set() and time.monotonic() < self.stop_at:
                now = time.monotonic()
                positions: dict[int, int] = {}
                if kind == "ck":
                    for msg in consumer.consume(20, 0.2):
                        if msg.error() is None:
                            self.consumed.append((msg.partition(), msg.offset(), msg.value(), now))
                            positions[msg.partition()] = msg.offset() + 1
                else:
                    got = consumer.poll(200) if kind == "ours" else consumer.poll(timeout_ms=200, max_records=20)
                    for tp, records in got.items():
                        for r in records:
                            self.consumed.append((tp.partition, r.offset, r.value, now))
                        positions[tp.partition] = records[-1].offset + 1
                if not positions:
                    continue
                try:
                    if kind == "ours":
                        consumer.commit({OTP(TOPIC, p): o for p, o in positions.items()})
                    elif kind == "ck":
                        from confluent_kafka import TopicPartition as CTP
                        consumer.commit(offsets=[CTP(TOPIC, p, o) for p, o in positions.items()], asynchronous=False)
                    else:
                        from kafka.structs import OffsetAndMetadata
                        consumer.commit({KTP(TOPIC, p): OffsetAndMetadata(o, "", -1) for p, o in positions.items()})
                    self.acked.append((time.monotonic(), positions))
                except Exception:  # a commit refused during the move: retried with the next poll's
                    pass
                time.sleep(0.05)  # consume slowly enough that the kill falls in the middle
        finally:
            consumer.close()


@pytest.mark.parametrize("signal", ["SIGKILL", "SIGTERM"])
def test_a_group_goes_on_through_its_coordinators_loss(tmp_path: Path, zk_connect: str, signal: str) -> None:
    nodes, parts = three_with_topic(tmp_path, zk_connect, 3)
    members: list[Member] = []
    try:
        bootstrap = [n.bootstrap for n in nodes.values()]
        produced: set[bytes] = set()
        kp = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, request_timeout_ms=20000)
        try:
            futs = [(v, kp.send(TOPIC, value=v, partition=i % 3))
                    for i in range(300) for v in [b"kp-%d" % i]]  # 100 + 60 + 40 a partition
            kp.flush(60)
            produced |= {v for v, f in futs if f.get(10).offset >= 0}
        finally:
            kp.close(5)
        with Producer(",".join(bootstrap), acks="all", request_timeout_ms=20000) as ours:
            futs2 = [(v, ours.send(TOPIC, value=v, partition=i % 3))
                     for i in range(180) for v in [b"ours-%d" % i]]
            ours.flush(60)
            produced |= {v for v, f in futs2 if f.get(10).offset >= 0}
        from confluent_kafka import Consumer as CKConsumer
        from confluent_kafka import Producer as CKProducer

        ck = CKProducer({"bootstrap.servers": ",".join(bootstrap), "acks": "all", "linger.ms": 5})
        delivered: list[bytes] = []
        for i in range(120):
            ck.produce(TOPIC, value=b"ck-%d" % i, partition=i % 3,
                       on_delivery=lambda err, msg: delivered.append(msg.value()) if err is None else None)
        assert ck.flush(60) == 0
        produced |= set(delivered)
        assert len(produced) == PER_PARTITION * 3

        coordinator = wait_for("the group's coordinator", lambda: (
            c if (c := find_coordinator(nodes[1], GROUP))[0] == 0 else None), describe=lambda: logs(nodes))[1]

        def kafka_python() -> tuple[Any, str]:
            return KafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id=GROUP, enable_auto_commit=False,
                                 auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=500,
                                 request_timeout_ms=10000, retry_backoff_ms=200), "kp"

        def our_client() -> tuple[Any, str]:
            c = Consumer(bootstrap_servers=",".join(bootstrap), group_id=GROUP, auto_offset_reset="earliest",
                         enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500,
                         request_timeout_ms=10000, max_poll_records=20)
            c.subscribe([TOPIC])
            return c, "ours"

        def confluent() -> tuple[Any, str]:
            c = CKConsumer({"bootstrap.servers": ",".join(bootstrap), "group.id": GROUP, "auto.offset.reset":
                            "earliest", "enable.auto.commit": False, "session.timeout.ms": 6000,
                            "heartbeat.interval.ms": 500})
            c.subscribe([TOPIC])
            return c, "ck"

        members = [Member("kp", kafka_python), Member("ck", confluent), Member("ours", our_client)]
        for m in members:
            m.start()
        total = lambda: sum(len(m.consumed) for m in members)  # noqa: E731
        wait_for("a third of the records consumed", lambda: total() >= len(produced) // 3, timeout=60,
                 describe=lambda: logs(nodes))
        killed_at = time.monotonic()
        if signal == "SIGKILL":
            nodes[coordinator].kill()
        else:  # controlled shutdown: its leaderships move first, then it drains and exits
            assert nodes[coordinator].stop() == 0
        survivors = {i: n for i, n in nodes.items() if i != coordinator}
        before: dict[int, int] = {}
        for m in members:
            for when, positions in m.acked:
                if when <= killed_at:
                    for p, o in positions.items():
                        before[p] = max(before.get(p, 0), o)

        consumed_values = lambda: {v for m in members for (_, _, v, _) in m.consumed}  # noqa: E731
        wait_for("every acknowledged record consumed", lambda: produced <= consumed_values(), timeout=DEADLINE_S,
                 interval=0.5, describe=lambda: logs(survivors) + f"\nconsumed {total()}")
        wait_for("a commit acknowledged after the kill", lambda: any(
            when > killed_at for m in members for when, _ in m.acked), timeout=30, describe=lambda: logs(survivors))
        for m in members:
            m.stopping.set()
        for m in members:
            m.join(30)
            assert m.error is None, (m.name, m.error)

        late = [(p, o) for m in members for (p, o, _, when) in m.consumed if when > killed_at and o < before.get(p, 0)]
        assert not late, f"consumed again below the committed offsets after the kill: {late[:10]} (before {before})"
        new = wait_for("the new coordinator", lambda: (
            c[1] if (c := find_coordinator(next(iter(survivors.values())), GROUP))[0] == 0 and c[1] in survivors
            else None), describe=lambda: logs(survivors))
        check = Consumer(bootstrap_servers=survivors[new].bootstrap, group_id=GROUP, enable_auto_commit=False,
                         request_timeout_ms=10000)
        try:
            committed = check.committed([OTP(TOPIC, p) for p in parts])
        finally:
            check.close()
        assert {tp.partition: (o.offset if o is not None else -1) for tp, o in committed.items()} == \
            {p: PER_PARTITION for p in parts}
    finally:
        for m in members:
            m.stopping.set()
        for m in members:
            m.join(30)
        stop_nodes(nodes)
