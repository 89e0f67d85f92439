"""The hand-written Fetch v12 codec of the replication round (protocol/replica_fetch.py) agrees with the generic
codec: the follower's request and the leader's answer are the same bytes (a shape it does not write by hand
goes to the generic codec), and an answer the generic codec wrote (tagged fields, aborted transactions and
null records included) decodes to the same dict, except the partition tagged fields it leaves None; a
truncated or lying answer is a ProtocolError, never another exception. The leader's hot decoder of the
follower's request (``decode_request``) gives the generic codec's Request for every request without tagged
fields, and None (never an exception) for anything else: a tagged field, another api or version, a cut or
corrupted payload."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from protocol import codec, replica_fetch
from protocol.errors import ProtocolError

i32 = st.integers(-2**31, 2**31 - 1)
i64 = st.integers(-2**63, 2**63 - 1)
names = st.text(max_size=40)

requests = st.fixed_dictionaries({
    "replica_id": i32, "max_wait_ms": i32, "min_bytes": i32, "max_bytes": i32,
    "isolation_level": st.integers(-128, 127), "session_id": i32, "session_epoch": i32,
    "topics": st.lists(st.fixed_dictionaries({"topic": names, "partitions": st.lists(st.fixed_dictionaries({
        "partition": i32, "current_leader_epoch": i32, "fetch_offset": i64, "last_fetched_epoch": i32,
        "log_start_offset": i64, "partition_max_bytes": i32}), max_size=4)}), max_size=3),
    "forgotten_topics_data": st.lists(st.fixed_dictionaries({"topic": names, "partitions": st.lists(i32, max_size=5)}),
                                      max_size=3),
    "rack_id": names, "cluster_id": st.none() | names,
})


def partition(tagged: bool) -> Any:
    fields: dict[str, Any] = {
        "partition_index": i32, "error_code": st.integers(-2**15, 2**15 - 1), "high_watermark": i64,
        "last_stable_offset": i64, "log_start_offset": i64, "preferred_read_replica": i32,
        "records": st.none() | st.binary(max_size=300),
        "aborted_transactions": st.none() | st.lists(st.fixed_dictionaries(
            {"producer_id": i64, "first_offset": i64}), max_size=2) if tagged else st.none(),
    }
    if tagged:
        fields["diverging_epoch"] = st.none() | st.fixed_dictionaries({"epoch": i32, "end_offset": i64})
        fields["current_leader"] = st.none() | st.fixed_dictionaries({"leader_id": i32, "leader_epoch": i32})
        fields["snapshot_id"] = st.none() | st.fixed_dictionaries({"end_offset": i64, "epoch": i32})
    return st.fixed_dictionaries(fields)


def answers(tagged: bool) -> Any:
    return st.fixed_dictionaries({
        "throttle_time_ms": i32, "error_code": st.integers(-2**15, 2**15 - 1), "session_id": i32,
        "responses": st.lists(st.fixed_dictionaries({"topic": names, "partitions": st.lists(partition(tagged),
                                                                                           max_size=4)}),
                              max_size=3)})


@settings(max_examples=300, deadline=None)
@given(requests, st.integers(0, 2**31 - 1), st.text(max_size=30))
def test_the_request_is_the_generic_codecs_bytes(body: dict[str, Any], corr: int, client: str) -> None:
    assert replica_fetch.encode_request(corr, client, body) == codec.encode_request(1, 12, corr, client, body)


@settings(max_examples=300, deadline=None)
@given(answers(tagged=False), st.integers(0, 2**31 - 1))
def test_the_leaders_answer_is_the_generic_codecs_bytes(body: dict[str, Any], corr: int) -> None:
    assert replica_fetch.encode_response(1, 12, corr, body) == codec.encode_response(1, 12, corr, body)


@settings(max_examples=300, deadline=None)
@given(answers(tagged=True), st.integers(0, 2**31 - 1))
def test_any_answer_is_the_generic_codecs_bytes_and_decodes_as_it(body: dict[str, Any], corr: int) -> None:
    frame = replica_fetch.encode_response(1, 12, corr, body)
    assert frame == codec.encode_response(1, 12, corr, body)
    expected = codec.decode_response(1, 12, frame[4:])
    for t in expected[1]["responses"]:
        for p in t["partitions"]:
            p.update(diverging_epoch=None, current_leader=None, snapshot_id=None)
    assert replica_fetch.decode_response(frame[4:]) == expected


def test_other_versions_and_file_ranges_go_to_the_generic_codec() -> None:
    body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 7, "responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "error_code": 0, "high_watermark": 5, "last_stable_offset": 5, "log_start_offset": 0,
         "aborted_transactions": None, "preferred_read_replica": -1, "records": bytearray(b"xyz")}]}]}
    assert replica_fetch.encode_response(1, 12, 3, body) == codec.encode_response(1, 12, 3, body)
    assert replica_fetch.encode_response(1, 11, 3, body) == codec.encode_response(1, 11, 3, body)


@settings(max_examples=200, deadline=None)
@given(answers(tagged=True), st.integers(0, 2**31 - 1), st.data())
def test_a_cut_or_corrupted_answer_is_a_protocol_error(body: dict[str, Any], corr: int, data: Any) -> None:
    payload = bytearray(codec.encode_response(1, 12, corr, body)[4:])
    if data.draw(st.booleans()):
        payload = payload[:data.draw(st.integers(0, max(0, len(payload) - 1)))]
    elif payload:
        at = data.draw(st.integers(0, len(payload) - 1))
        payload[at] = data.draw(st.integers(0, 255))
    try:
        replica_fetch.decode_response(bytes(payload))
    except ProtocolError:
        pass  # refused; anything else it raised would fail the test


def test_a_truncated_answer_is_refused() -> None:
    body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 7, "responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "error_code": 0, "high_watermark": 5, "last_stable_offset": 5, "log_start_offset": 0,
         "aborted_transactions": None, "preferred_read_replica": -1, "records": b"x" * 40}]}]}
    payload = codec.encode_response(1, 12, 3, body)[4:]
    assert replica_fetch.decode_response(payload)[1]["responses"][0]["partitions"][0]["records"] == b"x" * 40
    for cut in (3, 12, 20, len(payload) - 10):
        with pytest.raises(ProtocolError):
            replica_fetch.decode_response(payload[:cut])


# ------------------------------------------------------------------ the leader's hot decoder of the request
plain_requests = st.fixed_dictionaries({
    "replica_id": st.sampled_from([-1, 0, 1, 2]) | i32, "max_wait_ms": i32, "min_bytes": i32, "max_bytes": i32,
    "isolation_level": st.integers(-128, 127), "session_id": i32, "session_epoch": i32,
    "topics": st.lists(st.fixed_dictionaries({"topic": names | st.text(min_size=120, max_size=200),
                                              "partitions": st.lists(st.fixed_dictionaries({
                                                  "partition": i32, "current_leader_epoch": i32, "fetch_offset": i64,
                                                  "last_fetched_epoch": i32, "log_start_offset": i64,
                                                  "partition_max_bytes": i32}), max_size=4)}), max_size=3),
    "forgotten_topics_data": st.lists(st.fixed_dictionaries({"topic": names, "partitions": st.lists(i32, max_size=5)}),
                                      max_size=3),
    "rack_id": names,
})
client_ids = st.none() | st.text(max_size=30)


def typical_request(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "replica_id": 2, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 17, "session_epoch": 4,
        "topics": [{"topic": "__consumer_offsets", "partitions": [
            {"partition": p, "current_leader_epoch": 3, "fetch_offset": 1000 + p, "last_fetched_epoch": 3,
             "log_start_offset": 0, "partition_max_bytes": 1 << 20} for p in range(3)]}],
        "forgotten_topics_data": [{"topic": "gone", "partitions": [4, 5]}], "rack_id": "rack-a", "cluster_id": None}
    body.update(overrides)
    return body


def assert_decodes_as_the_generic_codec(payload: bytes) -> None:
    expected = codec.decode_request(payload)
    got = replica_fetch.decode_request(payload)
    assert got is not None
    assert got.header == expected.header
    assert got.body == expected.body
    assert got == expected


@settings(max_examples=300, deadline=None)
@given(plain_requests, st.integers(-2**31, 2**31 - 1), client_ids)
@example(typical_request(topics=[], forgotten_topics_data=[], rack_id=""), 0, "")
def test_the_hot_request_decoder_gives_the_generic_codecs_request(body: dict[str, Any], corr: int,
                                                                  client: str | None) -> None:
    assert_decodes_as_the_generic_codec(codec.encode_request(1, 12, corr, client, body)[4:])


@settings(max_examples=200, deadline=None)
@given(plain_requests, st.integers(0, 2**31 - 1), st.text(max_size=30))
def test_the_hot_request_decoder_reads_the_followers_frames(body: dict[str, Any], corr: int, client: str) -> None:
    assert_decodes_as_the_generic_codec(replica_fetch.encode_request(corr, client, body)[4:])


def test_a_tagged_field_goes_to_the_generic_codec() -> None:
    payload = codec.encode_request(1, 12, 9, "f", typical_request(cluster_id="abc"))[4:]
    assert replica_fetch.decode_request(payload) is None
    assert codec.decode_request(payload).body["cluster_id"] == "abc"
    plain = replica_fetch.encode_request(9, "f", typical_request())[4:]
    assert_decodes_as_the_generic_codec(plain)
    # an (unknown) tag in the request header: the generic codec skips it, the hot decoder does not take it
    header_end = 10 + 1
    tagged = plain[:header_end] + b"\x01\x05\x01z" + plain[header_end + 1:]
    assert replica_fetch.decode_request(tagged) is None
    assert codec.decode_request(tagged).body == codec.decode_request(plain).body


def test_the_tagged_sections_of_topics_partitions_and_forgotten_topics_go_to_the_generic_codec() -> None:
    body = typical_request(topics=[{"topic": "t", "partitions": [
        {"partition": 0, "current_leader_epoch": 1, "fetch_offset": 2, "last_fetched_epoch": 3, "log_start_offset": 4,
         "partition_max_bytes": 5}]}], forgotten_topics_data=[{"topic": "u", "partitions": [7]}])
    plain = replica_fetch.encode_request(1, "c", body)[4:]
    assert_decodes_as_the_generic_codec(plain)
    head = 10 + 1 + 1 + 25 + 1 + 2 + 1  # header (client "c"), tags, fixed fields, topics count, "t", partitions
    at = {"partition": head + 32, "topic": head + 33, "forgotten": head + 34 + 1 + 2 + 1 + 4}
    for where, i in at.items():
        assert plain[i] == 0, where
        tagged = plain[:i] + b"\x01\x09\x00" + plain[i + 1:]
        assert replica_fetch.decode_request(tagged) is None, where
        assert codec.decode_request(tagged).body == codec.decode_request(plain).body, where


def test_other_apis_and_versions_are_not_decoded() -> None:
    body = typical_request()
    for version in (4, 11, 13, 17):
        payload = codec.encode_request(1, version, 5, "c", body)[4:]
        assert codec.decode_request(payload).version == version
        assert replica_fetch.decode_request(payload) is None
    commit = codec.encode_request(8, 8, 5, "c", {"group_id": "g", "generation_id_or_member_epoch": 1,
                                                 "member_id": "m", "topics": []})[4:]
    assert replica_fetch.decode_request(commit) is None
    heartbeat = codec.encode_request(12, 4, 5, "c", {"group_id": "g", "generation_id": 1, "member_id": "m"})[4:]
    assert replica_fetch.decode_request(heartbeat) is None
    for payload in (b"", b"\x00", b"\x00\x01\x00\x0c", b"\x00\x01\x00\x0c\x00\x00\x00\x01\xff\xfe"):
        assert replica_fetch.decode_request(payload) is None


def test_nulls_where_none_may_be_go_to_the_generic_codec() -> None:
    body = typical_request(topics=[], forgotten_topics_data=[], rack_id="")
    plain = replica_fetch.encode_request(1, "c", body)[4:]
    topics_at = 10 + 1 + 1 + 25
    for i in (topics_at, topics_at + 1, topics_at + 2):  # topics, forgotten topics, rack_id: null
        assert plain[i] == 1
        null = plain[:i] + b"\x00" + plain[i + 1:]
        assert replica_fetch.decode_request(null) is None
        with pytest.raises(ProtocolError):
            codec.decode_request(null)


def test_a_varint_longer_than_five_bytes_is_not_decoded() -> None:
    body = typical_request(topics=[], forgotten_topics_data=[], rack_id="")
    plain = replica_fetch.encode_request(1, "c", body)[4:]
    topics_at = 10 + 1 + 1 + 25
    long = plain[:topics_at] + b"\x81\x80\x80\x80\x80\x00" + plain[topics_at + 1:]
    assert replica_fetch.decode_request(long) is None
    five = plain[:topics_at] + b"\x81\x80\x80\x80\x00" + plain[topics_at + 1:]  # 1, in five bytes
    assert_decodes_as_the_generic_codec(five)


def check_cut_or_corrupted(payload: bytes) -> None:
    try:
        expected = codec.decode_request(payload)
    except ProtocolError:
        expected = None
    got = replica_fetch.decode_request(payload)  # never raises
    assert got is None or got == expected


def test_every_cut_of_a_request_is_refused_or_decoded_as_the_generic_codec() -> None:
    body = typical_request(topics=[{"topic": "__consumer_offsets", "partitions": typical_request()["topics"][0][
        "partitions"]}, {"topic": "é" * 70, "partitions": []}])
    payload = replica_fetch.encode_request(12345, "follower-2", body)[4:]
    assert_decodes_as_the_generic_codec(payload)
    for cut in range(len(payload)):
        check_cut_or_corrupted(payload[:cut])
        assert replica_fetch.decode_request(payload[:cut]) is None


@settings(max_examples=500, deadline=None)
@given(plain_requests, client_ids, st.data())
def test_a_corrupted_request_never_raises(body: dict[str, Any], client: str | None, data: Any) -> None:
    payload = bytearray(codec.encode_request(1, 12, 3, client, body)[4:])
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(payload) - 1))
        payload[at] = data.draw(st.integers(0, 255))
    check_cut_or_corrupted(bytes(payload))
