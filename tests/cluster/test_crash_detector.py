"""Fast failover's decisions (coordinator/cluster/crash_detector.py, pure: events and now_ms in, probes and
verdicts out) and its probe (replication.probe_listener) against real sockets and a real stopped process: only
two refused connects CONFIRM_MS apart make a crash; a reachable or unknown outcome never does; probing is
bounded (one sequence per peer, backoff for a quiet peer, a hold on a session removed that came back)."""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys

import trio

from coordinator.cluster.crash_detector import (
    BACKOFF_MS,
    CONFIRM_MS,
    GAP_MS,
    HOLD_MS,
    MAX_BACKOFF_MS,
    REACHABLE,
    REFUSED,
    UNKNOWN,
    CrashDetector,
    Crashed,
)
from coordinator.runtime.replication import probe_listener

OWNER, OTHER = 0x1001, 0x2002


def detector(**owners: int) -> CrashDetector:
    d = CrashDetector()
    d.retain({2: OWNER, 3: OTHER} if not owners else {int(k[1:]): v for k, v in owners.items()}, 0)
    return d


def test_two_refused_connects_confirmation_apart_are_a_crash_once() -> None:
    d = detector()
    assert d.suspect(2, OWNER, "replica fetch connection reset", 1000)
    assert not d.suspect(2, OWNER, "replica fetch connect failed", 1001)  # one sequence at a time
    assert d.probed(2, OWNER, REFUSED, 1002) == CONFIRM_MS
    verdict = d.probed(2, OWNER, REFUSED, 1002 + CONFIRM_MS)
    assert isinstance(verdict, Crashed)
    assert (verdict.node_id, verdict.owner) == (2, OWNER)
    assert "replica fetch connection reset" in verdict.observed and "2 connects refused" in verdict.observed
    assert d.probed(2, OWNER, REFUSED, 2000) is None  # the sequence is over: no second verdict
    d.done(2, OWNER, 2000)


def test_a_confirmation_that_comes_too_early_is_asked_again() -> None:
    d = detector()
    assert d.suspect(2, OWNER, "x", 0)
    assert d.probed(2, OWNER, REFUSED, 0) == CONFIRM_MS
    assert d.probed(2, OWNER, REFUSED, 100) == CONFIRM_MS - 100
    assert isinstance(d.probed(2, OWNER, REFUSED, CONFIRM_MS), Crashed)


def test_reachable_or_unknown_is_never_a_crash() -> None:
    for between in (REACHABLE, UNKNOWN):
        d = detector()
        assert d.suspect(2, OWNER, "x", 0)
        assert d.probed(2, OWNER, REFUSED, 0) == CONFIRM_MS
        assert d.probed(2, OWNER, between, CONFIRM_MS) is None  # e.g. a stopped process's backlog accepted it
        # a new sequence starts over: one refusal is not enough
        assert not d.suspect(2, OWNER, "x", CONFIRM_MS + 1)  # GAP_MS after the last sequence
        assert d.suspect(2, OWNER, "x", CONFIRM_MS + GAP_MS)
        assert d.probed(2, OWNER, REFUSED, CONFIRM_MS + GAP_MS) == CONFIRM_MS
    d = detector()
    for t in range(0, 60_000, GAP_MS):  # a partitioned peer: connects time out forever
        if d.suspect(2, OWNER, "x", t):
            assert d.probed(2, OWNER, UNKNOWN, t) is None


def test_a_stopped_peers_quiet_suspicions_back_off() -> None:
    d = detector()
    probes = []
    for t in range(0, 600_000, 250):  # ten minutes of an ISR check every 250 ms finding it quiet
        if d.suspect(2, OWNER, "in-sync follower quiet", t, broken=False):
            probes.append(t)
            assert d.probed(2, OWNER, REACHABLE, t) is None
    gaps = [b - a for a, b in itertools.pairwise(probes)]
    assert gaps[0] == BACKOFF_MS and gaps[1] == 2 * BACKOFF_MS
    assert max(gaps) == MAX_BACKOFF_MS
    assert len(probes) < 30  # not one per check (2,400 checks)


def test_evidence_belongs_to_one_registration() -> None:
    d = detector()
    assert d.suspect(2, OWNER, "x", 0)
    assert d.probed(2, OWNER, REFUSED, 0) == CONFIRM_MS
    d.retain({2: 0x3003}, 10)  # node 2 registered again by another session: a new process
    assert d.probed(2, OWNER, REFUSED, CONFIRM_MS) is None
    assert not d.suspect(2, OWNER, "x", 20)  # the old session is no one's now
    assert d.suspect(2, 0x3003, "x", 20)
    d.retain({}, 30)  # not registered any more: forgotten
    assert not d.suspect(2, 0x3003, "x", 40)


def test_a_session_removed_that_registers_again_is_held() -> None:
    d = detector()
    assert d.suspect(2, OWNER, "x", 0)
    d.probed(2, OWNER, REFUSED, 0)
    assert isinstance(d.probed(2, OWNER, REFUSED, CONFIRM_MS), Crashed)
    d.removed(2, OWNER, CONFIRM_MS)
    d.retain({}, 200)
    d.retain({2: OWNER}, 300)  # the same session came back: it was alive (a false positive)
    assert not d.suspect(2, OWNER, "x", 1000)
    assert not d.suspect(2, OWNER, "x", CONFIRM_MS + HOLD_MS - 1)
    assert d.suspect(2, OWNER, "x", CONFIRM_MS + HOLD_MS)
    d.probed(2, OWNER, REFUSED, 20_000)
    assert isinstance(d.probed(2, OWNER, REFUSED, 20_000 + CONFIRM_MS), Crashed)
    d.removed(2, OWNER, 20_200)  # again, within its hold's reach: twice as long
    assert not d.suspect(2, OWNER, "x", 20_200 + HOLD_MS)
    assert d.suspect(2, OWNER, "x", 20_200 + 2 * HOLD_MS)
    # a restarted node (a new session) is not held
    d2 = detector()
    d2.removed(2, OWNER, 0)
    d2.retain({2: OTHER}, 10)
    assert d2.suspect(2, OTHER, "x", 20)


def test_done_ends_an_open_sequence() -> None:
    d = detector()
    assert d.suspect(3, OTHER, "x", 0)
    d.probed(3, OTHER, REFUSED, 0)
    d.done(3, OTHER, 50)  # the probing task was cancelled before its confirmation
    assert d.probed(3, OTHER, REFUSED, 200) is None
    assert d.suspect(3, OTHER, "x", 50 + GAP_MS)


async def test_probe_refused_reachable_and_a_stopped_process() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]  # bound, not listening: connects are refused
        assert await probe_listener("127.0.0.1", closed_port, 1.0) == REFUSED
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        assert await probe_listener("127.0.0.1", s.getsockname()[1], 1.0) == REACHABLE
    child = subprocess.Popen([sys.executable, "-c", (
        "import socket, time\ns = socket.socket()\ns.bind(('127.0.0.1', 0))\ns.listen(8)\n"
        "print(s.getsockname()[1], flush=True)\ntime.sleep(60)")], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        os.kill(child.pid, signal.SIGSTOP)  # a stopped process: its kernel still completes connects
        assert await probe_listener("127.0.0.1", port, 1.0) == REACHABLE
        child.kill()
        child.wait(10)
        assert await probe_listener("127.0.0.1", port, 1.0) == REFUSED  # gone: nothing listens
    finally:
        child.kill()
        child.wait(10)
    with trio.fail_after(5):
        assert await probe_listener("no-such-host.invalid", 1, 1.0) == UNKNOWN
