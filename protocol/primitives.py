"""Kafka wire primitives: readers and writers over a BytesIO, shared by compiled and interpreted codecs.

Rules:
- Big-endian fixed-width integers; unsigned varints (LEB128) of at most 5 bytes (32-bit) or 10 (64-bit);
  signed varints are zigzag-encoded.
- Classic strings: int16 length, -1 = null. Classic bytes: int32 length, -1 = null. Compact forms: unsigned
  varint length + 1, 0 = null. A null where the field is not nullable is a ProtocolError.
- Nothing reads more than the buffer holds, and nothing allocates more than the bytes that remain justify:
  every length and array count is checked against ``remaining(io)`` before use.
- Every violation raises ``ProtocolError``; callers convert struct.error and friends at one boundary.
- ``write_records``: a ``records`` value that is not bytes (a file range) is spliced by the writer, never
  copied here (see ``codec.encode_response_parts``).
"""

from __future__ import annotations

import struct
import uuid
from io import BytesIO
from typing import Any

from protocol.errors import ProtocolError

S_I8 = struct.Struct(">b")
S_I16 = struct.Struct(">h")
S_U16 = struct.Struct(">H")
S_I32 = struct.Struct(">i")
S_U32 = struct.Struct(">I")
S_I64 = struct.Struct(">q")
S_F64 = struct.Struct(">d")

# Fixed-size primitives: name -> (struct format char, size).
FIXED = {
    "bool": ("?", 1),
    "int8": ("b", 1),
    "int16": ("h", 2),
    "uint16": ("H", 2),
    "int32": ("i", 4),
    "uint32": ("I", 4),
    "int64": ("q", 8),
    "float64": ("d", 8),
}

ZERO_UUID = uuid.UUID(int=0)


def remaining(io: BytesIO) -> int:
    # seek to the end and back: far cheaper than exporting a buffer (getbuffer) on every array header
    pos = io.tell()
    end = io.seek(0, 2)
    io.seek(pos)
    return end - pos


def read_exact(io: BytesIO, n: int) -> bytes:
    b = io.read(n)
    if len(b) != n:
        raise ProtocolError(f"truncated: needed {n} bytes, had {len(b)}")
    return b


# ---------------------------------------------------------------- varints
def read_uvarint(io: BytesIO, max_bytes: int = 5) -> int:
    shift = 0
    result = 0
    for _ in range(max_bytes):
        b = io.read(1)
        if not b:
            raise ProtocolError("truncated varint")
        byte = b[0]
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result
        shift += 7
    raise ProtocolError("varint too long")


def read_varint(io: BytesIO) -> int:
    v = read_uvarint(io, 5)
    return (v >> 1) ^ -(v & 1)


def read_varlong(io: BytesIO) -> int:
    v = read_uvarint(io, 10)
    return (v >> 1) ^ -(v & 1)


