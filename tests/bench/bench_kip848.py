"""Benchmark of issue #36: KIP-848 consumer groups against classic groups, on the real server and the pure core.

Run from the repository root:  .venv/bin/python -m tests.bench.bench_kip848 [--members 1000,10000] [--quick]
(``make bench ARGS=kip848``). Figures, each printed with its target (a table at the end):
1. Join: N members (``--members``, default 1000) subscribe to ``--partitions-per-member`` x N partitions: one
   topic, or as many topics as the server's cap of MAX_TOPIC_PARTITIONS (10,000) partitions per topic needs
   (2 of 10,000 at 10,000 members). Every member's first ConsumerGroupHeartbeat v1 goes out back to back; the
   clock runs from just before the LAST member's first heartbeat to the response after which every member is
   stable on its full assignment (all members at one epoch and their partitions covering the topics exactly
   once). Members are
   simulated over ``--connections`` connections (requests pipelined, one in flight per member) as a client
   does it: a member whose assignment changed (revoke, or new partitions) heartbeats again at once with the
   partitions it owns; any other heartbeats again after ``--idle-ms`` (default max(100, N / 5) ms: a short
   heartbeat interval, else it dominates). Beside it the classic rebalance of as many members (one
   connection each, bench_coordinator_members): last JoinGroup -> last SyncGroup, with every JoinGroup back
   to back (the same shape) and with the others settled first (bench_coordinator's figure). Target at
   10,000 members: <= 0.5 x classic (the ratio is printed for every N).
2. One member joining the stable 1,000-member group: members that had to revoke anything (got an assignment
   with a partition removed) against the minimum the uniform assignor needs (the pure core's sticky
   result on the same group, and the least any balanced assignment needs), and the others never stop
   consuming: no other member's assignment changes at all, and no revoking member loses all its partitions.
3. ConsumerGroupHeartbeat/s against classic Heartbeat/s from 1,000 connections (one member each, steady
   heartbeats pipelined ``--inflight`` deep, closed loop; bench_coordinator_blast; each KIP-848 member's with
   the client id it joined with, as a client's), rounds alternating
   classic first and last (C K C K C) on the same server: each KIP-848 round over the mean of the classic
   rounds around it, the median of those. Target >= 0.8.
4. The uniform assignor on the pure core: 10,000 members x 100,000 partitions (100 topics x 1,000), fresh
   (target <= 500 ms), and a one-member change fed the previous result (a member joins; a member leaves:
   target <= 50 ms each). Best of 3, assign() only; coverage is checked so a broken assignor cannot post a
   good time.
Rules: the server is a subprocess on a free port (``--port 0``), stopped by its PID; the load is this process.
Its ``max.connections`` is raised above the default 10,000: the classic members of the first size stay connected
(one connection each) while the KIP-848 group and figure 3 connect; those of a later size leave (one LeaveGroup)
and disconnect before its KIP-848 group comes. Every connection and partition log is a file descriptor of the
server (``ulimit -n``): 10,000 members with 2 partitions each need more than 20,000, so on such a machine run
``--members 1000,10000 --partitions-per-member 1``. Its ``max.inflight.requests.per.connection`` (read-ahead,
100 by default) is raised to N / ``--connections`` + 1: each simulated member has at most one request in flight,
as it would on a connection of its own, so 8 connections must carry N / 8 of them (at 100, the server read at
most 800 of the storm at a time). A connection the server closes fails the run (BenchError),
never a wait on a dead socket.
A figure is printed only for a run that worked (any unexpected error code raises). Asserts nothing about
wall-clock time; the machine is shared (2 cores: the server and this load generator compete).
"""

from __future__ import annotations

import argparse
import base64
import heapq
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from coordinator.core.consumer_group.assignors import MemberSpec, uniform
from coordinator.core.consumer_group.heartbeat import TargetJob
from coordinator.runtime.consumer_assignment import AssignmentWorker
from coordinator.runtime.topics import topic_id
from protocol import codec
from protocol.framing import FrameReader
from tests.bench.bench_coordinator import Daemon, groupcoord
from tests.bench.bench_coordinator_blast import closed_loop, connect_all, process_cpu
from tests.bench.bench_coordinator_members import Member, form_group, leave_all, make_members, time_rebalance

