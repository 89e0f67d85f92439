"""Rebalance history (issue #37 item 2): the last ``group.history.size`` rebalances of each group, as records.

Rules:
- A classic group's rebalance opens when it enters PreparingRebalance with none open (``begin``, called by
  ``rebalance.prepare_rebalance``) and closes when it ends, in the handler call that writes the group's metadata
  record for that end (the leader's SyncGroup storing the assignment, or the join phase leaving the group Empty;
  ``close``, called by ``rebalance.finish_rebalance``): that same Effects gets ONE history record. A rebalance that
  restarts before it ends (a member joins while CompletingRebalance, a follower never syncs...) stays one
  rebalance, with its first trigger. Nothing here runs on the heartbeat or the commit path.
- Its trigger: ``kind`` (TRIGGERS), the member that caused it with its client id and host, and the reason the
  client gave (JoinGroup v8+ / LeaveGroup v5+ ``reason``). The first rebalance a group starts after it was
  loaded with members (a restart or a failover: the coordinator moved) because a member rejoined is
  "coordinator-moved": a rebalance that was under way when the coordinator moved, which the members resume.
- Members before: the members when it opened (a joiner not counted, a member that left or expired counted);
  after: when it closed. Recorded are both counts and the ids that joined and left (at most ``IDS_KEPT`` each).
- Record (ours, in the group's offsets partition; Kafka uses key versions 0-8 and 16): key = int16 1000, group
  string, int32 slot, where slot = seq % group.history.size, so compaction (latest per key) keeps at most that
  many per group. Value = int16 0, int64 seq, int32 generation, int64 start_ms, int64 end_ms, trigger string,
  member id, client id, client host, reason, protocol type, protocol, leader (nullable strings), int32 members
  before, int32 members after, joined and left (int32 count + strings). Strings as in records.py.
- Replay (load, following, and after the durable write, like every record): a record sets its group's slot, a
  tombstone clears it. A group's ring holds the value bytes, decoded only when read: memory per group is
  bounded by the size. The next seq continues after the highest replayed (or written) one.
- A group's metadata tombstone (DeleteGroups, offsets expiry) is followed, in the same write, by tombstones for
  every slot its ring holds (``tombstone_deleted``); a close also tombstones slots at or past the size (the size
  was lowered). ``group.history.size`` 0: nothing new is written; what is stored stays readable.
- Read: ``entries`` (newest first) and ``wire`` (DescribeGroups v5+'s own tagged field ``history``).
- A KIP-848 entry is written at its epoch bump with ``end_ms`` = ``OPEN_END`` (-1: still reconciling) and written
  again, same slot and seq, with its end once the group is reconciled (``close_reconciling``); replay keeps each
  group's open entry (``History.reconciling``: slot, seq), so a follower or a restart knows it too.
- KIP-848 consumer groups (consumer_group/history.py states their rules) share the record, the codec and the ring
  (one ring per group id: a group converted between the protocols keeps one history). Their entry is computed by
  the consumer-group core with the outcome that bumps the epoch; ``append`` gives it its seq and slot and returns
  its records (the runtime writes them in that outcome's batch). A consumer group's Metadata tombstone (key
  version 3) deletes its history like a classic GroupMetadata tombstone (``tombstone_deleted``), except in a
  downgrade, whose tombstones the runtime writes outside the core (a conversion is no deletion).
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from .group import Group
from .outcome import Effects
from .records import RecordError

HISTORY_KEY_VERSION = 1000
_KEY_HEAD = b"\x03\xe8"  # int16 1000
HISTORY_VALUE_VERSION = 0
IDS_KEPT = 32  # joined / left member ids kept per record
OPEN_END = -1  # end_ms of a KIP-848 entry whose reconciliation has not ended yet
REASON_CHARS = 512  # a client's reason is cut to this

TRIGGERS = {  # Stats reason -> history trigger
    "member-joined": "member-joined",
    "member-left": "member-left",
    "session-expired": "session-expired",
    "sync-expired": "rebalance-timeout",  # members evicted: no SyncGroup within the rebalance timeout
    "leader-rejoined": "leader-rejoined",
    "member-updated": "subscription-changed",
    "static-member-changed": "static-member-rejoined",
    "write-failed": "write-failed",
}
COORDINATOR_MOVED = "coordinator-moved"
_REJOINS = frozenset(("leader-rejoined", "subscription-changed", "static-member-rejoined"))
_LEFT = frozenset(("member-left", "session-expired"))

_GROUP_KEYS = (b"\x00\x02", b"\x00\x03")  # GroupMetadata, ConsumerGroupMetadata
_H, _I, _Q = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_HEAD = struct.Struct(">hqiqq")  # version, seq, generation, start, end


class HistoryRecordError(RecordError):
    """A history record does not decode."""


@dataclass(frozen=True, slots=True)
class Trigger:
    kind: str
    member_id: str | None = None
    client_id: str | None = None
    client_host: str | None = None
    reason: str | None = None  # what the client said (JoinGroup v8+ / LeaveGroup v5+)


@dataclass(frozen=True, slots=True)
class Rebalance:
    seq: int
    generation: int
    start_ms: int
    end_ms: int
    trigger: Trigger
    protocol_type: str | None
    protocol: str | None
    leader: str | None
    members_before: int
    members_after: int
    joined: tuple[str, ...]
    left: tuple[str, ...]

    @property
    def duration_ms(self) -> int | None:
        """None while a KIP-848 entry is still reconciling (``end_ms`` is OPEN_END)."""
        return None if self.end_ms < 0 else self.end_ms - self.start_ms


@dataclass(slots=True)
class _Open:
    start_ms: int
    trigger: Trigger
    before: frozenset[str]


class _Ring:
    __slots__ = ("next_seq", "slots")

    def __init__(self) -> None:
        self.slots: dict[int, bytes] = {}
        self.next_seq = 0


class History:
    """One offsets partition's histories: the rings, the open rebalances, the groups loaded with members."""

    __slots__ = ("moved", "open", "reconciling", "rings")

    def __init__(self) -> None:
        self.rings: dict[str, _Ring] = {}
        self.open: dict[str, _Open] = {}
        self.moved: set[str] = set()
        self.reconciling: dict[str, tuple[int, int]] = {}  # group -> (slot, seq) of its open KIP-848 entry

    def replay(self, key: bytes, value: bytes | None) -> None:
        group, slot = decode_key(key)
        ring = self.rings.get(group)
        if value is None:
            if ring is not None:
                ring.slots.pop(slot, None)
                if not ring.slots:
                    del self.rings[group]
            if self.reconciling.get(group, (None,))[0] == slot:
                del self.reconciling[group]
            return
        entry = decode_value(value)  # decoded whole: a bad value changes nothing
        if ring is None:
            ring = self.rings[group] = _Ring()
        ring.slots[slot] = value
        ring.next_seq = max(ring.next_seq, entry.seq + 1)
        if entry.end_ms == OPEN_END:
            self.reconciling[group] = (slot, entry.seq)
        elif self.reconciling.get(group, (None,))[0] == slot:
            del self.reconciling[group]

    def loaded(self, groups: Iterable[Group]) -> None:
        """The partition finished loading: its groups with members may resume a rebalance begun elsewhere."""
        self.moved = {g.group_id for g in groups if g.members}

    def entries(self, group_id: str) -> list[Rebalance]:
        ring = self.rings.get(group_id)
        if ring is None:
            return []
        return sorted((decode_value(v) for v in ring.slots.values()), key=lambda r: r.seq, reverse=True)


