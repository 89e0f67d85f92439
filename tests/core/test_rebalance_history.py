"""Rebalance history (issue #37 item 2) in the sans-IO core: coordinator/core/rebalance_history.py.

- One record per rebalance, written with the write that ends it; none for heartbeats or commits.
- The story of the acceptance test: a join, a LeaveGroup with a reason, a session expiry and a leader rejoin
  are four rebalances with those triggers, newest first, with members before/after, who joined and left, the
  protocol and the generation; a reload of the log (record by record and through the bulk replay) and a log
  compacted to the latest record per key show the same history.
- group.history.size bounds the records kept per group (slots), a lowered size tombstones the slots past it,
  0 writes none; DeleteGroups and the offsets expiry tombstone a group's history.
- Triggers: evicted at the rebalance timeout, coordinator moved (a rejoin after a load); a failed write keeps
  no entry; DescribeGroups v5+ carries the history in our tagged field.
"""

from __future__ import annotations

import pytest
from core_harness import DELETE, DESCRIBE, JOIN, LEAVE, Harness  # type: ignore[import-not-found]

from coordinator.core.config import GroupConfig
from coordinator.core.coordinator import Coordinator
from coordinator.core.errors import Err
from coordinator.core.rebalance_history import (
    Rebalance,
    Trigger,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    is_history_key,
)
from coordinator.core.records import RecordError

G = "hist"


def history_records(log: list) -> list:
    return [r for r in log if is_history_key(r[1])]


def compacted(log: list) -> list[tuple[int, bytes, bytes | None]]:
    """The log as compaction leaves it: the latest record per (partition, key), in their order, tombstones gone."""
    latest: dict[tuple[int, bytes], tuple[int, tuple[int, bytes, bytes | None]]] = {}
    for i, r in enumerate(log):
        latest[(r[0], r[1])] = (i, r)
    return [r for _, r in sorted(latest.values(), key=lambda x: x[0]) if r[2] is not None]


def reload(h: Harness, log: list, *, bulk: bool = False, **overrides) -> Coordinator:
    cfg = GroupConfig(**{**{"offsets_topic_num_partitions": h.cfg.offsets_topic_num_partitions,
                            "group_history_size": h.cfg.group_history_size}, **overrides})
    coord = Coordinator(cfg)
    skipped: list = []
    for shard in range(cfg.offsets_topic_num_partitions):
        coord.begin_loading(shard)
        mine = [(k, v) for s, k, v in log if s == shard]
        if bulk:
            coord.replay_many(shard, mine, lambda key, e: skipped.append(e))
        else:
            for k, v in mine:
                coord.replay(shard, k, v)
        coord.finish_loading(shard, h.now)
    assert not skipped
    return coord


def join_v8(h: Harness, member_id: str, client_id: str, reason: str | None, session: int = 10_000):  # noqa: ANN201
    return h.send(JOIN, 8, {"group_id": G, "session_timeout_ms": session, "rebalance_timeout_ms": 30_000,
                            "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer",
                            "protocols": [{"name": "range", "metadata": b"m"}], "reason": reason},
                  f"join {client_id}", client_id)


def join_new_v8(h: Harness, client_id: str, reason: str, session: int = 10_000) -> tuple[object, str]:
    first = join_v8(h, "", client_id, reason, session)
    assert h.error(first) == Err.MEMBER_ID_REQUIRED
    member_id = h[first]["member_id"]
    return join_v8(h, member_id, client_id, reason, session), member_id


def sync_all(h: Harness, leader: str, members: list[str], generation: int) -> None:
    h.sync(G, generation, leader, {m: m.encode() for m in members})
    for m in members:
        if m != leader:
            h.sync(G, generation, m)
    assert h.state(G) == "Stable"


