"""Rebalance history of KIP-848 consumer groups (core/consumer_group/history.py, core/rebalance_history.py).

- Each group epoch bump is one entry, computed with the outcome that bumps it, with its trigger: member joined,
  subscription changed, topic metadata changed (partitions added, a regex's new topic), member left, session
  expired, rebalance timeout, static member rejoined; members before/after, joined/left, the assignor as the
  protocol. Heartbeats that do not bump the epoch (steady ones, reconciliation steps, a static leave) carry none.
- Through the Coordinator as the runtime drives it (records of the outcome, then ``consumer_history``'s, one batch,
  replayed): the entries land in the same ring as classic groups', newest first, DescribeGroups v5/v6 answer the
  consumer group id with them in the ``history`` tag, a reload of the log shows the same history, size bounds
  and 0 hold, DeleteGroups and a classic JoinGroup replacing the empty group tombstone it; a classic group's
  history goes on after an upgrade (migration-from-classic) and a downgrade is an entry (migration-to-classic).
"""

from __future__ import annotations

from typing import Any

from coordinator.core.config import GroupConfig
from coordinator.core.consumer_group import ConsumerGroupConfig, HeartbeatOutcome, TopicInfo
from coordinator.core.consumer_group import history as H
from coordinator.core.consumer_group import records as R
from coordinator.core.consumer_group.migration import classic_join, classic_leave
from coordinator.core.coordinator import Coordinator
from coordinator.core.rebalance_history import Rebalance, decode_key, decode_value, is_history_key

from .cg_harness import Driver, topic_id

G = "g"


def join(d: Driver, names: list[str] | None = None, **extra: Any) -> dict:
    body = {"member_id": d._next_id(), "member_epoch": 0, "rebalance_timeout_ms": 5000,
            "subscribed_topic_names": names or ["foo"], "topic_partitions": [], **extra}
    return d.send(**body)


def beat(d: Driver, member_id: str, **extra: Any) -> HeartbeatOutcome:
    body = {"group_id": G, "member_id": member_id, "member_epoch": d.member(member_id).member_epoch,
            "instance_id": None, "rack_id": None, "rebalance_timeout_ms": -1, "subscribed_topic_names": None,
            "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": None, **extra}
    return d.apply(d.cg.heartbeat(body, 1, d.now, d.topics, "client", "/127.0.0.1"))


def settle(d: Driver, *members: str) -> None:
    """Heartbeat each member with what it owns until the group is stable: reconciliation carries no entry."""
    for _ in range(6):
        for m in members:
            owned = [{"topic_id": t, "partitions": sorted(ps)} for t, ps in d.member(m).assigned.items()]
            out = beat(d, m, topic_partitions=owned)
            assert out.rebalance is None, out.rebalance
    assert d.group().state.value == "Stable"


def last(d: Driver, out: HeartbeatOutcome) -> Rebalance:
    assert out.rebalance is not None
    return out.rebalance


# ------------------------------------------------------------------ the core's entries

