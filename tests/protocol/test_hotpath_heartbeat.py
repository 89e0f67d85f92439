"""The Heartbeat hot path (protocol.hotpath) against the generic codec, which is the reference.

Rules checked:
- A hot decode is exactly the generic ``codec.decode_request`` result (version, group_id, generation_id,
  member_id, group_instance_id; correlation id from ``request_ids``) or None; it never raises, and trailing
  bytes are ignored as the generic decoder ignores them. A v4 (compact) string longer than 126 bytes needs
  a two-byte varint: the hot decoder must answer None, never a wrong value.
- Corrupted frames (byte changes, truncation, insertion, deletion): None, or exactly the generic result;
  when the generic decoder raises, the hot decoder answers None.
- ``HeartbeatDecoder`` memo: keyed by the bytes after the correlation id, checked against the version,
  at most ``MEMO_ENTRIES`` entries, frames over ``MEMO_MAX_FRAME`` bytes decoded but never remembered.
- ``heartbeat_response`` / ``heartbeat_answer`` are byte-identical to ``codec.encode_response(12, ...)``.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import codec
from protocol.errors import ProtocolError
from protocol.hotpath import (
    MEMO_ENTRIES,
    MEMO_MAX_FRAME,
    HeartbeatDecoder,
    decode_heartbeat,
    heartbeat_answer,
    heartbeat_response,
    request_ids,
)

HB = 12
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ASCII, two-, three- and four-byte UTF-8 characters (so 200 characters reach far past 126 bytes)
ids = st.text(alphabet=st.sampled_from("ab-_0é€😀"), max_size=200)
client_ids = st.none() | st.text(alphabet=st.sampled_from("cé"), max_size=20)
int32 = st.integers(-(2**31), 2**31 - 1)


def frame(version: int, corr: int, client: str | None, group: str, gen: int, member: str,
          instance: str | None = None) -> bytes:
    """A request payload (no size prefix) as the generic encoder writes it."""
    body = {"group_id": group, "generation_id": gen, "member_id": member, "group_instance_id": instance}
    return codec.encode_request(HB, version, corr, client, body)[4:]


def generic(payload: bytes) -> tuple | None:
    """The reference: what the generic decoder reads, in the hot decoder's shape; None if it raises."""
    try:
        req = codec.decode_request(payload)
    except ProtocolError:
        return None
    b = req.body
    return req.version, b["group_id"], b["generation_id"], b["member_id"], b.get("group_instance_id")


def hot(payload: bytes) -> tuple | None:
    """The low-level functions the decoder is built from, used without the memo."""
    ids_ = request_ids(payload)
    if ids_ is None:
        return None
    hb = decode_heartbeat(payload, ids_[1], ids_[3])
    return None if hb is None else (ids_[1], *hb)


def fits_one_varint_byte(*values: str | None) -> bool:
    return all(v is None or len(v.encode()) <= 126 for v in values)


# ------------------------------------------------------------------ valid frames

@SETTINGS
@given(version=st.integers(0, 4), corr=int32, client=client_ids, group=ids, gen=int32, member=ids,
       instance=st.none() | ids)
def test_valid_frames_decode_as_the_generic_codec_or_none_only_for_long_compact_strings(
        version, corr, client, group, gen, member, instance):
    payload = frame(version, corr, client, group, gen, member, instance)
    expected = generic(payload)
    assert expected is not None
    assert expected[0] == version and expected[1:4] == (group, gen, member)
    ids_ = request_ids(payload)
    client_len = 0 if client is None else len(client.encode())
    assert ids_ == (HB, version, corr, 10 + client_len)
    got = HeartbeatDecoder().decode(payload)
    assert got == hot(payload)
    if version == 4 and not fits_one_varint_byte(group, member, instance):
        assert got is None  # a two-byte compact length is not the hot shape
    else:
        assert got == expected
        assert got[4] == (instance if version >= 3 else None)


@SETTINGS
@given(version=st.integers(0, 4), group=ids, member=ids, instance=st.none() | ids,
       trailing=st.binary(min_size=1, max_size=40))
def test_trailing_bytes_are_ignored_like_the_generic_decoder(version, group, member, instance, trailing):
    payload = frame(version, 7, "client", group, 3, member, instance) + trailing
    expected = generic(payload)
    assert expected == (version, group, 3, member, instance if version >= 3 else None)
    got = HeartbeatDecoder().decode(payload)
    if version == 4 and not fits_one_varint_byte(group, member, instance):
        assert got is None
    else:
        assert got == expected


def test_compact_length_boundary_126_bytes_is_hot_127_is_not():
    for field in ("group", "member", "instance"):
        for n, hot_shape in ((126, True), (127, False), (128, False), (200, False)):
            values = {"group": "g", "member": "m", "instance": "i", field: "x" * n}
            payload = frame(4, 1, "c", values["group"], 5, values["member"], values["instance"])
            expected = (4, values["group"], 5, values["member"], values["instance"])
            assert generic(payload) == expected
            assert HeartbeatDecoder().decode(payload) == (expected if hot_shape else None), (field, n)


