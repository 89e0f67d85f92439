"""KIP-848 end to end: unmodified confluent-kafka consumers with ``group.protocol=consumer`` against a real
``groupcoord serve`` over TCP (ConsumerGroupHeartbeat 68, ConsumerGroupDescribe 69, OffsetCommit/Fetch v9).

The story, in order on one server (module fixture): one consumer takes all 4 partitions, consumes and
commits; a second joins and they split 2/2; the second closes and the first gets all 4 back; the committed
offsets are seen by OffsetFetch; ConsumerGroupDescribe (raw frame) shows the members, epochs and
assignments (a classic member joining such a group: test_consumer_group_migration.py); the server restarts (SIGTERM, same data dir) and the group comes back from the
offsets log: its epoch, and a new consumer resumes from the committed offsets. Apart: a server with
``--group-coordinator-rebalance-protocols classic`` advertises neither API, and librdkafka fails as it
does against a broker without them. Every wait is bounded.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from server_process import ServerProcess, read_frame  # type: ignore[import-not-found]

from protocol.codec import decode_response, encode_request

pytestmark = pytest.mark.serial

TOPIC = "cg848"
PARTITIONS = 4
PER_PARTITION = 10
GROUP = "kip848-group"


def _conf(srv: ServerProcess, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": srv.bootstrap, "group.id": GROUP, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False, **extra}


def _call(port: int, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(encode_request(api_key, version, 7, "raw-test", body))
        frame = read_frame(sock)
    assert frame is not None
    correlation, answer = decode_response(api_key, version, frame)
    assert correlation == 7
    return answer


def _api_versions(port: int) -> dict[int, tuple[int, int]]:
    answer = _call(port, 18, 3, {"client_software_name": "raw", "client_software_version": "1"})
    return {k["api_key"]: (k["min_version"], k["max_version"]) for k in answer["api_keys"]}


def _describe(port: int) -> dict[str, Any]:
    answer = _call(port, 69, 1, {"group_ids": [GROUP, "no-such-group"], "include_authorized_operations": False})
    groups = {g["group_id"]: g for g in answer["groups"]}
    assert groups["no-such-group"]["error_code"] in (69, 14)  # GROUP_ID_NOT_FOUND (or still loading)
    return groups[GROUP]


def _partitions(consumer: Any) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def _poll_until(consumers: list[Any], done: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(0.2)
        if done():
            return
    pytest.fail(f"{what} not reached in {timeout} s: " + ", ".join(str(sorted(_partitions(c))) for c in consumers))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    data: Path = tmp_path_factory.mktemp("kip848") / "data"
    # heartbeats every second (Kafka's default 5 s): a member learns of a revocation or a freed partition sooner
    srv = ServerProcess(data, "--group-consumer-min-heartbeat-interval-ms", "1000",
                        "--group-consumer-heartbeat-interval-ms", "1000").start().wait_loaded()
    try:
        admin = AdminClient({"bootstrap.servers": srv.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(10)
        producer = Producer({"bootstrap.servers": srv.bootstrap})
        for i in range(PARTITIONS * PER_PARTITION):
            producer.produce(TOPIC, value=b"m%d" % i, partition=i % PARTITIONS)
        assert producer.flush(10) == 0
        yield srv
    finally:
        srv.stop()


def test_consumer_protocol_group_end_to_end(server: ServerProcess) -> None:
    from confluent_kafka import Consumer, TopicPartition

    assert _api_versions(server.port).get(68) == (0, 1) and _api_versions(server.port).get(69) == (0, 1)

    # one consumer: every partition, every record; commit
    c1 = Consumer(_conf(server))
    c1.subscribe([TOPIC])
    seen = 0
    deadline = time.monotonic() + 30
    while seen < PARTITIONS * PER_PARTITION and time.monotonic() < deadline:
        m = c1.poll(0.2)
        if m is not None:
            assert m.error() is None, m.error()
            seen += 1
    assert seen == PARTITIONS * PER_PARTITION
    assert _partitions(c1) == set(range(PARTITIONS))
    c1.commit(asynchronous=False)
    committed = c1.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10)
    assert [tp.offset for tp in committed] == [PER_PARTITION] * PARTITIONS

    # a second joins: 2/2
    c2 = Consumer(_conf(server))
    c2.subscribe([TOPIC])
    _poll_until([c1, c2], lambda: len(_partitions(c1)) == 2 and len(_partitions(c2)) == 2, 40, "a 2/2 split")
    assert _partitions(c1) | _partitions(c2) == set(range(PARTITIONS))

    described = _describe(server.port)
    assert described["error_code"] == 0 and described["group_state"] in ("Stable", "Reconciling")
    assert len(described["members"]) == 2
    assert all(m["member_epoch"] > 0 and m["subscribed_topic_names"] == [TOPIC] for m in described["members"])
    owned = sorted(p for m in described["members"] for tp in m["assignment"]["topic_partitions"]
                   for p in tp["partitions"])
    assert owned == list(range(PARTITIONS))
    assert {tp["topic_name"] for m in described["members"] for tp in m["target_assignment"]["topic_partitions"]} \
        == {TOPIC}

    # (a classic consumer joining this group: tests/integration/test_consumer_group_migration.py)

    # the second leaves: the first gets everything back
    c2.close()
    _poll_until([c1], lambda: _partitions(c1) == set(range(PARTITIONS)), 40, "all partitions back")
    epoch = _describe(server.port)["group_epoch"]
    c1.close()
    after_leave = _describe(server.port)
    assert after_leave["group_state"] == "Empty" and after_leave["group_epoch"] > epoch

    # OffsetFetch v9 (member id null, epoch -1: an admin's fetch) sees the commits
    fetched = _call(server.port, 9, 9, {"groups": [{"group_id": GROUP, "member_id": None, "member_epoch": -1,
                                                    "topics": None}], "require_stable": False})
    parts = fetched["groups"][0]["topics"][0]["partitions"]
    assert {p["partition_index"]: p["committed_offset"] for p in parts} == dict.fromkeys(range(PARTITIONS),
                                                                                        PER_PARTITION)
    # ... and a stale member's is refused as Kafka's validateOffsetFetch does
    stale = _call(server.port, 9, 9, {"groups": [{"group_id": GROUP, "member_id": "gone", "member_epoch": 3,
                                                  "topics": None}], "require_stable": False})
    assert stale["groups"][0]["error_code"] == 25  # UNKNOWN_MEMBER_ID

    # restart on the same data dir: the group is replayed from the offsets log
    before = _describe(server.port)
    assert server.stop() == 0
    server.start()
    deadline = time.monotonic() + 20
    while (again := _describe(server.port))["error_code"] == 14 and time.monotonic() < deadline:
        time.sleep(0.1)  # COORDINATOR_LOAD_IN_PROGRESS (the old run's "loaded" line is still in the output)
    assert (again["group_epoch"], again["assignment_epoch"], again["group_state"]) == \
        (before["group_epoch"], before["assignment_epoch"], "Empty")
    c3 = Consumer(_conf(server))
    c3.subscribe([TOPIC])
    _poll_until([c3], lambda: _partitions(c3) == set(range(PARTITIONS)), 40, "the restarted group's assignment")
    resumed = c3.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10)
    assert [tp.offset for tp in resumed] == [PER_PARTITION] * PARTITIONS
    assert c3.poll(1.0) is None  # nothing past the committed offsets
    assert _describe(server.port)["group_epoch"] > before["group_epoch"]
    c3.close()


def test_consumer_protocol_disabled(tmp_path: Path) -> None:
    """librdkafka 2.16 is not told by a poll error: it marks the coordinator dead with "Required feature not
    supported by broker: ConsumerGroupHeartbeatRequest not supported by broker" (its debug log), asks for the
    coordinator again, and never gets an assignment (rdkafka_cgrp.c; research kip848.md section 7)."""
    import logging

    from confluent_kafka import Consumer

    srv = ServerProcess(tmp_path / "data", "--group-coordinator-rebalance-protocols", "classic").start()
    lines: list[str] = []

    class Sink(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger("kip848-disabled")
    logger.addHandler(Sink())
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        apis = _api_versions(srv.port)
        assert 68 not in apis and 69 not in apis and 11 in apis
        consumer = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "g", "group.protocol": "consumer",
                             "debug": "cgrp", "logger": logger})
        consumer.subscribe(["anything"])
        wanted = "ConsumerGroupHeartbeatRequest not supported by broker"
        deadline = time.monotonic() + 20
        while not any(wanted in line for line in lines) and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            assert m is None or m.error() is not None
        assert consumer.assignment() == []
        consumer.close()
        assert any("Required feature not supported by broker" in line and wanted in line for line in lines), \
            lines[-20:]
    finally:
        srv.stop()


def test_bad_config_is_a_startup_error(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data", "--group-consumer-assignors", "sticky")
    with pytest.raises(RuntimeError, match="server exited during startup"):
        srv.start(timeout=10)
    assert "group.consumer.assignors" in srv.log()
    srv.stop()



