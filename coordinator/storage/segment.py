"""One segment of a partition log: `<base offset, 20 digits>.log` plus its sparse `.index`.

Rules:
- A segment holds whole v2 record batches back to back; `size` is the number of valid bytes, and
  `next_offset` is one past the last offset stored (`base_offset` when empty).
- Batches in a segment have increasing offsets; the first batch's base offset is >= the segment's base.
- `scan` is the recovery loop: it walks batches from a position, checks framing always and the CRC for
  batches whose last offset is >= `verify_from`, rebuilds the index, and stops at the first bad or partial
  batch, reporting why. It reads in large chunks so 1M small batches take about a second.
- Segments are mutated only by their `PartitionLog` (appends at `size`, truncation at recovery and by
  `truncate_to`); every truncation in place bumps `truncations` first, so a file range made earlier
  (file_range.py) can tell its bytes may have changed.
- `locate_batches` walks batch headers only (base offset, length, lastOffsetDelta): it reads a small chunk
  where batches are large (one header is all it needs of each) and grows the chunk while batches are small,
  so finding a 1 MB batch does not read that megabyte; `read_batches_from` is `locate_batches` plus one
  pread of the range found.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

import crc32c

from protocol.record_batch import HEADER, HEADER_SIZE, LOG_OVERHEAD, MAGIC, MIN_BATCH_LENGTH

from .fs import FileSystem
from .index import IndexSummary, OffsetIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
SCAN_CHUNK = 4 * 1024 * 1024
LOCATE_CHUNK = 8192  # first read of a header walk (and again after a batch larger than the chunk)
_HEAD = struct.Struct(">qi11xi")  # baseOffset, batchLength, lastOffsetDelta (bytes 0-26 of a header)


def segment_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}{LOG_SUFFIX}"


def index_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}{INDEX_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    stem, dot, ext = name.partition(".")
    if dot and "." + ext == LOG_SUFFIX and len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


@dataclass(slots=True)
class Segment:
    base_offset: int
    directory: str
    fd: int
    index: OffsetIndex
    size: int = 0
    next_offset: int = -1
    max_timestamp: int = -1
    dirty: bool = False  # bytes written since the last fsync
    truncations: int = 0  # truncations in place so far (file ranges made before one are no longer valid)

    def __post_init__(self) -> None:
        if self.next_offset < 0:
            self.next_offset = self.base_offset

    @property
    def log_path(self) -> str:
        return os.path.join(self.directory, segment_file_name(self.base_offset))

    @property
    def index_path(self) -> str:
        return os.path.join(self.directory, index_file_name(self.base_offset))

    def summary(self) -> IndexSummary:
        return IndexSummary(self.size, self.next_offset, self.max_timestamp)


@dataclass(slots=True)
class ScanResult:
    valid_end: int
    next_offset: int
    max_timestamp: int
    batches: int = 0
    verified: int = 0
    error: str | None = None
    index: OffsetIndex = field(default_factory=lambda: OffsetIndex(4096))


def scan(
    fs: FileSystem, fd: int, start: int, end: int, next_offset: int, verify_from: int,
    index: OffsetIndex, max_timestamp: int = -1,
) -> ScanResult:
    """Walk batches in [start, end) of an open segment file; see the module rules."""
    unpack_from = HEADER.unpack_from
    crc_of = crc32c.crc32c
    offsets, positions = index.offsets, index.positions
    interval = index.interval_bytes
    last_indexed = positions[-1] if positions else 0
    batches = verified = 0
    pos = start
    error = None
    want = SCAN_CHUNK
    while pos < end and error is None:
        chunk = fs.pread(fd, min(want, end - pos), pos)
        view = memoryview(chunk)
        clen = len(chunk)
        p = 0
        need = 0
        while clen - p >= HEADER_SIZE:
            base, length, _, magic, crc, _, lod, _, max_ts, _, _, _, _ = unpack_from(chunk, p)
            if magic != MAGIC or length < MIN_BATCH_LENGTH or lod < 0:
                error = f"bad batch header at byte {pos + p} (magic {magic}, length {length})"
                break
            size = length + LOG_OVERHEAD
            if p + size > clen:
                need = size
                break
            if base < next_offset:
                error = f"batch at byte {pos + p} has base offset {base} < expected {next_offset}"
                break
            if base + lod >= verify_from:
                if crc_of(view[p + 21:p + size]) != crc:
                    error = f"CRC mismatch in batch at byte {pos + p} (offset {base})"
                    break
                verified += 1
            if pos + p - last_indexed >= interval:
                offsets.append(base)
                positions.append(pos + p)
                last_indexed = pos + p
            max_timestamp = max(max_timestamp, max_ts)
            next_offset = base + lod + 1
            batches += 1
            p += size
        view.release()
        want = SCAN_CHUNK
        if error is None and p == 0:
            if clen < HEADER_SIZE or pos + need > end:  # the file ends inside this batch
                error = f"partial batch at byte {pos} ({end - pos} bytes left)"
            want = max(SCAN_CHUNK, need)  # one batch larger than a chunk: read it whole
            continue
        pos += p
    return ScanResult(pos, next_offset, max_timestamp, batches, verified, error, index)


@dataclass(frozen=True, slots=True)
class BatchLocation:
    position: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int


def iter_batches(fs: FileSystem, seg: Segment, start: int, chunk: int = 65536) -> Iterator[BatchLocation]:
    """Headers of the batches of `seg` from byte `start` to its valid end (framing already validated)."""
    pos = start
    end = seg.size
    while pos < end:
        data = fs.pread(seg.fd, min(chunk, end - pos), pos)
        p = 0
        while len(data) - p >= HEADER_SIZE:
            base, length, _, _, _, _, lod, _, max_ts, _, _, _, _ = HEADER.unpack_from(data, p)
            size = length + LOG_OVERHEAD
            yield BatchLocation(pos + p, size, base, base + lod, max_ts)
            p += size
        if p == 0:  # fewer than a header's bytes left: the segment's valid end was reached
            return
        pos += p


def locate_batches(
    fs: FileSystem, seg: Segment, offset: int, max_bytes: int, upper: int
) -> tuple[int, int] | None:
    """(start, stop) byte positions of whole batches starting at the batch that contains `offset` (or the
    first batch after it), holding at least one batch, at most `max_bytes` otherwise, none whose base offset
    is >= `upper`; None when there is no such batch.

    Walks headers only, from the index position: a chunk of LOCATE_CHUNK bytes first; a chunk whose batches
    all ended inside it (small batches) makes the next one 4x larger, up to max(64 KiB, max_bytes capped at
    16 MiB); a batch that ran past the chunk's end (a large batch) starts the next read at the batch after
    it, LOCATE_CHUNK bytes again."""
    start = stop = -1
    pos = seg.index.lookup(offset)
    end = seg.size
    cap = max(65536, min(max_bytes, 16 << 20))
    want = LOCATE_CHUNK
    head_size = _HEAD.size
    unpack_from = _HEAD.unpack_from
    while pos < end:
        data = fs.pread(seg.fd, min(want, end - pos), pos)
        n = len(data)
        p = 0
        while n - p >= head_size:
            base, length, lod = unpack_from(data, p)
            size = length + LOG_OVERHEAD
            if start < 0:
                if base + lod >= offset:
                    if base >= upper:
                        return None
                    start, stop = pos + p, pos + p + size
            elif base >= upper or pos + p + size - start > max_bytes:
                return start, stop
            else:
                stop = pos + p + size
            p += size
        if p == 0:
            break
        want = LOCATE_CHUNK if p > n else min(want * 4, cap)
        pos += p
    if start < 0:
        return None
    return start, stop


def read_batches_from(
    fs: FileSystem, seg: Segment, offset: int, max_bytes: int, upper: int
) -> bytes:
    """The bytes of ``locate_batches``' range, read with one pread (b"" when there is none)."""
    found = locate_batches(fs, seg, offset, max_bytes, upper)
    if found is None:
        return b""
    start, stop = found
    return fs.pread(seg.fd, stop - start, start)
