"""Fixtures for the compatibility suite: a real groupcoord daemon per test, configured as the real clients'
own test suites expect (4 partitions for auto-created topics, 1 s minimum session timeout), with a short
initial rebalance delay (Kafka's default is 3 s) so the three members form their first generation together:
fewer back-to-back rebalances, which kafka-python 3.0.12 sometimes mishandles (see compat_consumer_worker)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "integration"))

from server_process import ServerProcess


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path / "data", "--group-min-session-timeout-ms", "1000",
                        "--group-initial-rebalance-delay-ms", "1500", "--num-partitions", "4").start()
    try:
        yield srv
    finally:
        alive = srv.alive()
        status = srv.stop()
        # shown by pytest only when the test failed
        print(f"--- server (alive at teardown: {alive}, exit status {status}) ---\n{srv.log()[-200000:]}")
