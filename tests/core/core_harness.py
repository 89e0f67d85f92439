"""Test harness (tests/core only) for the sans-IO coordinator core: a manual clock, an in-memory durable log, responses.

``Harness.send`` hands a request to the coordinator, appends the records it returns (or fails the write
when ``fail_next_write`` is set), replays them via ``on_appended`` and stores every released completion.
``sleep(ms)`` advances the clock and fires timers the same way. Each token must be answered at most once.
"""

from __future__ import annotations

import itertools

from coordinator.core.config import GroupConfig
from coordinator.core.coordinator import Coordinator
from coordinator.core.errors import Err

JOIN, SYNC, HEARTBEAT, LEAVE, COMMIT, FETCH, DESCRIBE, LIST, DELETE = 11, 14, 12, 13, 8, 9, 15, 16, 42


class Token:
    def __init__(self, n: int, label: str) -> None:
        self.n, self.label = n, label

    def __repr__(self) -> str:
        return f"<{self.n}:{self.label}>"


def subscription(*topics: str) -> bytes:
    """ConsumerProtocol subscription v0: int16 version, [string] topics, bytes user data."""
    out = b"\x00\x00" + len(topics).to_bytes(4, "big")
    for t in topics:
        out += len(t).to_bytes(2, "big") + t.encode()
    return out + b"\xff\xff\xff\xff"


