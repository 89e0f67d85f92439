"""Real `groupcoord serve` processes joined by a real ZooKeeper: the cluster forms, agrees on coordinators,
and survives the loss of a node (the controller included)."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from cluster_nodes import (
    REPO,
    commit_offset,
    find_coordinator,
    logs,
    metadata,
    offsets_partitions,
    start_nodes,
    stop_nodes,
    wait_for,
)
from kazoo.client import KazooClient
from server_process import ServerProcess

from coordinator.core.sharding import partition_for
from protocol.errors import ErrorCode

GROUPS = [f"group-{i}" for i in range(12)]


def formed(nodes: dict[int, ServerProcess]) -> dict[int, dict[str, Any]]:
    """Wait until every node lists every node and leads its offsets partitions; each node's Metadata."""
    ids = sorted(nodes)
    for n in nodes.values():
        wait_for("all brokers in Metadata", lambda n=n: sorted(b["node_id"] for b in metadata(n)["brokers"]) == ids,
                 describe=lambda: logs(nodes))
    # the offsets topic is created on first use (FindCoordinator), then the controller elects its leaders
    first = next(iter(nodes.values()))
    wait_for("a coordinator", lambda: find_coordinator(first, GROUPS[0])[0] == 0, describe=lambda: logs(nodes))

    def all_led() -> dict[int, dict[str, Any]] | None:
        mds = {i: metadata(n) for i, n in nodes.items()}
        for md in mds.values():
            parts = offsets_partitions(md)
            if len(parts) != 50 or any(p["leader_id"] not in nodes for p in parts.values()):
                return None
        return mds

    return wait_for("50 led offsets partitions on every node", all_led, describe=lambda: logs(nodes))


def leaders(md: dict[str, Any]) -> dict[int, int]:
    return {p: e["leader_id"] for p, e in offsets_partitions(md).items()}


def agreed_coordinators(nodes: dict[int, ServerProcess], md: dict[str, Any]) -> dict[str, int]:
    """Every node's FindCoordinator answer for every group: the same node, the leader of its partition."""
    lead = leaders(md)
    out = {}
    for g in GROUPS:
        answers = {i: find_coordinator(n, g) for i, n in nodes.items()}
        assert set(answers.values()) == {(0, lead[partition_for(g, 50)])}, (g, answers)
        out[g] = lead[partition_for(g, 50)]
    return out


def wait_serving(nodes: dict[int, ServerProcess], coordinators: dict[str, int]) -> None:
    """Commits go through on each group's coordinator (once it loaded the partition) and are refused with
    NOT_COORDINATOR by every other node."""
    for g, c in coordinators.items():
        wait_for(f"{g} served by node {c}", lambda g=g, c=c: commit_offset(nodes[c], g) == 0,
                 describe=lambda: logs(nodes))
        for i, n in nodes.items():
            if i != c:
                assert commit_offset(n, g) == ErrorCode.NOT_COORDINATOR, (g, i, c)


def controller_epoch(zk_connect: str) -> int:
    hosts, chroot = zk_connect.split("/", 1)
    zk = KazooClient(hosts=hosts)
    zk.start(timeout=15)
    try:
        data, _ = zk.get(f"/{chroot}/controller_epoch")
        return int(data)
    finally:
        zk.stop()
        zk.close()


