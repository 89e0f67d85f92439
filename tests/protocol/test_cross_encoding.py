"""Our codec and kafka-python 3.0.12's own protocol classes read each other's frames to the same values.

The story, for every API we serve and every version both sides support (kafka-python's JSON ``validVersions``
intersected with ours), old (non-flexible) and flexible alike:

- Requests: a body is generated from our declaration (hypothesis), turned into kafka-python's data objects,
  and kafka-python encodes the whole frame itself (size, request header v1/v2 with api key, version,
  correlation id and client id, body). ``codec.decode_request`` must give back exactly that header and body,
  kafka-python's own decode of its frame must give the same body, and our encoder must write the same bytes.
- Responses: ``codec.encode_response`` writes the frame; kafka-python's ``Response.decode(..., header=True,
  framed=True)`` must read the correlation id and every body value back, and its own encoder must write the
  same bytes.

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

from protocol import codec
from protocol.headers import RequestHeader
from protocol.messages import ALL

from strategies import body as body_strategy  # type: ignore[import-not-found]

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # importing kafka-python loads every schema and warns
    from kafka.protocol import admin as kp_admin
    from kafka.protocol import consumer as kp_consumer
    from kafka.protocol import metadata as kp_metadata
    from kafka.protocol import producer as kp_producer
    from kafka.protocol.schemas.fields.codecs import BitField

_MODULES = (kp_admin, kp_consumer, kp_metadata, kp_producer)
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
    schema = ALL[key]
    lo, hi = kafka_class(schema.name, "Request").valid_versions
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


# --------------------------------------------------------------------- the checks
_SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), database=None)
_CORRELATION = st.integers(-(2**31), 2**31 - 1)
_CLIENT_ID = st.one_of(st.none(), st.text(max_size=10))


@pytest.mark.parametrize(("key", "version"), CASES, ids=IDS)
def test_kafka_python_request_frames_decode_with_ours(key: int, version: int) -> None:
    schema = ALL[key]
    cls = kafka_class(schema.name, "Request")
    ours = codec.codec_for(key, version, True)

    @_SETTINGS
    @given(body_strategy(ours.struct), _CORRELATION, _CLIENT_ID)
    def check(value: dict[str, Any], correlation_id: int, client_id: str | None) -> None:
        message = cls[version](**to_kafka(cls._struct, cls.__name__, value, version))
        message.with_header(correlation_id=correlation_id, client_id=client_id)
        frame = bytes(message.encode(header=True, framed=True))

        request = codec.decode_request(frame[4:])
        assert request.header == RequestHeader(key, version, correlation_id, client_id)
        assert request.body == value
        theirs = cls.decode(frame, version=version, header=True, framed=True)
        assert from_kafka(cls._struct, cls.__name__, theirs, version) == value
        assert codec.encode_request(key, version, correlation_id, client_id, value) == frame

    check()


@pytest.mark.parametrize(("key", "version"), CASES, ids=IDS)
def test_our_response_frames_decode_with_kafka_python(key: int, version: int) -> None:
    schema = ALL[key]
    cls = kafka_class(schema.name, "Response")
    ours = codec.codec_for(key, version, False)

    @_SETTINGS
    @given(body_strategy(ours.struct), _CORRELATION)
    def check(value: dict[str, Any], correlation_id: int) -> None:
        if key == 18:  # kafka-python reads an ApiVersions body as v0 whenever error_code != 0
            value = {**value, "error_code": 0}
        frame = codec.encode_response(key, version, correlation_id, value)

        theirs = cls.decode(frame, version=version, header=True, framed=True)
        assert theirs.header.correlation_id == correlation_id
        assert from_kafka(cls._struct, cls.__name__, theirs, version) == value
        message = cls[version](**to_kafka(cls._struct, cls.__name__, value, version))
        message.with_header(correlation_id=correlation_id)
        assert bytes(message.encode(header=True, framed=True)) == frame

    check()


@pytest.mark.parametrize(("key", "version"), CASES, ids=IDS)
@pytest.mark.parametrize("side", ["Request", "Response"])
def test_a_body_with_no_values_encodes_kafkas_defaults_on_both_sides(key: int, version: int, side: str) -> None:
    cls = kafka_class(ALL[key].name, side)
    theirs = bytes(cls[version]().encode())
    assert codec.encode_body(key, version, side == "Request", {}) == theirs
