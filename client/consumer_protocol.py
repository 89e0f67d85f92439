"""Kafka's ConsumerProtocol: the bytes a consumer puts in JoinGroup metadata and SyncGroup assignments.

This module owns the two payloads of the "consumer" protocol type, byte-compatible with Apache Kafka's
``ConsumerProtocolSubscription`` / ``ConsumerProtocolAssignment`` (and so with the Java client,
kafka-python, aiokafka and librdkafka), so a group may mix our client with theirs.

Wire rules (classic, never flexible: int16-length strings, int32-length bytes, int32 array counts):

    Subscription  version:int16 topics:[string] user_data:nullable bytes
                  v1+ owned_partitions:[topic:string partitions:[int32]]
                  v2+ generation_id:int32 (default -1)
                  v3+ rack_id:nullable string (default null)
    Assignment    version:int16 assigned_partitions:[topic:string partitions:[int32]]
                  user_data:nullable bytes          (versions 0-3 share one layout)

Invariants:
- ``encode_*`` writes exactly the fields of the object's ``version`` (0-3); fields of higher versions are
  dropped, as Kafka does when it writes an older version.
- ``decode_*`` accepts any version >= 0. A version above 3 is read with the v3 layout, and bytes after the
  last known field are ignored (Kafka's forward-compatibility rule: new versions only append fields).
- Bad input (truncated, negative lengths, null where not nullable, counts larger than the bytes left,
  invalid UTF-8, negative version) raises ``ConsumerProtocolError`` and nothing else; no allocation is
  made that the received bytes do not justify.
- Partitions are held flat, as ``TopicPartition`` tuples; on the wire they are grouped per topic, in order
  of each topic's first appearance, partitions in the order given.
- ``Subscription.group_instance_id`` is not on the wire: like Java's ``Subscription.groupInstanceId`` it is
  filled in by the leader from the JoinGroup member list, and assignors use it to order members.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

__all__ = [
    "LATEST_VERSION",
    "Assignment",
    "ConsumerProtocolError",
    "Subscription",
    "TopicPartition",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "group_by_topic",
]

LATEST_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class ConsumerProtocolError(ValueError):
    """Consumer-protocol bytes that cannot be decoded (or an object that cannot be encoded)."""


class TopicPartition(NamedTuple):
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class Subscription:
    """A member's JoinGroup metadata for protocol type "consumer"."""

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = -1
    rack_id: str | None = None
    version: int = LATEST_VERSION
    group_instance_id: str | None = None  # not encoded; set by the leader from the JoinGroup response


@dataclass(frozen=True, slots=True)
class Assignment:
    """The partitions the leader gives one member, sent back to it in SyncGroup."""

    assigned_partitions: tuple[TopicPartition, ...]
    user_data: bytes | None = None
    version: int = LATEST_VERSION


def group_by_topic(partitions: Iterable[tuple[str, int]]) -> list[tuple[str, list[int]]]:
    """Group (topic, partition) pairs per topic, topics in order of first appearance."""
    grouped: dict[str, list[int]] = {}
    for topic, partition in partitions:
        grouped.setdefault(topic, []).append(partition)
    return list(grouped.items())


# ---------------------------------------------------------------------------------------------- encoding


def _check_version(version: int) -> None:
    if not 0 <= version <= LATEST_VERSION:
        raise ConsumerProtocolError(f"cannot encode consumer protocol version {version} (0-3)")


def _string(out: list[bytes], value: str | None, nullable: bool = False) -> None:
    if value is None:
        if not nullable:
            raise ConsumerProtocolError("null string in a non-nullable field")
        out.append(_I16.pack(-1))
        return
    raw = value.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise ConsumerProtocolError(f"string of {len(raw)} bytes does not fit an int16 length")
    out.append(_I16.pack(len(raw)))
    out.append(raw)


def _bytes(out: list[bytes], value: bytes | None) -> None:
    if value is None:
        out.append(_I32.pack(-1))
    else:
        out.append(_I32.pack(len(value)))
        out.append(bytes(value))


def _topic_partitions(out: list[bytes], partitions: Iterable[tuple[str, int]]) -> None:
    grouped = group_by_topic(partitions)
    out.append(_I32.pack(len(grouped)))
    for topic, numbers in grouped:
        _string(out, topic)
        out.append(_I32.pack(len(numbers)))
        out.append(struct.pack(f">{len(numbers)}i", *numbers))