def test_each_epoch_bump_is_one_entry_with_its_trigger_and_nothing_else_is() -> None:
    d = Driver()
    d.topic("foo", 4)
    d.topic("bar", 2)
    out = d.apply(d.cg.heartbeat({"group_id": G, "member_id": "a", "member_epoch": 0, "rebalance_timeout_ms": 5000,
                                  "subscribed_topic_names": ["foo"], "topic_partitions": []}, 1, 10, d.topics,
                                 "client-a", "/10.0.0.1"))
    a = out.response["member_id"]  # type: ignore[index]
    r = last(d, out)
    assert (r.generation, r.trigger.kind, r.trigger.member_id, r.trigger.client_id, r.trigger.client_host) == \
        (1, "member-joined", a, "client-a", "/10.0.0.1")
    assert (r.members_before, r.members_after, r.joined, r.left) == (0, 1, (a,), ())
    assert (r.start_ms, r.end_ms, r.protocol_type, r.protocol, r.leader) == (10, -1, "consumer", "uniform", None)
    settle(d, a)

    d.now = 100
    b = join(d, server_assignor="range")["member_id"]
    settle(d, a, b)
    assert d.group().group_epoch == 2

    out = beat(d, a, subscribed_topic_names=["foo", "bar"])
    r2 = last(d, out)
    assert (r2.generation, r2.trigger.kind, r2.trigger.member_id, r2.members_before, r2.members_after) == \
        (3, "subscription-changed", a, 2, 2)
    assert r2.protocol == "range"  # the only ServerAssignor a member asked for (b's)
    settle(d, a, b)

    d.topic("foo", 6)  # partitions added
    out = beat(d, b)
    r3 = last(d, out)
    assert (r3.generation, r3.trigger.kind, r3.trigger.member_id, r3.trigger.reason) == \
        (4, "topic-metadata-changed", None, "partitions changed: foo")
    settle(d, a, b)

    out = beat(d, b, member_epoch=-1)
    r4 = last(d, out)
    assert (r4.generation, r4.trigger.kind, r4.trigger.member_id, r4.left, r4.members_before, r4.members_after) == \
        (5, "member-left", b, (b,), 2, 1)
    assert r4.protocol == "uniform"  # b took its range vote with it


def test_the_second_join_is_member_joined_and_steady_heartbeats_carry_nothing() -> None:
    d = Driver()
    d.topic("foo", 4)
    a = join(d)["member_id"]
    settle(d, a)
    for _ in range(3):
        out = beat(d, a)
        assert not out.records and out.rebalance is None
    b_out = d.apply(d.cg.heartbeat({"group_id": G, "member_id": "b", "member_epoch": 0, "rebalance_timeout_ms": 5000,
                                    "subscribed_topic_names": ["foo"], "topic_partitions": []}, 1, 0, d.topics,
                                   "client-b", "/10.0.0.2"))
    r = last(d, b_out)
    b = b_out.response["member_id"]  # type: ignore[index]
    assert (r.generation, r.trigger.kind, r.trigger.member_id, r.joined, r.members_before, r.members_after) == \
        (2, "member-joined", b, (b,), 1, 2)


def test_fenced_at_the_session_timeout_and_at_the_rebalance_timeout() -> None:
    d = Driver(ConsumerGroupConfig(session_timeout_ms=3000))
    d.topic("foo", 4)
    a = join(d)["member_id"]
    settle(d, a)
    b = join(d)["member_id"]
    out = d.apply(d.cg.expire_session(G, b, 5000, d.topics))
    r = last(d, out)
    assert (r.generation, r.trigger.kind, r.trigger.member_id, r.left, r.members_after) == \
        (3, "session-expired", b, (b,), 1)
    settle(d, a)
    c = join(d)["member_id"]  # a must revoke half of foo for c: it does not in time
    beat(d, a, topic_partitions=[{"topic_id": topic_id("foo"), "partitions": [0, 1, 2, 3]}])
    assert d.member(a).state.name == "UNREVOKED_PARTITIONS"
    out = d.apply(d.cg.expire_rebalance(G, a, d.member(a).member_epoch, 99_000, d.topics))
    r = last(d, out)
    assert (r.trigger.kind, r.trigger.member_id, r.left, r.members_after) == ("rebalance-timeout", a, (a,), 1)
    assert c in d.group().members


def test_a_static_member_rejoining_bumps_only_with_a_new_subscription() -> None:
    d = Driver()
    d.topic("foo", 4)
    d.topic("bar", 4)
    a = join(d, instance_id="i1")["member_id"]
    settle(d, a)
    away = beat(d, a, member_epoch=-2, instance_id="i1")
    assert away.records and away.rebalance is None  # a static leave keeps its partitions: no bump
    same = d.apply(d.cg.heartbeat({"group_id": G, "member_id": "new1", "member_epoch": 0, "instance_id": "i1",
                                   "rebalance_timeout_ms": 5000, "subscribed_topic_names": ["foo"],
                                   "topic_partitions": []}, 1, 0, d.topics))
    assert same.response["error_code"] == 0 and same.rebalance is None  # type: ignore[index]
    beat(d, "new1", member_epoch=-2, instance_id="i1")
    out = d.apply(d.cg.heartbeat({"group_id": G, "member_id": "new2", "member_epoch": 0, "instance_id": "i1",
                                  "rebalance_timeout_ms": 5000, "subscribed_topic_names": ["bar"],
                                  "topic_partitions": []}, 1, 0, d.topics, "c2", "/h2"))
    r = last(d, out)
    assert (r.trigger.kind, r.trigger.member_id, r.trigger.client_id, r.joined, r.left) == \
        ("static-member-rejoined", "new2", "c2", ("new2",), ("new1",))
    assert (r.members_before, r.members_after) == (1, 1)


