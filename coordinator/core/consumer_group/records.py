"""The consumer-group records (types 3-8 and 16) in ``__consumer_offsets``, byte-exact with Kafka 4.0.

Layout (Kafka's group-coordinator JSON, ``ConsumerGroup*Key/Value.json``):
- Key: int16 record type, then the key fields, NOT flexible (int16-length strings).
- Value: int16 version 0, then a FLEXIBLE body: compact strings/arrays (uvarint length + 1, 0 = null),
  uuid as 16 bytes, and a tagged-field section (uvarint count, then tag/size/bytes) after every struct.
- A ``None`` value is a tombstone.
Types: 3 ConsumerGroupMetadata {Epoch}; 4 PartitionMetadata {Topics[{TopicId, TopicName, NumPartitions,
PartitionMetadata[{Partition, Racks[]}]}]} (racks are deprecated: written empty, skipped when read);
5 MemberMetadata {InstanceId?, RackId?, ClientId, ClientHost, SubscribedTopicNames[], SubscribedTopicRegex?,
RebalanceTimeoutMs, ServerAssignor?, tag 0: ClassicMemberMetadata?}; 6 TargetAssignmentMetadata
{AssignmentEpoch}; 7 TargetAssignmentMember {TopicPartitions[{TopicId, Partitions[]}]}; 8
CurrentMemberAssignment {MemberEpoch, PreviousMemberEpoch, State int8, AssignedPartitions[],
PartitionsPendingRevocation[]}; 16 ConsumerGroupRegularExpression (key GroupId, RegularExpression) {Topics[]
(compact strings), Version int64, Timestamp int64} (Kafka 4.0's ConsumerGroupRegularExpressionKey/Value.json).
Tagged fields are written only for tag 0 of type 5 (ClassicMemberMetadata {SessionTimeoutMs int32,
SupportedProtocols[{Name string, Metadata bytes}]}: a member on the classic protocol, migration.py), and
unknown ones are skipped when read. Topic lists are written
sorted by topic id and partitions ascending, so equal values give equal bytes. Bad bytes raise RecordError.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from dataclasses import dataclass, field
from io import BytesIO

from coordinator.core.consumer_group.model import Assignment, assignment, to_wire
from coordinator.core.records import RecordError
from protocol import primitives as P
from protocol.errors import ProtocolError

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_B = struct.Struct(">b")
_Q = struct.Struct(">q")
VALUE_VERSION = 0


@dataclass(frozen=True, slots=True)
class MetadataKey:  # 3
    group_id: str


@dataclass(frozen=True, slots=True)
class MetadataValue:
    epoch: int


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: uuid.UUID
    topic_name: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class PartitionMetadataKey:  # 4
    group_id: str


@dataclass(frozen=True, slots=True)
class PartitionMetadataValue:
    topics: tuple[TopicMetadata, ...] = ()


@dataclass(frozen=True, slots=True)
class MemberMetadataKey:  # 5
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """Tag 0 of MemberMetadata: a member that speaks the classic protocol (its JoinGroup's session timeout and
    protocols, in its order of preference)."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    classic: ClassicMemberMetadata | None = None


@dataclass(frozen=True, slots=True)
class TargetAssignmentMetadataKey:  # 6
    group_id: str


@dataclass(frozen=True, slots=True)
class TargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class TargetAssignmentMemberKey:  # 7
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class TargetAssignmentMemberValue:
    partitions: Assignment = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CurrentAssignmentKey:  # 8
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RegexKey:  # 16
    group_id: str
    regular_expression: str


@dataclass(frozen=True, slots=True)
class RegexValue:
    """A regex's resolution: the matching topic names (sorted), the topics' version it was resolved at and
    when (ms)."""

    topics: tuple[str, ...] = ()
    version: int = 0
    timestamp: int = 0


Key = (MetadataKey | PartitionMetadataKey | MemberMetadataKey | TargetAssignmentMetadataKey
       | TargetAssignmentMemberKey | CurrentAssignmentKey | RegexKey)
Value = (MetadataValue | PartitionMetadataValue | MemberMetadataValue | TargetAssignmentMetadataValue
         | TargetAssignmentMemberValue | CurrentAssignmentValue | RegexValue)

TYPE_OF: dict[type, int] = {MetadataKey: 3, PartitionMetadataKey: 4, MemberMetadataKey: 5,
                            TargetAssignmentMetadataKey: 6, TargetAssignmentMemberKey: 7, CurrentAssignmentKey: 8,
                            RegexKey: 16}
KEY_OF_TYPE = {t: k for k, t in TYPE_OF.items()}
TWO_PART_KEYS = (MemberMetadataKey, TargetAssignmentMemberKey, CurrentAssignmentKey)


@dataclass(frozen=True, slots=True)
class Record:
    """One record to append (and replay): a key and a value, or None for a tombstone."""

    key: Key
    value: Value | None


