"""OffsetDelete (47, KIP-496) against the real daemon: kafka-python's ``delete_group_offsets`` and our CLI.

The story: topics ``od-a`` and ``od-b`` (2 partitions each) hold records. Group ``od-empty`` consumed
``od-a`` with kafka-python, committed and left (Empty, protocol type "consumer"); group ``od-live`` has one
kafka-python consumer subscribed to ``od-a`` that stays (Stable) and also committed an offset for ``od-b``,
which it does not subscribe to. Kafka's rules (OffsetMetadataManager.deleteOffsets): an Empty group's
offsets are deleted; a Stable consumer group's subscribed topics answer GROUP_SUBSCRIBED_TO_TOPIC and keep
their offsets, its other topics are deleted; unknown partitions answer UNKNOWN_TOPIC_OR_PARTITION; an
unknown group is a group-level GROUP_ID_NOT_FOUND. A deletion is a tombstone in the offsets log: it is still
deleted after a restart. Committed offsets are read back through our codec (OffsetFetch), never through
the client under test.
"""

from __future__ import annotations

import itertools
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka import errors as kerr
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.structs import OffsetAndMetadata
from server_process import REPO, ServerProcess, read_frame  # type: ignore[import-not-found]

from protocol import codec

# serial: the fixture's kafka-python 3.0.12 consumer joins right after the topic is made; on a busy CPU it can lead
# a generation without the topic's metadata, rejoin, then stall or fail its commit (see compat_consumer_worker.py)
pytestmark = pytest.mark.serial

FLAGS = ("--group-min-session-timeout-ms", "1000", "--group-initial-rebalance-delay-ms", "0")
_corr = itertools.count(1)


def committed(port: int, group: str) -> dict[tuple[str, int], int]:
    """Every committed offset of ``group`` (OffsetFetch v5, all topics), through our codec."""
    corr = next(_corr)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(codec.encode_request(9, 5, corr, "od-check", {"group_id": group, "topics": None,
                                                               "require_stable": False}))
        payload = read_frame(s)
    assert payload is not None
    _, body = codec.decode_response(9, 5, payload)
    assert body["error_code"] == 0, body
    return {(t["name"], p["partition_index"]): p["committed_offset"]
            for t in body["topics"] for p in t["partitions"]}


def _consume(bootstrap: str, group: str) -> KafkaConsumer:
    consumer = KafkaConsumer("od-a", bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500,
                             request_timeout_ms=10000)
    seen = 0
    for _ in range(40):
        seen += sum(len(v) for v in consumer.poll(250).values())
        if seen >= 6:
            break
    assert seen == 6, f"{group} consumed {seen} records"
    consumer.commit()
    return consumer


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[ServerProcess, KafkaConsumer]]:
    srv = ServerProcess(tmp_path / "data", *FLAGS).start()
    live: KafkaConsumer | None = None
    try:
        admin = KafkaAdminClient(bootstrap_servers=srv.bootstrap, request_timeout_ms=10000)
        try:
            admin.create_topics([NewTopic("od-a", 2, 1), NewTopic("od-b", 2, 1)])
        finally:
            admin.close()
        producer = KafkaProducer(bootstrap_servers=srv.bootstrap)
        for i in range(6):
            producer.send("od-a", b"a-%d" % i, partition=i % 2)
            producer.send("od-b", b"b-%d" % i, partition=i % 2)
        producer.flush(10)
        producer.close()
        _consume(srv.bootstrap, "od-empty").close()
        live = _consume(srv.bootstrap, "od-live")
        live.commit({TopicPartition("od-b", 0): OffsetAndMetadata(2, "", -1)})
        yield srv, live
    finally:
        if live is not None:
            live.close(autocommit=False)
        srv.stop()


def test_delete_group_offsets_with_kafka_python(setup: tuple[ServerProcess, KafkaConsumer]) -> None:
    srv, _live = setup
    assert committed(srv.port, "od-empty") == {("od-a", 0): 3, ("od-a", 1): 3}
    assert committed(srv.port, "od-live") == {("od-a", 0): 3, ("od-a", 1): 3, ("od-b", 0): 2}
    admin = KafkaAdminClient(bootstrap_servers=srv.bootstrap, request_timeout_ms=10000)
    try:
        # an Empty group: deleted (a partition without an offset is fine too); an unknown partition is not
        got = admin.delete_group_offsets("od-empty", [TopicPartition("od-a", 0), TopicPartition("od-b", 1),
                                                      TopicPartition("od-a", 7)])
        assert got == {TopicPartition("od-a", 0): kerr.NoError, TopicPartition("od-b", 1): kerr.NoError,
                       TopicPartition("od-a", 7): kerr.UnknownTopicOrPartitionError}
        assert committed(srv.port, "od-empty") == {("od-a", 1): 3}

        # a Stable group: its subscribed topic is refused and kept, the other topic is deleted
        got = admin.delete_group_offsets("od-live", [TopicPartition("od-a", 0), TopicPartition("od-b", 0)])
        assert got == {TopicPartition("od-a", 0): kerr.GroupSubscribedToTopicError,
                       TopicPartition("od-b", 0): kerr.NoError}
        assert committed(srv.port, "od-live") == {("od-a", 0): 3, ("od-a", 1): 3}

        with pytest.raises(kerr.GroupIdNotFoundError):
            admin.delete_group_offsets("od-nobody", [TopicPartition("od-a", 0)])
    finally:
        admin.close()

    srv.stop()  # the deletions are tombstones in the offsets log: a restart replays them
    again = ServerProcess(srv.data_dir, *FLAGS).start()
    try:
        again.wait_loaded()
        assert committed(again.port, "od-empty") == {("od-a", 1): 3}
        assert committed(again.port, "od-live") == {("od-a", 0): 3, ("od-a", 1): 3}
    finally:
        again.stop()


def gc(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coordinator.cli", *args, "-b", server.bootstrap],
                          capture_output=True, text=True, timeout=60, cwd=REPO)


def test_cli_delete_offsets(setup: tuple[ServerProcess, KafkaConsumer]) -> None:
    srv, _live = setup
    refused = gc(srv, "groups", "delete-offsets", "od-live", "--topic", "od-a", "--partition", "1")
    assert refused.returncode == 1
    assert ["od-a", "1", "GROUP_SUBSCRIBED_TO_TOPIC"] in [line.split() for line in refused.stdout.splitlines()]
    assert committed(srv.port, "od-live")[("od-a", 1)] == 3

    done = gc(srv, "groups", "delete-offsets", "od-empty", "--topic", "od-a")  # every partition of the topic
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()]
    assert ["od-a", "0", "deleted"] in rows and ["od-a", "1", "deleted"] in rows
    assert committed(srv.port, "od-empty") == {}

    unknown = gc(srv, "groups", "delete-offsets", "od-nobody", "--topic", "od-a")
    assert unknown.returncode == 1 and "GROUP_ID_NOT_FOUND" in unknown.stderr
