"""Cluster metrics against a real 3-node cluster (real ZooKeeper, real `groupcoord serve` processes), scraped
over HTTP and linted with ``promtool check metrics``; and their absence in single-node mode.

A SIGKILLed node makes the partitions it replicated under-replicated on their leaders, shrinks counted, and a
replication-factor-1 partition it led offline on the controller; `groupcoord cluster describe` lists the same
partitions. Restarted, it catches up: under-replicated and offline back to 0 everywhere, expands counted.
Every wait is bounded.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from cluster_nodes import REPO, logs, offsets_partitions, start_node, start_nodes, stop_nodes, wait_for
from server_process import ServerProcess
from test_cluster_membership import formed
from test_cluster_user_topics import agreed_topic, create_topic

SOLO = "solo"  # replication factor 1: its partition on a dead node is offline

CLUSTER_SERIES = ("groupcoord_under_replicated_partitions", "groupcoord_offline_partitions",
                  "groupcoord_active_controllers", "groupcoord_isr_shrinks_total", "groupcoord_isr_expands_total",
                  "groupcoord_leader_elections_total", "groupcoord_controller_changes_total")


def values(text: str, name: str) -> list[tuple[str, float]]:
    """(labels, value) of every sample of ``name`` in exposition ``text``."""
    out = []
    for line in text.splitlines():
        m = re.match(rf"^{name}(\{{[^}}]*\}})? (\S+)$", line)
        if m:
            out.append((m.group(1) or "", float(m.group(2))))
    return out


def value(node: ServerProcess, name: str) -> float:
    samples = values(node.scrape(), name)
    assert len(samples) == 1, f"{name}: {samples}"
    return samples[0][1]


def total(nodes: dict[int, ServerProcess], name: str) -> float:
    return sum(value(n, name) for n in nodes.values())


def promtool_ok(text: str) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool must be installed (Debian package prometheus; make test installs it)"
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr


def describe(node: ServerProcess) -> tuple[str, list[list[str]]]:
    """`groupcoord cluster describe` through ``node``: its first line and the unhealthy-partition rows."""
    out = subprocess.run([sys.executable, "-m", "coordinator.cli", "cluster", "describe", "-b", node.bootstrap],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    rows: list[list[str]] = []
    if "" in lines:  # the partitions table follows an empty line, under its header
        rows = [ln.split() for ln in lines[lines.index("") + 2:]]
    return lines[0], rows


def test_single_node_exports_no_cluster_series(tmp_path: Path) -> None:
    node = ServerProcess(tmp_path / "single").start()
    try:
        text = node.scrape()
        promtool_ok(text)
        assert "groupcoord_requests_total" in text  # the scrape is a real one
        for name in (*CLUSTER_SERIES, "groupcoord_replication_lag_messages"):
            assert name not in text, name
    finally:
        node.stop()


def test_kill_and_restart_show_under_replicated_shrinks_and_expands(tmp_path: Path, zk_connect: str) -> None:
    nodes = start_nodes(tmp_path, zk_connect, [1, 2, 3])
    try:
        mds = formed(nodes)
        parts = offsets_partitions(mds[1])
        assert create_topic(nodes[1], SOLO, 3, 1)["error_code"] == 0
        solo = agreed_topic(nodes, SOLO)
        wait_for("every ISR full", lambda: total(nodes, "groupcoord_under_replicated_partitions") == 0 or None,
                 describe=lambda: logs(nodes))
        for n in nodes.values():
            text = n.scrape()
            promtool_ok(text)
            for name in CLUSTER_SERIES:
                assert len(values(text, name)) == 1, name
        assert total(nodes, "groupcoord_active_controllers") == 1
        assert total(nodes, "groupcoord_offline_partitions") == 0
        assert total(nodes, "groupcoord_leader_elections_total") >= 50  # every offsets partition's first leader
        # lag: one series per (led partition, follower), labels bounded by what each node leads
        for i, n in nodes.items():
            lag = values(n.scrape(), "groupcoord_replication_lag_messages")
            led = [p for p, e in offsets_partitions(mds[1]).items() if e["leader_id"] == i]
            assert len([s for s in lag if 'topic="__consumer_offsets"' in s[0]]) == 2 * len(led), (i, lag)
            assert all(f'follower="{i}"' not in labels for labels, _ in lag)

        victim = 3
        survivors = {i: n for i, n in nodes.items() if i != victim}
        shrinks_before = total(survivors, "groupcoord_isr_shrinks_total")
        elections_before = total(survivors, "groupcoord_leader_elections_total")
        nodes[victim].kill()
        # every offsets partition has node 3 as a replica (RF 3 on 3 nodes): once the controller drops it from
        # the ISRs, the two survivors lead all 50, each under-replicated
        wait_for("50 under-replicated partitions on the survivors",
                 lambda: total(survivors, "groupcoord_under_replicated_partitions") == len(parts) or None,
                 timeout=30, describe=lambda: logs(nodes))
        led_by_victim = [p for p, e in parts.items() if e["leader_id"] == victim]
        # a shrink is counted by a partition's leader: those the survivors led already lost node 3 from their
        # ISR (those node 3 led get new leaders whose ISR starts without it, as in Kafka)
        assert total(survivors, "groupcoord_isr_shrinks_total") - shrinks_before >= len(parts) - len(led_by_victim)
        solo_on_victim = sorted(p for p, e in solo.items() if e["leader_id"] == victim)
        assert solo_on_victim, solo  # 3 partitions spread over 3 nodes
        wait_for("the offline count on the controller", lambda: total(survivors, "groupcoord_offline_partitions")
                 == len(solo_on_victim) or None, timeout=10)
        assert total(survivors, "groupcoord_active_controllers") == 1
        first, rows = describe(nodes[1])
        assert f"UNDER-REPLICATED {len(parts)}  OFFLINE {len(solo_on_victim)}" in first, first
        assert sorted(int(r[1]) for r in rows if r[0] == SOLO and r[2] == "OFFLINE") == solo_on_victim, rows
        under = [r for r in rows if r[0] == "__consumer_offsets"]
        assert sorted(int(r[1]) for r in under) == sorted(parts) and {r[2] for r in under} == {"UNDER-REPLICATED"}
        assert all("3" not in r[5].split(",") and "3" in r[4].split(",") for r in under), under
        if led_by_victim:  # its leaderships were moved by the controller: elections counted
            wait_for("elections counted", lambda: total(survivors, "groupcoord_leader_elections_total")
                     - elections_before >= len(led_by_victim) or None, timeout=10)
        # the dead follower's lag series stay (the leader still tracks it as a replica)
        assert any('follower="3"' in labels for n in survivors.values()
                   for labels, _ in values(n.scrape(), "groupcoord_replication_lag_messages"))

        expands_before = total(survivors, "groupcoord_isr_expands_total")
        nodes[victim] = start_node(tmp_path, zk_connect, victim)
        wait_for("no under-replicated partition", lambda: total(nodes, "groupcoord_under_replicated_partitions")
                 == 0 or None, timeout=60, interval=0.5, describe=lambda: logs(nodes))
        assert total(survivors, "groupcoord_isr_expands_total") - expands_before >= len(parts)
        assert total(nodes, "groupcoord_active_controllers") == 1
        wait_for("nothing offline", lambda: total(nodes, "groupcoord_offline_partitions") == 0 or None, timeout=10)
        first, rows = describe(nodes[2])
        assert "UNDER-REPLICATED 0  OFFLINE 0" in first and rows == [], (first, rows)
        for n in nodes.values():
            promtool_ok(n.scrape())
    finally:
        stop_nodes(nodes)
