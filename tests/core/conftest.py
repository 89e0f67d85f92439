"""tests/core: make the shared harness module (core_harness.py) importable and offer it as a fixture."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from core_harness import Harness


@pytest.fixture
def h() -> Harness:
    return Harness()
