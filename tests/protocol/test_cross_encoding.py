"""Our codec and kafka-python 3.0.12's own protocol classes read each other's frames to the same values.

The story, for every API we serve and every version both sides support (kafka-python's JSON ``validVersions``
intersected with ours), old (non-flexible) and flexible alike:

- Requests: a body is generated from our declaration (hypothesis), turned into kafka-python's data objects,
  and kafka-python encodes the whole frame itself (size, request header v1/v2 with api key, version,
  correlation id and client id, body). ``codec.decode_request`` must give back exactly that header and body,
  kafka-python's own decode of its frame must give the same body, and our encoder must write the same bytes.
- Responses: ``codec.encode_response`` writes the frame; kafka-python's ``Response.decode(..., header=True,
  framed=True)`` must read the correlation id and every body value back, and its own encoder must write the
  same bytes. (ApiVersions bodies use error_code 0: kafka-python reads any other as a v0 body, as Kafka does.)
- The same two checks run once more per version with large values (200-byte non-ASCII strings, 300-byte
  bytes, 130-element arrays, every tagged field set), so every compact length needs a multi-byte varint.
- A body with no values encodes to kafka-python's bytes, except for the few defaults listed in
  ``DEFAULT_DIFFERENCES`` (each with its reason; the list is exact, and with those values given the bytes
  agree).

Only representation is normalised between the two sides, never values: kafka-python's data objects become
dicts, its memoryviews bytes; it reads the all-zero UUID as None; it represents Metadata's
``*_authorized_operations`` int32 as a set of bit numbers (None for INT32_MIN) under the name
``authorized_operations``.
"""

from __future__ import annotations

import uuid
import warnings
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import body as body_strategy  # type: ignore[import-not-found]

from protocol import codec
from protocol.compiler import KStruct, Resolved
from protocol.headers import RequestHeader
from protocol.messages import ALL
from protocol.schema import OURS_FROM_TAG, Versions

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # importing kafka-python loads every schema and warns
    from kafka.protocol import admin as kp_admin
    from kafka.protocol import consumer as kp_consumer
    from kafka.protocol import metadata as kp_metadata
    from kafka.protocol import producer as kp_producer
    from kafka.protocol import sasl as kp_sasl
    from kafka.protocol.schemas.fields.codecs import BitField

_MODULES = (kp_admin, kp_consumer, kp_metadata, kp_producer, kp_sasl)
INT32_MIN = -(2**31)
ZERO_UUID = uuid.UUID(int=0)

# kafka-python (kafka/protocol/metadata/metadata.py) renames and retypes Metadata's authorized operations.
RENAMED = {
    ("MetadataResponse", "authorized_operations"): "cluster_authorized_operations",
    ("MetadataResponseTopic", "authorized_operations"): "topic_authorized_operations",
}


def kafka_class(api_name: str, side: str) -> Any:
    """kafka-python's message class, e.g. ``JoinGroupRequest``, found in its protocol packages."""
    for module in _MODULES:
        cls = getattr(module, api_name + side, None)
        if cls is not None:
            return cls
    raise LookupError(api_name + side)


def shared_versions(key: int) -> list[int]:
    """Versions both sides support; none for an API kafka-python lacks (KIP-848's 68/69: their bytes are
    checked by hand in test_consumer_group_messages.py)."""
    schema = ALL[key]
    try:
        lo, hi = kafka_class(schema.name, "Request").valid_versions
    except LookupError:
        return []
    return [v for v in range(schema.min_version, schema.max_version + 1) if lo <= v <= hi]


CASES = [(key, v) for key in sorted(ALL) for v in shared_versions(key)]
IDS = [f"{ALL[k].name}-v{v}" for k, v in CASES]


# --------------------------------------------------------------------- representation, both directions
def _their_fields(struct: Any, version: int) -> list[Any]:
    return [fd for fd in struct.fields.values() if fd.for_version_q(version)]


def _our_name(owner: str, fd: Any) -> str:
    return RENAMED.get((owner, fd.name), fd.name)


def to_kafka(struct: Any, owner: str, value: dict[str, Any], version: int) -> dict[str, Any]:
    """Keyword arguments for kafka-python's data class of ``struct`` holding our dict ``value``."""
    kwargs: dict[str, Any] = {}
    for fd in _their_fields(struct, version):
        v = value[_our_name(owner, fd)]
        kwargs[fd.name] = _to_kafka_value(fd, v, version)
    assert len(kwargs) == len(value), f"{owner}: our fields {sorted(value)} vs theirs {sorted(kwargs)}"
    return kwargs


def _to_kafka_value(fd: Any, v: Any, version: int) -> Any:
    if v is None:
        return None
    if fd.is_struct_array():
        return [fd.data_class(**to_kafka(fd.array_of, fd.type_str, e, version)) for e in v]
    if fd.is_struct():
        return fd.data_class(**to_kafka(fd, fd.type_str, v, version))
    if fd.type_str == "bitfield":
        return None if v == INT32_MIN else BitField.from_32_bit_field(v & 0xFFFFFFFF)
    return v


