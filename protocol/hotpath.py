"""Hand-written codecs for the most frequent request shapes (the hot path), beside the generic codec.

Rules:
- A hot decoder takes a request payload (the frame without its size) and returns the same values the
  generic ``codec.decode_request`` would, or ``None`` when the frame is anything but the plain common
  shape (tagged fields present, a length needing more than one varint byte, a truncated or malformed
  field, invalid UTF-8, a version it does not know). ``None`` never means an error: the caller then takes
  the generic path, which answers or rejects exactly as before. Trailing bytes are ignored, as the
  generic decoder ignores them.
- OffsetCommit (v2-9) is decoded by hand into the generic ``Request`` (its dicts, key for key), except the
  common shape of one topic with one partition, whose body is a ``OneCommit`` tuple (``as_body(version)``
  is exactly the generic dict): the runtime serves that one without dicts (``Coordinator.commit_offset``)
  and answers it with ``offset_commit_answer`` (the frame the generic encoder gives, with throttle 0).
- A hot encoder returns a whole response frame (size prefix included), byte-identical to
  ``codec.encode_response`` for the same body; tests check both properties against the generic codec.
- Pure functions over bytes, no I/O. ``HeartbeatDecoder`` adds one bounded memo: a member sends the same
  Heartbeat bytes every time but for the correlation id, so the decode of the bytes after the correlation
  id is remembered (frames under ``MEMO_MAX_FRAME`` bytes, at most ``MEMO_ENTRIES`` of them: a client
  churning distinct frames costs it a cleared memo, never the server memory).
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from protocol.codec import Request
from protocol.headers import RequestHeader
from protocol.primitives import encode_uvarint

_HDR = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")

HEARTBEAT = 12

# Heartbeat response frames, by version: size prefix and correlation id, then the body for an error code.
_HB_V0 = struct.Struct(">iih")  # size 6: correlation_id, error_code
_HB_V1 = struct.Struct(">iiih")  # size 10: correlation_id, throttle_time_ms, error_code
_HB_V4 = struct.Struct(">iiBihB")  # size 12: correlation_id, header tags, throttle, error_code, body tags


def request_ids(payload: bytes) -> tuple[int, int, int, int] | None:
    """(api_key, api_version, correlation_id, offset of the header's end) of a request, or None.

    The header end is after client_id for classic headers; for flexible headers the caller adds the
    tagged-field section (only an empty one, a single 0 byte, is hot)."""
    if len(payload) < 10:
        return None
    api_key, version, correlation_id, client_len = _HDR.unpack_from(payload, 0)
    end = 10 + (client_len if client_len > 0 else 0)
    if client_len < -1 or end > len(payload):
        return None
    return api_key, version, correlation_id, end


def client_id(payload: bytes) -> str | None:
    """The request header's client_id (None for a null one) of a payload ``request_ids`` accepted; invalid
    UTF-8 raises UnicodeDecodeError, as the generic decoder refuses it."""
    n = _I16.unpack_from(payload, 8)[0]
    return None if n < 0 else payload[10:10 + n].decode("utf-8")


def decode_heartbeat(payload: bytes, version: int, pos: int) -> tuple[str, int, str, str | None] | None:
    """(group_id, generation_id, member_id, group_instance_id) of a Heartbeat v0-4 request whose header
    ends at ``pos`` (as ``request_ids`` gave it), or None."""
    if version >= 4:  # compact strings, each length one varint byte (< 127 bytes), inlined: the hot shape
        n = len(payload)
        if version > 4 or pos + 8 > n or payload[pos] != 0:
            return None
        glen = payload[pos + 1] - 1
        pos += 2
        end = pos + glen
        if glen < 0 or glen > 126 or end + 5 > n:
            return None
        mlen = payload[end + 4] - 1
        mpos = end + 5
        mend = mpos + mlen
        if mlen < 0 or mlen > 126 or mend + 2 > n:
            return None
        ilen = payload[mend] - 1
        if ilen > 126:
            return None
        iend = mend + 1 + ilen if ilen >= 0 else mend + 1
        if iend >= n or payload[iend] != 0:
            return None  # body tagged fields present (or missing): the generic path
        try:
            return (payload[pos:end].decode("utf-8"), _I32.unpack_from(payload, end)[0],
                    payload[mpos:mend].decode("utf-8"),
                    payload[mend + 1:iend].decode("utf-8") if ilen >= 0 else None)
        except UnicodeDecodeError:
            return None
    if version < 0:
        return None
    try:
        group_id, pos = _str(payload, pos)
        generation = _I32.unpack_from(payload, pos)[0]
        member_id, pos = _str(payload, pos + 4)
        instance_id = _str(payload, pos)[0] if version >= 3 else None
    except (IndexError, struct.error, UnicodeDecodeError):
        return None
    if group_id is None or member_id is None:
        return None  # not nullable: the generic decoder refuses them
    return group_id, generation, member_id, instance_id


MEMO_MAX_FRAME = 512
MEMO_ENTRIES = 20_000

Heartbeat = tuple[int, str, int, str, str | None]  # version, group_id, generation_id, member_id, instance id


class HeartbeatDecoder:
    """``decode(payload)`` -> (version, group_id, generation_id, member_id, group_instance_id) or None, for a
    Heartbeat request payload (api key 12 already checked by the caller); memoised as the module says."""

    __slots__ = ("_memo",)

    def __init__(self) -> None:
        self._memo: dict[bytes, Heartbeat] = {}

    def decode(self, payload: bytes) -> Heartbeat | None:
        n = len(payload)
        if n > MEMO_MAX_FRAME:
            return self._decode(payload, payload[2] << 8 | payload[3])
        # a memo key comes from a decoded frame (>= 10 bytes), so a shorter payload always misses here
        key = payload[8:]
        hit = self._memo.get(key)
        if hit is not None and hit[0] == (payload[2] << 8 | payload[3]):
            return hit
        if n < 10:
            return None
        version = payload[2] << 8 | payload[3]
        hit = self._decode(payload, version)
        if hit is not None:
            memo = self._memo
            if len(memo) >= MEMO_ENTRIES:
                memo.clear()
            memo[key] = hit
        return hit

    @staticmethod
    def _decode(payload: bytes, version: int) -> Heartbeat | None:
        ids = request_ids(payload)
        if ids is None:
            return None
        try:
            client_id(payload)  # never used here, but the generic decoder refuses one that is not UTF-8
        except UnicodeDecodeError:
            return None
        hb = decode_heartbeat(payload, version, ids[3])
        return None if hb is None else (version, *hb)


# by version (0-4): error code -> the answer frame's bytes before and after the correlation id
_HB_PARTS: tuple[dict[int, tuple[bytes, bytes]], ...] = ({}, {}, {}, {}, {})


def heartbeat_answer(version: int, payload: bytes, error_code: int) -> bytes:
    """``heartbeat_response`` for the request ``payload`` (its correlation id copied as bytes)."""
    return payload[4:8].join(heartbeat_answer_parts(version, error_code))


def heartbeat_answer_parts(version: int, error_code: int) -> tuple[bytes, bytes]:
    """The answer frame's bytes before and after the correlation id (a caller may keep them)."""
    by_error = _HB_PARTS[version if version < 4 else 4]
    parts = by_error.get(error_code)
    if parts is None:
        frame = heartbeat_response(version, 0, error_code)
        parts = by_error[int(error_code)] = (frame[:4], frame[8:])
    return parts


def heartbeat_response(version: int, correlation_id: int, error_code: int) -> bytes:
    """The whole Heartbeat response frame (throttle_time_ms 0) for a request of ``version``."""
    if version >= 4:
        return _HB_V4.pack(12, correlation_id, 0, 0, error_code, 0)
    if version >= 1:
        return _HB_V1.pack(10, correlation_id, 0, error_code)
    return _HB_V0.pack(6, correlation_id, error_code)


# ---------------------------------------------------------------- OffsetCommit (8), v2-9

OFFSET_COMMIT = 8
_I64 = struct.Struct(">q")
_I32I64 = struct.Struct(">iq")


def decode_offset_commit(payload: bytes) -> Request | None:
    """The generic decoder's ``Request`` for an OffsetCommit v2-9 payload, or None (see the module rules)."""
    ids = request_ids(payload)
    if ids is None or ids[0] != OFFSET_COMMIT or not 2 <= ids[1] <= 9:
        return None
    try:
        return _decode_offset_commit(payload, ids[1], ids[2], ids[3])
    except (IndexError, struct.error, UnicodeDecodeError):
        return None


def _decode_offset_commit(payload: bytes, version: int, correlation_id: int, pos: int) -> Request | None:
    flexible = version >= 8
    n = len(payload)
    if flexible:
        if payload[pos] != 0:
            return None
        pos += 1
    string = _cstr if flexible else _str
    count = _ccount if flexible else _count
    group_id, pos = string(payload, pos)
    if group_id is None:
        return None
    generation = _I32.unpack_from(payload, pos)[0]
    member_id, pos = string(payload, pos + 4)
    if member_id is None:
        return None
    body: dict[str, Any] = {"group_id": group_id, "generation_id_or_member_epoch": generation,
                            "member_id": member_id}
    if version >= 7:
        body["group_instance_id"], pos = string(payload, pos)
    if version <= 4:
        body["retention_time_ms"] = _I64.unpack_from(payload, pos)[0]
        pos += 8
    topics_n, pos = count(payload, pos)
    if topics_n < 0:
        return None
    if topics_n == 1:
        one = _one_partition(payload, version, pos, string, count, flexible)
        if one is not None:
            return Request(RequestHeader(OFFSET_COMMIT, version, correlation_id, client_id(payload)),
                           OneCommit(group_id, generation, member_id, body.get("group_instance_id"),
                                     body.get("retention_time_ms", -1), *one))
    topics = []
    for _ in range(topics_n):
        name, pos = string(payload, pos)
        if name is None:
            return None
        parts_n, pos = count(payload, pos)
        if parts_n < 0:
            return None
        parts = []
        for _ in range(parts_n):
            if pos + 12 > n:
                return None
            index, offset = _I32I64.unpack_from(payload, pos)
            pos += 12
            part: dict[str, Any] = {"partition_index": index, "committed_offset": offset}
            if version >= 6:
                part["committed_leader_epoch"] = _I32.unpack_from(payload, pos)[0]
                pos += 4
            part["committed_metadata"], pos = string(payload, pos)
            if flexible:
                if payload[pos] != 0:
                    return None
                pos += 1
            parts.append(part)
        if flexible:
            if payload[pos] != 0:
                return None
            pos += 1
        topics.append({"name": name, "partitions": parts})
    if flexible and payload[pos] != 0:
        return None
    body["topics"] = topics
    return Request(RequestHeader(OFFSET_COMMIT, version, correlation_id, client_id(payload)), body)


# OffsetCommit answers of one topic with one partition: everything after the correlation id depends only on
# (version, topic, partition, error), so it is cached (cleared at ANSWER_CACHE_LIMIT entries: bounded memory
# whatever topic names clients send).
ANSWER_CACHE_LIMIT = 10_000
_tails: dict[tuple[int, str, int, int], tuple[bytes, bytes]] = {}


def offset_commit_answer(version: int, correlation_id: int, topic: str, partition: int, error: int) -> bytes:
    key = (version, topic, partition, error)
    parts = _tails.get(key)
    if parts is None:
        if len(_tails) >= ANSWER_CACHE_LIMIT:
            _tails.clear()
        parts = _tails[key] = _build_answer(version, topic, partition, error)
    return parts[0] + _I32.pack(correlation_id) + parts[1]


def _build_answer(version: int, topic: str, partition: int, error: int) -> tuple[bytes, bytes]:
    if not 2 <= version <= 9:
        raise ValueError(f"OffsetCommit v{version} is not built by hand")
    name = topic.encode()
    if version >= 8:
        body = b"".join((b"\x00",  # response header tagged fields
                         _I32.pack(0), b"\x02", encode_uvarint(len(name) + 1), name, b"\x02",
                         _I32.pack(partition), _I16.pack(error), b"\x00", b"\x00", b"\x00"))
    else:
        body = b"".join((_I32.pack(0) if version >= 3 else b"", _I32.pack(1), _I16.pack(len(name)), name,
                         _I32.pack(1), _I32.pack(partition), _I16.pack(error)))
    return _I32.pack(4 + len(body)), body


def _one_partition(payload: bytes, version: int, pos: int, string: Any, count: Any, flexible: bool
                   ) -> tuple[str, int, int, int, str | None] | None:
    """(topic, partition, offset, leader epoch, metadata) when the one topic has exactly one partition and
    the request ends as the generic decoder expects; else None (the caller decodes the general shape)."""
    name, pos = string(payload, pos)
    if name is None:
        return None
    parts_n, pos = count(payload, pos)
    if parts_n != 1 or pos + 12 > len(payload):
        return None
    index, offset = _I32I64.unpack_from(payload, pos)
    pos += 12
    epoch = -1
    if version >= 6:
        epoch = _I32.unpack_from(payload, pos)[0]
        pos += 4
    metadata, pos = string(payload, pos)
    if flexible and (payload[pos] != 0 or payload[pos + 1] != 0 or payload[pos + 2] != 0):
        return None
    return name, index, offset, epoch, metadata


class OneCommit(NamedTuple):
    """The body of an OffsetCommit of one topic with one partition (the hot decoder's shape for it).
    ``as_body()`` gives the generic decoder's dict for the same request."""

    group_id: str
    generation: int
    member_id: str
    instance_id: str | None  # None before v7 (not on the wire)
    retention_ms: int  # -1 outside v2-4 (not on the wire)
    topic: str
    partition: int
    offset: int
    leader_epoch: int  # -1 before v6 (not on the wire)
    metadata: str | None

    def as_body(self, version: int) -> dict[str, Any]:
        body: dict[str, Any] = {"group_id": self.group_id, "generation_id_or_member_epoch": self.generation,
                                "member_id": self.member_id}
        if version >= 7:
            body["group_instance_id"] = self.instance_id
        if version <= 4:
            body["retention_time_ms"] = self.retention_ms
        part: dict[str, Any] = {"partition_index": self.partition, "committed_offset": self.offset}
        if version >= 6:
            part["committed_leader_epoch"] = self.leader_epoch
        part["committed_metadata"] = self.metadata
        body["topics"] = [{"name": self.topic, "partitions": [part]}]
        return body


def _str(payload: bytes, pos: int) -> tuple[str | None, int]:
    """A classic (nullable) string; a truncated one raises IndexError."""
    n = _I16.unpack_from(payload, pos)[0]
    pos += 2
    if n < 0:
        if n != -1:
            raise IndexError("bad length")
        return None, pos
    end = pos + n
    if end > len(payload):
        raise IndexError("truncated")
    return payload[pos:end].decode("utf-8"), end


def _cstr(payload: bytes, pos: int) -> tuple[str | None, int]:
    """A compact (nullable) string whose length fits one varint byte; anything else raises IndexError."""
    n = payload[pos]
    if n & 0x80:
        raise IndexError("long string: the generic path")
    pos += 1
    if n == 0:
        return None, pos
    end = pos + n - 1
    if end > len(payload):
        raise IndexError("truncated")
    return payload[pos:end].decode("utf-8"), end


def _count(payload: bytes, pos: int) -> tuple[int, int]:
    return _I32.unpack_from(payload, pos)[0], pos + 4


def _ccount(payload: bytes, pos: int) -> tuple[int, int]:
    n = payload[pos]
    if n & 0x80:
        raise IndexError("long array: the generic path")
    return n - 1, pos + 1
