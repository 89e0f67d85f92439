"""A KIP-848 group write that fails changes nothing (Kafka's appendGroupMetadataErrorToResponseError), on the real
server over TCP: the failure is injected by tests/integration/faults/sitecustomize.py (loaded only here) as a
failed append of the heartbeat's records. The joining member gets NOT_COORDINATOR (Kafka's answer to a storage
error) and no group exists afterwards; the same join then succeeds at group epoch 1, as a first join does."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from server_process import ServerProcess, read_frame  # type: ignore[import-not-found]

from protocol import codec

FAULTS = Path(__file__).parent / "faults"
GROUP, TOPIC = "faulty848", "faulty848-topic"


def call(port: int, api: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(codec.encode_request(api, version, 1, "faults", body))
        payload = read_frame(s)
    assert payload is not None
    return codec.decode_response(api, version, payload)[1]


def join(port: int) -> dict[str, Any]:
    return call(port, 68, 1, {"group_id": GROUP, "member_id": "m-1", "member_epoch": 0, "instance_id": None,
                              "rack_id": None, "rebalance_timeout_ms": 30000, "subscribed_topic_names": [TOPIC],
                              "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": []})


def describe(port: int) -> dict[str, Any]:
    return call(port, 69, 1, {"group_ids": [GROUP], "include_authorized_operations": False})["groups"][0]


def test_a_failed_consumer_group_write_answers_not_coordinator_and_changes_nothing(tmp_path: Path) -> None:
    flags = tmp_path / "flags"
    flags.mkdir()
    srv = ServerProcess(tmp_path / "data", env={"PYTHONPATH": str(FAULTS), "TEST_FAULT_DIR": str(flags)}
                        ).start().wait_loaded()
    try:
        (flags / "consumer_group_write").touch()
        failed = join(srv.port)
        assert failed["error_code"] == 16, failed  # NOT_COORDINATOR: Kafka's answer to a storage error
        assert not (flags / "consumer_group_write").exists()  # the fault fired
        assert describe(srv.port)["error_code"] == 69  # GROUP_ID_NOT_FOUND: the group was never created

        joined = join(srv.port)
        assert joined["error_code"] == 0 and joined["member_id"] == "m-1", joined
        group = describe(srv.port)
        assert group["error_code"] == 0 and group["group_epoch"] == 1, group
        # the failure was answered and nothing else went wrong (a write failing before it is staged settles on
        # the group's own drain: it once ran the group's queue twice and raised KeyError)
        assert "Traceback" not in srv.log() and "KeyError" not in srv.log(), srv.log()[-3000:]
    finally:
        srv.stop()
