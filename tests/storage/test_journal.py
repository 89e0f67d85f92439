"""The shared journal: entries survive a reopen in order, a damaged tail is ignored (never fatal), replay
re-appends exactly what a log lacks, checkpoints drop old files, and an fsync error takes it offline."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from coordinator.storage.fs import FileSystem
from coordinator.storage.journal import (
    MAX_ENTRY,
    Journal,
    JournalEntry,
    JournalOfflineError,
    encode_entry,
    file_name,
    replay,
)
from coordinator.storage.log import PartitionLog
from protocol.record_batch import build_batch, decode_batch


def batch(*values: bytes) -> bytes:
    return build_batch([(b"k", v, (), 1000) for v in values])


def fresh(directory: Path, fs: FileSystem | None = None) -> Journal:
    j = Journal.open(str(directory), fs)
    assert list(j.recovered()) == []
    j.reset()
    return j


def test_entries_come_back_in_order_after_reopen(tmp_path: Path) -> None:
    j = fresh(tmp_path / "j")
    b1, b2, b3 = batch(b"one"), batch(b"two", b"three"), batch(b"four")
    p1 = j.append("__consumer_offsets-3", 0, b1)
    p2 = j.append("__consumer_offsets-9", 0, b2)
    p3 = j.append("__consumer_offsets-3", 1, b3)
    assert 0 < p1 < p2 < p3 == j.end
    assert j.sync() == p3
    j.close()
    again = Journal.open(str(tmp_path / "j"))
    assert list(again.recovered()) == [JournalEntry("__consumer_offsets-3", 0, b1),
                                       JournalEntry("__consumer_offsets-9", 0, b2),
                                       JournalEntry("__consumer_offsets-3", 1, b3)]
    again.reset()  # replayed: everything goes, a fresh empty file takes appends
    files = os.listdir(tmp_path / "j")
    assert files == [file_name(2)]
    again.close()
    assert list(Journal.open(str(tmp_path / "j")).recovered()) == []


@pytest.mark.parametrize("damage", ["cut-mid-entry", "flip-byte", "huge-length"])
def test_a_damaged_tail_ends_the_file_there(tmp_path: Path, damage: str) -> None:
    j = fresh(tmp_path / "j")
    good = [batch(b"a"), batch(b"b")]
    for i, b in enumerate(good):
        j.append("t-0", i, b)
    last = j.append("t-0", 2, batch(b"c"))
    j.sync()
    j.close()
    path = tmp_path / "j" / file_name(1)
    raw = bytearray(path.read_bytes())
    last_len = len(encode_entry("t-0", 2, batch(b"c")))
    assert len(raw) == 8 + last
    if damage == "cut-mid-entry":
        del raw[-5:]
    elif damage == "flip-byte":
        raw[-2] ^= 0x40
    else:  # the size field of the last entry claims more than any entry may hold: nothing is allocated
        start = len(raw) - last_len
        raw[start:start + 4] = (MAX_ENTRY + 1).to_bytes(4, "big")
    path.write_bytes(bytes(raw))
    got = list(Journal.open(str(tmp_path / "j")).recovered())
    assert [(e.base_offset, e.batch) for e in got] == [(0, good[0]), (1, good[1])]


def test_replay_appends_what_a_log_lacks_and_skips_the_rest(tmp_path: Path) -> None:
    full = PartitionLog.open(str(tmp_path / "t-0"))
    short = PartitionLog.open(str(tmp_path / "t-1"))
    b0, b1, b2 = batch(b"x0"), batch(b"x1", b"x1b"), batch(b"x2")
    for b in (b0, b1, b2):
        full.append([b])
    short.append([b0])  # lost b1 and b2 (as if its page cache never reached the disk)
    entries = [JournalEntry("t-0", 0, b0), JournalEntry("t-1", 0, b0),
               JournalEntry("t-0", 1, b1), JournalEntry("t-1", 1, b1),
               JournalEntry("t-0", 3, b2), JournalEntry("t-1", 3, b2),
               JournalEntry("t-1", 9, batch(b"gap")),           # beyond the end: never invented
               JournalEntry("gone-0", 0, b0)]                   # no such log
    logs = {"t-0": full, "t-1": short}
    stats, touched = replay(entries, logs.get)
    assert (stats.entries, stats.appended, stats.present, stats.skipped) == (8, 2, 4, 2)
    assert touched == [short]
    assert short.log_end_offset == full.log_end_offset == 4
    short.flush()  # the caller fsyncs what replay touched; reads see durable data
    values = [r.value for r in decode_batch_all(short.read(0, 1 << 20))]
    assert values == [b"x0", b"x1", b"x1b", b"x2"]
    full.close()
    short.close()


def decode_batch_all(buf: bytes) -> list:
    out, pos = [], 0
    while pos < len(buf):
        size = int.from_bytes(buf[pos + 8:pos + 12], "big") + 12
        out.extend(decode_batch(buf[pos:pos + size])[1])
        pos += size
    return out


def test_checkpoint_files_switch_and_old_ones_are_dropped(tmp_path: Path) -> None:
    j = fresh(tmp_path / "j")
    j.append("t-0", 0, batch(b"old"))
    new = j.prepare_file()
    assert j.switch_to(new) == 2
    j.append("t-0", 1, batch(b"new"))
    assert j.current_seq == 2 and j.current_size > 8
    j.sync()  # both files hold unsynced bytes: both are fsynced
    assert sorted(os.listdir(tmp_path / "j")) == [file_name(1), file_name(2)]
    j.drop_before(2)
    assert os.listdir(tmp_path / "j") == [file_name(2)]
    j.close()
    assert [e.base_offset for e in Journal.open(str(tmp_path / "j")).recovered()] == [1]


class FailingFsync(FileSystem):
    def __init__(self) -> None:
        self.fail = False

    def fsync(self, fd: int) -> None:
        if self.fail:
            raise OSError(errno.EIO, "Input/output error")
        super().fsync(fd)


def test_an_fsync_error_takes_the_journal_offline_for_good(tmp_path: Path) -> None:
    fs = FailingFsync()
    j = fresh(tmp_path / "j", fs)
    j.append("t-0", 0, batch(b"a"))
    fs.fail = True
    with pytest.raises(JournalOfflineError):
        j.sync()
    fs.fail = False  # never retried, even if the disk recovers
    assert j.offline
    with pytest.raises(JournalOfflineError):
        j.append("t-0", 1, batch(b"b"))
    with pytest.raises(JournalOfflineError):
        j.sync()


def test_plans_out_at_once_end_in_order_and_none_succeeds_after_a_failure(tmp_path: Path) -> None:
    j = fresh(tmp_path / "j", FileSystem())
    j.append("t-0", 0, batch(b"a"))
    first = j.begin_sync(lambda fds, key: None)
    end = j.append("t-0", 1, batch(b"b"))
    second = j.begin_sync(lambda fds, key: None)  # sent while the first fsync is under way
    assert second.target == end > first.target
    assert j.end_sync(first, None) == first.target
    end = j.append("t-0", 2, batch(b"c"))
    third = j.begin_sync(lambda fds, key: None)
    with pytest.raises(JournalOfflineError):
        j.end_sync(second, OSError(errno.EIO, "Input/output error"))
    with pytest.raises(JournalOfflineError):  # its fsync returned 0 after the failed one: that proves nothing
        j.end_sync(third, None)


class CountingWrites(FileSystem):
    def __init__(self) -> None:
        self.pwrites = 0

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> int:
        self.pwrites += 1
        return super().pwrite(fd, data, offset)


def test_append_many_writes_entries_in_order_with_one_write(tmp_path: Path) -> None:
    fs = CountingWrites()
    j = fresh(tmp_path / "j", fs)
    b1, b2, b3 = batch(b"one"), batch(b"two", b"three"), batch(b"four")
    single = j.append("__consumer_offsets-1", 0, b1)
    before = fs.pwrites
    end = j.append_many([("__consumer_offsets-3", 0, b2), ("__consumer_offsets-9", 4, b3)])
    assert fs.pwrites == before + 1
    assert end == j.end == single + len(encode_entry("__consumer_offsets-3", 0, b2)) + len(
        encode_entry("__consumer_offsets-9", 4, b3))
    j.sync()
    j.close()
    assert list(Journal.open(str(tmp_path / "j")).recovered()) == [
        JournalEntry("__consumer_offsets-1", 0, b1), JournalEntry("__consumer_offsets-3", 0, b2),
        JournalEntry("__consumer_offsets-9", 4, b3)]