def four_rebalances(h: Harness) -> tuple[str, str, str]:
    """a, b, c join (1); c leaves with a reason (2); b's session expires (3); the leader a rejoins (4)."""
    (ta, a) = join_new_v8(h, "ca", "first start", session=10_000)
    (tb, b) = join_new_v8(h, "cb", "second start", session=2_000)
    (tc, c) = join_new_v8(h, "cc", "third start", session=10_000)
    h.settle(ta)
    sync_all(h, a, [a, b, c], 1)
    h.sleep(100)
    h.send(LEAVE, 5, {"group_id": G, "members": [{"member_id": c, "group_instance_id": None,
                                                 "reason": "the consumer is being closed"}]})
    ja, jb = join_v8(h, a, "ca", "rejoin after leave"), join_v8(h, b, "cb", "rejoin after leave")
    assert h[ja]["generation_id"] == h[jb]["generation_id"] == 2
    sync_all(h, a, [a, b], 2)
    for _ in range(4):  # a keeps heartbeating, b is silent: its session (2 s) expires
        h.sleep(900)
        h.heartbeat(G, 2, a)
    assert h.state(G) == "PreparingRebalance"
    ja = join_v8(h, a, "ca", "rejoin after expiry")
    assert h[ja]["generation_id"] == 3
    sync_all(h, a, [a], 3)
    h.sleep(100)
    ja = join_v8(h, a, "ca", "metadata changed")  # the leader rejoins a Stable group
    assert h[ja]["generation_id"] == 4
    sync_all(h, a, [a], 4)
    return a, b, c


def test_four_rebalances_are_recorded_with_their_triggers_and_survive_a_reload() -> None:
    h = Harness(group_history_size=50)
    a, b, c = four_rebalances(h)
    got = h.coord.rebalance_history(G)
    assert [r.trigger.kind for r in got] == ["leader-rejoined", "session-expired", "member-left", "member-joined"]
    assert [r.generation for r in got] == [4, 3, 2, 1]
    assert [r.seq for r in got] == [3, 2, 1, 0]
    joined, left, expired, rejoined = got[::-1]
    assert (joined.trigger.member_id, joined.trigger.client_id, joined.trigger.reason) == (a, "ca", "first start")
    assert joined.trigger.client_host == "/127.0.0.1"
    assert (joined.members_before, joined.members_after, joined.joined, joined.left) == (0, 3, (a, b, c), ())
    assert (left.trigger.member_id, left.trigger.client_id) == (c, "cc")
    assert left.trigger.reason == "the consumer is being closed"
    assert (left.members_before, left.members_after, left.joined, left.left) == (3, 2, (), (c,))
    assert (expired.trigger.member_id, expired.trigger.reason) == (b, None)
    assert (expired.members_before, expired.members_after, expired.left) == (2, 1, (b,))
    assert (rejoined.trigger.member_id, rejoined.trigger.reason) == (a, "metadata changed")
    assert (rejoined.members_before, rejoined.members_after) == (1, 1)
    for r in got:
        assert (r.protocol_type, r.protocol, r.leader) == ("consumer", "range", a)
        assert 0 <= r.start_ms <= r.end_ms and r.duration_ms == r.end_ms - r.start_ms
    assert joined.duration_ms >= 100  # the initial rebalance delay
    assert [x.end_ms for x in got] == sorted((x.end_ms for x in got), reverse=True)
    assert len(history_records(h.log)) == 4
    for coord in (reload(h, h.log), reload(h, h.log, bulk=True), reload(h, compacted(h.log))):
        assert coord.rebalance_history(G) == got


def test_heartbeats_and_commits_write_no_history() -> None:
    h = Harness(group_history_size=50)
    generation, members = h.stable_group(G, 2)
    before = len(history_records(h.log))
    assert before == 1
    for _ in range(20):
        h.sleep(500)
        for m in members:
            h.heartbeat(G, generation, m)
        h.commit(G, generation, members[0], {("t", 0): 5, ("t", 1): 7})
    assert len(history_records(h.log)) == before
    assert len(h.coord.rebalance_history(G)) == 1


