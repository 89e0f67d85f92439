"""User topics in a real 3-node cluster (real ZooKeeper, real `groupcoord serve` processes): created through
one node, listed identically by all, served only by each partition's leader, produced and consumed by
kafka-python and our client bootstrapping from one node, deleted everywhere, and moved on a node's loss."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

from cluster_nodes import logs, metadata, request, start_nodes, stop_nodes, wait_for
from kafka import KafkaConsumer, KafkaProducer
from server_process import ServerProcess

from client import Consumer, Producer, TopicPartition
from coordinator.runtime.topics import topic_id
from protocol.errors import ErrorCode
from protocol.record_batch import build_batch

PRODUCE, FETCH, LIST_OFFSETS, CREATE_TOPICS, DELETE_TOPICS = 0, 1, 2, 19, 20
TOPIC = "events"
PARTITIONS = 6


def create_topic(node: ServerProcess, name: str, partitions: int, rf: int) -> dict[str, Any]:
    resp = request(node, CREATE_TOPICS, lambda v: {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": rf, "assignments": [],
                    "configs": []}], "timeout_ms": 20000, "validate_only": False})
    return resp["topics"][0]


def delete_topic(node: ServerProcess, name: str) -> int:
    resp = request(node, DELETE_TOPICS, lambda v: {
        "topics": [{"name": name, "topic_id": None}], "topic_names": [name], "timeout_ms": 20000})
    return resp["responses"][0]["error_code"]


def topic_parts(md: dict[str, Any], name: str) -> dict[int, dict[str, Any]] | None:
    for t in md["topics"]:
        if t["name"] == name and t["error_code"] == 0:
            return {p["partition_index"]: p for p in t["partitions"]}
    return None


def produce_one(node: ServerProcess, partition: int, value: bytes) -> dict[str, Any]:
    batch = build_batch([(b"k", value, [], int(time.time() * 1000))])
    resp = request(node, PRODUCE, lambda v: {
        "transactional_id": None, "acks": -1, "timeout_ms": 10000,
        "topic_data": [{"name": TOPIC, "partition_data": [{"index": partition, "records": batch}]}]})
    return resp["responses"][0]["partition_responses"][0]


def fetch_error(node: ServerProcess, partition: int, replica_id: int = -1) -> int:
    resp = request(node, FETCH, lambda v: {
        "replica_id": replica_id, "replica_state": {"replica_id": replica_id, "replica_epoch": -1}, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": TOPIC, "topic_id": topic_id(TOPIC), "partitions": [{
            "partition": partition, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})
    return resp["responses"][0]["partitions"][0]["error_code"]


def list_offsets_error(node: ServerProcess, partition: int) -> int:
    resp = request(node, LIST_OFFSETS, lambda v: {
        "replica_id": -1, "isolation_level": 0, "topics": [{"name": TOPIC, "partitions": [{
            "partition_index": partition, "current_leader_epoch": -1, "timestamp": -1, "max_num_offsets": 1}]}]})
    return resp["topics"][0]["partitions"][0]["error_code"]


def agreed_topic(nodes: dict[int, ServerProcess], name: str) -> dict[int, dict[str, Any]]:
    """Wait until every node lists ``name`` with a live leader for each partition, all alike; the listing."""
    def probe() -> dict[int, dict[str, Any]] | None:
        seen = [topic_parts(metadata(n, [name]), name) for n in nodes.values()]
        first = seen[0]
        if first is None or any(s != first for s in seen):
            return None
        if any(p["leader_id"] not in nodes or p["error_code"] for p in first.values()):
            return None
        return first
    return wait_for(f"{name} listed alike by nodes {sorted(nodes)}", probe, describe=lambda: logs(nodes))


def local_dirs(data_root: Path, node_id: int, name: str) -> list[str]:
    return sorted(p.name for p in (data_root / f"node{node_id}").glob(f"{name}-*"))


def test_a_replicated_topic_lives_in_the_cluster(tmp_path: Path, zk_connect: str) -> None:
    nodes = start_nodes(tmp_path, zk_connect, [1, 2, 3])
    try:
        for n in nodes.values():
            wait_for("three brokers", lambda n=n: len(metadata(n)["brokers"]) == 3, describe=lambda: logs(nodes))
        # more replicas than live brokers: refused, nothing created
        refused = create_topic(nodes[1], "too-wide", 2, 4)
        assert refused["error_code"] == ErrorCode.INVALID_REPLICATION_FACTOR, refused
        assert "larger than available brokers: 3" in refused["error_message"]

        made = create_topic(nodes[1], TOPIC, PARTITIONS, 3)
        assert (made["error_code"], made["num_partitions"], made["replication_factor"]) == (0, PARTITIONS, 3), made
        assert create_topic(nodes[2], TOPIC, 1, 1)["error_code"] == ErrorCode.TOPIC_ALREADY_EXISTS
        parts = agreed_topic(nodes, TOPIC)
        assert sorted(parts) == list(range(PARTITIONS))
        for p in parts.values():
            assert sorted(p["replica_nodes"]) == [1, 2, 3] and p["isr_nodes"] == p["replica_nodes"], p
            assert p["leader_id"] == p["replica_nodes"][0] and p["leader_epoch"] == 0, p
        assert Counter(p["leader_id"] for p in parts.values()) == {1: 2, 2: 2, 3: 2}
        for n in nodes.values():
            assert topic_parts(metadata(n, ["too-wide"]), "too-wide") is None
            assert TOPIC in {t["name"] for t in metadata(n)["topics"]}  # all-topics listing too
        # every replica has its local logs (created by following ZooKeeper)
        for i in nodes:
            wait_for(f"node {i}'s logs", lambda i=i: len(local_dirs(tmp_path, i, TOPIC)) == PARTITIONS)

        # a node that does not lead a partition refuses its Produce, Fetch and ListOffsets
        for p, entry in parts.items():
            other = next(i for i in nodes if i != entry["leader_id"])
            assert produce_one(nodes[other], p, b"misdirected")["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert fetch_error(nodes[other], p) == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert list_offsets_error(nodes[other], p) == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert fetch_error(nodes[entry["leader_id"]], p) == 0
            # the leader serves its followers' fetches, and no other node's
            assert fetch_error(nodes[entry["leader_id"]], p, replica_id=other) == 0
            assert fetch_error(nodes[entry["leader_id"]], p, replica_id=99) == ErrorCode.NOT_LEADER_OR_FOLLOWER

        # kafka-python and our producer, each bootstrapping from one node, reach every partition's leader
        kp = KafkaProducer(bootstrap_servers=nodes[2].bootstrap, acks="all", request_timeout_ms=10000)
        try:
            futures = [kp.send(TOPIC, key=b"kp-%d" % i, value=b"kp-%d" % i, partition=i % PARTITIONS)
                       for i in range(60)]
            kp.flush(20)
            assert all(f.get(timeout=5).offset >= 0 for f in futures)
        finally:
            kp.close(5)
        with Producer(nodes[3].bootstrap, acks="all", request_timeout_ms=10000) as ours:
            ofutures = [ours.send(TOPIC, value=b"ours-%d" % i, key=b"ours-%d" % i, partition=i % PARTITIONS)
                        for i in range(60)]
            ours.flush(20)
            assert all(f.get(5).offset >= 0 for f in ofutures)
        expected = {b"kp-%d" % i for i in range(60)} | {b"ours-%d" % i for i in range(60)}

        # a kafka-python group bootstrapping from node 1 consumes everything and commits
        kc = KafkaConsumer(TOPIC, bootstrap_servers=nodes[1].bootstrap, group_id="kp-group",
                           auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=6000,
                           heartbeat_interval_ms=500, request_timeout_ms=10000)
        try:
            got: list[bytes] = []
            for _ in range(120):
                got += [r.value for recs in kc.poll(250).values() for r in recs]
                if len(got) >= len(expected):
                    break
            assert sorted(got) == sorted(expected)
            kc.commit()
            from kafka import TopicPartition as KTP
            assert sum(kc.committed(KTP(TOPIC, p)) or 0 for p in range(PARTITIONS)) == len(expected)
        finally:
            kc.close()

        # our consumer group, bootstrapping from node 3
        with Consumer(bootstrap_servers=nodes[3].bootstrap, group_id="our-group", auto_offset_reset="earliest",
                      enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500,
                      request_timeout_ms=10000) as oc:
            oc.subscribe([TOPIC])
            mine: list[bytes] = []
            for _ in range(120):
                mine += [r.value for recs in oc.poll(250).values() for r in recs]
                if len(mine) >= len(expected):
                    break
            assert sorted(mine) == sorted(expected)
            oc.commit()
            committed = oc.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
            assert sum(o.offset for o in committed.values() if o is not None) == len(expected)

        # DeleteTopics through node 2: gone from every node's Metadata and disk
        assert delete_topic(nodes[2], TOPIC) == 0
        for i, n in nodes.items():
            wait_for(f"{TOPIC} gone from node {i}", lambda n=n: topic_parts(metadata(n, [TOPIC]), TOPIC) is None
                     and TOPIC not in {t["name"] for t in metadata(n)["topics"]}, describe=lambda: logs(nodes))
            wait_for(f"node {i}'s logs deleted", lambda i=i: local_dirs(tmp_path, i, TOPIC) == [])
        assert delete_topic(nodes[3], TOPIC) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        stop_nodes(nodes)


def test_losing_a_node_moves_its_user_partitions(tmp_path: Path, zk_connect: str) -> None:
    # one in-sync replica is enough here: the lost node leaves its partitions with one live replica each
    nodes = start_nodes(tmp_path, zk_connect, [1, 2, 3], "--min-insync-replicas", "1")
    try:
        for n in nodes.values():
            wait_for("three brokers", lambda n=n: len(metadata(n)["brokers"]) == 3, describe=lambda: logs(nodes))
        assert create_topic(nodes[3], TOPIC, PARTITIONS, 2)["error_code"] == 0
        before = agreed_topic(nodes, TOPIC)
        victim = before[0]["leader_id"]
        moved = {p for p, e in before.items() if e["leader_id"] == victim}
        assert moved
        # our producer knows the old leaders before the loss; it must follow the move by itself
        early = Producer(nodes[next(i for i in nodes if i != victim)].bootstrap, request_timeout_ms=5000,
                         retries=20, retry_backoff_ms=200, acks="all")
        try:
            warm = [early.send(TOPIC, value=b"before", partition=p) for p in range(PARTITIONS)]
            early.flush(20)
            assert all(f.get(5).offset == 0 for f in warm)
        except BaseException:
            early.close(5)
            raise
        nodes[victim].kill()
        survivors = {i: n for i, n in nodes.items() if i != victim}
        after = agreed_topic(survivors, TOPIC)
        for p, e in after.items():
            if p in moved:
                assert e["leader_id"] != victim and e["leader_id"] in before[p]["replica_nodes"], (p, e)
                assert e["leader_epoch"] == before[p]["leader_epoch"] + 1 and victim not in e["isr_nodes"], e
                assert victim in e["offline_replicas"], e
            else:
                assert e["leader_id"] == before[p]["leader_id"], (p, e)
        # new produce to a moved partition works on its new leader, and only there
        # (the new leaders hold the record acknowledged before the loss: it was replicated, so these follow it)
        for p in moved:
            leader = after[p]["leader_id"]
            answer = produce_one(survivors[leader], p, b"after-failover")
            assert (answer["error_code"], answer["base_offset"]) == (0, 1), answer
            other = next(i for i in survivors if i != leader)
            assert produce_one(survivors[other], p, b"x")["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
        # the producer created before the loss reaches the new leaders
        try:
            futures = [early.send(TOPIC, value=b"v", partition=p) for p in sorted(moved)]
            early.flush(30)
            assert all(f.get(5).offset == 2 for f in futures)  # after the two produced above
        finally:
            early.close(5)
    finally:
        stop_nodes(nodes)