def is_history_key(key: bytes) -> bool:
    return key[:2] == _KEY_HEAD


# ---------------------------------------------------------------- the rebalance's life

def begin(history: History, group: Group, now_ms: int, reason: str, trigger: Trigger | None,
          removed: Iterable[str] = ()) -> None:
    """A rebalance opens (``reason`` the Stats key; ``trigger`` its member details; ``removed`` members already
    evicted by what triggered it)."""
    kind = TRIGGERS.get(reason, reason)
    trigger = Trigger(kind) if trigger is None else Trigger(kind, trigger.member_id, trigger.client_id,
                                                            trigger.client_host, _cut(trigger.reason))
    gid = group.group_id
    if gid in history.moved:
        history.moved.discard(gid)
        if kind in _REJOINS:
            trigger = Trigger(COORDINATOR_MOVED, trigger.member_id, trigger.client_id, trigger.client_host,
                              trigger.reason)
    before = set(group.members)
    if kind == "member-joined" and trigger.member_id is not None:
        before.discard(trigger.member_id)
    elif kind in _LEFT and trigger.member_id is not None:
        before.add(trigger.member_id)
    before.update(removed)
    history.open[gid] = _Open(now_ms, trigger, frozenset(before))


def close(history: History, fx: Effects, shard_id: int, group: Group, size: int) -> None:
    """The open rebalance of ``group`` ended now: its record goes into ``fx`` (unless the size is 0)."""
    opened = history.open.pop(group.group_id, None)
    if opened is None or size <= 0:
        return
    after = group.members
    joined = [m for m in after if m not in opened.before]
    left = sorted(m for m in opened.before if m not in after)
    entry = Rebalance(0, group.generation, opened.start_ms, fx.now_ms, opened.trigger, group.protocol_type,
                      group.protocol_name, group.leader_id, len(opened.before), len(after),
                      tuple(joined[:IDS_KEPT]), tuple(left[:IDS_KEPT]))
    for key, value in append(history, group.group_id, entry, size):
        fx.write(shard_id, key, value)


