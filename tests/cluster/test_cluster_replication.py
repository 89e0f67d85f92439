"""Replication in a real 3-node cluster (real ZooKeeper, real `groupcoord serve` processes): acks=all records
are on every in-sync replica's disk when acknowledged and survive the leader's SIGKILL; commits survive their
coordinator's SIGKILL (followers syncing their appends on the event loop, and through the group commit's rounds); a restarted node catches up and its logs equal the leader's; with two nodes down and
``min.insync.replicas=2`` nothing is acknowledged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cluster_nodes import (
    OFFSETS_TOPIC,
    commit_offset,
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
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTP
from server_process import ServerProcess
from test_cluster_membership import formed
from test_cluster_user_topics import agreed_topic, create_topic, topic_parts

from client import Producer
from coordinator.core.sharding import partition_for
from protocol.errors import ErrorCode
from protocol.record_batch import iter_records, parse_header, split_batches

PRODUCE, LIST_OFFSETS, OFFSET_FETCH = 0, 2, 9
FAULTS = Path(__file__).parents[1] / "integration" / "faults"  # test hooks loaded at the servers' start-up
TOPIC = "replicated"


# ---------------------------------------------------------------- reading what is on a node's disk
def stored_batches(data_root: Path, node_id: int, topic: str, partition: int) -> list[bytes]:
    """Every whole batch in a replica's segment files, in offset order (read from the files, not the server)."""
    out: list[bytes] = []
    for seg in sorted((data_root / f"node{node_id}" / f"{topic}-{partition}").glob("*.log")):
        batches, _ = split_batches(seg.read_bytes())
        out += [bytes(b) for b in batches]
    return out


def stored_values(data_root: Path, node_id: int, topic: str, partition: int) -> dict[int, bytes | None]:
    return {r.offset: r.value for b in stored_batches(data_root, node_id, topic, partition)
            for r in iter_records(b)}


def below(batches: list[bytes], end: int) -> list[bytes]:
    return [b for b in batches if parse_header(b).base_offset < end]


def latest_offset(node: ServerProcess, topic: str, partition: int) -> int:
    resp = request(node, LIST_OFFSETS, lambda v: {
        "replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [{
            "partition_index": partition, "current_leader_epoch": -1, "timestamp": -1, "max_num_offsets": 1}]}]})
    p = resp["topics"][0]["partitions"][0]
    assert p["error_code"] == 0, p
    return p["offset"]


