"""Rebalance history and offset history through the coordinator's SIGKILL, in a real 3-node cluster (#37).

A classic group (kafka-python consumers) rebalances three times (a member joins, a second joins, the second
leaves) and commits several offsets at distinct times; both histories are read from its coordinator with our
admin client (DescribeGroups v5+ with our tagged fields). The coordinator is SIGKILLed: the group's new coordinator
(a follower that replayed the offsets partition) shows the same rebalances and the same kept commits, entry for
entry. Every wait is bounded.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from cluster_nodes import find_coordinator, logs, metadata, start_nodes, stop_nodes, wait_for
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata
from test_cluster_user_topics import agreed_topic, create_topic

from client.admin import AdminClient

pytestmark = pytest.mark.serial  # three nodes and a ZooKeeper: the machine to itself

TOPIC, GROUP = "hist-t", "hist-g"


def _consumer(bootstrap: str, client_id: str) -> KafkaConsumer:
    # metadata_max_age_ms: a consumer whose metadata did not have the new topic yet when the group formed (its
    # leader then assigns nothing: "No partition metadata for topic") sees the partitions at its next refresh
    # and rejoins; with kafka-python's default, 5 minutes, the test waited out its 60 s (seen under load)
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=GROUP, client_id=client_id, enable_auto_commit=False,
                      session_timeout_ms=6000, heartbeat_interval_ms=500, request_timeout_ms=10000,
                      metadata_max_age_ms=1000)
    c.subscribe([TOPIC])
    return c


def _poll_until(consumers: list[KafkaConsumer], done: object, what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(100)
        if done():  # type: ignore[operator]
            return
    raise AssertionError(f"timed out: {what}")


def test_histories_survive_the_coordinators_kill(tmp_path: Path, zk_connect: str) -> None:
    nodes = start_nodes(tmp_path, zk_connect, [1, 2, 3], "--offsets-history-size", "16",
                        "--offsets-history-min-interval-ms", "0")
    try:
        for n in nodes.values():
            wait_for("three brokers", lambda n=n: len(metadata(n)["brokers"]) == 3, describe=lambda: logs(nodes))
        assert create_topic(nodes[1], TOPIC, 2, 3)["error_code"] == 0
        agreed_topic(nodes, TOPIC)
        _, coordinator = wait_for("a coordinator", lambda: (lambda r: r if r[0] == 0 else None)(
            find_coordinator(nodes[1], GROUP)), timeout=30)
        bootstrap = nodes[coordinator].bootstrap
        a = _consumer(bootstrap, "hist-a")
        _poll_until([a], lambda: len(a.assignment()) == 2, "a owns both partitions")
        b = _consumer(bootstrap, "hist-b")
        _poll_until([a, b], lambda: len(a.assignment()) == 1 and len(b.assignment()) == 1, "a and b split")
        b.close()  # LeaveGroup: the third rebalance
        _poll_until([a], lambda: len(a.assignment()) == 2, "a owns both again")
        for offset in (3, 7, 11):
            a.commit({TopicPartition(TOPIC, p): OffsetAndMetadata(offset + p, "", -1) for p in range(2)})
            time.sleep(0.01)  # distinct commit times
        a.close(autocommit=False)

        with AdminClient(bootstrap) as admin:
            history = admin.group_history(GROUP)
            offsets = admin.offset_history(GROUP)
        assert len(history.entries) >= 3, history
        kept = {tp: [(e.offset, e.commit_ms, e.client_id) for e in entries]
                for tp, entries in offsets.partitions.items()}
        assert all(len(v) >= 3 for v in kept.values()) and len(kept) == 2, kept

        nodes[coordinator].kill()
        live = {n: node for n, node in nodes.items() if n != coordinator}
        asked = next(iter(live.values()))
        _, new = wait_for("a new coordinator", lambda: (lambda r: r if r[0] == 0 and r[1] in live else None)(
            find_coordinator(asked, GROUP)), timeout=40, describe=lambda: logs(live))
        with AdminClient(",".join(n.bootstrap for n in live.values())) as admin:
            after = wait_for("the histories on the new coordinator",
                             lambda: (lambda h: h if h.entries else None)(admin.group_history(GROUP)), timeout=30)
            offsets_after = admin.offset_history(GROUP)
        assert [(e.seq, e.generation, e.trigger, e.members_after) for e in after.entries] == \
            [(e.seq, e.generation, e.trigger, e.members_after) for e in history.entries]
        assert {tp: [(e.offset, e.commit_ms, e.client_id) for e in entries]
                for tp, entries in offsets_after.partitions.items()} == kept
    finally:
        stop_nodes(nodes)
