"""Sparse offset index of one segment: (batch base offset -> byte position), an entry every N bytes.

Rules:
- Entries are strictly increasing in both offset and position; lookups are binary searches for the last
  entry with offset <= target (position 0 if none), from which a reader scans forward.
- In memory the index is two parallel lists. On disk (`<base>.index`) it is written only for closed
  segments, atomically, together with a summary of the segment it describes (valid bytes, next offset,
  max timestamp) and a CRC; a file that fails any check is ignored and the index is rebuilt from the log.
"""

from __future__ import annotations

import bisect
import struct
import sys
from array import array
from dataclasses import dataclass, field

import crc32c

_FILE_HEADER = struct.Struct(">4sHqqqI")  # magic, version, valid_bytes, next_offset, max_timestamp, count
_CRC = struct.Struct(">I")
_MAGIC = b"GCIX"
_VERSION = 1
_LITTLE_ENDIAN = sys.byteorder == "little"


@dataclass(slots=True)
class OffsetIndex:
    interval_bytes: int
    offsets: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)

    def maybe_add(self, offset: int, position: int) -> None:
        """Add an entry if the batch at `position` is at least `interval_bytes` past the last entry."""
        last = self.positions[-1] if self.positions else 0
        if position - last >= self.interval_bytes:
            self.offsets.append(offset)
            self.positions.append(position)

    def lookup(self, offset: int) -> int:
        """Byte position from which to scan for `offset`."""
        i = bisect.bisect_right(self.offsets, offset)
        return self.positions[i - 1] if i else 0

    def truncate_to(self, position: int) -> None:
        """Drop entries at or beyond `position` (the log was truncated there)."""
        i = bisect.bisect_left(self.positions, position)
        del self.offsets[i:], self.positions[i:]

    def __len__(self) -> int:
        return len(self.offsets)


@dataclass(frozen=True, slots=True)
class IndexSummary:
    valid_bytes: int
    next_offset: int
    max_timestamp: int


def encode_index_file(index: OffsetIndex, summary: IndexSummary) -> bytes:
    pairs = array("q")
    for off, pos in zip(index.offsets, index.positions):
        pairs.append(off)
        pairs.append(pos)
    if pairs.itemsize != 8:  # pragma: no cover - every CPython platform has 8-byte "q"
        raise RuntimeError("array('q') is not 64-bit")
    if _LITTLE_ENDIAN:
        pairs.byteswap()
    body = _FILE_HEADER.pack(
        _MAGIC, _VERSION, summary.valid_bytes, summary.next_offset, summary.max_timestamp, len(index)
    ) + pairs.tobytes()
    return body + _CRC.pack(crc32c.crc32c(body))


def decode_index_file(data: bytes, interval_bytes: int) -> tuple[OffsetIndex, IndexSummary] | None:
    """Parse an index file; None if it is malformed in any way (the caller rebuilds from the log)."""
    if len(data) < _FILE_HEADER.size + _CRC.size:
        return None
    body, (crc,) = data[:-4], _CRC.unpack_from(data, len(data) - 4)
    if crc32c.crc32c(body) != crc:
        return None
    magic, version, valid_bytes, next_offset, max_ts, count = _FILE_HEADER.unpack_from(body)
    if magic != _MAGIC or version != _VERSION or len(body) != _FILE_HEADER.size + 16 * count:
        return None
    pairs = array("q")
    pairs.frombytes(body[_FILE_HEADER.size:])
    if _LITTLE_ENDIAN:
        pairs.byteswap()
    index = OffsetIndex(interval_bytes, list(pairs[0::2]), list(pairs[1::2]))
    ordered = all(a < b for a, b in zip(index.offsets, index.offsets[1:])) and all(
        a < b for a, b in zip(index.positions, index.positions[1:])
    )
    if not ordered or (index.positions and index.positions[-1] >= valid_bytes):
        return None
    return index, IndexSummary(valid_bytes, next_offset, max_ts)
