"""The journal: one shared write-ahead file, so one fsync makes a round's appends to many logs durable.

Why: an offsets commit must be durable before it is acknowledged, and the commits of a few milliseconds
land on up to 50 offsets partitions. Fsyncing 50 files costs the disk ~50 cache flushes a round; the
journal costs one. The partition logs still get every batch (same bytes, same offsets) in the page cache,
and are fsynced in the background by a checkpoint, after which the journal's older files are dropped.

Rules:
- Files ``<dir>/<seq:020d>.wal``, each starting with the 8-byte header ``b"GCJ1"`` + u32 seq. Appends go to
  the newest file. An entry is ``u32 size | u32 crc32c(body) | body`` where body is
  ``u16 name length | name (UTF-8, the partition directory name) | i64 base offset | record batch bytes``.
  An entry with no batch bytes is a truncation mark (``append_truncation``): the log was cut back to that
  offset here, so replay cuts it there too before applying what follows (a cluster follower truncating by
  leader epoch; the entries it cut must not come back at a restart). One with no batch bytes and base offset
  -1 is a deletion mark (``append_deletion``): the log was deleted here (its topic deleted), so every entry
  of that name before it is settled and never replayed, not even into a topic re-created under the name.
- ``append`` writes one entry into the page cache with one positional write (on the caller's thread) and
  returns the journal position after it; ``append_many`` writes several with one write. Positions count
  bytes over the journal's life since ``open``.
- ``sync()`` fdatasyncs every file holding unsynced bytes and returns the position everything below which is
  durable. It may run in a worker thread while appends continue; it never claims bytes appended after it
  started. ``begin_sync(submit)``/``end_sync(plan, error)`` are the same in two halves, for an fsync done by
  another process on the same files (``fsync_process``); a failure reported to ``end_sync`` takes the
  journal offline exactly as a failed ``sync()`` does. Several plans may be out at once (an fsync child
  takes requests while it syncs); once the journal is offline, ``end_sync`` fails even a plan whose fsync
  succeeded.
- Checkpoints: ``prepare_file()`` creates the next file durably (write header, fsync file, fsync directory;
  any thread), ``switch_to(file)`` makes it the append target (instant, on the appending thread), and
  ``drop_before(seq, keep)`` deletes older files once the caller has fsynced every log they cover, except
  the files in ``keep`` (they hold entries of a log whose fsync failed: the only durable copy).
- Open: every file is read in seq order, entry by entry (``recovered()``). Reading a file stops at its first
  entry that is partial, oversized (over ``MAX_ENTRY``) or fails its CRC: a torn tail never stops startup.
  Memory is bounded by one entry at a time while scanning; the caller replays and then calls ``reset()``,
  which deletes every file and starts an empty one. Replay reads the files twice: once for the deletion
  marks (memory: one int per deleted name), then to apply. Entries it cannot apply are summarised, one line
  per kind (settled by a deletion, no such log, ...), never a line per entry.
- Failure: any write or fsync error takes the journal offline for good (``JournalOfflineError`` on every
  later append/sync); after a failed fsync the page cache state is unknown, so it is never retried.
"""

from __future__ import annotations

import itertools
import logging
import os
import struct
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import crc32c

from protocol.record_batch import CorruptBatchError, parse_header

from .errors import LogOfflineError, StorageError
from .fs import FileSystem

if TYPE_CHECKING:
    from .log import PartitionLog

log = logging.getLogger(__name__)

MAGIC = b"GCJ1"
HEADER = struct.Struct(">4sI")
ENTRY_HEAD = struct.Struct(">II")  # size of the rest, crc32c of the body
MAX_ENTRY = 64 << 20
DELETION = -1  # the base offset of a deletion mark (an entry with no batch bytes)
SUMMARY_NAMES = 5  # a replay summary names at most this many logs
SUFFIX = ".wal"


