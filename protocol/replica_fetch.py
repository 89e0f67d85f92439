"""Fetch v12 for the replication round, written by hand (issue #35): the follower's request, the leader's
answer, the follower's decoding of it.

Why: every replicated commit costs each follower one Fetch answer and one Fetch request; the generic codec
(``protocol.codec``, schema-driven) spent about a tenth of the cluster's CPU on these four steps. These are
straight ``struct`` code for exactly the shapes replication uses.

Rules:
- ``encode_request`` writes exactly what ``codec.encode_request(1, 12, ...)`` writes for a body of the
  replica fetcher's shape (every field present; ``cluster_id`` None, so no tagged field), frame size
  included. A body of another shape (a ``cluster_id``) goes to the generic codec.
- ``encode_response`` is a ``Slot.complete`` encoder: for Fetch v12 bodies of the leader's shape (no
  aborted transactions, bytes records, no partition tagged field) it writes exactly what
  ``codec.encode_response`` writes; anything else (another version, a tagged field, file-range records) is
  the generic codec's.
- ``decode_response`` reads a Fetch v12 answer payload (size prefix removed) into the generic codec's dict
  for every field replication reads (the partition tagged fields ``diverging_epoch``, ``current_leader``,
  ``snapshot_id`` are read past and left None: replication does not use them; aborted transactions are
  kept). Like the generic codec it refuses a string, bytes or array that claims more than the bytes left, a
  null where none may be, and a varint longer than 5 bytes: ``ProtocolError``.
- ``decode_request`` is the leader's hot decoder for Fetch v12 request payloads (size prefix removed): it
  returns the ``Request`` that ``codec.decode_request`` returns, header and body equal key for key (lists,
  str, ``cluster_id`` None), for every payload whose tagged-field sections (header, body, topic, partition,
  forgotten topic) are all empty. Anything else is None and goes to the generic codec, which decodes it or
  raises its own error: another api key or version, a tagged field (``cluster_id`` set), a null where none
  may be, a truncated or malformed field, invalid UTF-8, a varint longer than 5 bytes. It never raises;
  trailing bytes are ignored, as the generic codec ignores them.
"""

from __future__ import annotations

import struct
from typing import Any

from protocol import codec
from protocol.codec import Request
from protocol.errors import ProtocolError
from protocol.headers import RequestHeader
from protocol.primitives import encode_uvarint as _uvarint

FETCH_KEY = 1
VERSION = 12
_SIZE = struct.Struct(">i")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_REQUEST_HEAD = struct.Struct(">ihhi")  # size, api key, version, correlation id
_REQUEST_FIXED = struct.Struct(">iiiibii")  # replica, max wait, min bytes, max bytes, isolation, session, epoch
_REQUEST_PART = struct.Struct(">iiqiqi")
_REQUEST_IDS = struct.Struct(">hhih")  # api key, version, correlation id, client id length
_RESPONSE_HEAD = struct.Struct(">iiBihi")  # size, correlation id, header tags, throttle, error, session
_PART = struct.Struct(">ihqqq")
_ABORTED = struct.Struct(">qq")
_TAGGED = ("diverging_epoch", "current_leader", "snapshot_id")


def _cstr(s: str) -> bytes:
    b = s.encode()
    return _uvarint(len(b) + 1) + b


# ------------------------------------------------------------------ the follower's request
def encode_request(correlation_id: int, client_id: str, body: dict[str, Any]) -> bytes:
    if body.get("cluster_id") is not None:
        return codec.encode_request(FETCH_KEY, VERSION, correlation_id, client_id, body)
    cid = client_id.encode()
    out = [b"", _I16.pack(len(cid)), cid, b"\x00",
           _REQUEST_FIXED.pack(body["replica_id"], body["max_wait_ms"], body["min_bytes"], body["max_bytes"],
                               body["isolation_level"], body["session_id"], body["session_epoch"]),
           _uvarint(len(body["topics"]) + 1)]
    pack = _REQUEST_PART.pack
    for t in body["topics"]:
        out.append(_cstr(t["topic"]))
        out.append(_uvarint(len(t["partitions"]) + 1))
        for p in t["partitions"]:
            out.append(pack(p["partition"], p["current_leader_epoch"], p["fetch_offset"], p["last_fetched_epoch"],
                            p["log_start_offset"], p["partition_max_bytes"]))
            out.append(b"\x00")
        out.append(b"\x00")
    forgotten = body["forgotten_topics_data"]
    out.append(_uvarint(len(forgotten) + 1))
    for t in forgotten:
        out.append(_cstr(t["topic"]))
        parts = t["partitions"]
        out.append(_uvarint(len(parts) + 1))
        out.append(struct.pack(f">{len(parts)}i", *parts))
        out.append(b"\x00")
    out.append(_cstr(body["rack_id"]))
    out.append(b"\x00")
    size = sum(map(len, out)) + 8
    out[0] = _REQUEST_HEAD.pack(size, FETCH_KEY, VERSION, correlation_id)
    return b"".join(out)


