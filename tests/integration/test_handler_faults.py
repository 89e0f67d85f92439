"""A handler whose record cannot be encoded changes nothing (issue #25), on the real server over TCP: the
server's encoders are made to raise once (tests/integration/faults/sitecustomize.py, loaded only by these
tests), the client gets an error answer or a clean close, the group, its offsets and its pending commits are
as before (OffsetFetch with require_stable answers, not UNSTABLE_OFFSET_COMMIT), and the same group then
works normally."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from server_process import ServerProcess, read_frame  # type: ignore[import-not-found]

from protocol import codec

FAULTS = Path(__file__).parent / "faults"
UNKNOWN_SERVER_ERROR = -1


class Wire:
    def __init__(self, port: int) -> None:
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.corr = 0

    def call(self, api: int, version: int, body: dict[str, Any]) -> dict[str, Any] | None:
        """The answer, or None when the server closed the connection (then a fresh one is opened)."""
        self.corr += 1
        self.sock.sendall(codec.encode_request(api, version, self.corr, "faults", body))
        payload = read_frame(self.sock)
        if payload is None:
            self.sock.close()
            self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            return None
        return codec.decode_response(api, version, payload)[1]


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[tuple[ServerProcess, Path]]:
    flags = tmp_path / "faults"
    flags.mkdir()
    s = ServerProcess(tmp_path / "data", "--group-initial-rebalance-delay-ms", "0",
                      env={"PYTHONPATH": str(FAULTS), "TEST_FAULT_DIR": str(flags)}).start().wait_loaded()
    try:
        yield s, flags
    finally:
        s.stop()


def commit(w: Wire, group: str, offsets: dict[int, int], generation: int = -1, member: str = "") -> Any:
    return w.call(8, 8, {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
                         "group_instance_id": None, "topics": [{"name": "t", "partitions": [
                             {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1,
                              "committed_metadata": ""} for p, o in offsets.items()]}]})


def stable_offsets(w: Wire, group: str, partitions: list[int]) -> dict[int, tuple[int, int]]:
    got = w.call(9, 7, {"group_id": group, "require_stable": True,
                        "topics": [{"name": "t", "partition_indexes": partitions}]})
    assert got is not None and got["error_code"] == 0, got
    return {p["partition_index"]: (p["committed_offset"], p["error_code"]) for p in got["topics"][0]["partitions"]}


def describe(w: Wire, group: str) -> tuple[str, int]:
    got = w.call(15, 5, {"groups": [group], "include_authorized_operations": False})
    assert got is not None
    g = got["groups"][0]
    return g["group_state"], len(g["members"])


def answered_with_error_or_closed(resp: Any) -> bool:
    return resp is None or resp["error_code"] != 0


def failures(srv: ServerProcess) -> list[str]:
    return [line for line in srv.log().splitlines() if "injected fault" in line]


@pytest.mark.parametrize("partitions", [[0], [0, 1]], ids=["hot path", "generic path"])
def test_offset_commit(srv: tuple[ServerProcess, Path], partitions: list[int]) -> None:
    s, flags = srv
    w = Wire(s.port)
    first = commit(w, "g-commit", {p: 5 for p in partitions})
    assert first is not None and {p["error_code"] for p in first["topics"][0]["partitions"]} == {0}
    (flags / "encode_offset_value").touch()
    resp = commit(w, "g-commit", {p: 9 for p in partitions})
    assert resp is None or {p["error_code"] for p in resp["topics"][0]["partitions"]} != {0}, resp
    assert not (flags / "encode_offset_value").exists(), "the fault fired"
    assert stable_offsets(w, "g-commit", partitions) == {p: (5, 0) for p in partitions}
    assert commit(w, "g-commit", {p: 11 for p in partitions}) is not None
    assert stable_offsets(w, "g-commit", partitions) == {p: (11, 0) for p in partitions}
    assert failures(s), "the server logged the fault"


def join_one(w: Wire, group: str) -> tuple[str, int]:
    body = {"group_id": group, "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x00"}]}
    first = w.call(11, 5, body)
    assert first is not None and first["error_code"] == 79
    body["member_id"] = first["member_id"]
    joined = w.call(11, 5, body)
    assert joined is not None and joined["error_code"] == 0, joined
    return joined["member_id"], joined["generation_id"]


def sync(w: Wire, group: str, member: str, generation: int) -> Any:
    return w.call(14, 3, {"group_id": group, "generation_id": generation, "member_id": member,
                          "group_instance_id": None, "assignments": [{"member_id": member, "assignment": b"a"}]})


def test_the_leaders_sync(srv: tuple[ServerProcess, Path]) -> None:
    s, flags = srv
    w = Wire(s.port)
    member, generation = join_one(w, "g-sync")
    (flags / "encode_group_value").touch()
    resp = sync(w, "g-sync", member, generation)
    assert answered_with_error_or_closed(resp), resp
    assert describe(w, "g-sync") == ("CompletingRebalance", 1)
    again = sync(w, "g-sync", member, generation)
    assert again is not None and (again["error_code"], again["assignment"]) == (0, b"a")
    assert describe(w, "g-sync") == ("Stable", 1)
    assert commit(w, "g-sync", {0: 3}, generation, member) is not None
    assert stable_offsets(w, "g-sync", [0]) == {0: (3, 0)}


def test_the_last_member_leaving(srv: tuple[ServerProcess, Path]) -> None:
    s, flags = srv
    w = Wire(s.port)
    member, generation = join_one(w, "g-leave")
    assert sync(w, "g-leave", member, generation)["error_code"] == 0
    (flags / "encode_group_value").touch()
    resp = w.call(13, 3, {"group_id": "g-leave", "members": [{"member_id": member, "group_instance_id": None}]})
    assert answered_with_error_or_closed(resp), resp
    assert describe(w, "g-leave") == ("Stable", 1), "the member is still there"
    left = w.call(13, 3, {"group_id": "g-leave", "members": [{"member_id": member, "group_instance_id": None}]})
    assert left is not None and left["error_code"] == 0 and left["members"][0]["error_code"] == 0
    assert describe(w, "g-leave") == ("Empty", 0)


def test_delete_groups(srv: tuple[ServerProcess, Path]) -> None:
    s, flags = srv
    w = Wire(s.port)
    commit(w, "g-delete", {0: 7})
    (flags / "encode_offset_key").touch()
    resp = w.call(42, 2, {"groups_names": ["g-delete"]})
    assert resp is None or resp["results"][0]["error_code"] != 0, resp
    assert stable_offsets(w, "g-delete", [0]) == {0: (7, 0)}, "the group and its offsets are still there"
    deleted = w.call(42, 2, {"groups_names": ["g-delete"]})
    assert deleted is not None and deleted["results"][0]["error_code"] == 0
    assert stable_offsets(w, "g-delete", [0]) == {0: (-1, 0)}


def describe_members(w: Wire, group: str) -> list[str]:
    got = w.call(15, 5, {"groups": [group], "include_authorized_operations": False})
    assert got is not None
    return [m["member_id"] for m in got["groups"][0]["members"]]


def test_a_static_members_restart(srv: tuple[ServerProcess, Path]) -> None:
    s, flags = srv
    w = Wire(s.port)
    body = {"group_id": "g-static", "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000, "member_id": "",
            "group_instance_id": "pod-1", "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x00"}]}
    joined = w.call(11, 5, body)
    assert joined is not None and joined["error_code"] == 0, joined
    member, generation = joined["member_id"], joined["generation_id"]
    assert sync(w, "g-static", member, generation)["error_code"] == 0
    (flags / "encode_group_value").touch()
    resp = w.call(11, 5, body)  # pod-1 restarts: an empty member id with its instance id
    assert answered_with_error_or_closed(resp), resp
    assert describe(w, "g-static") == ("Stable", 1) and describe_members(w, "g-static") == [member]
    again = w.call(11, 5, body)
    assert again is not None and again["error_code"] == 0 and again["member_id"] != member
    assert describe_members(w, "g-static") == [again["member_id"]]


def test_offset_delete(srv: tuple[ServerProcess, Path]) -> None:
    s, flags = srv
    w = Wire(s.port)
    w.call(19, 4, {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1, "assignments": [],
                               "configs": []}], "timeout_ms": 5000, "validate_only": False})
    commit(w, "g-offdel", {0: 4})
    body = {"group_id": "g-offdel", "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]}
    (flags / "encode_offset_key").touch()
    resp = w.call(47, 0, body)
    assert answered_with_error_or_closed(resp), resp
    assert stable_offsets(w, "g-offdel", [0]) == {0: (4, 0)}
    deleted = w.call(47, 0, body)
    assert deleted is not None and deleted["error_code"] == 0, deleted
    assert stable_offsets(w, "g-offdel", [0]) == {0: (-1, 0)}
