"""Rebalance history of a KIP-848 consumer group on the real daemon, read by `groupcoord groups history`.

confluent-kafka consumers with group.protocol=consumer against a server whose consumer session timeout is
lowered to 3 s (its bounds with it, as in test_consumer_group_crash.py). The story: a joins (1: member joined),
b joins from a child process (2: member joined), c joins (3) and closes (4: member left, its epoch -1
heartbeat), b is SIGKILLed and fenced at its session timeout (5: session expired), a closes (6: member left).
`groups history --json` lists those triggers newest first with the member ids and client ids, each at the next
group epoch; the table view too. The server is then killed (SIGKILL) and started again on its data dir: the
same history is shown. Each entry ends once the group is reconciled (b's join: when a has given b half and b
holds it), its duration the time from the bump. Every wait is bounded; servers on free ports.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from server_process import REPO, ServerProcess  # type: ignore[import-not-found]

pytestmark = pytest.mark.serial  # session clocks: a busy CPU must not delay the members' heartbeats

TOPIC = "hist848"
GROUP = "hist848-group"
FLAGS = ("--group-consumer-min-session-timeout-ms", "1000", "--group-consumer-session-timeout-ms", "3000",
         "--group-consumer-min-heartbeat-interval-ms", "500", "--group-consumer-heartbeat-interval-ms", "500")

CHILD = textwrap.dedent("""
    import sys
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "group.protocol": "consumer",
                  "client.id": "cg-b", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([sys.argv[3]])
    said = False
    while True:
        c.poll(0.2)
        if c.assignment() and not said:
            print("MEMBER", c.memberid(), flush=True)
            said = True
""")


def consumer(bootstrap: str, client_id: str) -> Any:
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "group.protocol": "consumer",
                  "client.id": client_id, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([TOPIC])
    return c


def poll_until(what: str, members: list[Any], check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            m.poll(0.1)
        if check():
            return
    raise AssertionError(f"timed out waiting for {what}")


def gc(srv: ServerProcess, *args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "coordinator.cli", "groups", *args, "-b", srv.bootstrap],
                       capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == 0, r.stderr
    return r.stdout


def history(srv: ServerProcess) -> list[dict]:
    return json.loads(gc(srv, "history", GROUP, "--json"))["rebalances"]


def triggers(srv: ServerProcess) -> list[str]:
    return [e["trigger"] for e in reversed(history(srv))]


def test_joins_a_leave_and_a_fence_are_listed_and_survive_a_restart(tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    data = tmp_path / "data"
    srv = ServerProcess(data, *FLAGS).start().wait_loaded()
    child: subprocess.Popen[str] | None = None
    a = c = None
    try:
        admin = AdminClient({"bootstrap.servers": srv.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 4, 1)])[TOPIC].result(10)

        a = consumer(srv.bootstrap, "cg-a")
        poll_until("a to hold the 4 partitions", [a], lambda: len(a.assignment()) == 4)
        a_id = a.memberid()

        child = subprocess.Popen([sys.executable, "-c", CHILD, srv.bootstrap, GROUP, TOPIC], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True)
        assert child.stdout is not None
        line = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not line:  # a polls (it must give b partitions) while b starts
            a.poll(0.1)
            if select.select([child.stdout], [], [], 0.1)[0]:
                line = child.stdout.readline()
        assert line.startswith("MEMBER "), line
        b_id = line.split()[1]
        poll_until("a to give b half", [a], lambda: len(a.assignment()) == 2)
        # b's join is a rebalance until both hold their new targets: then its entry gets its end
        poll_until("b's join to end", [a], lambda: history(srv)[0]["end_ms"] is not None, timeout=20)
        joined_b = history(srv)[0]
        assert joined_b["trigger"] == "member-joined" and joined_b["member_id"] == b_id
        assert joined_b["duration_ms"] == joined_b["end_ms"] - joined_b["start_ms"] >= 0

        c = consumer(srv.bootstrap, "cg-c")
        poll_until("c to get partitions", [a, c], lambda: len(c.assignment()) >= 1)
        c_id = c.memberid()
        c.close()  # its leave heartbeat (epoch -1)
        c = None
        poll_until("c's leave in the history", [a], lambda: triggers(srv)[-1:] == ["member-left"], timeout=20)

        child.kill()  # SIGKILL: no leave; fenced at the 3 s session timeout
        child.wait(10)
        poll_until("b's session to expire", [a], lambda: triggers(srv)[-1:] == ["session-expired"], timeout=30)
        a.close()
        a = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(triggers(srv)) < 6:
            time.sleep(0.5)

        shown = history(srv)
        assert [e["trigger"] for e in shown] == ["member-left", "session-expired", "member-left", "member-joined",
                                                 "member-joined", "member-joined"]
        assert [e["member_id"] for e in shown] == [a_id, b_id, c_id, c_id, b_id, a_id]
        assert [e["client_id"] for e in shown] == ["cg-a", "cg-b", "cg-c", "cg-c", "cg-b", "cg-a"]
        gens = [e["generation"] for e in shown]
        assert gens == sorted(gens, reverse=True) and len(set(gens)) == 6  # one entry per epoch bump
        assert [(e["members_before"], e["members_after"]) for e in shown] == \
            [(1, 0), (2, 1), (3, 2), (2, 3), (1, 2), (0, 1)]
        assert shown[1]["left"] == [b_id] and shown[5]["joined"] == [a_id]
        assert all(e["protocol_type"] == "consumer" and e["protocol"] == "uniform" for e in shown)
        assert all(e["client_host"].endswith("127.0.0.1") for e in shown)
        # every rebalance ended: reconciled (the joins, c's leave, b's expiry: a took the partitions over), or
        # the group emptied (a's leave)
        assert all(e["end_ms"] is not None and e["duration_ms"] == e["end_ms"] - e["start_ms"] >= 0 for e in shown)

        table = gc(srv, "history", GROUP).splitlines()
        assert table[0].startswith(f"GROUP {GROUP}  STATE Empty") and "REBALANCES 6" in table[0]
        assert [row.split()[3] for row in table[2:]] == [e["trigger"] for e in shown]
    finally:
        for m in (a, c):
            if m is not None:
                m.close()
        if child is not None and child.poll() is None:
            child.kill()
            child.wait(10)
        srv.kill()

    again = ServerProcess(data, *FLAGS).start().wait_loaded()
    try:
        assert history(again) == shown
    finally:
        again.stop()
