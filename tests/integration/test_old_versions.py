"""The oldest request versions Kafka 3.9 serves, sent with kafka-python's own protocol classes over TCP.

The story: ApiVersions advertises ListOffsets, OffsetCommit, OffsetFetch, CreateTopics and DeleteTopics
from v0 (and OffsetDelete v0). Each newly served version is built and parsed by kafka-python's legacy
classes (kafka.protocol.old), not by our codec, so a mismatch in either direction shows. CreateTopics v0
creates a topic and v1 validates without creating; DeleteTopics v0 deletes; ListOffsets v0 answers
``old_style_offsets`` as Kafka's v0 handler does (latest: [log end, segment bases...] newest first, up to
``max_num_offsets``; earliest: [log start]); OffsetCommit v0 is a membership-less commit that OffsetFetch
v0 and v1 read back; OffsetCommit v1 from the member of a Stable group (joined through our codec) is stored
and read back, and with a stale generation gets ILLEGAL_GENERATION (22) and stores nothing.
"""

from __future__ import annotations

import itertools
import socket
import struct
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaProducer
from server_process import ServerProcess, read_frame  # type: ignore[import-not-found]

from protocol import codec

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.old import admin as kp_admin
    from kafka.protocol.old import commit as kp_commit
    from kafka.protocol.old import list_offsets as kp_list_offsets
    from kafka.protocol.old.api import RequestHeader

_corr = itertools.count(1)
TOPIC = "old-t"


def kp_call(port: int, request: Any, response_cls: type) -> Any:
    """One request built by kafka-python's class, its response parsed by kafka-python's class."""
    corr = next(_corr)
    header = RequestHeader(request.API_KEY, request.API_VERSION, corr, "old-versions").encode()
    payload = header + request.encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(struct.pack(">i", len(payload)) + payload)
        frame = read_frame(s)
    assert frame is not None, f"connection closed on {type(request).__name__}"
    assert struct.unpack_from(">i", frame)[0] == corr
    return response_cls.decode(frame[4:])


