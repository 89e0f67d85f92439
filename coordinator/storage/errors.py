"""Storage errors.

Rules:
- `StorageError` is every storage failure a caller can report (bad data dir, unknown partition...).
- `LogOfflineError`: a write or fsync failed once; the partition stays offline until restart and the
  failure is never retried (after a failed fsync the page cache state is unknown, so retrying could
  acknowledge data that is not on disk).
- `LogClosedError`: the log was closed (its topic deleted, or shutdown). Not a failure of the disk: what
  was written to a deleted log is settled, and a caller must not count it as a failed fsync.
- `OffsetOutOfRangeError`: a read below the log start offset or beyond the log end offset.
"""

from __future__ import annotations


class StorageError(Exception):
    """A storage failure with a message fit for a log line or a startup error."""


class LogOfflineError(StorageError):
    """The partition log is offline after a write/fsync error; every append and flush raises this."""


class LogClosedError(StorageError):
    """The partition log is closed (its topic was deleted, or the server is stopping)."""


class OffsetOutOfRangeError(StorageError):
    """The requested offset is outside [log start offset, log end offset]."""
