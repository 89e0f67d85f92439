"""Encode and decode whole Kafka requests and responses (sans-IO: bytes in, dicts out, and back).

Rules:
- One compiled construct per (api key, version, request|response), built from ``protocol.messages`` on first
  use and cached for the life of the process (``codec_for``).
- ``decode_request(frame)`` raises ``UnknownApi`` / ``UnsupportedVersion`` (both carry the header ids so the
  server can answer ApiVersions with error 35, or close) and ``ProtocolError`` for anything malformed. Any
  lower-level exception from a malformed frame is converted to ``ProtocolError`` here, the single boundary.
- Trailing bytes after a request body are ignored (newer clients may add fields we do not read).
- Encoders return complete frames (size prefix included) so the runtime can write them as they are.
- ``encode_response_parts``: a response whose ``records`` fields hold values that are not bytes (file
  ranges, zero-copy Fetch) comes as a list of parts: bytes, then each such value where its bytes belong,
  bytes between them and after; the size prefix counts every part by its length. Nothing is read from them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cache
from io import BytesIO
from typing import Any

from construct import Construct

from protocol import headers as H
from protocol.compiler import KStruct, build_struct
from protocol.errors import ProtocolError
from protocol.messages import ALL
from protocol.schema import ApiSchema

_SIZE = struct.Struct(">i")


class UnknownApi(ProtocolError):
    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(f"unknown api key {api_key}")
        self.api_key, self.api_version, self.correlation_id = api_key, api_version, correlation_id


class UnsupportedVersion(ProtocolError):
    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(f"unsupported version {api_version} of api {api_key}")
        self.api_key, self.api_version, self.correlation_id = api_key, api_version, correlation_id


@dataclass(frozen=True, slots=True)
class Request:
    header: H.RequestHeader
    body: dict[str, Any]

    @property
    def api_key(self) -> int:
        return self.header.api_key

    @property
    def version(self) -> int:
        return self.header.api_version


@dataclass(frozen=True, slots=True)
class MessageCodec:
    schema: ApiSchema
    version: int
    is_request: bool
    flexible: bool
    struct: KStruct
    compiled: Construct

    def decode(self, io: BytesIO) -> dict[str, Any]:
        return self.compiled.parsefunc(io, None)  # type: ignore[attr-defined]

    def encode_into(self, io: BytesIO, body: Any) -> None:
        self.compiled.buildfunc(body, io, None)  # type: ignore[attr-defined]


def schema_for(api_key: int) -> ApiSchema | None:
    return ALL.get(api_key)


@cache
def codec_for(api_key: int, version: int, is_request: bool) -> MessageCodec:
    schema = ALL[api_key]
    if not schema.supports(version):
        raise ValueError(f"{schema.name} v{version} is not declared")
    flexible = schema.is_flexible(version)
    fields = schema.request if is_request else schema.response
    kind = "Request" if is_request else "Response"
    ks = build_struct(fields, version, flexible, f"{schema.name}{kind}v{version}")
    return MessageCodec(schema, version, is_request, flexible, ks, ks.compile())


def _guard(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except ProtocolError:
        raise
    except (struct.error, UnicodeError, ValueError, IndexError, OverflowError, TypeError, MemoryError) as e:
        raise ProtocolError(f"malformed: {type(e).__name__}: {e}") from None


# ------------------------------------------------------------------ server side
def decode_request(payload: bytes) -> Request:
    api_key, api_version, correlation_id = H.peek_request_ids(payload)
    schema = ALL.get(api_key)
    if schema is None:
        raise UnknownApi(api_key, api_version, correlation_id)
    if not schema.supports(api_version):
        raise UnsupportedVersion(api_key, api_version, correlation_id)
    codec = codec_for(api_key, api_version, True)
    io = BytesIO(payload)

    def run() -> Request:
        header = H.read_request_header(io, codec.flexible)
        return Request(header, codec.decode(io))

    return _guard(run)


def encode_response(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
    codec = codec_for(api_key, version, False)
    io = BytesIO()
    io.write(b"\x00\x00\x00\x00")
    H.write_response_header(io, correlation_id, H.response_header_flexible(api_key, codec.flexible))
    codec.encode_into(io, body)
    size = io.tell() - 4
    io.seek(0)
    io.write(_SIZE.pack(size))
    return io.getvalue()


class PartsIO(BytesIO):
    """A BytesIO that keeps spliced values (``primitives.write_records``) as parts of their own, by position."""

    def __init__(self) -> None:
        super().__init__()
        self.spliced: list[tuple[int, Any]] = []  # (position in the buffer, value), in order

    def splice(self, value: Any) -> None:
        self.spliced.append((self.tell(), value))


def encode_response_parts(api_key: int, version: int, correlation_id: int, body: Any) -> list[Any]:
    """``encode_response``, with every non-bytes ``records`` value left as a part of its own (see the rules):
    [bytes, value, bytes, ..., bytes], no empty bytes part; one bytes part when there is no such value."""
    codec = codec_for(api_key, version, False)
    io = PartsIO()
    io.write(b"\x00\x00\x00\x00")
    H.write_response_header(io, correlation_id, H.response_header_flexible(api_key, codec.flexible))
    codec.encode_into(io, body)
    spliced = io.spliced
    size = io.tell() - 4 + sum(len(v) for _, v in spliced)
    io.seek(0)
    io.write(_SIZE.pack(size))
    data = io.getvalue()
    if not spliced:
        return [data]
    view = memoryview(data)
    parts: list[Any] = []
    at = 0
    for pos, value in spliced:
        if pos > at:
            parts.append(bytes(view[at:pos]))
        parts.append(value)
        at = pos
    if at < len(data):
        parts.append(bytes(view[at:]))
    return parts


# ------------------------------------------------------------------ client side
def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None, body: Any) -> bytes:
    codec = codec_for(api_key, version, True)
    io = BytesIO()
    io.write(b"\x00\x00\x00\x00")
    H.write_request_header(io, H.RequestHeader(api_key, version, correlation_id, client_id), codec.flexible)
    codec.encode_into(io, body)
    size = io.tell() - 4
    io.seek(0)
    io.write(_SIZE.pack(size))
    return io.getvalue()


def decode_response(api_key: int, version: int, payload: bytes) -> tuple[int, dict[str, Any]]:
    """(correlation_id, body) of a response frame's payload (size prefix already removed)."""
    codec = codec_for(api_key, version, False)
    io = BytesIO(payload)

    def run() -> tuple[int, dict[str, Any]]:
        corr = H.read_response_header(io, H.response_header_flexible(api_key, codec.flexible))
        return corr, codec.decode(io)

    return _guard(run)


def decode_body(api_key: int, version: int, is_request: bool, data: bytes) -> dict[str, Any]:
    """Decode a bare body (no header); used by tests and tools."""
    codec = codec_for(api_key, version, is_request)
    return _guard(codec.decode, BytesIO(data))


def encode_body(api_key: int, version: int, is_request: bool, body: Any) -> bytes:
    codec = codec_for(api_key, version, is_request)
    io = BytesIO()
    codec.encode_into(io, body)
    return io.getvalue()