def append(history: History, group_id: str, entry: Rebalance, size: int) -> list[tuple[bytes, bytes | None]]:
    """The records of a new entry of ``group_id``'s history (``entry`` with the next seq; none when the size is 0):
    its value at slot seq % size, then tombstones for the slots at or past the size (it was lowered). The seq is
    taken now: another entry before these records are durable gets the next one; a failed write skips it."""
    if size <= 0:
        return []
    ring = history.rings.get(group_id)
    seq = ring.next_seq if ring is not None else 0
    out: list[tuple[bytes, bytes | None]] = [(encode_key(group_id, seq % size),
                                              encode_value(dataclasses.replace(entry, seq=seq)))]
    if ring is None:
        ring = history.rings[group_id] = _Ring()
    ring.next_seq = seq + 1
    out.extend((encode_key(group_id, slot), None) for slot in sorted(s for s in ring.slots if s >= size))
    return out


def close_reconciling(history: History, group_id: str, end_ms: int) -> list[tuple[bytes, bytes | None]]:
    """The record ending ``group_id``'s open KIP-848 entry at ``end_ms`` (its value again, same slot, with the end;
    never before its start), or none. It stops being open now, so a second call before the record replays writes
    nothing (a failed write leaves the entry open in the ring, untracked: nothing else is lost)."""
    opened = history.reconciling.pop(group_id, None)
    ring = history.rings.get(group_id)
    if opened is None or ring is None:
        return []
    slot, seq = opened
    value = ring.slots.get(slot)
    if value is None:
        return []
    entry = decode_value(value)
    if entry.seq != seq or entry.end_ms != OPEN_END:
        return []
    return [(encode_key(group_id, slot), encode_value(dataclasses.replace(entry, end_ms=max(end_ms, entry.start_ms))))]


def tombstone_deleted(histories: list[History], fx: Effects, first: int = 0) -> None:
    """Tombstones for the history of every group whose metadata tombstone ``fx`` holds from record ``first``
    (a classic GroupMetadata, key version 2, or a consumer group's Metadata, key version 3)."""
    done: set[tuple[int, str]] = set()
    for shard_id, key, value in fx.records[first:]:
        if value is not None or key[:2] not in _GROUP_KEYS or len(key) < 4:
            continue
        n = _H.unpack_from(key, 2)[0]
        gid = key[4:4 + n].decode("utf-8", "replace") if n >= 0 else ""
        if (shard_id, gid) in done:
            continue
        done.add((shard_id, gid))
        for key in forget(histories[shard_id], gid):
            fx.write(shard_id, key, None)


