"""The Heartbeat hot path on a real server answers exactly as the generic path does.

Two daemons run side by side, one with the hot path (the default) and one with ``--hot-path-enable false``.
On each, one raw-TCP member (our codec) forms group ``hot-group``: JoinGroup v5 -> MEMBER_ID_REQUIRED (79),
JoinGroup with that id -> generation 1 with itself as leader, SyncGroup. Then the same batch goes to both
(built per server with its own member id): Heartbeats v0-4 that are valid, carry a wrong generation, an
unknown member, an unknown group, an empty group id, or a body tagged field (a shape the hot decoder hands
to the generic path), pipelined three sends at a time (cut mid-frame) and interleaved with ApiVersions,
OffsetFetch and an OffsetCommit (which waits for its fsync, so hot answers queue behind it). Responses must
come back in request order, byte-identical between the two servers (no response carries a member id), with
Kafka's error codes; the batch is sent twice (the second time from the decoder's memo).
/metrics counts every Heartbeat in ``groupcoord_requests_total{api="Heartbeat"}`` on both servers.
"""

from __future__ import annotations

import itertools
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from server_process import ServerProcess, read_frame, twin_servers  # type: ignore[import-not-found]

from protocol import codec

GROUP = "hot-group"
API_VERSIONS, OFFSET_COMMIT, OFFSET_FETCH, JOIN, HEARTBEAT, SYNC = 18, 8, 9, 11, 12, 14
NONE, ILLEGAL_GENERATION, INVALID_GROUP_ID, UNKNOWN_MEMBER_ID, MEMBER_ID_REQUIRED = 0, 22, 24, 25, 79
FLAGS = ("--group-min-session-timeout-ms", "1000", "--group-initial-rebalance-delay-ms", "0",
         "--num-partitions", "4", "--offsets-topic-num-partitions", "4")


