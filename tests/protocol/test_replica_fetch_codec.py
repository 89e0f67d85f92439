"""The hand-written Fetch v12 codec of the replication round (protocol/replica_fetch.py) agrees with the generic
codec: the follower's request and the leader's answer are the same bytes (a shape it does not write by hand
goes to the generic codec), and an answer the generic codec wrote (tagged fields, aborted transactions and
null records included) decodes to the same dict, except the partition tagged fields it leaves None; a
truncated or lying answer is a ProtocolError, never another exception."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
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
