"""Appending one batch the node built itself (a transaction marker, a transactional offsets batch) and hearing
when it is safe to act on.

Rules:
- ``append_batch`` appends at once (the log's page-cache write; a storage error raises to the caller, nothing
  appended) and calls ``callback(None)`` once the batch is durable: on a single node when an fsync covers it,
  in cluster mode (``replication`` given) when the partition's high watermark covers it with enough in-sync
  replicas (followers are told there is news at once). ``callback(error)`` otherwise: a storage error, or
  replication's ``ReplicationError`` (lost leadership, too few in-sync replicas, ``timeout_s`` passed), whose
  ``commit_error`` / ``produce_error`` the caller picks from.
- It returns the offsets the batch got.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coordinator.runtime.group_commit import GroupCommit
    from coordinator.storage.log import AppendInfo, PartitionLog

Callback = Callable[[Exception | None], None]


def append_batch(commit: GroupCommit, plog: PartitionLog, batch: bytes, callback: Callback,
                 replication: Any = None, timeout_s: float = 30.0) -> AppendInfo:
    info = commit.append(plog, [batch])
    if replication is None:
        commit.when_durable(plog, info.last_offset, callback)
        return info
    replication.notify_append()

    def durable(err: Exception | None) -> None:
        if err is not None:
            callback(err)
        else:
            replication.when_replicated(plog, info.last_offset + 1, timeout_s, callback)

    commit.when_durable(plog, info.last_offset, durable)
    return info