def produce(node: ServerProcess, topic: str, partition: int, value: bytes, acks: int, timeout_ms: int = 5000
            ) -> dict[str, Any]:
    from protocol.record_batch import build_batch

    batch = build_batch([(b"k", value, [], 0)])
    resp = request(node, PRODUCE, lambda v: {
        "transactional_id": None, "acks": acks, "timeout_ms": timeout_ms,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
    return resp["responses"][0]["partition_responses"][0]


def fetch_committed(node: ServerProcess, group: str, topic: str = "t") -> tuple[int, int]:
    """(error code, committed offset of ``topic``-0) from OffsetFetch asked of ``node``."""
    resp = request(node, OFFSET_FETCH, lambda v: {
        "group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}], "require_stable": False,
        "groups": [{"group_id": group, "member_id": None, "member_epoch": -1,
                    "topics": [{"name": topic, "partition_indexes": [0]}]}]})
    if resp.get("groups"):
        g = resp["groups"][0]
        if g["error_code"]:
            return g["error_code"], -1
        return g["topics"][0]["partitions"][0]["error_code"], g["topics"][0]["partitions"][0]["committed_offset"]
    if resp.get("error_code"):
        return resp["error_code"], -1
    p = resp["topics"][0]["partitions"][0]
    return p["error_code"], p["committed_offset"]


def three_with_topic(tmp_path: Path, zk_connect: str, partitions: int, *extra: str
                     ) -> tuple[dict[int, ServerProcess], dict[int, dict[str, Any]]]:
    nodes = start_nodes(tmp_path, zk_connect, [1, 2, 3], *extra)
    try:
        for n in nodes.values():
            wait_for("three brokers", lambda n=n: len(metadata(n)["brokers"]) == 3, describe=lambda: logs(nodes))
        made = create_topic(nodes[1], TOPIC, partitions, 3)
        assert made["error_code"] == 0, made
        return nodes, agreed_topic(nodes, TOPIC)
    except BaseException:
        stop_nodes(nodes)
        raise


# ---------------------------------------------------------------- the stories
def test_acks_all_records_are_on_every_replica_and_survive_the_leaders_kill(tmp_path: Path, zk_connect: str
                                                                            ) -> None:
    nodes, parts = three_with_topic(tmp_path, zk_connect, 3)
    try:
        acked: dict[int, dict[int, bytes]] = {p: {} for p in parts}  # partition -> offset -> value
        kp = KafkaProducer(bootstrap_servers=nodes[2].bootstrap, acks="all", linger_ms=2, request_timeout_ms=20000)
        try:
            futures = [(p, f"kp-{p}-{i}".encode(), kp.send(TOPIC, value=f"kp-{p}-{i}".encode(), partition=p))
                       for i in range(40) for p in parts]
            kp.flush(30)
            for p, value, fut in futures:
                acked[p][fut.get(10).offset] = value
        finally:
            kp.close(5)
        with Producer(nodes[3].bootstrap, acks="all", request_timeout_ms=20000) as ours:
            futs = [(p, f"ours-{p}-{i}".encode(), ours.send(TOPIC, value=f"ours-{p}-{i}".encode(), partition=p))
                    for i in range(40) for p in parts]
            ours.flush(30)
            for p, value, fut in futs:
                acked[p][fut.get(10).offset] = value
        # acknowledged means on every in-sync replica's disk: read at once from each node's files
        for p, entry in parts.items():
            for r in entry["isr_nodes"]:
                on_disk = stored_values(tmp_path, r, TOPIC, p)
                missing = {o: v for o, v in acked[p].items() if on_disk.get(o) != v}
                assert not missing, (p, r, sorted(missing)[:5])

        # SIGKILL the leader of partition 0: its successor serves every acknowledged record
        victim = parts[0]["leader_id"]
        nodes[victim].kill()
        survivors = {i: n for i, n in nodes.items() if i != victim}
        after = agreed_topic(survivors, TOPIC)
        assert all(e["leader_id"] != victim for e in after.values())
        kc = KafkaConsumer(bootstrap_servers=next(iter(survivors.values())).bootstrap, enable_auto_commit=False,
                           auto_offset_reset="earliest", consumer_timeout_ms=1000)
        try:
            kc.assign([KTP(TOPIC, p) for p in parts])
            kc.seek_to_beginning()
            seen: dict[int, dict[int, bytes]] = {p: {} for p in parts}
            for _ in range(60):
                for msg in kc:
                    seen[msg.partition][msg.offset] = msg.value
                if all(set(acked[p]) <= set(seen[p]) for p in parts):
                    break
            for p in parts:
                assert {o: seen[p].get(o) for o in acked[p]} == acked[p], p
        finally:
            kc.close()
    finally:
        stop_nodes(nodes)


@pytest.mark.parametrize("follower_sync", ["on the loop", "group commit rounds"])
def test_commits_survive_the_coordinators_kill(tmp_path: Path, zk_connect: str, follower_sync: str) -> None:
    # followers make their appends durable on the event loop while the journal's fsyncs are fast (the default
    # here), else through the group commit's rounds (forced by the test hook): both keep every acknowledged commit
    env = None if follower_sync == "on the loop" else \
        {"PYTHONPATH": str(FAULTS), "TEST_SYNC_HERE_MAX_S": "-1"}
    nodes = start_nodes(tmp_path, zk_connect, [1, 2, 3], env=env)
    try:
        md = formed(nodes)[1]
        lead = {p: e["leader_id"] for p, e in offsets_partitions(md).items()}
        groups = [f"g-{i}" for i in range(40)]
        victim = lead[partition_for(groups[0], 50)]
        mine = [g for g in groups if lead[partition_for(g, 50)] == victim][:6]
        last: dict[str, int] = {}
        for g in mine:
            wait_for(f"{g} served by node {victim}", lambda g=g: commit_offset(nodes[victim], g, offset=1) == 0,
                     describe=lambda: logs(nodes))
            for offset in range(100, 120):
                assert commit_offset(nodes[victim], g, offset=offset) == 0
                last[g] = offset
        nodes[victim].kill()
        survivors = {i: n for i, n in nodes.items() if i != victim}
        for g in mine:
            def moved(g: str = g) -> int | None:
                err, node = find_coordinator(next(iter(survivors.values())), g)
                return node if err == 0 and node in survivors else None
            coordinator = wait_for(f"a new coordinator for {g}", moved, describe=lambda: logs(survivors))
            answer = wait_for(f"{g}'s offsets from node {coordinator}", lambda g=g, c=coordinator: (
                r if (r := fetch_committed(survivors[c], g))[0] == 0 else None), describe=lambda: logs(survivors))
            assert answer == (0, last[g]), (g, answer, last[g])
    finally:
        stop_nodes(nodes)


def test_a_restarted_node_catches_up_and_equals_the_leader(tmp_path: Path, zk_connect: str) -> None:
    nodes, parts = three_with_topic(tmp_path, zk_connect, 2)
    try:
        leaders = {e["leader_id"] for e in parts.values()}
        victim = next(i for i in nodes if i not in leaders) if len(leaders) < 3 else 3
        for i in range(10):
            for p, e in parts.items():
                assert produce(nodes[e["leader_id"]], TOPIC, p, f"before-{i}".encode(), -1)["error_code"] == 0
        nodes[victim].kill()
        survivors = {i: n for i, n in nodes.items() if i != victim}

        def shrunk() -> dict[int, dict[str, Any]] | None:
            got = topic_parts(metadata(next(iter(survivors.values())), [TOPIC]), TOPIC)
            return got if got and all(victim not in e["isr_nodes"] and e["leader_id"] in survivors
                                      for e in got.values()) else None
        now = wait_for(f"node {victim} out of the ISR", shrunk, describe=lambda: logs(survivors))
        for i in range(10):  # two in-sync replicas remain: acks=all goes on
            for p, e in now.items():
                assert produce(survivors[e["leader_id"]], TOPIC, p, f"while-down-{i}".encode(), -1)["error_code"] == 0
        nodes[victim] = start_node(tmp_path, zk_connect, victim)

        def rejoined() -> dict[int, dict[str, Any]] | None:
            got = topic_parts(metadata(nodes[victim], [TOPIC]), TOPIC)
            return got if got and all(victim in e["isr_nodes"] for e in got.values()) else None
        final = wait_for(f"node {victim} back in the ISR", rejoined, timeout=40, describe=lambda: logs(nodes))
        for p, e in final.items():
            leader = e["leader_id"]
            hw = latest_offset(nodes[leader], TOPIC, p)
            assert hw >= 20
            assert below(stored_batches(tmp_path, victim, TOPIC, p), hw) == \
                below(stored_batches(tmp_path, leader, TOPIC, p), hw), p
    finally:
        stop_nodes(nodes)


def test_two_nodes_down_refuse_acks_all_and_commits(tmp_path: Path, zk_connect: str) -> None:
    nodes, parts = three_with_topic(tmp_path, zk_connect, 1, "--min-insync-replicas", "2")
    try:
        md = formed(nodes)[1]
        survivor = parts[0]["leader_id"]
        group = next(g for g in (f"g-{i}" for i in range(200))
                     if offsets_partitions(md)[partition_for(g, 50)]["leader_id"] == survivor)
        wait_for("a first commit", lambda: commit_offset(nodes[survivor], group, offset=5) == 0,
                 describe=lambda: logs(nodes))
        for i in [i for i in nodes if i != survivor]:
            nodes[i].kill()

        def alone() -> bool:
            md = metadata(nodes[survivor], [TOPIC, OFFSETS_TOPIC])
            got = topic_parts(md, TOPIC)
            off = offsets_partitions(md)[partition_for(group, 50)]
            return bool(got) and got[0]["isr_nodes"] == [survivor] and off["isr_nodes"] == [survivor]
        wait_for("the ISRs down to the survivor", alone, describe=lambda: logs({survivor: nodes[survivor]}))
        before = stored_values(tmp_path, survivor, TOPIC, 0)
        answer = produce(nodes[survivor], TOPIC, 0, b"refused", -1)
        assert answer["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS, answer
        assert stored_values(tmp_path, survivor, TOPIC, 0) == before  # nothing appended
        assert commit_offset(nodes[survivor], group, offset=6) == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert fetch_committed(nodes[survivor], group) == (0, 5)
        assert produce(nodes[survivor], TOPIC, 0, b"acks-1", 1)["error_code"] == 0  # acks=1 needs no replica
    finally:
        stop_nodes(nodes)


def test_acks_0_records_reach_every_replica_and_the_high_watermark(tmp_path: Path, zk_connect: str) -> None:
    """An acks=0 Produce gets no answer; its records still go to the followers (woken at once), and the high
    watermark consumers read below moves once they are replicated."""
    nodes, parts = three_with_topic(tmp_path, zk_connect, 1)
    try:
        leader = parts[0]["leader_id"]
        kp = KafkaProducer(bootstrap_servers=nodes[leader].bootstrap, acks=0, linger_ms=0)
        try:
            for i in range(20):
                kp.send(TOPIC, value=b"zero-%d" % i, partition=0)
            kp.flush(10)
        finally:
            kp.close(5)
        wait_for("the high watermark past the 20 records", lambda: latest_offset(nodes[leader], TOPIC, 0) == 20 or None,
                 describe=lambda: logs(nodes))
        for r in parts[0]["replica_nodes"]:
            wait_for(f"20 records on node {r}'s disk", lambda r=r: len(stored_values(tmp_path, r, TOPIC, 0)) == 20 or None)
            assert sorted(stored_values(tmp_path, r, TOPIC, 0).values()) == sorted(b"zero-%d" % i for i in range(20))
    finally:
        stop_nodes(nodes)
