"""LogManager: the partition logs under one data directory.

Rules:
- Layout: `<data dir>/<topic>-<partition>/` per partition; topic names follow Kafka's rule
  ([a-zA-Z0-9._-], at most 249 characters, not "." or "..") so a name can never escape the data dir.
- At open the data dir is created if missing and must be writable (a probe file is written and removed),
  otherwise `StorageError("data dir ... is not writable: ...")`. Every `<topic>-<partition>` directory is
  opened (and recovered); directories left by an interrupted delete (`*.deleted`) are removed.
- Deleting a partition closes its log, renames its directory to `<name>.deleted` (fsync the data dir),
  then removes it; a crash in between is finished at the next open.
- One process per data dir: an exclusive, non-blocking `flock` on `<data dir>/.lock` is held from open to
  close; a second process gets `StorageError("data dir ... is in use by another process")`.
- `<data dir>/topic-configs/` holds topic config overrides (topic_config_store.py), not a partition.
- `<data dir>/journal/` is the shared write-ahead journal (see journal.py), not a partition: `open_journal`
  replays it into the logs (after they recovered) and starts it afresh. Deleting a partition while the
  journal is open writes a deletion mark for it first, so its entries are settled and a topic re-created
  under the same name never gets them back at a replay.
- Not thread-safe for create/delete: the runtime calls these from one task; each log is thread-safe
  for one appender + one flusher on its own.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil

from .errors import StorageError
from .fs import FileSystem
from .journal import Journal, ReplayStats, deletion_points, replay
from .keyed_store import SECURITY_DIR
from .log import LogConfig, PartitionLog
from .topic_config_store import CONFIG_DIR

log = logging.getLogger(__name__)

_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_DELETED_SUFFIX = ".deleted"
_PROBE = ".groupcoord-write-probe"
_LOCK = ".lock"
JOURNAL_DIR = "journal"
# the security store's log and its rewrite's leftovers (keyed_store.py), the audit trail's log
# (runtime/security/audit.py): not partitions of a topic
_NOT_TOPICS = frozenset({SECURITY_DIR, SECURITY_DIR + ".new", SECURITY_DIR + ".old", "audit"})


def partition_dir_name(topic: str, partition: int) -> str:
    if not _TOPIC_RE.match(topic) or topic in (".", ".."):
        raise StorageError(f"invalid topic name {topic!r}")
    if partition < 0:
        raise StorageError(f"invalid partition {partition}")
    return f"{topic}-{partition}"


def parse_partition_dir_name(name: str) -> tuple[str, int] | None:
    topic, dash, number = name.rpartition("-")
    if not dash or not number.isdigit() or not _TOPIC_RE.match(topic) or topic in (".", ".."):
        return None
    return topic, int(number)


class LogManager:
    """Owns the `PartitionLog`s of a data dir. `config_for(topic)` gives each topic's `LogConfig`."""

    def __init__(self, data_dir: str, default_config: LogConfig | None = None, fs: FileSystem | None = None,
                 topic_configs: dict[str, LogConfig] | None = None) -> None:
        self.data_dir = os.path.abspath(data_dir)
        self.default_config = default_config or LogConfig()
        self.topic_configs = dict(topic_configs or {})
        self.fs = fs or FileSystem()
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._lock_fd: int | None = None
        self.journal: Journal | None = None  # set by open_journal: deletions write their marks into it
        self._check_data_dir()
        self._lock_data_dir()
        try:
            self._open_all()
        except BaseException:
            self._unlock_data_dir()
            raise

    def _lock_data_dir(self) -> None:
        path = os.path.join(self.data_dir, _LOCK)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot create lock file {path}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StorageError(f"data dir {self.data_dir} is in use by another process (lock {path})") from None
        self._lock_fd = fd

    def _unlock_data_dir(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None

    def _check_data_dir(self) -> None:
        probe = os.path.join(self.data_dir, _PROBE)
        try:
            self.fs.makedirs(self.data_dir)
            fd = self.fs.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            try:
                self.fs.write_all(fd, b"ok")
            finally:
                self.fs.close(fd)
            self.fs.unlink(probe)
        except OSError as exc:
            raise StorageError(f"data dir {self.data_dir} is not writable: {exc}") from exc

    def _open_all(self) -> None:
        for name in sorted(self.fs.listdir(self.data_dir)):
            path = os.path.join(self.data_dir, name)
            if not os.path.isdir(path) or name in (JOURNAL_DIR, CONFIG_DIR) or name in _NOT_TOPICS:
                continue
            if name.endswith(_DELETED_SUFFIX):
                shutil.rmtree(path, ignore_errors=True)
                continue
            parsed = parse_partition_dir_name(name)
            if parsed is None:
                log.warning("data dir %s: ignoring directory %s (not <topic>-<partition>)", self.data_dir, name)
                continue
            self._logs[parsed] = PartitionLog.open(path, self.config_for(parsed[0]), self.fs)

    def config_for(self, topic: str) -> LogConfig:
        return self.topic_configs.get(topic, self.default_config)

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def partitions(self) -> list[tuple[str, int]]:
        return sorted(self._logs)

    def create(self, topic: str, partition: int, config: LogConfig | None = None) -> PartitionLog:
        """Create (or return the existing) log of a partition."""
        key = (topic, partition)
        if key in self._logs:
            return self._logs[key]
        if config is not None:
            self.topic_configs[topic] = config
        path = os.path.join(self.data_dir, partition_dir_name(topic, partition))
        plog = PartitionLog.open(path, self.config_for(topic), self.fs)
        try:
            self.fs.fsync_dir(self.data_dir)
        except OSError as exc:
            plog.close()
            raise StorageError(f"cannot create partition {topic}-{partition}: {exc}") from exc
        self._logs[key] = plog
        return plog

    def delete(self, topic: str, partition: int) -> None:
        """Close and remove a partition's log and directory."""
        plog = self._logs.pop((topic, partition), None)
        if plog is None:
            raise StorageError(f"unknown partition {topic}-{partition}")
        if self.journal is not None:
            try:
                self.journal.append_deletion(plog.name)
            except StorageError as exc:  # offline journal: nothing journaled from now on can be acknowledged
                log.warning("journal: no deletion mark for %s-%d: %s", topic, partition, exc)
        plog.close()
        path = plog.directory
        doomed = path + _DELETED_SUFFIX
        try:
            self.fs.rename(path, doomed)
            self.fs.fsync_dir(self.data_dir)
        except OSError as exc:
            raise StorageError(f"cannot delete partition {topic}-{partition}: {exc}") from exc
        shutil.rmtree(doomed, ignore_errors=True)

    def by_dir_name(self, name: str) -> PartitionLog | None:
        parsed = parse_partition_dir_name(name)
        return None if parsed is None else self._logs.get(parsed)

    def open_journal(self) -> tuple[Journal, ReplayStats]:
        """Open ``<data dir>/journal``, re-append to the logs what they lack of it (a crash lost their page
        cache, not the journal), fsync those logs, and start the journal afresh."""
        journal = Journal.open(os.path.join(self.data_dir, JOURNAL_DIR), self.fs)
        try:
            stats, touched = replay(journal.recovered(), self.by_dir_name, deletion_points(journal.recovered()))
            for plog in touched:
                plog.flush()
            journal.reset()
        except (StorageError, OSError) as exc:
            journal.close()
            raise StorageError(f"cannot recover the journal in {self.data_dir}: {exc}") from exc
        if stats.entries:
            log.info("journal: %d entries read, %d re-appended, %d already in their logs, %d skipped, %d "
                     "truncations, %d of deleted logs", stats.entries, stats.appended, stats.present, stats.skipped,
                     stats.truncated, stats.deleted)
        self.journal = journal
        return journal, stats

    def flush_all(self) -> None:
        for plog in list(self._logs.values()):
            if not plog.offline:
                plog.flush()

    def close(self) -> None:
        self.journal = None
        try:
            for plog in list(self._logs.values()):
                plog.close()
            self._logs.clear()
        finally:
            self._unlock_data_dir()
