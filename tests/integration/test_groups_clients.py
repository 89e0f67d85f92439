"""Unmodified admin clients against the real daemon: list, describe, offsets, delete.

Story (one server for the module): topic ``orders`` with 3 partitions holds 30 records, 10 a partition.
For each admin client an "empty" group consumed everything, committed (offset 10 on each partition) and
closed; the group ``live`` has one kafka-python consumer that stays alive (Stable, one member, all three
partitions). Each client lists both, describes both, reads the committed offsets, deletes its empty group
(OK) and is refused deleting ``live`` (NON_EMPTY_GROUP, error 68).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from server_process import ServerProcess  # type: ignore[import-not-found]

# serial: the fixture's kafka-python 3.0.12 consumer joins right after the topic is made; on a busy CPU it can lead
# a generation without the topic's metadata, rejoin, then stall or fail its commit (see compat_consumer_worker.py)
pytestmark = pytest.mark.serial

TOPIC = "orders"
PARTITIONS = 3
PER_PARTITION = 10
CLIENTS = ("kp", "aio", "ck")


def _consume_all_and_commit(bootstrap: str, group: str, *, close: bool) -> KafkaConsumer:
    consumer = KafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500,
                             request_timeout_ms=10000)
    seen = 0
    for _ in range(40):
        seen += sum(len(v) for v in consumer.poll(250).values())
        if seen >= PARTITIONS * PER_PARTITION:
            break
    assert seen == PARTITIONS * PER_PARTITION, f"{group} consumed {seen} records"
    consumer.commit()
    if close:
        consumer.close()
    return consumer


@pytest.fixture(scope="module")
def groups_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data: Path = tmp_path_factory.mktemp("clients") / "data"
    srv = ServerProcess(data, "--group-min-session-timeout-ms", "1000",
                        "--group-initial-rebalance-delay-ms", "0").start()
    live: KafkaConsumer | None = None
    try:
        admin = KafkaAdminClient(bootstrap_servers=srv.bootstrap, request_timeout_ms=10000)
        try:
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
        finally:
            admin.close()
        producer = KafkaProducer(bootstrap_servers=srv.bootstrap)
        for i in range(PARTITIONS * PER_PARTITION):
            producer.send(TOPIC, b"order-%d" % i, partition=i % PARTITIONS)
        producer.flush(10)
        producer.close()
        for name in CLIENTS:
            _consume_all_and_commit(srv.bootstrap, f"empty-{name}", close=True)
        live = _consume_all_and_commit(srv.bootstrap, "live", close=False)
        yield srv
    finally:
        if live is not None:
            live.close(autocommit=False)
        srv.stop()


COMMITTED = {(TOPIC, p): PER_PARTITION for p in range(PARTITIONS)}


def test_kafka_python_admin(groups_server: ServerProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=groups_server.bootstrap, request_timeout_ms=10000)
    try:
        listed = {g["group_id"]: g for g in admin.list_groups()}
        assert listed["empty-kp"]["group_state"] == "Empty" and listed["empty-kp"]["protocol_type"] == "consumer"
        assert listed["live"]["group_state"] == "Stable"

        described = admin.describe_groups(["empty-kp", "live"])
        assert described["empty-kp"]["group_state"] == "Empty" and described["empty-kp"]["members"] == []
        live = described["live"]
        assert live["group_state"] == "Stable" and live["protocol_data"] == "range"
        (member,) = live["members"]
        assert member["member_metadata"]["topics"] == [TOPIC]
        assert member["member_assignment"]["assigned_partitions"] == [
            {"topic": TOPIC, "partitions": list(range(PARTITIONS))}]

        offsets = admin.list_group_offsets(["empty-kp", "live"])
        for group in ("empty-kp", "live"):
            assert {(tp.topic, tp.partition): om.offset for tp, om in offsets[group].items()} == COMMITTED
        only_one = admin.list_group_offsets({"empty-kp": [TopicPartition(TOPIC, 1)]})
        assert {tp.partition: om.offset for tp, om in only_one["empty-kp"].items()} == {1: PER_PARTITION}

        assert admin.delete_groups(["empty-kp", "live"]) == {"empty-kp": "OK", "live": "NonEmptyGroupError"}
        remaining = {g["group_id"] for g in admin.list_groups()}
        assert "empty-kp" not in remaining and "live" in remaining
        assert admin.list_group_offsets(["empty-kp"])["empty-kp"] == {}
    finally:
        admin.close()


def test_aiokafka_admin(groups_server: ServerProcess) -> None:
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.protocol.admin import DeleteGroupsRequest

    async def story() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=groups_server.bootstrap, request_timeout_ms=10000)
        await admin.start()
        try:
            listed = dict(await admin.list_consumer_groups())
            assert listed["empty-aio"] == "consumer" and listed["live"] == "consumer"

            groups = {}
            for group_id in ("empty-aio", "live"):
                (response,) = await admin.describe_consumer_groups([group_id])
                groups.update({g[1]: g for g in response.groups})  # (error, id, state, type, proto, members)
            assert groups["empty-aio"][0] == 0 and groups["empty-aio"][2] == "Empty"
            assert groups["empty-aio"][5] == []
            assert groups["live"][2] == "Stable" and groups["live"][4] == "range"
            assert len(groups["live"][5]) == 1

            offsets = await admin.list_consumer_group_offsets("empty-aio")
            assert {(tp.topic, tp.partition): om.offset for tp, om in offsets.items()} == COMMITTED

            # AIOKafkaAdminClient has no delete method: send aiokafka's own DeleteGroups request to the
            # coordinator the admin client found
            node = await admin.find_coordinator("empty-aio")
            response = await admin._client.send(node, DeleteGroupsRequest(["empty-aio", "live"]))
            assert dict(response.results) == {"empty-aio": 0, "live": 68}
            listed = dict(await admin.list_consumer_groups())
            assert "empty-aio" not in listed and "live" in listed
        finally:
            await admin.close()

    asyncio.run(asyncio.wait_for(story(), 30))


def test_confluent_kafka_admin(groups_server: ServerProcess) -> None:
    from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError
    from confluent_kafka import TopicPartition as CkPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": groups_server.bootstrap})
    listed = admin.list_consumer_groups(request_timeout=10).result(timeout=15)
    assert not listed.errors
    states = {g.group_id: g.state for g in listed.valid}
    assert states["empty-ck"] == ConsumerGroupState.EMPTY and states["live"] == ConsumerGroupState.STABLE

    described = {g: f.result(timeout=15) for g, f in
                 admin.describe_consumer_groups(["empty-ck", "live"], request_timeout=10).items()}
    assert described["empty-ck"].state == ConsumerGroupState.EMPTY and described["empty-ck"].members == []
    live = described["live"]
    assert live.state == ConsumerGroupState.STABLE and live.partition_assignor == "range"
    assert live.coordinator.port == groups_server.port
    (member,) = live.members
    assert sorted((tp.topic, tp.partition) for tp in member.assignment.topic_partitions) == sorted(COMMITTED)

    request = [ConsumerGroupTopicPartitions("empty-ck", [CkPartition(TOPIC, p) for p in range(PARTITIONS)])]
    result = admin.list_consumer_group_offsets(request, request_timeout=10)["empty-ck"].result(timeout=15)
    assert {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions} == COMMITTED

    futures = admin.delete_consumer_groups(["empty-ck", "live"], request_timeout=10)
    assert futures["empty-ck"].result(timeout=15) is None
    with pytest.raises(Exception) as refused:
        futures["live"].result(timeout=15)
    error = refused.value.args[0]
    assert isinstance(error, KafkaError) and error.code() == KafkaError.NON_EMPTY_GROUP
    remaining = {g.group_id for g in admin.list_consumer_groups(request_timeout=10).result(timeout=15).valid}
    assert "empty-ck" not in remaining and "live" in remaining
