"""Topic configs and CreatePartitions across a real cluster (real ZooKeeper, real `groupcoord serve` processes,
real admin clients).

Stories: a config altered through one node (confluent-kafka, kafka-python, raw requests) is written to
ZooKeeper with a change notification, described alike by every node and acted on by each node's own logs
(``min.insync.replicas=3`` refuses acks=all with one node down, on a partition another node leads); a node
that was down while the config changed uses it once restarted; every alter error edge answers Kafka's code
and writes nothing; a ZooKeeper outage answers a retriable error. CreatePartitions through any node places
the new partitions as CreateTopics does, every node lists them with leaders, every replica holds their
logs, and an acks=all record produced to one is on every replica; every error edge answers Kafka's code
with Kafka's message and changes nothing."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from cluster_nodes import logs, metadata, request, start_node, start_nodes, stop_nodes, wait_for
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions
from kafka import KafkaConsumer
from kafka import TopicPartition as KTP
from kazoo.client import KazooClient
from server_process import ServerProcess
from test_cluster_replication import produce, stored_values
from test_cluster_user_topics import agreed_topic, local_dirs, topic_parts
from zookeeper_process import ZooKeeperProcess

from coordinator.cluster.state import (
    CONFIG_CHANGE_EXPIRY_MS,
    change_sequence,
    decode_config_change,
    encode_config_change,
    expired_changes,
)
from coordinator.cluster.zk import ZkStore
from protocol.errors import ErrorCode

CREATE_TOPICS, DESCRIBE_CONFIGS, ALTER_CONFIGS, CREATE_PARTITIONS, INCREMENTAL_ALTER = 19, 32, 33, 37, 44
TOPIC_RESOURCE, DYNAMIC_TOPIC = 2, 1
SET, DELETE = 0, 1
# explicit replicas: each node is the preferred leader of one partition
ASSIGNMENT = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}


# ---------------------------------------------------------------- wire helpers
def create_assigned(node: ServerProcess, name: str, assignment: dict[int, list[int]],
                    configs: dict[str, str] | None = None) -> dict[str, Any]:
    resp = request(node, CREATE_TOPICS, lambda v: {
        "topics": [{"name": name, "num_partitions": -1, "replication_factor": -1,
                    "assignments": [{"partition_index": p, "broker_ids": r} for p, r in assignment.items()],
                    "configs": [{"name": k, "value": val} for k, val in (configs or {}).items()]}],
        "timeout_ms": 20000, "validate_only": False})
    return resp["topics"][0]


def describe(node: ServerProcess, name: str) -> tuple[int, dict[str, tuple[str, int]]]:
    """(error code, key -> (value, source)) of a topic's DescribeConfigs asked of ``node``."""
    resp = request(node, DESCRIBE_CONFIGS, lambda v: {
        "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": name, "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False})
    r = resp["results"][0]
    return r["error_code"], {c["name"]: (c["value"], c["config_source"]) for c in r["configs"]}


def overrides(node: ServerProcess, name: str) -> dict[str, str] | None:
    """The topic's overrides (source DYNAMIC_TOPIC) as ``node`` describes them; None on an error."""
    code, configs = describe(node, name)
    return None if code else {k: v for k, (v, source) in configs.items() if source == DYNAMIC_TOPIC}


def alter(node: ServerProcess, name: str, configs: dict[str, str | None], validate_only: bool = False
          ) -> tuple[int, str | None]:
    resp = request(node, ALTER_CONFIGS, lambda v: {
        "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": name,
                       "configs": [{"name": k, "value": val} for k, val in configs.items()]}],
        "validate_only": validate_only})
    r = resp["responses"][0]
    return r["error_code"], r["error_message"]


def alter_incrementally(node: ServerProcess, name: str, ops: list[tuple[str, int, str | None]],
                        validate_only: bool = False) -> tuple[int, str | None]:
    resp = request(node, INCREMENTAL_ALTER, lambda v: {
        "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": name,
                       "configs": [{"name": k, "config_operation": op, "value": val} for k, op, val in ops]}],
        "validate_only": validate_only})
    r = resp["responses"][0]
    return r["error_code"], r["error_message"]


