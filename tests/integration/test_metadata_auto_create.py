"""Metadata auto-creation on a single node answers as Kafka's AutoTopicCreationManager does, over TCP.

Rules:
- A Metadata request that names a missing topic and may create it (``auto.create.topics.enable`` and the
  request's ``allow_auto_topic_creation``, true before v4) creates it with ``num.partitions`` partitions,
  and that answer names it with LEADER_NOT_AVAILABLE, no partitions, not internal and the zero topic id;
  the next Metadata lists it (error 0, its partitions, its topic id). After DeleteTopics the same happens
  again: kafka-go's ``TestConn/test_delete_topics`` reads the topic's partitions right after deleting it
  and expects none.
- A missing topic that may not be created is UNKNOWN_TOPIC_OR_PARTITION and stays missing; an illegal
  name is INVALID_TOPIC_EXCEPTION whether or not creation is allowed; a name asked twice is answered once.
- Checked with our codec on raw requests, and with kafka-python's own request classes through its admin
  client's connection; kafka-python, confluent-kafka and kcat each still produce to a brand-new topic on
  first use (they retry Metadata on LEADER_NOT_AVAILABLE), and every record is read back with a raw Fetch.
"""

from __future__ import annotations

import itertools
import shutil
import socket
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from server_process import ServerProcess, read_frame

from protocol import codec
from protocol.errors import ErrorCode
from protocol.record_batch import iter_records

PARTITIONS = 4  # the ``server`` fixture's --num-partitions
ZERO_UUID = uuid.UUID(int=0)
_corr = itertools.count(1)


def call(port: int, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
    corr = next(_corr)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(codec.encode_request(api_key, version, corr, "auto-create-test", body))
        payload = read_frame(s)
    assert payload is not None, f"the server closed the connection on api {api_key} v{version}"
    got, resp = codec.decode_response(api_key, version, payload)
    assert got == corr
    return resp


def metadata(port: int, version: int, names: list[str], allow: bool = True) -> list[dict[str, Any]]:
    body: dict[str, Any] = {"topics": [{"name": n} for n in names]}
    if version >= 4:
        body["allow_auto_topic_creation"] = allow
    return call(port, 3, version, body)["topics"]


def delete_topic(port: int, topic: str) -> None:
    resp = call(port, 20, 6, {"topics": [{"name": topic}], "timeout_ms": 5000})
    assert [(r["name"], r["error_code"]) for r in resp["responses"]] == [(topic, 0)], resp


def assert_created_now(entry: dict[str, Any], topic: str, version: int) -> None:
    """Kafka's answer to the request that auto-created the topic."""
    assert entry["name"] == topic
    assert entry["error_code"] == ErrorCode.LEADER_NOT_AVAILABLE, entry
    assert entry["partitions"] == [], entry
    if version >= 1:
        assert entry["is_internal"] is False
    if version >= 10:
        assert entry["topic_id"] == ZERO_UUID, entry


def assert_listed(entry: dict[str, Any], topic: str, version: int) -> None:
    assert (entry["name"], entry["error_code"]) == (topic, 0), entry
    assert sorted(p["partition_index"] for p in entry["partitions"]) == list(range(PARTITIONS))
    assert all(p["error_code"] == 0 and p["leader_id"] == 0 for p in entry["partitions"]), entry
    if version >= 10:
        assert entry["topic_id"] != ZERO_UUID, entry


@pytest.mark.parametrize("version", [0, 1, 4, 9, 12, 13])
def test_the_creating_request_answers_leader_not_available_also_after_delete_topics(
        server: ServerProcess, version: int) -> None:
    topic = f"auto-v{version}"
    (entry,) = metadata(server.port, version, [topic])
    assert_created_now(entry, topic, version)
    (entry,) = metadata(server.port, version, [topic])
    assert_listed(entry, topic, version)

    delete_topic(server.port, topic)  # kafka-go's test_delete_topics: its next Metadata re-creates the topic
    (entry,) = metadata(server.port, version, [topic])
    assert_created_now(entry, topic, version)
    (entry,) = metadata(server.port, version, [topic])
    assert_listed(entry, topic, version)


def test_topics_that_may_not_be_created(server: ServerProcess) -> None:
    port = server.port
    for _ in range(2):  # not created by the first ask
        (entry,) = metadata(port, 12, ["not-allowed"], allow=False)
        assert (entry["error_code"], entry["partitions"], entry["topic_id"]) == (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [], ZERO_UUID), entry
    for name in ("bad/name", "x" * 250, ".."):
        for allow in (True, False):
            (entry,) = metadata(port, 12, [name], allow=allow)
            assert (entry["name"], entry["error_code"], entry["partitions"]) == (
                name, ErrorCode.INVALID_TOPIC_EXCEPTION, []), entry
    entries = metadata(port, 12, ["twice", "twice"])
    assert len(entries) == 1
    assert_created_now(entries[0], "twice", 12)
    (entry,) = metadata(port, 12, ["twice", "twice"])
    assert_listed(entry, "twice", 12)
    listed = {t["name"] for t in call(port, 3, 12, {"topics": None})["topics"]}
    assert "twice" in listed and "not-allowed" not in listed and "bad/name" not in listed


def test_auto_create_disabled_answers_unknown_topic(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data", "--auto-create-topics-enable", "false").start()
    try:
        for version in (1, 12):
            (entry,) = metadata(srv.port, version, ["never-created"])
            assert (entry["error_code"], entry["partitions"]) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, []), entry
    finally:
        srv.stop()


@pytest.mark.compat
def test_kafka_python_sees_the_recreated_topic_on_the_next_metadata(server: ServerProcess) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.protocol.metadata import MetadataRequest

    topic = "kp-recreated"
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, client_id="auto-create-test")
    try:
        admin.create_topics([NewTopic(topic, 2, 1)])
        admin.delete_topics([topic])

        async def ask() -> Any:
            request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                      allow_auto_topic_creation=True)
            return await admin._manager.send(request)

        first = admin._manager.run(ask)
        assert [(t.name, t.error_code, list(t.partitions)) for t in first.topics] == [
            (topic, ErrorCode.LEADER_NOT_AVAILABLE, [])], first
        assert first.topics[0].topic_id in (None, ZERO_UUID)  # kafka-python reads the zero uuid as None
        second = admin._manager.run(ask)
        assert [(t.name, t.error_code, len(t.partitions)) for t in second.topics] == [(topic, 0, PARTITIONS)]
        (described,) = admin.describe_topics([topic])
        assert (described["error_code"], len(described["partitions"])) == (0, PARTITIONS)  # num.partitions, not 2
    finally:
        admin.close()


