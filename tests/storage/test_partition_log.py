"""PartitionLog: offsets, reads across rolls, index, flush/high watermark, crash recovery, faults."""

from __future__ import annotations

import errno
import logging
import os
import threading

import pytest

from coordinator.storage.errors import LogOfflineError, OffsetOutOfRangeError
from coordinator.storage.fs import FileSystem
from coordinator.storage.index import IndexSummary, OffsetIndex, decode_index_file, encode_index_file
from coordinator.storage.log import LogConfig, PartitionLog
from protocol.record_batch import (
    build_batch,
    build_kv_batch,
    iter_records,
    parse_header,
    split_batches,
    validate_batch,
)

SMALL = LogConfig(segment_bytes=600, index_interval_bytes=150)


def batch(n: int = 1, ts: int = 1_000, tag: bytes = b"v") -> bytes:
    return build_batch([(b"k%d" % i, tag + b"%d" % i, [], ts + i) for i in range(n)])


def offsets_in(data: bytes) -> list[int]:
    return [r.offset for r in iter_records(data)]


def segment_file(path, base=0) -> str:
    return os.path.join(path, f"{base:020d}.log")


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "orders-0")


def test_append_assigns_consecutive_offsets_and_rewrites_base_offsets(path):
    plog = PartitionLog.open(path, SMALL)
    assert plog.append([batch(3)]) == (0, 2)
    assert plog.append([batch(1), batch(2)]) == (3, 5)
    assert plog.log_end_offset == 6 and plog.high_watermark == 0  # nothing fsynced yet
    assert plog.flush() == 6 and plog.high_watermark == 6
    stored, _ = split_batches(plog.read(0, 10_000))
    assert [validate_batch(b).base_offset for b in stored] == [0, 3, 4]  # CRCs still valid


def test_append_own_writes_exactly_what_append_writes(tmp_path):
    """The group commit's unchecked append of its own batches: same offsets, same bytes, same rolls."""
    checked = PartitionLog.open(str(tmp_path / "a-0"), SMALL)
    own = PartitionLog.open(str(tmp_path / "b-0"), SMALL)
    for n in (1, 3, 2, 5, 1, 4):  # crosses several 600-byte segments
        pairs = [(b"key-%d" % i, b"value-%d" % i) for i in range(n)]
        built = build_kv_batch(pairs, 5_000 + n)
        assert own.append_own(built, n, 5_000 + n) == checked.append([built])
    assert own.log_end_offset == checked.log_end_offset == 16
    assert own.read(0, 100_000, upper_bound=16) == checked.read(0, 100_000, upper_bound=16)
    assert sorted(os.listdir(tmp_path / "b-0")) == sorted(os.listdir(tmp_path / "a-0"))
    own.close()
    checked.close()
    again = PartitionLog.open(str(tmp_path / "b-0"), SMALL)  # and it recovers as a valid log
    assert again.log_end_offset == 16
    seen: list[int] = []
    while len(seen) < 16:  # a read stops at its segment's end
        seen += offsets_in(again.read(len(seen), 100_000, upper_bound=16))
    assert seen == list(range(16))


def test_append_can_stamp_the_partition_leader_epoch_outside_the_crc(path):
    plog = PartitionLog.open(path, SMALL)
    plog.append([batch(2)], leader_epoch=7)
    stored = plog.read(0, 1000, upper_bound=2)
    assert validate_batch(stored).partition_leader_epoch == 7


def test_leftovers_of_an_interrupted_compaction_or_checkpoint_are_removed_at_open(path):
    plog = PartitionLog.open(path, SMALL)
    plog.append([batch(3)])
    plog.close()
    for leftover in ("00000000000000000000.log.cleaned", "recovery-point.tmp"):
        with open(os.path.join(path, leftover), "wb") as f:
            f.write(b"half-written")
    again = PartitionLog.open(path, SMALL)
    assert sorted(os.listdir(path)) == ["00000000000000000000.index", "00000000000000000000.log", "recovery-point"]
    assert offsets_in(again.read(0, 1000)) == [0, 1, 2]