class Harness:
    def __init__(self, **overrides) -> None:
        settings = {"group_initial_rebalance_delay_ms": 100, "group_min_session_timeout_ms": 1000,
                        "offsets_topic_num_partitions": 4}
        settings.update(overrides)
        self.cfg = GroupConfig(**settings)
        ids = itertools.count(1)
        self.coord = Coordinator(self.cfg, new_id=lambda: f"u{next(ids)}")
        self.now = 0
        self.log: list[tuple[int, bytes, bytes | None]] = []
        self.responses: dict[Token, dict] = {}
        self.fail_next_write: int | None = None
        self.writes: list[tuple[list, list]] = []  # (records, completions released with them)
        self.hold_writes = False  # when True, writes wait in ``held`` until ``release_writes()`` (fsync lag)
        self.held: list = []
        self._tokens = itertools.count(1)
        for shard in range(self.cfg.offsets_topic_num_partitions):
            self.coord.begin_loading(shard)
            self.coord.finish_loading(shard, 0)

    # ------------------------------------------------------------ plumbing

    def apply(self, out) -> None:
        after = None
        if out.records:
            if self.hold_writes:
                self.held.append(out)
                return
            if self.fail_next_write is not None:
                error, self.fail_next_write = self.fail_next_write, None
                self.apply(self.coord.on_append_failed(out.write_id, self.now, error))
                return
            self.log.extend(out.records)
            after = self.coord.on_appended(out.write_id, self.now)
            self.writes.append((list(out.records), list(out.completions)))
        for token, response in out.completions:
            assert token not in self.responses, f"{token} answered twice"
            self.responses[token] = response
        if after is not None:
            self.apply(after)

    def release_writes(self) -> None:
        """The held writes become durable, in order."""
        self.hold_writes = False
        held, self.held = self.held, []
        for out in held:
            self.apply(out)

    def send(self, api: int, version: int, request: dict, label: str = "", client_id: str = "client") -> Token:
        token = Token(next(self._tokens), label or str(api))
        self.apply(self.coord.handle(api, version, request, token, self.now, client_id=client_id,
                                     client_host="/127.0.0.1"))
        return token

    def sleep(self, ms: int) -> None:
        """Advance the clock, firing each timer at its own deadline (as a real timer wheel would)."""
        target = self.now + ms
        while (deadline := self.coord.next_deadline()) is not None and deadline <= target:
            self.now = max(self.now, deadline)
            self.apply(self.coord.on_timers(self.now))
        self.now = target
        self.apply(self.coord.on_timers(self.now))

    def settle(self, token: Token, step: int = 100, limit: int = 100) -> None:
        """Advance the clock by ``step`` until ``token`` is answered (e.g. the initial delay ends)."""
        for _ in range(limit):
            if token in self.responses:
                return
            self.sleep(step)
        raise AssertionError(f"{token} never answered")

    def answered(self, token: Token) -> bool:
        return token in self.responses

    def __getitem__(self, token: Token) -> dict:
        return self.responses[token]

    def error(self, token: Token) -> int:
        return self.responses[token]["error_code"]

    def state(self, group: str) -> str | None:
        view = self.coord.group(group)
        return None if view is None else view.state

    # ------------------------------------------------------------ requests

    def join(self, group: str, member_id: str = "", *, version: int = 5, session: int = 10_000,
             rebalance: int = 30_000, instance: str | None = None, protocols=(("range", b"m"),),
             ptype: str = "consumer", client_id: str = "client") -> Token:
        return self.send(JOIN, version, {
            "group_id": group, "session_timeout_ms": session, "rebalance_timeout_ms": rebalance,
            "member_id": member_id, "group_instance_id": instance, "protocol_type": ptype,
            "protocols": [{"name": n, "metadata": m} for n, m in protocols]}, f"join {member_id or client_id}",
            client_id)

    def join_new(self, group: str, client_id: str = "client", **kw) -> tuple[Token, str]:
        """A dynamic member's first join (v4+: MEMBER_ID_REQUIRED, then rejoin with the given id)."""
        first = self.join(group, client_id=client_id, **kw)
        assert self.error(first) == Err.MEMBER_ID_REQUIRED
        member_id = self[first]["member_id"]
        return self.join(group, member_id, client_id=client_id, **kw), member_id

    def sync(self, group: str, generation: int, member_id: str, assignments: dict | None = None, *,
             version: int = 3, instance: str | None = None) -> Token:
        return self.send(SYNC, version, {
            "group_id": group, "generation_id": generation, "member_id": member_id,
            "group_instance_id": instance, "protocol_type": None, "protocol_name": None,
            "assignments": [{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()]},
            f"sync {member_id}")

    def heartbeat(self, group: str, generation: int, member_id: str, instance: str | None = None) -> Token:
        return self.send(HEARTBEAT, 3, {"group_id": group, "generation_id": generation, "member_id": member_id,
                                        "group_instance_id": instance}, f"hb {member_id}")

    def leave(self, group: str, *member_ids: str, version: int = 3) -> Token:
        if version >= 3:
            req = {"group_id": group, "members": [{"member_id": m, "group_instance_id": None} for m in member_ids]}
        else:
            req = {"group_id": group, "member_id": member_ids[0]}
        return self.send(LEAVE, version, req, "leave")

    def commit(self, group: str, generation: int, member_id: str, offsets: dict, *, version: int = 7,
               metadata: str | None = "", epoch: int = -1, instance: str | None = None) -> Token:
        topics: dict[str, list] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append({
                "partition_index": partition, "committed_offset": offset, "committed_leader_epoch": epoch,
                "committed_metadata": metadata})
        return self.send(COMMIT, version, {
            "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
            "group_instance_id": instance, "retention_time_ms": -1,
            "topics": [{"name": t, "partitions": p} for t, p in topics.items()]}, "commit")

    def fetch(self, group: str, partitions: dict | None = None, version: int = 7) -> dict[tuple[str, int], dict]:
        topics = None if partitions is None else [{"name": t, "partition_indexes": ps} for t, ps in partitions.items()]
        token = self.send(FETCH, version, {"group_id": group, "topics": topics, "require_stable": False}, "fetch")
        assert self.error(token) == 0
        return {(t["name"], p["partition_index"]): p for t in self[token]["topics"] for p in t["partitions"]}

    def stable_group(self, group: str, n: int, **kw) -> tuple[int, list[str]]:
        """Bring ``n`` dynamic members to Stable; returns (generation, member ids with the leader first)."""
        joins = [self.join_new(group, client_id=f"c{i}", **kw) for i in range(n)]
        self.settle(joins[0][0])
        members = [m for _, m in joins]
        generation = self[joins[0][0]]["generation_id"]
        assert all(self.error(t) == 0 for t, _ in joins)
        self.sync(group, generation, members[0], {m: m.encode() for m in members})
        for m in members[1:]:
            self.sync(group, generation, m)
        assert self.state(group) == "Stable"
        return generation, members