def from_kafka(struct: Any, owner: str, obj: Any, version: int) -> dict[str, Any]:
    """Our dict for kafka-python's data object ``obj``."""
    return {_our_name(owner, fd): _from_kafka_value(fd, getattr(obj, fd.name), version)
            for fd in _their_fields(struct, version)}


def _from_kafka_value(fd: Any, v: Any, version: int) -> Any:
    if fd.type_str == "bitfield":
        if v is None:
            return INT32_MIN
        n = BitField.to_32_bit_field(v)
        return n - (1 << 32) if n & 0x80000000 else n
    if fd.type_str == "uuid":
        return ZERO_UUID if v is None else v
    if v is None:
        return None
    if fd.is_struct_array():
        return [from_kafka(fd.array_of, fd.type_str, e, version) for e in v]
    if fd.is_struct():
        return from_kafka(fd, fd.type_str, v, version)
    if isinstance(v, (memoryview, bytearray)):
        return bytes(v)
    return v


# --------------------------------------------------------------------- one frame each way
def check_request(key: int, version: int, value: dict[str, Any], correlation_id: int, client_id: str | None) -> None:
    """kafka-python encodes the whole request frame; ours decodes header and body to the same values."""
    struct = codec.codec_for(key, version, True).struct
    value = without_ours(struct, value)  # our own request tags: Kafka's classes have no such field
    cls = kafka_class(ALL[key].name, "Request")
    message = cls[version](**to_kafka(cls._struct, cls.__name__, value, version))
    message.with_header(correlation_id=correlation_id, client_id=client_id)
    frame = bytes(message.encode(header=True, framed=True))

    request = codec.decode_request(frame[4:])
    assert request.header == RequestHeader(key, version, correlation_id, client_id)
    assert without_ours(struct, request.body) == value
    theirs = cls.decode(frame, version=version, header=True, framed=True)
    assert from_kafka(cls._struct, cls.__name__, theirs, version) == value
    ours = codec.encode_request(key, version, correlation_id, client_id, value)
    if ours != frame and _writes_default_tag(key, version, value):
        # kafka-python writes Fetch v17's tagged replica_directory_id even at its default (the zero uuid);
        # Kafka, and we, leave a tagged field at its default out. The two frames must carry the same request.
        again = cls.decode(ours, version=version, header=True, framed=True)
        assert from_kafka(cls._struct, cls.__name__, again, version) == value
        assert len(frame) - len(ours) == 18  # tag, size and 16 bytes: exactly that one field
        return
    assert ours == frame


def _writes_default_tag(key: int, version: int, value: dict[str, Any]) -> bool:
    return key == 1 and version >= 17 and any(p.get("replica_directory_id") == ZERO_UUID
                                             for t in value.get("topics") or [] for p in t.get("partitions") or [])


def without_ours(ks: KStruct, value: dict[str, Any]) -> dict[str, Any]:
    """``value`` without our own tagged fields (tags from OURS_FROM_TAG: Kafka's classes skip them)."""
    out = {}
    for r in ks.kfields:
        if r.name not in value or (r.tag is not None and r.tag >= OURS_FROM_TAG):
            continue
        v = value[r.name]
        if r.sub is not None and r.kind == "array" and v is not None:
            v = [without_ours(r.sub, e) for e in v]
        elif r.sub is not None and r.kind == "struct" and v is not None:
            v = without_ours(r.sub, v)
        out[r.name] = v
    return out


def check_response(key: int, version: int, value: dict[str, Any], correlation_id: int) -> None:
    """Ours encodes the whole response frame; kafka-python decodes header and body to the same values."""
    value = without_ours(codec.codec_for(key, version, False).struct, value)
    cls = kafka_class(ALL[key].name, "Response")
    frame = codec.encode_response(key, version, correlation_id, value)

    theirs = cls.decode(frame, version=version, header=True, framed=True)
    assert theirs.header.correlation_id == correlation_id
    assert from_kafka(cls._struct, cls.__name__, theirs, version) == value
    message = cls[version](**to_kafka(cls._struct, cls.__name__, value, version))
    message.with_header(correlation_id=correlation_id)
    assert bytes(message.encode(header=True, framed=True)) == frame


def _readable_response(key: int, value: dict[str, Any]) -> dict[str, Any]:
    """kafka-python reads an ApiVersions body as v0 whenever error_code != 0 (Kafka's rule): use 0."""
    return {**value, "error_code": 0} if key == 18 else value


# --------------------------------------------------------------------- small random values (hypothesis)
_SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), database=None)
_CORRELATION = st.integers(-(2**31), 2**31 - 1)
_CLIENT_ID = st.one_of(st.none(), st.text(max_size=10))


@pytest.mark.parametrize(("key", "version"), CASES, ids=IDS)
def test_kafka_python_request_frames_decode_with_ours(key: int, version: int) -> None:
    ours = codec.codec_for(key, version, True)

    @_SETTINGS
    @given(body_strategy(ours.struct), _CORRELATION, _CLIENT_ID)
    def check(value: dict[str, Any], correlation_id: int, client_id: str | None) -> None:
        check_request(key, version, value, correlation_id, client_id)

    check()


