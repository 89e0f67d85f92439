"""The OffsetCommit hot decoder agrees with the generic decoder: for every valid v2-9 request it returns
the same Request (header and body, key for key; a request of one topic with one partition comes as a
``OneCommit`` whose ``as_body(version)`` is that body); for anything else it returns None or that same
Request, and never raises (the connection then lets the generic decoder answer or reject)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import codec
from protocol.errors import ProtocolError
from protocol.hotpath import OneCommit, decode_offset_commit

names = st.text(min_size=0, max_size=140)
partitions = st.lists(st.fixed_dictionaries({
    "partition_index": st.integers(-2**31, 2**31 - 1),
    "committed_offset": st.integers(-2**63, 2**63 - 1),
    "committed_leader_epoch": st.integers(-2**31, 2**31 - 1),
    "committed_metadata": st.none() | st.text(max_size=150),
}), max_size=4)
bodies = st.fixed_dictionaries({
    "group_id": names,
    "generation_id_or_member_epoch": st.integers(-2**31, 2**31 - 1),
    "member_id": names,
    "group_instance_id": st.none() | names,
    "retention_time_ms": st.integers(-2**63, 2**63 - 1),
    "topics": st.lists(st.fixed_dictionaries({"name": names, "partitions": partitions}), max_size=3),
})


def hot_decode(payload: bytes) -> codec.Request | None:
    """The hot decoder's result in the generic shape (a OneCommit body becomes its dict)."""
    req = decode_offset_commit(payload)
    if req is not None and isinstance(req.body, OneCommit):
        return codec.Request(req.header, req.body.as_body(req.header.api_version))
    return req


def generic(payload: bytes) -> codec.Request | None:
    try:
        return codec.decode_request(payload)
    except ProtocolError:
        return None


@settings(max_examples=150, deadline=None)
@given(body=bodies, version=st.integers(2, 9), client=st.none() | st.text(max_size=20),
       correlation_id=st.integers(-2**31, 2**31 - 1))
def test_valid_requests_decode_exactly_as_the_generic_decoder(body, version, client, correlation_id) -> None:
    payload = codec.encode_request(8, version, correlation_id, client, body)[4:]
    hot = hot_decode(payload)
    expected = codec.decode_request(payload)
    long_compact = version >= 8 and (
        any(len(s.encode()) > 126 for s in _strings(body)) or len(body["topics"]) > 126)
    if long_compact:
        assert hot is None or hot == expected  # lengths over one varint byte go to the generic path
    else:
        assert hot == expected
        one = len(body["topics"]) == 1 and len(body["topics"][0]["partitions"]) == 1
        assert isinstance(decode_offset_commit(payload).body, OneCommit) == one


def _strings(body: dict) -> list[str]:
    out = [body["group_id"], body["member_id"], body["group_instance_id"] or ""]
    for t in body["topics"]:
        out.append(t["name"])
        out += [p["committed_metadata"] or "" for p in t["partitions"]]
    return out


@settings(max_examples=200, deadline=None)
@given(body=bodies, version=st.integers(2, 9), seed=st.integers(0, 2**32 - 1))
def test_damaged_requests_give_none_or_the_generic_result(body, version, seed) -> None:
    payload = bytearray(codec.encode_request(8, version, 7, "c", body)[4:])
    rng = random.Random(seed)
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(3)
        at = rng.randrange(len(payload))
        if kind == 0:
            payload[at] = rng.randrange(256)
        elif kind == 1:
            del payload[at:]
        else:
            payload[at:at] = bytes([rng.randrange(256)])
        if not payload:
            payload = bytearray(b"\x00")
    damaged = bytes(payload)
    hot = hot_decode(damaged)
    assert hot is None or hot == generic(damaged)


def test_other_apis_and_versions_are_not_taken() -> None:
    body = {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                     "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
    payload = codec.encode_request(8, 8, 1, "c", body)[4:]
    assert hot_decode(payload) == codec.decode_request(payload)
    assert decode_offset_commit(b"\x00\x08\x00\x0a" + payload[4:]) is None  # v10: not declared
    assert decode_offset_commit(b"\x00\x09" + payload[2:]) is None  # another api key
    bad_client = payload[:8] + b"\x00\x01\xff" + payload[11:]  # client id "c" replaced by invalid UTF-8
    assert generic(bad_client) is None and decode_offset_commit(bad_client) is None
