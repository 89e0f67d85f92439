"""Online migration end to end (core/consumer_group/migration.py): a classic group of kafka-python consumers is
upgraded when a confluent-kafka consumer (``group.protocol=consumer``) joins, they consume one topic together
(every record once), and the group is classic again once the confluent member leaves.

The story, on one server: kafka-python k1 consumes the first half of the records (classic group, Stable) and
commits; confluent c1 joins: the group becomes a consumer group (ConsumerGroupDescribe: one member of each type)
and, once k1 rejoined and revoked, the partitions split between them; the second half is produced and consumed,
each record by exactly one of them; c1 closes: the group goes back to classic (DescribeGroups: protocol type
consumer, k1 its only member; ConsumerGroupDescribe: not a consumer group) and k1 holds every partition again.
serial: it depends on the clients' heartbeats and rebalances (every wait is bounded, none is a threshold).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from server_process import ServerProcess, read_frame  # type: ignore[import-not-found]

from protocol.codec import decode_response, encode_request

pytestmark = pytest.mark.serial

TOPIC = "mixed"
PARTITIONS = 4
HALF = 20  # records per phase
GROUP = "migrating-group"


def _call(port: int, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(encode_request(api_key, version, 7, "raw-test", body))
        frame = read_frame(sock)
    assert frame is not None
    return decode_response(api_key, version, frame)[1]


def _consumer_describe(port: int) -> dict[str, Any]:
    answer = _call(port, 69, 1, {"group_ids": [GROUP], "include_authorized_operations": False})
    return answer["groups"][0]


def _classic_describe(port: int) -> dict[str, Any]:
    return _call(port, 15, 0, {"groups": [GROUP]})["groups"][0]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    from confluent_kafka.admin import AdminClient, NewTopic

    srv = ServerProcess(tmp_path / "data", "--group-initial-rebalance-delay-ms", "0",
                        "--group-consumer-min-heartbeat-interval-ms", "500",
                        "--group-consumer-heartbeat-interval-ms", "1000").start().wait_loaded()
    try:
        admin = AdminClient({"bootstrap.servers": srv.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(10)
        yield srv
    finally:
        srv.stop()


def _produce(srv: ServerProcess, first: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": srv.bootstrap})
    for i in range(first, first + HALF):
        producer.produce(TOPIC, value=b"r%d" % i, partition=i % PARTITIONS)
    assert producer.flush(10) == 0


def _until(step: Callable[[], None], done: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        step()
        if done():
            return
    pytest.fail(f"{what}: not reached in {timeout} s")


def test_mixed_group_upgrades_and_downgrades(server: ServerProcess) -> None:
    from confluent_kafka import Consumer
    from kafka import KafkaConsumer

    seen: dict[tuple[int, int], list[str]] = {}  # (partition, offset) -> who consumed it

    k1 = KafkaConsumer(TOPIC, bootstrap_servers=server.bootstrap, group_id=GROUP, auto_offset_reset="earliest",
                       enable_auto_commit=False, session_timeout_ms=10000, heartbeat_interval_ms=500,
                       max_poll_interval_ms=60000)
    c1: Any = None
    try:
        def poll_k1() -> None:
            for records in k1.poll(200).values():
                for r in records:
                    seen.setdefault((r.partition, r.offset), []).append("k1")
            if seen:
                k1.commit()

        # phase 1: the classic group alone
        _produce(server, 0)
        _until(poll_k1, lambda: len(seen) == HALF, 60, "k1 consumes the first half")
        assert _classic_describe(server.port)["protocol_type"] == "consumer"
        assert _consumer_describe(server.port)["error_code"] == 69  # not a consumer group (yet)

        # a consumer-protocol member joins: the group is upgraded
        c1 = Consumer({"bootstrap.servers": server.bootstrap, "group.id": GROUP, "group.protocol": "consumer",
                       "auto.offset.reset": "earliest", "enable.auto.commit": False})
        c1.subscribe([TOPIC])

        def poll_both() -> None:
            poll_k1()
            m = c1.poll(0.2)
            if m is not None and m.error() is None:
                seen.setdefault((m.partition(), m.offset()), []).append("c1")
                c1.commit(m, asynchronous=False)

        def split() -> bool:
            mine = {tp.partition for tp in c1.assignment()}
            theirs = {tp.partition for tp in k1.assignment()}
            return bool(mine) and bool(theirs) and not mine & theirs and mine | theirs == set(range(PARTITIONS))

        _until(poll_both, split, 90, "the partitions split between k1 and c1")
        described = _consumer_describe(server.port)
        assert described["error_code"] == 0
        assert sorted(m["member_type"] for m in described["members"]) == [0, 1]  # classic k1, consumer c1

        # phase 2: both consume; every record exactly once
        _produce(server, HALF)
        _until(poll_both, lambda: len(seen) == 2 * HALF, 60, "the second half consumed")
        assert all(len(who) == 1 for who in seen.values()), {k: v for k, v in seen.items() if len(v) > 1}
        assert {who[0] for (p, o), who in seen.items() if o >= HALF // PARTITIONS} == {"k1", "c1"}

        # the consumer-protocol member leaves: classic again, k1 takes everything
        c1.close()
        c1 = None
        _until(poll_k1, lambda: {tp.partition for tp in k1.assignment()} == set(range(PARTITIONS)), 60,
               "k1 holds every partition again")
        classic = _classic_describe(server.port)
        assert classic["error_code"] == 0 and classic["protocol_type"] == "consumer"
        assert classic["group_state"] in ("Stable", "CompletingRebalance") and len(classic["members"]) == 1
        assert _consumer_describe(server.port)["error_code"] == 69
        assert len(seen) == 2 * HALF and all(len(who) == 1 for who in seen.values())
    finally:
        if c1 is not None:
            c1.close()
        k1.close(autocommit=False)
    log = "".join(server.output)
    assert "upgraded from classic to consumer" in log and "downgraded from consumer to classic" in log
