"""KIP-848 target assignments on a worker thread (runtime/consumer_assignment.py), on the real server over TCP.

With the test hooks of tests/integration/faults/sitecustomize.py every target goes to the worker (flag
"assignment_offload_all") and one group's assignor run can be held (flag "assignor_gate"): while it is held the
server goes on answering other groups' heartbeats (a computation on the event loop would stall them until the gate
times out), the held group's heartbeat stays unanswered, and once released it gets its partitions. A join storm
whose every target is computed on the worker ends as the inline one does: Stable, every partition owned once.
Every wait is bounded."""

from __future__ import annotations

import select
import socket
import time
import uuid
from pathlib import Path
from typing import Any

import test_consumer_group_join_storm as storm  # type: ignore[import-not-found]
from server_process import ServerProcess, read_frame  # type: ignore[import-not-found]

from protocol import codec

FAULTS = Path(__file__).parent / "faults"


def _server(tmp_path: Path) -> tuple[ServerProcess, Path]:
    flags = tmp_path / "flags"
    flags.mkdir()
    (flags / "assignment_offload_all").touch()
    srv = ServerProcess(tmp_path / "data", env={"PYTHONPATH": str(FAULTS), "TEST_FAULT_DIR": str(flags)})
    return srv.start().wait_loaded(), flags


def _join(group: str, topic: str) -> dict[str, Any]:
    return {**storm._join(uuid.uuid4().hex[:22]), "group_id": group, "subscribed_topic_names": [topic]}


def _wait_for(path: Path, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def test_other_groups_are_served_while_a_target_is_computed(tmp_path: Path) -> None:
    srv, flags = _server(tmp_path)
    try:
        with storm._connect(srv.port) as sock:
            storm._create_topic(sock)
        (flags / "assignor_gate").write_text("held")
        held = storm._connect(srv.port)
        try:
            held.sendall(codec.encode_request(68, 1, 7, "held", _join("held", storm.TOPIC)))
            assert _wait_for(flags / "assignor_started", 10), "the held group's assignor never ran"
            # the assignor of "held" is running (and waiting): another group joins and is answered meanwhile
            # (computed on the loop instead, the held assignor would stall this answer until its 15 s gate times out)
            with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as other:
                (answer,) = storm._exchange(other, 68, 1, [_join("other", storm.TOPIC)])
                assert answer["error_code"] == 0 and answer["member_epoch"] == 1, answer
                owned = sum(len(tp["partitions"]) for tp in answer["assignment"]["topic_partitions"])
                assert owned == storm.PARTITIONS
                assert (flags / "assignor_gate").exists()  # the held computation is still held
            readable, _, _ = select.select([held], [], [], 0.2)
            assert not readable, "the held group was answered before its target was computed"
            (flags / "assignor_gate").unlink()
            payload = read_frame(held)
            assert payload is not None
            correlation, body = codec.decode_response(68, 1, payload)
            assert correlation == 7 and body["error_code"] == 0 and body["member_epoch"] == 1, body
            assert sum(len(tp["partitions"]) for tp in body["assignment"]["topic_partitions"]) == storm.PARTITIONS
        finally:
            held.close()
        assert srv.metric("groupcoord_consumer_group_assignment_seconds_count") >= 2.0
        assert "Traceback" not in srv.log(), srv.log()[-3000:]
    finally:
        srv.stop()


def test_a_join_storm_with_every_target_on_the_worker_ends_stable(tmp_path: Path) -> None:
    srv, _ = _server(tmp_path)
    try:
        with storm._connect(srv.port) as sock:
            storm._create_topic(sock)
        members = storm._storm(srv.port)
        with storm._connect(srv.port) as sock:
            group = storm._describe(sock)
        assert group["error_code"] == 0 and group["group_state"] == "Stable", group
        owned = []
        for m in members:
            assert m.epoch == group["group_epoch"]
            mine = [(t, p) for t, ps in m.owned.items() for p in ps]
            assert len(mine) == storm.PARTITIONS // storm.MEMBERS
            owned += mine
        assert len(owned) == len(set(owned)) == storm.PARTITIONS
        assert "Traceback" not in srv.log(), srv.log()[-3000:]
    finally:
        srv.stop()