# ------------------------------------------------------------------ producers on first use
COUNT = 20


def _kafka_python(bootstrap: str, topic: str, records: list[tuple[str, str]]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", max_block_ms=30000)
    try:
        futures = [producer.send(topic, key=k.encode(), value=v.encode()) for k, v in records]
        producer.flush(30)
        assert all(f.get(timeout=1).offset >= 0 for f in futures)
    finally:
        producer.close(5)


def _confluent(bootstrap: str, topic: str, records: list[tuple[str, str]]) -> None:
    from confluent_kafka import Producer

    failures: list[str] = []

    def delivered(err: object, msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for k, v in records:
        producer.produce(topic, key=k.encode(), value=v.encode(), on_delivery=delivered)
    assert producer.flush(30) == 0
    assert failures == []


def _kcat(bootstrap: str, topic: str, records: list[tuple[str, str]]) -> None:
    kcat = shutil.which("kcat")
    assert kcat, "kcat must be installed (make test installs it with apt-get)"
    lines = "".join(f"{k}:{v}\n" for k, v in records)
    done = subprocess.run([kcat, "-P", "-b", bootstrap, "-t", topic, "-K:", "-X", "acks=all"], input=lines,
                          capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr


def stored(port: int, topic: str) -> list[tuple[str, str]]:
    """Every record of every partition, read from offset 0 with one raw Fetch each."""
    out: list[tuple[str, str]] = []
    for p in range(PARTITIONS):
        req = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 24, "isolation_level": 0,
               "topics": [{"topic": topic, "partitions": [{"partition": p, "fetch_offset": 0,
                                                          "partition_max_bytes": 1 << 24}]}]}
        part = call(port, 1, 4, req)["responses"][0]["partitions"][0]
        assert part["error_code"] == 0, part
        out += [(r.key.decode(), r.value.decode()) for r in iter_records(part["records"] or b"")]
    return out


PRODUCERS: dict[str, Callable[[str, str, list[tuple[str, str]]], None]] = {
    "kafka-python": _kafka_python, "confluent-kafka": _confluent, "kcat": _kcat}


@pytest.mark.compat
@pytest.mark.parametrize("client", sorted(PRODUCERS))
def test_a_producer_writes_to_a_new_topic_on_first_use(server: ServerProcess, client: str) -> None:
    topic = f"first-use-{client}"
    (entry,) = metadata(server.port, 12, [topic], allow=False)
    assert entry["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # brand new
    records = [(f"k{i:02d}", f"{client} value {i}") for i in range(COUNT)]
    PRODUCERS[client](server.bootstrap, topic, records)
    assert sorted(stored(server.port, topic)) == sorted(records)
    (entry,) = metadata(server.port, 12, [topic], allow=False)
    assert_listed(entry, topic, 12)