def test_history_size_bounds_the_records_kept_per_group() -> None:
    h = Harness(group_history_size=3)
    generation, [a] = h.stable_group(G, 1)
    for _ in range(5):
        t = h.join(G, a)
        generation = h[t]["generation_id"]
        h.sync(G, generation, a, {a: b"x"})
    got = h.coord.rebalance_history(G)
    assert [r.seq for r in got] == [5, 4, 3] and [r.generation for r in got] == [6, 5, 4]
    assert {decode_key(k)[1] for _, k, _ in history_records(h.log)} == {0, 1, 2}
    kept = compacted(h.log)
    assert len(history_records(kept)) == 3
    assert reload(h, kept).rebalance_history(G) == got
    # the next one continues the sequence after the reload
    again = Harness(group_history_size=3)
    again.log = list(kept)
    again.coord = reload(h, kept)
    t = again.join(G, a)
    again.sync(G, again[t]["generation_id"], a, {a: b"x"})
    assert [r.seq for r in again.coord.rebalance_history(G)] == [6, 5, 4]


def test_a_lowered_size_tombstones_the_slots_past_it() -> None:
    h = Harness(group_history_size=4)
    generation, [a] = h.stable_group(G, 1)
    for _ in range(3):
        t = h.join(G, a)
        h.sync(G, h[t]["generation_id"], a, {a: b"x"})
    assert len(h.coord.rebalance_history(G)) == 4
    small = Harness(group_history_size=2)
    small.log = list(h.log)
    small.coord = reload(h, h.log, group_history_size=2)
    t = small.join(G, a)
    small.sync(G, small[t]["generation_id"], a, {a: b"x"})
    last = small.writes[-1][0]
    tombstoned = sorted(decode_key(k)[1] for _, k, v in last if is_history_key(k) and v is None)
    assert tombstoned == [2, 3]
    assert [r.seq for r in small.coord.rebalance_history(G)] == [4, 1]  # slot 0 now holds seq 4
    assert len(history_records(compacted(small.log))) == 2


def test_size_zero_writes_no_history() -> None:
    h = Harness(group_history_size=0)
    h.stable_group(G, 2)
    assert history_records(h.log) == [] and h.coord.rebalance_history(G) == []


def test_deleting_a_group_tombstones_its_history() -> None:
    h = Harness(group_history_size=50)
    generation, members = h.stable_group(G, 2)
    h.leave(G, *members)
    assert h.state(G) == "Empty"
    assert len(h.coord.rebalance_history(G)) == 2
    t = h.send(DELETE, 2, {"groups_names": [G]})
    assert h[t]["results"][0]["error_code"] == 0
    slots = {decode_key(k)[1] for _, k, v in h.writes[-1][0] if is_history_key(k) and v is None}
    assert slots == {0, 1}
    assert h.coord.rebalance_history(G) == []
    assert history_records(compacted(h.log)) == []
    assert reload(h, h.log).rebalance_history(G) == []


def test_offsets_expiry_of_an_empty_group_tombstones_its_history() -> None:
    h = Harness(group_history_size=50, offsets_retention_minutes=1, offsets_retention_check_interval_ms=1000)
    generation, [a] = h.stable_group(G, 1)
    h.commit(G, generation, a, {("t", 0): 1})
    h.leave(G, a)
    assert len(h.coord.rebalance_history(G)) == 2
    h.sleep(130_000)
    assert h.coord.group(G) is None
    assert h.coord.rebalance_history(G) == []
    assert history_records(compacted(h.log)) == []


def test_members_evicted_at_the_rebalance_timeout() -> None:
    h = Harness(group_history_size=50)
    joins = [h.join_new(G, client_id=f"c{i}", rebalance=5_000) for i in range(2)]
    h.settle(joins[0][0])
    a, b = (m for _, m in joins)
    h.sync(G, 1, a, {a: b"A", b: b"B"})  # b never syncs
    h.sleep(5_000)
    assert h.state(G) == "PreparingRebalance"
    t = h.join(G, a, rebalance=5_000)
    h.sync(G, h[t]["generation_id"], a, {a: b"A"})
    last = h.coord.rebalance_history(G)[0]
    assert last.trigger.kind == "rebalance-timeout" and last.trigger.member_id == b
    assert (last.members_before, last.members_after, last.left) == (2, 1, (b,))


