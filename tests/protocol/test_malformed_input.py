"""Malformed input raises only ProtocolError, and no decode allocates more than the bytes justify."""

from __future__ import annotations

import random
import struct
import tracemalloc
from io import BytesIO

import pytest

from protocol import codec
from protocol import primitives as P
from protocol.errors import ProtocolError
from protocol.framing import FrameReader, FrameTooLarge
from protocol.messages import ALL


def _valid_frames() -> list[bytes]:
    """One representative request per (api, version), with non-empty arrays where the schema has them."""
    frames = []
    rnd = random.Random(7)
    for key, schema in sorted(ALL.items()):
        for v in range(schema.min_version, schema.max_version + 1):
            c = codec.codec_for(key, v, True)
            body = _sample(c.struct, rnd)
            frames.append(codec.encode_request(key, v, rnd.randrange(1 << 31), "fuzz", body)[4:])
    return frames


def _sample(ks, rnd: random.Random, depth: int = 0) -> dict:  # type: ignore[no-untyped-def]
    out = {}
    for r in ks.kfields:
        if r.kind == "struct":
            out[r.name] = _sample(r.sub, rnd, depth + 1)
        elif r.kind == "array":
            n = 2 if depth < 2 else 1
            if r.type == "struct":
                out[r.name] = [_sample(r.sub, rnd, depth + 1) for _ in range(n)]
            elif r.type == "string":
                out[r.name] = ["ab", "c"][:n]
            elif r.type in P.FIXED and r.type not in ("bool", "float64"):
                out[r.name] = [rnd.randrange(0, 100) for _ in range(n)]
        elif r.kind == "string":
            out[r.name] = "x" * rnd.randrange(0, 6)
        elif r.kind == "bytes":
            out[r.name] = b"y" * rnd.randrange(0, 9)
        elif r.kind == "fixed" and r.type not in ("bool", "float64"):
            out[r.name] = rnd.randrange(0, 100)
    return out


FRAMES = _valid_frames()


def _decode_only_protocol_errors(frame: bytes) -> None:
    try:
        codec.decode_request(frame)
    except ProtocolError:
        pass


def test_every_strict_prefix_of_a_valid_request_is_a_protocol_error() -> None:
    for frame in FRAMES:
        for cut in range(len(frame)):
            with pytest.raises(ProtocolError):
                codec.decode_request(frame[:cut])


def test_frame_sizes_negative_and_huge_are_refused_before_allocating() -> None:
    for size in (-1, -(2**31), 2**31 - 1, 370_000_000, 100 * 1024 * 1024 + 1):
        reader = FrameReader()
        reader.feed(struct.pack(">i", size) + b"\x16\x03\x01")
        with pytest.raises(FrameTooLarge):
            reader.next_frame()
        assert reader.buffered < 16


def test_frames_split_anywhere_reassemble() -> None:
    stream = b"".join(struct.pack(">i", len(f)) + f for f in FRAMES[:20])
    for step in (1, 3, 7, 1000):
        reader = FrameReader()
        got = []
        for i in range(0, len(stream), step):
            reader.feed(stream[i: i + step])
            while (fr := reader.next_frame()) is not None:
                got.append(fr)
        assert got == FRAMES[:20]


def test_bad_varint_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="varint too long"):
        P.read_uvarint(BytesIO(b"\xff" * 6))
    with pytest.raises(ProtocolError, match="truncated varint"):
        P.read_uvarint(BytesIO(b"\xff\xff"))


def test_array_length_larger_than_bytes_left_is_refused() -> None:
    # JoinGroup v5 request whose protocols array claims 2^31-1 entries in a 40-byte frame
    head = codec.encode_request(11, 5, 1, "c", {"group_id": "g", "protocols": []})[4:]
    evil = head[:-4] + struct.pack(">i", 2**31 - 1)
    with pytest.raises(ProtocolError, match="exceeds"):
        codec.decode_request(evil)
    # the flexible form: compact array count as a varint
    head = codec.encode_request(11, 6, 1, "c", {"group_id": "g", "protocols": []})[4:]
    evil = head[:-2] + P.encode_uvarint(2**31) + b"\x00"
    with pytest.raises(ProtocolError, match="exceeds"):
        codec.decode_request(evil)


def test_string_length_larger_than_bytes_left_is_refused() -> None:
    frame = codec.encode_request(12, 0, 1, "c", {"group_id": "g"})[4:]
    # header: api(2) ver(2) corr(4) client_id len(2)+1, then group_id int16 length
    evil = frame[:11] + struct.pack(">h", 32767) + b"g"
    with pytest.raises(ProtocolError):
        codec.decode_request(evil)


def test_unknown_api_key_and_unsupported_version_carry_the_header_ids() -> None:
    frame = struct.pack(">hhi", 999, 0, 42) + b"\x00\x00"
    with pytest.raises(codec.UnknownApi) as e:
        codec.decode_request(frame)
    assert e.value.correlation_id == 42
    frame = struct.pack(">hhi", 18, 5, 43) + b"\x00\x00"
    with pytest.raises(codec.UnsupportedVersion) as e2:
        codec.decode_request(frame)
    assert (e2.value.api_key, e2.value.api_version, e2.value.correlation_id) == (18, 5, 43)


def _mutate(frame: bytes, rnd: random.Random) -> bytes:
    b = bytearray(frame)
    op = rnd.randrange(5)
    if op == 0:
        for _ in range(rnd.randrange(1, 4)):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
    elif op == 1:
        i = rnd.randrange(len(b))
        b[i:i] = b"\xff" * rnd.randrange(1, 6)
    elif op == 2:
        del b[rnd.randrange(len(b)):]
    elif op == 3:
        i = rnd.randrange(8, len(b)) if len(b) > 8 else 0
        b[i: i + 4] = rnd.choice([b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00", b"\xff\xff\xff\xfe"])
    else:
        i = rnd.randrange(len(b))
        b[i:i] = b[: rnd.randrange(1, 16)]
    return bytes(b)


def test_100k_mutated_frames_raise_only_protocol_error() -> None:
    rnd = random.Random(2026)
    decoded = 0
    for n in range(100_000):
        frame = _mutate(FRAMES[n % len(FRAMES)], rnd)
        try:
            codec.decode_request(frame)
            decoded += 1
        except ProtocolError:
            pass
    # some mutations leave a valid frame, most do not: both paths were exercised
    assert 0 < decoded < 100_000


def test_mutated_frames_allocate_a_bounded_multiple_of_their_size() -> None:
    rnd = random.Random(11)
    tracemalloc.start()
    try:
        worst = 0.0
        for n in range(3_000):
            frame = _mutate(FRAMES[n % len(FRAMES)], rnd)
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            _decode_only_protocol_errors(frame)
            peak = tracemalloc.get_traced_memory()[1] - base
            worst = max(worst, (peak - 16_384) / max(len(frame), 1))
    finally:
        tracemalloc.stop()
    assert worst < 400, f"a decode allocated {worst:.0f}x its input size"
