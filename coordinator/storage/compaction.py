"""Keyed compaction of a partition log (the offsets partitions: cleanup.policy=compact).

Rules:
- The latest record of each key (over the whole log, the active segment included) is kept; older records
  of the same key are dropped from closed segments; the active segment is never rewritten.
- A tombstone (null value) that is the latest for its key is dropped once its timestamp is older than
  `delete.retention.ms` before `now_ms`. Records without a key are kept.
- Transactions (a conservative rule; user topics get Kafka's LSO, aborted-transaction and marker rules in
  cleaner.py): control batches and transactional batches are kept verbatim and never count as a key's
  latest record (an aborted one must not make an older committed record go), and a tombstone for a key that
  a transactional record holds is kept (dropping it would let that record come back at replay). The cost:
  transactional offset commits and their markers are never compacted away.
- Control batches and batches whose codec we cannot decode are kept verbatim; a batch whose records are
  all kept is copied verbatim; a partially kept batch is rebuilt with the same offsets, timestamps and
  producer fields; an emptied batch disappears.
- A segment is rewritten safely: write `<base>.log.cleaned`, fsync it, remove the old index, rename over
  `<base>.log`, fsync the directory, then write the new index atomically. A crash at any point leaves
  either the old or the new segment; a leftover `.cleaned` file is deleted at open; a missing index is
  rebuilt from the log.
- Compaction and retention never run at the same time (the log's cleaner lock).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

from protocol.record_batch import (
    BatchHeader,
    Record,
    UnsupportedCompressionError,
    decode_batch,
    rebuild_batch,
    split_batches,
)

from .errors import LogOfflineError
from .index import OffsetIndex, encode_index_file
from .log import PartitionLog
from .segment import Segment, scan

_READ_CHUNK = 1 << 20
_NO_VERIFY = 1 << 63


@dataclass(frozen=True, slots=True)
class CompactionResult:
    segments_rewritten: int
    records_removed: int
    bytes_before: int
    bytes_after: int


def compact(plog: PartitionLog, now_ms: int) -> CompactionResult:
    """Compact the closed segments of `plog`; see the module rules."""
    with plog._cleaner_lock:
        if plog.offline:
            raise LogOfflineError(f"partition log {plog.directory} is offline")
        snapshot = plog._segment_sizes()
        if len(snapshot) < 2:
            return CompactionResult(0, 0, 0, 0)
        latest, txn_keys = _latest_offsets(plog, snapshot)
        tombstone_horizon = now_ms - plog.config.delete_retention_ms
        rewritten = removed = before = after = 0
        for seg, size in snapshot[:-1]:
            out, dropped = _cleaned_segment(plog, seg, size, latest, tombstone_horizon, txn_keys)
            if not dropped:
                continue
            try:
                _replace_segment(plog, seg, out)
            except OSError as exc:
                raise plog._go_offline("compaction", exc) from exc
            rewritten += 1
            removed += dropped
            before += size
            after += len(out)
        return CompactionResult(rewritten, removed, before, after)


def _iter_batches(plog: PartitionLog, seg: Segment, size: int) -> Iterator[memoryview]:
    pos = 0
    while pos < size:
        chunk = plog.fs.pread(seg.fd, min(max(_READ_CHUNK, _peek_size(plog, seg, pos)), size - pos), pos)
        batches, end = split_batches(chunk)
        yield from batches
        if end == 0:
            return
        pos += end


def _peek_size(plog: PartitionLog, seg: Segment, pos: int) -> int:
    head = plog.fs.pread(seg.fd, 12, pos)
    return int.from_bytes(head[8:12], "big", signed=True) + 12 if len(head) == 12 else 0


def _decode(batch: memoryview) -> tuple[BatchHeader, list[Record]] | None:
    """Header and records, or None for batches kept verbatim (control, undecodable codec)."""
    try:
        header, records = decode_batch(batch, verify_crc=False)
    except UnsupportedCompressionError:
        return None
    if header.is_control:
        return None
    return header, records


def _latest_offsets(plog: PartitionLog, snapshot: list[tuple[Segment, int]]) -> tuple[dict[bytes, int], set[bytes]]:
    """The offset of each key's latest non-transactional record, and the keys transactional records hold."""
    latest: dict[bytes, int] = {}
    txn_keys: set[bytes] = set()
    for seg, size in snapshot:
        for batch in _iter_batches(plog, seg, size):
            decoded = _decode(batch)
            if decoded is None:
                continue
            if decoded[0].is_transactional:
                txn_keys.update(r.key for r in decoded[1] if r.key is not None)
                continue
            for rec in decoded[1]:
                if rec.key is not None:
                    latest[rec.key] = rec.offset
    return latest, txn_keys


def _cleaned_segment(
    plog: PartitionLog, seg: Segment, size: int, latest: dict[bytes, int], tombstone_horizon: int,
    txn_keys: set[bytes] = frozenset(),  # type: ignore[assignment]
) -> tuple[bytes, int]:
    """The segment's bytes after compaction and the number of records dropped."""
    out = bytearray()
    dropped = 0
    for batch in _iter_batches(plog, seg, size):
        decoded = _decode(batch)
        if decoded is None:
            out += batch
            continue
        header, records = decoded
        if header.is_transactional:
            out += batch
            continue
        kept = [r for r in records if _keep(r, latest, tombstone_horizon) or (r.value is None and r.key in txn_keys)]
        dropped += len(records) - len(kept)
        if len(kept) == len(records):
            out += batch
        elif kept:
            out += rebuild_batch(header, kept)
    return bytes(out), dropped


def _keep(rec: Record, latest: dict[bytes, int], tombstone_horizon: int) -> bool:
    if rec.key is None:
        return True
    if latest.get(rec.key, rec.offset) != rec.offset:
        return False
    return rec.value is not None or rec.timestamp >= tombstone_horizon


def _replace_segment(plog: PartitionLog, seg: Segment, data: bytes) -> None:
    fs = plog.fs
    cleaned = seg.log_path + ".cleaned"
    fd = fs.open(cleaned, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        fs.write_all(fd, data)
        fs.fsync(fd)
    finally:
        fs.close(fd)
    swap_in_cleaned(plog, seg, cleaned, len(data))


def swap_in_cleaned(plog: PartitionLog, seg: Segment, cleaned: str, size: int) -> None:
    """Put the fsynced ``cleaned`` file of ``size`` bytes in ``seg``'s place: drop the old index, rename over
    the segment, fsync the directory, index the new file (atomically) and swap it into the log."""
    fs = plog.fs
    try:
        fs.unlink(seg.index_path)
    except FileNotFoundError:
        pass
    fs.rename(cleaned, seg.log_path)
    fs.fsync_dir(plog.directory)
    new_fd = fs.open(seg.log_path, os.O_RDWR)
    index = OffsetIndex(plog.config.index_interval_bytes)
    res = scan(fs, new_fd, 0, size, seg.base_offset, _NO_VERIFY, index)
    new = Segment(seg.base_offset, plog.directory, new_fd, index, res.valid_end, res.next_offset,
                  res.max_timestamp)
    fs.write_atomic(new.index_path, encode_index_file(index, new.summary()))
    plog._swap_segment(seg, new)