# ---------------------------------------------------------------- encoding

def _classic_str(s: str) -> bytes:
    b = s.encode()
    return _H.pack(len(b)) + b


def encode_key(key: Key) -> bytes:
    out = _H.pack(TYPE_OF[type(key)]) + _classic_str(key.group_id)
    if isinstance(key, TWO_PART_KEYS):
        out += _classic_str(key.member_id)
    elif isinstance(key, RegexKey):
        out += _classic_str(key.regular_expression)
    return out


def _w_assignment(io: BytesIO, a: Assignment) -> None:
    topics = to_wire(a)
    P.write_count(io, len(topics), True)
    for tp in topics:
        P.write_uuid(io, tp["topic_id"])
        P.write_count(io, len(tp["partitions"]), True)
        io.write(struct.pack(f">{len(tp['partitions'])}i", *tp["partitions"]))
        io.write(b"\x00")


def encode_value(value: Value | None) -> bytes | None:
    if value is None:
        return None
    io = BytesIO()
    io.write(_H.pack(VALUE_VERSION))
    if isinstance(value, MetadataValue):
        io.write(_I.pack(value.epoch))
    elif isinstance(value, TargetAssignmentMetadataValue):
        io.write(_I.pack(value.assignment_epoch))
    elif isinstance(value, PartitionMetadataValue):
        topics = sorted(value.topics, key=lambda t: t.topic_id.bytes)
        P.write_count(io, len(topics), True)
        for t in topics:
            P.write_uuid(io, t.topic_id)
            P.write_string(io, t.topic_name, True)
            io.write(_I.pack(t.num_partitions))
            io.write(b"\x01\x00")  # PartitionMetadata: [] (deprecated), then the topic's tagged fields
    elif isinstance(value, MemberMetadataValue):
        P.write_string(io, value.instance_id, True)
        P.write_string(io, value.rack_id, True)
        P.write_string(io, value.client_id, True)
        P.write_string(io, value.client_host, True)
        P.write_count(io, len(value.subscribed_topic_names), True)
        for name in value.subscribed_topic_names:
            P.write_string(io, name, True)
        P.write_string(io, value.subscribed_topic_regex, True)
        io.write(_I.pack(value.rebalance_timeout_ms))
        P.write_string(io, value.server_assignor, True)
        if value.classic is not None:
            io.write(b"\x01\x00" + P.encode_uvarint(len(body := _classic_body(value.classic))) + body)
            return io.getvalue()
    elif isinstance(value, TargetAssignmentMemberValue):
        _w_assignment(io, value.partitions)
    elif isinstance(value, CurrentAssignmentValue):
        io.write(_I.pack(value.member_epoch) + _I.pack(value.previous_member_epoch) + _B.pack(value.state))
        _w_assignment(io, value.assigned)
        _w_assignment(io, value.pending_revocation)
    elif isinstance(value, RegexValue):
        P.write_count(io, len(value.topics), True)
        for name in value.topics:
            P.write_string(io, name, True)
        io.write(_Q.pack(value.version) + _Q.pack(value.timestamp))
    else:
        raise TypeError(f"not a consumer-group record value: {value!r}")
    io.write(b"\x00")  # the value's tagged fields
    return io.getvalue()


def _classic_body(c: ClassicMemberMetadata) -> bytes:
    io = BytesIO()
    io.write(_I.pack(c.session_timeout_ms))
    P.write_count(io, len(c.protocols), True)
    for name, metadata in c.protocols:
        P.write_string(io, name, True)
        P.write_bytes(io, metadata, True)
        io.write(b"\x00")
    io.write(b"\x00")
    return io.getvalue()


def _r_classic(io: BytesIO) -> ClassicMemberMetadata:
    timeout = _r_int(io, _I)
    protocols = []
    for _ in range(P.read_count(io, True, False, 3)):
        name = _r_str(io, False) or ""
        protocols.append((name, P.read_bytes(io, True, False) or b""))
        P.skip_tagged_fields(io)
    P.skip_tagged_fields(io)
    return ClassicMemberMetadata(timeout, tuple(protocols))


def _r_member_tags(io: BytesIO) -> ClassicMemberMetadata | None:
    """MemberMetadata's tagged fields: tag 0 read, the others skipped."""
    classic = None
    for _ in range(P.read_uvarint(io)):
        tag, size = P.read_uvarint(io), P.read_uvarint(io)
        data = P.read_exact(io, size)
        if tag == 0:
            inner = BytesIO(data)
            classic = _r_classic(inner)
            if inner.tell() != len(data):
                raise RecordError("trailing bytes in ClassicMemberMetadata")
    return classic


def encode_record(record: Record) -> tuple[bytes, bytes | None]:
    return encode_key(record.key), encode_value(record.value)


