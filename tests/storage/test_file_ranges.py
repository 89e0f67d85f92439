"""File ranges of a partition log (coordinator/storage/file_range.py, ``PartitionLog.read_range``): the bytes a
range names are exactly the bytes ``read`` returns, for every offset, limit and bound; the header walk that
finds them (``locate_batches``, which reads small chunks where batches are large) finds what the old
whole-chunk walk found; a range stays readable after retention deletes its segment, the cleaner renames
over it or the log closes; a truncation in place invalidates it; out of descriptors, the log reads bytes
instead; a range's descriptor is released by ``close`` (and when it is collected)."""

from __future__ import annotations

import errno
import os
import random
import struct
from pathlib import Path

import pytest

from coordinator.storage.file_range import FileRange, RangeShrunk
from coordinator.storage.fs import FileSystem
from coordinator.storage.log import LogConfig, PartitionLog
from coordinator.storage.segment import Segment, locate_batches, read_batches_from
from protocol.record_batch import LOG_OVERHEAD, build_batch

_HEAD = struct.Struct(">qi11xi")


def batch(i: int, records: int, size: int) -> bytes:
    return build_batch([(b"k%d" % i, bytes([i % 251]) * size, [], 1_700_000_000_000 + i) for _ in range(records)])


def fill(plog: PartitionLog, rng: random.Random, n: int) -> None:
    """``n`` appends of mixed batches: many small ones, some of 100-300 KiB (larger than a walk's chunk)."""
    for i in range(n):
        if rng.random() < 0.15:
            plog.append([batch(i, rng.randint(1, 3), rng.randint(100_000, 300_000))])
        else:
            plog.append([batch(i, rng.randint(1, 20), rng.randint(10, 400))])
    plog.flush()


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def old_read_batches_from(fs: FileSystem, seg: Segment, offset: int, max_bytes: int, upper: int) -> bytes:
    """The walk as it was before file ranges (whole chunks of up to max_bytes): the reference."""
    start = stop = -1
    pos = seg.index.lookup(offset)
    end = seg.size
    chunk_size = max(65536, min(max_bytes, 16 << 20))
    while pos < end:
        data = fs.pread(seg.fd, min(chunk_size, end - pos), pos)
        n = len(data)
        p = 0
        while n - p >= _HEAD.size:
            base, length, lod = _HEAD.unpack_from(data, p)
            size = length + LOG_OVERHEAD
            if start < 0:
                if base + lod >= offset:
                    if base >= upper:
                        return b""
                    start, stop = pos + p, pos + p + size
            elif base >= upper or pos + p + size - start > max_bytes:
                return fs.pread(seg.fd, stop - start, start)
            else:
                stop = pos + p + size
            p += size
        if p == 0:
            break
        pos += p
    if start < 0:
        return b""
    return fs.pread(seg.fd, stop - start, start)


@pytest.fixture
def plog(tmp_path: Path):  # type: ignore[no-untyped-def]
    log = PartitionLog.open(str(tmp_path / "t-0"), LogConfig(segment_bytes=2 << 20, retention_ms=None))
    try:
        yield log
    finally:
        log.close()


def test_ranges_hold_exactly_the_bytes_read_returns(plog: PartitionLog) -> None:
    rng = random.Random(35)
    fill(plog, rng, 400)
    end = plog.high_watermark
    assert len(plog.segment_base_offsets()) > 3  # ranges from several segments
    before = open_fds()
    checked = ranges = 0
    for _ in range(600):
        offset = rng.randint(plog.log_start_offset, end)
        limit = rng.choice([1, 100, 5_000, 70_000, 1 << 20, 5 << 20])
        upper = rng.choice([None, rng.randint(offset, end)])
        want = plog.read(offset, limit, upper_bound=upper)
        got = plog.read_range(offset, limit, upper_bound=upper, min_range=0)
        if not want:
            assert got == b""
            continue
        assert isinstance(got, FileRange) and len(got) == len(want)
        assert got.read() == want
        got.close()
        got.close()  # idempotent
        ranges += 1
        small = plog.read_range(offset, limit, upper_bound=upper, min_range=len(want) + 1)
        assert type(small) is bytes and small == want  # below min_range: bytes, as read gives them
        checked += 1
    assert ranges > 400 and checked == ranges
    assert open_fds() == before  # every dup released


