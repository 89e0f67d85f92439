"""Transactions in a real 3-node cluster (real ZooKeeper, real `groupcoord serve` processes; #38).

The stories: a confluent-kafka consume-transform-produce loop whose transactions span partitions led by every
node and a group whose offsets partition is led by one of them, read back read_committed (every record once,
the group's offsets moved only with committed transactions); then the transaction coordinator node is
SIGKILLed right after a commit was acknowledged: the new coordinator (another replica of its
``__transaction_state`` partition) completes it (every participant partition on the other nodes shows the
transaction's records, nothing of an aborted one), fences the old producer's epoch (a new producer with the same
transactional id gets a higher epoch) and serves the next transactions. Every wait is bounded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cluster_nodes import logs, metadata, request, start_nodes, stop_nodes, wait_for
from test_cluster_user_topics import agreed_topic, create_topic

pytestmark = pytest.mark.serial  # three nodes and a ZooKeeper with short sessions: the machine to itself

TOPIC_IN, TOPIC_OUT = "ctx-in", "ctx-out"
TXN_ID = "cluster-copier"
GROUP = "cluster-copier-group"
FIND_COORDINATOR = 10


def _txn_coordinator(nodes: dict[int, Any], txn_id: str) -> int:
    """The node id coordinating ``txn_id`` (FindCoordinator key type 1, asked until it names one of ``nodes``)."""
    def ask() -> int | None:
        any_node = next(n for n in nodes.values() if n.alive())
        resp = request(any_node, FIND_COORDINATOR, lambda v: {"key": txn_id, "key_type": 1,
                                                              "coordinator_keys": [txn_id]})
        entry = resp["coordinators"][0] if resp.get("coordinators") else resp
        return entry["node_id"] if entry["error_code"] == 0 and entry["node_id"] in nodes else None
    return wait_for("a transaction coordinator", ask, timeout=60, describe=lambda: logs(nodes))


def _try(call: Callable[[], object]) -> object:
    """None when ``call`` succeeded, else the exception it raised."""
    try:
        call()
        return None
    except Exception as e:  # the commit may fail with its coordinator gone
        return e


def _read_committed(bootstrap: str, topic: str, expected: int, group: str, timeout_s: float = 60.0) -> list[bytes]:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    c.subscribe([topic])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    settle = None
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                out.append(m.value())
            if len(out) >= expected and settle is None:
                settle = time.monotonic() + 1.0
            if settle is not None and time.monotonic() >= settle:
                break
    finally:
        c.close()
    return out


def test_transactions_span_nodes_and_survive_their_coordinators_kill(tmp_path: Path, zk_connect: str) -> None:
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    nodes = start_nodes(tmp_path, zk_connect, [1, 2, 3])
    try:
        for n in nodes.values():
            wait_for("three brokers", lambda n=n: len(metadata(n)["brokers"]) == 3, describe=lambda: logs(nodes))
        assert create_topic(nodes[1], TOPIC_IN, 3, 3)["error_code"] == 0
        assert create_topic(nodes[1], TOPIC_OUT, 3, 3)["error_code"] == 0
        parts = agreed_topic(nodes, TOPIC_OUT)
        assert len({p["leader_id"] for p in parts.values()}) == 3, parts  # every node leads a participant
        bootstrap = ",".join(n.bootstrap for n in nodes.values())
        plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        values = [f"v-{i:03d}".encode() for i in range(60)]
        for i, v in enumerate(values):
            plain.produce(TOPIC_IN, v, partition=i % 3)
        assert plain.flush(30) == 0

        coordinator = _txn_coordinator(nodes, TXN_ID)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest",
                             "enable.auto.commit": False, "isolation.level": "read_committed"})
        consumer.subscribe([TOPIC_IN])
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": TXN_ID,
                             "transaction.timeout.ms": 10000})
        producer.init_transactions(60)
        copied, aborted, deadline = 0, 0, time.monotonic() + 90
        while copied < len(values) and time.monotonic() < deadline:
            batch = [m for m in consumer.consume(10, 0.5) if m.error() is None]
            if not batch:
                continue
            producer.begin_transaction()
            for m in batch:
                producer.produce(TOPIC_OUT, m.value().upper(), partition=m.partition())
            assert producer.flush(30) == 0
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 60)
            if aborted == 0 and copied > 0:  # one abort: its records must never become visible
                producer.abort_transaction(60)
                aborted += 1
                for tp in consumer.committed(consumer.assignment(), 30):
                    consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))
                continue
            producer.commit_transaction(60)
            copied += len(batch)
        consumer.close()
        assert copied == len(values) and aborted == 1, (copied, aborted)

        # the coordinator dies while a transaction over the three partitions is being committed
        producer.begin_transaction()
        mid = [f"mid-{p}".encode() for p in range(3)]
        for p, v in enumerate(mid):
            producer.produce(TOPIC_OUT, v, partition=p)
        assert producer.flush(30) == 0
        outcome: list[object] = []
        committing = threading.Thread(target=lambda: outcome.append(_try(lambda: producer.commit_transaction(60))))
        committing.start()
        time.sleep(0.002)
        nodes[coordinator].kill()
        committing.join(90)
        alive = {i: n for i, n in nodes.items() if i != coordinator}
        bootstrap = ",".join(n.bootstrap for n in alive.values())
        new_coordinator = _txn_coordinator(alive, TXN_ID)
        assert new_coordinator != coordinator
        out = _read_committed(bootstrap, TOPIC_OUT, len(values), "ctx-reader")
        got_mid = sorted(v for v in out if v.startswith(b"mid-"))
        print("mid-commit outcome:", outcome, "visible:", got_mid)
        assert got_mid in ([], mid), got_mid  # all of it or none of it, on every partition
        if outcome == [None]:  # acknowledged: it must have completed on the new coordinator
            assert got_mid == mid
        out = [v for v in out if not v.startswith(b"mid-")]
        assert sorted(out) == sorted(v.upper() for v in values)  # all committed ones, once; none aborted
        check = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                          "isolation.level": "read_committed"})
        committed = check.committed([TopicPartition(TOPIC_IN, p) for p in range(3)], 30)
        check.close()
        assert sum(tp.offset for tp in committed) == len(values)

        # a new producer with the same id: fenced past the old epoch, and its transaction commits everywhere
        again = Producer({"bootstrap.servers": bootstrap, "transactional.id": TXN_ID})
        again.init_transactions(60)
        again.begin_transaction()
        for p in range(3):
            again.produce(TOPIC_OUT, f"after-{p}".encode(), partition=p)
        again.commit_transaction(60)
        out = _read_committed(bootstrap, TOPIC_OUT, len(values) + 3 + len(got_mid), "ctx-reader-2")
        assert sorted(out) == sorted([v.upper() for v in values] + [f"after-{p}".encode() for p in range(3)]
                                     + got_mid)
        # the old producer is fenced: its next transaction fails and nothing of it becomes visible
        if outcome == [None]:
            with pytest.raises(KafkaException):
                producer.begin_transaction()
                producer.produce(TOPIC_OUT, b"zombie", partition=0)
                producer.commit_transaction(30)
            assert b"zombie" not in _read_committed(bootstrap, TOPIC_OUT, len(out), "ctx-reader-3")
    finally:
        stop_nodes(nodes)
