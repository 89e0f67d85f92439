"""Deleting topics in a real 3-node cluster never stops journal trimming, and the nodes' logs stay quiet.

Followers journal their leaders' batches (``GroupCommit.append_replicated``); a topic deleted while its
batches are still in a node's journal is settled there (a deletion mark), not a failed fsync: every later
checkpoint trims the journal, a clean SIGTERM leaves it empty, and a node SIGKILLed with such entries in
its journal restarts with one summary line for them, never a line per entry. Creating a topic logs nothing
above INFO on any node; a clean SIGTERM logs nothing at WARNING or above."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cluster_nodes import logs, metadata, start_node, start_nodes, stop_nodes, wait_for
from kafka import KafkaProducer
from server_process import ServerProcess
from test_cluster_membership import formed
from test_cluster_user_topics import agreed_topic, create_topic, delete_topic, topic_parts

from coordinator.storage.journal import Journal

CHECKPOINT_BYTES = 1 << 16  # the smallest the key allows: a few hundred produced KiB fill several files
LOUD = re.compile(r"^\S+ \S+ (WARNING|ERROR|CRITICAL) ")


def journal_bytes(data_root: Path, node_id: int) -> list[int]:
    return [f.stat().st_size for f in sorted((data_root / f"node{node_id}" / "journal").glob("*.wal"))]


def loud_lines(node: ServerProcess, since: int = 0) -> list[str]:
    return [line for line in node.output[since:] if LOUD.match(line)]


def produce(bootstrap: str, topic: str, records: int, size: int = 1024) -> None:
    kp = KafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=15000, linger_ms=5)
    try:
        futures = [kp.send(topic, value=b"%06d" % i + b"x" * (size - 6), partition=i % 3) for i in range(records)]
        kp.flush(30)
        assert all(f.get(timeout=10).offset >= 0 for f in futures)
    finally:
        kp.close(5)


def create_agreed(nodes: dict[int, ServerProcess], name: str, rf: int = 3) -> None:
    made = create_topic(nodes[1], name, 3, rf)
    assert made["error_code"] == 0, made
    agreed_topic(nodes, name)
    for i, n in nodes.items():  # every replica's fetcher has its partitions
        wait_for(f"node {i} lists {name}", lambda n=n: topic_parts(metadata(n, [name]), name) is not None)


# serial: on a loaded machine a ZooKeeper read of the users/ACLs sync can still be running when SIGTERM closes the
# session, and it logs a WARNING (coordinator/cluster/security_zk.py), which this test's quiet-SIGTERM check forbids
@pytest.mark.serial
def test_deleted_topics_leave_the_journal_trimmed_and_the_logs_quiet(tmp_path: Path, zk_connect: str) -> None:
    nodes = start_nodes(tmp_path, zk_connect, [1, 2, 3], "--log-journal-checkpoint-bytes", str(CHECKPOINT_BYTES))
    try:
        formed(nodes)
        marks = {i: len(n.output) for i, n in nodes.items()}
        for k in range(3):  # created, written with acks=all, deleted at once: followers still journal them
            name = f"doomed-{k}"
            create_agreed(nodes, name)
            produce(nodes[1 + k].bootstrap, name, 150)
            assert delete_topic(nodes[1], name) == 0
        for i, n in nodes.items():
            wait_for(f"node {i} drops the deleted topics",
                     lambda n=n: not any(t["name"].startswith("doomed-") for t in metadata(n)["topics"]))
        created = {i: len(n.output) for i, n in nodes.items()}
        create_agreed(nodes, "kept")
        for i, n in nodes.items():  # creating a topic is no news for an operator: nothing above INFO
            assert loud_lines(n, created[i]) == [], logs(nodes)
        for _ in range(3):  # more writes: several checkpoints on every node, each of them trims
            produce(nodes[2].bootstrap, "kept", 150)
        for i in nodes:
            wait_for(f"node {i}'s journal trimmed",
                     lambda i=i: len(journal_bytes(tmp_path, i)) <= 2, describe=lambda: logs(nodes))
            assert sum(journal_bytes(tmp_path, i)) < 4 * CHECKPOINT_BYTES + (1 << 20)
        for i, n in nodes.items():
            assert not any("could not be fsynced" in line for line in n.output[marks[i]:]), logs(nodes)

        # a clean SIGTERM: nothing at WARNING or above, and an empty journal
        before = len(nodes[3].output)
        assert nodes[3].stop() == 0
        assert loud_lines(nodes[3], before) == [], nodes[3].log()[-3000:]
        assert journal_bytes(tmp_path, 3) == []

        # a SIGKILL with a deleted topic's batches in node 2's journal: one summary line at the restart. Node 2
        # runs with the default checkpoint size now, so no checkpoint trims those batches before the kill.
        assert nodes[2].stop() == 0
        nodes[2] = start_node(tmp_path, zk_connect, 2)
        for i in (1, 2):
            wait_for(f"node {i} sees nodes 1 and 2", lambda i=i: len(metadata(nodes[i])["brokers"]) == 2)
        create_agreed({1: nodes[1], 2: nodes[2]}, "doomed-late", rf=2)
        produce(nodes[1].bootstrap, "doomed-late", 60)
        assert delete_topic(nodes[1], "doomed-late") == 0
        wait_for("node 2 drops doomed-late",
                 lambda: not any(t["name"] == "doomed-late" for t in metadata(nodes[2])["topics"]))
        nodes[2].kill()
        journaled = [e.name for e in Journal.open(str(tmp_path / "node2" / "journal")).recovered()]
        assert any(name.startswith("doomed-late-") for name in journaled), journaled[:20]
        nodes[2] = start_node(tmp_path, zk_connect, 2, "--log-journal-checkpoint-bytes", str(CHECKPOINT_BYTES))
        out = nodes[2].output
        assert not any("no such online log" in line or "journal entry for" in line for line in out), out
        summary = [line for line in out if "of deleted logs skipped" in line]
        assert len(summary) == 1 and " INFO " in summary[0], out
        assert [line for line in out if LOUD.match(line) and "journal" in line] == [], out
    finally:
        stop_nodes(nodes)
