"""Pending transactional offsets of one offsets partition (KIP-98/447: Kafka's pendingTransactionalOffsetCommits).

Rules:
- A TxnOffsetCommit's records form one transactional batch of a producer id (pid). Once that batch is replayed
  (durable, or read at load) its offsets are PENDING for that pid: OffsetFetch does not see them (but answers
  UNSTABLE_OFFSET_COMMIT to ``require_stable``), retention never expires them, nor their group.
- A record of the same pid for the same (group, topic, partition) replaces that pid's pending entry; a tombstone
  in a transactional batch removes it (Kafka's load).
- The COMMIT marker for the pid (``complete(pid, True)``) returns its entries to install as committed offsets,
  each unless something later in the log already committed that partition: "a later commit wins by log
  position". That is tracked without log positions: each pending entry carries the replay sequence number it
  got here (replay order is log order), and is marked superseded when
  * a plain commit of the same partition is replayed while it is pending (``plain_committed``), or
  * a COMMIT of another pid installs an entry of that partition replayed after it.
  The ABORT marker drops the pid's entries. Either way the pid is forgotten; a marker for a pid with no
  pending entries changes nothing.
- A plain tombstone of a partition (OffsetDelete, DeleteGroups) drops every pid's pending entry of it (Kafka's
  ``removeOffsets``); ``drop_group`` drops a deleted group's entries (its group is gone: Kafka forgets them).
- ``keys`` is truthy exactly while some entry is pending: callers on the replay hot path test it before
  building a key, so a shard without transactions pays one truthiness test per record.
Sans-IO, no clock: pure bookkeeping on decoded values.
"""

from __future__ import annotations

from collections.abc import Iterator

from .records import OffsetCommitValue

Key = tuple[str, str, int]  # (group, topic, partition)


class _Entry:
    __slots__ = ("seq", "superseded", "value")

    def __init__(self, value: OffsetCommitValue, seq: int) -> None:
        self.value = value
        self.seq = seq
        self.superseded = False


class TxnOffsets:
    __slots__ = ("_by_group", "_by_pid", "_seq", "keys")

    def __init__(self) -> None:
        self._by_pid: dict[int, dict[Key, _Entry]] = {}
        self.keys: dict[Key, dict[int, _Entry]] = {}  # partition -> pid -> its entry (the same objects)
        self._by_group: dict[str, int] = {}  # group -> pending entries
        self._seq = 0

    # ------------------------------------------------------------ replay
    def add(self, pid: int, key: Key, value: OffsetCommitValue) -> None:
        """A record of ``pid``'s transactional batch (the newest of that partition for that pid)."""
        self._seq += 1
        entry = _Entry(value, self._seq)
        entries = self._by_pid.setdefault(pid, {})
        if key not in entries:
            self._by_group[key[0]] = self._by_group.get(key[0], 0) + 1
        entries[key] = entry
        self.keys.setdefault(key, {})[pid] = entry

    def remove(self, pid: int, key: Key) -> None:
        """A tombstone in ``pid``'s transactional batch."""
        entries = self._by_pid.get(pid)
        if entries is not None and key in entries:
            self._unlink(pid, key)
            del entries[key]
            if not entries:
                del self._by_pid[pid]

    def plain_committed(self, key: Key) -> None:
        """A plain (non-transactional) commit of ``key`` was replayed: every pending entry of it is older."""
        holders = self.keys.get(key)
        if holders:
            for entry in holders.values():
                entry.superseded = True

    def plain_deleted(self, key: Key) -> None:
        """A plain tombstone of ``key`` was replayed: no pid keeps a pending entry of it."""
        holders = self.keys.get(key)
        if holders:
            for pid in list(holders):
                self.remove(pid, key)

    def complete(self, pid: int, commit: bool) -> list[tuple[Key, OffsetCommitValue]]:
        """The marker of ``pid``: forget it; with COMMIT, the entries to install (those not superseded)."""
        entries = self._by_pid.pop(pid, None)
        if not entries:
            return []
        out = []
        for key, entry in entries.items():
            self._unlink(pid, key)
            if not commit or entry.superseded:
                continue
            out.append((key, entry.value))
            for other in self.keys.get(key, {}).values():  # other pids' older entries lose to this one
                if other.seq < entry.seq:
                    other.superseded = True
        return out

    def drop_group(self, group: str) -> None:
        """The group was deleted: its pending entries go with it."""
        if not self._by_group.get(group):
            return
        for pid in list(self._by_pid):
            for key in [k for k in self._by_pid[pid] if k[0] == group]:
                self.remove(pid, key)

    def _unlink(self, pid: int, key: Key) -> None:
        holders = self.keys[key]
        del holders[pid]
        if not holders:
            del self.keys[key]
        n = self._by_group[key[0]] - 1
        if n:
            self._by_group[key[0]] = n
        else:
            del self._by_group[key[0]]

    # ------------------------------------------------------------ reading
    def has(self, key: Key) -> bool:
        return key in self.keys

    def has_group(self, group: str) -> bool:
        return group in self._by_group

    def groups(self) -> Iterator[str]:
        return iter(self._by_group)

    def producers(self) -> set[int]:
        """The pids with pending entries (each awaits its marker)."""
        return set(self._by_pid)

    def pending(self, pid: int) -> dict[Key, OffsetCommitValue]:
        """``pid``'s pending entries (superseded ones included), for inspection."""
        return {key: entry.value for key, entry in self._by_pid.get(pid, {}).items()}

    def __len__(self) -> int:
        return sum(len(entries) for entries in self._by_pid.values())