class JournalOfflineError(LogOfflineError):
    """A journal write or fsync failed once: no journaled write can be made durable until restart."""


@dataclass(frozen=True, slots=True)
class JournalEntry:
    name: str  # the partition directory name, e.g. "__consumer_offsets-7"
    base_offset: int
    batch: bytes


@dataclass(slots=True)
class _File:
    seq: int
    fd: int
    size: int  # bytes in the file (header included)
    start: int  # journal position of the file's first byte
    synced: int = 0  # journal position up to which this file is fsynced
    uid: int = field(default_factory=lambda: next(_FILE_UIDS))  # never reused in this process, unlike fds


_FILE_UIDS = itertools.count(1)


@dataclass(frozen=True, slots=True)
class SyncPlan:
    target: int  # the journal position durable once every file below is synced
    files: list[_File]  # files with unsynced bytes
    ends: list[int]  # for each, the journal position its sync covers


def file_name(seq: int) -> str:
    return f"{seq:020d}{SUFFIX}"


def parse_file_name(name: str) -> int | None:
    if not name.endswith(SUFFIX) or len(name) != 20 + len(SUFFIX) or not name[:20].isdigit():
        return None
    return int(name[:20])


def encode_entry(name: str, base_offset: int, batch: bytes | bytearray | memoryview) -> bytes:
    raw = name.encode()
    body = b"".join((len(raw).to_bytes(2, "big"), raw, base_offset.to_bytes(8, "big", signed=True), batch))
    return ENTRY_HEAD.pack(len(body) + 4, crc32c.crc32c(body)) + body


def decode_body(body: bytes) -> JournalEntry:
    n = int.from_bytes(body[:2], "big")
    if 2 + n + 8 > len(body):
        raise ValueError("entry body shorter than its name and offset")
    name = body[2:2 + n].decode()
    base = int.from_bytes(body[2 + n:10 + n], "big", signed=True)
    return JournalEntry(name, base, body[10 + n:])