def create_partitions(node: ServerProcess, topics: list[tuple[str, int, list[list[int]] | None]],
                      validate_only: bool = False, timeout_ms: int = 20000) -> list[tuple[str, int, str | None]]:
    resp = request(node, CREATE_PARTITIONS, lambda v: {
        "topics": [{"name": n, "count": c, "assignments": None if a is None else [{"broker_ids": r} for r in a]}
                   for n, c, a in topics], "timeout_ms": timeout_ms, "validate_only": validate_only})
    return [(r["name"], r["error_code"], r["error_message"]) for r in resp["results"]]


def refusal(node: ServerProcess, partition: int, topic: str) -> int:
    """The error code of one acks=all record produced to ``node``."""
    return produce(node, topic, partition, b"v", acks=-1)["error_code"]


# ---------------------------------------------------------------- ZooKeeper, read directly
@contextmanager
def zk_reader(zk_connect: str) -> Iterator[tuple[KazooClient, str]]:
    hosts, chroot = zk_connect.split("/", 1)
    kz = KazooClient(hosts=hosts, timeout=10)
    kz.start(10)
    try:
        yield kz, "/" + chroot
    finally:
        kz.stop()
        kz.close()


def zk_config(zk_connect: str, topic: str) -> dict[str, str]:
    with zk_reader(zk_connect) as (kz, root):
        data, _ = kz.get(f"{root}/config/topics/{topic}")
    return json.loads(data)["config"]


def zk_changes(zk_connect: str) -> list[str | None]:
    """The topics named by the config change notifications, in sequence order."""
    with zk_reader(zk_connect) as (kz, root):
        names = sorted(kz.get_children(f"{root}/config/changes"))
        return [decode_config_change(kz.get(f"{root}/config/changes/{n}")[0]) for n in names]


def zk_assignment(zk_connect: str, topic: str) -> dict[int, list[int]]:
    with zk_reader(zk_connect) as (kz, root):
        data, _ = kz.get(f"{root}/brokers/topics/{topic}")
    return {int(p): r for p, r in json.loads(data)["partitions"].items()}


def three(tmp_path: Path, zk_connect: str, *extra: str) -> dict[int, ServerProcess]:
    nodes = start_nodes(tmp_path, zk_connect, [1, 2, 3], *extra)
    try:
        for n in nodes.values():
            wait_for("three brokers", lambda n=n: len(metadata(n)["brokers"]) == 3, describe=lambda: logs(nodes))
    except BaseException:
        stop_nodes(nodes)
        raise
    return nodes


def listed(nodes: dict[int, ServerProcess], topic: str, count: int) -> dict[int, dict[str, Any]]:
    """Wait until every node lists ``count`` partitions of ``topic``, alike and each with a live leader."""
    def probe() -> dict[int, dict[str, Any]] | None:
        parts = agreed_topic(nodes, topic)
        return parts if len(parts) == count else None
    return wait_for(f"{count} partitions of {topic} on every node", probe, describe=lambda: logs(nodes))


def without(nodes: dict[int, ServerProcess], *gone: int) -> dict[int, ServerProcess]:
    return {i: n for i, n in nodes.items() if i not in gone}


# ---------------------------------------------------------------- pure parts
def test_config_change_notifications_are_kafkas() -> None:
    data = encode_config_change("orders")
    assert json.loads(data) == {"version": 2, "entity_path": "topics/orders"}
    assert decode_config_change(data) == "orders"
    assert decode_config_change(b'{"version": 2, "entity_path": "brokers/1"}') is None
    for bad in (b"[]", b'{"version": 2}', b"\xff"):
        with pytest.raises(ValueError):
            decode_config_change(bad)
    assert change_sequence("config_change_0000000042") == 42
    assert change_sequence("isr_change_0000000042") is None and change_sequence("config_change_") is None
    now = 10 * CONFIG_CHANGE_EXPIRY_MS
    ctimes = {"config_change_1": now - CONFIG_CHANGE_EXPIRY_MS - 1, "config_change_2": now - CONFIG_CHANGE_EXPIRY_MS,
              "config_change_3": now}
    assert expired_changes(ctimes, now) == ["config_change_1"]


