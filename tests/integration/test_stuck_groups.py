"""Who a group waits for, and stuck groups (issue #37), on the real daemon over TCP.

A member joins over the raw protocol (MEMBER_ID_REQUIRED, then JoinGroup: it leads generation 1) and never
sends SyncGroup: the group stays in CompletingRebalance, waiting for its leader's assignment.
- DescribeGroups v5 carries our tagged fields (waiting_since_ms, waiting_for: that member, its client id and
  host, and what is missing); kafka-python's and confluent-kafka's admin clients still describe the group
  (they skip tags they do not know; librdkafka's parse is guarded).
- Past group.stuck.threshold.ms, groupcoord_groups_stuck is 1 and ONE warning line names the member.
- `groupcoord groups describe` prints who the group waits for.
- The SyncGroup arrives: the group is Stable, waits for nobody, groupcoord_groups_stuck is 0 again.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient
from server_process import REPO, ServerProcess, read_frame

from coordinator.core.waits import LEADER_SYNC
from protocol import codec

GROUP = "stuck"
CLIENT = "stuck-client"


def call(port: int, key: int, version: int, body: dict, corr: int = 1) -> dict:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(codec.encode_request(key, version, corr, CLIENT, body))
        payload = read_frame(s)
        assert payload is not None
        return codec.decode_response(key, version, payload)[1]


def wait_until(what: str, check, timeout: float = 15.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_group_waiting_for_its_leaders_sync_is_described_counted_and_logged_once(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data", "--group-initial-rebalance-delay-ms", "0", "--group-stuck-threshold-ms",
                        "500", "--group-min-session-timeout-ms", "1000").start().wait_loaded()
    try:
        join = {"group_id": GROUP, "session_timeout_ms": 60000, "rebalance_timeout_ms": 60000, "member_id": "",
                "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}], "reason": None}
        first = call(srv.port, 11, 5, join)
        assert first["error_code"] == 79
        join["member_id"] = member = first["member_id"]
        joined = call(srv.port, 11, 5, join)
        assert (joined["error_code"], joined["leader"]) == (0, member)

        described = call(srv.port, 15, 5, {"groups": [GROUP], "include_authorized_operations": False})["groups"][0]
        assert described["group_state"] == "CompletingRebalance"
        assert [(w["member_id"], w["client_id"], w["reason"]) for w in described["waiting_for"]] == \
            [(member, CLIENT, LEADER_SYNC)]
        assert described["waiting_for"][0]["client_host"].endswith("127.0.0.1")
        assert 0 < time.time() * 1000 - described["waiting_since_ms"] < 60_000

        # other clients skip our tags
        admin = KafkaAdminClient(bootstrap_servers=srv.bootstrap)
        try:
            got = admin.describe_groups([GROUP])
            kp = got[0] if isinstance(got, list) else got[GROUP]
            assert "CompletingRebalance" in repr(kp), kp
        finally:
            admin.close()
        ck = AdminClient({"bootstrap.servers": srv.bootstrap})
        desc = ck.describe_consumer_groups([GROUP])[GROUP].result(timeout=20)
        assert desc.group_id == GROUP and "COMPLETING_REBALANC" in str(desc.state)

        wait_until("groupcoord_groups_stuck 1", lambda: srv.metric("groupcoord_groups_stuck") == 1)
        time.sleep(2.5)  # more checks: still one line
        lines = [ln for ln in srv.log().splitlines() if f"group {GROUP} has been CompletingRebalance" in ln]
        assert len(lines) == 1 and member in lines[0] and "SyncGroup" in lines[0] and "WARNING" in lines[0], lines

        shown = subprocess.run([sys.executable, "-m", "coordinator.cli", "groups", "describe", GROUP, "-b",
                                srv.bootstrap], capture_output=True, text=True, timeout=60, cwd=REPO)
        assert shown.returncode == 0, shown.stderr
        assert " FOR 1 MEMBER(S)" in shown.stdout and member in shown.stdout and LEADER_SYNC in shown.stdout, shown.stdout

        synced = call(srv.port, 14, 3, {"group_id": GROUP, "generation_id": joined["generation_id"],
                                        "member_id": member, "group_instance_id": None,
                                        "assignments": [{"member_id": member, "assignment": b""}]})
        assert synced["error_code"] == 0
        wait_until("groupcoord_groups_stuck 0", lambda: srv.metric("groupcoord_groups_stuck") == 0)
        described = call(srv.port, 15, 5, {"groups": [GROUP], "include_authorized_operations": False})["groups"][0]
        assert described["group_state"] == "Stable" and not described.get("waiting_for")
    finally:
        srv.stop()
