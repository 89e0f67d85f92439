"""Deposed leaders in a real 3-node cluster (real ZooKeeper, real `groupcoord serve` processes): a coordinator
paused past its session timeout (SIGSTOP) acknowledges nothing when it wakes, truncates what it wrote alone
and follows the new leader until its log equals it; a SIGTERM'd coordinator hands its groups over before it
exits, with every acknowledged commit."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from cluster_nodes import (
    commit_offset,
    find_coordinator,
    logs,
    metadata,
    offsets_partitions,
    start_nodes,
    stop_nodes,
    wait_for,
)
from test_cluster_membership import formed
from test_cluster_replication import below, fetch_committed, stored_batches

from coordinator.core.sharding import partition_for
from protocol.errors import ErrorCode

OFFSETS = "__consumer_offsets"


def test_a_zombie_coordinator_acknowledges_nothing_truncates_and_follows(tmp_path: Path, zk_connect: str) -> None:
    # no preferred-leader rebalance: once the zombie is back in the ISR it would take its partitions back
    # (seen once in a full run: the wait for it to follow the new leader then never ended)
    nodes = start_nodes(tmp_path, zk_connect, [1, 2, 3], "--auto-leader-rebalance-enable", "false")
    zombie_pid = None
    try:
        md = formed(nodes)[1]
        group = "zombie-group"
        shard = partition_for(group, 50)
        zombie = offsets_partitions(md)[shard]["leader_id"]
        wait_for("a first commit", lambda: commit_offset(nodes[zombie], group, offset=10) == 0,
                 describe=lambda: logs(nodes))
        others = {i: n for i, n in nodes.items() if i != zombie}
        assert nodes[zombie].proc is not None
        zombie_pid = nodes[zombie].proc.pid
        os.kill(zombie_pid, signal.SIGSTOP)

        def successor() -> int | None:
            err, node = find_coordinator(next(iter(others.values())), group)
            return node if err == 0 and node in others else None
        new = wait_for("a new coordinator", successor, describe=lambda: logs(others))
        wait_for("a commit through the new coordinator", lambda: commit_offset(nodes[new], group, offset=20) == 0,
                 describe=lambda: logs(others))

        os.kill(zombie_pid, signal.SIGCONT)
        zombie_pid = None
        # whatever it still believes, the woken node acknowledges nothing for the group
        assert commit_offset(nodes[zombie], group, offset=666) != 0
        assert fetch_committed(nodes[new], group) == (0, 20)

        def follows() -> bool:
            entry = offsets_partitions(metadata(nodes[zombie], [OFFSETS])).get(shard)
            return entry is not None and entry["leader_id"] == new and zombie in entry["isr_nodes"]
        wait_for(f"node {zombie} back in the ISR under node {new}", follows, timeout=40, describe=lambda: logs(nodes))
        for offset in (21, 22, 23):  # the leader writes on past where the zombie wrote alone
            assert commit_offset(nodes[new], group, offset=offset) == 0
        wait_for("the zombie's log to equal the leader's below the leader's high watermark", lambda: (
            lead := stored_batches(tmp_path, new, OFFSETS, shard)) and below(
                stored_batches(tmp_path, zombie, OFFSETS, shard), _end(lead)) == lead, describe=lambda: logs(nodes))
        assert fetch_committed(nodes[new], group) == (0, 23)
    finally:
        if zombie_pid is not None:
            os.kill(zombie_pid, signal.SIGCONT)
        stop_nodes(nodes)


def _end(batches: list[bytes]) -> int:
    from protocol.record_batch import parse_header

    return parse_header(batches[-1]).next_offset


def test_sigterm_hands_the_coordinators_groups_over_with_every_commit(tmp_path: Path, zk_connect: str) -> None:
    nodes = start_nodes(tmp_path, zk_connect, [1, 2, 3])
    try:
        md = formed(nodes)[1]
        lead = {p: e["leader_id"] for p, e in offsets_partitions(md).items()}
        groups = [f"term-{i}" for i in range(60)]
        leaving = lead[partition_for(groups[0], 50)]
        mine = [g for g in groups if lead[partition_for(g, 50)] == leaving][:5]
        for g in mine:
            wait_for(f"{g} served", lambda g=g: commit_offset(nodes[leaving], g, offset=1) == 0,
                     describe=lambda: logs(nodes))
            for offset in range(2, 12):
                assert commit_offset(nodes[leaving], g, offset=offset) == 0
        assert nodes[leaving].stop() == 0
        others = {i: n for i, n in nodes.items() if i != leaving}
        for g in mine:
            def moved(g: str = g) -> int | None:
                err, node = find_coordinator(next(iter(others.values())), g)
                return node if err == 0 and node in others else None
            new = wait_for(f"{g}'s new coordinator", moved, describe=lambda: logs(others))
            assert wait_for(f"{g}'s offsets", lambda g=g, new=new: (
                r if (r := fetch_committed(others[new], g))[0] == 0 else None)) == (0, 11)
        exited = nodes[leaving].log()
        assert "no longer leading __consumer_offsets" in exited  # it gave them up itself, before it exited
    finally:
        stop_nodes(nodes)


@pytest.mark.serial  # ZooKeeper's JVM must be back within the 10 s session: a busy CPU can make its restart miss it
def test_zookeeper_down_within_the_session_timeout_stops_acknowledgements_until_it_is_back(tmp_path: Path) -> None:
    from test_cluster_replication import produce
    from test_cluster_user_topics import agreed_topic, create_topic
    from zookeeper_process import ZooKeeperProcess

    zk = ZooKeeperProcess(tmp_path / "zk").start()
    nodes = {}
    try:
        # a 10 s session (ZooKeeper's most at tickTime 500) outlives the restart; commits wait 1 s for replicas
        nodes = start_nodes(tmp_path, f"{zk.connect}/zkdown", [1, 2, 3], "--zookeeper-session-timeout-ms",
                            "10000", "--offsets-commit-timeout-ms", "1000")
        md = formed(nodes)[1]
        group = "zk-down"
        coordinator = offsets_partitions(md)[partition_for(group, 50)]["leader_id"]
        wait_for("a first commit", lambda: commit_offset(nodes[coordinator], group, offset=10) == 0,
                 describe=lambda: logs(nodes))
        assert create_topic(nodes[1], "zkt", 1, 3)["error_code"] == 0
        leader = agreed_topic(nodes, "zkt")[0]["leader_id"]
        assert produce(nodes[leader], "zkt", 0, b"before", -1)["error_code"] == 0

        zk.kill()
        wait_for("the coordinator to notice", lambda: "ZooKeeper session SUSPENDED" in nodes[coordinator].log(),
                 timeout=15)
        # nothing is acknowledged while ZooKeeper is away: a commit waits, then gets a retriable error
        assert commit_offset(nodes[coordinator], group, offset=20) == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert produce(nodes[leader], "zkt", 0, b"during", 1, timeout_ms=1000)["error_code"] == \
            ErrorCode.REQUEST_TIMED_OUT  # acks=1 too
        zk.start(same_port=True)

        wait_for("commits acknowledged again", lambda: commit_offset(nodes[coordinator], group, offset=30) == 0,
                 describe=lambda: logs(nodes))
        assert fetch_committed(nodes[coordinator], group) == (0, 30)
        assert produce(nodes[leader], "zkt", 0, b"after", -1)["error_code"] == 0
        assert not any("ZooKeeper session LOST" in n.log() for n in nodes.values())  # it came back in time
    finally:
        stop_nodes(nodes)
        zk.stop()