def test_the_header_walk_finds_what_the_whole_chunk_walk_found(plog: PartitionLog) -> None:
    rng = random.Random(6)
    fill(plog, rng, 300)
    fs = plog.fs
    for seg in plog._segments:
        for _ in range(150):
            offset = rng.randint(seg.base_offset, seg.next_offset)
            limit = rng.choice([1, 1000, 65_536, 200_000, 1 << 20])
            upper = rng.choice([seg.next_offset, rng.randint(offset, seg.next_offset)])
            want = old_read_batches_from(fs, seg, offset, limit, upper)
            assert read_batches_from(fs, seg, offset, limit, upper) == want
            found = locate_batches(fs, seg, offset, limit, upper)
            assert (found is None) == (want == b"")


def test_the_walk_reads_only_headers_of_large_batches(plog: PartitionLog) -> None:
    for i in range(8):
        plog.append([batch(i, 1, 900_000)])
    plog.flush()

    class Counting(FileSystem):
        read = 0

        def pread(self, fd: int, size: int, offset: int) -> bytes:
            Counting.read += size
            return super().pread(fd, size, offset)

    seg = plog._segments[0]
    found = locate_batches(Counting(), seg, 0, 1 << 20, seg.next_offset)
    assert found is not None and found[0] == 0
    assert Counting.read <= 2 * 8192  # two small header reads, not a megabyte


def test_a_range_outlives_retention_the_cleaners_rename_and_close(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=300_000, retention_bytes=1, retention_ms=None)
    plog = PartitionLog.open(str(tmp_path / "r-0"), cfg)
    for i in range(6):
        plog.append([batch(i, 2, 100_000)])
    plog.flush()
    first = plog.segment_base_offsets()[0]
    want = plog.read(0, 1 << 20)
    rng = plog.read_range(0, 1 << 20)
    assert isinstance(rng, FileRange)
    assert plog.apply_retention(0)  # deletes the segment the range is in
    assert not (tmp_path / "r-0" / f"{first:020d}.log").exists()
    assert rng.valid() and rng.read() == want

    # the cleaner's swap: another file renamed over a segment, the old descriptor closed
    seg = plog._segments[0]
    want2 = plog.read(seg.base_offset, 1 << 20)
    rng2 = plog.read_range(seg.base_offset, 1 << 20)
    assert isinstance(rng2, FileRange)
    other = tmp_path / "r-0" / "other.cleaned"
    other.write_bytes(b"\0" * 64)
    os.replace(other, seg.log_path)
    plog.fs.close(seg.fd)
    seg.fd = os.open(seg.log_path, os.O_RDWR)
    assert rng2.read() == want2
    plog.close()
    assert rng.read() == want and rng2.read() == want2  # the log's own descriptors are all closed
    rng.close()
    rng2.close()


def test_a_truncation_in_place_invalidates_earlier_ranges(plog: PartitionLog) -> None:
    for i in range(5):
        plog.append([batch(i, 1, 50_000)])
    plog.flush()
    rng = plog.read_range(3, 1 << 20)
    assert isinstance(rng, FileRange) and rng.valid()
    plog.truncate_to(2)
    assert not rng.valid()
    with pytest.raises(RangeShrunk):
        rng.read()
    rng.close()
    after = plog.read_range(1, 1 << 20)  # a range made after the cut is valid
    assert isinstance(after, FileRange) and after.valid()
    after.close()


def test_a_file_shorter_than_its_range_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 1000)
    fd = os.open(path, os.O_RDWR)
    rng = FileRange(os.dup(fd), 100, 800)
    os.ftruncate(fd, 500)
    with pytest.raises(RangeShrunk):
        rng.read()
    rng.close()
    os.close(fd)


def test_out_of_descriptors_the_log_reads_bytes(tmp_path: Path) -> None:
    class NoDup(FileSystem):
        def dup(self, fd: int) -> int:
            raise OSError(errno.EMFILE, "Too many open files")

    plog = PartitionLog.open(str(tmp_path / "n-0"), LogConfig(), NoDup())
    try:
        plog.append([batch(1, 3, 70_000)])
        plog.flush()
        got = plog.read_range(0, 1 << 20)
        assert type(got) is bytes and got == plog.read(0, 1 << 20)
    finally:
        plog.close()


def test_a_dropped_range_releases_its_descriptor(plog: PartitionLog) -> None:
    plog.append([batch(1, 1, 70_000)])
    plog.flush()
    before = open_fds()
    rng = plog.read_range(0, 1 << 20)
    assert open_fds() == before + 1
    del rng  # never closed: collected
    assert open_fds() == before