def test_a_regex_picking_up_a_new_topic_is_topic_metadata_changed() -> None:
    d = Driver()
    d.topic("foo-1", 2)
    a = join(d, names=None, subscribed_topic_regex="foo-.*", subscribed_topic_names=None)["member_id"]
    settle(d, a)
    d.topic("foo-2", 2)
    d.now += 20_000  # past the regex refresh interval
    out = beat(d, a)
    r = last(d, out)
    assert (r.trigger.kind, r.trigger.reason, r.trigger.member_id) == \
        ("topic-metadata-changed", "topics added: foo-2", None)


def test_classic_members_inside_a_consumer_group_join_and_leave_as_entries() -> None:
    from client.consumer_protocol import Subscription, encode_subscription
    d = Driver()
    d.topic("foo", 4)
    a = join(d)["member_id"]
    settle(d, a)
    meta = encode_subscription(Subscription(("foo",), None, (), -1, None, 3))
    req = {"group_id": G, "member_id": "cm", "group_instance_id": None, "session_timeout_ms": 10000,
           "rebalance_timeout_ms": 10000, "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": meta}]}
    out = d.apply(classic_join(d.cg, d.group(), req, 5, 0, d.topics, "classic-client", "/10.0.0.9"))
    r = last(d, out)
    assert (r.trigger.kind, r.trigger.member_id, r.trigger.client_id, r.members_after) == \
        ("member-joined", "cm", "classic-client", 2)
    out = d.apply(classic_leave(d.cg, d.group(), {"group_id": G, "members": [
        {"member_id": "cm", "group_instance_id": None, "reason": "closing"}]}, 5, d.topics, 7))
    r = last(d, out)
    assert (r.trigger.kind, r.trigger.member_id, r.trigger.reason, r.left, r.start_ms) == \
        ("member-left", "cm", "closing", ("cm",), 7)


# ------------------------------------------------------------------ through the Coordinator, as the runtime writes

