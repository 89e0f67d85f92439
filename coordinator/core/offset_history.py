"""Offset history (issue #37 item 4): the last ``offsets.history.size`` commits of each group and partition.

Rules:
- What is kept: per (group, topic, partition) up to ``size`` commits, each with its sequence number, committed
  offset, commit time (the stored commit timestamp), generation, member id, client id and client host (the
  connection's). A commit adds an entry only when it CHANGES something against the partition's newest kept entry:
  another offset, generation or committer (member, client id, host). So a consumer re-committing the same offset
  every auto-commit interval does not push real moves out of the history, and a reset by an admin tool is always
  recorded (another committer). A move by the same committer (and generation) less than
  ``offsets.history.min.interval.ms`` (1 s) after the newest kept entry is not recorded either: a consumer
  committing hundreds of times a second keeps one entry a second (so a rewind to a time is exact to that
  interval for it) and pays the second record about once a second, not per commit. Transactional offsets (TxnOffsetCommit) are not recorded.
- Record (ours, in the group's offsets partition; Kafka uses key versions 0-8 and 16, rebalance_history 1000,
  group_configs 1001): key = int16 1002, group string, topic string, int32 partition, int32 slot, where
  slot = seq % offsets.history.size, so compaction (latest per key) keeps at most ``size`` per partition; it is
  the offset commit's own key (v1) with another version and the slot appended. Value = int16 0, int64 seq, int64
  offset, int64 commit timestamp, int32 generation, member id, client id, client host (strings as in records.py).
  It is written in the SAME batch as the offset commit record (right after it), so it is durable exactly when the
  offset is, and a follower or a restart replays both.
- Seq: per partition, taken when the record is written (``stage``), continuing after the highest replayed one; a
  write that fails leaves a gap (harmless: order is all seq is for).
- Replay (load, following, and after the durable write, like every record): a record sets its partition's slot,
  a tombstone clears it. The hot commit path (``commit_one``) applies the staged entry itself once durable, as
  replay of its record would (``apply``).
- Removal: every offset tombstone a handler or the retention timer writes (DeleteGroups, OffsetDelete, expiry)
  is followed in the same write by tombstones for every slot its partition's history holds
  (``forget_tombstoned``): a partition's history lives as long as its committed offset. Slots at or past the size
  (it was lowered) are tombstoned by the next entry of that partition. Size 0: nothing new is written; what is
  stored stays readable.
- Read: ``entries(group)`` (per partition, newest first) and ``wire`` (DescribeGroups v5+: our own tagged field
  ``offset_history``, beside the rebalance history's; Kafka clients skip it, KIP-482). Not a tagged field of
  OffsetFetch (the hottest read: every consumer's start) and not a request tag asking for it (the cross-encoding
  tests generate request bodies from our declarations and Kafka's classes have no such field). Rewinding to a time is the client's business
  (``client/admin_cli.py``): the newest entry at or before that time of each partition is what the group had
  committed then; the rewind is an ordinary OffsetCommit, recorded here like any other with who sent it.

Design (why records of our own, and why this layout):
- Compaction keeps the latest record per key. The alternative, compaction keeping the last N records of an offset
  key, would still not know who committed: Kafka's OffsetCommitValue has no generation, member, client id or host,
  and changing it breaks every tool that reads ``__consumer_offsets`` (tests/compat). So the history gets records
  of its own, keyed by slot. Cost: a second, ~80-byte record per commit that moved an offset, in the same batch
  (one more append into the same group-commit round and fsync; no extra round trip): the coordinator bench's
  commits/s with it on against off is the check (>= 0.95x; figures in the report of the change).
- Memory (target <= 64 B per kept commit): no object per commit. Per partition ONE ``array('q')``: word 0 the
  next seq, word 1 the newest slot (-1: none), then per slot four words: seq (-1: empty), offset, commit time,
  generation << 32 | committer id. Committers (member, client id, host) are interned per offsets partition with a
  use count and freed at zero (a group has few members at a time). 32 B per kept commit plus the ring's array
  header, dict entry and (topic, partition) tuple spread over ``size`` entries: ~45 B at size 16
  (tests/core/test_offset_history.py measures it with tracemalloc).
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Callable, Iterable
from typing import NamedTuple

from .records import RecordError, decode_offset_key

OFFSET_HISTORY_KEY_VERSION = 1002
_KEY_HEAD = b"\x03\xea"  # int16 1002
OFFSET_HISTORY_VALUE_VERSION = 0

_H, _I = struct.Struct(">h"), struct.Struct(">i")
_SLOT = struct.Struct(">i")
_HEAD = struct.Struct(">hqqqi")  # version, seq, offset, commit timestamp, generation
_U32 = 0xFFFFFFFF
_EMPTY_SLOT = (-1, 0, 0, 0)

TopicPartition = tuple[str, int]
Who = tuple[str, str, str]  # member id, client id, client host


class OffsetHistoryRecordError(RecordError):
    """An offset history record does not decode."""


class Entry(NamedTuple):
    """One kept commit of a partition."""

    seq: int
    offset: int
    commit_ms: int
    generation: int
    member_id: str
    client_id: str
    client_host: str


class Staged(NamedTuple):
    """What ``stage`` wrote for one commit: its records (the entry first, then tombstones of slots past the size)
    and the entry to ``apply`` once durable."""

    records: list[tuple[bytes, bytes | None]]
    group: str
    tp: TopicPartition
    slot: int
    seq: int
    offset: int
    commit_ms: int
    generation: int
    who: Who


class OffsetHistory:
    """One offsets partition's offset histories: a ring per (group, topic, partition) and the committers."""

    __slots__ = ("_enc", "_free", "_refs", "_who_ids", "_whos", "rings")

    def __init__(self) -> None:
        self.rings: dict[str, dict[TopicPartition, array]] = {}
        self._who_ids: dict[Who, int] = {}
        self._whos: list[Who | None] = []
        self._enc: list[bytes] = []  # each committer's three strings, encoded
        self._refs: list[int] = []
        self._free: list[int] = []

    # ------------------------------------------------------------ reading

    def __len__(self) -> int:
        """Kept commits of every partition (a scan: tests and diagnostics)."""
        return sum(1 for rings in self.rings.values() for ring in rings.values() for s in ring[2::4] if s >= 0)

    def committers(self) -> int:
        return len(self._who_ids)

    def entries(self, group_id: str) -> dict[TopicPartition, list[Entry]]:
        """The group's kept commits per partition, newest first (partitions without any left out)."""
        out: dict[TopicPartition, list[Entry]] = {}
        for tp, ring in sorted(self.rings.get(group_id, {}).items()):
            kept = []
            for at in range(2, len(ring), 4):
                seq = ring[at]
                if seq >= 0:
                    word = ring[at + 3]
                    who = self._whos[word & _U32]
                    assert who is not None
                    kept.append(Entry(seq, ring[at + 1], ring[at + 2], word >> 32, *who))
            if kept:
                kept.sort(key=lambda e: e.seq, reverse=True)
                out[tp] = kept
        return out

    # ------------------------------------------------------------ writing (the commit paths)

    def stage(self, size: int, offset_key: bytes, group: str, tp: TopicPartition, offset: int, commit_ms: int,
              generation: int, who: Who, min_interval_ms: int = 0) -> Staged | None:
        """The records for one commit of ``offset_key`` (its encoded OffsetCommitKey v1), or None: size 0, nothing
        changed against the newest kept entry, or the same committer (and generation) within ``min_interval_ms`` of
        it (module rules). Takes the seq; changes nothing else."""
        if size <= 0:
            return None
        rings = self.rings.get(group)
        ring = rings.get(tp) if rings is not None else None
        wid = self._who_ids.get(who)
        if ring is not None:
            newest = ring[1]
            if newest >= 0:
                at = 2 + 4 * newest
                if wid is not None and ring[at + 3] == (generation << 32 | wid) and (
                        ring[at + 1] == offset or 0 <= commit_ms - ring[at + 2] < min_interval_ms):
                    return None
        elif rings is None:
            rings = self.rings[group] = {}
            ring = rings[tp] = array("q", (0, -1))
        else:
            ring = rings[tp] = array("q", (0, -1))
        seq = ring[0]
        slot = seq % size
        enc = self._enc[wid] if wid is not None else _who_bytes(who)
        key_tail = offset_key[2:]
        records: list[tuple[bytes, bytes | None]] = [
            (_KEY_HEAD + key_tail + _SLOT.pack(slot), _HEAD.pack(0, seq, offset, commit_ms, generation) + enc)]
        ring[0] = seq + 1  # taken now: another commit before this one is durable gets the next seq
        if len(ring) > 2 + 4 * size:  # the size was lowered: the slots past it go
            for s in range(size, (len(ring) - 2) // 4):
                if ring[2 + 4 * s] >= 0:
                    records.append((_KEY_HEAD + key_tail + _SLOT.pack(s), None))
        return Staged(records, group, tp, slot, seq, offset, commit_ms, generation, who)

    def apply_staged(self, staged: Staged) -> None:
        """``staged``'s records are durable: what replaying them does."""
        self.apply(staged.group, staged.tp, staged.slot, staged.seq, staged.offset, staged.commit_ms,
                   staged.generation, staged.who)
        for key, _ in staged.records[1:]:
            self.replay(key, None)

    def apply(self, group: str, tp: TopicPartition, slot: int, seq: int, offset: int, commit_ms: int,
              generation: int, who: Who) -> None:
        if not (0 <= slot < 1 << 20):
            raise OffsetHistoryRecordError(f"offset history slot {slot} out of range")
        rings = self.rings.get(group)
        if rings is None:
            rings = self.rings[group] = {}
        ring = rings.get(tp)
        if ring is None:
            ring = rings[tp] = array("q", (0, -1))
        at = 2 + 4 * slot
        if len(ring) <= at:
            ring.extend(array("q", _EMPTY_SLOT * ((at - len(ring)) // 4 + 1)))
        elif ring[at] >= 0:
            self._release(ring[at + 3] & _U32)
        ring[at] = seq
        ring[at + 1] = offset
        ring[at + 2] = commit_ms
        ring[at + 3] = generation << 32 | self._intern(who)
        newest = ring[1]
        if newest == slot:  # the newest entry was replaced (by a newer one, unless replays come out of order)
            _renew_newest(ring)
        elif newest < 0 or seq > ring[2 + 4 * newest]:
            ring[1] = slot
        if seq >= ring[0]:
            ring[0] = seq + 1

    def replay(self, key: bytes, value: bytes | None) -> None:
        group, tp, slot = decode_key(key)
        if value is None:
            self._clear(group, tp, slot)
            return
        seq, offset, commit_ms, generation, who = decode_value(value)  # decoded whole: a bad value changes nothing
        self.apply(group, tp, slot, seq, offset, commit_ms, generation, who)

    def keys_of(self, group: str, tp: TopicPartition) -> list[bytes]:
        """The keys of every slot the partition's history holds (to tombstone with its offset)."""
        ring = self.rings.get(group, {}).get(tp)
        if ring is None:
            return []
        tail = _encode_key_tail(group, tp)
        return [_KEY_HEAD + tail + _SLOT.pack(s) for s in range((len(ring) - 2) // 4) if ring[2 + 4 * s] >= 0]

    def _clear(self, group: str, tp: TopicPartition, slot: int) -> None:
        rings = self.rings.get(group)
        ring = rings.get(tp) if rings is not None else None
        at = 2 + 4 * slot
        if ring is None or slot < 0 or len(ring) <= at or ring[at] < 0:
            return
        self._release(ring[at + 3] & _U32)
        ring[at:at + 4] = array("q", _EMPTY_SLOT)
        if ring[1] == slot:
            _renew_newest(ring)
        if ring[1] < 0:  # nothing kept: the partition's ring goes (and the group's dict with its last)
            assert rings is not None
            del rings[tp]
            if not rings:
                del self.rings[group]

    def _intern(self, who: Who) -> int:
        wid = self._who_ids.get(who)
        if wid is None:
            if self._free:
                wid = self._free.pop()
                self._whos[wid], self._enc[wid] = who, _who_bytes(who)
            else:
                wid = len(self._whos)
                self._whos.append(who)
                self._enc.append(_who_bytes(who))
                self._refs.append(0)
            self._who_ids[who] = wid
        self._refs[wid] += 1
        return wid

    def _release(self, wid: int) -> None:
        refs = self._refs
        refs[wid] -= 1
        if refs[wid] == 0:
            who = self._whos[wid]
            assert who is not None
            del self._who_ids[who]
            self._whos[wid] = None
            self._enc[wid] = b""
            self._free.append(wid)


def _renew_newest(ring: array) -> None:
    best, newest = -1, -1
    for s in range((len(ring) - 2) // 4):
        seq = ring[2 + 4 * s]
        if seq > best:
            best, newest = seq, s
    ring[1] = newest


def is_offset_history_key(key: bytes) -> bool:
    return key[:2] == _KEY_HEAD


# ---------------------------------------------------------------- the coordinator's hooks

def forget_tombstoned(histories: list[OffsetHistory], records: list, first: int = 0
                      ) -> list[tuple[int, bytes, None]]:
    """For every offset tombstone in ``records[first:]`` (shard id, key, value), a tombstone for each slot of its
    partition's history: the records to write with them, in the same write."""
    out: list[tuple[int, bytes, None]] = []
    for shard_id, key, value in records[first:]:
        if value is not None or key[:2] not in (b"\x00\x00", b"\x00\x01"):
            continue
        try:
            decoded = decode_offset_key(key)
        except RecordError:
            continue
        if decoded is not None:
            out.extend((shard_id, k, None) for k in histories[shard_id].keys_of(decoded[0], decoded[1]))
    return out


def wire(history: OffsetHistory, group_id: str) -> list[dict]:
    """The group's offset history as DescribeGroups' ``offset_history`` topics, partitions newest entry first."""
    topics: dict[str, list[dict]] = {}
    for (topic, partition), kept in history.entries(group_id).items():
        topics.setdefault(topic, []).append({"partition_index": partition, "entries": [
            {"seq": e.seq, "committed_offset": e.offset, "commit_timestamp": e.commit_ms, "generation": e.generation,
             "member_id": e.member_id, "client_id": e.client_id, "client_host": e.client_host} for e in kept]})
    return [{"name": t, "partitions": parts} for t, parts in topics.items()]


def attach(completions: Iterable[tuple[object, dict]], token: object,
           history_of: Callable[[str], OffsetHistory | None]) -> None:
    """Ours (DescribeGroups v5+): each described group's offset history."""
    response = next((r for t, r in completions if t is token), None)
    for g in response["groups"] if response is not None else ():
        gid = g.get("group_id")
        history = history_of(gid) if gid else None
        if history is not None:
            topics = wire(history, gid)
            if topics:
                g["offset_history"] = topics


# ---------------------------------------------------------------- codec

def _str(s: str) -> bytes:
    b = s.encode("utf-8", "replace")[:32767]
    return _H.pack(len(b)) + b


def _who_bytes(who: Who) -> bytes:
    return _str(who[0]) + _str(who[1]) + _str(who[2])


def _encode_key_tail(group: str, tp: TopicPartition) -> bytes:
    return _str(group) + _str(tp[0]) + _I.pack(tp[1])


def encode_key(group: str, topic: str, partition: int, slot: int) -> bytes:
    return _KEY_HEAD + _encode_key_tail(group, (topic, partition)) + _SLOT.pack(slot)


def encode_value(entry: Entry) -> bytes:
    return _HEAD.pack(OFFSET_HISTORY_VALUE_VERSION, entry.seq, entry.offset, entry.commit_ms, entry.generation) + \
        _who_bytes((entry.member_id, entry.client_id, entry.client_host))


def decode_key(key: bytes) -> tuple[str, TopicPartition, int]:
    if key[:2] != _KEY_HEAD or len(key) < 6:
        raise OffsetHistoryRecordError("not an offset history key")
    try:
        decoded = decode_offset_key(b"\x00\x01" + key[2:-4])
    except RecordError as e:
        raise OffsetHistoryRecordError(f"offset history key: {e}") from None
    if decoded is None:
        raise OffsetHistoryRecordError("offset history key does not decode")
    return decoded[0], decoded[1], _SLOT.unpack_from(key, len(key) - 4)[0]


def decode_value(value: bytes) -> tuple[int, int, int, int, Who]:
    try:
        version, seq, offset, commit_ms, generation = _HEAD.unpack_from(value)
    except struct.error:
        raise OffsetHistoryRecordError("offset history record truncated") from None
    if version != OFFSET_HISTORY_VALUE_VERSION:
        raise OffsetHistoryRecordError(f"unsupported offset history value version {version}")
    if seq < 0:
        raise OffsetHistoryRecordError("negative offset history seq")
    pos, strings = _HEAD.size, []
    for _ in range(3):
        if pos + 2 > len(value):
            raise OffsetHistoryRecordError("offset history record truncated")
        n = _H.unpack_from(value, pos)[0]
        end = pos + 2 + n
        if n < 0 or end > len(value):
            raise OffsetHistoryRecordError("offset history record truncated")
        strings.append(value[pos + 2:end].decode("utf-8", "replace"))
        pos = end
    if pos != len(value):
        raise OffsetHistoryRecordError("trailing bytes in offset history record")
    return seq, offset, commit_ms, generation, (strings[0], strings[1], strings[2])