def encode_subscription(sub: Subscription) -> bytes:
    """Serialize ``sub`` at ``sub.version``."""
    _check_version(sub.version)
    out: list[bytes] = [_I16.pack(sub.version), _I32.pack(len(sub.topics))]
    for topic in sub.topics:
        _string(out, topic)
    _bytes(out, sub.user_data)
    if sub.version >= 1:
        _topic_partitions(out, sub.owned_partitions)
    if sub.version >= 2:
        out.append(_I32.pack(sub.generation_id))
    if sub.version >= 3:
        _string(out, sub.rack_id, nullable=True)
    return b"".join(out)


def encode_assignment(assignment: Assignment) -> bytes:
    """Serialize ``assignment`` at ``assignment.version``."""
    _check_version(assignment.version)
    out: list[bytes] = [_I16.pack(assignment.version)]
    _topic_partitions(out, assignment.assigned_partitions)
    _bytes(out, assignment.user_data)
    return b"".join(out)


# ---------------------------------------------------------------------------------------------- decoding


class _Reader:
    """A bounds-checked cursor over a buffer; every failure is a ConsumerProtocolError."""

    __slots__ = ("buf", "pos")

    def __init__(self, data: bytes) -> None:
        self.buf = memoryview(bytes(data))
        self.pos = 0

    def _take(self, n: int) -> memoryview:
        end = self.pos + n
        if end > len(self.buf):
            raise ConsumerProtocolError(f"truncated: need {n} bytes at offset {self.pos}, have {len(self.buf) - self.pos}")
        view = self.buf[self.pos:end]
        self.pos = end
        return view

    def int16(self) -> int:
        return _I16.unpack(self._take(2))[0]

    def int32(self) -> int:
        return _I32.unpack(self._take(4))[0]

    def string(self, nullable: bool = False) -> str | None:
        n = self.int16()
        if n < 0:
            if n == -1 and nullable:
                return None
            raise ConsumerProtocolError(f"invalid string length {n} at offset {self.pos - 2}")
        try:
            return str(self._take(n), "utf-8")
        except UnicodeDecodeError as exc:
            raise ConsumerProtocolError(f"string is not UTF-8: {exc}") from None

    def nullable_bytes(self) -> bytes | None:
        n = self.int32()
        if n == -1:
            return None
        if n < 0:
            raise ConsumerProtocolError(f"invalid bytes length {n} at offset {self.pos - 4}")
        return bytes(self._take(n))

    def count(self, min_item_size: int) -> int:
        n = self.int32()
        if n < 0:
            raise ConsumerProtocolError(f"invalid array count {n} at offset {self.pos - 4}")
        if n * min_item_size > len(self.buf) - self.pos:
            raise ConsumerProtocolError(f"array count {n} exceeds the {len(self.buf) - self.pos} bytes left")
        return n

    def topic_partitions(self) -> tuple[TopicPartition, ...]:
        result: list[TopicPartition] = []
        for _ in range(self.count(6)):
            topic = self.string()
            assert topic is not None
            n = self.count(4)
            numbers = struct.unpack(f">{n}i", self._take(4 * n))
            result.extend(TopicPartition(topic, p) for p in numbers)
        return tuple(result)

    def version(self) -> int:
        version = self.int16()
        if version < 0:
            raise ConsumerProtocolError(f"invalid consumer protocol version {version}")
        return version


def decode_subscription(data: bytes) -> Subscription:
    """Parse JoinGroup member metadata; the result keeps the version found on the wire."""
    r = _Reader(data)
    version = r.version()
    topics = tuple(r.string() for _ in range(r.count(2)))  # type: ignore[misc]
    user_data = r.nullable_bytes()
    owned: tuple[TopicPartition, ...] = ()
    generation_id = -1
    rack_id = None
    if version >= 1:
        owned = r.topic_partitions()
    if version >= 2:
        generation_id = r.int32()
    if version >= 3:
        rack_id = r.string(nullable=True)
    return Subscription(topics, user_data, owned, generation_id, rack_id, version)


def decode_assignment(data: bytes) -> Assignment:
    """Parse a SyncGroup member assignment; the result keeps the version found on the wire."""
    r = _Reader(data)
    version = r.version()
    partitions = r.topic_partitions()
    user_data = r.nullable_bytes()
    return Assignment(partitions, user_data, version)
