"""The cleaner of user topics whose cleanup.policy includes compact (Kafka's LogCleaner, one partition at a
time, run off the request path by the runtime).

Rules:
- Sections: the *clean* section is below the first dirty offset (``cleaner-checkpoint`` in the partition
  directory, written atomically after each pass); the *dirty* section runs from there to the first
  uncleanable offset: the active segment's base, or the first closed segment holding a record younger than
  ``min.compaction.lag.ms``. ``dirty_ratio`` = dirty bytes / (clean + dirty bytes).
- A partition is due (``due``) when its dirty ratio reaches ``min.cleanable.dirty.ratio``, when the first
  dirty segment's first batch is older than ``max.compaction.lag.ms``, or when a delete horizon it recorded
  has passed (tombstones to drop).
- Key map: the dirty section's keys, hashed (64-bit), each mapped to its latest offset; at most
  ``buffer_bytes // ENTRY_BYTES`` entries. When it is full the pass stops at that batch: what lies beyond is
  cleaned by the next pass (Kafka's dedupe buffer).
- Every closed segment below the map's end is rewritten: a keyed record is kept if no later offset of its
  key is in the map; a record without a key is dropped (Kafka's cleaner drops them); a tombstone is kept
  until its batch's delete horizon (KIP-534: set to now + ``delete.retention.ms`` when the cleaner first
  keeps it) has passed. Offsets never change; an emptied batch disappears; control batches and batches of a
  codec we cannot decode are kept verbatim.
- Crash safety: each segment is written to ``<base>.log.cleaned``, fsynced, renamed over the segment and the
  directory fsynced (compaction.py's swap); the checkpoint is written last. A crash leaves every segment
  either old or cleaned, and both hold every key's latest record (a record is only dropped when a later one
  of its key is in a segment that is itself kept or cleaned the same way); the next pass starts again.
- Runs under the log's cleaner lock (never with retention); appends go on meanwhile.
- A log being closed (``PartitionLog.closing``: its topic deleted, shutdown) stops the pass at the next batch
  with ``CleaningAborted``, its unfinished ``.cleaned`` file removed, so ``close`` (which takes the cleaner
  lock) waits for one batch, never for the rest of the pass. What was swapped in before stays: each swap is
  whole (crash safety above).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

from protocol.record_batch import (
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    UnsupportedCompressionError,
    decode_batch,
    parse_header,
    rebuild_batch,
)
from protocol.record_reader import key_values

from .compaction import _iter_batches, swap_in_cleaned
from .errors import LogOfflineError, StorageError
from .log import PartitionLog
from .segment import Segment

CHECKPOINT = "cleaner-checkpoint"
ENTRY_BYTES = 128  # what one key map entry costs in this process (dict slot, int key, int offset), measured
_NO_VERIFY = 1 << 63
_WRITE_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class CleanResult:
    segments_rewritten: int
    records_removed: int
    bytes_before: int
    bytes_after: int
    map_entries: int
    end_offset: int  # the next pass's first dirty offset


@dataclass(frozen=True, slots=True)
class CleanerState:
    first_dirty: int
    next_horizon: int  # earliest delete horizon recorded by the last pass; -1: none


def read_state(plog: PartitionLog) -> CleanerState:
    data = plog.fs.read_file(os.path.join(plog.directory, CHECKPOINT))
    try:
        version, first_dirty, horizon = (data or b"").decode("ascii").split()
        if version == "1":
            return CleanerState(int(first_dirty), int(horizon))
    except ValueError:
        pass
    return CleanerState(0, -1)  # none yet, or unreadable: everything is dirty (safe, only slower)


def _write_state(plog: PartitionLog, state: CleanerState) -> None:
    plog.fs.write_atomic(os.path.join(plog.directory, CHECKPOINT),
                         f"1 {state.first_dirty} {state.next_horizon}\n".encode("ascii"))


def _sections(plog: PartitionLog, now_ms: int) -> tuple[list[tuple[Segment, int]], int, int]:
    """(closed cleanable segments with their sizes, index of the first dirty one, first dirty offset)."""
    snapshot = plog._segment_sizes()
    lag = plog.config.min_compaction_lag_ms
    cleanable = []
    for seg, size in snapshot[:-1]:
        if lag > 0 and seg.max_timestamp > now_ms - lag:
            break
        cleanable.append((seg, size))
    first_dirty = max(read_state(plog).first_dirty, plog.log_start_offset)
    idx = next((i for i, (seg, _) in enumerate(cleanable) if seg.next_offset > first_dirty), len(cleanable))
    return cleanable, idx, first_dirty


def dirty_ratio(plog: PartitionLog, now_ms: int) -> float:
    cleanable, idx, _ = _sections(plog, now_ms)
    clean = sum(size for _, size in cleanable[:idx])
    dirty = sum(size for _, size in cleanable[idx:])
    return dirty / (clean + dirty) if dirty else 0.0


def due(plog: PartitionLog, now_ms: int) -> bool:
    """Whether a pass would be worth it now (see the module rules)."""
    cfg = plog.config
    if not cfg.compact or plog.offline:
        return False
    state = read_state(plog)
    if 0 <= state.next_horizon <= now_ms:
        return True
    cleanable, idx, _ = _sections(plog, now_ms)
    if idx >= len(cleanable):
        return False
    if dirty_ratio(plog, now_ms) >= cfg.min_cleanable_dirty_ratio:
        return True
    if cfg.max_compaction_lag_ms is not None:
        seg, size = cleanable[idx]
        head = plog.fs.pread(seg.fd, HEADER_SIZE, 0) if size >= HEADER_SIZE else b""
        if head and now_ms - parse_header(head).base_timestamp > cfg.max_compaction_lag_ms:
            return True
    return False


def clean(plog: PartitionLog, now_ms: int, buffer_bytes: int) -> CleanResult:
    """One cleaning pass over ``plog`` (see the module rules)."""
    with plog._cleaner_lock:
        if plog.offline:
            raise LogOfflineError(f"partition log {plog.directory} is offline")
        cleanable, idx, first_dirty = _sections(plog, now_ms)
        if not cleanable:
            return CleanResult(0, 0, 0, 0, 0, first_dirty)
        latest, end = _build_map(plog, cleanable[idx:], first_dirty, max(1, buffer_bytes // ENTRY_BYTES))
        horizon_at = now_ms + plog.config.delete_retention_ms
        rewritten = removed = before = after = 0
        next_horizon = -1
        for seg, size in cleanable:
            if seg.base_offset >= end:
                break
            fate = _clean_segment(plog, seg, size, latest, now_ms, horizon_at)
            if fate.horizon >= 0:
                next_horizon = fate.horizon if next_horizon < 0 else min(next_horizon, fate.horizon)
            if fate.removed == 0 and not fate.stamped:
                plog.fs.unlink(fate.path)
                continue
            try:
                swap_in_cleaned(plog, seg, fate.path, fate.size)
            except OSError as exc:
                raise plog._go_offline("compaction", exc) from exc
            rewritten += 1
            removed += fate.removed
            before += size
            after += fate.size
        try:
            _write_state(plog, CleanerState(max(end, first_dirty), next_horizon))
        except OSError as exc:
            raise plog._go_offline("cleaner checkpoint", exc) from exc
        return CleanResult(rewritten, removed, before, after, len(latest), end)


class CleaningAborted(StorageError):
    """The log is being closed: the pass stopped at a batch boundary."""


def _batches(plog: PartitionLog, seg: Segment, size: int) -> Iterator[memoryview]:
    """The segment's batches, stopping (``CleaningAborted``) as soon as the log is being closed."""
    for batch in _iter_batches(plog, seg, size):
        if plog.closing:
            raise CleaningAborted(f"{plog.directory} is being closed")
        yield batch


