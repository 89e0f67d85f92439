"""Metadata parts in cluster mode, from a ClusterView: live brokers, leaders, and LEADER_NOT_AVAILABLE."""

from __future__ import annotations

from coordinator.cluster.metadata import broker_entries, topic_entry
from coordinator.cluster.state import NO_LEADER, BrokerInfo, ClusterView, PartitionState
from protocol.errors import ErrorCode


def test_partitions_without_a_live_leader_answer_leader_not_available() -> None:
    view = ClusterView(
        {2: BrokerInfo(2, "h2", 92, "r2"), 1: BrokerInfo(1, "h1", 91)}, 1, 3, {"t": {0: (1, 2, 3), 1: (3, 1, 2),
                                                                                2: (2, 3, 1)}},
        {("t", 0): PartitionState(1, 4, (1, 2), 3), ("t", 1): PartitionState(3, 2, (3,), 2),
         ("t", 2): PartitionState(NO_LEADER, 5, (3,), 3)})
    assert broker_entries(view, "PLAINTEXT") == [{"node_id": 1, "host": "h1", "port": 91, "rack": None},
                                    {"node_id": 2, "host": "h2", "port": 92, "rack": "r2"}]
    entry = topic_entry(view, "t", lambda name: f"id-{name}", False)
    assert entry["error_code"] == 0 and entry["topic_id"] == "id-t"
    p0, p1, p2 = entry["partitions"]
    assert (p0["error_code"], p0["leader_id"], p0["leader_epoch"], p0["isr_nodes"]) == (0, 1, 4, [1, 2])
    assert p0["offline_replicas"] == [3]
    # broker 3 leads partition 1 in ZooKeeper but is not registered: no leader to offer
    assert (p1["error_code"], p1["leader_id"]) == (ErrorCode.LEADER_NOT_AVAILABLE, -1)
    assert (p2["error_code"], p2["leader_id"], p2["leader_epoch"]) == (ErrorCode.LEADER_NOT_AVAILABLE, -1, 5)


def test_a_topic_not_created_yet_answers_leader_not_available() -> None:
    entry = topic_entry(ClusterView(), "__consumer_offsets", lambda name: None, True)
    assert entry["error_code"] == ErrorCode.LEADER_NOT_AVAILABLE and entry["partitions"] == []
