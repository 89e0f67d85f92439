"""Time retention in a real 2-node cluster (real ZooKeeper, real `groupcoord serve` processes): a replicated
topic whose writes stop loses its only, non-empty segment on the leader (below the replicated high watermark)
and on the follower (below its own), and produce continues at the old end on both."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from cluster_nodes import logs, metadata, request, start_nodes, stop_nodes, wait_for
from test_cluster_replication import stored_values
from test_cluster_user_topics import agreed_topic

from protocol.record_batch import build_batch

PRODUCE, LIST_OFFSETS, CREATE_TOPICS = 0, 2, 19
TOPIC = "short-lived"
RECORDS = 5


def produce(node: Any, value: bytes, ahead_ms: int = 0) -> dict[str, Any]:
    batch = build_batch([(b"k", value, [], int(time.time() * 1000) + ahead_ms)])
    resp = request(node, PRODUCE, lambda v: {
        "transactional_id": None, "acks": -1, "timeout_ms": 10000,
        "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}]})
    return resp["responses"][0]["partition_responses"][0]


def offsets(node: Any) -> tuple[int, int]:
    """(earliest, latest) of partition 0, asked of ``node``."""
    out = []
    for ts in (-2, -1):
        resp = request(node, LIST_OFFSETS, lambda v, ts=ts: {
            "replica_id": -1, "isolation_level": 0, "topics": [{"name": TOPIC, "partitions": [{
                "partition_index": 0, "current_leader_epoch": -1, "timestamp": ts, "max_num_offsets": 1}]}]})
        p = resp["topics"][0]["partitions"][0]
        assert p["error_code"] == 0, p
        out.append(p["offset"])
    return out[0], out[1]


def segment_files(data_root: Path, node_id: int) -> list[str]:
    return sorted(p.name for p in (data_root / f"node{node_id}" / f"{TOPIC}-0").glob("*.log"))


def test_an_idle_replicated_topic_loses_its_active_segment_on_leader_and_follower(tmp_path: Path,
                                                                                  zk_connect: str) -> None:
    nodes = start_nodes(tmp_path, zk_connect, [1, 2], "--log-retention-check-interval-ms", "500")
    try:
        for n in nodes.values():
            wait_for("two brokers", lambda n=n: len(metadata(n)["brokers"]) == 2, describe=lambda: logs(nodes))
        made = request(nodes[1], CREATE_TOPICS, lambda v: {
            "topics": [{"name": TOPIC, "num_partitions": -1, "replication_factor": -1,
                        "assignments": [{"partition_index": 0, "broker_ids": [1, 2]}],
                        "configs": [{"name": "retention.ms", "value": "2000"}]}],
            "timeout_ms": 20000, "validate_only": False})["topics"][0]
        assert made["error_code"] == 0, made
        assert agreed_topic(nodes, TOPIC)[0]["leader_id"] == 1
        # acks=all: wait until the ISR has both replicas, so each record is on both disks when answered
        wait_for("both replicas in sync", lambda: agreed_topic(nodes, TOPIC)[0]["isr_nodes"] == [1, 2],
                 describe=lambda: logs(nodes))
        for i in range(RECORDS):
            res = produce(nodes[1], b"old-%d" % i)
            assert (res["error_code"], res["base_offset"]) == (0, i), res
        empty = [f"{RECORDS:020d}.log"]
        wait_for("the leader's log emptied at its end", lambda: offsets(nodes[1]) == (RECORDS, RECORDS),
                 describe=lambda: logs(nodes))
        for node_id in (1, 2):
            wait_for(f"node {node_id}'s old segment deleted", lambda n=node_id: segment_files(tmp_path, n) == empty,
                     describe=lambda: logs(nodes))
        res = produce(nodes[1], b"new", ahead_ms=600_000)  # retention keeps it while the files are read
        assert (res["error_code"], res["base_offset"]) == (0, RECORDS), res
        for node_id in (1, 2):
            assert stored_values(tmp_path, node_id, TOPIC, 0) == {RECORDS: b"new"}
    finally:
        stop_nodes(nodes)
