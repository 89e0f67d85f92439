"""Hand-written ``struct`` codecs for the messages bench_codec times, the yardstick for our compiled codec.

Rules: straight ``struct.unpack_from`` / ``pack`` code over (bytes, offset), written for exactly one message
and version each, producing the same dicts (and bytes) as ``protocol.codec``; bench_codec asserts that
before timing. Like ours, the decoders refuse a string, bytes or array that claims more than the bytes
left, and read tagged-field sections (Fetch v12's known partition tags included); unlike ours, they know
the message shape when written. Bench support only: nothing in the product imports this.
"""

from __future__ import annotations

import struct
from typing import Any

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
JOIN_FIXED = struct.Struct(">ii")
COMMIT_PART_V7 = struct.Struct(">iqi")
COMMIT_PART_V7_LEN = struct.Struct(">iqih")
FETCH_PART_V11 = struct.Struct(">ihqqqi")
REPLICA_RECORDS_V11 = struct.Struct(">ii")
FETCH_HEAD = struct.Struct(">ihi")
FETCH_PART = struct.Struct(">ihqqq")
ABORTED = struct.Struct(">qq")


class Malformed(ValueError):
    pass


# ====================================================================== primitives, hand-inlined style
def uvarint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    for _ in range(5):
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    raise Malformed("varint too long")


def enc_uvarint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def skip_tags(data: bytes, pos: int) -> int:
    count, pos = uvarint(data, pos)
    for _ in range(count):
        _, pos = uvarint(data, pos)
        size, pos = uvarint(data, pos)
        pos += size
    if pos > len(data):
        raise Malformed("tagged field past the end")
    return pos


def str16(data: bytes, pos: int, nullable: bool = False) -> tuple[str | None, int]:
    (n,) = I16.unpack_from(data, pos)
    pos += 2
    if n < 0:
        if nullable and n == -1:
            return None, pos
        raise Malformed("bad string length")
    end = pos + n
    if end > len(data):
        raise Malformed("string past the end")
    return data[pos:end].decode(), end