@pytest.mark.parametrize(("key", "version"), CASES, ids=IDS)
def test_our_response_frames_decode_with_kafka_python(key: int, version: int) -> None:
    ours = codec.codec_for(key, version, False)

    @_SETTINGS
    @given(body_strategy(ours.struct), _CORRELATION)
    def check(value: dict[str, Any], correlation_id: int) -> None:
        check_response(key, version, _readable_response(key, value), correlation_id)

    check()


# --------------------------------------------------------------------- large values: multi-byte varints
def big_body(ks: KStruct, depth: int = 0) -> dict[str, Any]:
    """Every field set to a non-default value whose length needs a 2-byte varint (>= 128) in compact form:
    200-byte non-ASCII strings, 300-byte bytes, 130-element arrays (at the top level), tagged fields set."""
    out: dict[str, Any] = {}
    for n, r in enumerate(ks.kfields):
        if r.kind == "array":
            count = 130 if depth == 0 else 2
            out[r.name] = [_big_value(r, depth, n + i) for i in range(count)]
        else:
            out[r.name] = _big_value(r, depth, n)
    return out


def _big_value(r: Resolved, depth: int, n: int) -> Any:
    """A large value of ``r``'s (element) type."""
    t = r.type
    if t == "struct":
        assert r.sub is not None
        return big_body(r.sub, depth + 1)
    if t == "string":
        return ("é-" + str(n)) * (200 // (2 + len(str(n))) + 1)
    if t in ("bytes", "records"):
        return bytes(range(256)) + bytes(44 + n)
    if t == "uuid":
        return uuid.UUID(int=(n + 1) * 0x0123456789ABCDEF)
    if t == "bool":
        return True
    extreme = {"int8": -100, "int16": -30000, "uint16": 65000, "int32": -(2**31) + n, "int64": 2**63 - 1 - n}
    return extreme[t]


@pytest.mark.parametrize(("key", "version"), CASES, ids=IDS)
def test_large_values_cross_both_ways(key: int, version: int) -> None:
    request = big_body(codec.codec_for(key, version, True).struct)
    check_request(key, version, request, 2**31 - 1, "client-" + "ü" * 150)
    response = big_body(codec.codec_for(key, version, False).struct)
    check_response(key, version, _readable_response(key, response), -(2**31))


# --------------------------------------------------------------------- defaults
# Fields whose default (what an encoder writes when the value is missing) differs, each for a stated reason:
# - ours writes null for a missing field that is nullable in that version; Kafka's generated code and
#   kafka-python write the zero value ("" / []) unless the JSON says "default": "null";
# - kafka-python patches ListOffsets' replica_id default to -1 (Kafka's JSON has none, i.e. 0).
DEFAULT_DIFFERENCES: dict[tuple[str, str], tuple[str, frozenset[str]]] = {
    ("ListOffsets", "Request"): ("0+", frozenset({"replica_id"})),
    ("Metadata", "Request"): ("1+", frozenset({"topics"})),
    ("OffsetFetch", "Request"): ("2-7", frozenset({"topics"})),
    ("InitProducerId", "Request"): ("0+", frozenset({"transactional_id"})),
    ("FindCoordinator", "Response"): ("1-3", frozenset({"error_message"})),
    ("JoinGroup", "Response"): ("7+", frozenset({"protocol_name"})),
    ("SaslAuthenticate", "Response"): ("0+", frozenset({"error_message"})),
    ("DescribeAcls", "Request"): ("0+", frozenset({"resource_name_filter", "principal_filter", "host_filter"})),
    ("DescribeAcls", "Response"): ("0+", frozenset({"error_message"})),
    ("DescribeUserScramCredentials", "Request"): ("0+", frozenset({"users"})),
    ("DescribeUserScramCredentials", "Response"): ("0+", frozenset({"error_message"})),
}


def expected_default_differences(name: str, side: str, version: int) -> frozenset[str]:
    spec, fields = DEFAULT_DIFFERENCES.get((name, side), ("none", frozenset()))
    return fields if version in Versions.parse(spec) else frozenset()


@pytest.mark.parametrize(("key", "version"), CASES, ids=IDS)
@pytest.mark.parametrize("side", ["Request", "Response"])
def test_a_body_with_no_values_encodes_kafkas_defaults(key: int, version: int, side: str) -> None:
    name = ALL[key].name
    is_request = side == "Request"
    theirs = bytes(kafka_class(name, side)[version]().encode())
    their_values = codec.decode_body(key, version, is_request, theirs)
    our_values = codec.decode_body(key, version, is_request, codec.encode_body(key, version, is_request, {}))

    differ = frozenset(k for k in our_values if our_values[k] != their_values[k])
    assert differ == expected_default_differences(name, side, version)
    # and with those fields given kafka-python's values, the bytes are the same
    given_values = {k: their_values[k] for k in differ}
    assert codec.encode_body(key, version, is_request, given_values) == theirs
