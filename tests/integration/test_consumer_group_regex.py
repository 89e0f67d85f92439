"""KIP-848 regex subscriptions end to end: an unmodified confluent-kafka consumer (``group.protocol=consumer``)
subscribed to ``^orders-.*`` against a real ``groupcoord serve``. librdkafka sends the pattern, as
"(^orders-.*)", in ConsumerGroupHeartbeat v1's SubscribedTopicRegex (its cgrp debug log shows it); the
coordinator resolves it with RE2 against its topics: the consumer reads the two matching topics and never
the other one, a topic ``orders-late`` created afterwards is assigned at the next refresh (10 s after the
last resolution, bounded here at 40 s), ConsumerGroupDescribe shows the regex, and after a restart the resolution is replayed from
the offsets log (the group epoch does not move). Every wait is bounded."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from server_process import ServerProcess, free_port, read_frame  # type: ignore[import-not-found]

from protocol.codec import decode_response, encode_request

pytestmark = pytest.mark.serial

GROUP = "kip848-regex"
MATCHING = {"orders-eu": 2, "orders-us": 1}
OTHER = "payments"
PER_PARTITION = 5


def _describe(port: int) -> dict[str, Any]:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(encode_request(69, 1, 3, "raw-test", {"group_ids": [GROUP],
                                                            "include_authorized_operations": False}))
        frame = read_frame(sock)
    assert frame is not None
    return decode_response(69, 1, frame)[1]["groups"][0]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    # a fixed port: the consumer reconnects to the restarted server at the same address
    # heartbeats every second: the refresh (10 s after the last resolution) is reached by a heartbeat soon after
    srv = ServerProcess(tmp_path / "data", "--port", str(free_port()), "--group-consumer-min-heartbeat-interval-ms",
                        "1000", "--group-consumer-heartbeat-interval-ms", "1000", listeners=True).start().wait_loaded()
    try:
        admin = AdminClient({"bootstrap.servers": srv.bootstrap})
        topics = {**MATCHING, OTHER: 1}
        for fut in admin.create_topics([NewTopic(n, p, 1) for n, p in topics.items()]).values():
            fut.result(10)
        producer = Producer({"bootstrap.servers": srv.bootstrap})
        for name, partitions in topics.items():
            for p in range(partitions):
                for i in range(PER_PARTITION):
                    producer.produce(name, value=b"%s-%d-%d" % (name.encode(), p, i), partition=p)
        assert producer.flush(10) == 0
        yield srv
    finally:
        srv.stop()


def test_regex_subscription_end_to_end(server: ServerProcess) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    lines: list[str] = []

    class Sink(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger("kip848-regex")
    logger.addHandler(Sink())
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": GROUP, "group.protocol": "consumer",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "debug": "cgrp", "logger": logger})
    try:
        consumer.subscribe(["^orders-.*"])
        want = sum(MATCHING.values()) * PER_PARTITION
        seen: dict[str, int] = {}
        deadline = time.monotonic() + 30
        while sum(seen.values()) < want and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is not None:
                assert m.error() is None, m.error()
                seen[m.topic()] = seen.get(m.topic(), 0) + 1
        assert seen == {t: p * PER_PARTITION for t, p in MATCHING.items()}, (seen, lines[-30:])
        assert {(tp.topic, tp.partition) for tp in consumer.assignment()} == \
            {(t, p) for t, n in MATCHING.items() for p in range(n)}
        # librdkafka 2.16 sends its patterns (each in parentheses, joined by "|") as SubscribedTopicRegex and
        # no names (its heartbeat debug line)
        sent = 'subscribed topics "", subscribed topic regex "(^orders-.*)"'
        assert any("ConsumerGroupHeartbeat" in line and sent in line for line in lines), lines[-30:]

        described = _describe(server.port)
        assert described["error_code"] == 0
        [member] = described["members"]
        assert member["subscribed_topic_regex"] == "(^orders-.*)"

        # a topic created afterwards is picked up at the next refresh (10 s), within a bounded time
        admin = AdminClient({"bootstrap.servers": server.bootstrap})  # kept: a dropped client cancels its calls
        admin.create_topics([NewTopic("orders-late", 2, 1)])["orders-late"].result(10)
        producer = Producer({"bootstrap.servers": server.bootstrap})
        producer.produce("orders-late", value=b"late", partition=1)
        assert producer.flush(10) == 0
        got_late = False
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and not got_late:
            m = consumer.poll(0.2)
            if m is not None:
                assert m.error() is None, m.error()
                assert m.topic() != OTHER
                got_late = m.topic() == "orders-late" and m.value() == b"late"
        assert got_late, ({(tp.topic, tp.partition) for tp in consumer.assignment()}, lines[-30:])
        assert ("orders-late", 0) in {(tp.topic, tp.partition) for tp in consumer.assignment()}
        assert all(tp.topic != OTHER for tp in consumer.assignment())

        # a restart replays the resolution (record 16) from the offsets log: the member's heartbeats after it
        # find the regex resolved, so nothing is re-resolved and the group epoch stays
        before = _describe(server.port)
        assert server.stop() == 0
        server.start()
        deadline = time.monotonic() + 20
        while (again := _describe(server.port))["error_code"] == 14 and time.monotonic() < deadline:
            time.sleep(0.1)  # COORDINATOR_LOAD_IN_PROGRESS
        assert again["group_epoch"] == before["group_epoch"]
        mark = len(lines)
        answered = "ConsumerGroupHeartbeat response received"  # librdkafka's debug line
        end = time.monotonic() + 25
        while time.monotonic() < end and not any(answered in x for x in lines[mark:]):
            consumer.poll(0.2)
        assert any(answered in x for x in lines[mark:]), ("no heartbeat answered after the restart", lines[-20:])
        after = _describe(server.port)
        assert (after["group_epoch"], len(after["members"])) == (before["group_epoch"], 1), (before, after)
        assert {tp["topic_name"] for tp in after["members"][0]["assignment"]["topic_partitions"]} == \
            {*MATCHING, "orders-late"}
    finally:
        consumer.close()