class Member:
    """One raw connection; requests encoded and responses decoded with our generic codec."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.corr = 0
        self.member_id = ""
        self.generation = -1

    def next_corr(self) -> int:
        self.corr += 1
        return self.corr

    def call(self, api: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        corr = self.next_corr()
        self.sock.sendall(codec.encode_request(api, version, corr, "hot-test", body))
        payload = read_frame(self.sock)
        assert payload is not None, "the server closed the connection"
        got_corr, response = codec.decode_response(api, version, payload)
        assert got_corr == corr
        return response

    def form_group(self) -> None:
        join = {"group_id": GROUP, "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000,
                "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff"}],
                "reason": None}
        first = self.call(JOIN, 5, join)
        assert first["error_code"] == MEMBER_ID_REQUIRED and first["member_id"].startswith("hot-test-")
        second = self.call(JOIN, 5, {**join, "member_id": first["member_id"]})
        assert second["error_code"] == NONE and second["leader"] == first["member_id"]
        self.member_id, self.generation = first["member_id"], second["generation_id"]
        assert self.generation == 1
        sync = self.call(SYNC, 3, {"group_id": GROUP, "generation_id": 1, "member_id": self.member_id,
                                   "group_instance_id": None, "protocol_type": None, "protocol_name": None,
                                   "assignments": [{"member_id": self.member_id, "assignment": b"mine"}]})
        assert sync["error_code"] == NONE and sync["assignment"] == b"mine"

    def close(self) -> None:
        self.sock.close()


def heartbeat(version: int, corr: int, group: str, generation: int, member: str,
              instance: str | None = None) -> bytes:
    return codec.encode_request(HEARTBEAT, version, corr, "hot-test", {
        "group_id": group, "generation_id": generation, "member_id": member, "group_instance_id": instance})


def batch(m: Member) -> tuple[list[tuple[int, int, int]], bytes, int]:
    """([(api, version, corr)] in send order, the frames, how many are Heartbeats) for member ``m``."""
    gen, me = m.generation, m.member_id
    sent: list[tuple[int, int, int]] = []
    frames: list[bytes] = []

    def add(api: int, version: int, make: Any) -> None:
        corr = m.next_corr()
        sent.append((api, version, corr))
        frames.append(make(corr))

    add(HEARTBEAT, 0, lambda c: heartbeat(0, c, GROUP, gen, me))
    add(API_VERSIONS, 3, lambda c: codec.encode_request(API_VERSIONS, 3, c, "hot-test", {
        "client_software_name": "hot-test", "client_software_version": "1"}))
    add(HEARTBEAT, 1, lambda c: heartbeat(1, c, GROUP, gen, me))
    add(HEARTBEAT, 2, lambda c: heartbeat(2, c, GROUP, gen + 1, me))                 # wrong generation
    add(OFFSET_FETCH, 7, lambda c: codec.encode_request(OFFSET_FETCH, 7, c, "hot-test", {
        "group_id": "other-group", "topics": None, "require_stable": False}))
    add(OFFSET_COMMIT, 8, lambda c: codec.encode_request(OFFSET_COMMIT, 8, c, "hot-test", {
        "group_id": GROUP, "generation_id_or_member_epoch": gen, "member_id": me, "group_instance_id": None,
        "topics": [{"name": "hot-topic", "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                         "committed_leader_epoch": -1,
                                                         "committed_metadata": ""}]}]}))
    add(HEARTBEAT, 3, lambda c: heartbeat(3, c, GROUP, gen, me))                     # behind the commit
    add(HEARTBEAT, 4, lambda c: heartbeat(4, c, GROUP, gen, me))
    add(HEARTBEAT, 4, lambda c: heartbeat(4, c, GROUP, gen, "nobody"))               # unknown member
    add(HEARTBEAT, 3, lambda c: heartbeat(3, c, "no-such-group", gen, me))          # unknown group
    add(HEARTBEAT, 0, lambda c: heartbeat(0, c, "", gen, me))                       # empty group id
    add(HEARTBEAT, 3, lambda c: heartbeat(3, c, GROUP, gen, me, "pod-unmapped"))    # instance of nobody
    # v4 with one tagged field (tag 3, 2 bytes) in the body: not the hot shape, the generic path answers
    add(HEARTBEAT, 4, lambda c: _with_body_tag(heartbeat(4, c, GROUP, gen, me)))
    add(API_VERSIONS, 0, lambda c: codec.encode_request(API_VERSIONS, 0, c, "hot-test", {}))
    add(HEARTBEAT, 2, lambda c: heartbeat(2, c, GROUP, gen, me))
    return sent, b"".join(frames), sum(1 for api, _, _ in sent if api == HEARTBEAT)


EXPECTED_HEARTBEAT_ERRORS = [NONE, NONE, ILLEGAL_GENERATION, NONE, NONE, UNKNOWN_MEMBER_ID, UNKNOWN_MEMBER_ID,
                             INVALID_GROUP_ID, NONE, NONE, NONE]


def _with_body_tag(frame: bytes) -> bytes:
    assert frame[-1] == 0
    body = frame[4:-1] + b"\x01\x03\x02ok"
    return len(body).to_bytes(4, "big") + body


def exchange(m: Member, sent: list[tuple[int, int, int]], data: bytes) -> list[bytes]:
    """Send ``data`` in three pieces (the cuts fall inside frames), return the response payloads."""
    cuts = [0, len(data) // 3 + 1, 2 * len(data) // 3 + 3, len(data)]
    for start, end in itertools.pairwise(cuts):
        m.sock.sendall(data[start:end])
        time.sleep(0.02)  # separate reads on the server side
    out = []
    for _ in sent:
        payload = read_frame(m.sock)
        assert payload is not None, "the server closed the connection"
        out.append(payload)
    return out


def decoded(sent: list[tuple[int, int, int]], payloads: list[bytes]) -> list[tuple[int, int, dict]]:
    return [(api, *codec.decode_response(api, version, p)) for (api, version, _), p in zip(sent, payloads,
                                                                                           strict=True)]


def heartbeats_counted(srv: ServerProcess) -> float:
    return srv.metric('groupcoord_requests_total{api="Heartbeat"}')


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    with twin_servers(tmp_path_factory.mktemp("hot"), FLAGS, ("--hot-path-enable", "false")) as pair:
        yield pair


def test_hot_and_generic_servers_answer_a_heartbeat_batch_identically(servers) -> None:
    members = [Member(srv.port) for srv in servers]
    try:
        for m in members:
            m.form_group()
        assert members[0].member_id != members[1].member_id  # ids differ: frames are built per server
        counted_before = [heartbeats_counted(srv) for srv in servers]
        results = []
        for m in members:
            rounds = []
            for _ in range(2):  # the second round is served from the hot decoder's memo
                sent, data, n_heartbeats = batch(m)
                payloads = exchange(m, sent, data)
                in_order = [int.from_bytes(p[:4], "big", signed=True) for p in payloads]
                assert in_order == [corr for _, _, corr in sent]  # responses leave in request order
                answers = decoded(sent, payloads)
                rounds.append((sent, payloads, answers))
            results.append(rounds)
        for (sent_hot, payloads_hot, answers_hot), (sent_cold, payloads_cold, answers_cold) in zip(*results,
                                                                                                 strict=True):
            assert sent_hot == sent_cold
            assert payloads_hot == payloads_cold  # byte-identical, hence also decoded alike
            assert answers_hot == answers_cold
            errors = [body["error_code"] for api, _, body in answers_hot if api == HEARTBEAT]
            assert errors == EXPECTED_HEARTBEAT_ERRORS
            commit = next(body for api, _, body in answers_hot if api == OFFSET_COMMIT)
            assert commit["topics"][0]["partitions"][0]["error_code"] == NONE
            assert all(body["error_code"] == NONE for api, _, body in answers_hot if api == API_VERSIONS)
        assert n_heartbeats == len(EXPECTED_HEARTBEAT_ERRORS)
        counted_after = [heartbeats_counted(srv) for srv in servers]
        for before, after in zip(counted_before, counted_after, strict=True):
            assert after - before == 2 * n_heartbeats
    finally:
        for m in members:
            m.close()


def test_frames_the_generic_path_rejects_are_rejected_with_the_hot_path_on(servers) -> None:
    """A Heartbeat whose client_id is not UTF-8 is malformed for the generic decoder: the server closes the
    connection. The hot path must not answer it instead (it has to hand the frame to the generic path)."""
    outcomes = []
    for srv in servers:
        m = Member(srv.port)
        try:
            good = heartbeat(1, 77, "any-group", 1, "any-member", None)
            assert good[14:22] == b"hot-test"
            bad = good[:14] + b"\xff\xfe" + good[16:]
            m.sock.sendall(bad)
            outcomes.append(read_frame(m.sock))
        finally:
            m.close()
    hot_answer, cold_answer = outcomes
    assert cold_answer is None  # the generic path closed the connection
    assert hot_answer is None, f"the hot path answered a frame the generic path rejects: {hot_answer!r}"