# ------------------------------------------------------------------ the leader's decoding of it
def _uvar(data: bytes, pos: int) -> tuple[int, int]:
    """An unsigned varint (a compact length) and the position after it; one byte without a call."""
    n = data[pos]
    if n < 0x80:
        return n, pos + 1
    return _varint(data, pos)


def _topic_head(data: bytes, pos: int, size: int, item: int) -> tuple[str, int, int] | None:
    """A request topic's name and the count of its array of ``item``-byte entries, and the position after
    them; None for a null name or array, or one that claims more than the bytes left."""
    k, pos = _uvar(data, pos)
    end = pos + k - 1
    if k == 0 or end > size:
        return None
    topic = data[pos:end].decode("utf-8")
    m, pos = _uvar(data, end)
    m -= 1
    if m < 0 or m * item > size - pos:
        return None
    return topic, m, pos


def decode_request(payload: bytes) -> Request | None:
    """The generic codec's ``Request`` for a Fetch v12 request payload, or None (see the module rules)."""
    try:
        return _decode_request(payload)
    except (struct.error, IndexError, UnicodeDecodeError, ValueError, OverflowError, ProtocolError):
        return None


def _decode_request(data: bytes) -> Request | None:
    size = len(data)
    if size < 10:
        return None
    api_key, version, corr, k = _REQUEST_IDS.unpack_from(data, 0)
    if api_key != FETCH_KEY or version != VERSION or k < -1:
        return None
    if k < 0:
        client_id = None
        pos = 10
    else:
        pos = 10 + k
        if pos > size:
            return None
        client_id = data[10:pos].decode("utf-8")
    if data[pos]:
        return None  # header tagged fields
    replica, max_wait, min_bytes, max_bytes, isolation, session, epoch = _REQUEST_FIXED.unpack_from(data, pos + 1)
    pos += 26
    n, pos = _uvar(data, pos)
    n -= 1
    if n < 0 or n * 3 > size - pos:
        return None  # null topics (not nullable) or more than the bytes left
    unpack = _REQUEST_PART.unpack_from
    topics = []
    for _ in range(n):
        head = _topic_head(data, pos, size, 33)
        if head is None:
            return None
        topic, m, pos = head
        parts = []
        for _ in range(m):
            index, leader_epoch, offset, last_epoch, start, max_part = unpack(data, pos)
            if data[pos + 32]:
                return None  # partition tagged fields
            pos += 33
            parts.append({"partition": index, "current_leader_epoch": leader_epoch, "fetch_offset": offset,
                          "last_fetched_epoch": last_epoch, "log_start_offset": start,
                          "partition_max_bytes": max_part})
        if data[pos]:
            return None  # topic tagged fields
        pos += 1
        topics.append({"topic": topic, "partitions": parts})
    n, pos = _uvar(data, pos)
    n -= 1
    if n < 0 or n * 3 > size - pos:
        return None
    forgotten = []
    for _ in range(n):
        head = _topic_head(data, pos, size, 4)
        if head is None:
            return None
        topic, m, pos = head
        ids = list(struct.unpack_from(f">{m}i", data, pos))
        pos += 4 * m
        if data[pos]:
            return None  # forgotten topic tagged fields
        pos += 1
        forgotten.append({"topic": topic, "partitions": ids})
    k, pos = _uvar(data, pos)
    end = pos + k - 1
    if k == 0 or end > size:
        return None  # null rack_id (not nullable)
    rack = data[pos:end].decode("utf-8")
    if data[end]:
        return None  # body tagged fields (cluster_id)
    return Request(RequestHeader(FETCH_KEY, VERSION, corr, client_id),
                   {"replica_id": replica, "max_wait_ms": max_wait, "min_bytes": min_bytes, "max_bytes": max_bytes,
                    "isolation_level": isolation, "session_id": session, "session_epoch": epoch, "topics": topics,
                    "forgotten_topics_data": forgotten, "rack_id": rack, "cluster_id": None})


