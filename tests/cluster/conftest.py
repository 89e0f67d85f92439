"""Fixtures: one real ZooKeeper for the cluster tests' session, and a fresh chroot for each test."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from zookeeper_process import ZooKeeperProcess


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperProcess]:
    zk = ZooKeeperProcess(tmp_path_factory.mktemp("zookeeper")).start()
    try:
        yield zk
    finally:
        zk.stop()


@pytest.fixture
def zk_connect(zookeeper: ZooKeeperProcess) -> str:
    """``127.0.0.1:PORT/<unique chroot>``: each test sees an empty cluster."""
    return f"{zookeeper.connect}/gc-{uuid.uuid4().hex[:12]}"