def encode_uvarint(value: int) -> bytes:
    if value < 0:
        raise ProtocolError(f"unsigned varint cannot hold {value}")
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    return encode_uvarint(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def encode_varlong(value: int) -> bytes:
    return encode_uvarint(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


# ---------------------------------------------------------------- lengths and counts
def read_count(io: BytesIO, compact: bool, nullable: bool, min_size: int) -> int:
    """An array count (-1 for null), checked against the bytes left (each element >= min_size bytes)."""
    n = read_uvarint(io) - 1 if compact else S_I32.unpack(read_exact(io, 4))[0]
    if n < 0:
        if n == -1 and nullable:
            return -1
        raise ProtocolError(f"invalid array length {n}")
    if n and n * max(min_size, 1) > remaining(io):
        raise ProtocolError(f"array length {n} exceeds the {remaining(io)} bytes left")
    return n


def write_count(io: BytesIO, n: int, compact: bool) -> None:
    io.write(encode_uvarint(n + 1) if compact else S_I32.pack(n))


# ---------------------------------------------------------------- strings and bytes
def _read_sized(io: BytesIO, compact: bool, nullable: bool, width: struct.Struct, what: str) -> bytes | None:
    """A length (compact varint + 1, or int16/int32 ``width``; -1 = null) and that many bytes."""
    n = read_uvarint(io) - 1 if compact else width.unpack(read_exact(io, width.size))[0]
    if n < 0:
        if n == -1 and nullable:
            return None
        raise ProtocolError(f"invalid {what} length {n}")
    b = io.read(n)
    if len(b) != n:
        raise ProtocolError(f"{what} length {n} exceeds the bytes left")
    return b


def read_string(io: BytesIO, compact: bool, nullable: bool) -> str | None:
    b = _read_sized(io, compact, nullable, S_I16, "string")
    if b is None:
        return None
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProtocolError(f"string is not UTF-8: {e}") from None


def write_string(io: BytesIO, value: str | None, compact: bool) -> None:
    if value is None:
        io.write(b"\x00" if compact else b"\xff\xff")
        return
    b = value.encode("utf-8")
    if compact:
        io.write(encode_uvarint(len(b) + 1))
    else:
        if len(b) > 0x7FFF:
            raise ProtocolError("string longer than 32767 bytes")
        io.write(S_I16.pack(len(b)))
    io.write(b)


def read_bytes(io: BytesIO, compact: bool, nullable: bool) -> bytes | None:
    return _read_sized(io, compact, nullable, S_I32, "bytes")


def write_bytes(io: BytesIO, value: bytes | bytearray | memoryview | None, compact: bool) -> None:
    if value is None:
        io.write(b"\x00" if compact else b"\xff\xff\xff\xff")
        return
    n = len(value)
    io.write(encode_uvarint(n + 1) if compact else S_I32.pack(n))
    io.write(value)


def write_records(io: BytesIO, value: Any, compact: bool) -> None:
    """A ``records`` field: bytes are written as ``write_bytes`` writes them. Anything else with a length (a
    file range, whose bytes are not in memory) gets its length prefix here and its bytes spliced in by the
    writer (``io.splice``: only ``codec.PartsIO`` has it; a plain BytesIO raises TypeError)."""
    if value is None or isinstance(value, (bytes, bytearray, memoryview)):
        write_bytes(io, value, compact)
        return
    splice = getattr(io, "splice", None)
    if splice is None:
        raise TypeError(f"records {value!r} are not bytes: encode with codec.encode_response_parts")
    n = len(value)
    io.write(encode_uvarint(n + 1) if compact else S_I32.pack(n))
    splice(value)


def read_uuid(io: BytesIO) -> uuid.UUID:
    return uuid.UUID(bytes=read_exact(io, 16))


def write_uuid(io: BytesIO, value: uuid.UUID | bytes | None) -> None:
    if value is None:
        io.write(bytes(16))
    elif isinstance(value, uuid.UUID):
        io.write(value.bytes)
    else:
        if len(value) != 16:
            raise ProtocolError("uuid must be 16 bytes")
        io.write(value)


# ---------------------------------------------------------------- slow paths of the compiled fast paths
# Compiled codecs read a length's first byte themselves (``t = io.read(1)``) and handle the common case
# inline (one-byte varint, empty tagged section); anything else continues here with that byte given back.
def read_uvarint_after(io: BytesIO, first: bytes) -> int:
    """An unsigned (32-bit) varint whose first byte (b"" at the end of input) was already read."""
    if not first:
        raise ProtocolError("truncated varint")
    result = first[0] & 0x7F
    shift = 7
    for _ in range(4):
        b = io.read(1)
        if not b:
            raise ProtocolError("truncated varint")
        byte = b[0]
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result
        shift += 7
    raise ProtocolError("varint too long")


def skip_tagged_after(io: BytesIO, first: bytes) -> None:
    """A tagged-field section whose count's first byte was already read (and was not 0)."""
    io.seek(-len(first), 1)
    skip_tagged_fields(io)


def truncated(needed: int, had: int, what: str) -> None:
    raise ProtocolError(f"{what} length {needed} exceeds the {had} bytes left")


def bad_length(n: int, what: str) -> None:
    raise ProtocolError(f"invalid {what} length {n}")


def check_count(io: BytesIO, n: int, nullable: bool, min_size: int) -> int:
    """An array count already read (-1 for null): refuse negatives and counts the bytes left cannot hold."""
    if n < 0:
        if n == -1 and nullable:
            return -1
        raise ProtocolError(f"invalid array length {n}")
    if n and n * max(min_size, 1) > remaining(io):
        raise ProtocolError(f"array length {n} exceeds the {remaining(io)} bytes left")
    return n


# ---------------------------------------------------------------- tagged fields
def skip_tagged_fields(io: BytesIO) -> None:
    """Read a tagged-field section that declares no known tags: skip every field."""
    count = read_uvarint(io)
    for _ in range(count):
        read_uvarint(io)
        size = read_uvarint(io)
        if size > remaining(io):
            raise ProtocolError("tagged field longer than the bytes left")
        io.seek(size, 1)
