"""One offsets partition's committed offsets, laid out for millions: ``OffsetStore``.

Rules (what it means):
- It maps (group, topic, partition) to an ``OffsetCommitValue`` exactly as a ``dict[group, dict[(topic,
  partition), value]]`` would: ``get``, ``put`` (insert or replace), ``delete``, ``pop_group``,
  ``group_items`` / ``group_dict`` (one group's entries), ``groups`` and ``has_group``. A group is present
  while it holds at least one entry; ``len(store)`` is the number of entries (committed offsets) of all groups.
- Values come back equal to what was put: offset, leader epoch, metadata, commit timestamp and expire
  timestamp (None or an int64) round-trip; a value outside int64 (epochs outside int32) is refused with
  ValueError before anything changes, as the record encoder would refuse it.

Layout (why it is small; ~32 B per entry against ~400 for the dict of NamedTuples it replaces):
- Topic names are shared: each distinct topic gets a small id, its name stored once, with a count of the
  entries that use it; the id is freed (and reused) when the count drops to zero, so the table never
  outgrows the entries.
- Each group is ONE ``array('q')`` of 4n int64 words for its n entries: first the n sorted keys
  (topic id << 32 | partition as uint32), then per entry three words: offset, commit timestamp, and
  leader epoch << 2 | flags. ``bisect`` finds a key among the first n words in C.
- Flags: bit 0 the entry has metadata other than "", bit 1 an explicit expire timestamp; only then is
  ``(metadata, expire)`` kept in a side dict keyed by (group, key). Nearly every commit has neither.
- The store is sans-IO and knows nothing of groups' states, retention or records: ``Shard`` and the offsets
  handlers decide what to put and delete.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterator

from .records import OffsetCommitValue

TopicPartition = tuple[str, int]

_new_value = tuple.__new__  # a NamedTuple from a ready tuple, skipping its Python-level __new__
_HAS_METADATA, _HAS_EXPIRE = 1, 2
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_U32 = 0xFFFFFFFF
_MAX_TOPIC_IDS = 2**31 - 1


class OffsetStore:
    __slots__ = ("_count", "_extra", "_free_ids", "_groups", "_names", "_refs", "_topic_ids")

    def __init__(self) -> None:
        self._groups: dict[str, array] = {}
        self._topic_ids: dict[str, int] = {}
        self._names: list[str] = []
        self._refs: list[int] = []
        self._free_ids: list[int] = []
        self._extra: dict[tuple[str, int], tuple[str, int | None]] = {}
        self._count = 0

    # ------------------------------------------------------------ reading

    def __len__(self) -> int:
        return self._count

    def has_group(self, group: str) -> bool:
        return group in self._groups

    def groups(self) -> Iterator[str]:
        """Every group holding an entry (a snapshot: the store may change while it is iterated)."""
        return iter(list(self._groups))

    def group_count(self) -> int:
        return len(self._groups)

    def group_size(self, group: str) -> int:
        words = self._groups.get(group)
        return 0 if words is None else len(words) >> 2

    def get(self, group: str, topic: str, partition: int) -> OffsetCommitValue | None:
        words = self._groups.get(group)
        tid = self._topic_ids.get(topic)
        if words is None or tid is None:
            return None
        key = tid << 32 | (partition & _U32)
        n = len(words) >> 2
        i = bisect_left(words, key, 0, n)
        if i == n or words[i] != key:
            return None
        return self._value(group, key, words, n + 3 * i)

    def has(self, group: str, topic: str, partition: int) -> bool:
        words = self._groups.get(group)
        tid = self._topic_ids.get(topic)
        if words is None or tid is None:
            return False
        key = tid << 32 | (partition & _U32)
        n = len(words) >> 2
        i = bisect_left(words, key, 0, n)
        return i < n and words[i] == key

    def group_items(self, group: str) -> list[tuple[TopicPartition, OffsetCommitValue]]:
        """One group's entries, in (topic id, partition) order (sort them for a stable order by name)."""
        words = self._groups.get(group)
        if words is None:
            return []
        names, n = self._names, len(words) >> 2
        out = []
        for i in range(n):
            key = words[i]
            out.append(((names[key >> 32], _partition(key)), self._value(group, key, words, n + 3 * i)))
        return out

    def partition_offsets(self, group: str) -> list[tuple[TopicPartition, int]]:
        """One group's (topic, partition) and committed offset each, in (topic id, partition) order, without
        building values (the lag scan reads every entry every few seconds)."""
        words = self._groups.get(group)
        if words is None:
            return []
        names, n = self._names, len(words) >> 2
        return [((names[key >> 32], _partition(key)), offset) for key, offset in zip(words[:n], words[n::3])]

    def group_partitions(self, group: str) -> list[TopicPartition]:
        words = self._groups.get(group)
        if words is None:
            return []
        names = self._names
        return [(names[key >> 32], _partition(key)) for key in words[:len(words) >> 2]]

    def group_dict(self, group: str) -> dict[TopicPartition, OffsetCommitValue]:
        return dict(self.group_items(group))

    def as_dict(self) -> dict[str, dict[TopicPartition, OffsetCommitValue]]:
        """Everything as the plain dict of dicts it stands for (tests and diagnostics)."""
        return {group: self.group_dict(group) for group in self._groups}

    def __eq__(self, other: object) -> bool:
        """Equal when they hold the same entries (however laid out)."""
        if not isinstance(other, OffsetStore):
            return NotImplemented
        return self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]

    def _value(self, group: str, key: int, words: array, at: int) -> OffsetCommitValue:
        meta = words[at + 2]
        if meta & 3:
            metadata, expire = self._extra[(group, key)]
            return _new_value(OffsetCommitValue, (words[at], meta >> 2, metadata, words[at + 1], expire))
        return _new_value(OffsetCommitValue, (words[at], meta >> 2, "", words[at + 1], None))

    # ------------------------------------------------------------ writing

    def put(self, group: str, topic: str, partition: int, value: OffsetCommitValue) -> None:
        offset, epoch, metadata, commit_ts, expire = value
        if not (_INT64_MIN <= offset <= _INT64_MAX and _INT64_MIN <= commit_ts <= _INT64_MAX
                and _INT32_MIN <= epoch <= _INT32_MAX and _INT32_MIN <= partition <= _INT32_MAX
                and (expire is None or _INT64_MIN <= expire <= _INT64_MAX)):
            raise ValueError(f"offset commit value out of range: {value!r} for partition {partition}")
        flags = (_HAS_METADATA if metadata else 0) | (_HAS_EXPIRE if expire is not None else 0)
        self.put_words(group, topic, partition, offset, commit_ts, epoch << 2 | flags)
        if flags:
            self._extra[(group, self._topic_ids[topic] << 32 | (partition & _U32))] = (metadata, expire)

    def put_words(self, group: str, topic: str, partition: int, offset: int, commit_ts: int, meta: int) -> None:
        """Insert or replace one entry given its three words (``meta`` = epoch << 2 | flags; the caller keeps
        ``_extra`` right when flags are set: ``put`` does). The load path's fast entry."""
        words = self._groups.get(group)
        tid = self._topic_ids.get(topic)
        if tid is not None and words is not None:
            key = tid << 32 | (partition & _U32)
            n = len(words) >> 2
            i = bisect_left(words, key, 0, n)
            if i < n and words[i] == key:
                at = n + 3 * i
                if words[at + 2] & 3:
                    del self._extra[(group, key)]
                words[at] = offset
                words[at + 1] = commit_ts
                words[at + 2] = meta
                return
        else:
            if tid is None:
                tid = self._new_topic_id(topic)
            key = tid << 32 | (partition & _U32)
            if words is None:
                self._groups[group] = array("q", (key, offset, commit_ts, meta))
                self._refs[tid] += 1
                self._count += 1
                return
            n = len(words) >> 2
            i = bisect_left(words, key, 0, n)
        # a new entry at position i: the vals first (their place shifts with the key insert)
        at = n + 3 * i
        words[at:at] = array("q", (offset, commit_ts, meta))
        words.insert(i, key)
        self._refs[tid] += 1
        self._count += 1

    def topic_id(self, topic: str) -> int:
        """The topic's id, allocated when new (the load path's; ``adopt`` counts its uses)."""
        tid = self._topic_ids.get(topic)
        return self._new_topic_id(topic) if tid is None else tid

    def adopt(self, group: str, keys: list[int], vals: list[int]) -> None:
        """A group not held yet gets its entries at once (the load path): ``keys`` strictly increasing, built
        from ``topic_id`` ids as ``tid << 32 | partition & 0xFFFFFFFF``, and ``vals`` their three words each,
        with no flags (what ``put_words`` would have built one entry at a time)."""
        assert group not in self._groups and len(vals) == 3 * len(keys)
        if not keys:
            return
        words = array("q", keys)
        words.extend(array("q", vals))
        self._groups[group] = words
        refs = self._refs
        for key in keys:
            refs[key >> 32] += 1
        self._count += len(keys)

    def delete(self, group: str, topic: str, partition: int) -> bool:
        """Remove one entry; False when there was none."""
        words = self._groups.get(group)
        tid = self._topic_ids.get(topic)
        if words is None or tid is None:
            return False
        key = tid << 32 | (partition & _U32)
        n = len(words) >> 2
        i = bisect_left(words, key, 0, n)
        if i == n or words[i] != key:
            return False
        at = n + 3 * i
        if words[at + 2] & 3:
            del self._extra[(group, key)]
        if n == 1:
            del self._groups[group]
        else:
            del words[at:at + 3]
            del words[i]
        self._release_topic(tid)
        self._count -= 1
        return True

    def pop_group(self, group: str) -> int:
        """Remove a group's every entry; the number removed."""
        words = self._groups.pop(group, None)
        if words is None:
            return 0
        n = len(words) >> 2
        for i in range(n):
            key = words[i]
            if words[n + 3 * i + 2] & 3:
                del self._extra[(group, key)]
            self._release_topic(key >> 32)
        self._count -= n
        return n

    def _new_topic_id(self, topic: str) -> int:
        if self._free_ids:
            tid = self._free_ids.pop()
            self._names[tid] = topic
        else:
            tid = len(self._names)
            if tid > _MAX_TOPIC_IDS:
                raise ValueError("too many distinct topics in one offsets partition")
            self._names.append(topic)
            self._refs.append(0)
        self._topic_ids[topic] = tid
        return tid

    def _release_topic(self, tid: int) -> None:
        refs = self._refs
        refs[tid] -= 1
        if refs[tid] == 0:
            del self._topic_ids[self._names[tid]]
            self._names[tid] = ""
            self._free_ids.append(tid)

    def topic_count(self) -> int:
        """Distinct topic names held (each stored once)."""
        return len(self._topic_ids)


def _partition(key: int) -> int:
    p = key & _U32
    return p - 0x100000000 if p > _INT32_MAX else p