CGH, CGH_V = 68, 1
HEARTBEAT, HEARTBEAT_V = 12, 4
CREATE_TOPICS, CREATE_TOPICS_V = 19, 5
HEARTBEAT_ERR_FROM_END = 3  # Heartbeat v4 response: error_code int16, empty tagged fields
# ConsumerGroupHeartbeat v1 response of a steady heartbeat (22-character member id, no message, no
# assignment): error_code, message (1), member id (23), epoch (4), interval (4), assignment (1), tags (1)
CGH_ERR_FROM_END = 2 + 1 + 23 + 4 + 4 + 1 + 1
REBALANCE_TIMEOUT_MS = 300_000
COMMAND = ".venv/bin/python -m tests.bench.bench_kip848"
MAX_TOPIC_PARTITIONS = 10_000  # the server's cap per CreateTopics topic (runtime/topics.py)

TP = tuple[uuid.UUID, int]


class BenchError(RuntimeError):
    pass


def member_id(i: int, salt: str) -> str:
    """A client-made member id, 22 characters as Java's Uuid.toString()."""
    return base64.urlsafe_b64encode(uuid.uuid5(uuid.NAMESPACE_OID, f"{salt}-{i}").bytes).rstrip(b"=").decode()


# ---------------------------------------------------------------- simulated KIP-848 members
@dataclass(eq=False)
class Sim:
    mid: str
    conn: Conn
    epoch: int = 0
    owned: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    report: bool = True  # the next heartbeat carries the owned partitions
    joined: bool = False
    leaving: bool = False
    revoked: int = 0  # responses that removed a partition
    changed: int = 0  # responses that changed the assignment at all
    emptied: bool = False  # a response removed every partition it held
    inflight: bool = False

    def size(self) -> int:
        return sum(len(p) for p in self.owned.values())


class Conn:
    """One pipelined connection: frames out in order, responses matched to their members in order."""

    def __init__(self, sock: Any, client_id: str) -> None:
        self.sock = sock
        self.client_id = client_id
        self.reader = FrameReader()
        self.corr = 0
        self.pending: deque[tuple[int, Any]] = deque()
        self.out = bytearray()
        self.wake = trio.Event()

    def send(self, api: int, version: int, body: dict[str, Any], who: Any) -> None:
        self.corr += 1
        self.out += codec.encode_request(api, version, self.corr, self.client_id, body)
        self.pending.append((self.corr, who))
        self.wake.set()

    async def writer(self) -> None:
        while True:
            await self.wake.wait()
            self.wake = trio.Event()
            while self.out:
                data, self.out = bytes(self.out), bytearray()
                view = memoryview(data)
                while view:
                    n = await self.sock.send(view)
                    view = view[n:]

    async def responses(self, api: int, version: int, handle: Callable[[Any, dict[str, Any]], None]) -> None:
        while True:
            data = await self.sock.recv(1 << 20)
            if not data:
                raise BenchError("the server closed a connection")
            self.reader.feed(data)
            while (payload := self.reader.next_frame()) is not None:
                corr, body = codec.decode_response(api, version, payload)
                want, who = self.pending.popleft()
                if corr != want:
                    raise BenchError(f"correlation id {corr}, expected {want}")
                handle(who, body)


class Group848:
    """The members of one consumer group and the loop that drives them (see the module doc, figure 1)."""

    def __init__(self, group_id: str, topics: list[str], partitions: int, conns: list[Conn], idle_s: float) -> None:
        self.group_id, self.topics, self.partitions = group_id, topics, partitions
        self.conns = conns
        self.idle_s = idle_s
        self.members: list[Sim] = []
        self.due: list[tuple[float, int, Sim]] = []
        self.seq = 0
        self.kick = trio.Event()
        self.last_change = 0.0
        self.heartbeats = 0
        self.stopped = False

    def add(self, n: int, salt: str) -> list[Sim]:
        start = len(self.members)
        new = [Sim(member_id(start + i, salt), self.conns[(start + i) % len(self.conns)]) for i in range(n)]
        self.members.extend(new)
        return new

    def body(self, m: Sim) -> dict[str, Any]:
        first = not m.joined
        epoch = -1 if m.leaving else m.epoch
        return {"group_id": self.group_id, "member_id": m.mid, "member_epoch": epoch, "instance_id": None,
                "rack_id": None, "rebalance_timeout_ms": REBALANCE_TIMEOUT_MS if first else -1,
                "subscribed_topic_names": list(self.topics) if first else None, "subscribed_topic_regex": None,
                "server_assignor": None,
                "topic_partitions": [{"topic_id": t, "partitions": sorted(p)} for t, p in m.owned.items()]
                if m.report or first else None}

    def send(self, m: Sim) -> None:
        m.conn.send(CGH, CGH_V, self.body(m), m)
        m.inflight, m.report = True, False
        m.joined = True
        self.heartbeats += 1

    def schedule(self, m: Sim, delay: float) -> None:
        self.seq += 1
        heapq.heappush(self.due, (time.perf_counter() + delay, self.seq, m))
        self.kick.set()

    def handle(self, m: Sim, r: dict[str, Any]) -> None:
        m.inflight = False
        if r["error_code"]:
            raise BenchError(f"member {m.mid}: ConsumerGroupHeartbeat error {r['error_code']} {r['error_message']}")
        if m.leaving:
            return
        changed = r["member_epoch"] != m.epoch
        m.epoch = r["member_epoch"]
        a = r["assignment"]
        now_owned = m.owned
        if a is not None:
            now_owned = {t["topic_id"]: frozenset(t["partitions"]) for t in a["topic_partitions"] if t["partitions"]}
        if now_owned != m.owned:
            if any(p - now_owned.get(t, frozenset()) for t, p in m.owned.items()):
                m.revoked += 1
                m.emptied = m.emptied or not now_owned
            m.changed += 1
            m.owned, m.report, changed = now_owned, True, True
        if changed:
            self.last_change = time.perf_counter()
        if not self.stopped:
            self.schedule(m, 0.0 if m.report else self.idle_s)

    async def pump(self) -> None:
        while True:
            now = time.perf_counter()
            while self.due and self.due[0][0] <= now:
                _, _, m = heapq.heappop(self.due)
                if not m.inflight and not self.stopped and not m.leaving:
                    self.send(m)
            self.kick = trio.Event()
            wait = self.due[0][0] - now if self.due else 1.0
            with trio.move_on_after(max(wait, 0.0005)):
                await self.kick.wait()

    def stable(self, members: list[Sim]) -> bool:
        epochs = {m.epoch for m in members}
        if len(epochs) != 1 or any(m.inflight and m.report for m in members):
            return False
        held = [(t, p) for m in members for t, ps in m.owned.items() for p in ps]
        return len(held) == self.partitions and len(set(held)) == self.partitions

    async def until_stable(self, members: list[Sim], timeout_s: float) -> float:
        """Waits until every member is stable on its full assignment; returns the time of the response after
        which it was."""
        with trio.fail_after(timeout_s):
            while not self.stable(members):
                await trio.sleep(0.005)
        return self.last_change


async def create_topic(port: int, name: str, partitions: int) -> None:
    s = trio.socket.socket()
    await s.connect(("127.0.0.1", port))
    with s:
        body = {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
                            "configs": []}], "timeout_ms": 30000, "validate_only": False}
        frame = codec.encode_request(CREATE_TOPICS, CREATE_TOPICS_V, 1, "bench", body)
        await s.send(frame)
        reader = FrameReader()
        while (payload := reader.next_frame()) is None:
            try:
                data = await s.recv(65536)
            except OSError as e:  # reset: refused with our request unread
                raise BenchError(f"CreateTopics {name}: the server closed the connection ({e})") from e
            if not data:  # refused (max.connections) or closed: never spin on a dead socket
                raise BenchError(f"CreateTopics {name}: the server closed the connection")
            reader.feed(data)
        _, r = codec.decode_response(CREATE_TOPICS, CREATE_TOPICS_V, payload)
    if r["topics"][0]["error_code"]:
        raise BenchError(f"CreateTopics {name}: {r['topics'][0]}")


async def open_conns(port: int, n: int, tag: str) -> list[Conn]:
    conns = []
    for i in range(n):
        s = trio.socket.socket()
        await s.connect(("127.0.0.1", port))
        s.setsockopt(trio.socket.IPPROTO_TCP, trio.socket.TCP_NODELAY, 1)
        conns.append(Conn(s, f"bench-{tag}-{i}"))
    return conns


async def keep_classic_alive(members: list[Member], every_s: float) -> None:
    """Classic members idle during the KIP-848 parts: one heartbeat each every ``every_s``."""
    while True:
        await trio.sleep(every_s)
        for m in members:
            h = await m.call(HEARTBEAT, HEARTBEAT_V, m.heartbeat_body())
            if h["error_code"]:
                raise BenchError(f"classic keep-alive heartbeat: error {h['error_code']}")


# ---------------------------------------------------------------- figures 1-2 on the server
async def join_figures(a: argparse.Namespace, port: int, n: int, one_more: bool, out: dict[str, Any],
                       nursery: trio.Nursery) -> Group848 | None:
    partitions = n * a.partitions_per_member
    counts = topic_counts(partitions)
    topics = [f"kip848-{n}" if len(counts) == 1 else f"kip848-{n}-{i}" for i in range(len(counts))]
    for topic, count in zip(topics, counts):
        await create_topic(port, topic, count)
    conns = await open_conns(port, a.connections, f"k{n}")
    idle_s = (a.idle_ms if a.idle_ms else max(100.0, n / 5)) / 1000
    g = Group848(f"bench-kip848-{n}", topics, partitions, conns, idle_s)
    for c in conns:
        nursery.start_soon(c.writer)
        nursery.start_soon(c.responses, CGH, CGH_V, g.handle)
    nursery.start_soon(g.pump)
    members = g.add(n, f"m{n}")
    for m in members[:-1]:
        g.send(m)
    t0, cpu0 = time.perf_counter(), time.process_time()
    g.send(members[-1])
    end = await g.until_stable(members, a.timeout)
    hb = g.heartbeats
    res = {"members": n, "partitions": partitions, "join_s": end - t0, "heartbeats": hb, "idle_ms": idle_s * 1000,
           "client_cpu_s": time.process_time() - cpu0, "epoch": members[0].epoch}
    say(f"{n} KIP-848 members: every member stable in {res['join_s'] * 1000:.0f} ms after the last one's first "
        f"heartbeat ({hb:,} heartbeats, group epoch {members[0].epoch})")
    out[f"join{n}"] = res
    if not one_more:
        g.stopped = True
        return None
    # figure 2: one member joins the stable group
    before = {m.mid: dict(m.owned) for m in members}
    for m in members:
        m.revoked = m.changed = 0
    (joiner,) = g.add(1, f"j{n}")
    t0 = time.perf_counter()
    g.send(joiner)
    end = await g.until_stable(g.members, a.timeout)
    revokers = [m for m in members if m.revoked]
    others_changed = [m for m in members if m.changed and not m.revoked]
    emptied = [m for m in members if m.emptied]
    sizes = {topic_id(name): c for name, c in zip(topics, counts)}
    subscription = frozenset(sizes)
    specs = {m.mid: MemberSpec(subscription, before[m.mid]) for m in members}
    specs[joiner.mid] = MemberSpec(subscription)
    targets = uniform(specs, sizes)

    def total(owned: dict[uuid.UUID, Any]) -> int:
        return sum(len(ps) for ps in owned.values())

    core_donors = sum(1 for m in members if total(targets[m.mid]) < total(before[m.mid]))
    out["one_more"] = {"members": n, "join_s": end - t0, "revokers": len(revokers), "core_donors": core_donors,
                       "least": least_donors([total(before[m.mid]) for m in members], partitions),
                       "others_changed": len(others_changed), "emptied": len(emptied),
                       "joiner_got": joiner.size()}
    say(f"one member joining {n}: {len(revokers)} members revoked, the pure core's assignor needs {core_donors}, "
        f"{len(others_changed)} others changed, stable in {(end - t0) * 1000:.0f} ms")
    # the joiner leaves again, so that the group is the 1,000 steady members of figure 3
    joiner.leaving = True
    g.send(joiner)
    g.members.remove(joiner)
    with trio.fail_after(a.timeout):  # its leave answered: the epoch it bumped is the server's
        while joiner.inflight:
            await trio.sleep(0.005)
    # every member heartbeats within idle_s: only then is "all at one epoch" the epoch after the leave (else the
    # members, still at the one before, look stable and figure 3's steady heartbeats carry a stale epoch)
    await trio.sleep(0.05 + idle_s)
    await g.until_stable(g.members, a.timeout)
    g.stopped = True
    await trio.sleep(0.2 + idle_s)  # every heartbeat answered
    if any(m.inflight for m in g.members):
        raise BenchError("heartbeats still unanswered after the driver stopped")
    return g


def topic_counts(partitions: int) -> list[int]:
    """The partitions spread over as few topics as the server's per-topic cap allows, as evenly as can be."""
    k = -(-partitions // MAX_TOPIC_PARTITIONS)
    base, extra = divmod(partitions, k)
    return [base + (1 if i < extra else 0) for i in range(k)]


def least_donors(counts: list[int], partitions: int) -> int:
    """The fewest members that must give up a partition for a newcomer when the result must stay balanced
    (sizes floor or floor + 1 of P / (N + 1), ``extra`` of them at floor + 1): every member above floor + 1
    must give; the ceiling slots go first to those holding exactly floor + 1 (they then give nothing), and
    the members at floor + 1 left without a slot give one each."""
    floor, extra = divmod(partitions, len(counts) + 1)
    above = sum(1 for c in counts if c > floor + 1)
    at_ceiling = sum(1 for c in counts if c == floor + 1)
    return above + max(0, at_ceiling - extra)


# ---------------------------------------------------------------- figure 3: heartbeat throughput
def steady_frame(group_id: str, m: Sim) -> bytes:
    """A stable member's heartbeat: its id and epoch, every other field null, and the client id it joined with
    (a client's id does not change: another one would be a MemberMetadata write per member)."""
    body = {"group_id": group_id, "member_id": m.mid, "member_epoch": m.epoch, "instance_id": None, "rack_id": None,
            "rebalance_timeout_ms": -1, "subscribed_topic_names": None, "subscribed_topic_regex": None,
            "server_assignor": None, "topic_partitions": None}
    return codec.encode_request(CGH, CGH_V, 1, m.conn.client_id, body)


def heartbeat_rounds(a: argparse.Namespace, server_pid: int, classic: list[Member], group: Group848,
                     port: int) -> dict[str, Any]:
    sims = group.members[:len(classic)]
    ksocks = connect_all(port, len(sims))
    kmakers = [(lambda f: lambda k: f * k)(steady_frame(group.group_id, m)) for m in sims]
    cmakers = [(lambda f: lambda k: f * k)(m.heartbeat_frame()) for m in classic]
    csocks = [m.sock for m in classic]
    probes = {"server": process_cpu(server_pid), "loadgen": process_cpu()}
    runs: dict[str, list[float]] = {"classic": [], "kip848": []}
    for r in range(2 * a.hb_rounds + 1):
        name = "classic" if r % 2 == 0 else "kip848"
        socks, makers, err = (csocks, cmakers, HEARTBEAT_ERR_FROM_END) if name == "classic" else \
            (ksocks, kmakers, CGH_ERR_FROM_END)
        res = closed_loop(socks, makers, inflight=a.inflight, warmup_s=a.warmup, measure_s=a.measure,
                          err_from_end=err, probes=probes)
        if res.errors:
            raise BenchError(f"{name} heartbeats: {res.errors} errors (first {res.first_error})")
        runs[name].append(res.requests_per_s)
        say(f"round {r + 1}: {name} {res.requests_per_s:,.0f}/s, server CPU {res.cpu.get('server', 0):.0%}")
    for s in ksocks:
        s.close()
    c, k = runs["classic"], runs["kip848"]
    ratios = [x / ((c[i] + c[i + 1]) / 2) for i, x in enumerate(k)]
    return {"classic": statistics.median(c), "kip848": statistics.median(k), "ratios": ratios,
            "ratio": statistics.median(ratios), "connections": len(sims)}


# ---------------------------------------------------------------- figure 4: the pure assignor
def assignor_figures(a: argparse.Namespace) -> dict[str, Any]:
    n, topics, per_topic = a.assignor_members, 100, a.assignor_partitions // 100
    tids = [uuid.uuid5(uuid.NAMESPACE_OID, f"topic-{i}") for i in range(topics)]
    parts = {t: per_topic for t in tids}
    total = topics * per_topic
    sub = frozenset(tids)
    mids = [member_id(i, "assignor") for i in range(n)]

    def check(result: dict[str, Any], members: int) -> None:
        held = [(t, p) for asg in result.values() for t, ps in asg.items() for p in ps]
        sizes = [sum(len(ps) for ps in asg.values()) for asg in result.values()]
        if len(held) != total or len(set(held)) != total or max(sizes) - min(sizes) > 1 or len(result) != members:
            raise BenchError("the uniform assignor's result is wrong")

    fresh_specs = {m: MemberSpec(sub) for m in mids}
    first = uniform(fresh_specs, parts)
    check(first, n)
    fresh = best_of(a.reps, lambda: uniform(fresh_specs, parts))
    sticky = {m: MemberSpec(sub, first[m]) for m in mids}
    joined = dict(sticky)
    joined[member_id(n, "assignor")] = MemberSpec(sub)
    check(uniform(joined, parts), n + 1)
    join = best_of(a.reps, lambda: uniform(joined, parts))
    left = dict(sticky)
    del left[mids[0]]
    check(uniform(left, parts), n - 1)
    leave = best_of(a.reps, lambda: uniform(left, parts))
    stall = {mode: loop_stall(fresh_specs, parts, mode) for mode in ("inline", "worker")}
    return {"members": n, "partitions": total, "fresh_ms": fresh * 1000, "join_ms": join * 1000,
            "leave_ms": leave * 1000, "stall_inline_ms": stall["inline"] * 1000,
            "stall_worker_ms": stall["worker"] * 1000}


def loop_stall(specs: dict[str, MemberSpec], parts: dict[uuid.UUID, int], mode: str) -> float:
    """The event loop's longest gap between 1 ms ticks while one fresh target is computed: on the loop itself
    (``inline``) or by the server's worker (runtime/consumer_assignment.py, ``worker``)."""

    async def run() -> float:
        worker = AssignmentWorker(0)
        job = TargetJob("bench", 1, 0, {m: {} for m in specs}, set(), specs, parts, uniform, lambda fn: fn())
        done = trio.Event()
        gaps: list[float] = []

        async def ticker() -> None:
            last = time.perf_counter()
            while not done.is_set():
                await trio.sleep(0.001)
                now = time.perf_counter()
                gaps.append(now - last - 0.001)
                last = now

        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            nursery.start_soon(ticker)
            await trio.sleep(0.05)
            gaps.clear()
            if mode == "inline":
                job.run()
                done.set()
            else:
                worker.submit(job, lambda targets, err: done.set())
            await done.wait()
            await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        return max(gaps)

    return min(trio.run(run) for _ in range(2))


def best_of(n: int, fn: Callable[[], object]) -> float:
    best = math.inf
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


# ---------------------------------------------------------------- the run
def say(msg: str) -> None:
    print(f"  {msg}", flush=True)


async def server_part(a: argparse.Namespace, port: int, n: int, first: bool, out: dict[str, Any]) -> Any:
    """On one server: the classic group of ``n`` (formed, rebalances timed), then the KIP-848 group of ``n``
    (figure 1, and for the first size figure 2); returns the classic members and the steady KIP-848 group."""
    members = make_members(connect_all(port, n), f"bench-classic-{n}")
    t0 = time.perf_counter()
    await form_group(members, timeout_s=a.timeout)
    say(f"classic group of {n} formed in {time.perf_counter() - t0:.1f} s")
    settled = [(await time_rebalance(members, settle_s=0.1 + n * 0.0005))[0] for _ in range(a.reps)]
    burst = [(await time_rebalance(members, settle_s=0))[0] for _ in range(a.reps)]
    out[f"classic{n}"] = {"members": n, "settled_s": statistics.median(settled), "burst_s": statistics.median(burst)}
    say(f"classic {n}: last Join -> last Sync {statistics.median(burst) * 1000:.0f} ms back to back, "
        f"{statistics.median(settled) * 1000:.0f} ms settled")
    if not first:  # figure 3 does not need them: their connections and sessions go before the KIP-848 group comes
        await leave_all(members)
        for m in members:
            m.sock.close()
        members = []
    async with trio.open_nursery() as nursery:
        if members:
            nursery.start_soon(keep_classic_alive, members, 10.0)
        group = await join_figures(a, port, n, first, out, nursery)
        nursery.cancel_scope.cancel()
    return members, group


def row(name: str, value: str, target: str, ok: bool | None) -> str:
    verdict = "" if ok is None else ("PASS" if ok else "MISS")
    return f"| {name:<62} | {value:>18} | {target:<30} | {verdict:<4} |"


def report(out: dict[str, Any], sizes: list[int], command: str) -> None:
    rows = []
    for n in sizes:
        j, c = out.get(f"join{n}"), out.get(f"classic{n}")
        if not j or not c:
            continue
        ratio = j["join_s"] / c["burst_s"]
        target = "<= 0.5 x classic" + ("" if n >= 10000 else " (at 10,000)")
        rows.append(row(f"{n:,} members join: last one's first hb -> all stable", f"{j['join_s'] * 1000:,.0f} ms",
                        target, ratio <= 0.5 if n >= 10000 else None))
        rows.append(row(f"  classic {n:,}: last Join -> last Sync, back to back / settled",
                        f"{c['burst_s'] * 1000:,.0f} / {c['settled_s'] * 1000:,.0f} ms", f"ratio {ratio:.2f}",
                        None))
        rows.append(row(f"  {j['partitions']:,} partitions; {j['heartbeats']:,} heartbeats; idle hb every",
                        f"{j['idle_ms']:.0f} ms", f"load gen CPU {j['client_cpu_s']:.1f} s", None))
    o = out.get("one_more")
    if o:
        ok = o["revokers"] <= o["core_donors"] and o["revokers"] <= max(o["least"], o["core_donors"])
        rows.append(row(f"one member joins {o['members']:,}: members that revoked", f"{o['revokers']}",
                        f"= assignor's {o['core_donors']} (least {o['least']})", ok and o["revokers"] == o["least"]))
        rows.append(row("  others whose assignment changed / revokers left with nothing",
                        f"{o['others_changed']} / {o['emptied']}", "0 / 0 (never stop consuming)",
                        o["others_changed"] == 0 and o["emptied"] == 0))
        rows.append(row("  the newcomer's partitions; all stable after", f"{o['joiner_got']}",
                        f"{o['join_s'] * 1000:,.0f} ms", None))
    h = out.get("heartbeats")
    if h:
        rows.append(row(f"ConsumerGroupHeartbeat/s vs classic, {h['connections']:,} conns (median)",
                        f"{h['kip848']:,.0f}/s", ">= 0.8 x classic", h["ratio"] >= 0.8))
        rows.append(row("  classic Heartbeat/s; each round's ratio", f"{h['classic']:,.0f}/s",
                        " ".join(f"{r:.2f}" for r in h["ratios"]), None))
    u = out.get("assignor")
    if u:
        rows.append(row(f"uniform assignor {u['members']:,} x {u['partitions']:,}, fresh",
                        f"{u['fresh_ms']:,.0f} ms", "<= 500 ms", u["fresh_ms"] <= 500))
        rows.append(row("  one member joins / one leaves (sticky)", f"{u['join_ms']:,.0f} / {u['leave_ms']:,.0f} ms",
                        "<= 50 ms", max(u["join_ms"], u["leave_ms"]) <= 50))
        rows.append(row("  the event loop's longest stall meanwhile: on a worker", f"{u['stall_worker_ms']:,.1f} ms",
                        f"never long (inline: {u['stall_inline_ms']:,.0f} ms)",
                        u["stall_worker_ms"] <= 10))
    line = "+" + "-" * 64 + "+" + "-" * 20 + "+" + "-" * 32 + "+" + "-" * 6 + "+"
    print("\n" + line)
    print(row("figure", "measured", "target", None).replace("|      |", "| ok   |"))
    print(line)
    for r in rows:
        print(r)
    print(line)
    print("command:", command)


def server_run(a: argparse.Namespace, n: int, first: bool, out: dict[str, Any]) -> None:
    work = tempfile.mkdtemp(prefix="bench-kip848-")
    server: Daemon = groupcoord(os.path.join(work, "data"), "--group-initial-rebalance-delay-ms", "0",
                                "--group-consumer-max-size", str(n + 10), "--group-max-size", str(n + 10),
                                "--max-connections", str(2 * n + 2000),
                                "--max-inflight-requests-per-connection",
                                str(max(100, -(-n // a.connections) + 1))).start()
    try:
        server.wait_for("loaded 50 offsets partitions", 60)
        classic, group = trio.run(server_part, a, server.port, n, first, out)
        if group is not None:
            print("\n[heartbeats] rounds alternating classic and KIP-848", flush=True)
            out["heartbeats"] = heartbeat_rounds(a, server.pid, classic, group, server.port)
        for m in classic:
            m.sock.close()
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--members", default="1000", help="comma list of group sizes for figure 1 (e.g. 1000,10000);"
                   " the first also runs figures 2 and 3")
    p.add_argument("--partitions-per-member", type=int, default=2)
    p.add_argument("--connections", type=int, default=8, help="connections the KIP-848 members share")
    p.add_argument("--idle-ms", type=float, default=0.0, help="a member with nothing to do heartbeats again after"
                   " this (0: max(100, N / 5))")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--hb-rounds", type=int, default=2, help="KIP-848 heartbeat rounds (classic: one more)")
    p.add_argument("--inflight", type=int, default=8)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--measure", type=float, default=3.0)
    p.add_argument("--assignor-members", type=int, default=10000)
    p.add_argument("--assignor-partitions", type=int, default=100000)
    p.add_argument("--timeout", type=float, default=600.0, help="bound of each wait for a group to settle")
    p.add_argument("--only", default="server,assignor", help="comma list of server,assignor")
    p.add_argument("--quick", action="store_true", help="smaller and shorter (a smoke run, not the figures)")
    argv = sys.argv[1:] if argv is None else argv
    a = p.parse_args(argv)
    if a.quick:
        a.members, a.reps, a.hb_rounds, a.measure, a.warmup = "200", 1, 1, 1.0, 0.5
        a.assignor_members, a.assignor_partitions = 1000, 10000
    sizes = [int(x) for x in a.members.split(",")]
    command = " ".join([COMMAND, *argv])
    print("command:", command)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; python {sys.version.split()[0]}")
    out: dict[str, Any] = {}
    t0 = time.monotonic()
    parts = set(a.only.split(","))
    if "assignor" in parts:
        print("\n[assignor] the pure core's uniform assignor", flush=True)
        out["assignor"] = assignor_figures(a)
        u = out["assignor"]
        say(f"fresh {u['fresh_ms']:.0f} ms, a member joins {u['join_ms']:.0f} ms, one leaves {u['leave_ms']:.0f} ms")
    if "server" in parts:
        for n in sizes:
            print(f"\n[server] classic and KIP-848 groups of {n:,} members on a fresh groupcoord", flush=True)
            server_run(a, n, n == sizes[0], out)
    report(out, sizes, command)
    print(f"total {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