class Journal:
    """Open with ``Journal.open(directory, fs)``."""

    def __init__(self, directory: str, fs: FileSystem) -> None:
        self.directory = directory
        self.fs = fs
        self._files: list[_File] = []  # oldest first; the last one takes appends
        self._end = 0  # journal position after the last append
        self._offline: str | None = None
        self._lock = threading.Lock()  # guards _files/_end bookkeeping
        self._sync_lock = threading.Lock()  # held around fsyncs and around closing a file's descriptor
        self._recovered: list[str] = []  # file names found at open, read by recovered()

    # ------------------------------------------------------------------ open / recovery
    @classmethod
    def open(cls, directory: str, fs: FileSystem | None = None) -> Journal:
        j = cls(directory, fs or FileSystem())
        try:
            j.fs.makedirs(directory)
            names = [n for n in j.fs.listdir(directory) if parse_file_name(n) is not None]
        except OSError as exc:
            raise StorageError(f"cannot open journal {directory}: {exc}") from exc
        j._recovered = sorted(names)  # zero-padded sequence numbers: name order is seq order
        return j

    def recovered(self) -> Iterator[JournalEntry]:
        """Every valid entry of the files found at open, oldest first (one entry in memory at a time)."""
        for name in self._recovered:
            path = os.path.join(self.directory, name)
            try:
                fd = self.fs.open(path, os.O_RDONLY)
            except OSError as exc:
                log.error("journal file %s unreadable: %s; skipped", path, exc)
                continue
            try:
                yield from self._read_file(fd, path, parse_file_name(name) or 0)
            finally:
                self.fs.close(fd)

    def _read_file(self, fd: int, path: str, seq: int) -> Iterator[JournalEntry]:
        size = self.fs.file_size(fd)
        head = self.fs.pread(fd, HEADER.size, 0)
        if len(head) < HEADER.size or HEADER.unpack(head) != (MAGIC, seq):
            if size:
                log.warning("journal file %s has no valid header; skipped", path)
            return
        pos = HEADER.size
        while pos < size:
            problem = None
            head = self.fs.pread(fd, ENTRY_HEAD.size, pos)
            if len(head) < ENTRY_HEAD.size:
                problem = "partial entry header"
            else:
                length, crc = ENTRY_HEAD.unpack(head)
                if length < 4 + 2 + 8 or length > MAX_ENTRY:
                    problem = f"entry size {length} out of bounds"
                elif pos + 4 + length > size:
                    problem = "partial entry"
                else:
                    body = self.fs.pread(fd, length - 4, pos + ENTRY_HEAD.size)
                    if crc32c.crc32c(body) != crc:
                        problem = "CRC mismatch"
                    else:
                        try:
                            entry = decode_body(body)
                        except (ValueError, UnicodeDecodeError) as exc:
                            problem = f"undecodable entry: {exc}"
            if problem is not None:
                log.warning("journal file %s: %s at byte %d; the %d bytes from there are ignored", path, problem,
                            pos, size - pos)
                return
            yield entry
            pos += 4 + length

    def reset(self) -> None:
        """After replay: delete every file and start an empty one (numbered after the newest seen)."""
        seqs = [parse_file_name(n) or 0 for n in self._recovered]
        nxt = max(seqs, default=0) + 1
        try:
            self.switch_to(self.prepare_file(nxt))
            for name in self._recovered:
                self.fs.unlink(os.path.join(self.directory, name))
            self.fs.fsync_dir(self.directory)
        except OSError as exc:
            raise StorageError(f"cannot reset journal {self.directory}: {exc}") from exc
        self._recovered = []

    # ------------------------------------------------------------------ state
    @property
    def offline(self) -> bool:
        return self._offline is not None

    @property
    def end(self) -> int:
        return self._end

    @property
    def current_seq(self) -> int:
        return self._files[-1].seq if self._files else 0

    @property
    def current_size(self) -> int:
        """Bytes in the file taking appends (what the next checkpoint would let go)."""
        return self._files[-1].size if self._files else 0

    def _check_online(self) -> None:
        if self._offline is not None:
            raise JournalOfflineError(f"journal {self.directory} is offline: {self._offline}")

    def _go_offline(self, what: str, exc: OSError) -> JournalOfflineError:
        with self._lock:
            if self._offline is None:
                self._offline = f"{what} failed: {exc}"
                log.error("journal %s is offline: %s failed: %s", self.directory, what, exc)
        return JournalOfflineError(f"journal {self.directory} is offline: {self._offline}")

    # ------------------------------------------------------------------ append / sync
    def append(self, name: str, base_offset: int, batch: bytes | bytearray | memoryview) -> int:
        """Write one entry (page cache only); returns the journal position after it."""
        return self.append_many([(name, base_offset, batch)])

    def append_many(self, entries: Iterable[tuple[str, int, bytes | bytearray | memoryview]]) -> int:
        """Write entries (name, base offset, batch) in order with one positional write; returns the journal
        position after them. A failed write leaves none of them counted."""
        data = b"".join([encode_entry(name, base, batch) for name, base, batch in entries])
        with self._lock:
            self._check_online()
            f = self._files[-1]
            try:
                self.fs.pwrite_all(f.fd, data, f.size)
            except OSError as exc:
                failed = exc
            else:
                f.size += len(data)
                self._end += len(data)
                return self._end
        raise self._go_offline("write", failed) from failed

    def append_truncation(self, name: str, offset: int) -> int:
        """Write a truncation mark for log ``name`` at ``offset`` (page cache only; the caller syncs)."""
        return self.append_many([(name, offset, b"")])

    def append_deletion(self, name: str) -> int:
        """Write a deletion mark for log ``name`` (page cache only: any later entry's fsync covers it)."""
        return self.append_many([(name, DELETION, b"")])

    def sync(self) -> int:
        """fsync what was appended before this call; returns the durable journal position."""
        with self._sync_lock:
            plan = self._plan_sync()
            try:
                for f in plan.files:
                    self.fs.fsync(f.fd)
            except OSError as exc:
                raise self._go_offline("fsync", exc) from exc
            return self.end_sync(plan, None)

    def begin_sync(self, submit: Callable[[list[int], tuple[int, ...]], object]) -> SyncPlan:
        """The first half of a sync done elsewhere (another process): ``submit(fds, key)`` is called with the
        descriptors to fdatasync, in order, and a key naming those open files (never reused), while no
        checkpoint can close them (skipped when there are none). The caller passes the plan and the outcome to
        ``end_sync``."""
        with self._sync_lock:
            plan = self._plan_sync()
            if plan.files:
                submit([f.fd for f in plan.files], tuple(f.uid for f in plan.files))
            return plan

    def end_sync(self, plan: SyncPlan, error: OSError | None) -> int:
        """Record a sync's outcome: the durable journal position, or offline for good on an error."""
        if error is not None:
            raise self._go_offline("fsync", error) from error
        with self._lock:
            self._check_online()  # an fsync that succeeded after one failed proves nothing
            for f, e in zip(plan.files, plan.ends):
                f.synced = max(f.synced, e)
        return plan.target

    def _plan_sync(self) -> SyncPlan:
        with self._lock:
            self._check_online()
            todo = [f for f in self._files if f.synced < f.start + f.size - HEADER.size]
            return SyncPlan(self._end, todo, [f.start + f.size - HEADER.size for f in todo])

    # ------------------------------------------------------------------ checkpoints
    def prepare_file(self, seq: int | None = None) -> _File:
        """Create the next file durably (header written and fsynced, directory fsynced); not yet in use."""
        seq = self.current_seq + 1 if seq is None else seq
        path = os.path.join(self.directory, file_name(seq))
        try:
            fd = self.fs.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        except OSError as exc:
            raise self._go_offline("journal file create", exc) from exc
        try:
            self.fs.pwrite_all(fd, HEADER.pack(MAGIC, seq), 0)
            self.fs.fsync(fd)
            self.fs.fsync_dir(self.directory)
        except OSError as exc:
            self.fs.close(fd)
            raise self._go_offline("journal file create", exc) from exc
        return _File(seq, fd, HEADER.size, 0)

    def switch_to(self, f: _File) -> int:
        """Appends go to ``f`` from now on; returns its seq."""
        with self._lock:
            f.start = f.synced = self._end
            self._files.append(f)
            return f.seq

    def drop_before(self, seq: int, keep: frozenset[int] | set[int] = frozenset()) -> None:
        """Delete every file numbered below ``seq`` (their entries are durable in the logs) but those in
        ``keep``."""
        with self._sync_lock, self._lock:
            doomed = [f for f in self._files if f.seq < seq and f.seq not in keep]
            self._files = [f for f in self._files if f.seq >= seq or f.seq in keep]
        for f in doomed:
            try:
                self.fs.close(f.fd)
                self.fs.unlink(os.path.join(self.directory, file_name(f.seq)))
            except OSError as exc:
                log.warning("journal file %s not removed: %s", file_name(f.seq), exc)
        if doomed:
            try:
                self.fs.fsync_dir(self.directory)
            except OSError as exc:
                log.warning("journal directory %s not fsynced after a removal: %s", self.directory, exc)

    def seqs(self) -> list[int]:
        """The numbers of the files in use, oldest first."""
        with self._lock:
            return [f.seq for f in self._files]

    def discard(self) -> None:
        """At a clean shutdown, after every journaled log was flushed and closed: remove every file."""
        self.drop_before(self.current_seq + 1)

    def close(self) -> None:
        with self._sync_lock, self._lock:
            files, self._files = self._files, []
        for f in files:
            try:
                self.fs.close(f.fd)
            except OSError:
                pass