def test_a_rejoin_after_the_coordinator_moved() -> None:
    h = Harness(group_history_size=50)
    generation, [a, b] = h.stable_group(G, 2)
    moved = Harness(group_history_size=50)
    moved.log = list(h.log)
    moved.coord = reload(h, h.log)
    t = moved.join(G, a)  # the leader rejoins on the new coordinator (its rebalance was cut by the move)
    moved.join(G, b)
    moved.sync(G, moved[t]["generation_id"], a, {a: b"", b: b""})
    moved.sync(G, moved[t]["generation_id"], b)
    assert [r.trigger.kind for r in moved.coord.rebalance_history(G)] == ["coordinator-moved", "member-joined"]
    t = moved.join(G, a)  # the next rejoin is a plain one
    moved.join(G, b)
    moved.sync(G, moved[t]["generation_id"], a, {a: b"", b: b""})
    assert moved.coord.rebalance_history(G)[0].trigger.kind == "leader-rejoined"


def test_a_failed_write_keeps_no_entry() -> None:
    h = Harness(group_history_size=50)
    joins = [h.join_new(G, client_id=f"c{i}") for i in range(1)]
    h.settle(joins[0][0])
    a = joins[0][1]
    h.fail_next_write = int(Err.NOT_COORDINATOR)
    h.sync(G, 1, a, {a: b"A"})
    assert h.coord.rebalance_history(G) == []
    t = h.join(G, a)
    h.sync(G, h[t]["generation_id"], a, {a: b"A"})
    [r] = h.coord.rebalance_history(G)
    assert r.trigger.kind == "write-failed" and r.seq == 1  # seq 0 was taken by the write that failed


def test_describe_groups_v5_carries_the_history_newest_first() -> None:
    h = Harness(group_history_size=50)
    four_rebalances(h)
    t = h.send(DESCRIBE, 5, {"groups": [G, "unknown"], "include_authorized_operations": False})
    described, unknown = h[t]["groups"]
    assert [e["trigger"] for e in described["history"]] == \
        ["leader-rejoined", "session-expired", "member-left", "member-joined"]
    assert described["history"][2]["reason"] == "the consumer is being closed"
    assert "history" not in unknown
    t = h.send(DESCRIBE, 4, {"groups": [G], "include_authorized_operations": False})
    assert "history" not in h[t]["groups"][0]


def test_codec_round_trip_and_bad_values() -> None:
    r = Rebalance(7, 3, 10, 25, Trigger("member-left", "m-1", "cid", "/1.2.3.4", "bye ü"), "consumer", None, None,
                  2, 1, (), ("m-1",))
    assert decode_value(encode_value(r)) == r
    assert decode_key(encode_key("g ü", 9)) == ("g ü", 9)
    value = encode_value(r)
    for bad in (value[:-1], value + b"\x00", b"\x00\x09" + value[2:]):
        with pytest.raises(RecordError):
            decode_value(bad)
    coord = Coordinator(GroupConfig(offsets_topic_num_partitions=1, group_history_size=5))
    coord.begin_loading(0)
    skipped: list = []
    coord.replay_many(0, [(encode_key("g", 0), value[:-3]), (encode_key("g", 1), value)],
                      lambda key, e: skipped.append(key))
    coord.finish_loading(0, 0)
    assert skipped == [encode_key("g", 0)]
    assert coord.rebalance_history("g") == [r]


def test_history_tombstones_for_a_group_tombstone_written_outside_the_core() -> None:
    h = Harness(group_history_size=50)
    generation, members = h.stable_group(G, 1)
    h.leave(G, *members)
    keys = h.coord.history_tombstones(G)
    assert [(decode_key(k), v) for k, v in keys] == [((G, 0), None), ((G, 1), None)]
    shard = h.coord.shard_for(G)
    for k, v in keys:  # as the runtime replays what it wrote
        h.coord.replay(shard, k, v)
    assert h.coord.rebalance_history(G) == []
