"""A small durable key-value store on a partition log: the single node's users (SCRAM credentials) and ACLs.

Rules:
- Layout: ``<data dir>/security/`` is one partition log (segments, index, recovery as every log) holding
  keyed records; the latest record of a key is its value, a null value deletes it (a tombstone). The
  directory is not ``<topic>-<partition>``: it is no topic, and no client can read or write it.
- ``open`` recovers the log and replays every record into memory (``items``); a batch that fails its CRC
  ends recovery there, as for any log (a torn tail never stops startup).
- ``write(changes)`` appends all its records as ONE batch and fsyncs before returning: a change is
  acknowledged only once durable, and a batch is all or nothing at a crash. It blocks (a file write and an
  fsync): the runtime calls it in a worker thread. Writes are rare (an admin's change), so no group commit.
- Bounded: when the log holds more than ``COMPACT_FACTOR`` times the live records plus ``COMPACT_SLACK``, a
  write rewrites the live set into a fresh log (written and fsynced in ``<dir>.new``; the old one renamed
  to ``<dir>.old``, the new one into place, the directory fsynced). ``open`` finishes a rewrite a crash
  cut short: with ``<dir>`` gone, the whole ``<dir>.new`` takes its place.
- Keys and values are bytes; what they mean belongs to the caller (``coordinator/runtime/security``).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterable

from protocol.record_batch import build_kv_batch, iter_records

from .errors import StorageError
from .fs import FileSystem
from .log import LogConfig, PartitionLog

SECURITY_DIR = "security"
COMPACT_FACTOR = 4
COMPACT_SLACK = 1000
_CONFIG = LogConfig(segment_bytes=64 << 20, retention_ms=None, retention_bytes=None, compact=False,
                    delete=False)


class KeyedStore:
    def __init__(self, directory: str, fs: FileSystem | None = None) -> None:
        self.directory = directory
        self.fs = fs or FileSystem()
        self._lock = threading.Lock()
        self._items: dict[bytes, bytes] = {}
        self._records = 0  # records in the log (live and dead)
        self._log = PartitionLog.open(directory, _CONFIG, self.fs)
        self._replay()

    @classmethod
    def open(cls, data_dir: str, name: str = SECURITY_DIR, fs: FileSystem | None = None) -> KeyedStore:
        path = os.path.join(os.path.abspath(data_dir), name)
        try:
            _finish_rewrite(path)
            return cls(path, fs)
        except OSError as e:
            raise StorageError(f"cannot open {path}: {e}") from e

    def _replay(self) -> None:
        plog = self._log
        offset, end = plog.log_start_offset, plog.log_end_offset
        while offset < end:
            data = plog.read(offset, 1 << 20, upper_bound=end)
            if not data:
                break
            for rec in iter_records(data):
                self._records += 1
                offset = rec.offset + 1
                if rec.key is None:
                    continue
                if rec.value is None:
                    self._items.pop(bytes(rec.key), None)
                else:
                    self._items[bytes(rec.key)] = bytes(rec.value)

    def items(self) -> dict[bytes, bytes]:
        with self._lock:
            return dict(self._items)

    def get(self, key: bytes) -> bytes | None:
        return self._items.get(key)

    def write(self, changes: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Apply ``changes`` (value None deletes) durably, all or nothing; blocks (worker thread)."""
        records = list(changes)
        if not records:
            return
        with self._lock:
            batch = build_kv_batch(records, int(time.time() * 1000))
            self._log.append([batch])
            self._log.flush()
            for key, value in records:
                if value is None:
                    self._items.pop(key, None)
                else:
                    self._items[key] = value
            self._records += len(records)
            if self._records > COMPACT_FACTOR * len(self._items) + COMPACT_SLACK:
                self._rewrite()

    def _rewrite(self) -> None:
        """The live set into a fresh log, swapped in by rename (caller holds the lock)."""
        fresh_dir = self.directory + ".new"
        shutil.rmtree(fresh_dir, ignore_errors=True)
        fresh = PartitionLog.open(fresh_dir, _CONFIG, self.fs)
        items = sorted(self._items.items())
        now = int(time.time() * 1000)
        for i in range(0, len(items), 500):
            fresh.append([build_kv_batch(items[i:i + 500], now)])
        fresh.flush()
        fresh.close()
        self._log.close()
        old = self.directory + ".old"
        shutil.rmtree(old, ignore_errors=True)
        os.rename(self.directory, old)
        os.rename(fresh_dir, self.directory)
        self.fs.fsync_dir(os.path.dirname(self.directory))
        shutil.rmtree(old, ignore_errors=True)
        self._log = PartitionLog.open(self.directory, _CONFIG, self.fs)
        self._records = len(items)

    def close(self) -> None:
        with self._lock:
            self._log.close()


def _finish_rewrite(path: str) -> None:
    """A crash during ``_rewrite``: the fresh log was whole (fsynced) before the first rename, so with the
    live directory gone it takes its place; with the live directory there, leftovers go."""
    fresh, old = path + ".new", path + ".old"
    if not os.path.isdir(path) and os.path.isdir(fresh) and os.path.isdir(old):
        os.rename(fresh, path)
    shutil.rmtree(fresh, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)