class Runtime:
    """What runtime/consumer_groups.py does with an outcome: its records, then its history entry's, one batch,
    replayed once 'durable'; the log keeps every record."""

    def __init__(self, size: int = 50, core: Coordinator | None = None) -> None:
        self.core = core or Coordinator(GroupConfig(offsets_topic_num_partitions=1, group_history_size=size))
        self.shard = self.core.shard_for(G)
        self.log: list[tuple[int, bytes, bytes | None]] = []
        self.topics = {"foo": TopicInfo(topic_id("foo"), 4)}
        self.now = 0
        if core is None:
            self.core.begin_loading(self.shard)
            self.core.finish_loading(self.shard, 0)
        self.ids = 0

    def write(self, outcome: HeartbeatOutcome, prefix: list | None = None) -> HeartbeatOutcome:
        items = list(prefix or []) + [R.encode_record(r) for r in outcome.records]
        if outcome.rebalance is not None:
            items += self.core.consumer_history(self.shard, G, outcome.rebalance)
        for key, value in items:
            self.core.replay(self.shard, key, value)
            self.log.append((self.shard, key, value))
        # once durable, the runtime asks whether the write ended the group's reconciliation (a write of its own)
        for key, value in self.core.consumer_rebalance_end(self.shard, G, self.now):
            self.core.replay(self.shard, key, value)
            self.log.append((self.shard, key, value))
        return outcome

    def beat(self, member: str, **extra: Any) -> HeartbeatOutcome:
        m = self.core.consumer_groups(self.shard).groups[G].members[member]
        owned = [{"topic_id": t, "partitions": sorted(ps)} for t, ps in m.assigned.items()]
        body = {"group_id": G, "member_id": member, "member_epoch": m.member_epoch, "instance_id": None,
                "rack_id": None, "rebalance_timeout_ms": -1, "subscribed_topic_names": None,
                "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": owned, **extra}
        out = self.write(self.core.consumer_groups(self.shard).heartbeat(body, 1, self.now, self.topics))
        assert out.response["error_code"] == 0, out.response  # type: ignore[index]
        return out

    def state(self) -> str:
        return self.core.consumer_groups(self.shard).groups[G].state.value

    def join(self, client: str) -> str:
        self.ids += 1
        out = self.write(self.core.consumer_groups(self.shard).heartbeat(
            {"group_id": G, "member_id": f"m{self.ids}", "member_epoch": 0, "rebalance_timeout_ms": 5000,
             "subscribed_topic_names": ["foo"], "topic_partitions": []}, 1, self.now, self.topics, client, "/127.0.0.1"))
        assert out.response["error_code"] == 0  # type: ignore[index]
        return f"m{self.ids}"

    def leave(self, member: str) -> None:
        epoch = self.core.consumer_groups(self.shard).groups[G].members[member].member_epoch
        self.write(self.core.consumer_groups(self.shard).heartbeat(
            {"group_id": G, "member_id": member, "member_epoch": -1}, 1, self.now, self.topics))
        assert epoch >= 0

    def expire(self, member: str) -> None:
        self.write(self.core.consumer_groups(self.shard).expire_session(G, member, self.now, self.topics))

    def history(self) -> list[tuple[int, str, str | None]]:
        return [(r.generation, r.trigger.kind, r.trigger.member_id) for r in self.core.rebalance_history(G)]

    def reload(self) -> Coordinator:
        core = Coordinator(self.core._env.cfg)
        core.begin_loading(self.shard)
        for s, k, v in self.log:
            core.replay(s, k, v)
        core.finish_loading(self.shard, 0)
        return core


def story(rt: Runtime) -> tuple[str, str, str]:
    a = rt.join("client-a")
    rt.now = 1000
    b = rt.join("client-b")
    rt.now = 2000
    c = rt.join("client-c")
    rt.now = 3000
    rt.leave(b)
    rt.now = 9000
    rt.expire(c)
    return a, b, c


def test_the_story_is_recorded_in_the_ring_and_survives_a_reload() -> None:
    rt = Runtime()
    a, b, c = story(rt)
    expected = [(5, "session-expired", c), (4, "member-left", b), (3, "member-joined", c), (2, "member-joined", b),
                (1, "member-joined", a)]
    assert rt.history() == expected
    assert [r.seq for r in rt.core.rebalance_history(G)] == [4, 3, 2, 1, 0]
    assert [r.start_ms for r in rt.core.rebalance_history(G)] == [9000, 3000, 2000, 1000, 0]
    keys = [k for _, k, _ in rt.log if is_history_key(k)]
    # five slots; four entries were written twice: a's ended with its own bump (alone), b's, c's and the leave's
    # were overtaken by the next bump; the expiry's is still open (a has partitions to take)
    assert len(set(keys)) == 5 and len(keys) == 9
    assert [r.end_ms for r in rt.core.rebalance_history(G)] == [-1, 9000, 3000, 2000, 0]
    again = rt.reload()
    assert again.rebalance_history(G) == rt.core.rebalance_history(G)
    # the next entry after a reload continues the seq
    rt2 = Runtime(core=again)
    rt2.ids = 10
    rt2.join("client-d")
    assert [r.seq for r in again.rebalance_history(G)][:2] == [5, 4]