def _build_map(plog: PartitionLog, dirty: list[tuple[Segment, int]], first_dirty: int, capacity: int
               ) -> tuple[dict[int, int], int]:
    """Key hash -> latest offset over the dirty segments, stopping before the batch that would overflow
    ``capacity``; returns the map and the offset where it ends."""
    latest: dict[int, int] = {}
    end = first_dirty
    for seg, size in dirty:
        for batch in _batches(plog, seg, size):
            pairs = _offsets_and_keys(batch)
            if pairs is None:
                end = max(end, parse_header(batch).next_offset)
                continue
            if pairs and pairs[0][0] < first_dirty:  # a pass that stopped inside this segment mapped these
                pairs = [p for p in pairs if p[0] >= first_dirty]
            if len(latest) + len(pairs) > capacity and latest:
                return latest, end
            for offset, key in pairs:
                if key is not None:
                    latest[hash(key)] = offset
            end = max(end, parse_header(batch).next_offset)
        end = max(end, seg.next_offset)
    return latest, end


def _offsets_and_keys(batch: memoryview) -> list[tuple[int, bytes | None]] | None:
    """Each record's (offset, key); None for batches kept verbatim (control, undecodable codec)."""
    header = parse_header(batch)
    if header.is_control:
        return None
    try:
        if header.record_count == header.last_offset_delta + 1:  # no gaps: offsets follow the order
            _, kvs = key_values(batch)
            base = header.base_offset
            return [(base + i, kv[0]) for i, kv in enumerate(kvs)]
        _, records = decode_batch(batch, verify_crc=False)
    except UnsupportedCompressionError:
        return None
    return [(r.offset, r.key) for r in records]


