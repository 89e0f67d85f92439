"""Cluster mode: an offsets partition's records are read only from its leader, as a user topic's (#27).

The story: a real ZooKeeper and two real nodes. A group commits through its coordinator (the leader of its
offsets partition). Fetch (v12 by name and v13 by topic id) and ListOffsets of that partition on the leader
answer the commit's record; on the other node they answer NOT_LEADER_OR_FOLLOWER (6), as Kafka's
ReplicaManager does for a partition it does not lead, and no records. Helpers come from tests/cluster (read
only: that folder is another engineer's).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
from cluster_nodes import (  # type: ignore[import-not-found]  # noqa: E402
    OFFSETS_TOPIC,
    commit_offset,
    find_coordinator,
    logs,
    metadata,
    offsets_partitions,
    request,
    start_nodes,
    stop_nodes,
    wait_for,
)
from server_process import ServerProcess  # type: ignore[import-not-found]  # noqa: E402
from zookeeper_process import ZooKeeperProcess  # type: ignore[import-not-found]  # noqa: E402

from client.connection import BrokerConnection  # noqa: E402
from coordinator.core.sharding import partition_for  # noqa: E402
from coordinator.runtime.topics import topic_id  # noqa: E402

FETCH, LIST_OFFSETS = 1, 2
GROUP = "otc-group"


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[dict[int, ServerProcess]]:
    zk = ZooKeeperProcess(tmp_path / "zk").start()
    started: dict[int, ServerProcess] = {}
    try:
        started = start_nodes(tmp_path, f"{zk.connect}/otc", [1, 2])
        yield started
    finally:
        stop_nodes(started)
        zk.stop()


def fetch(node: ServerProcess, version: int, partition: int) -> dict:
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
                 "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
                 "topics": [{"topic": OFFSETS_TOPIC, "topic_id": topic_id(OFFSETS_TOPIC), "partitions": [
                     {"partition": partition, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]}
    conn = BrokerConnection("127.0.0.1", node.port, request_timeout_ms=10000, connect_timeout_ms=5000).connect()
    try:
        _, resp = conn.send(FETCH, body, version=version)
    finally:
        conn.close()
    return resp["responses"][0]["partitions"][0]


def latest(node: ServerProcess, partition: int) -> dict:
    resp = request(node, LIST_OFFSETS, lambda v: {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": OFFSETS_TOPIC, "partitions": [{"partition_index": partition, "timestamp": -1,
                                                "current_leader_epoch": -1}]}]})
    return resp["topics"][0]["partitions"][0]


def test_offsets_partition_is_read_on_its_leader_only(nodes: dict[int, ServerProcess]) -> None:
    wait_for("a coordinator for the group", lambda: (lambda e: e[1] if e[0] == 0 else None)(
        find_coordinator(nodes[1], GROUP)), describe=lambda: logs(nodes))
    shard = partition_for(GROUP, 50)
    leader = wait_for("the leader of its offsets partition", lambda: offsets_partitions(metadata(nodes[1], [
        OFFSETS_TOPIC])).get(shard, {}).get("leader_id"), describe=lambda: logs(nodes))
    other = 2 if leader == 1 else 1
    wait_for("the commit", lambda: commit_offset(nodes[leader], GROUP, offset=11) == 0, describe=lambda: logs(nodes))

    for version in (12, 13):
        on_leader = fetch(nodes[leader], version, shard)
        assert on_leader["error_code"] == 0 and on_leader["high_watermark"] == 1, on_leader
        assert GROUP.encode() in bytes(on_leader["records"])
        elsewhere = fetch(nodes[other], version, shard)
        assert elsewhere["error_code"] == 6 and not elsewhere["records"], elsewhere  # NOT_LEADER_OR_FOLLOWER
    assert (latest(nodes[leader], shard)["error_code"], latest(nodes[leader], shard)["offset"]) == (0, 1)
    assert latest(nodes[other], shard)["error_code"] == 6