# ------------------------------------------------------------------ the leader's answer
def encode_response(api_key: int, version: int, correlation_id: int, body: dict[str, Any]) -> bytes:
    if api_key != FETCH_KEY or version != VERSION or not _plain(body):
        return codec.encode_response(api_key, version, correlation_id, body)
    responses = body["responses"]
    out = [b"", _uvarint(len(responses) + 1)]
    pack = _PART.pack
    for t in responses:
        out.append(_cstr(t["topic"]))
        out.append(_uvarint(len(t["partitions"]) + 1))
        for p in t["partitions"]:
            records = p["records"]
            out.append(pack(p["partition_index"], p["error_code"], p["high_watermark"], p["last_stable_offset"],
                            p["log_start_offset"]))
            out.append(b"\x00")  # aborted transactions: null
            out.append(_I32.pack(p["preferred_read_replica"]))
            if records is None:
                out.append(b"\x00\x00")  # null records, no tagged field
            else:
                out.append(_uvarint(len(records) + 1))
                out.append(records)
                out.append(b"\x00")
        out.append(b"\x00")
    out.append(b"\x00")
    size = sum(map(len, out)) + 15  # the head's bytes after the size field
    out[0] = _RESPONSE_HEAD.pack(size, correlation_id, 0, body["throttle_time_ms"], body["error_code"],
                                 body["session_id"])
    return b"".join(out)


def _plain(body: dict[str, Any]) -> bool:
    """Whether every partition of the answer has the shape ``encode_response`` writes by hand."""
    for t in body["responses"]:
        for p in t["partitions"]:
            records = p["records"]
            if p["aborted_transactions"] is not None or not (records is None or isinstance(records, bytes)) or \
                    any(p.get(k) is not None for k in _TAGGED):
                return False
    return True


# ------------------------------------------------------------------ the follower's decoding
def decode_response(payload: bytes) -> tuple[int, dict[str, Any]]:
    """(correlation id, body) of a Fetch v12 answer payload."""
    try:
        return _decode(payload)
    except ProtocolError:
        raise
    except (struct.error, UnicodeError, ValueError, IndexError, OverflowError) as e:
        raise ProtocolError(f"malformed: {type(e).__name__}: {e}") from None


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    for _ in range(5):
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    raise ProtocolError("malformed: varint too long")


def _skip_tags(data: bytes, pos: int) -> int:
    count, pos = _varint(data, pos)
    for _ in range(count):
        _, pos = _varint(data, pos)
        size, pos = _varint(data, pos)
        pos += size
    if pos > len(data):
        raise ProtocolError("malformed: tagged field past the end")
    return pos


def _count(data: bytes, pos: int, min_size: int, nullable: bool = False) -> tuple[int, int]:
    n, pos = _varint(data, pos)
    n -= 1
    if n < 0 and not nullable:
        raise ProtocolError("malformed: null array")
    if n * min_size > len(data) - pos:
        raise ProtocolError("malformed: array past the end")
    return n, pos


def _decode(data: bytes) -> tuple[int, dict[str, Any]]:
    size = len(data)
    (corr,) = _I32.unpack_from(data, 0)
    pos = _skip_tags(data, 4)
    throttle, error, session = struct.unpack_from(">ihi", data, pos)
    n, pos = _count(data, pos + 10, 3)
    unpack = _PART.unpack_from
    responses = []
    for _ in range(n):
        k, pos = _varint(data, pos)
        if k == 0:
            raise ProtocolError("malformed: null topic")
        end = pos + k - 1
        if end > size:
            raise ProtocolError("malformed: string past the end")
        topic = data[pos:end].decode()
        m, pos = _count(data, end, 37)
        parts = []
        for _ in range(m):
            index, err, hw, lso, start = unpack(data, pos)
            pos += 30
            aborted: list[dict[str, int]] | None = None
            if data[pos] == 0:
                pos += 1
            else:
                a, pos = _count(data, pos, 17)
                aborted = []
                for _ in range(a):
                    producer, first = _ABORTED.unpack_from(data, pos)
                    pos = _skip_tags(data, pos + 16)
                    aborted.append({"producer_id": producer, "first_offset": first})
            (replica,) = _I32.unpack_from(data, pos)
            k, pos = _varint(data, pos + 4)
            if k == 0:
                records = None
            else:
                end = pos + k - 1
                if end > size:
                    raise ProtocolError("malformed: bytes past the end")
                records = data[pos:end]
                pos = end
            pos = _skip_tags(data, pos)
            parts.append({"partition_index": index, "error_code": err, "high_watermark": hw,
                          "last_stable_offset": lso, "log_start_offset": start, "aborted_transactions": aborted,
                          "preferred_read_replica": replica, "records": records, "diverging_epoch": None,
                          "current_leader": None, "snapshot_id": None})
        pos = _skip_tags(data, pos)
        responses.append({"topic": topic, "partitions": parts})
    _skip_tags(data, pos)
    return corr, {"throttle_time_ms": throttle, "error_code": error, "session_id": session, "responses": responses}
