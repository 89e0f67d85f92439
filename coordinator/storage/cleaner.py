"""The cleaner of user topics whose cleanup.policy includes compact (Kafka's LogCleaner, one partition at a
time, run off the request path by the runtime), transactions included.

Rules:
- Sections: the *clean* section is below the first dirty offset (``cleaner-checkpoint`` in the partition
  directory, written atomically after each pass); the *dirty* section runs from there to the first
  uncleanable offset: the active segment's base, the first closed segment holding a record younger than
  ``min.compaction.lag.ms``, or the first segment not wholly below the upper bound (the partition's last
  stable offset, LSO: nothing at or after it is ever cleaned, so every transaction the cleaner sees is
  decided). ``dirty_ratio`` = dirty bytes / (clean + dirty bytes).
- A partition is due (``due``) when its dirty ratio reaches ``min.cleanable.dirty.ratio``, when the first
  dirty segment's first batch is older than ``max.compaction.lag.ms``, or when a delete horizon it recorded
  has passed (tombstones or markers to drop).
- Transactions (``Transactions``): the upper bound, the aborted transactions (producer id, first offset,
  marker offset: that producer's transactional data batches in that range are aborted) and the live producer
  ids. The runtime gives them from the partition's ``ProducerStates``; without them a pass rebuilds them from
  the log (``scan_transactions``, the same replay as a restart), so a pass is a pure function of the log and
  its arguments. A snapshot stays valid as the log grows: what was decided below an LSO stays decided.
- Key map: the dirty section's keys, hashed (64-bit), each mapped to its latest offset; records of aborted
  transactions are never mapped (an aborted record never makes an older committed one go); at most
  ``buffer_bytes // ENTRY_BYTES`` entries. When it is full the pass stops at that batch: what lies beyond is
  cleaned by the next pass (Kafka's dedupe buffer).
- Every closed segment below the map's end is rewritten (batches at or past the map's end are copied
  verbatim): a keyed record is kept if no later offset of its key is in the map; a record without a key is
  dropped (Kafka's cleaner drops them); a record of an aborted transaction is dropped whatever its key; a
  tombstone is kept until its batch's delete horizon (KIP-534: set to now + ``delete.retention.ms`` when the
  cleaner first keeps it) has passed. Offsets never change: a partly kept batch keeps its base offset and
  last offset delta (so its sequence range), as Kafka's ``filterTo`` does; an emptied batch disappears,
  except the last batch of each live producer id, kept as an empty batch (header only) so sequence and epoch
  continuity survive a rebuild of the producer state (``isBatchLastRecordOfProducer``; when a producer's last
  entry is a marker of a newer epoch than its last data batch, that marker is kept whole instead). "Last" is
  taken within the segments of the pass, so a later batch beyond them only makes the pass keep one more.
- Markers (COMMIT/ABORT control batches) are kept while a batch of their transaction is still in the
  (cleaned) log; once none is, the marker gets a delete horizon like a tombstone (now +
  ``delete.retention.ms``) and goes in the first pass after it. Control batches without a marker record
  (emptied) go the same way; other control batches and batches of a codec we cannot decode are kept verbatim.
- Crash safety: each segment is written to ``<base>.log.cleaned``, fsynced, renamed over the segment and the
  directory fsynced (compaction.py's swap); the checkpoint is written last. A crash leaves every segment
  either old or cleaned, and both hold every key's latest record (a record is only dropped when a later one
  of its key is in a segment that is itself kept or cleaned the same way); segments are swapped in offset
  order and a marker only goes when the cleaned output before it holds no batch of its transaction, so a
  marker never goes before its data. The next pass starts again.
- Runs under the log's cleaner lock (never with retention); appends go on meanwhile.
- A log being closed (``PartitionLog.closing``: its topic deleted, shutdown) stops the pass at the next batch
  with ``CleaningAborted``, its unfinished ``.cleaned`` file removed, so ``close`` (which takes the cleaner
  lock) waits for one batch, never for the rest of the pass. What was swapped in before stays: each swap is
  whole (crash safety above).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from protocol.control_batch import parse_marker
from protocol.record_batch import (
    CODEC_MASK,
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    CorruptBatchError,
    Record,
    UnsupportedCompressionError,
    _compress,
    _seal,
    decode_batch,
    encode_record,
    parse_header,
)
from protocol.record_reader import key_values

from .compaction import _iter_batches, swap_in_cleaned
from .errors import LogOfflineError, StorageError
from .log import PartitionLog
from .producer_state import ProducerStates, scan_producer_states
from .segment import Segment
from .txn_index import AbortedTxn

CHECKPOINT = "cleaner-checkpoint"
ENTRY_BYTES = 128  # what one key map entry costs in this process (dict slot, int key, int offset), measured
_NO_VERIFY = 1 << 63
_WRITE_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class Transactions:
    """What a pass must know of the partition's transactions (see the module rules)."""

    last_stable_offset: int  # the upper bound: nothing at or after it is cleaned
    aborted: Sequence[AbortedTxn] = ()  # (producer id, first offset, marker offset, _) of aborted transactions
    live_producers: Collection[int] | None = None  # None: every producer id in the log is live


