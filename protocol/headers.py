"""Request and response headers.

Rules:
- Request header v1: api_key int16, api_version int16, correlation_id int32, client_id nullable string
  (always the classic int16-length form, even in v2). v2 (flexible APIs) adds a tagged-field section.
- Response header v0: correlation_id int32; v1 (flexible APIs) adds a tagged-field section, except
  ApiVersions, whose response header is always v0 so that any client can read the version table.
- Header versions follow from the API's flexibility at that version; nothing else chooses them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from io import BytesIO

from protocol import primitives as P
from protocol.errors import ProtocolError

API_VERSIONS_KEY = 18
_FIXED = struct.Struct(">hhi")
_CORR = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def peek_request_ids(payload: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the first 8 bytes of a request frame."""
    if len(payload) < 8:
        raise ProtocolError(f"request of {len(payload)} bytes is shorter than a header")
    return _FIXED.unpack_from(payload, 0)


def read_request_header(io: BytesIO, flexible: bool) -> RequestHeader:
    api_key, api_version, correlation_id = _FIXED.unpack(P.read_exact(io, 8))
    client_id = P.read_string(io, False, True)
    if flexible:
        P.skip_tagged_fields(io)
    return RequestHeader(api_key, api_version, correlation_id, client_id)


def write_request_header(io: BytesIO, header: RequestHeader, flexible: bool) -> None:
    io.write(_FIXED.pack(header.api_key, header.api_version, header.correlation_id))
    P.write_string(io, header.client_id, False)
    if flexible:
        io.write(b"\x00")


def response_header_flexible(api_key: int, body_flexible: bool) -> bool:
    return body_flexible and api_key != API_VERSIONS_KEY


def write_response_header(io: BytesIO, correlation_id: int, flexible: bool) -> None:
    io.write(_CORR.pack(correlation_id))
    if flexible:
        io.write(b"\x00")


def read_response_header(io: BytesIO, flexible: bool) -> int:
    (correlation_id,) = _CORR.unpack(P.read_exact(io, 4))
    if flexible:
        P.skip_tagged_fields(io)
    return correlation_id