def test_v4_tagged_fields_in_header_or_body_take_the_generic_path():
    payload = frame(4, 9, "c", "grp", 2, "mem", None)
    ids_ = request_ids(payload)
    assert ids_ is not None
    header_end = ids_[3]
    assert payload[header_end] == 0 and payload[-1] == 0
    # one tagged field (tag 5, two bytes) in the body's tagged section, then in the header's
    body_tagged = payload[:-1] + b"\x01\x05\x02hi"
    header_tagged = payload[:header_end] + b"\x01\x05\x02hi" + payload[header_end + 1:]
    for p in (body_tagged, header_tagged):
        assert generic(p) == (4, "grp", 2, "mem", None)
        assert HeartbeatDecoder().decode(p) is None


def test_null_or_negative_lengths_of_non_nullable_strings_are_left_to_the_generic_path():
    for version in range(5):
        payload = frame(version, 1, "c", "g", 1, "m", None)
        compact = version == 4
        group_at = request_ids(payload)[3] + (1 if compact else 0)  # v4: after the header's tag byte
        member_at = group_at + (1 if compact else 2) + 1 + 4  # length, "g", generation
        width = 1 if compact else 2
        bad_lengths = [b"\x00"] if compact else [b"\xff\xff", b"\xff\xfe"]  # null (-1), and -2
        assert payload[member_at + width:member_at + width + 1] == b"m"
        for at in (group_at, member_at):
            for length in bad_lengths:
                p = payload[:at] + length + payload[at + width:]
                assert generic(p) is None, (version, at, length)
                assert HeartbeatDecoder().decode(p) is None, (version, at, length)


def test_versions_the_hot_decoder_does_not_know_are_left_to_the_generic_path():
    base = frame(4, 1, "c", "g", 1, "m", None)
    for version in (5, 255, 0x0104, 0xFFFF):
        p = base[:2] + version.to_bytes(2, "big") + base[4:]
        assert HeartbeatDecoder().decode(p) is None
        assert generic(p) is None  # UnsupportedVersion


def test_client_id_that_is_not_utf8_is_rejected_like_the_generic_decoder():
    """The generic decoder reads client_id as a UTF-8 string and rejects the frame when it is not; the
    module says the hot decoder answers None for invalid UTF-8 so the generic path rejects it as before."""
    mismatches = []
    for version in range(5):
        payload = frame(version, 3, "cl", "g", 1, "m", None)
        assert payload[10:12] == b"cl"
        bad = payload[:10] + b"\xff\xfe" + payload[12:]
        if generic(bad) is None and HeartbeatDecoder().decode(bad) is not None:
            mismatches.append((version, HeartbeatDecoder().decode(bad)))
    assert mismatches == []


# ------------------------------------------------------------------ corrupted frames

@st.composite
def corrupted(draw):
    version = draw(st.integers(0, 4))
    group, member = draw(st.text(alphabet="gé", max_size=30)), draw(st.text(alphabet="mé", max_size=30))
    instance = draw(st.none() | st.text(alphabet="ié", max_size=10))
    client = draw(st.none() | st.text(alphabet="c", max_size=8))  # ASCII: client_id UTF-8 is its own test
    data = bytearray(frame(version, draw(int32), client, group, draw(int32), member, instance))
    header_end = 10 + (0 if client is None else len(client))
    for _ in range(draw(st.integers(1, 3))):  # changing a byte is the likeliest: it often still decodes
        op = draw(st.sampled_from(["set", "set", "set", "set", "truncate", "insert", "delete", "version"]))
        if op == "set" and len(data) > header_end:  # any byte of the body (and v4's header tag byte)
            data[draw(st.integers(header_end, len(data) - 1))] = draw(st.integers(0, 255))
        elif op == "truncate":
            del data[draw(st.integers(0, len(data))):]
        elif op == "insert" and len(data) > header_end:
            data.insert(draw(st.integers(header_end, len(data))), draw(st.integers(0, 255)))
        elif op == "delete" and len(data) > header_end:
            del data[draw(st.integers(header_end, len(data) - 1))]
        elif op == "version" and len(data) >= 4:
            data[2:4] = draw(st.integers(0, 0xFFFF)).to_bytes(2, "big")
    return bytes(data)


@SETTINGS
@given(payload=corrupted())
def test_corrupted_frames_give_none_or_exactly_the_generic_result(payload):
    got = hot(payload)  # the functions alone must never raise, whatever the length
    if len(payload) >= 10:  # the connection offers only frames of at least 10 bytes to hot handlers
        assert HeartbeatDecoder().decode(payload) == got
    if got is not None:
        assert got == generic(payload)