def transactions_of(states: ProducerStates, high_watermark: int, log_start_offset: int = 0) -> Transactions:
    """The pass's view of ``states`` (call it where ``states`` lives: it reads its LSO at ``high_watermark``,
    the one readers are bounded by)."""
    lso = states.last_stable_offset(high_watermark)
    aborted = tuple(t for t in states.aborted_transactions()
                    if t.last_offset >= log_start_offset and t.first_offset < lso)
    return Transactions(lso, aborted, frozenset(p.producer_id for p in states.producers()))


def scan_transactions(plog: PartitionLog) -> Transactions:
    """``Transactions`` rebuilt from the log alone (the replay a restart does); every producer id is live."""
    states = ProducerStates()
    scan_producer_states(plog, states)
    view = transactions_of(states, plog.high_watermark, plog.log_start_offset)
    return Transactions(view.last_stable_offset, view.aborted, None)


@dataclass(frozen=True, slots=True)
class CleanResult:
    segments_rewritten: int
    records_removed: int
    bytes_before: int
    bytes_after: int
    map_entries: int
    end_offset: int  # the next pass's first dirty offset
    first_dirty: int = 0  # this pass's first dirty offset (end_offset == first_dirty and nothing rewritten: idle)
    upper_bound: int = -1  # the LSO the pass stopped at
    markers_removed: int = 0
    empty_batches: int = 0  # batches kept empty (a live producer's last batch)


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


def _sections(plog: PartitionLog, now_ms: int, upper_bound: int | None = None
              ) -> tuple[list[tuple[Segment, int]], int, int]:
    """(closed cleanable segments with their sizes, index of the first dirty one, first dirty offset)."""
    snapshot = plog._segment_sizes()
    lag = plog.config.min_compaction_lag_ms
    cleanable = []
    for seg, size in snapshot[:-1]:
        if lag > 0 and seg.max_timestamp > now_ms - lag:
            break
        if upper_bound is not None and seg.next_offset > upper_bound:
            break
        cleanable.append((seg, size))
    first_dirty = max(read_state(plog).first_dirty, plog.log_start_offset)
    idx = next((i for i, (seg, _) in enumerate(cleanable) if seg.next_offset > first_dirty), len(cleanable))
    return cleanable, idx, first_dirty


def dirty_ratio(plog: PartitionLog, now_ms: int, upper_bound: int | None = None) -> float:
    """Dirty bytes over cleanable bytes; ``upper_bound``: the LSO (None: not known, no bound)."""
    cleanable, idx, _ = _sections(plog, now_ms, upper_bound)
    clean = sum(size for _, size in cleanable[:idx])
    dirty = sum(size for _, size in cleanable[idx:])
    return dirty / (clean + dirty) if dirty else 0.0


def due(plog: PartitionLog, now_ms: int, upper_bound: int | None = None) -> bool:
    """Whether a pass would be worth it now (see the module rules); ``upper_bound`` as for ``dirty_ratio``."""
    cfg = plog.config
    if not cfg.compact or plog.offline:
        return False
    state = read_state(plog)
    if 0 <= state.next_horizon <= now_ms:
        return True
    cleanable, idx, _ = _sections(plog, now_ms, upper_bound)
    if idx >= len(cleanable):
        return False
    if dirty_ratio(plog, now_ms, upper_bound) >= cfg.min_cleanable_dirty_ratio:
        return True
    if cfg.max_compaction_lag_ms is not None:
        seg, size = cleanable[idx]
        head = plog.fs.pread(seg.fd, HEADER_SIZE, 0) if size >= HEADER_SIZE else b""
        if head and now_ms - parse_header(head).base_timestamp > cfg.max_compaction_lag_ms:
            return True
    return False