def test_three_nodes_form_a_cluster_and_agree_on_coordinators(tmp_path: Path, zk_connect: str) -> None:
    nodes = start_nodes(tmp_path, zk_connect, [1, 2, 3])
    try:
        mds = formed(nodes)
        controllers = {md["controller_id"] for md in mds.values()}
        assert len(controllers) == 1 and controllers <= set(nodes)
        views = [leaders(md) for md in mds.values()]
        assert views[0] == views[1] == views[2]
        per_node = Counter(views[0].values())
        assert set(per_node) == {1, 2, 3} and all(14 <= c <= 20 for c in per_node.values()), per_node
        for md in mds.values():
            for p in offsets_partitions(md).values():
                assert sorted(p["replica_nodes"]) == [1, 2, 3] and sorted(p["isr_nodes"]) == [1, 2, 3]
                assert p["leader_epoch"] == 0 and p["error_code"] == 0 and p["offline_replicas"] == []
                assert p["replica_nodes"][0] == p["leader_id"]  # preferred leaders
        wait_serving(nodes, agreed_coordinators(nodes, mds[1]))

        out = subprocess.run([sys.executable, "-m", "coordinator.cli", "cluster", "describe", "-b",
                              nodes[2].bootstrap], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        rows = {int(line.split()[0]): line.split() for line in out.stdout.splitlines()[2:]}
        assert sorted(rows) == [1, 2, 3]
        assert {i: int(r[-3]) for i, r in rows.items()} == dict(per_node)  # OFFSETS-LEADER column
        assert f"CONTROLLER {controllers.pop()}" in out.stdout.splitlines()[0]
    finally:
        stop_nodes(nodes)


def test_losing_a_node_moves_its_leaderships_to_in_sync_replicas(tmp_path: Path, zk_connect: str) -> None:
    nodes = start_nodes(tmp_path, zk_connect, [1, 2, 3])
    try:
        before = formed(nodes)[1]
        controller = before["controller_id"]
        victim = next(i for i in nodes if i != controller)
        old = offsets_partitions(before)
        nodes[victim].kill()
        survivors = {i: n for i, n in nodes.items() if i != victim}

        def moved() -> dict[str, Any] | None:
            mds = [metadata(n) for n in survivors.values()]
            if any(sorted(b["node_id"] for b in md["brokers"]) != sorted(survivors) for md in mds):
                return None
            if any(victim in leaders(md).values() or any(victim in p["isr_nodes"] for p in
                                                         offsets_partitions(md).values()) for md in mds):
                return None
            return mds[0] if leaders(mds[0]) == leaders(mds[1]) else None

        after = wait_for(f"node {victim}'s leaderships to move", moved, describe=lambda: logs(survivors))
        new = offsets_partitions(after)
        assert Counter(leaders(after).values()).keys() == set(survivors)
        for p, entry in new.items():
            was = old[p]
            if was["leader_id"] == victim:  # moved: to the first surviving in-sync replica, a new epoch
                assert entry["leader_id"] == next(r for r in was["replica_nodes"] if r != victim)
                assert entry["leader_epoch"] == was["leader_epoch"] + 1
            else:  # kept its leader; the ISR shrank, which also bumps the leader epoch (as Kafka)
                assert entry["leader_id"] == was["leader_id"]
                assert entry["leader_epoch"] == was["leader_epoch"] + 1
            assert sorted(entry["isr_nodes"]) == sorted(survivors)
            assert entry["offline_replicas"] == [victim]
            assert entry["replica_nodes"] == was["replica_nodes"]
        wait_serving(survivors, agreed_coordinators(survivors, after))
    finally:
        stop_nodes(nodes)


def test_controller_moves_when_the_controller_is_killed(tmp_path: Path, zk_connect: str) -> None:
    nodes = start_nodes(tmp_path, zk_connect, [1, 2, 3])
    try:
        before = formed(nodes)[2]
        controller = before["controller_id"]
        epoch = controller_epoch(zk_connect)
        nodes[controller].kill()
        survivors = {i: n for i, n in nodes.items() if i != controller}

        def new_controller() -> int | None:
            ids = {metadata(n)["controller_id"] for n in survivors.values()}
            return ids.pop() if len(ids) == 1 and ids <= set(survivors) else None

        successor = wait_for("a new controller", new_controller, describe=lambda: logs(survivors))
        assert successor != controller
        assert controller_epoch(zk_connect) > epoch
        # the new controller did the dead one's work: nothing is led by it any more
        after = wait_for("leaderships of the old controller to move", lambda: next(
            (md for md in [metadata(survivors[successor])] if controller not in leaders(md).values()), None),
            describe=lambda: logs(survivors))
        assert set(leaders(after).values()) == set(survivors)
        wait_serving(survivors, agreed_coordinators(survivors, after))
    finally:
        stop_nodes(nodes)
