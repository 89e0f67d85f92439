"""Followers replay the offsets partitions they replicate as they go (issue #20), in a real 3-node cluster
(real ZooKeeper, real `groupcoord serve` processes): 20,000 offsets of 200 groups on one offsets partition;
its coordinator is SIGKILLed (or SIGTERMed: a controlled shutdown); the new coordinator answers OffsetFetch
with every committed offset and never COORDINATOR_LOAD_IN_PROGRESS: it did not load the partition (its
``groupcoord_partition_load_seconds`` count, which counts every load a node serves after, did not move) but
led it at once from its follower replay (its log says so)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from cluster_nodes import (
    OFFSET_COMMIT,
    find_coordinator,
    logs,
    metadata,
    offsets_partitions,
    request,
    start_node,
    start_nodes,
    stop_nodes,
    wait_for,
)
from server_process import ServerProcess
from test_cluster_membership import formed
from test_cluster_replication import OFFSET_FETCH

from coordinator.core.sharding import partition_for
from protocol.errors import ErrorCode

GROUPS, PARTITIONS = 200, 100  # 20,000 offsets on one offsets partition
TOPIC = "replayed"
LOADS = "groupcoord_partition_load_seconds_count"
MOVE_S = 30.0  # bound on the leadership's move (SIGKILL: the ZooKeeper session timeout, 3 s, then an election)


def groups_of_one_shard(n: int) -> tuple[int, list[str]]:
    shard = partition_for("replay-0", 50)
    names: list[str] = []
    for i in range(200_000):  # about one name in 50 lands on the shard
        if partition_for(f"replay-{i}", 50) == shard:
            names.append(f"replay-{i}")
            if len(names) == n:
                return shard, names
    raise AssertionError("not enough group names for one shard")


def expected_offset(group_index: int, partition: int) -> int:
    return group_index * 1_000 + partition + 1


def commit_all(node: ServerProcess, group: str, gi: int) -> list[int]:
    """One simple-group OffsetCommit of ``PARTITIONS`` partitions; every partition's error code."""
    resp = request(node, OFFSET_COMMIT, lambda v: {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "retention_time_ms": -1,
        "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": p, "committed_offset": expected_offset(gi, p), "committed_leader_epoch": -1,
             "committed_metadata": ""} for p in range(PARTITIONS)]}]})
    return [p["error_code"] for t in resp["topics"] for p in t["partitions"]]


def fetch_all(node: ServerProcess, group: str) -> tuple[int, dict[int, int]]:
    """OffsetFetch of every committed partition of ``group``: (error code, partition -> offset)."""
    resp: dict[str, Any] = request(node, OFFSET_FETCH, lambda v: {
        "group_id": group, "topics": None, "require_stable": False,
        "groups": [{"group_id": group, "member_id": None, "member_epoch": -1, "topics": None}]})
    body = resp["groups"][0] if resp.get("groups") else resp
    if body.get("error_code"):
        return body["error_code"], {}
    got: dict[int, int] = {}
    for t in body["topics"]:
        for p in t["partitions"]:
            if p["error_code"]:
                return p["error_code"], {}
            if t["name"] == TOPIC:
                got[p["partition_index"]] = p["committed_offset"]
    return 0, got