def test_an_entry_ends_when_the_group_is_reconciled_or_at_the_next_bump() -> None:
    rt = Runtime()
    rt.now = 100
    a = rt.join("client-a")  # alone: assigned at once, so the write that bumps also ends it
    first = rt.core.rebalance_history(G)[0]
    assert (first.generation, first.start_ms, first.end_ms, first.duration_ms) == (1, 100, 100, 0)
    rt.now = 1000
    b = rt.join("client-b")  # a must give up half first: the entry stays open
    assert rt.state() == "Reconciling"
    opened = rt.core.rebalance_history(G)[0]
    assert (opened.generation, opened.end_ms, opened.duration_ms) == (2, -1, None)
    rt.now = 1200
    rt.beat(a)  # a is told what to revoke
    rt.now = 1300
    rt.beat(a)  # a revoked: b may take them
    for t, m in ((1400, b), (1500, a), (1600, b)):
        if rt.state() != "Stable":
            rt.now = t
            rt.beat(m)
    assert rt.state() == "Stable"
    closed = rt.core.rebalance_history(G)[0]
    assert (closed.seq, closed.generation, closed.start_ms) == (opened.seq, 2, 1000)
    assert 1300 <= closed.end_ms <= 1600 and closed.duration_ms == closed.end_ms - 1000
    ends = [decode_value(v).end_ms for _, k, v in rt.log if is_history_key(k) and v is not None]
    assert ends == [-1, 100, -1, closed.end_ms]  # each bump written open, then again with its end
    n = len(rt.log)
    rt.now = 2000
    rt.beat(a)
    rt.beat(b)  # steady heartbeats: nothing written, the entry stays as it ended
    assert len(rt.log) == n and rt.core.rebalance_history(G)[0] == closed

    rt.now = 3000
    rt.join("client-c")  # open again ...
    rt.now = 3500
    rt.leave(b)  # ... and overtaken by the next bump: it ends there
    newest, overtaken = rt.core.rebalance_history(G)[:2]
    assert (overtaken.generation, overtaken.start_ms, overtaken.end_ms) == (3, 3000, 3500)
    assert (newest.generation, newest.trigger.kind, newest.end_ms) == (4, "member-left", -1)
    # a reload knows which entry is open, and ends it when the group is reconciled
    again = Runtime(core=rt.reload())
    again.now, again.log = 4000, list(rt.log)
    assert again.core.rebalance_history(G) == rt.core.rebalance_history(G)
    for m in (a, "m3", a, "m3", a, "m3"):
        if again.state() != "Stable":
            again.beat(m)
    assert again.state() == "Stable"
    assert again.core.rebalance_history(G)[0].end_ms == 4000


def test_describe_groups_answers_a_consumer_group_id_with_its_history() -> None:
    rt = Runtime()
    story(rt)
    for version, code in ((5, 0), (6, 69)):
        out = rt.core.handle(15, version, {"groups": [G], "include_authorized_operations": False}, "tok", rt.now)
        g = out.completions[0][1]["groups"][0]
        assert (g["group_state"], g["error_code"]) == ("Dead", code)  # Kafka 4: not a classic group
        assert [(e["generation"], e["trigger"]) for e in g["history"]] == \
            [(5, "session-expired"), (4, "member-left"), (3, "member-joined"), (2, "member-joined"),
             (1, "member-joined")]
        assert g["history"][0]["protocol_type"] == "consumer" and g["history"][0]["protocol"] == "uniform"
        assert not out.records


def test_size_bounds_the_slots_and_zero_writes_none() -> None:
    rt = Runtime(size=2)
    story(rt)
    assert [g for g, _, _ in rt.history()] == [5, 4]
    assert {decode_key(k)[1] for _, k, v in rt.log if is_history_key(k)} == {0, 1}
    none = Runtime(size=0)
    story(none)
    assert none.history() == [] and not [k for _, k, _ in none.log if is_history_key(k)]


