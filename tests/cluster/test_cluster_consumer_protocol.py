"""A KIP-848 consumer group through its coordinator's SIGKILL, in a real 3-node cluster (#36 item 9).

Two confluent-kafka consumers with ``group.protocol=consumer`` (each in its own thread, committing after every
poll) consume a replication-factor-3 topic of six partitions; half-way, the node coordinating the group is
SIGKILLed. The members go on through the new coordinator (a follower that replayed the group's records): every
acknowledged record is consumed, the group's committed offsets reach the end of every partition, and no partition
is ever owned by both members at once (each member samples its assignment after every poll; two samples that claim
one partition must not overlap in time). Every wait is bounded.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from cluster_nodes import find_coordinator, logs, stop_nodes, wait_for
from test_cluster_replication import TOPIC, three_with_topic

pytestmark = pytest.mark.serial  # three nodes, a ZooKeeper and session timeouts: the machine to itself

GROUP = "kip848-failover"
PARTITIONS = 6
PER_PARTITION = 100
DEADLINE_S = 120


class Member(threading.Thread):
    def __init__(self, name: str, bootstrap: str) -> None:
        super().__init__(name=name, daemon=True)
        self.bootstrap = bootstrap
        self.consumed: list[tuple[int, int, bytes]] = []
        self.owned: list[tuple[float, float, frozenset[int]]] = []  # (from, to, partitions) between two polls
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # reported by the test
            self.error = e

    def _run(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP, "group.protocol": "consumer",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
        c.subscribe([TOPIC])
        deadline = time.monotonic() + DEADLINE_S
        try:
            while not self.stopping.is_set() and time.monotonic() < deadline:
                before = time.monotonic()
                mine = frozenset(tp.partition for tp in c.assignment())
                msgs = [m for m in c.consume(5, 0.2) if m.error() is None]
                after_mine = frozenset(tp.partition for tp in c.assignment())
                self.owned.append((before, time.monotonic(), mine & after_mine))
                positions: dict[int, int] = {}
                for m in msgs:
                    self.consumed.append((m.partition(), m.offset(), m.value()))
                    positions[m.partition()] = m.offset() + 1
                if positions:
                    try:
                        c.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in positions.items()],
                                 asynchronous=False)
                    except Exception:  # refused during the move: the next poll's commit covers it
                        pass
                time.sleep(0.05)  # slow enough that the kill falls in the middle
        finally:
            c.close()


def test_a_consumer_protocol_group_goes_on_through_its_coordinators_kill(tmp_path: Path, zk_connect: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    # heartbeats every second (Kafka's default 5 s): the second member gets its half a revocation round sooner
    nodes, _parts = three_with_topic(tmp_path, zk_connect, PARTITIONS, "--group-consumer-min-heartbeat-interval-ms",
                                     "1000", "--group-consumer-heartbeat-interval-ms", "1000")
    members: list[Member] = []
    try:
        bootstrap = ",".join(n.bootstrap for n in nodes.values())
        delivered: list[bytes] = []
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
        for i in range(PARTITIONS * PER_PARTITION):
            p.produce(TOPIC, b"v-%d" % i, partition=i % PARTITIONS,
                      on_delivery=lambda err, msg: delivered.append(msg.value()) if err is None else None)
        assert p.flush(60) == 0 and len(delivered) == PARTITIONS * PER_PARTITION

        coordinator = wait_for("the group's coordinator", lambda: (
            c if (c := find_coordinator(nodes[1], GROUP))[0] == 0 else None), describe=lambda: logs(nodes))[1]
        members = [Member("a", bootstrap), Member("b", bootstrap)]
        for m in members:
            m.start()
        wait_for("both members owning partitions", lambda: all(m.owned and m.owned[-1][2] for m in members),
                 timeout=60, describe=lambda: logs(nodes))
        wait_for("a third consumed", lambda: sum(len(m.consumed) for m in members) >= len(delivered) // 3,
                 timeout=60, describe=lambda: logs(nodes))
        nodes[coordinator].kill()

        def all_consumed() -> bool:
            seen = {v for m in members for _, _, v in m.consumed}
            return seen >= set(delivered)
        wait_for("every record consumed after the kill", all_consumed, timeout=90, interval=0.5,
                 describe=lambda: logs(nodes))
        alive = [n for i, n in nodes.items() if i != coordinator]
        check = Consumer({"bootstrap.servers": ",".join(n.bootstrap for n in alive), "group.id": GROUP,
                          "enable.auto.commit": False})

        def committed_to_end() -> bool:
            got = check.committed([TopicPartition(TOPIC, q) for q in range(PARTITIONS)], 10)
            return all(tp.offset == PER_PARTITION for tp in got)
        wait_for("the group's offsets at every partition's end", committed_to_end, timeout=60, interval=0.5,
                 describe=lambda: logs(nodes))
        check.close()
        for m in members:
            m.stopping.set()
        for m in members:
            m.join(30)
            assert m.error is None, m.error
        a, b = members
        for a_from, a_to, a_parts in a.owned:  # no partition owned by both at overlapping times
            for b_from, b_to, b_parts in b.owned:
                if a_from < b_to and b_from < a_to:
                    assert not (a_parts & b_parts), (a_from, a_to, a_parts, b_from, b_to, b_parts)
    finally:
        for m in members:
            m.stopping.set()
        stop_nodes(nodes)