class AtomicWrites(FileSystem):
    """Records every atomic file write (path, bytes)."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, bytes]] = []

    def write_atomic(self, path: str, data: bytes) -> None:
        self.writes.append((os.path.basename(path), data))
        super().write_atomic(path, data)


def test_periodic_checkpoint_writes_only_when_the_recovery_point_or_log_start_moved(path):
    """The server checkpoints every log every minute; an unchanged one costs no create+fsync+rename+fsync."""
    fs = AtomicWrites()
    plog = PartitionLog.open(path, SMALL, fs)
    assert fs.writes == [("recovery-point", b"1 0 0\n")]  # a new log writes its first one at open
    plog.checkpoint()
    plog.checkpoint()
    assert len(fs.writes) == 1  # nothing moved
    plog.append([batch(3)])
    plog.checkpoint()
    assert len(fs.writes) == 1  # appended, not flushed: the recovery point is where it was
    plog.flush()
    plog.checkpoint()
    plog.checkpoint()
    assert fs.writes[1:] == [("recovery-point", b"1 3 0\n")]
    plog.close()
    with open(os.path.join(path, "recovery-point"), "rb") as f:
        assert f.read() == b"1 3 0\n"
    reopened = PartitionLog.open(path, SMALL, fs)  # opening writes its own (the file may predate this process)
    assert fs.writes[-1] == ("recovery-point", b"1 3 0\n")
    count = len(fs.writes)
    reopened.checkpoint()
    assert len(fs.writes) == count
    assert offsets_in(reopened.read(0, 1000)) == [0, 1, 2]


def test_reads_at_every_offset_across_segment_rolls(path):
    plog = PartitionLog.open(path, SMALL)
    for i in range(40):
        plog.append([batch(1 + i % 3)])
    end = plog.flush()
    bases = plog.segment_base_offsets()
    assert len(bases) > 3 and bases[0] == 0
    assert sorted(os.listdir(path)) == sorted(
        [f"{b:020d}.log" for b in bases] + [f"{b:020d}.index" for b in bases[:-1]] + ["recovery-point"]
    )
    for offset in range(end):
        data = plog.read(offset, 1)  # max_bytes=1: still one whole batch
        (only,), _ = split_batches(data)
        header = parse_header(only)
        assert header.base_offset <= offset <= header.last_offset
    assert plog.read(end, 100) == b""


def test_read_returns_several_batches_up_to_max_bytes_within_a_segment(path):
    plog = PartitionLog.open(path, LogConfig(index_interval_bytes=150))
    sizes = [len(batch(2)) for _ in range(5)]
    for _ in range(5):
        plog.append([batch(2)])
    plog.flush()
    assert offsets_in(plog.read(2, sizes[0] * 3)) == [2, 3, 4, 5, 6, 7]
    assert offsets_in(plog.read(3, sizes[0] * 3 - 1)) == [2, 3, 4, 5]  # batch holding 3 starts at 2


def test_readers_see_only_durable_data_unless_they_ask_for_more(path):
    plog = PartitionLog.open(path, SMALL)
    plog.append([batch(2)])
    assert plog.read(0, 1000) == b""
    assert offsets_in(plog.read(0, 1000, upper_bound=plog.log_end_offset)) == [0, 1]
    plog.flush()
    assert offsets_in(plog.read(0, 1000)) == [0, 1]
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(3, 1000)


def test_sparse_index_lookup_is_a_floor_search():
    index = OffsetIndex(100)
    for offset, position in [(0, 0), (5, 60), (9, 120), (14, 230), (20, 290)]:
        index.maybe_add(offset, position)
    assert (index.offsets, index.positions) == ([9, 14], [120, 230])  # entries >= 100 bytes apart
    assert [index.lookup(o) for o in (0, 8, 9, 13, 14, 10**9)] == [0, 0, 120, 120, 230, 230]
    summary = IndexSummary(400, 25, 77)
    assert decode_index_file(encode_index_file(index, summary), 100) == (index, summary)
    damaged = bytearray(encode_index_file(index, summary))
    damaged[10] ^= 1
    assert decode_index_file(bytes(damaged), 100) is None


def test_segment_index_points_at_batch_starts(path):
    plog = PartitionLog.open(path, LogConfig(index_interval_bytes=150))
    for _ in range(30):
        plog.append([batch(1)])
    seg = plog._segments[-1]
    assert len(seg.index) >= 5
    with open(segment_file(path), "rb") as f:
        data = f.read()
    for offset, position in zip(seg.index.offsets, seg.index.positions):
        assert parse_header(data, position).base_offset == offset


def test_reopen_after_clean_close_keeps_everything(path):
    plog = PartitionLog.open(path, SMALL)
    for i in range(25):
        plog.append([batch(2, tag=b"x%d-" % i)])
    plog.flush()
    before = [plog.read(o, 1) for o in range(0, 50, 7)]
    plog.close()
    again = PartitionLog.open(path, SMALL)
    assert (again.log_end_offset, again.high_watermark) == (50, 50)
    assert [again.read(o, 1) for o in range(0, 50, 7)] == before
    assert again.append([batch(1)]) == (50, 50)


def test_an_index_written_at_close_goes_stale_after_later_appends_and_is_not_trusted(path):
    plog = PartitionLog.open(path, SMALL)
    plog.append([batch(2)])
    plog.close()  # writes the active segment's index with its summary (size, next offset 2)
    again = PartitionLog.open(path, SMALL)
    again.append([batch(3)])
    again.flush()  # then the process dies: no close, the index file still says "next offset 2"
    assert PartitionLog.open(path, SMALL).log_end_offset == 5


def _crash_then_reopen(path, damage, caplog):
    """Write 10 one-record batches without a clean close, damage the only segment, reopen."""
    plog = PartitionLog.open(path, LogConfig())
    for i in range(10):
        plog.append([batch(1, tag=b"r%d-" % i)])
    plog.flush()  # no checkpoint written after open: the whole segment is re-validated
    size = os.path.getsize(segment_file(path))
    with open(segment_file(path), "r+b") as f:
        damage(f, size, len(batch(1, tag=b"r0-")))
    with caplog.at_level(logging.WARNING, logger="coordinator.storage.log"):
        return PartitionLog.open(path, LogConfig())


def test_torn_tail_mid_batch_is_truncated_and_appends_continue(path, caplog):
    reopened = _crash_then_reopen(path, lambda f, size, one: f.truncate(size - one // 2), caplog)
    assert reopened.log_end_offset == 9
    assert "partial batch" in caplog.text and "offsets >= 9 dropped" in caplog.text
    assert reopened.append([batch(1)]) == (9, 9)
    reopened.flush()
    assert offsets_in(reopened.read(0, 10**6)) == list(range(10))


def test_flipped_byte_in_crc_region_truncates_from_that_batch(path, caplog):
    def flip(f, size, one):
        f.seek(3 * one + 30)  # inside the 4th batch's CRC'd region
        byte = f.read(1)
        f.seek(3 * one + 30)
        f.write(bytes([byte[0] ^ 0x40]))

    reopened = _crash_then_reopen(path, flip, caplog)
    assert reopened.log_end_offset == 3 and "CRC mismatch" in caplog.text
    assert os.path.getsize(segment_file(path)) == 3 * len(batch(1, tag=b"r0-"))
    assert reopened.append([batch(2)]) == (3, 4)


def test_garbage_after_the_last_batch_is_dropped(path, caplog):
    def garbage(f, size, one):
        f.seek(size)
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x09\xff\xff\xff\xff" + os.urandom(100))

    reopened = _crash_then_reopen(path, garbage, caplog)
    assert reopened.log_end_offset == 10 and "truncating 112 bytes" in caplog.text
    assert reopened.append([batch(1)]) == (10, 10)


def test_corruption_in_a_closed_segment_deletes_the_later_segments(path, caplog):
    plog = PartitionLog.open(path, SMALL)
    for _ in range(30):
        plog.append([batch(1)])
    plog.flush()
    bases = plog.segment_base_offsets()
    os.unlink(os.path.join(path, "recovery-point"))  # as if the checkpoint was never written
    with open(segment_file(path, bases[1]), "r+b") as f:
        f.seek(40)
        f.write(b"\xde\xad")
    with caplog.at_level(logging.WARNING, logger="coordinator.storage.log"):
        reopened = PartitionLog.open(path, SMALL)
    assert reopened.segment_base_offsets() == bases[:2]
    assert reopened.log_end_offset == bases[1]
    assert f"deleting {len(bases) - 2} later segment(s)" in caplog.text


class FaultyFS(FileSystem):
    """Real filesystem that raises EIO on the chosen operation once armed."""

    def __init__(self) -> None:
        self.fail_fsync = False
        self.fail_write = False
        self.fsync_calls = 0

    def fsync(self, fd: int) -> None:
        self.fsync_calls += 1
        if self.fail_fsync:
            raise OSError(errno.EIO, "Input/output error")
        super().fsync(fd)

    def pwrite(self, fd, data, offset):
        if self.fail_write:
            raise OSError(errno.EIO, "Input/output error")
        return super().pwrite(fd, data, offset)


def test_fsync_error_takes_the_partition_offline_and_nothing_is_acknowledged(path):
    fs = FaultyFS()
    plog = PartitionLog.open(path, SMALL, fs)
    plog.append([batch(1)])
    assert plog.flush() == 1
    plog.append([batch(2)])
    fs.fail_fsync = True
    calls = fs.fsync_calls
    with pytest.raises(LogOfflineError, match="fsync failed"):
        plog.flush()
    assert plog.high_watermark == 1 and plog.offline
    with pytest.raises(LogOfflineError):
        plog.append([batch(1)])
    fs.fail_fsync = False
    with pytest.raises(LogOfflineError):
        plog.flush()  # never retried, even though fsync would work now
    assert fs.fsync_calls == calls + 1
    assert offsets_in(plog.read(0, 10**6)) == [0]


def test_write_error_takes_the_partition_offline(path):
    fs = FaultyFS()
    plog = PartitionLog.open(path, SMALL, fs)
    fs.fail_write = True
    with pytest.raises(LogOfflineError, match="write failed"):
        plog.append([batch(1)])
    assert plog.log_end_offset == 0
    fs.fail_write = False
    with pytest.raises(LogOfflineError):
        plog.append([batch(1)])


def test_append_own_write_error_takes_the_partition_offline(path):
    fs = FaultyFS()
    plog = PartitionLog.open(path, SMALL, fs)
    assert plog.append_own(build_kv_batch([(b"k", b"v")], 1), 1, 1) == (0, 0)
    fs.fail_write = True
    with pytest.raises(LogOfflineError, match="write failed"):
        plog.append_own(build_kv_batch([(b"k", b"w")], 2), 1, 2)
    assert plog.log_end_offset == 1 and plog.offline
    fs.fail_write = False
    with pytest.raises(LogOfflineError):
        plog.append_own(build_kv_batch([(b"k", b"x")], 3), 1, 3)


class ShortWrites(FileSystem):
    """Real filesystem whose positional writes take at most 7 bytes at a time (as a full disk might)."""

    def pwrite(self, fd, data, offset):
        return super().pwrite(fd, memoryview(data)[:7], offset)


def test_append_own_completes_short_writes(tmp_path):
    own = PartitionLog.open(str(tmp_path / "short-0"), SMALL, ShortWrites())
    checked = PartitionLog.open(str(tmp_path / "whole-0"), SMALL)
    for n in (2, 1, 3):
        built = build_kv_batch([(b"key-%d" % i, b"value-%d" % i) for i in range(n)], 9_000)
        assert own.append_own(built, n, 9_000) == checked.append([built])
    assert own.read(0, 100_000, upper_bound=6) == checked.read(0, 100_000, upper_bound=6)
    own.close()
    checked.close()


def test_one_appender_and_one_flusher_thread(path):
    plog = PartitionLog.open(path, LogConfig(segment_bytes=20_000))
    stop = threading.Event()
    durable: list[int] = []

    def flusher():
        while not stop.is_set():
            durable.append(plog.flush())

    thread = threading.Thread(target=flusher)
    thread.start()
    results = [plog.append([batch(2)]) for _ in range(500)]
    stop.set()
    thread.join()
    assert results == [(2 * i, 2 * i + 1) for i in range(500)]
    assert durable == sorted(durable) and plog.flush() == 1000
    seen = []
    offset = 0
    while offset < 1000:
        chunk = offsets_in(plog.read(offset, 50_000))
        seen += chunk
        offset = chunk[-1] + 1
    assert seen == list(range(1000))


def test_recovery_scan_handles_batches_larger_than_its_read_chunk(path, monkeypatch, caplog):
    from coordinator.storage import segment

    plog = PartitionLog.open(path, LogConfig())
    sizes = [plog.append([batch(n)]) for n in (1, 9, 2, 9, 1)]
    plog.flush()  # no clean close: reopen re-validates with CRCs
    with open(segment_file(path), "ab") as f:
        f.write(batch(9)[:-3])  # a torn last batch
    monkeypatch.setattr(segment, "SCAN_CHUNK", 100)  # every 9-record batch (160 bytes) exceeds a chunk
    assert len(batch(9)) > 100 > len(batch(1))
    with caplog.at_level(logging.WARNING, logger="coordinator.storage.log"):
        reopened = PartitionLog.open(path, LogConfig())
    assert reopened.log_end_offset == sizes[-1].last_offset + 1 == 22
    assert "partial batch" in caplog.text
    assert offsets_in(reopened.read(0, 10**6)) == list(range(22))