def test_delete_groups_tombstones_a_consumer_groups_history() -> None:
    rt = Runtime()
    a, _, _ = story(rt)
    rt.leave(a)
    assert len(rt.history()) == 6
    out = rt.core.handle(42, 2, {"groups_names": [G]}, "tok", rt.now)
    assert out.completions[0][1]["results"][0]["error_code"] == 0
    tombstones = sorted(decode_key(k)[1] for _, k, v in out.records if is_history_key(k) and v is None)
    assert tombstones == [0, 1, 2, 3, 4, 5]
    rt.core.on_appended(out.write_id, rt.now)  # type: ignore[arg-type]
    rt.log.extend(out.records)
    assert rt.core.rebalance_history(G) == []
    assert rt.reload().rebalance_history(G) == []


def test_a_classic_join_replacing_the_empty_consumer_group_tombstones_its_history() -> None:
    rt = Runtime()
    a = rt.join("client-a")
    rt.leave(a)
    assert len(rt.history()) == 2
    out = rt.core.handle(11, 5, {"group_id": G, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
                                 "member_id": "x", "group_instance_id": None, "protocol_type": "consumer",
                                 "protocols": [{"name": "range", "metadata": b""}], "reason": None}, "tok", rt.now)
    tombstones = sorted(decode_key(k)[1] for _, k, v in out.records if is_history_key(k) and v is None)
    assert tombstones == [0, 1]
    rt.core.on_appended(out.write_id, rt.now)  # type: ignore[arg-type]
    assert rt.core.rebalance_history(G) == []


def test_an_upgrade_continues_the_classic_history() -> None:
    from core_harness import Harness, subscription  # type: ignore[import-not-found]

    from coordinator.core.consumer_group import migration

    h = Harness(group_history_size=50, offsets_topic_num_partitions=1)
    generation, _ = h.stable_group(G, 2, protocols=(("range", subscription("foo")),))
    assert [r.trigger.kind for r in h.coord.rebalance_history(G)] == ["member-joined"]
    rt = Runtime(core=h.coord)
    group = h.coord.classic_group(G)
    assert group is not None
    for m in group.members.values():  # the harness's leader assigned its members their ids: none here
        m.assignment = b""
    out = migration.upgrade(h.coord.consumer_groups(rt.shard), group, {
        "group_id": G, "member_id": "joiner", "member_epoch": 0, "rebalance_timeout_ms": 5000,
        "subscribed_topic_names": ["foo"], "topic_partitions": []}, 1, h.now, rt.topics, "c-new", "/1.2.3.4")
    assert out.response["error_code"] == 0, out.response  # type: ignore[index]
    rt.write(out, prefix=[(b"\x00\x02\x00\x01g", None)])
    h.coord.classic_group_upgraded(G, h.now)
    entries = h.coord.rebalance_history(G)
    assert [(r.seq, r.trigger.kind) for r in entries] == [(1, "migration-from-classic"), (0, "member-joined")]
    up = entries[0]
    assert (up.generation, up.trigger.member_id, up.trigger.client_id, up.members_before, up.members_after) == \
        (generation + 1, "joiner", "c-new", 2, 3)
    assert up.protocol_type == "consumer" and up.joined == ("joiner",)


def test_a_downgrade_is_an_entry_named_migration_to_classic() -> None:
    from client.consumer_protocol import Subscription, encode_subscription
    d = Driver()
    d.topic("foo", 4)
    a = join(d)["member_id"]
    settle(d, a)
    meta = encode_subscription(Subscription(("foo",), None, (), -1, None, 3))
    req = {"group_id": G, "member_id": "cm", "group_instance_id": None, "session_timeout_ms": 10000,
           "rebalance_timeout_ms": 10000, "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": meta}]}
    d.apply(classic_join(d.cg, d.group(), req, 5, 0, d.topics))
    epoch = d.group().group_epoch
    out = d.cg.expire_session(G, a, 50, d.topics)
    assert out.downgrade is not None
    r = last(d, out)
    assert (r.generation, r.trigger.kind, r.trigger.member_id, r.trigger.reason, r.left, r.members_after) == \
        (epoch, "migration-to-classic", a, "session-expired", (a,), 1)
    assert r.protocol == "range" and r.trigger.kind == H.MIGRATION_TO_CLASSIC
