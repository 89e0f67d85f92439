"""Cluster-mode startup errors are clear and bounded; single-node mode never loads kazoo."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cluster_nodes import REPO, SESSION_TIMEOUT_MS, start_node, stop_nodes, wait_for
from zookeeper_process import free_port


def test_unreachable_zookeeper_is_a_clear_startup_error(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    proc = subprocess.run(
        [sys.executable, "-m", "coordinator.cli", "serve", "--port", "0", "--metrics-port", "-1", "--data-dir",
         str(tmp_path / "data"), "--zookeeper-connect", f"127.0.0.1:{port}/gc",
         "--zookeeper-session-timeout-ms", "2000"],
        cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "groupcoord listening" not in proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    assert "zookeeper.connect=127.0.0.1:" in last and "cannot connect to ZooKeeper" in last, proc.stderr


def test_a_second_node_with_the_same_id_is_refused(tmp_path: Path, zk_connect: str) -> None:
    first = start_node(tmp_path, zk_connect, 5)
    try:
        wait_for("node 5 registered", lambda: "registered as broker 5" in first.log(), describe=first.log)
        dup = subprocess.run(
            [sys.executable, "-m", "coordinator.cli", "serve", "--port", "0", "--metrics-port", "-1",
             "--data-dir", str(tmp_path / "dup"), "--zookeeper-connect", zk_connect, "--node-id", "5",
             "--zookeeper-session-timeout-ms", str(SESSION_TIMEOUT_MS)],
            cwd=REPO, capture_output=True, text=True, timeout=60)
        assert dup.returncode == 2, dup.stdout + dup.stderr
        assert "node.id 5 is already registered" in dup.stderr.strip().splitlines()[-1], dup.stderr
    finally:
        stop_nodes({5: first})


def test_single_node_mode_does_not_import_kazoo() -> None:
    code = ("import sys, coordinator.cli, coordinator.runtime.server, coordinator.runtime.broker; "
            "print(sorted(m for m in sys.modules if m.startswith(('kazoo', 'coordinator.cluster'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
