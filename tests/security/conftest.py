"""Fixtures: one secured groupcoord (four listeners, SCRAM users, a throwaway CA) per test module."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from security_support import Pki, start_secured  # noqa: E402
from server_process import ServerProcess  # noqa: E402


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Pki]]:
    server, pki = start_secured(tmp_path_factory.mktemp("secured"))
    try:
        yield server, pki
    finally:
        server.stop()