# ---------------------------------------------------------------- decoding

def _r_classic_str(io: BytesIO) -> str:
    n = _H.unpack(P.read_exact(io, 2))[0]
    if n < 0:
        raise RecordError("null string in a consumer-group record key")
    return P.read_exact(io, n).decode()


def _r_int(io: BytesIO, s: struct.Struct) -> int:
    return s.unpack(P.read_exact(io, s.size))[0]


def _r_str(io: BytesIO, nullable: bool) -> str | None:
    return P.read_string(io, True, nullable)


def _r_assignment(io: BytesIO) -> Assignment:
    out: dict[uuid.UUID, set[int]] = {}
    for _ in range(P.read_count(io, True, False, 18)):
        topic_id = P.read_uuid(io)
        n = P.read_count(io, True, False, 4)
        out.setdefault(topic_id, set()).update(struct.unpack(f">{n}i", P.read_exact(io, 4 * n)))
        P.skip_tagged_fields(io)
    return assignment(out)


def decode_key(data: bytes) -> Key | None:
    """The key, or None for a record type that is not a consumer-group one."""
    io = BytesIO(data)
    try:
        kind = KEY_OF_TYPE.get(_r_int(io, _H))
        if kind is None:
            return None
        group_id = _r_classic_str(io)
        two_part = kind in TWO_PART_KEYS or kind is RegexKey
        key = kind(group_id, _r_classic_str(io)) if two_part else kind(group_id)
    except (ProtocolError, UnicodeDecodeError, struct.error) as e:
        raise RecordError(f"bad consumer-group record key: {e}") from e
    if io.tell() != len(data):
        raise RecordError("trailing bytes after a consumer-group record key")
    return key


def decode_value(key: Key, data: bytes | None) -> Value | None:
    if data is None:
        return None
    io = BytesIO(data)
    try:
        version = _r_int(io, _H)
        if version != VALUE_VERSION:
            raise RecordError(f"unknown value version {version} for {type(key).__name__}")
        value = _decode_body(key, io)
        if isinstance(value, MemberMetadataValue):
            classic = _r_member_tags(io)
            if classic is not None:
                value = dataclasses.replace(value, classic=classic)
        else:
            P.skip_tagged_fields(io)
    except (ProtocolError, UnicodeDecodeError, struct.error) as e:
        raise RecordError(f"bad {type(key).__name__} value: {e}") from e
    if io.tell() != len(data):
        raise RecordError(f"trailing bytes after a {type(key).__name__} value")
    return value


def _decode_body(key: Key, io: BytesIO) -> Value:
    if isinstance(key, MetadataKey):
        return MetadataValue(_r_int(io, _I))
    if isinstance(key, TargetAssignmentMetadataKey):
        return TargetAssignmentMetadataValue(_r_int(io, _I))
    if isinstance(key, PartitionMetadataKey):
        topics = []
        for _ in range(P.read_count(io, True, False, 23)):
            topic_id, name, count = P.read_uuid(io), _r_str(io, False), _r_int(io, _I)
            for _ in range(P.read_count(io, True, False, 6)):  # deprecated rack data: skipped
                _r_int(io, _I)
                for _ in range(P.read_count(io, True, False, 1)):
                    _r_str(io, False)
                P.skip_tagged_fields(io)
            P.skip_tagged_fields(io)
            topics.append(TopicMetadata(topic_id, name or "", count))
        return PartitionMetadataValue(tuple(topics))
    if isinstance(key, MemberMetadataKey):
        instance_id, rack_id = _r_str(io, True), _r_str(io, True)
        client_id, client_host = _r_str(io, False) or "", _r_str(io, False) or ""
        names = tuple(_r_str(io, False) or "" for _ in range(P.read_count(io, True, False, 1)))
        regex = _r_str(io, True)
        return MemberMetadataValue(instance_id, rack_id, client_id, client_host, names, regex,
                                   _r_int(io, _I), _r_str(io, True))
    if isinstance(key, TargetAssignmentMemberKey):
        return TargetAssignmentMemberValue(_r_assignment(io))
    if isinstance(key, CurrentAssignmentKey):
        epoch, previous, state = _r_int(io, _I), _r_int(io, _I), _r_int(io, _B)
        return CurrentAssignmentValue(epoch, previous, state, _r_assignment(io), _r_assignment(io))
    if isinstance(key, RegexKey):
        topics = tuple(_r_str(io, False) or "" for _ in range(P.read_count(io, True, False, 1)))
        return RegexValue(topics, _r_int(io, _Q), _r_int(io, _Q))
    raise TypeError(f"not a consumer-group record key: {key!r}")


def decode_record(key: bytes, value: bytes | None) -> Record | None:
    """A stored record, or None when its key is not a consumer-group record type."""
    k = decode_key(key)
    if k is None:
        return None
    return Record(k, decode_value(k, value))
