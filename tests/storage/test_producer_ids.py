"""Producer ids are never handed out twice across restarts (coordinator/storage/producer_ids.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.storage.errors import StorageError
from coordinator.storage.producer_ids import BLOCK, FILE, ProducerIds
from coordinator.storage_errors import StartupError


def test_a_fresh_dir_starts_at_the_clock_and_reserves_a_block_before_the_first_id(tmp_path: Path) -> None:
    ids = ProducerIds(str(tmp_path), clock_ms=lambda: 1000)
    assert not (tmp_path / FILE).exists()
    first = ids()
    assert first == 1000 << 8
    assert int((tmp_path / FILE).read_text()) == first + BLOCK
    assert [ids() for _ in range(3)] == [first + 1, first + 2, first + 3]


def test_a_restart_starts_past_every_id_that_may_have_been_handed_out(tmp_path: Path) -> None:
    ids = ProducerIds(str(tmp_path), clock_ms=lambda: 1000)
    handed = [ids() for _ in range(BLOCK + 5)]  # crosses into a second block
    assert len(set(handed)) == len(handed)
    again = ProducerIds(str(tmp_path), clock_ms=lambda: 1)  # a clock that went back changes nothing
    later = [again() for _ in range(10)]
    assert min(later) >= max(handed) + 1
    assert min(later) == (1000 << 8) + 2 * BLOCK


def test_a_file_that_is_not_a_producer_id_stops_the_start(tmp_path: Path) -> None:
    (tmp_path / FILE).write_text("garbage\n")
    with pytest.raises(StartupError, match="does not hold a producer id"):
        ProducerIds(str(tmp_path))


def test_a_failed_reservation_hands_out_no_id_of_that_block(tmp_path: Path) -> None:
    ids = ProducerIds(str(tmp_path / "missing-dir"), clock_ms=lambda: 5)
    with pytest.raises(StorageError):
        ids()
    (tmp_path / "missing-dir").mkdir()
    assert ids() == 5 << 8  # the reservation is retried; nothing was handed out before it
