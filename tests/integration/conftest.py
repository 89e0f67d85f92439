"""Fixtures: a real groupcoord daemon per test (or per module) on a free port."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from server_process import ServerProcess


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path / "data", "--group-min-session-timeout-ms", "1000",
                        "--group-initial-rebalance-delay-ms", "0", "--num-partitions", "4").start()
    try:
        yield srv
    finally:
        srv.stop()