# ---------------------------------------------------------------------- replay
@dataclass(slots=True)
class ReplayStats:
    entries: int = 0
    appended: int = 0  # entries the logs lacked: appended now
    present: int = 0  # entries the logs already held
    skipped: int = 0  # unknown log, undecodable batch, or not at the log end (a gap): reported, not applied
    truncated: int = 0  # truncation marks that cut a log back
    deleted: int = 0  # entries of a log deleted later in the journal (before its deletion mark): settled
    missing: dict[str, int] = field(default_factory=dict)  # per log name: entries of a log not here (or offline)


def deletion_points(entries: Iterable[JournalEntry]) -> dict[str, int]:
    """The index (in journal order) of the last deletion mark of each name: pass one of a replay."""
    points: dict[str, int] = {}
    for i, e in enumerate(entries):
        if e.base_offset == DELETION and not e.batch:
            points[e.name] = i
    return points


def replay(entries: Iterable[JournalEntry], lookup: Callable[[str], PartitionLog | None],
           deleted: dict[str, int] | None = None) -> tuple[ReplayStats, list[PartitionLog]]:
    """Re-append to each log the entries it lacks, in journal order; returns the stats and the logs appended
    to (the caller fsyncs them before ``reset``). An entry is applied only when its base offset is exactly
    the log end: below it the log already holds it (same offsets, same bytes), above it is a gap that cannot
    be filled (a warning; nothing is invented). A batch keeps the leader epoch it carries (cluster mode:
    leaders journal their batches stamped, followers their leader's bytes). A truncation mark cuts a log
    that ends past it back to it (durably, ``truncate_to``). ``deleted`` (``deletion_points`` of the same
    entries): an entry of a name before that name's last deletion mark belongs to a deleted log and is
    skipped as settled. Skipped entries are summarised in one line per kind at the end."""
    stats = ReplayStats()
    deleted = deleted or {}
    touched: dict[int, PartitionLog] = {}
    for i, e in enumerate(entries):
        stats.entries += 1
        if i < deleted.get(e.name, -1) or (e.base_offset == DELETION and not e.batch):
            stats.deleted += e.base_offset != DELETION
            continue
        plog = lookup(e.name)
        if plog is None or plog.offline:
            stats.missing[e.name] = stats.missing.get(e.name, 0) + 1
            stats.skipped += 1
            continue
        if not e.batch:
            if plog.log_end_offset > e.base_offset:
                plog.truncate_to(e.base_offset)
                stats.truncated += 1
            continue
        try:
            header = parse_header(e.batch)
        except CorruptBatchError as exc:
            log.warning("journal entry for %s at offset %d: %s; skipped", e.name, e.base_offset, exc)
            stats.skipped += 1
            continue
        end = plog.log_end_offset
        if e.base_offset + header.last_offset_delta < end:
            stats.present += 1
        elif e.base_offset == end:
            epoch = header.partition_leader_epoch
            plog.append([e.batch], leader_epoch=epoch if epoch >= 0 else None)
            touched[id(plog)] = plog
            stats.appended += 1
        else:
            log.warning("journal entry for %s at offset %d does not meet the log end %d; skipped", e.name,
                        e.base_offset, end)
            stats.skipped += 1
    _summarise(stats)
    return stats, list(touched.values())


def _summarise(stats: ReplayStats) -> None:
    if stats.deleted:
        log.info("journal: %d entries of deleted logs skipped (settled by their deletion)", stats.deleted)
    if stats.missing:
        top = sorted(stats.missing.items(), key=lambda kv: (-kv[1], kv[0]))
        named = ", ".join(f"{name}: {n}" for name, n in top[:SUMMARY_NAMES])
        more = f", and {len(top) - SUMMARY_NAMES} more logs" if len(top) > SUMMARY_NAMES else ""
        log.warning("journal: %d entries of %d logs that are not here or offline skipped (%s%s)",
                    sum(stats.missing.values()), len(top), named, more)
