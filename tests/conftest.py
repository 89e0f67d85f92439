"""Fixtures for every test: the librdkafka guard (see rdkafka_guard.py) is on for each test."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import rdkafka_guard


@pytest.fixture(autouse=True)
def librdkafka_guard(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Fails the test when any confluent-kafka client it made logged a protocol parse failure."""
    lines: list[str] = []
    try:
        rdkafka_guard.install(monkeypatch, lines)
    except ImportError:  # confluent-kafka is a test dependency; without it no test can make such a client
        yield lines
        return
    yield lines
    assert not lines, "librdkafka could not parse our answers:\n" + "\n".join(lines[:20])