def our_call(port: int, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
    corr = next(_corr)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(codec.encode_request(api_key, version, corr, "old-versions", body))
        frame = read_frame(s)
    assert frame is not None
    return codec.decode_response(api_key, version, frame)[1]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data: Path = tmp_path_factory.mktemp("old") / "data"
    server = ServerProcess(data, "--group-min-session-timeout-ms", "1000", "--group-initial-rebalance-delay-ms",
                           "0", "--auto-create-topics-enable", "false").start()
    try:
        server.wait_loaded()
        yield server
    finally:
        server.stop()


def test_api_versions_advertise_v0(srv: ServerProcess) -> None:
    body = our_call(srv.port, 18, 0, {})
    ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
    for key in (2, 8, 9, 19, 20, 47):
        assert ranges[key][0] == 0, (key, ranges[key])
    assert ranges[47] == (0, 0)


def test_create_and_delete_topics_v0_v1(srv: ServerProcess) -> None:
    created = kp_call(srv.port, kp_admin.CreateTopicsRequest_v0([(TOPIC, 1, 1, [], []), ("old-gone", 2, 1, [], [])],
                                                               10000), kp_admin.CreateTopicsResponse_v0)
    assert sorted(created.topics) == [("old-gone", 0), (TOPIC, 0)]
    again = kp_call(srv.port, kp_admin.CreateTopicsRequest_v0([(TOPIC, 1, 1, [], [])], 10000),
                    kp_admin.CreateTopicsResponse_v0)
    assert again.topics == [(TOPIC, 36)]  # TOPIC_ALREADY_EXISTS
    checked = kp_call(srv.port, kp_admin.CreateTopicsRequest_v1([("old-dry", 3, 1, [], [])], 10000, True),
                      kp_admin.CreateTopicsResponse_v1)
    assert checked.topics == [("old-dry", 0, None)]
    deleted = kp_call(srv.port, kp_admin.DeleteTopicsRequest_v0(["old-gone", "old-dry"], 10000),
                      kp_admin.DeleteTopicsResponse_v0)
    assert sorted(deleted.responses) == [
        ("old-dry", 3), ("old-gone", 0)]  # old-dry was only validated: UNKNOWN_TOPIC_OR_PARTITION
    meta = our_call(srv.port, 3, 1, {"topics": None})
    assert {t["name"] for t in meta["topics"]} >= {TOPIC} and "old-gone" not in {t["name"] for t in meta["topics"]}


def test_list_offsets_v0(srv: ServerProcess) -> None:
    producer = KafkaProducer(bootstrap_servers=srv.bootstrap)
    for i in range(5):
        producer.send(TOPIC, b"v%d" % i, partition=0)
    producer.flush(10)
    producer.close()

    def old_style(timestamp: int, max_num: int) -> tuple[int, list[int]]:
        resp = kp_call(srv.port, kp_list_offsets.ListOffsetsRequest_v0(-1, [(TOPIC, [(0, timestamp, max_num)])]),
                       kp_list_offsets.ListOffsetsResponse_v0)
        ((name, ((index, error, offsets),)),) = resp.topics
        assert (name, index) == (TOPIC, 0)
        return error, list(offsets)

    assert old_style(-1, 1) == (0, [5])
    assert old_style(-1, 10) == (0, [5, 0])  # the log end, then the (only) segment's base offset
    assert old_style(-2, 10) == (0, [0])
    assert old_style(-3, 1) == (35, [])  # v0 knows only -1 and -2: UNSUPPORTED_VERSION


def test_offset_commit_v0_and_offset_fetch_v0_v1(srv: ServerProcess) -> None:
    resp = kp_call(srv.port, kp_commit.OffsetCommitRequest_v0("old-simple", [(TOPIC, [(0, 3, "m0")])]),
                   kp_commit.OffsetCommitResponse_v0)
    assert resp.topics == [(TOPIC, [(0, 0)])]
    for request, response in ((kp_commit.OffsetFetchRequest_v0, kp_commit.OffsetFetchResponse_v0),
                              (kp_commit.OffsetFetchRequest_v1, kp_commit.OffsetFetchResponse_v1)):
        got = kp_call(srv.port, request("old-simple", [(TOPIC, [0])]), response)
        assert got.topics == [(TOPIC, [(0, 3, "m0", 0)])]


def _stable_group(port: int, group: str) -> tuple[int, str]:
    """A one-member group made Stable through our codec (JoinGroup v1 + SyncGroup v0): (generation, member)."""
    join = our_call(port, 11, 1, {"group_id": group, "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000,
                                  "member_id": "", "protocol_type": "consumer",
                                  "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x01\x00\x05old-t"
                                                 b"\x00\x00\x00\x00"}]})
    assert join["error_code"] == 0, join
    sync = our_call(port, 14, 0, {"group_id": group, "generation_id": join["generation_id"],
                                  "member_id": join["member_id"], "assignments": [
                                      {"member_id": join["member_id"], "assignment": b""}]})
    assert sync["error_code"] == 0, sync
    described = our_call(port, 15, 0, {"groups": [group]})["groups"][0]
    assert described["group_state"] == "Stable"
    return join["generation_id"], join["member_id"]


def test_offset_commit_v1_in_a_stable_group(srv: ServerProcess) -> None:
    generation, member = _stable_group(srv.port, "old-stable")
    ok = kp_call(srv.port, kp_commit.OffsetCommitRequest_v1("old-stable", generation, member,
                                                            [(TOPIC, [(0, 4, 1_700_000_000_000, "m1")])]),
                 kp_commit.OffsetCommitResponse_v1)
    assert ok.topics == [(TOPIC, [(0, 0)])]
    got = kp_call(srv.port, kp_commit.OffsetFetchRequest_v1("old-stable", [(TOPIC, [0])]),
                  kp_commit.OffsetFetchResponse_v1)
    assert got.topics == [(TOPIC, [(0, 4, "m1", 0)])]

    stale = kp_call(srv.port, kp_commit.OffsetCommitRequest_v1("old-stable", generation - 1, member,
                                                               [(TOPIC, [(0, 9, -1, "")])]),
                    kp_commit.OffsetCommitResponse_v1)
    assert stale.topics == [(TOPIC, [(0, 22)])]  # ILLEGAL_GENERATION
    again = kp_call(srv.port, kp_commit.OffsetFetchRequest_v1("old-stable", [(TOPIC, [0])]),
                    kp_commit.OffsetFetchResponse_v1)
    assert again.topics == [(TOPIC, [(0, 4, "m1", 0)])]