async def test_config_and_assignment_writes_are_version_checked(zk_connect: str) -> None:
    zk = ZkStore(zk_connect, 3000, 10.0)
    await zk.connect(15.0, lambda _state: None)
    try:
        assert await zk.read_topic_config("t") is None
        assert await zk.create_user_topic("t", {0: (1, 2)}, {"retention.ms": "5"})
        first = await zk.read_topic_config("t")
        assert first is not None and first.config == {"retention.ms": "5"} and first.problem is None
        written = await zk.write_topic_config("t", {"retention.ms": "6"}, first.version)
        assert written is not None and written.version == first.version + 1 and written.mzxid > first.mzxid
        # a write at the version read before that one is refused, and writes nothing
        assert await zk.write_topic_config("t", {"retention.ms": "7"}, first.version) is None
        again = await zk.read_topic_config("t")
        assert again is not None and (again.config, again.mzxid) == ({"retention.ms": "6"}, written.mzxid)
        # one notification per write taken, naming the topic, with its creation time
        snap = await zk.read_snapshot()
        assert len(snap.config_changes) == 1
        notes = await zk.read_config_changes(snap.config_changes + ["config_change_9999999999"])
        [(topic, ctime)] = notes.values()
        assert topic == "t" and ctime > 0
        await zk.delete_config_changes(snap.config_changes)
        await zk.delete_config_changes(snap.config_changes)  # purged twice (two nodes): fine
        assert (await zk.read_snapshot()).config_changes == []

        assignment = await zk.read_assignment("t")
        assert assignment == ({0: (1, 2)}, 0)
        assert await zk.write_assignment("t", {0: (1, 2), 1: (2, 1)}, 0)
        assert not await zk.write_assignment("t", {0: (1, 2), 1: (2, 1), 2: (1, 2)}, 0)  # moved on
        assert await zk.read_assignment("t") == ({0: (1, 2), 1: (2, 1)}, 1)

        # a topic deleted under a write: nothing written (no config, no notification)
        won = await zk.elect_controller(1)
        assert won is not None
        await zk.mark_for_deletion("t")
        assert await zk.delete_topic("t", won[1]) == (True, False)
        assert await zk.write_topic_config("t", {"retention.ms": "8"}, again.version) is None
        assert await zk.read_topic_config("t") is None and (await zk.read_snapshot()).config_changes == []
        assert await zk.read_assignment("t") is None and not await zk.write_assignment("t", {0: (1,)}, 1)
    finally:
        with trio.CancelScope(shield=True):
            await zk.close()


