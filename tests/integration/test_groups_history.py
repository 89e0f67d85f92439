"""Rebalance history (issue #37 item 2) on the real daemon over TCP, and `groupcoord groups history`.

Members speak the raw protocol (JoinGroup v8 with a reason, LeaveGroup v5 with a reason) so every step is
exact. The story: a, b and c join within the initial rebalance delay (1: member joined, by the leader, the first
to join); c leaves saying why (2: member left, with c's reason); b goes silent and its session expires (3: session
expired); the leader a rejoins its Stable group (4: leader rejoined). `groupcoord groups history` lists the four
newest first with those triggers; `--json` gives the same data. The server is then killed (SIGKILL) and started
again on its data dir: the same history is shown. Bounded waits only; servers on free ports.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient
from server_process import REPO, ServerProcess, read_frame  # type: ignore[import-not-found]

from protocol import codec

GROUP = "history-story"
LEAVE_REASON = "the consumer is being closed"


def call(port: int, key: int, version: int, body: dict, client_id: str = "hist") -> dict:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(codec.encode_request(key, version, 1, client_id, body))
        payload = read_frame(s)
        assert payload is not None
        return codec.decode_response(key, version, payload)[1]


def join(port: int, member_id: str, client_id: str, session_ms: int, reason: str) -> dict:
    return call(port, 11, 8, {"group_id": GROUP, "session_timeout_ms": session_ms, "rebalance_timeout_ms": 60000,
                              "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer",
                              "protocols": [{"name": "range", "metadata": b""}], "reason": reason}, client_id)


def sync(port: int, generation: int, member_id: str, members: list[str] = ()) -> dict:  # type: ignore[assignment]
    body = {"group_id": GROUP, "generation_id": generation, "member_id": member_id, "group_instance_id": None,
            "protocol_type": "consumer", "protocol_name": "range",
            "assignments": [{"member_id": m, "assignment": b""} for m in members]}
    answer = call(port, 14, 5, body)
    assert answer["error_code"] == 0, answer
    return answer


def describe(port: int) -> dict:
    return call(port, 15, 5, {"groups": [GROUP], "include_authorized_operations": False})["groups"][0]


def wait_until(what: str, check, timeout: float = 30.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def gc(srv: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([sys.executable, "-m", "coordinator.cli", "groups", *args, "-b", srv.bootstrap],
                       capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == 0, r.stderr
    return r


def test_four_rebalances_are_listed_newest_first_and_survive_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    flags = ("--group-initial-rebalance-delay-ms", "2000", "--group-min-session-timeout-ms", "1000")
    srv = ServerProcess(data, *flags).start().wait_loaded()
    try:
        port = srv.port
        ids = {}
        for name in ("a", "b", "c"):  # KIP-394: a member id first
            first = join(port, "", f"client-{name}", 60000, "start")
            assert first["error_code"] == 79
            ids[name] = first["member_id"]
        a, b, c = ids["a"], ids["b"], ids["c"]
        sessions = {"a": 60000, "b": 4000, "c": 60000}
        with ThreadPoolExecutor(3) as pool:  # all three within the 2 s initial delay: one rebalance
            joins = {n: pool.submit(join, port, ids[n], f"client-{n}", sessions[n], f"{n} starts")
                     for n in ("a", "b", "c")}
            answers = {n: f.result(timeout=30) for n, f in joins.items()}
        assert {x["generation_id"] for x in answers.values()} == {1}
        leader = answers["a"]["leader"]
        assert leader in (a, b, c)
        sync(port, 1, leader, [a, b, c])
        for m in (a, b, c):
            if m != leader:
                sync(port, 1, m)
        # leave c (a non-leader would do as well: we name whoever is not the leader and not b, else b)
        leaving = c if leader != c else a
        stays = next(m for m in (a, b, c) if m not in (leaving, b))
        assert leaving != b and stays != b
        left = call(port, 13, 5, {"group_id": GROUP, "members": [
            {"member_id": leaving, "group_instance_id": None, "reason": LEAVE_REASON}]})
        assert left["members"][0]["error_code"] == 0
        names = {v: k for k, v in ids.items()}
        with ThreadPoolExecutor(2) as pool:
            rejoin = [pool.submit(join, port, m, f"client-{names[m]}", sessions[names[m]], "rejoin")
                      for m in (stays, b)]
            second = [f.result(timeout=30) for f in rejoin]
        assert {x["generation_id"] for x in second} == {2}
        leader2 = second[0]["leader"]
        sync(port, 2, leader2, [stays, b])
        sync(port, 2, stays if leader2 == b else b)
        # b goes silent (session 4 s) while `stays` (session 60 s) needs no heartbeat: b expires
        wait_until("b's session to expire", lambda: describe(port)["group_state"] == "PreparingRebalance")
        third = join(port, stays, f"client-{names[stays]}", sessions[names[stays]], "rejoin after expiry")
        assert third["generation_id"] == 3 and third["leader"] == stays
        sync(port, 3, stays, [stays])
        fourth = join(port, stays, f"client-{names[stays]}", sessions[names[stays]], "topics changed")
        assert fourth["generation_id"] == 4  # the leader rejoined its Stable group: a rebalance
        sync(port, 4, stays, [stays])

        shown = json.loads(gc(srv, "history", GROUP, "--json").stdout)
        entries = shown["rebalances"]
        assert [e["trigger"] for e in entries] == ["leader-rejoined", "session-expired", "member-left",
                                                   "member-joined"]
        assert [e["generation"] for e in entries] == [4, 3, 2, 1]
        rejoined, expired, gone, joined = entries
        assert (joined["member_id"], joined["client_id"], joined["reason"]) == (leader, f"client-{names[leader]}",
                                                                               f"{names[leader]} starts")
        assert joined["client_host"].endswith("127.0.0.1")
        assert (joined["members_before"], joined["members_after"], sorted(joined["joined"])) == (0, 3, sorted(ids.values()))
        assert (gone["member_id"], gone["reason"], gone["left"]) == (leaving, LEAVE_REASON, [leaving])
        assert (gone["members_before"], gone["members_after"]) == (3, 2)
        assert (expired["member_id"], expired["client_id"], expired["left"]) == (b, "client-b", [b])
        assert (rejoined["member_id"], rejoined["reason"], rejoined["members_after"]) == (stays, "topics changed", 1)
        assert all(e["protocol"] == "range" and e["end_ms"] >= e["start_ms"] for e in entries)
        assert all(e["duration_ms"] == e["end_ms"] - e["start_ms"] for e in entries)

        table = gc(srv, "history", GROUP).stdout.splitlines()
        assert table[0].startswith(f"GROUP {GROUP}  STATE Stable") and "REBALANCES 4" in table[0]
        assert table[1].split()[:4] == ["GENERATION", "STARTED", "DURATION-MS", "TRIGGER"]
        assert [line.split()[3] for line in table[2:]] == [e["trigger"] for e in entries]
        assert LEAVE_REASON in table[4]

        kp = KafkaAdminClient(bootstrap_servers=srv.bootstrap)  # other clients skip the history tag
        try:
            got = kp.describe_groups([GROUP])
            assert "Stable" in repr(got[0] if isinstance(got, list) else got[GROUP])
        finally:
            kp.close()
        ck = AdminClient({"bootstrap.servers": srv.bootstrap})
        desc = ck.describe_consumer_groups([GROUP])[GROUP].result(timeout=20)
        assert desc.group_id == GROUP and "STABLE" in str(desc.state) and len(desc.members) == 1
    finally:
        srv.kill()

    again = ServerProcess(data, *flags).start().wait_loaded()
    try:
        after = json.loads(gc(again, "history", GROUP, "--json").stdout)
        assert after["rebalances"] == shown["rebalances"]
    finally:
        again.stop()
