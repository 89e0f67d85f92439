"""A partition log: ordered segments of v2 record batches, with recovery, group-commit flush and retention.

Rules and invariants:
- Offsets: `log_start_offset <= high_watermark <= log_end_offset`. `append` assigns consecutive offsets
  by rewriting each batch's base offset (bytes 0-7, outside the CRC) and writes the bytes with one
  positional write into the OS page cache. `flush` fsyncs everything written since the previous flush and
  advances the recovery point; the high watermark is the recovery point (readers that must only see
  durable data read below it). A log written through the journal is durable up to what the journal's
  fsync covered (`note_durable`); its own files are fsynced later, by a checkpoint.
- Concurrency: one appender and one flusher thread (plus readers and one cleaner). `_lock` guards the
  in-memory state and is held only for bookkeeping, page-cache writes and reads; fsyncs run outside it.
  `_flush_lock` is held by the flusher around its fsyncs and by anything that closes a segment's file
  descriptor (retention, compaction swap, close), so a descriptor is never closed under an fsync.
  Lock order: `_cleaner_lock` -> `_append_lock` -> `_flush_lock` -> `_lock`.
- Failure: any write or fsync error takes the log offline for good (`LogOfflineError` on every later
  append/flush); the recovery point never advances past data whose fsync failed, and it is never retried.
- Files: create/roll = write, fsync file, rename (where a rename applies), fsync directory. A segment's
  index is written at roll and, for the active segment, at clean close; it is trusted at open only if
  its summary matches the file size (any later append or truncation makes it stale and ignored).
- Recovery at open: segments whose index file is intact, matches the file size and which lie wholly
  below the checkpointed recovery point are trusted (a clean restart reads only index files); every other segment is scanned, with CRC checks for batches at or after
  the recovery point. The first bad or partial batch truncates the log there (later segments are
  deleted) with a warning; a torn tail never stops startup. Scanned data is then fsynced, so after open
  the recovery point equals the log end.
- Replication (cluster mode only; single-node mode never calls these and ``leader_epoch`` stays None, so
  appends are byte for byte as before): a leader (``become_leader(epoch)``) stamps its epoch into bytes 12-15
  of what it appends (outside the CRC) and records where the epoch began in the leader-epoch cache
  (``leader_epochs.py``, file ``leader-epoch-checkpoint``); a follower's ``append_as_follower`` writes the
  leader's batches verbatim (CRC checked, offsets increasing from the log end; only a compacted log may
  skip offsets, those the leader's cleaner removed) and notes new epochs; ``restart_at`` empties a follower
  left behind its leader's log start;
  ``truncate_to(offset)`` cuts whole batches (fsync, later segments deleted, checkpoint and epoch file
  rewritten) before returning.
- Retention (only when the config's policy includes delete; Kafka's ``UnifiedLog.deleteOldSegments``) deletes
  whole segments, oldest first, while each is older than ``retention.ms`` (its newest record timestamp) or
  the log stays at least ``retention.bytes`` without it, and only while the segment's upper bound (the next
  segment's base offset; the log end for the active segment) is at or below the high watermark: the
  caller's bound (cluster mode: the replicated one), capped at this log's own durable end. The active
  segment goes too when it qualifies, unless it is empty; it is rolled first (under ``_append_lock``: no
  append races the roll), as a log always has a segment, so then log start = log end = the new empty active
  segment's base offset. Retention advances the log start offset; the checkpoint file (`recovery-point`,
  written atomically) records both offsets.
- Reads: ``read`` copies stored batches into memory; ``read_range`` may name them instead as a
  ``FileRange`` (file_range.py), holding a dup of the segment's descriptor taken under ``_lock`` (every
  close of a segment's descriptor happens after the segment left ``_segments`` under ``_lock``, or under
  it). A range stays readable after retention deletes its segment or the cleaner renames over it; a
  truncation in place (``truncate_to``, and recovery's cut of a torn tail) bumps the segment's
  ``truncations`` before cutting, which invalidates earlier ranges of it.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from protocol.record_batch import (
    BatchHeader,
    CorruptBatchError,
    UnsupportedCompressionError,
    decode_batch,
    parse_header,
    split_batches,
    validate_batch,
)

from .errors import LogClosedError, LogOfflineError, OffsetOutOfRangeError, StorageError
from .file_range import FileRange
from .fs import FileSystem
from .index import OffsetIndex, decode_index_file, encode_index_file
from .leader_epochs import FILE_NAME as EPOCH_FILE
from .leader_epochs import LeaderEpochCache
from .segment import (
    INDEX_SUFFIX,
    Segment,
    iter_batches,
    locate_batches,
    parse_segment_name,
    scan,
    segment_file_name,
)

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "recovery-point"
_LEFTOVER_SUFFIXES = (".tmp", ".cleaned")


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Per-partition settings, named after Kafka's topic configs."""

    segment_bytes: int = 1 << 30  # segment.bytes
    index_interval_bytes: int = 4096  # index.interval.bytes
    compact: bool = False  # cleanup.policy=compact
    retention_ms: int | None = 7 * 24 * 3600 * 1000  # retention.ms (None = unlimited)
    retention_bytes: int | None = None  # retention.bytes (None = unlimited)
    delete_retention_ms: int = 24 * 3600 * 1000  # delete.retention.ms: how long tombstones live
    verify_crc_on_append: bool = True
    delete: bool = True  # cleanup.policy includes delete: retention applies (compact only: it never does)
    segment_ms: int | None = None  # segment.ms: roll the active segment this long after its first append
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    max_compaction_lag_ms: int | None = None  # max.compaction.lag.ms (None = unlimited)
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio


class AppendInfo(NamedTuple):
    base_offset: int
    last_offset: int


class PartitionLog:
    """Open with `PartitionLog.open(directory, config, fs)`."""

    def __init__(self, directory: str, config: LogConfig, fs: FileSystem) -> None:
        self.directory = directory
        self.name = os.path.basename(directory)  # e.g. "__consumer_offsets-7" (the journal's name for it)
        self.config = config
        self.fs = fs
        self._segments: list[Segment] = []
        self._recovery_point = 0
        self._durable_elsewhere = 0  # offsets below it are durable in the journal (see note_durable)
        self._log_start = 0
        self._checkpointed: bytes | None = None  # what this process last wrote to the checkpoint file
        self._offline: str | None = None
        self._closed = False
        self._closing = False  # close() has begun: a cleaning pass stops at its next batch (cleaner.py)
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._append_lock = threading.Lock()
        self._cleaner_lock = threading.Lock()
        self._active_since: float | None = None  # wall-clock ms of the active segment's first append
        # cluster mode (see "Replication" below): the epoch a leader stamps into what it appends (None: stamp
        # nothing, single-node mode), and the leader-epoch cache, read from its file on first use
        self.leader_epoch: int | None = None
        self._epochs: LeaderEpochCache | None = None

    # ------------------------------------------------------------------ open / recovery

    @classmethod
    def open(cls, directory: str, config: LogConfig | None = None, fs: FileSystem | None = None) -> PartitionLog:
        plog = cls(directory, config or LogConfig(), fs or FileSystem())
        try:
            plog._load()
        except OSError as exc:
            plog._close_fds()
            raise StorageError(f"cannot open partition log {directory}: {exc}") from exc
        return plog

    def _load(self) -> None:
        fs = self.fs
        fs.makedirs(self.directory)
        names = fs.listdir(self.directory)
        for name in names:
            if name.endswith(_LEFTOVER_SUFFIXES):
                fs.unlink(os.path.join(self.directory, name))
        recovery_point, log_start = self._read_checkpoint()
        bases = sorted(b for b in map(parse_segment_name, names) if b is not None)
        if not bases:
            self._segments.append(self._create_segment(log_start))
            self._recovery_point = self._log_start = log_start
            self._write_checkpoint()
            return
        to_sync = self._load_segments(bases, recovery_point)
        self._drop_segments_below(log_start)
        self._log_start = max(log_start, self._segments[0].base_offset)
        self._log_start = min(self._log_start, self.log_end_offset)
        for seg in to_sync:
            fs.fsync(seg.fd)
        self._recovery_point = self.log_end_offset
        self._write_checkpoint()

    def _load_segments(self, bases: list[int], recovery_point: int) -> list[Segment]:
        """Open every segment file, trusting or scanning each; returns the segments to fsync."""
        to_sync: list[Segment] = []
        expected = bases[0]
        for i, base in enumerate(bases):
            path = os.path.join(self.directory, segment_file_name(base))
            if base < expected:
                log.warning("partition %s: segment %s overlaps the previous one; deleting it and %d later "
                            "segment(s)", self.directory, path, len(bases) - i - 1)
                for later in bases[i:]:
                    self._delete_segment_files(later)
                self.fs.fsync_dir(self.directory)
                break
            fd = self.fs.open(path, os.O_RDWR)
            file_size = self.fs.file_size(fd)
            next_base = bases[i + 1] if i + 1 < len(bases) else None
            seg = self._trusted_segment(base, fd, file_size, next_base, recovery_point)
            if seg is None:
                seg, error = self._scan_segment(base, fd, file_size, recovery_point)
                to_sync.append(seg)
                self._segments.append(seg)
                if error is not None:
                    self._truncate_tail(seg, file_size, error, bases[i + 1:])
                    break
            else:
                self._segments.append(seg)
            expected = seg.next_offset
        return to_sync

    def _trusted_segment(self, base: int, fd: int, file_size: int, next_base: int | None, rp: int
                         ) -> Segment | None:
        """The segment as its index file describes it, if that file is intact, matches the file size and
        the segment lies below the recovery point; else None (scan it)."""
        if next_base is not None and next_base > rp:
            return None
        data = self.fs.read_file(os.path.join(self.directory, f"{base:020d}{INDEX_SUFFIX}"))
        parsed = decode_index_file(data, self.config.index_interval_bytes) if data else None
        if parsed is None:
            return None
        index, summary = parsed
        if summary.valid_bytes != file_size or not base <= summary.next_offset <= rp:
            return None
        if next_base is not None and summary.next_offset > next_base:
            return None
        return Segment(base, self.directory, fd, index, file_size, summary.next_offset, summary.max_timestamp)

    def _scan_segment(self, base: int, fd: int, file_size: int, rp: int) -> tuple[Segment, str | None]:
        index = OffsetIndex(self.config.index_interval_bytes)
        res = scan(self.fs, fd, 0, file_size, base, rp, index)
        return Segment(base, self.directory, fd, index, res.valid_end, res.next_offset, res.max_timestamp), res.error

    def _truncate_tail(self, seg: Segment, file_size: int, error: str, later_bases: list[int]) -> None:
        log.warning(
            "partition %s: %s in %s; truncating %d bytes (offsets >= %d dropped) and deleting %d later "
            "segment(s)", self.directory, error, seg.log_path, file_size - seg.size, seg.next_offset,
            len(later_bases),
        )
        seg.truncations += 1
        self.fs.ftruncate(seg.fd, seg.size)
        self._unlink_if_exists(seg.index_path)
        for base in later_bases:
            self._delete_segment_files(base)
        self.fs.fsync_dir(self.directory)

    def _drop_segments_below(self, log_start: int) -> None:
        while len(self._segments) > 1 and self._segments[1].base_offset <= log_start:
            seg = self._segments.pop(0)
            self.fs.close(seg.fd)
            self._delete_segment_files(seg.base_offset)

    def _read_checkpoint(self) -> tuple[int, int]:
        data = self.fs.read_file(os.path.join(self.directory, CHECKPOINT_FILE))
        if data is None:
            return 0, 0
        try:
            version, rp, start = data.decode("ascii").split()
            if version != "1" or int(rp) < 0 or int(start) < 0:
                raise ValueError(version)
            return int(rp), int(start)
        except ValueError:
            log.warning("partition %s: unreadable checkpoint %r; re-validating everything", self.directory, data)
            return 0, 0

    def _write_checkpoint(self, only_if_changed: bool = False) -> None:
        with self._lock:
            text = f"1 {self._recovery_point} {self._log_start}\n".encode("ascii")
        if only_if_changed and text == self._checkpointed:
            return
        self.fs.write_atomic(os.path.join(self.directory, CHECKPOINT_FILE), text)
        self._checkpointed = text

    def _create_segment(self, base: int) -> Segment:
        path = os.path.join(self.directory, segment_file_name(base))
        fd = self.fs.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
        try:
            self.fs.fsync(fd)
            self.fs.fsync_dir(self.directory)
        except OSError:
            self.fs.close(fd)
            raise
        return Segment(base, self.directory, fd, OffsetIndex(self.config.index_interval_bytes))

    def _delete_segment_files(self, base: int) -> None:
        self._unlink_if_exists(os.path.join(self.directory, segment_file_name(base)))
        self._unlink_if_exists(os.path.join(self.directory, f"{base:020d}{INDEX_SUFFIX}"))

    def _unlink_if_exists(self, path: str) -> None:
        try:
            self.fs.unlink(path)
        except FileNotFoundError:
            pass

    # ------------------------------------------------------------------ state

    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def high_watermark(self) -> int:
        """Durable end: offsets below it have been fsynced (here, or in the journal: ``note_durable``)."""
        return max(self._recovery_point, self._durable_elsewhere)

    def note_durable(self, offset: int) -> None:
        """Offsets below ``offset`` were made durable by a journal fsync (this log's own files may still be
        unsynced): the high watermark may pass the recovery point, never the log end."""
        with self._lock:
            self._durable_elsewhere = max(self._durable_elsewhere, min(offset, self.log_end_offset))

    @property
    def closing(self) -> bool:
        return self._closing

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def offline(self) -> bool:
        return self._offline is not None

    def segment_base_offsets(self) -> list[int]:
        with self._lock:
            return [s.base_offset for s in self._segments]

    def segment_times(self) -> list[tuple[int, int]]:
        """(base offset, newest record timestamp or -1) per segment, oldest first (ListOffsets v0)."""
        with self._lock:
            return [(s.base_offset, s.max_timestamp) for s in self._segments]

    def size_bytes(self) -> int:
        with self._lock:
            return sum(s.size for s in self._segments)

    def _check_online(self) -> None:
        if self._offline is not None:
            raise LogOfflineError(f"partition log {self.directory} is offline: {self._offline}")
        if self._closed:
            raise LogClosedError(f"partition log {self.directory} is closed")

    def _write_failed(self, exc: OSError) -> LogOfflineError:
        """A failed append write (the caller holds the lock): offline for good."""
        self._offline = f"write failed: {exc}"
        log.error("partition %s is offline: write failed: %s", self.directory, exc)
        return LogOfflineError(f"partition log {self.directory} is offline: {self._offline}")

    def _go_offline(self, what: str, exc: OSError) -> LogOfflineError:
        with self._lock:
            if self._offline is None:
                self._offline = f"{what} failed: {exc}"
                log.error("partition %s is offline: %s failed: %s", self.directory, what, exc)
        return LogOfflineError(f"partition log {self.directory} is offline: {self._offline}")

    # ------------------------------------------------------------------ append / flush

    def append(self, batches: Sequence[bytes | bytearray | memoryview], *, leader_epoch: int | None = None
               ) -> AppendInfo:
        """Assign offsets to whole v2 batches and write them; returns (base offset, last offset)."""
        if not batches:
            raise ValueError("append needs at least one batch")
        metas = [(h.size, h.last_offset_delta, h.max_timestamp) for h in map(self._check_batch, batches)]
        return self._append(batches, metas, leader_epoch if leader_epoch is not None else self.leader_epoch)

    def append_own(self, batch: bytes, record_count: int, max_timestamp: int) -> AppendInfo:
        """Append one batch this process built itself (``build_kv_batch``: ``record_count`` records, offset
        deltas from 0): not parsed or CRC-checked again. The group commit's per-round path: one lock, one
        copy (the base offset patched in front of the rest), one positional write."""
        return self._append_with(len(batch), lambda: self._write_own_locked(batch, record_count, max_timestamp))

    def _write_own_locked(self, batch: bytes, record_count: int, max_timestamp: int) -> AppendInfo:
        seg = self._segments[-1]
        size = len(batch)
        first = seg.next_offset
        epoch = self.leader_epoch
        if epoch is None:
            data = first.to_bytes(8, "big", signed=True) + batch[8:]
        else:  # a cluster leader stamps its epoch (bytes 12-15, outside the CRC)
            data = b"".join((first.to_bytes(8, "big", signed=True), batch[8:12],
                             epoch.to_bytes(4, "big", signed=True), batch[16:]))
        position = seg.size
        try:
            written = self.fs.pwrite(seg.fd, data, position)
            if written != size:
                self.fs.pwrite_all(seg.fd, memoryview(data)[written:], position + written)
        except OSError as exc:
            raise self._write_failed(exc) from exc
        seg.index.maybe_add(first, position)
        seg.size = position + size
        seg.next_offset = first + record_count
        if max_timestamp > seg.max_timestamp:
            seg.max_timestamp = max_timestamp
        seg.dirty = True
        return AppendInfo(first, first + record_count - 1)

    def _append(self, batches: Sequence[bytes | bytearray | memoryview], metas: list[tuple[int, int, int]],
                leader_epoch: int | None) -> AppendInfo:
        total = sum(m[0] for m in metas)
        return self._append_with(total, lambda: self._write_locked(batches, metas, total, leader_epoch))

    def _append_with(self, total: int, write: Callable[[], AppendInfo]) -> AppendInfo:
        """Appends are serialised: roll first when ``total`` more bytes would overflow a non-empty active
        segment, then ``write()`` (to the active segment) under the lock."""
        with self._append_lock:
            with self._lock:
                self._check_online()
                active = self._segments[-1]
                if active.size == 0 or self._active_since is None:
                    self._active_since = time.time() * 1000
                if not (active.size > 0 and (active.size + total > self.config.segment_bytes
                                             or self._too_old(active))):
                    return write()
            self._roll()
            self._active_since = time.time() * 1000
            with self._lock:
                self._check_online()
                return write()

    def _too_old(self, active: Segment) -> bool:
        """segment.ms: the active segment has taken appends for longer than its topic allows."""
        limit = self.config.segment_ms
        return limit is not None and self._active_since is not None and \
            time.time() * 1000 - self._active_since >= limit

    def _check_batch(self, batch: bytes | bytearray | memoryview) -> BatchHeader:
        if self.config.verify_crc_on_append:
            return validate_batch(batch)
        header = parse_header(batch)
        if header.size != len(batch):
            raise CorruptBatchError(f"batch declares {header.size} bytes, {len(batch)} given")
        return header

    def _write_locked(self, batches: Sequence[bytes | bytearray | memoryview], metas: list[tuple[int, int, int]],
                      total: int, leader_epoch: int | None) -> AppendInfo:
        """``metas``: per batch (size, last offset delta, max timestamp)."""
        seg = self._segments[-1]
        buf = bytearray(total)
        entries = []
        pos = 0
        offset = first = seg.next_offset
        max_ts = seg.max_timestamp
        for batch, (size, last_delta, batch_max_ts) in zip(batches, metas):
            buf[pos:pos + size] = batch
            buf[pos:pos + 8] = offset.to_bytes(8, "big", signed=True)
            if leader_epoch is not None:
                buf[pos + 12:pos + 16] = leader_epoch.to_bytes(4, "big", signed=True)
            entries.append((offset, seg.size + pos))
            if batch_max_ts > max_ts:
                max_ts = batch_max_ts
            offset += last_delta + 1
            pos += size
        try:
            self.fs.pwrite_all(seg.fd, buf, seg.size)
        except OSError as exc:
            raise self._write_failed(exc) from exc
        for off, position in entries:
            seg.index.maybe_add(off, position)
        seg.size += total
        seg.next_offset = offset
        seg.max_timestamp = max_ts
        seg.dirty = True
        return AppendInfo(first, offset - 1)

    def _roll(self) -> None:
        """Close the active segment (fsync, write its index) and start a new one at the log end."""
        old = self._segments[-1]
        try:
            self.fs.fsync(old.fd)
            self.fs.write_atomic(old.index_path, encode_index_file(old.index, old.summary()))
            new = self._create_segment(old.next_offset)
        except OSError as exc:
            raise self._go_offline("segment roll", exc) from exc
        with self._lock:
            old.dirty = False
            self._segments.append(new)
            self._recovery_point = max(self._recovery_point, old.next_offset)

    def flush(self) -> int:
        """fsync everything appended so far; returns the new recovery point (= high watermark)."""
        with self._flush_lock:
            with self._lock:
                self._check_online()
                target = self.log_end_offset
                dirty = [s for s in self._segments if s.dirty]
                for s in dirty:
                    s.dirty = False
            try:
                for s in dirty:
                    self.fs.fsync(s.fd)
            except OSError as exc:
                raise self._go_offline("fsync", exc) from exc
            with self._lock:
                self._recovery_point = max(self._recovery_point, target)
                return self._recovery_point

    def checkpoint(self) -> None:
        """Persist the recovery point and log start offset (atomically); call periodically and at close.
        Nothing is written when both are what this process last wrote there: each write is a file create,
        an fsync, a rename and a directory fsync, and the server checkpoints every log each minute, most of
        them unchanged (a journaled offsets partition's recovery point moves only at a journal checkpoint)."""
        with self._flush_lock:
            self._check_online()
            try:
                self._write_checkpoint(only_if_changed=True)
            except OSError as exc:
                raise self._go_offline("checkpoint write", exc) from exc

    def close(self) -> None:
        """Flush, checkpoint (if online) and close the files; idempotent. A cleaning pass under way stops at
        its next batch (``closing``), so this never waits for the rest of a pass."""
        if self._closed:
            return
        self._closing = True
        if self._offline is None:
            try:
                self.flush()
                self._write_active_index()
                self.checkpoint()
            except LogOfflineError:
                pass
        with self._cleaner_lock, self._append_lock, self._flush_lock, self._lock:
            self._closed = True
            self._close_fds()

    def _write_active_index(self) -> None:
        """At clean close: lets the next open trust the active segment too (a later append changes the
        file size, so a stale index file is never trusted)."""
        with self._append_lock, self._flush_lock:
            seg = self._segments[-1]
            try:
                self.fs.write_atomic(seg.index_path, encode_index_file(seg.index, seg.summary()))
            except OSError as exc:
                raise self._go_offline("index write", exc) from exc

    def _close_fds(self) -> None:
        for seg in self._segments:
            try:
                self.fs.close(seg.fd)
            except OSError:
                pass

    # ------------------------------------------------------------------ reads

    def read(self, offset: int, max_bytes: int, *, upper_bound: int | None = None) -> bytes:
        """Stored batch bytes, verbatim, from the batch containing `offset`: at least one whole batch even
        if larger than `max_bytes`, none at or beyond `upper_bound` (default: the high watermark).
        Returns b"" at the end; raises OffsetOutOfRangeError outside [log start, log end]."""
        with self._lock:
            seg, found = self._locate_locked(offset, max_bytes, upper_bound)
            if found is None:
                return b""
            start, stop = found
            return self.fs.pread(seg.fd, stop - start, start)

    def read_range(self, offset: int, max_bytes: int, *, upper_bound: int | None = None,
                   min_range: int = 0) -> bytes | FileRange:
        """What ``read`` returns, as a ``FileRange`` (file_range.py: a dup of the segment's descriptor, the
        caller's to close) when it is at least ``min_range`` bytes, else as bytes (b"" at the end). The same
        bytes either way. Out of descriptors (EMFILE), it reads them into memory instead."""
        with self._lock:
            seg, found = self._locate_locked(offset, max_bytes, upper_bound)
            if found is None:
                return b""
            start, stop = found
            if stop - start >= min_range:
                try:  # under the lock: a segment still listed has its descriptor open (see Reads)
                    return FileRange(self.fs.dup(seg.fd), start, stop - start, seg)
                except OSError as exc:
                    log.debug("partition %s: no descriptor for a file range (%s); reading it", self.directory,
                              exc)
            return self.fs.pread(seg.fd, stop - start, start)

    def _locate_locked(self, offset: int, max_bytes: int, upper_bound: int | None
                       ) -> tuple[Segment, tuple[int, int] | None]:
        """The segment and byte range ``read`` returns (range None: nothing to read); the caller holds the
        lock."""
        if self._closed:
            raise LogClosedError(f"partition log {self.directory} is closed")
        upper = max(self._recovery_point, self._durable_elsewhere) if upper_bound is None else \
            min(upper_bound, self.log_end_offset)
        if offset < self._log_start or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} outside [{self._log_start}, {self.log_end_offset}] in {self.directory}"
            )
        segments = self._segments
        first = self._segment_index(offset)
        for seg in segments[first:]:
            if seg.base_offset >= upper:
                break
            if seg.next_offset <= offset:
                continue
            found = locate_batches(self.fs, seg, offset, max_bytes, upper)
            if found is not None:
                return seg, found
        return segments[first], None

    def _segment_index(self, offset: int) -> int:
        lo, hi = 0, len(self._segments)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._segments[mid].base_offset <= offset:
                lo = mid
            else:
                hi = mid
        return lo

    def earliest_offset(self) -> int:
        return self._log_start

    def latest_offset(self) -> int:
        """ListOffsets' "latest": the high watermark."""
        return self._recovery_point

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp`, looking at the first batch
        whose maxTimestamp >= `timestamp` (below the high watermark); None if there is none."""
        with self._lock:
            upper = self._recovery_point
            for seg in self._segments:
                if seg.max_timestamp < timestamp or seg.base_offset >= upper:
                    continue
                for loc in iter_batches(self.fs, seg, 0):
                    if loc.base_offset >= upper:
                        return None
                    if loc.max_timestamp >= timestamp and loc.last_offset >= self._log_start:
                        return self._first_record_at(seg, loc.position, loc.size, timestamp)
            return None

    def offset_of_max_timestamp(self) -> tuple[int, int] | None:
        """ListOffsets' max timestamp (-3, KIP-734): (offset, timestamp) of the first record carrying the
        largest timestamp below the high watermark; None for an empty log."""
        with self._lock:
            upper = self._recovery_point
            segs = [s for s in self._segments if s.base_offset < upper and s.max_timestamp >= 0]
            if not segs:
                return None
            best = max(s.max_timestamp for s in segs)
            for seg in segs:
                if seg.max_timestamp != best:
                    continue
                for loc in iter_batches(self.fs, seg, 0):
                    if loc.base_offset >= upper:
                        break
                    if loc.max_timestamp == best and loc.last_offset >= self._log_start:
                        return self._first_record_at(seg, loc.position, loc.size, best)
            return None

    def _first_record_at(self, seg: Segment, position: int, size: int, timestamp: int) -> tuple[int, int]:
        batch = self.fs.pread(seg.fd, size, position)
        try:
            header, records = decode_batch(batch, verify_crc=False)
        except UnsupportedCompressionError:
            header = parse_header(batch)
            return header.base_offset, header.max_timestamp
        for rec in records:
            if rec.timestamp >= timestamp and rec.offset >= self._log_start:
                return rec.offset, rec.timestamp
        return header.base_offset, header.max_timestamp

    # ------------------------------------------------------------------ retention

    def apply_retention(self, now_ms: int, high_watermark: int | None = None) -> list[int]:
        """Delete old segments by time (newest timestamp older than retention.ms) and size (retention.bytes),
        oldest first, none whose upper bound is above ``high_watermark`` (None: this log's own; either way
        capped at this log's durable end); the active segment too when it qualifies and is not empty, after
        rolling a new empty one at the log end. Returns the deleted segments' base offsets."""
        if not self.config.delete:  # cleanup.policy=compact: nothing is deleted by age or size
            return []
        with self._cleaner_lock:
            with self._lock:
                self._check_online()
                # the append lock is taken only when the active segment may go (it is needed for the roll)
                whole = self._deletable_locked(now_ms, high_watermark) == len(self._segments)
            with self._append_lock if whole else contextlib.nullcontext(), self._flush_lock:
                with self._lock:
                    self._check_online()
                    count = self._deletable_locked(now_ms, high_watermark)
                    if count == len(self._segments) and not whole:
                        count -= 1  # became deletable meanwhile (appended or flushed): the next pass takes it
                    victims = self._segments[:count]
                if not victims:
                    return []
                if count == len(self._segments):  # "we must always have at least one segment"
                    self._roll()
                    self._active_since = None
                with self._lock:
                    del self._segments[:count]
                    self._log_start = max(self._log_start, self._segments[0].base_offset)
                    self._recovery_point = max(self._recovery_point, self._log_start)
                try:
                    for seg in victims:
                        self.fs.close(seg.fd)
                        self._delete_segment_files(seg.base_offset)
                    self.fs.fsync_dir(self.directory)
                    self._write_checkpoint()
                except OSError as exc:
                    raise self._go_offline("retention", exc) from exc
        for seg in victims:
            log.info("partition %s: retention deleted segment %s", self.directory, seg.log_path)
        return [s.base_offset for s in victims]

    def _deletable_locked(self, now_ms: int, high_watermark: int | None) -> int:
        """How many segments, oldest first, retention deletes now (Kafka's ``deletableSegments``)."""
        cfg = self.config
        bound = self.high_watermark if high_watermark is None else min(high_watermark, self.high_watermark)
        segs = self._segments
        total = sum(s.size for s in segs)
        count = 0
        for i, seg in enumerate(segs):
            last = i == len(segs) - 1
            upper = seg.next_offset if last else segs[i + 1].base_offset
            if upper > bound or (last and seg.size == 0):
                break
            too_old = cfg.retention_ms is not None and seg.max_timestamp < now_ms - cfg.retention_ms
            too_big = cfg.retention_bytes is not None and total - seg.size >= cfg.retention_bytes
            if not (too_old or too_big):
                break
            total -= seg.size
            count += 1
        return count

    # ------------------------------------------------------------------ for compaction (same package)

    def _closed_segments(self) -> list[Segment]:
        with self._lock:
            return list(self._segments[:-1])

    def _segment_sizes(self) -> list[tuple[Segment, int]]:
        with self._lock:
            return [(s, s.size) for s in self._segments]

    def _swap_segment(self, old: Segment, new: Segment) -> None:
        with self._flush_lock, self._lock:
            i = self._segments.index(old)
            self._segments[i] = new
            self.fs.close(old.fd)

    # ------------------------------------------------------------------ replication (cluster mode)
    # A follower appends its leader's batches as they are (offsets and leader epochs kept) and is cut back
    # to where it agrees with a new leader (KIP-101); a leader stamps its epoch and records where it began.
    # Single-node mode never calls these, and ``leader_epoch`` stays None there.

    def epoch_cache(self) -> LeaderEpochCache:
        """The leader-epoch cache (read from ``leader-epoch-checkpoint`` on first use; empty when missing)."""
        cache = self._epochs
        if cache is None:
            path = os.path.join(self.directory, EPOCH_FILE)
            cache = LeaderEpochCache.decode(self.fs.read_file(path))
            if cache is None:
                cache = LeaderEpochCache()
            self._epochs = cache
        return cache

    def _write_epochs(self) -> None:
        cache = self.epoch_cache()
        try:
            self.fs.write_atomic(os.path.join(self.directory, EPOCH_FILE), cache.encode())
        except OSError as exc:
            raise self._go_offline("leader-epoch checkpoint write", exc) from exc

    def become_leader(self, epoch: int) -> None:
        """From now on appends carry ``epoch``; the epoch starts at the log end (file written if new)."""
        with self._append_lock:
            self._check_online()
            self.leader_epoch = epoch
            if self.epoch_cache().assign(epoch, self.log_end_offset):
                self._write_epochs()

    def become_follower(self) -> None:
        with self._append_lock:
            self.leader_epoch = None

    def append_as_follower(self, data: bytes | bytearray | memoryview) -> AppendInfo | None:
        """Append a leader's whole batches verbatim (offsets and epochs kept): each batch's CRC is checked and
        the first must start at the log end, each next one where the previous ended (``CorruptBatchError``
        otherwise; nothing is appended then). A partial trailing batch (the leader's ``max_bytes`` cut) is
        ignored. Returns None when ``data`` holds no whole batch. New leader epochs go to the epoch cache."""
        batches, _ = split_batches(data)
        if not batches:
            return None
        headers = [validate_batch(b) for b in batches]
        gaps = False
        for prev, cur in itertools.pairwise(headers):
            if cur.base_offset < prev.next_offset:
                raise CorruptBatchError(f"batch at offset {cur.base_offset} overlaps {prev.last_offset}")
            gaps = gaps or cur.base_offset > prev.next_offset
        first = headers[0].base_offset
        total = sum(h.size for h in headers)
        if gaps and not self.config.compact:
            raise CorruptBatchError(f"batches from offset {first} skip offsets in a log that is not compacted")

        def write() -> AppendInfo:
            end = self._segments[-1].next_offset
            if first < end or (first > end and not self.config.compact):
                raise CorruptBatchError(f"follower append at offset {first}, log end is {end}")
            return self._write_verbatim_locked(batches, headers, total)

        info = self._append_with(total, write)
        cache = self.epoch_cache()
        changed = False
        for h in headers:
            if h.partition_leader_epoch > cache.latest_epoch:
                changed = cache.assign(h.partition_leader_epoch, h.base_offset) or changed
        if changed:
            self._write_epochs()
        return info

    def restart_at(self, offset: int) -> None:
        """A follower behind its leader's log start (retention moved it): drop everything and start empty at
        ``offset`` (Kafka's ``truncateFullyAndStartAt``); durable at return."""
        with self._cleaner_lock, self._append_lock, self._flush_lock:
            with self._lock:
                self._check_online()
                doomed, self._segments = self._segments, []
            try:
                for old in doomed:
                    self.fs.close(old.fd)
                    self._delete_segment_files(old.base_offset)
                fresh = self._create_segment(offset)
            except OSError as exc:
                raise self._go_offline("restart", exc) from exc
            with self._lock:
                self._segments = [fresh]
                self._recovery_point = self._durable_elsewhere = self._log_start = offset
            try:
                self._write_checkpoint()
            except OSError as exc:
                raise self._go_offline("checkpoint write", exc) from exc
            if self.epoch_cache().truncate_from_end(0):
                self._write_epochs()
            log.warning("partition %s emptied and restarted at offset %d (its leader's log start)", self.directory,
                        offset)

    def _write_verbatim_locked(self, batches: Sequence[bytes | bytearray | memoryview],
                               headers: Sequence[BatchHeader], total: int) -> AppendInfo:
        """A follower's write: the bytes as they are (offsets kept, so a compacted leader's gaps stay gaps)."""
        seg = self._segments[-1]
        buf = b"".join(batches)
        try:
            self.fs.pwrite_all(seg.fd, buf, seg.size)
        except OSError as exc:
            raise self._write_failed(exc) from exc
        pos = seg.size
        for h in headers:
            seg.index.maybe_add(h.base_offset, pos)
            pos += h.size
            if h.max_timestamp > seg.max_timestamp:
                seg.max_timestamp = h.max_timestamp
        seg.size += total
        seg.next_offset = headers[-1].next_offset
        seg.dirty = True
        return AppendInfo(headers[0].base_offset, headers[-1].last_offset)

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset is >= ``offset`` (a batch holding ``offset`` goes whole, as in
        Kafka's ``LogSegment.truncateTo``); returns the new log end. Durable at return: the cut segment is
        fsynced, later segments deleted, the directory, checkpoint and epoch file rewritten."""
        with self._cleaner_lock, self._append_lock, self._flush_lock:
            with self._lock:
                self._check_online()
                if offset >= self.log_end_offset:
                    return self.log_end_offset
                offset = max(offset, self._log_start)
                i = self._segment_index(offset)
                seg = self._segments[i]
                cut_pos, cut_offset = seg.size, seg.next_offset
                for loc in iter_batches(self.fs, seg, seg.index.lookup(offset)):
                    if loc.last_offset >= offset:
                        cut_pos, cut_offset = loc.position, loc.base_offset
                        break
                doomed = self._segments[i + 1:]
                del self._segments[i + 1:]
                seg.truncations += 1  # before the cut: file ranges made earlier see it (file_range.py)
            try:
                for old in doomed:
                    self.fs.close(old.fd)
                    self._delete_segment_files(old.base_offset)
                self.fs.ftruncate(seg.fd, cut_pos)
                self.fs.fsync(seg.fd)
                self._unlink_if_exists(seg.index_path)
                self.fs.fsync_dir(self.directory)
            except OSError as exc:
                raise self._go_offline("truncation", exc) from exc
            with self._lock:
                seg.size = cut_pos
                seg.next_offset = max(cut_offset, seg.base_offset)
                seg.index.truncate_to(cut_pos)
                seg.dirty = False
                end = seg.next_offset
                self._recovery_point = min(self._recovery_point, end)
                self._durable_elsewhere = min(self._durable_elsewhere, end)
                self._log_start = min(self._log_start, end)
            try:
                self._write_checkpoint()
            except OSError as exc:
                raise self._go_offline("checkpoint write", exc) from exc
            if self.epoch_cache().truncate_from_end(end):
                self._write_epochs()
            log.warning("partition %s truncated to offset %d", self.directory, end)
            return end
