"""A kill loop in a real 3-node cluster (real ZooKeeper, real `groupcoord serve` processes): under a steady
load of offset commits (raw OffsetCommits to whichever node FindCoordinator names) and acks=all produce (our
Producer), five SIGKILLs of random nodes, each restarted and waited back into every ISR. A checker then finds
every acknowledged record in the topic and every group's committed offset at or past its last acknowledged
commit (and not past its last attempted one)."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

from cluster_nodes import (
    OFFSETS_TOPIC,
    commit_offset,
    find_coordinator,
    logs,
    metadata,
    offsets_partitions,
    start_node,
    stop_nodes,
    wait_for,
)
from kafka import KafkaConsumer
from kafka import TopicPartition as KTP
from server_process import ServerProcess
from test_cluster_membership import formed
from test_cluster_replication import TOPIC, fetch_committed, three_with_topic
from test_cluster_user_topics import topic_parts

from client import Producer
from client.errors import KafkaError

KILLS = 5
GROUPS = [f"loop-{i}" for i in range(6)]
LOAD_DEADLINE_S = 240


def all_in_sync(nodes: dict[int, ServerProcess]) -> bool:
    md = metadata(next(iter(nodes.values())), [TOPIC, OFFSETS_TOPIC])
    parts = list((topic_parts(md, TOPIC) or {}).values()) + list(offsets_partitions(md).values())
    return len(parts) == 53 and all(sorted(p["isr_nodes"]) == sorted(nodes) and p["leader_id"] in nodes
                                    for p in parts)


class Committer(threading.Thread):
    def __init__(self, nodes: dict[int, ServerProcess]) -> None:
        super().__init__(daemon=True)
        self.nodes = nodes
        self.acked: dict[str, int] = {}
        self.attempted: dict[str, int] = {}
        self.stopping = threading.Event()
        self.count = 0

    def run(self) -> None:
        offset = 0
        stop_at = time.monotonic() + LOAD_DEADLINE_S
        while not self.stopping.is_set() and time.monotonic() < stop_at:
            offset += 1
            for g in GROUPS:
                try:
                    live = [n for n in self.nodes.values() if n.alive()]
                    err, node = find_coordinator(random.choice(live), g)
                    target = self.nodes.get(node)
                    if err or target is None or not target.alive():
                        continue
                    self.attempted[g] = offset
                    if commit_offset(target, g, offset=offset) == 0:
                        self.acked[g] = offset
                        self.count += 1
                except (KafkaError, OSError, IndexError):
                    pass
            time.sleep(0.02)


class Writer(threading.Thread):
    def __init__(self, nodes: dict[int, ServerProcess]) -> None:
        super().__init__(daemon=True)
        self.nodes = nodes
        self.acked: set[bytes] = set()
        self.stopping = threading.Event()

    def run(self) -> None:
        stop_at = time.monotonic() + LOAD_DEADLINE_S
        i = 0
        with Producer(",".join(n.bootstrap for n in self.nodes.values()), acks="all", request_timeout_ms=5000,
                      retries=3, retry_backoff_ms=200) as producer:
            while not self.stopping.is_set() and time.monotonic() < stop_at:
                batch = [(b"w-%d" % (i + j), producer.send(TOPIC, value=b"w-%d" % (i + j), partition=(i + j) % 3))
                         for j in range(20)]
                i += 20
                try:
                    producer.flush(15)
                except KafkaError:
                    pass
                for value, fut in batch:
                    try:
                        if fut.get(0.1).offset >= 0:
                            self.acked.add(value)
                    except Exception:  # refused or timed out during a move: not acknowledged
                        pass


def test_five_sigkills_under_load_lose_nothing_acknowledged(tmp_path: Path, zk_connect: str) -> None:
    nodes, _ = three_with_topic(tmp_path, zk_connect, 3)
    rng = random.Random(20)
    committer, writer = Committer(nodes), Writer(nodes)
    try:
        formed(nodes)
        wait_for("every ISR full", lambda: all_in_sync(nodes), describe=lambda: logs(nodes))
        committer.start()
        writer.start()
        for kill in range(KILLS):
            victim = rng.choice(sorted(nodes))
            acked_before = committer.count
            nodes[victim].kill()
            nodes[victim] = start_node(tmp_path, zk_connect, victim)
            wait_for(f"kill {kill + 1} (node {victim}): every ISR full again", lambda: all_in_sync(nodes),
                     timeout=90, interval=0.3, describe=lambda: logs(nodes))
            wait_for(f"kill {kill + 1}: commits acknowledged again", lambda n=acked_before: committer.count > n + 5,
                     timeout=60, describe=lambda: logs(nodes))
        committer.stopping.set()
        writer.stopping.set()
        committer.join(60)
        writer.join(60)
        assert committer.acked and writer.acked

        for g, last in committer.acked.items():
            def committed(g: str = g) -> int | None:
                err, node = find_coordinator(nodes[1], g)
                if err or node not in nodes:
                    return None
                got = fetch_committed(nodes[node], g)
                return got[1] if got[0] == 0 else None
            value = wait_for(f"{g}'s committed offset", committed, describe=lambda: logs(nodes))
            assert last <= value <= committer.attempted[g], (g, last, value, committer.attempted[g])

        kc = KafkaConsumer(bootstrap_servers=[n.bootstrap for n in nodes.values()], enable_auto_commit=False,
                           auto_offset_reset="earliest", consumer_timeout_ms=1000)
        try:
            kc.assign([KTP(TOPIC, p) for p in range(3)])
            kc.seek_to_beginning()
            seen: set[bytes] = set()
            for _ in range(60):
                seen |= {m.value for m in kc}
                if writer.acked <= seen:
                    break
            missing = writer.acked - seen
            assert not missing, f"{len(missing)} acknowledged records missing, e.g. {sorted(missing)[:5]}"
        finally:
            kc.close()
    finally:
        committer.stopping.set()
        writer.stopping.set()
        committer.join(30)
        writer.join(30)
        stop_nodes(nodes)
