"""kafkajs 2.2.4 end to end (never flexible versions; RoundRobinAssigner only; Fetch waits 5000 ms): admin
CreateTopics, a gzip producer, and a group of three node consumers of which one is SIGKILLed mid-way.

kafkajs is installed into tests/compat/js/node_modules from the pinned package.json when missing."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from compat_support import PARTITIONS, Member, assert_scenario, run_group_scenario
from server_process import ServerProcess  # type: ignore[import-not-found]

JS = Path(__file__).with_name("js")


def _node() -> str:
    node, npm = shutil.which("node"), shutil.which("npm")
    assert node and npm, "node and npm must be installed"
    if not (JS / "node_modules" / "kafkajs" / "package.json").exists():
        # CKJS_LINKING=dynamic: the project also holds @confluentinc/kafka-javascript (test_kip848_js_clients), whose
        # addon is built from its bundled librdkafka when its prebuilt binary cannot be downloaded (Makefile)
        done = subprocess.run([npm, "install", "--no-audit", "--no-fund"], cwd=JS, capture_output=True, check=False,
                              text=True, timeout=900, env=dict(os.environ, CKJS_LINKING="dynamic"))
        assert done.returncode == 0, done.stderr
    return node


def _run(node: str, script: str, *args: str) -> str:
    done = subprocess.run([node, script, *args], cwd=JS, capture_output=True, text=True, check=False, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.compat
def test_kafkajs_group_survives_a_killed_member(server: ServerProcess) -> None:
    node = _node()
    topic, group = "kj-topic", "kj-group"
    assert _run(node, "create_topic.js", server.bootstrap, topic, str(PARTITIONS)).strip() == "created"

    def produce(lo: int, hi: int) -> None:
        assert _run(node, "produce.js", server.bootstrap, topic, str(lo), str(hi)).strip() == f"acked {hi - lo}"

    members = [Member(f"kafkajs-{i}", [node, "consumer.js", server.bootstrap, topic, group], cwd=str(JS))
               for i in range(3)]
    out = run_group_scenario(server.port, topic, group, produce, members, server.log)
    assert_scenario(out)