# ---------------------------------------------------------------- configs
def test_an_altered_config_reaches_every_node_and_their_logs(tmp_path: Path, zk_connect: str) -> None:
    nodes = three(tmp_path, zk_connect)
    topic = "cfg"
    try:
        made = create_assigned(nodes[1], topic, ASSIGNMENT, {"retention.ms": "3600000"})
        assert made["error_code"] == 0, made
        parts = agreed_topic(nodes, topic)
        assert {p: e["leader_id"] for p, e in parts.items()} == {0: 1, 1: 2, 2: 3}
        assert refusal(nodes[2], 1, topic) == 0  # the server's min.insync.replicas (2): fine with 3 in sync

        # node 3 goes down; its partition moves to node 1 and every ISR shrinks to {1, 2}
        nodes[3].kill()
        up = without(nodes, 3)
        wait_for("ISRs without node 3", lambda: all(
            3 not in e["isr_nodes"] for e in (topic_parts(metadata(nodes[2], [topic]), topic) or {0: {"isr_nodes": [3]}}
                                              ).values()), describe=lambda: logs(up))
        assert refusal(nodes[2], 1, topic) == 0  # two in sync are still enough

        # confluent-kafka's incremental alter through node 1: min.insync.replicas 3 and compaction
        admin = AdminClient({"bootstrap.servers": nodes[1].bootstrap})
        res = ConfigResource("topic", topic, incremental_configs=[
            ConfigEntry("min.insync.replicas", "3", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([res])[res].result(20)
        wanted = {"retention.ms": "3600000", "min.insync.replicas": "3", "cleanup.policy": "compact"}
        assert zk_config(zk_connect, topic) == wanted  # in ZooKeeper when answered
        assert zk_changes(zk_connect) == [topic]  # with one change notification
        for i in up:
            wait_for(f"node {i} describes the change", lambda i=i: overrides(nodes[i], topic) == wanted,
                     describe=lambda: logs(up))
        # node 2 leads partition 1: its own log now wants three in-sync replicas
        wait_for("node 2 refusing acks=all", lambda: refusal(nodes[2], 1, topic) == ErrorCode.NOT_ENOUGH_REPLICAS,
                 describe=lambda: logs(up))
        assert refusal(nodes[1], 0, topic) == ErrorCode.NOT_ENOUGH_REPLICAS
        # ... and keeps a local copy of the overrides for its next start
        local = json.loads((tmp_path / "node2" / "topic-configs" / f"{topic}.json").read_text())["configs"]
        assert local == wanted

        # node 3 was down during the change: restarted, it reads it, describes it and acts on it
        nodes[3] = start_node(tmp_path, zk_connect, 3)
        wait_for("node 3 back in every ISR", lambda: all(
            sorted(e["isr_nodes"]) == [1, 2, 3] for e in agreed_topic(nodes, topic).values()),
            timeout=60, describe=lambda: logs(nodes))
        assert overrides(nodes[3], topic) == wanted
        nodes[1].kill()  # partition 2 (replicas 3, 1, 2) moves back to node 3, with 2 in sync
        up = without(nodes, 1)
        wait_for("node 3 leading partition 2", lambda: (topic_parts(metadata(nodes[3], [topic]), topic) or {}
                                                        ).get(2, {}).get("leader_id") == 3, describe=lambda: logs(up))
        wait_for("node 3 refusing acks=all", lambda: refusal(nodes[3], 2, topic) == ErrorCode.NOT_ENOUGH_REPLICAS,
                 describe=lambda: logs(up))

        # kafka-python's AlterConfigs through node 3 (it sends the other overrides along); node 2 follows
        from kafka.admin import ConfigResource as KPResource
        from kafka.admin import ConfigResourceType, KafkaAdminClient

        grown = {**wanted, "segment.bytes": "1048576"}
        kp = KafkaAdminClient(bootstrap_servers=nodes[3].bootstrap, request_timeout_ms=15000)
        try:
            assert kp.alter_configs([KPResource(ConfigResourceType.TOPIC, topic, configs={"segment.bytes": "1048576"})],
                                    incremental=False) == {"topic": {topic: "OK"}}

            def described() -> bool:  # whichever node kafka-python asks
                got = kp.describe_configs([KPResource(ConfigResourceType.TOPIC, topic)])["topic"][topic]
                return {k: v["value"] for k, v in got.items()} == grown
            wait_for("kafka-python describing the change", described, describe=lambda: logs(up))
        finally:
            kp.close()
        wait_for("node 2 describes it", lambda: overrides(nodes[2], topic) == grown, describe=lambda: logs(up))
        # a plain AlterConfigs replaces every override; min.insync.replicas is back to the server's 2
        assert alter(nodes[3], topic, {"segment.bytes": "1048576"}) == (0, None)
        assert zk_config(zk_connect, topic) == {"segment.bytes": "1048576"}
        assert zk_changes(zk_connect) == [topic] * 3
        wait_for("node 2 describes the replacement", lambda: overrides(nodes[2], topic) == {"segment.bytes": "1048576"},
                 describe=lambda: logs(up))
        # both survivors take acks=all again
        wait_for("node 3 taking acks=all", lambda: refusal(nodes[3], 2, topic) == 0, describe=lambda: logs(up))
        wait_for("node 2 taking acks=all", lambda: refusal(nodes[2], 1, topic) == 0, describe=lambda: logs(up))
    finally:
        stop_nodes(nodes)


def test_alter_errors_write_nothing(tmp_path: Path, zk_connect: str) -> None:
    nodes = start_nodes(tmp_path, zk_connect, [1, 2])
    topic = "edges"
    try:
        for n in nodes.values():
            wait_for("two brokers", lambda n=n: len(metadata(n)["brokers"]) == 2, describe=lambda: logs(nodes))
        assert create_assigned(nodes[1], topic, {0: [1, 2]}, {"retention.ms": "60000"})["error_code"] == 0
        agreed_topic(nodes, topic)
        before = {"retention.ms": "60000"}
        for n in nodes.values():  # every node answers for every topic of the cluster
            assert overrides(n, topic) == before
        cases: list[tuple[tuple[int, str | None], int, str]] = [
            (alter(nodes[2], topic, {"retention.ms": "abc"}), ErrorCode.INVALID_CONFIG, "retention.ms"),
            (alter(nodes[2], topic, {"no.such.key": "1"}), ErrorCode.INVALID_CONFIG, "no.such.key"),
            (alter(nodes[2], topic, {"retention.ms": None}), ErrorCode.INVALID_CONFIG, "retention.ms"),
            (alter_incrementally(nodes[2], topic, [("retention.ms", 2, "5")]), ErrorCode.INVALID_CONFIG, "append"),
            (alter_incrementally(nodes[2], topic, [("segment.bytes", SET, "1"), ("segment.bytes", DELETE, None)]),
             ErrorCode.INVALID_REQUEST, "duplicate"),
            (alter(nodes[2], "missing", {"retention.ms": "1"}), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "missing"),
            (alter(nodes[2], "__consumer_offsets", {"retention.ms": "1"}), ErrorCode.INVALID_CONFIG,
             "__consumer_offsets"),
            (alter(nodes[2], "bad name!", {"retention.ms": "1"}), ErrorCode.INVALID_TOPIC_EXCEPTION, "illegal"),
        ]
        for (code, message), want, mentions in cases:
            assert code == want and mentions in (message or ""), (code, message, want)
        # validate_only: checked, answered 0, nothing written
        assert alter(nodes[1], topic, {"retention.ms": "1000"}, validate_only=True) == (0, None)
        assert alter_incrementally(nodes[2], topic, [("cleanup.policy", SET, "compact")], validate_only=True) == (0, None)
        assert alter_incrementally(nodes[2], topic, [("cleanup.policy", SET, "nope")],
                                   validate_only=True)[0] == ErrorCode.INVALID_CONFIG
        assert zk_config(zk_connect, topic) == before and zk_changes(zk_connect) == []
        for n in nodes.values():
            assert overrides(n, topic) == before
        # a good change after all that: one notification, both nodes follow
        assert alter_incrementally(nodes[2], topic, [("retention.ms", DELETE, None)]) == (0, None)
        assert overrides(nodes[2], topic) == {}  # the node that wrote it: at once
        assert zk_config(zk_connect, topic) == {} and zk_changes(zk_connect) == [topic]
        wait_for("node 1 following", lambda: overrides(nodes[1], topic) == {}, describe=lambda: logs(nodes))

        # concurrent incremental changes of different keys through both nodes: none is lost (each is
        # written at the version it read, and read again when another got in first)
        keys = ["retention.ms", "segment.ms", "delete.retention.ms", "min.compaction.lag.ms", "flush.ms",
                "flush.messages", "retention.bytes", "segment.bytes"]
        answers: dict[str, tuple[int, str | None]] = {}

        def set_one(i: int, key: str) -> None:
            answers[key] = alter_incrementally(nodes[1 + i % 2], topic, [(key, SET, str(100000 + i))])

        threads = [threading.Thread(target=set_one, args=(i, k)) for i, k in enumerate(keys)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert answers == {k: (0, None) for k in keys}
        every = {k: str(100000 + i) for i, k in enumerate(keys)}
        assert zk_config(zk_connect, topic) == every
        for i, n in nodes.items():
            wait_for(f"node {i} describing all {len(keys)}", lambda n=n: overrides(n, topic) == every,
                     describe=lambda: logs(nodes))
    finally:
        stop_nodes(nodes)


def test_zookeeper_down_answers_a_retriable_error(tmp_path: Path) -> None:
    zk = ZooKeeperProcess(tmp_path / "zk").start()
    nodes: dict[int, ServerProcess] = {}
    try:
        connect = f"{zk.connect}/alone"
        nodes = start_nodes(tmp_path, connect, [1])
        wait_for("a broker", lambda: len(metadata(nodes[1])["brokers"]) == 1, describe=lambda: logs(nodes))
        assert create_assigned(nodes[1], "t", {0: [1]})["error_code"] == 0
        agreed_topic(nodes, "t")
        zk.kill()
        code, message = alter(nodes[1], "t", {"retention.ms": "5000"})
        assert code == ErrorCode.REQUEST_TIMED_OUT and "ZooKeeper" in (message or ""), (code, message)
        assert overrides(nodes[1], "t") == {}  # not applied: ZooKeeper did not take it
        zk.start(same_port=True)
        wait_for("the alter taken once ZooKeeper is back",
                 lambda: alter(nodes[1], "t", {"retention.ms": "5000"})[0] == 0, timeout=30,
                 describe=lambda: logs(nodes))
        assert overrides(nodes[1], "t") == {"retention.ms": "5000"}
        assert zk_config(connect, "t") == {"retention.ms": "5000"}
    finally:
        stop_nodes(nodes)
        zk.stop()


# ---------------------------------------------------------------- CreatePartitions
def test_create_partitions_across_the_cluster(tmp_path: Path, zk_connect: str) -> None:
    nodes = three(tmp_path, zk_connect)
    topic = "grow"
    try:
        assert create_assigned(nodes[1], topic, {0: [2, 3, 1], 1: [3, 1, 2]}, {"segment.bytes": "65536"}
                               )["error_code"] == 0
        agreed_topic(nodes, topic)
        # confluent-kafka through node 2: 2 -> 5, placed as Kafka places them (from partition 0's first replica)
        admin = AdminClient({"bootstrap.servers": nodes[2].bootstrap})
        admin.create_partitions([NewPartitions(topic, 5)], operation_timeout=20)[topic].result(30)
        assert zk_assignment(zk_connect, topic) == {0: [2, 3, 1], 1: [3, 1, 2], 2: [1, 3, 2], 3: [2, 3, 1],
                                                    4: [3, 1, 2]}
        parts = listed(nodes, topic, 5)  # every node lists the five with a live leader
        assert sorted(parts) == [0, 1, 2, 3, 4]
        assert {p: e["leader_id"] for p, e in parts.items() if p >= 2} == {2: 1, 3: 2, 4: 3}
        for i in nodes:  # every replica holds the new logs
            wait_for(f"node {i}'s five logs", lambda i=i: len(local_dirs(tmp_path, i, topic)) == 5)

        # an acks=all record to a new partition: acknowledged by its leader, on every replica, read back
        answer = produce(nodes[3], topic, 4, b"in-a-new-partition", acks=-1)
        assert (answer["error_code"], answer["base_offset"]) == (0, 0), answer
        for i in nodes:
            wait_for(f"node {i}'s copy", lambda i=i: stored_values(tmp_path, i, topic, 4) == {0: b"in-a-new-partition"})
        consumer = KafkaConsumer(bootstrap_servers=nodes[1].bootstrap, auto_offset_reset="earliest",
                                 enable_auto_commit=False, request_timeout_ms=10000)
        try:
            consumer.assign([KTP(topic, 4)])
            got: list[bytes] = []
            for _ in range(40):
                got += [r.value for recs in consumer.poll(250).values() for r in recs]
                if got:
                    break
            assert got == [b"in-a-new-partition"]
        finally:
            consumer.close()

        # kafka-python with an explicit assignment through node 3 (which is no controller necessarily)
        from kafka.admin import KafkaAdminClient

        kp = KafkaAdminClient(bootstrap_servers=nodes[3].bootstrap, request_timeout_ms=15000)
        try:
            kp.create_partitions({topic: {"count": 6, "assignments": [[3, 2, 1]]}})
        finally:
            kp.close()
        parts = listed(nodes, topic, 6)
        assert parts[5]["replica_nodes"] == [3, 2, 1] and parts[5]["leader_id"] == 3, parts[5]

        # the error edges, all in one request through node 1; nothing changes
        bad = create_partitions(nodes[1], [
            ("dup", 9, None), ("dup", 10, None),
            ("missing", 3, None),
            (topic, 6, None),
            (topic + "x", 1, None),
            ("__consumer_offsets", 60, None),
        ])
        assert bad == [
            ("dup", ErrorCode.INVALID_REQUEST, "Duplicate topic in request."),
            ("missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'missing' does not exist."),
            (topic, ErrorCode.INVALID_PARTITIONS, "Topic already has 6 partitions."),
            (topic + "x", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{topic}x' does not exist."),
            ("__consumer_offsets", ErrorCode.INVALID_PARTITIONS,
             "The partition count of __consumer_offsets is fixed by offsets.topic.num.partitions."),
        ]
        edges: list[tuple[int, list[list[int]] | None, int, str]] = [
            (3, None, ErrorCode.INVALID_PARTITIONS,
             "Topic currently has 6 partitions, which is higher than the requested 3."),
            (20000, None, ErrorCode.INVALID_PARTITIONS, "at most 10000"),
            (8, [[1, 2, 9], [1, 2, 3]], ErrorCode.INVALID_REPLICA_ASSIGNMENT,
             "Unknown broker(s) in replica assignment: 9."),
            (8, [[1, 2, 3]], ErrorCode.INVALID_REPLICA_ASSIGNMENT,
             "Increasing the number of partitions by 2 but 1 assignments provided."),
            (7, [[]], ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Cannot have replication factor of 0 for partition id 6."),
            (7, [[1, 1, 2]], ErrorCode.INVALID_REPLICA_ASSIGNMENT,
             "Duplicate brokers not allowed in replica assignment: 1, 1, 2 for partition id 6."),
            (8, [[1, 2, 3], [1, 2]], ErrorCode.INVALID_REPLICA_ASSIGNMENT,
             "Inconsistent replication factor between partitions, partition 0 has 3 while partitions [7] have "
             "replication factors [2], respectively."),
        ]
        for count, assignments, code, message in edges:
            [(_, got_code, got_message)] = create_partitions(nodes[2], [(topic, count, assignments)])
            assert got_code == code and message in (got_message or ""), (count, assignments, got_code, got_message)
        # validate_only: a good growth is answered 0 and written nowhere
        assert create_partitions(nodes[3], [(topic, 9, None)], validate_only=True) == [(topic, 0, None)]
        assert len(zk_assignment(zk_connect, topic)) == 6
        assert all(len(topic_parts(metadata(n, [topic]), topic) or {}) == 6 for n in nodes.values())

        # timeout_ms 0: written, answered REQUEST_TIMED_OUT at once (Kafka's; librdkafka hides it)
        assert create_partitions(nodes[1], [(topic, 7, None)], timeout_ms=0) == [
            (topic, ErrorCode.REQUEST_TIMED_OUT, None)]
        listed(nodes, topic, 7)
        # confluent-kafka with its default operation timeout
        admin.create_partitions([NewPartitions(topic, 8)])[topic].result(30)
        listed(nodes, topic, 8)

        # with a node down, three replicas per partition no longer fit the live brokers
        nodes[2].kill()
        up = without(nodes, 2)
        wait_for("two brokers", lambda: len(metadata(nodes[1])["brokers"]) == 2, describe=lambda: logs(up))
        [(_, code, message)] = create_partitions(nodes[1], [(topic, 9, None)])
        assert (code, message) == (ErrorCode.INVALID_REPLICATION_FACTOR,
                                   "Replication factor: 3 larger than available brokers: 2."), message
        assert len(zk_assignment(zk_connect, topic)) == 8
    finally:
        stop_nodes(nodes)


def test_a_topic_queued_for_deletion_cannot_grow(tmp_path: Path, zk_connect: str) -> None:
    nodes = start_nodes(tmp_path, zk_connect, [1])
    try:
        wait_for("a broker", lambda: len(metadata(nodes[1])["brokers"]) == 1, describe=lambda: logs(nodes))
        assert create_assigned(nodes[1], "doomed", {0: [1]})["error_code"] == 0
        agreed_topic(nodes, "doomed")
        with zk_reader(zk_connect) as (kz, root):
            # a znode the controller's deletion does not expect keeps the topic queued for deletion
            kz.create(f"{root}/brokers/topics/doomed/partitions/0/state/pinned", b"")
            kz.create(f"{root}/admin/delete_topics/doomed", b"")
        queued = ("doomed", ErrorCode.INVALID_TOPIC_EXCEPTION, "The topic is queued for deletion.")
        wait_for("the node seeing the topic queued for deletion",  # validate_only: asking writes nothing
                 lambda: create_partitions(nodes[1], [("doomed", 2, None)], validate_only=True) == [queued],
                 describe=lambda: logs(nodes))
        assert "deleting topic doomed refused" in nodes[1].log()
        assert create_partitions(nodes[1], [("doomed", 2, None)]) == [queued]
        assert zk_assignment(zk_connect, "doomed") == {0: [1]}
    finally:
        stop_nodes(nodes)
