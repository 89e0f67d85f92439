"""OffsetCommit responses of one topic with one partition, built by hand (the hot path's answer).

Rules:
- ``offset_commit_answer(version, correlation_id, topic, partition, error)`` returns the whole frame (size
  prefix included) that ``codec.encode_response(8, version, correlation_id, body)`` gives for that body with
  throttle_time_ms 0, for versions 2-9 (v8+ flexible: response header v1 and empty tagged fields).
- Everything after the correlation id depends only on (version, topic, partition, error): it is cached, and
  the cache is cleared at ``CACHE_LIMIT`` entries, so memory stays bounded whatever clients send.
"""

from __future__ import annotations

import struct

CACHE_LIMIT = 10_000
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

_tails: dict[tuple[int, str, int, int], tuple[bytes, bytes]] = {}


def offset_commit_answer(version: int, correlation_id: int, topic: str, partition: int, error: int) -> bytes:
    key = (version, topic, partition, error)
    parts = _tails.get(key)
    if parts is None:
        if len(_tails) >= CACHE_LIMIT:
            _tails.clear()
        parts = _tails[key] = _build(version, topic, partition, error)
    return parts[0] + _I32.pack(correlation_id) + parts[1]


def _build(version: int, topic: str, partition: int, error: int) -> tuple[bytes, bytes]:
    if not 2 <= version <= 9:
        raise ValueError(f"OffsetCommit v{version} is not built by hand")
    name = topic.encode()
    if version >= 8:
        body = b"".join((b"\x00",  # response header tagged fields
                         _I32.pack(0), b"\x02", _uvarint(len(name) + 1), name, b"\x02",
                         _I32.pack(partition), _I16.pack(error), b"\x00", b"\x00", b"\x00"))
    else:
        body = b"".join((_I32.pack(0) if version >= 3 else b"", _I32.pack(1), _I16.pack(len(name)), name,
                         _I32.pack(1), _I32.pack(partition), _I16.pack(error)))
    return _I32.pack(4 + len(body)), body


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)