def forget(history: History, group_id: str) -> list[bytes]:
    """The keys to tombstone (every slot the group's ring holds) when the group goes; its open rebalance ends."""
    history.open.pop(group_id, None)
    history.reconciling.pop(group_id, None)
    ring = history.rings.get(group_id)
    return [] if ring is None else [encode_key(group_id, slot) for slot in sorted(ring.slots)]


def wire(history: History, group_id: str) -> list[dict]:
    """The group's history as DescribeGroups' ``history`` entries, newest first."""
    return [{"seq": r.seq, "generation": r.generation, "start_ms": r.start_ms, "end_ms": r.end_ms,
             "trigger": r.trigger.kind, "member_id": r.trigger.member_id, "client_id": r.trigger.client_id,
             "client_host": r.trigger.client_host, "reason": r.trigger.reason, "protocol_type": r.protocol_type,
             "protocol": r.protocol, "leader": r.leader, "members_before": r.members_before,
             "members_after": r.members_after, "joined": list(r.joined), "left": list(r.left)}
            for r in history.entries(group_id)]


def _cut(reason: str | None) -> str | None:
    return None if reason is None else reason[:REASON_CHARS]


# ---------------------------------------------------------------- codec

def _str(s: str | None) -> bytes:
    if s is None:
        return b"\xff\xff"
    b = s.encode("utf-8", "replace")[:32767]
    return _H.pack(len(b)) + b


def encode_key(group_id: str, slot: int) -> bytes:
    return _KEY_HEAD + _str(group_id) + _I.pack(slot)


def encode_value(r: Rebalance) -> bytes:
    t = r.trigger
    parts = [_HEAD.pack(HISTORY_VALUE_VERSION, r.seq, r.generation, r.start_ms, r.end_ms), _str(t.kind),
             _str(t.member_id), _str(t.client_id), _str(t.client_host), _str(t.reason), _str(r.protocol_type),
             _str(r.protocol), _str(r.leader), _I.pack(r.members_before), _I.pack(r.members_after)]
    for ids in (r.joined, r.left):
        parts.append(_I.pack(len(ids)))
        parts.extend(_str(m) for m in ids)
    return b"".join(parts)


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf, self.pos = buf, 0

    def take(self, s: struct.Struct) -> tuple:
        try:
            out = s.unpack_from(self.buf, self.pos)
        except struct.error:
            raise HistoryRecordError("history record truncated") from None
        self.pos += s.size
        return out

    def nullable_str(self) -> str | None:
        n = self.take(_H)[0]
        if n == -1:
            return None
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise HistoryRecordError("history record truncated")
        s = bytes(self.buf[self.pos:end]).decode("utf-8", "replace")
        self.pos = end
        return s

    def str(self) -> str:
        s = self.nullable_str()
        if s is None:
            raise HistoryRecordError("null where a string is required")
        return s

    def strings(self) -> tuple[str, ...]:
        n = self.take(_I)[0]
        if n < 0 or n > len(self.buf):
            raise HistoryRecordError("bad count")
        return tuple(self.str() for _ in range(n))

    def end(self) -> None:
        if self.pos != len(self.buf):
            raise HistoryRecordError("trailing bytes in history record")


def decode_key(key: bytes) -> tuple[str, int]:
    r = _Reader(key)
    if r.take(_H)[0] != HISTORY_KEY_VERSION:
        raise HistoryRecordError("not a history key")
    group = r.str()
    slot = r.take(_I)[0]
    r.end()
    return group, slot


def decode_value(value: bytes) -> Rebalance:
    r = _Reader(value)
    version, seq, generation, start, end = r.take(_HEAD)
    if version != HISTORY_VALUE_VERSION:
        raise HistoryRecordError(f"unsupported history value version {version}")
    trigger = Trigger(r.str(), r.nullable_str(), r.nullable_str(), r.nullable_str(), r.nullable_str())
    ptype, protocol, leader = r.nullable_str(), r.nullable_str(), r.nullable_str()
    before, after = r.take(_I)[0], r.take(_I)[0]
    joined, left = r.strings(), r.strings()
    r.end()
    return Rebalance(seq, generation, start, end, trigger, ptype, protocol, leader, before, after, joined, left)