@pytest.mark.parametrize("signal", ["SIGKILL", "SIGTERM"])
def test_a_new_coordinator_answers_at_once_from_its_follower_replay(tmp_path: Path, zk_connect: str,
                                                                     signal: str) -> None:
    nodes = start_nodes(tmp_path, zk_connect, [1, 2, 3])
    try:
        formed(nodes)
        shard, groups = groups_of_one_shard(GROUPS)
        victim = wait_for("the shard's coordinator", lambda: (
            c[1] if (c := find_coordinator(nodes[1], groups[0]))[0] == 0 else None), describe=lambda: logs(nodes))
        wait_for("the coordinator serving", lambda: commit_all(nodes[victim], groups[0], 0) == [0] * PARTITIONS,
                 describe=lambda: logs(nodes))
        for gi, group in enumerate(groups):
            assert commit_all(nodes[victim], group, gi) == [0] * PARTITIONS, group
        survivors = {i: n for i, n in nodes.items() if i != victim}
        loads_before = {i: n.metric(LOADS) for i, n in survivors.items()}
        assert all(count >= 1 for count in loads_before.values()), loads_before  # startup loads counted

        if signal == "SIGKILL":
            nodes[victim].kill()
        else:
            assert nodes[victim].stop() == 0
        seen: list[tuple[int, int]] = []  # (node, error) of every OffsetFetch answer after the move began
        deadline = time.monotonic() + MOVE_S
        new = None
        while new is None and time.monotonic() < deadline:
            for n in survivors.values():
                err, coordinator = find_coordinator(n, groups[0])
                if err == 0 and coordinator in survivors:
                    error, got = fetch_all(survivors[coordinator], groups[0])
                    seen.append((coordinator, error))
                    if error == 0 and len(got) == PARTITIONS:
                        new = coordinator
                        break
            time.sleep(0.02)
        assert new is not None, f"no coordinator answered in {MOVE_S} s: {seen[-5:]}\n" + logs(survivors)
        for gi, group in enumerate(groups):
            error, got = fetch_all(survivors[new], group)
            seen.append((new, error))
            assert error == 0 and got == {p: expected_offset(gi, p) for p in range(PARTITIONS)}, (group, error)
        assert all(error in (0, ErrorCode.NOT_COORDINATOR) for _, error in seen), seen
        assert ErrorCode.COORDINATOR_LOAD_IN_PROGRESS not in {error for _, error in seen}
        assert survivors[new].metric(LOADS) == loads_before[new], "the new coordinator loaded the partition"
        assert f"offsets partition {shard}: leading, served at once from the follower replay" in survivors[new].log()
    finally:
        stop_nodes(nodes)


def test_a_restarted_replica_rebuilds_at_startup_catches_up_and_then_leads_at_once(tmp_path: Path,
                                                                                   zk_connect: str) -> None:
    """A replica of the shard is killed, misses commits, restarts (its replay rebuilt from its log at
    startup, not served), catches up through the fetcher's hook and rejoins the ISR; then both other nodes
    are killed, so it must lead: it answers every offset, old and missed, at once."""
    nodes = start_nodes(tmp_path, zk_connect, [1, 2, 3])
    try:
        formed(nodes)
        shard, groups = groups_of_one_shard(60)
        leader = wait_for("the shard's coordinator", lambda: (
            c[1] if (c := find_coordinator(nodes[1], groups[0]))[0] == 0 else None), describe=lambda: logs(nodes))
        wait_for("the coordinator serving", lambda: commit_all(nodes[leader], groups[0], 0) == [0] * PARTITIONS,
                 describe=lambda: logs(nodes))
        for gi, group in enumerate(groups[:30]):
            assert commit_all(nodes[leader], group, gi) == [0] * PARTITIONS, group
        replica = next(i for i in nodes if i != leader)
        nodes[replica].kill()
        for gi, group in enumerate(groups[30:], start=30):  # missed by the replica while it is down
            wait_for(f"{group} committed", lambda g=group, gi=gi: commit_all(nodes[leader], g, gi) == [0] * PARTITIONS,
                     describe=lambda: logs(nodes))
        nodes[replica] = start_node(tmp_path, zk_connect, replica)
        wait_for("the restarted replica back in the shard's ISR", lambda: replica in offsets_partitions(
            metadata(nodes[leader])).get(shard, {}).get("isr_nodes", []), timeout=60, describe=lambda: logs(nodes))
        loads_before = nodes[replica].metric(LOADS)
        for i in [i for i in nodes if i != replica]:
            nodes[i].kill()
        alone = {replica: nodes[replica]}
        seen: list[int] = []
        deadline = time.monotonic() + MOVE_S
        while time.monotonic() < deadline:
            err, coordinator = find_coordinator(nodes[replica], groups[0])
            if err == 0 and coordinator == replica:
                error, got = fetch_all(nodes[replica], groups[0])
                seen.append(error)
                if error == 0 and len(got) == PARTITIONS:
                    break
            time.sleep(0.02)
        else:
            raise AssertionError(f"the replica did not lead in {MOVE_S} s: {seen[-5:]}\n" + logs(alone))
        for gi, group in enumerate(groups):
            error, got = fetch_all(nodes[replica], group)
            seen.append(error)
            assert error == 0 and got == {p: expected_offset(gi, p) for p in range(PARTITIONS)}, (group, error)
        assert set(seen) <= {0, ErrorCode.NOT_COORDINATOR}, seen
        assert nodes[replica].metric(LOADS) == loads_before, "the restarted replica loaded the partition"
        assert f"offsets partition {shard}: leading, served at once from the follower replay" in nodes[replica].log()
    finally:
        stop_nodes(nodes)
