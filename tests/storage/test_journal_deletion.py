"""Deleted logs in the journal: LogManager.delete writes a deletion mark, so a replay settles the deleted
log's entries (one summary line, never a line per entry) and never puts them into a topic re-created under
the same name; entries of logs that are simply not here are summarised in one warning line."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from coordinator.storage.journal import DELETION, JournalEntry, deletion_points, replay
from coordinator.storage.log import PartitionLog
from coordinator.storage.manager import LogManager
from protocol.record_batch import build_batch, decode_batch


def batch(value: bytes) -> bytes:
    return build_batch([(b"k", value, (), 1000)])


def values(plog: PartitionLog) -> list[bytes]:
    buf, out, pos = plog.read(plog.log_start_offset, 1 << 20, upper_bound=plog.log_end_offset), [], 0
    while pos < len(buf):
        size = int.from_bytes(buf[pos + 8:pos + 12], "big") + 12
        out.extend(r.value for r in decode_batch(buf[pos:pos + size])[1])
        pos += size
    return out


def test_entries_before_a_deletion_mark_never_reach_a_recreated_log(tmp_path: Path) -> None:
    recreated = PartitionLog.open(str(tmp_path / "t-0"))
    entries = [JournalEntry("t-0", 0, batch(b"old-0")), JournalEntry("t-0", 1, batch(b"old-1")),
               JournalEntry("t-0", DELETION, b""),
               JournalEntry("t-0", 0, batch(b"new-0"))]
    stats, touched = replay(entries, {"t-0": recreated}.get, deletion_points(entries))
    assert (stats.deleted, stats.appended, stats.skipped) == (2, 1, 0)
    assert touched == [recreated] and values(recreated) == [b"new-0"]
    recreated.close()


def test_without_the_marks_the_old_entries_would_land_in_the_recreated_log(tmp_path: Path) -> None:
    """The hazard the marks close: the same entries, replayed without deletion points."""
    recreated = PartitionLog.open(str(tmp_path / "t-0"))
    entries = [JournalEntry("t-0", 0, batch(b"old-0")), JournalEntry("t-0", 1, batch(b"new-1"))]
    replay(entries, {"t-0": recreated}.get)
    assert values(recreated) == [b"old-0", b"new-1"]
    recreated.close()


def test_a_topic_deleted_and_recreated_comes_back_with_only_its_own_records(tmp_path: Path) -> None:
    data = tmp_path / "data"
    logs = LogManager(str(data))
    journal, _ = logs.open_journal()
    old = logs.create("t", 0)
    for i in range(3):  # journaled as a cluster follower's appends are: the log and the journal
        info = old.append([batch(b"old-%d" % i)])
        journal.append(old.name, info.base_offset, batch(b"old-%d" % i))
    logs.delete("t", 0)
    new = logs.create("t", 0)
    info = new.append([batch(b"new-0")])
    journal.append(new.name, info.base_offset, batch(b"new-0"))
    journal.sync()
    # a crash: the new log's own files never got its record; only the journal has it
    new.truncate_to(0)
    journal.close()
    logs.close()
    again = LogManager(str(data))
    _, stats = again.open_journal()
    assert stats.deleted == 3 and stats.appended == 1
    assert values(again.get("t", 0)) == [b"new-0"]
    again.close()


def test_entries_of_missing_logs_are_summarised_in_one_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    entries = [JournalEntry(f"gone-{p}", n, batch(b"x")) for p in range(8) for n in range(500)]
    with caplog.at_level(logging.INFO, logger="coordinator.storage.journal"):
        stats, _ = replay(entries, {}.get, deletion_points(entries))
    assert stats.skipped == 4000 and stats.missing == {f"gone-{p}": 500 for p in range(8)}
    lines = [r for r in caplog.records if r.name == "coordinator.storage.journal"]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert "4000 entries of 8 logs" in lines[0].getMessage() and "and 3 more logs" in lines[0].getMessage()


def test_entries_of_deleted_logs_are_one_info_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    entries = [JournalEntry("gone-0", n, batch(b"x")) for n in range(1000)] + [JournalEntry("gone-0", DELETION, b"")]
    with caplog.at_level(logging.INFO, logger="coordinator.storage.journal"):
        stats, _ = replay(entries, {}.get, deletion_points(entries))
    assert stats.deleted == 1000 and stats.skipped == 0
    lines = [r for r in caplog.records if r.name == "coordinator.storage.journal"]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO
