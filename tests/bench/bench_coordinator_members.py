"""Consumer-group members for bench_coordinator's load generator: form a real group, time rebalances.

Rules:
- A ``Member`` is one TCP connection (a stdlib socket, so the epoll blaster can reuse it after trio is
  done) speaking JoinGroup v7, SyncGroup v5, Heartbeat v4 and LeaveGroup v4 through ``protocol.codec``.
  Requests on one member are strictly one at a time (send, then read its response).
- ``form_group`` runs a real client loop per member, all concurrently: JoinGroup with an empty member id ->
  MEMBER_ID_REQUIRED -> rejoin with the given id; the leader assigns every member it is told about;
  SyncGroup; then heartbeat every ``heartbeat_s`` and rejoin on REBALANCE_IN_PROGRESS. It returns once
  every member has synced the same, newest generation (then the group is Stable with all of them).
- ``time_rebalance`` starts a rebalance of a formed group (the leader rejoins; a follower's heartbeat
  answering REBALANCE_IN_PROGRESS proves the group is PreparingRebalance), has every other member rejoin,
  and times from just before sending the LAST JoinGroup (the one that completes the join phase) until the
  LAST SyncGroup response arrived. With ``settle_s`` > 0 it waits that long before the last JoinGroup so
  the server has processed the others (the usual shape: members rejoin spread over their poll loops); with
  0 all JoinGroups go out back to back and the figure includes the server's backlog of them.
- Any unexpected error code raises ``GroupError``: a figure is only reported for a rebalance that worked.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Any

import trio

from protocol import codec
from protocol.framing import FrameReader

JOIN, SYNC, HEARTBEAT, LEAVE = 11, 14, 12, 13
V_JOIN, V_SYNC, V_HEARTBEAT, V_LEAVE = 7, 5, 4, 4
NONE, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, MEMBER_ID_REQUIRED = 0, 25, 27, 79
SESSION_MS = 60_000
REBALANCE_MS = 60_000
# ConsumerProtocolSubscription v0 for topic "bench", no user data; and an assignment of 4 partitions
SUBSCRIPTION = struct.pack(">hih5si", 0, 1, 5, b"bench", -1)
ASSIGNMENT = struct.pack(">hih5si4ii", 0, 1, 5, b"bench", 4, 0, 1, 2, 3, -1)


class GroupError(RuntimeError):
    pass


@dataclass(eq=False)
class Member:
    sock: socket.socket
    group_id: str
    client_id: str
    member_id: str = ""
    generation: int = -1
    leader: str = ""
    synced: int | None = None
    synced_at: float = 0.0
    corr: int = 0
    reader: FrameReader = field(default_factory=FrameReader)
    tsock: Any = None

    def _trio(self) -> Any:
        if self.tsock is None:
            self.tsock = trio.socket.from_stdlib_socket(self.sock)
        return self.tsock

    async def send(self, api: int, version: int, body: dict[str, Any]) -> None:
        self.corr += 1
        frame = codec.encode_request(api, version, self.corr, self.client_id, body)
        s = self._trio()
        view = memoryview(frame)
        while view:
            n = await s.send(view)
            view = view[n:]

    async def recv(self, api: int, version: int) -> dict[str, Any]:
        s = self._trio()
        while (payload := self.reader.next_frame()) is None:
            data = await s.recv(65536)
            if not data:
                raise GroupError(f"server closed the connection of {self.client_id}")
            self.reader.feed(data)
        corr, body = codec.decode_response(api, version, payload)
        if corr != self.corr:
            raise GroupError(f"correlation id {corr}, expected {self.corr}")
        return body

    async def call(self, api: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        await self.send(api, version, body)
        return await self.recv(api, version)

    # ------------------------------------------------------------ request bodies
    def join_body(self) -> dict[str, Any]:
        return {"group_id": self.group_id, "session_timeout_ms": SESSION_MS, "rebalance_timeout_ms": REBALANCE_MS,
                "member_id": self.member_id, "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": SUBSCRIPTION}], "reason": None}

    def sync_body(self, assign_to: list[str]) -> dict[str, Any]:
        return {"group_id": self.group_id, "generation_id": self.generation, "member_id": self.member_id,
                "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
                "assignments": [{"member_id": m, "assignment": ASSIGNMENT} for m in assign_to]}

    def heartbeat_body(self) -> dict[str, Any]:
        return {"group_id": self.group_id, "generation_id": self.generation, "member_id": self.member_id,
                "group_instance_id": None}

    def heartbeat_frame(self) -> bytes:
        """A complete Heartbeat v4 frame for the current generation (for the blaster, fixed corr id)."""
        return codec.encode_request(HEARTBEAT, V_HEARTBEAT, 1, self.client_id, self.heartbeat_body())

    # ------------------------------------------------------------ protocol steps
    def on_join(self, r: dict[str, Any], expect_members: int | None = None) -> list[str]:
        """Take a successful JoinGroup response; returns whom to assign (non-empty for the leader only)."""
        if r["error_code"] != NONE:
            raise GroupError(f"JoinGroup of {self.member_id}: error {r['error_code']}")
        self.generation, self.leader = r["generation_id"], r["leader"]
        self.synced = None
        if self.leader != self.member_id:
            return []
        members = [m["member_id"] for m in r["members"]]
        if expect_members is not None and len(members) != expect_members:
            raise GroupError(f"leader got {len(members)} members, expected {expect_members}")
        return members


@dataclass
class _Formation:
    members: list[Member]
    heartbeat_s: float
    done: trio.Event = field(default_factory=trio.Event)
    newest: int = -1

    def complete(self) -> bool:
        gens = {m.synced for m in self.members}
        return len(gens) == 1 and None not in gens and gens.pop() == self.newest


async def _member_loop(m: Member, f: _Formation) -> None:
    while not f.done.is_set():
        r = await m.call(JOIN, V_JOIN, m.join_body())
        if r["error_code"] == MEMBER_ID_REQUIRED:
            m.member_id = r["member_id"]
            continue
        if r["error_code"] == REBALANCE_IN_PROGRESS:
            continue
        assign_to = m.on_join(r)
        f.newest = max(f.newest, m.generation)
        s = await m.call(SYNC, V_SYNC, m.sync_body(assign_to))
        if s["error_code"] == REBALANCE_IN_PROGRESS:
            continue
        if s["error_code"] != NONE:
            raise GroupError(f"SyncGroup of {m.member_id}: error {s['error_code']}")
        m.synced = m.generation
        while True:
            with trio.move_on_after(f.heartbeat_s):
                await f.done.wait()
            if f.done.is_set():
                return
            h = await m.call(HEARTBEAT, V_HEARTBEAT, m.heartbeat_body())
            if h["error_code"] == REBALANCE_IN_PROGRESS:
                m.synced = None
                break
            if h["error_code"] != NONE:
                raise GroupError(f"Heartbeat of {m.member_id}: error {h['error_code']}")


async def _watch(f: _Formation, timeout_s: float) -> None:
    with trio.fail_after(timeout_s):
        while not f.complete():
            await trio.sleep(0.01)
    f.done.set()


async def form_group(members: list[Member], *, heartbeat_s: float = 0.1, timeout_s: float = 60.0) -> int:
    """Make every member join, sync and stay; returns the final generation."""
    f = _Formation(members, heartbeat_s)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch, f, timeout_s)
        for m in members:
            nursery.start_soon(_member_loop, m, f)
    return f.newest


async def _rejoin_and_sync(m: Member, expect: int) -> None:
    assign_to = m.on_join(await m.recv(JOIN, V_JOIN), expect)
    s = await m.call(SYNC, V_SYNC, m.sync_body(assign_to))
    if s["error_code"] != NONE:
        raise GroupError(f"SyncGroup of {m.member_id}: error {s['error_code']}")
    m.synced, m.synced_at = m.generation, time.perf_counter()


async def time_rebalance(members: list[Member], *, settle_s: float) -> tuple[float, float]:
    """Seconds from sending the last JoinGroup to receiving the last SyncGroup response (see module doc),
    and the CPU seconds this (client) process used in that window."""
    leader = next(m for m in members if m.member_id == m.leader)
    followers = [m for m in members if m is not leader]
    old_generation = leader.generation
    await leader.send(JOIN, V_JOIN, leader.join_body())
    probe = followers[0]
    with trio.fail_after(10):
        while (h := await probe.call(HEARTBEAT, V_HEARTBEAT, probe.heartbeat_body()))["error_code"] == NONE:
            await trio.sleep(0.001)
    if h["error_code"] != REBALANCE_IN_PROGRESS:
        raise GroupError(f"probe heartbeat: error {h['error_code']}")
    async with trio.open_nursery() as nursery:
        for m in members:
            nursery.start_soon(_rejoin_and_sync, m, len(members))
        for m in followers[:-1]:
            await m.send(JOIN, V_JOIN, m.join_body())
        if settle_s:
            await trio.sleep(settle_s)
        last = followers[-1]
        body = last.join_body()
        t0, cpu0 = time.perf_counter(), time.process_time()
        await last.send(JOIN, V_JOIN, body)
    cpu = time.process_time() - cpu0
    if any(m.synced != old_generation + 1 for m in members):
        raise GroupError("not every member synced the next generation")
    return max(m.synced_at for m in members) - t0, cpu


async def leave_all(members: list[Member]) -> None:
    """One LeaveGroup v4 for every member, sent on the first member's connection."""
    m = members[0]
    r = await m.call(LEAVE, V_LEAVE, {"group_id": m.group_id,
                                      "members": [{"member_id": x.member_id, "group_instance_id": None}
                                                  for x in members]})
    if r["error_code"] != NONE or any(x["error_code"] != NONE for x in r["members"]):
        raise GroupError(f"LeaveGroup: {r}")


def make_members(socks: list[socket.socket], group_id: str) -> list[Member]:
    return [Member(s, group_id, f"bench-{group_id}-{i}") for i, s in enumerate(socks)]


if __name__ == "__main__":
    print("helper of tests.bench.bench_coordinator (run that); nothing to run on its own")