def test_every_truncation_of_a_valid_frame_is_none_or_the_generic_result():
    for version in range(5):
        payload = frame(version, -5, "client-é", "group-é", 42, "member-😀", "inst" if version >= 3 else None)
        decoder = HeartbeatDecoder()
        complete = generic(payload)
        for cut in range(len(payload)):
            short = payload[:cut]
            # no strict prefix is a whole request: v0-2 end with member_id, v3 with the instance id,
            # v4 with the body's tag byte; both decoders must refuse every one of them
            assert generic(short) is None
            assert hot(short) is None, (version, cut)
            if cut >= 10:
                assert decoder.decode(short) is None, (version, cut)
        assert decoder.decode(payload) == complete


# ------------------------------------------------------------------ memo

def test_memo_is_keyed_by_the_bytes_after_the_correlation_id():
    decoder = HeartbeatDecoder()
    first = frame(3, 1, "c", "g", 7, "m", "pod")
    again = frame(3, 2, "c", "g", 7, "m", "pod")  # the next heartbeat: only the correlation id differs
    assert decoder.decode(first) == (3, "g", 7, "m", "pod")
    assert decoder.decode(again) == (3, "g", 7, "m", "pod")
    assert len(decoder._memo) == 1
    assert decoder.decode(frame(3, 3, "c", "g", 8, "m", "pod")) == (3, "g", 8, "m", "pod")
    assert len(decoder._memo) == 2


def test_memo_never_answers_for_another_version_with_the_same_bytes():
    # v1 and v2 bodies are identical; a v2 frame plus b"\xff\xff" equals a v3 frame with a null instance
    decoder = HeartbeatDecoder()
    v1, v2 = frame(1, 1, "c", "g", 1, "m"), frame(2, 1, "c", "g", 1, "m")
    v3 = frame(3, 1, "c", "g", 1, "m", None)
    assert v1[8:] == v2[8:] and v3[8:] == v2[8:] + b"\xff\xff"
    v2_trailing = v2 + b"\xff\xff"
    for p in (v3, v2_trailing, v3, v1, v2, v1):
        assert decoder.decode(p) == generic(p)
        assert decoder.decode(p)[0] == p[3]


def test_memo_stays_bounded_with_many_distinct_frames():
    decoder = HeartbeatDecoder()
    n = MEMO_ENTRIES + 50
    for i in range(n):
        assert decoder.decode(frame(1, i, "c", "g", i, "m")) == (1, "g", i, "m", None)
        assert 0 < len(decoder._memo) <= MEMO_ENTRIES
    last = frame(1, 0, "c", "g", n - 1, "m")
    assert last[8:] in decoder._memo
    assert decoder.decode(last) == (1, "g", n - 1, "m", None)


def test_frames_over_the_memo_limit_are_decoded_but_not_remembered():
    decoder = HeartbeatDecoder()
    base = len(frame(4, 0, "", "g", 1, "m", None))
    exactly = frame(4, 0, "c" * (MEMO_MAX_FRAME - base), "g", 1, "m", None)
    over = frame(4, 0, "c" * (MEMO_MAX_FRAME - base + 1), "g", 1, "m", None)
    assert (len(exactly), len(over)) == (MEMO_MAX_FRAME, MEMO_MAX_FRAME + 1)
    for _ in range(2):
        assert decoder.decode(over) == (4, "g", 1, "m", None) == generic(over)
    assert len(decoder._memo) == 0
    assert decoder.decode(exactly) == (4, "g", 1, "m", None)
    assert len(decoder._memo) == 1
    big = frame(3, 0, "c", "g" * 300, 2, "m" * 300, "i")
    assert len(big) > MEMO_MAX_FRAME
    assert decoder.decode(big) == (3, "g" * 300, 2, "m" * 300, "i") == generic(big)
    assert len(decoder._memo) == 1


# ------------------------------------------------------------------ responses

ERRORS = (0, 15, 16, 22, 24, 25, 27, 79, -1, 32767, -32768)
CORRS = (0, 1, -1, 2**31 - 1, -(2**31), 123456)


def test_response_frames_are_byte_identical_to_the_generic_encoder():
    for version in range(5):
        for error in ERRORS:
            for corr in CORRS:
                expected = codec.encode_response(HB, version, corr, {"throttle_time_ms": 0, "error_code": error})
                assert heartbeat_response(version, corr, error) == expected, (version, error, corr)
                request = frame(version, corr, "c", "g", 1, "m", None)
                assert heartbeat_answer(version, request, error) == expected, (version, error, corr)
                got_corr, body = codec.decode_response(HB, version, expected[4:])
                assert got_corr == corr and body["error_code"] == error


@SETTINGS
@given(version=st.integers(0, 4), corr=int32, error=st.integers(-(2**15), 2**15 - 1))
def test_answer_copies_the_request_correlation_id(version, corr, error):
    request = frame(version, corr, None, "g", 1, "m", None)
    expected = codec.encode_response(HB, version, corr, {"throttle_time_ms": 0, "error_code": error})
    assert heartbeat_answer(version, request, error) == expected
    assert heartbeat_response(version, corr, error) == expected