def clean(plog: PartitionLog, now_ms: int, buffer_bytes: int, txns: Transactions | None = None) -> CleanResult:
    """One cleaning pass over ``plog`` (see the module rules); ``txns`` None: rebuilt from the log."""
    with plog._cleaner_lock:
        if plog.offline:
            raise LogOfflineError(f"partition log {plog.directory} is offline")
        if txns is None:
            txns = scan_transactions(plog)
        upper = txns.last_stable_offset
        cleanable, idx, first_dirty = _sections(plog, now_ms, upper)
        if not cleanable:
            return CleanResult(0, 0, 0, 0, 0, first_dirty, first_dirty, upper)
        latest, end = _build_map(plog, cleanable[idx:], first_dirty, max(1, buffer_bytes // ENTRY_BYTES),
                                 _Aborted(txns.aborted))
        segments = [(seg, size) for seg, size in cleanable if seg.base_offset < end]
        walk = _Walk(latest, end, now_ms, now_ms + plog.config.delete_retention_ms, _Aborted(txns.aborted),
                     _last_batches(plog, segments, txns.live_producers))
        rewritten = removed = before = after = 0
        next_horizon = -1
        for seg, size in segments:
            fate = _clean_segment(plog, seg, size, walk)
            if fate.horizon >= 0:
                next_horizon = fate.horizon if next_horizon < 0 else min(next_horizon, fate.horizon)
            if not fate.changed:
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
        return CleanResult(rewritten, removed, before, after, len(latest), end, first_dirty, upper,
                           walk.markers_removed, walk.empty_batches)


class CleaningAborted(StorageError):
    """The log is being closed: the pass stopped at a batch boundary."""


def _batches(plog: PartitionLog, seg: Segment, size: int) -> Iterator[memoryview]:
    """The segment's batches, stopping (``CleaningAborted``) as soon as the log is being closed."""
    for batch in _iter_batches(plog, seg, size):
        if plog.closing:
            raise CleaningAborted(f"{plog.directory} is being closed")
        yield batch


class _Aborted:
    """Whether a transactional data batch belongs to an aborted transaction, asked in offset order (Kafka's
    ``CleanedTransactionMetadata``, by ranges: a producer id's batches from its first offset to its marker)."""

    __slots__ = ("_active", "_pending")

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._pending = deque(sorted(aborted, key=lambda t: (t.first_offset, t.last_offset)))
        self._active: dict[int, deque[tuple[int, int]]] = {}

    def __call__(self, h: BatchHeader) -> bool:
        pending, last = self._pending, h.base_offset + h.last_offset_delta
        while pending and pending[0].first_offset <= last:
            t = pending.popleft()
            self._active.setdefault(t.producer_id, deque()).append((t.first_offset, t.last_offset))
        ranges = self._active.get(h.producer_id)
        while ranges and ranges[0][1] < h.base_offset:
            ranges.popleft()
        return bool(ranges) and ranges[0][0] <= last


def _build_map(plog: PartitionLog, dirty: list[tuple[Segment, int]], first_dirty: int, capacity: int,
               aborted: _Aborted) -> tuple[dict[int, int], int]:
    """Key hash -> latest offset over the dirty segments (records of aborted transactions left out), stopping
    before the batch that would overflow ``capacity``; returns the map and the offset where it ends."""
    latest: dict[int, int] = {}
    end = first_dirty
    for seg, size in dirty:
        for batch in _batches(plog, seg, size):
            header = parse_header(batch)
            if header.is_transactional and not header.is_control and aborted(header):
                end = max(end, header.next_offset)
                continue
            pairs = _offsets_and_keys(batch, header)
            if pairs is None:
                end = max(end, header.next_offset)
                continue
            if pairs and pairs[0][0] < first_dirty:  # a pass that stopped inside this segment mapped these
                pairs = [p for p in pairs if p[0] >= first_dirty]
            if len(latest) + len(pairs) > capacity and latest:
                return latest, end
            for offset, key in pairs:
                if key is not None:
                    latest[hash(key)] = offset
            end = max(end, header.next_offset)
        end = max(end, seg.next_offset)
    return latest, end


def _offsets_and_keys(batch: memoryview, header: BatchHeader) -> list[tuple[int, bytes | None]] | None:
    """Each record's (offset, key); None for batches kept verbatim (control, undecodable codec)."""
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


def _last_batches(plog: PartitionLog, segments: list[tuple[Segment, int]], live: Collection[int] | None
                  ) -> set[int]:
    """Base offsets of the batches kept for producer continuity: per live producer id, its last data batch in
    ``segments``, or its last marker when that marker is later and of a newer epoch (a header walk)."""
    data: dict[int, tuple[int, int]] = {}  # producer id -> (base offset, epoch) of its last data batch
    markers: dict[int, tuple[int, int]] = {}  # producer id -> the same for its last non-empty control batch
    for seg, size in segments:
        for batch in _batches(plog, seg, size):
            h = parse_header(batch)
            if h.producer_id < 0 or (live is not None and h.producer_id not in live):
                continue
            if not h.is_control:
                data[h.producer_id] = (h.base_offset, h.producer_epoch)
            elif h.record_count > 0:
                markers[h.producer_id] = (h.base_offset, h.producer_epoch)
    keep = set()
    for pid in data.keys() | markers.keys():
        d, m = data.get(pid), markers.get(pid)
        if m is not None and (d is None or (m[0] > d[0] and m[1] != d[1])):
            keep.add(m[0])
        elif d is not None:
            keep.add(d[0])
    return keep


@dataclass(slots=True)
class _Walk:
    """What the rewrite carries from batch to batch, in offset order, across the pass's segments."""

    latest: dict[int, int]
    end: int
    now_ms: int
    horizon_at: int  # the delete horizon a tombstone or marker gets now
    aborted: _Aborted
    keep_last: set[int]  # base offsets of batches kept (emptied if need be) for producer continuity
    txn_kept: set[int] = field(default_factory=set)  # producer ids whose open transaction still has a batch
    markers_removed: int = 0
    empty_batches: int = 0


@dataclass(slots=True)
class _Fate:
    path: str
    size: int
    removed: int
    changed: bool  # the output differs from the segment
    horizon: int  # earliest delete horizon still holding tombstones or markers, -1: none


def _clean_segment(plog: PartitionLog, seg: Segment, size: int, walk: _Walk) -> _Fate:
    """Write the cleaned segment to ``<base>.log.cleaned`` (fsynced) and say what changed."""
    fs = plog.fs
    path = seg.log_path + ".cleaned"
    fd = fs.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    fate = _Fate(path, 0, 0, False, -1)
    buf = bytearray()
    aborted = False
    try:
        for batch in _batches(plog, seg, size):
            out = _clean_batch(batch, walk, fate)
            if out is not batch:
                fate.changed = True
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


def _note_horizon(fate: _Fate, horizon: int) -> None:
    fate.horizon = horizon if fate.horizon < 0 else min(fate.horizon, horizon)


def _clean_batch(batch: memoryview, walk: _Walk, fate: _Fate) -> bytes | memoryview | None:
    """The batch's cleaned bytes: ``batch`` itself when kept whole, None when it goes."""
    header = parse_header(batch)
    if header.base_offset >= walk.end:  # beyond the map: verbatim (below the LSO, so decided, never removed)
        if header.is_transactional and not header.is_control:
            walk.txn_kept.add(header.producer_id)
        return batch
    if header.is_control:
        return _clean_control(batch, header, walk, fate)
    out = _clean_data(batch, header, walk, fate)
    if out is not None and header.is_transactional:
        walk.txn_kept.add(header.producer_id)
    return out


def _clean_control(batch: memoryview, header: BatchHeader, walk: _Walk, fate: _Fate) -> memoryview | bytes | None:
    """A marker stays while its transaction has a batch in the log, then gets a delete horizon, then goes."""
    if header.record_count > 0:
        try:
            marker = parse_marker(batch, verify_crc=False)
        except (CorruptBatchError, UnsupportedCompressionError):
            return batch
        if marker is None:  # another control type (leader change, snapshot): not ours to drop
            return batch
        if header.producer_id in walk.txn_kept:
            walk.txn_kept.discard(header.producer_id)
            return batch
    if header.base_offset in walk.keep_last:  # a live producer's last entry: its epoch must survive
        return batch
    if header.attributes & DELETE_HORIZON_MASK:
        if walk.now_ms >= header.base_timestamp:
            fate.removed += header.record_count
            walk.markers_removed += 1
            return None
        _note_horizon(fate, header.base_timestamp)
        return batch
    _note_horizon(fate, walk.horizon_at)
    if header.record_count == 0:
        return _empty(header, walk.horizon_at)
    _, records = decode_batch(batch, verify_crc=False)
    return _rebuild(header, records, walk.horizon_at)


def _clean_data(batch: memoryview, header: BatchHeader, walk: _Walk, fate: _Fate) -> memoryview | bytes | None:
    keep_empty = header.producer_id >= 0 and header.base_offset in walk.keep_last
    if header.is_transactional and walk.aborted(header):  # aborted: every record goes, whatever its key
        fate.removed += header.record_count
        if not keep_empty:
            return None
        walk.empty_batches += 1
        return batch if header.record_count == 0 else _empty(header, None)
    latest = walk.latest
    has_horizon = bool(header.attributes & DELETE_HORIZON_MASK)
    try:
        if header.record_count == header.last_offset_delta + 1:  # fast look first: most batches go or stay whole
            base = header.base_offset
            kvs = key_values(batch)[1]
            get = latest.get
            keep = [k is not None and (v is not None or not has_horizon)
                    and (get(hash(k)) or -1) <= base + i for i, (k, v) in enumerate(kvs)]
            if not any(keep) and all(v is not None for _, v in kvs) and not keep_empty:
                fate.removed += len(kvs)
                return None
            if all(keep) and all(v is not None for _, v in kvs):
                return batch
        _, records = decode_batch(batch, verify_crc=False)
    except UnsupportedCompressionError:
        return batch
    horizon = header.base_timestamp if has_horizon else None
    kept = []
    for r in records:
        if r.key is None:
            continue
        newest = latest.get(hash(r.key))
        if newest is not None and newest > r.offset:
            continue
        if r.value is None and horizon is not None and walk.now_ms >= horizon:
            continue
        kept.append(r)
    fate.removed += len(records) - len(kept)
    if not kept:
        if not keep_empty:
            return None
        walk.empty_batches += 1
        return batch if header.record_count == 0 else _empty(header, None)
    tombstones = any(r.value is None for r in kept)
    if tombstones:
        if horizon is None:
            horizon = walk.horizon_at
        _note_horizon(fate, horizon)
    if len(kept) == len(records) and (has_horizon or not tombstones):
        return batch
    return _rebuild(header, kept, horizon if tombstones else None)


def _rebuild(header: BatchHeader, records: Sequence[Record], delete_horizon_ms: int | None) -> bytes:
    """A batch of a subset of ``header``'s records that keeps its base offset, last offset delta (hence its
    sequence range), producer fields, codec and attributes (Kafka's ``buildRetainedRecordsInto``); records
    keep their absolute offsets and timestamps; with ``delete_horizon_ms`` the base timestamp holds it
    (KIP-534)."""
    attributes = header.attributes & ~TIMESTAMP_TYPE_MASK & ~DELETE_HORIZON_MASK
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
    base_ts = records[0].timestamp if delete_horizon_ms is None else delete_horizon_ms
    body = b"".join(encode_record(r.offset - header.base_offset, r.timestamp - base_ts, r.key, r.value, r.headers)
                    for r in records)
    return _seal(_compress(attributes & CODEC_MASK, body), header.base_offset, header.partition_leader_epoch,
                 attributes, header.last_offset_delta, base_ts, max(r.timestamp for r in records),
                 header.producer_id, header.producer_epoch, header.base_sequence, len(records))


def _empty(header: BatchHeader, delete_horizon_ms: int | None) -> bytes:
    """The batch's header alone (no records, no codec): Kafka's ``writeEmptyHeader`` (``RETAIN_EMPTY``), with
    the same offsets, sequence and producer fields; timestamps are the batch's max (or the delete horizon)."""
    attributes = header.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK)
    ts = header.max_timestamp
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
        ts = delete_horizon_ms
    return _seal(b"", header.base_offset, header.partition_leader_epoch, attributes, header.last_offset_delta,
                 ts, header.max_timestamp if delete_horizon_ms is not None else ts, header.producer_id,
                 header.producer_epoch, header.base_sequence, 0)