def cstr(data: bytes, pos: int, nullable: bool = False) -> tuple[str | None, int]:
    n = data[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = uvarint(data, pos)
    if n == 0:
        if nullable:
            return None, pos
        raise Malformed("null string")
    end = pos + n - 1
    if end > len(data):
        raise Malformed("string past the end")
    return data[pos:end].decode(), end


def bytes32(data: bytes, pos: int, nullable: bool = False) -> tuple[bytes | None, int]:
    (n,) = I32.unpack_from(data, pos)
    pos += 4
    if n < 0:
        if nullable and n == -1:
            return None, pos
        raise Malformed("bad bytes length")
    end = pos + n
    if end > len(data):
        raise Malformed("bytes past the end")
    return data[pos:end], end


def cbytes(data: bytes, pos: int, nullable: bool = False) -> tuple[bytes | None, int]:
    n, pos = uvarint(data, pos)
    if n == 0:
        if nullable:
            return None, pos
        raise Malformed("null bytes")
    end = pos + n - 1
    if end > len(data):
        raise Malformed("bytes past the end")
    return data[pos:end], end


def count32(data: bytes, pos: int, min_size: int, nullable: bool = False) -> tuple[int, int]:
    (n,) = I32.unpack_from(data, pos)
    pos += 4
    if n < 0 and not (nullable and n == -1):
        raise Malformed("bad array length")
    if n * min_size > len(data) - pos:
        raise Malformed("array past the end")
    return n, pos


def ccount(data: bytes, pos: int, min_size: int, nullable: bool = False) -> tuple[int, int]:
    n, pos = uvarint(data, pos)
    n -= 1
    if n < 0 and not nullable:
        raise Malformed("null array")
    if n * min_size > len(data) - pos:
        raise Malformed("array past the end")
    return n, pos


def w_str16(out: list[bytes], s: str | None) -> None:
    if s is None:
        out.append(b"\xff\xff")
        return
    b = s.encode()
    out.append(I16.pack(len(b)))
    out.append(b)


def w_cstr(out: list[bytes], s: str | None) -> None:
    if s is None:
        out.append(b"\x00")
        return
    b = s.encode()
    out.append(enc_uvarint(len(b) + 1))
    out.append(b)


# ====================================================================== JoinGroup request v5 / v7
def join_decode_v5(data: bytes) -> dict[str, Any]:
    group_id, pos = str16(data, 0)
    session, rebalance = JOIN_FIXED.unpack_from(data, pos)
    member_id, pos = str16(data, pos + 8)
    instance, pos = str16(data, pos, True)
    ptype, pos = str16(data, pos)
    n, pos = count32(data, pos, 6)
    protocols = []
    for _ in range(n):
        name, pos = str16(data, pos)
        meta, pos = bytes32(data, pos)
        protocols.append({"name": name, "metadata": meta})
    return {"group_id": group_id, "session_timeout_ms": session, "rebalance_timeout_ms": rebalance,
            "member_id": member_id, "group_instance_id": instance, "protocol_type": ptype,
            "protocols": protocols}


def join_decode_v7(data: bytes) -> dict[str, Any]:
    group_id, pos = cstr(data, 0)
    session, rebalance = JOIN_FIXED.unpack_from(data, pos)
    member_id, pos = cstr(data, pos + 8)
    instance, pos = cstr(data, pos, True)
    ptype, pos = cstr(data, pos)
    n, pos = ccount(data, pos, 3)
    protocols = []
    for _ in range(n):
        name, pos = cstr(data, pos)
        meta, pos = cbytes(data, pos)
        pos = skip_tags(data, pos)
        protocols.append({"name": name, "metadata": meta})
    skip_tags(data, pos)
    return {"group_id": group_id, "session_timeout_ms": session, "rebalance_timeout_ms": rebalance,
            "member_id": member_id, "group_instance_id": instance, "protocol_type": ptype,
            "protocols": protocols}


def join_encode_v5(body: dict[str, Any]) -> bytes:
    out: list[bytes] = []
    w_str16(out, body["group_id"])
    out.append(JOIN_FIXED.pack(body["session_timeout_ms"], body["rebalance_timeout_ms"]))
    w_str16(out, body["member_id"])
    w_str16(out, body["group_instance_id"])
    w_str16(out, body["protocol_type"])
    out.append(I32.pack(len(body["protocols"])))
    for p in body["protocols"]:
        w_str16(out, p["name"])
        out.append(I32.pack(len(p["metadata"])))
        out.append(p["metadata"])
    return b"".join(out)


def join_encode_v7(body: dict[str, Any]) -> bytes:
    out: list[bytes] = []
    w_cstr(out, body["group_id"])
    out.append(JOIN_FIXED.pack(body["session_timeout_ms"], body["rebalance_timeout_ms"]))
    w_cstr(out, body["member_id"])
    w_cstr(out, body["group_instance_id"])
    w_cstr(out, body["protocol_type"])
    out.append(enc_uvarint(len(body["protocols"]) + 1))
    for p in body["protocols"]:
        w_cstr(out, p["name"])
        out.append(enc_uvarint(len(p["metadata"]) + 1))
        out.append(p["metadata"])
        out.append(b"\x00")
    out.append(b"\x00")
    return b"".join(out)


def join_body() -> dict[str, Any]:
    protocols = [{"name": n, "metadata": b"\x00\x03" + bytes(range(i, i + 40))}
                 for i, n in enumerate(("cooperative-sticky", "range", "roundrobin"))]
    return {"group_id": "payments-consumers", "session_timeout_ms": 45000, "rebalance_timeout_ms": 300000,
            "member_id": "consumer-payments-1-6f1c2a1e-3b9d-4c53-9b53-6a2a8c1f6e11",
            "group_instance_id": None, "protocol_type": "consumer", "protocols": protocols}


# ====================================================================== OffsetCommit request v7 / v8
def commit_decode_v7(data: bytes) -> dict[str, Any]:
    size = len(data)
    group_id, pos = str16(data, 0)
    (generation,) = I32.unpack_from(data, pos)
    member_id, pos = str16(data, pos + 4)
    instance, pos = str16(data, pos, True)
    n, pos = count32(data, pos, 6)
    topics = []
    for _ in range(n):
        name, pos = str16(data, pos)
        m, pos = count32(data, pos, 18)
        parts = []
        for _ in range(m):
            index, offset, epoch, k = COMMIT_PART_V7_LEN.unpack_from(data, pos)
            pos += 18
            if k < 0:
                if k != -1:
                    raise Malformed("bad string length")
                meta = None
            else:
                end = pos + k
                if end > size:
                    raise Malformed("string past the end")
                meta = data[pos:end].decode()
                pos = end
            parts.append({"partition_index": index, "committed_offset": offset,
                          "committed_leader_epoch": epoch, "committed_metadata": meta})
        topics.append({"name": name, "partitions": parts})
    return {"group_id": group_id, "generation_id_or_member_epoch": generation, "member_id": member_id,
            "group_instance_id": instance, "topics": topics}


def commit_decode_v8(data: bytes) -> dict[str, Any]:
    size = len(data)
    group_id, pos = cstr(data, 0)
    (generation,) = I32.unpack_from(data, pos)
    member_id, pos = cstr(data, pos + 4)
    instance, pos = cstr(data, pos, True)
    n, pos = ccount(data, pos, 3)
    topics = []
    for _ in range(n):
        name, pos = cstr(data, pos)
        m, pos = ccount(data, pos, 18)
        parts = []
        for _ in range(m):
            index, offset, epoch = COMMIT_PART_V7.unpack_from(data, pos)
            k = data[pos + 16]
            pos += 17
            if k >= 0x80:
                k, pos = uvarint(data, pos - 1)
            if k == 0:
                meta = None
            else:
                end = pos + k - 1
                if end > size:
                    raise Malformed("string past the end")
                meta = data[pos:end].decode()
                pos = end
            if data[pos]:
                pos = skip_tags(data, pos)
            else:
                pos += 1
            parts.append({"partition_index": index, "committed_offset": offset,
                          "committed_leader_epoch": epoch, "committed_metadata": meta})
        pos = skip_tags(data, pos)
        topics.append({"name": name, "partitions": parts})
    skip_tags(data, pos)
    return {"group_id": group_id, "generation_id_or_member_epoch": generation, "member_id": member_id,
            "group_instance_id": instance, "topics": topics}


def commit_encode_v7(body: dict[str, Any]) -> bytes:
    out: list[bytes] = []
    w_str16(out, body["group_id"])
    out.append(I32.pack(body["generation_id_or_member_epoch"]))
    w_str16(out, body["member_id"])
    w_str16(out, body["group_instance_id"])
    out.append(I32.pack(len(body["topics"])))
    for t in body["topics"]:
        w_str16(out, t["name"])
        out.append(I32.pack(len(t["partitions"])))
        for p in t["partitions"]:
            out.append(COMMIT_PART_V7.pack(p["partition_index"], p["committed_offset"],
                                           p["committed_leader_epoch"]))
            w_str16(out, p["committed_metadata"])
    return b"".join(out)


def commit_encode_v8(body: dict[str, Any]) -> bytes:
    out: list[bytes] = []
    w_cstr(out, body["group_id"])
    out.append(I32.pack(body["generation_id_or_member_epoch"]))
    w_cstr(out, body["member_id"])
    w_cstr(out, body["group_instance_id"])
    out.append(enc_uvarint(len(body["topics"]) + 1))
    for t in body["topics"]:
        w_cstr(out, t["name"])
        out.append(enc_uvarint(len(t["partitions"]) + 1))
        for p in t["partitions"]:
            out.append(COMMIT_PART_V7.pack(p["partition_index"], p["committed_offset"],
                                           p["committed_leader_epoch"]))
            w_cstr(out, p["committed_metadata"])
            out.append(b"\x00")
        out.append(b"\x00")
    out.append(b"\x00")
    return b"".join(out)


def commit_body() -> dict[str, Any]:
    topics = [{"name": f"orders-{t}", "partitions": [
        {"partition_index": p, "committed_offset": 1_000_000 * t + 37 * p, "committed_leader_epoch": 5,
         "committed_metadata": "" if p % 3 else None} for p in range(25)]} for t in range(4)]
    return {"group_id": "payments-consumers", "generation_id_or_member_epoch": 12,
            "member_id": "consumer-payments-1-6f1c2a1e-3b9d-4c53-9b53-6a2a8c1f6e11",
            "group_instance_id": None, "topics": topics}


# ====================================================================== Fetch response v11 / v12
def fetch_decode_v11(data: bytes) -> dict[str, Any]:
    size = len(data)
    throttle, error, session = FETCH_HEAD.unpack_from(data, 0)
    n, pos = count32(data, 10, 6)
    responses = []
    for _ in range(n):
        topic, pos = str16(data, pos)
        m, pos = count32(data, pos, 46)
        parts = []
        for _ in range(m):
            index, err, hw, lso, start, k = FETCH_PART_V11.unpack_from(data, pos)
            pos += 34
            aborted = None
            if k >= 0:
                if k * 16 > size - pos:
                    raise Malformed("array past the end")
                aborted = []
                for _ in range(k):
                    producer, first = ABORTED.unpack_from(data, pos)
                    pos += 16
                    aborted.append({"producer_id": producer, "first_offset": first})
            elif k != -1:
                raise Malformed("bad array length")
            replica, k = REPLICA_RECORDS_V11.unpack_from(data, pos)
            pos += 8
            if k < 0:
                if k != -1:
                    raise Malformed("bad bytes length")
                records = None
            else:
                end = pos + k
                if end > size:
                    raise Malformed("bytes past the end")
                records = data[pos:end]
                pos = end
            parts.append({"partition_index": index, "error_code": err, "high_watermark": hw,
                          "last_stable_offset": lso, "log_start_offset": start,
                          "aborted_transactions": aborted, "preferred_read_replica": replica,
                          "records": records})
        responses.append({"topic": topic, "partitions": parts})
    return {"throttle_time_ms": throttle, "error_code": error, "session_id": session, "responses": responses}


_FETCH_TAGS = {0: ("diverging_epoch", struct.Struct(">iq"), ("epoch", "end_offset")),
               1: ("current_leader", struct.Struct(">ii"), ("leader_id", "leader_epoch")),
               2: ("snapshot_id", struct.Struct(">qi"), ("end_offset", "epoch"))}


def fetch_partition_tags(data: bytes, pos: int, part: dict[str, Any]) -> int:
    count, pos = uvarint(data, pos)
    for _ in range(count):
        tag, pos = uvarint(data, pos)
        size, pos = uvarint(data, pos)
        known = _FETCH_TAGS.get(tag)
        if known is not None:
            name, s, keys = known
            part[name] = dict(zip(keys, s.unpack_from(data, pos)))
            skip_tags(data, pos + s.size)
        pos += size
    return pos


def fetch_decode_v12(data: bytes) -> dict[str, Any]:
    size = len(data)
    throttle, error, session = FETCH_HEAD.unpack_from(data, 0)
    n, pos = ccount(data, 10, 3)
    responses = []
    for _ in range(n):
        topic, pos = cstr(data, pos)
        m, pos = ccount(data, pos, 37)
        parts = []
        for _ in range(m):
            index, err, hw, lso, start = FETCH_PART.unpack_from(data, pos)
            pos += 30
            if data[pos] == 0:
                aborted = None
                pos += 1
            else:
                k, pos = ccount(data, pos, 17)
                aborted = []
                for _ in range(k):
                    producer, first = ABORTED.unpack_from(data, pos)
                    pos = skip_tags(data, pos + 16)
                    aborted.append({"producer_id": producer, "first_offset": first})
            (replica,) = I32.unpack_from(data, pos)
            pos += 4
            k = data[pos]
            if k < 0x80:
                pos += 1
            else:
                k, pos = uvarint(data, pos)
            if k == 0:
                records = None
            else:
                end = pos + k - 1
                if end > size:
                    raise Malformed("bytes past the end")
                records = data[pos:end]
                pos = end
            part = {"partition_index": index, "error_code": err, "high_watermark": hw,
                    "last_stable_offset": lso, "log_start_offset": start,
                    "aborted_transactions": aborted, "preferred_read_replica": replica,
                    "records": records, "diverging_epoch": None, "current_leader": None, "snapshot_id": None}
            if data[pos]:
                pos = fetch_partition_tags(data, pos, part)
            else:
                pos += 1
            parts.append(part)
        pos = skip_tags(data, pos)
        responses.append({"topic": topic, "partitions": parts})
    skip_tags(data, pos)
    return {"throttle_time_ms": throttle, "error_code": error, "session_id": session, "responses": responses}


def fetch_encode_v11(body: dict[str, Any]) -> bytes:
    out: list[bytes] = [FETCH_HEAD.pack(body["throttle_time_ms"], body["error_code"], body["session_id"]),
                        I32.pack(len(body["responses"]))]
    for t in body["responses"]:
        w_str16(out, t["topic"])
        out.append(I32.pack(len(t["partitions"])))
        for p in t["partitions"]:
            out.append(FETCH_PART.pack(p["partition_index"], p["error_code"], p["high_watermark"],
                                       p["last_stable_offset"], p["log_start_offset"]))
            aborted = p["aborted_transactions"]
            if aborted is None:
                out.append(b"\xff\xff\xff\xff")
            else:
                out.append(I32.pack(len(aborted)))
                for a in aborted:
                    out.append(ABORTED.pack(a["producer_id"], a["first_offset"]))
            out.append(I32.pack(p["preferred_read_replica"]))
            records = p["records"]
            if records is None:
                out.append(b"\xff\xff\xff\xff")
            else:
                out.append(I32.pack(len(records)))
                out.append(records)
    return b"".join(out)


def fetch_encode_v12(body: dict[str, Any]) -> bytes:
    out: list[bytes] = [FETCH_HEAD.pack(body["throttle_time_ms"], body["error_code"], body["session_id"]),
                        enc_uvarint(len(body["responses"]) + 1)]
    for t in body["responses"]:
        w_cstr(out, t["topic"])
        out.append(enc_uvarint(len(t["partitions"]) + 1))
        for p in t["partitions"]:
            out.append(FETCH_PART.pack(p["partition_index"], p["error_code"], p["high_watermark"],
                                       p["last_stable_offset"], p["log_start_offset"]))
            aborted = p["aborted_transactions"]
            if aborted is None:
                out.append(b"\x00")
            else:
                out.append(enc_uvarint(len(aborted) + 1))
                for a in aborted:
                    out.append(ABORTED.pack(a["producer_id"], a["first_offset"]))
                    out.append(b"\x00")
            out.append(I32.pack(p["preferred_read_replica"]))
            records = p["records"]
            if records is None:
                out.append(b"\x00")
            else:
                out.append(enc_uvarint(len(records) + 1))
                out.append(records)
            tags = [(tag, name) for tag, (name, _, _) in _FETCH_TAGS.items() if p.get(name) is not None]
            out.append(enc_uvarint(len(tags)))
            for tag, name in tags:
                _, s, keys = _FETCH_TAGS[tag]
                out += [enc_uvarint(tag), enc_uvarint(s.size + 1), s.pack(*(p[name][k] for k in keys)), b"\x00"]
        out.append(b"\x00")
    out.append(b"\x00")
    return b"".join(out)


def fetch_body(flexible: bool) -> dict[str, Any]:
    records = bytes(range(256)) * 4  # ~1 KB of record-batch bytes, passed through as they are
    tagged = {"diverging_epoch": None, "current_leader": None, "snapshot_id": None} if flexible else {}
    responses = [{"topic": f"events-{t}", "partitions": [
        {"partition_index": p, "error_code": 0, "high_watermark": 10_000 + p, "last_stable_offset": 10_000 + p,
         "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1,
         "records": records, **tagged} for p in range(50)]} for t in range(2)]
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": responses}
