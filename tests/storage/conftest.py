"""Fixtures shared by the storage tests: ``child``, a real fsync child process, closed afterwards."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from coordinator.storage.fsync_process import FsyncProcess


@pytest.fixture
def child() -> Iterator[FsyncProcess]:
    proc = FsyncProcess.start()
    try:
        yield proc
    finally:
        proc.close()