@dataclass(slots=True)
class _Fate:
    path: str
    size: int
    removed: int
    stamped: bool  # a batch gained a delete horizon
    horizon: int  # earliest delete horizon still holding tombstones, -1: none


def _clean_segment(plog: PartitionLog, seg: Segment, size: int, latest: dict[int, int], now_ms: int,
                   horizon_at: int) -> _Fate:
    """Write the cleaned segment to ``<base>.log.cleaned`` (fsynced) and say what changed."""
    fs = plog.fs
    path = seg.log_path + ".cleaned"
    fd = fs.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    fate = _Fate(path, 0, 0, False, -1)
    buf = bytearray()
    aborted = False
    try:
        for batch in _batches(plog, seg, size):
            out = _clean_batch(batch, latest, now_ms, horizon_at, fate)
            if out is not None:
                buf += out
            if len(buf) >= _WRITE_CHUNK:
                fs.write_all(fd, buf)
                fate.size += len(buf)
                buf = bytearray()
        if buf:
            fs.write_all(fd, buf)
            fate.size += len(buf)
        fs.fsync(fd)
    except CleaningAborted:
        aborted = True
        raise
    finally:
        fs.close(fd)
        if aborted:
            fs.unlink(path)
    return fate


def _clean_batch(batch: memoryview, latest: dict[int, int], now_ms: int, horizon_at: int, fate: _Fate
                 ) -> bytes | memoryview | None:
    header = parse_header(batch)
    if header.is_control:
        return batch
    try:
        if header.record_count == header.last_offset_delta + 1:  # fast look first: most batches go or stay whole
            base = header.base_offset
            kvs = key_values(batch)[1]
            get = latest.get
            keep = [k is not None and (v is not None or not header.attributes & DELETE_HORIZON_MASK)
                    and (get(hash(k)) or -1) <= base + i for i, (k, v) in enumerate(kvs)]
            if not any(keep) and all(v is not None for _, v in kvs):
                fate.removed += len(kvs)
                return None
            if all(keep) and all(v is not None for _, v in kvs):
                return batch
        _, records = decode_batch(batch, verify_crc=False)
    except UnsupportedCompressionError:
        return batch
    has_horizon = bool(header.attributes & DELETE_HORIZON_MASK)
    horizon = header.base_timestamp if has_horizon else None
    kept = []
    for r in records:
        if r.key is None:
            continue
        newest = latest.get(hash(r.key))
        if newest is not None and newest > r.offset:
            continue
        if r.value is None and horizon is not None and now_ms >= horizon:
            continue
        kept.append(r)
    fate.removed += len(records) - len(kept)
    if not kept:
        return None
    tombstones = any(r.value is None for r in kept)
    if tombstones:
        if horizon is None:
            horizon = horizon_at
            fate.stamped = True
        fate.horizon = horizon if fate.horizon < 0 else min(fate.horizon, horizon)
    if len(kept) == len(records) and (has_horizon or not tombstones):
        return batch
    return rebuild_batch(header, kept, delete_horizon_ms=horizon if tombstones else None)
