"""FOLLOWING shards (cluster mode, issue #20): a shard this node replicates without leading is kept replayed
from its log; it answers NOT_COORDINATOR like a shard it does not own, runs no timers, and turns ACTIVE at
once, with the state a fresh load of the same log would give."""

from __future__ import annotations

import itertools

import pytest
from core_harness import DESCRIBE, FETCH, LIST, Harness

from coordinator.core.errors import Err
from coordinator.core.shard import ShardStatus


def source_log() -> Harness:
    """A leader's history: a Stable group with commits, an Empty static group, a simple group, a deletion."""
    h = Harness()
    gen, (lead, m2) = h.stable_group("g1", 2)
    h.commit("g1", gen, lead, {("t", 0): 100, ("t", 1): 200}, metadata="meta", epoch=4)
    h.commit("g1", gen, m2, {("t", 1): 250})
    h.settle(h.join("g2", instance="s-0", client_id="s"))
    h.sync("g2", 1, "s-0-u3", {"s-0-u3": b"x"}, instance="s-0")
    h.leave("g2", "s-0-u3")
    h.commit("simple", -1, "", {("u", 3): 7})
    h.commit("gone", -1, "", {("u", 1): 1})
    assert h[h.send(42, 2, {"groups_names": ["gone"]})]["results"][0]["error_code"] == 0
    return h


def state(h: Harness) -> dict:
    """What a node serves: every group's view and committed offsets (ACTIVE shards only)."""
    return {v.group_id: ((v.state, v.generation, v.protocol_type, v.protocol, v.leader, v.members),
                         h.coord.committed_offsets(v.group_id)) for v in h.coord.groups()}


def loaded(log: list, now: int = 0) -> Harness:
    """A fresh load of ``log`` (today's path: LOADING, replay, finish)."""
    fresh = Harness()
    for shard in range(fresh.cfg.offsets_topic_num_partitions):
        fresh.coord.unload(shard, 0)
        fresh.coord.begin_loading(shard)
    for shard, key, value in log:
        fresh.coord.replay(shard, key, value)
    for shard in range(fresh.cfg.offsets_topic_num_partitions):
        fresh.apply(fresh.coord.finish_loading(shard, now))
    return fresh


def following(log: list) -> Harness:
    """Every shard FOLLOWING, replayed record by record (as the follower's hook does)."""
    f = Harness()
    for shard in range(f.cfg.offsets_topic_num_partitions):
        f.apply(f.coord.unload(shard, 0))
        f.coord.begin_following(shard)
    for shard, key, value in log:
        f.coord.replay_many(shard, [(key, value)], lambda k, e: (_ for _ in ()).throw(e))
    return f


def test_a_following_shard_answers_not_coordinator_and_runs_no_timer():
    src = source_log()
    f = following(src.log)
    shard = f.coord.shard_for("g1")
    assert f.coord.shard_status(shard) is ShardStatus.FOLLOWING
    assert f.error(f.join("g1")) == Err.NOT_COORDINATOR
    assert f.error(f.heartbeat("g1", 1, "m")) == Err.NOT_COORDINATOR  # not the blind answer of a load
    commit = f.commit("g1", 1, "m", {("t", 0): 5})
    assert f[commit]["topics"][0]["partitions"][0]["error_code"] == Err.NOT_COORDINATOR
    fetch = f.send(FETCH, 7, {"group_id": "g1", "topics": None, "require_stable": False})
    assert f.error(fetch) == Err.NOT_COORDINATOR
    assert f[f.send(DESCRIBE, 5, {"groups": ["g1"]})]["groups"][0]["error_code"] == Err.NOT_COORDINATOR
    listed = f[f.send(LIST, 4, {"states_filter": []})]
    assert listed == {"error_code": 0, "groups": []}  # not LOAD_IN_PROGRESS: nothing is loading
    assert f.coord.groups() == [] and f.coord.committed_offsets("g1") == {}
    assert f.coord.next_deadline() is None  # no session, rebalance or retention timer for a follower
    assert f.log == []  # and it wrote nothing


def test_a_follower_leads_at_once_with_the_state_of_a_fresh_load():
    src = source_log()
    f = following(src.log)
    for shard in range(f.cfg.offsets_topic_num_partitions):
        f.apply(f.coord.finish_loading(shard, 5_000))
    expected = loaded(src.log, 5_000)
    assert state(f) == state(expected) == state(src)
    assert set(state(f)) == {"g1", "g2", "simple"}
    # the members' sessions start when it leads, as after a load
    assert f.coord.next_deadline() == expected.coord.next_deadline() <= 5_000 + 10_000
    gen = f.coord.group("g1").generation
    lead = f.coord.group("g1").leader
    assert f.error(f.heartbeat("g1", gen, lead)) == 0
    assert f.fetch("g1", {"t": [1]})[("t", 1)]["committed_offset"] == 250


def test_replay_in_pieces_after_a_prefix_equals_a_fresh_load():
    """The follower replays the log as it grows, in uneven pieces: same state as replaying it at once."""
    src = source_log()
    f = Harness()
    for shard in range(f.cfg.offsets_topic_num_partitions):
        f.apply(f.coord.unload(shard, 0))
        f.coord.begin_following(shard)
    records = src.log
    cuts = [0, 1, 2, 5, 9, len(records)]
    for a, b in itertools.pairwise(cuts):
        by_shard: dict[int, list] = {}
        for shard, key, value in records[a:b]:
            by_shard.setdefault(shard, []).append((key, value))
        for shard, items in by_shard.items():
            f.coord.replay_many(shard, items, lambda k, e: None)
    for shard in range(f.cfg.offsets_topic_num_partitions):
        f.apply(f.coord.finish_loading(shard, 0))
    assert state(f) == state(loaded(records))


def test_after_a_truncation_the_rebuilt_follower_equals_a_fresh_load_of_the_shorter_log():
    src = source_log()
    doomed_at = len(src.log)
    src.commit("simple", -1, "", {("u", 3): 99})  # written by a deposed leader, cut away later
    src.commit("late", -1, "", {("u", 0): 1})
    f = following(src.log)
    kept = src.log[:doomed_at]
    for shard in range(f.cfg.offsets_topic_num_partitions):  # the runtime's answer to a truncation
        f.coord.begin_following(shard)
    for shard, key, value in kept:
        f.coord.replay(shard, key, value)
    for shard in range(f.cfg.offsets_topic_num_partitions):
        f.apply(f.coord.finish_loading(shard, 0))
    assert state(f) == state(loaded(kept))
    assert f.coord.committed_offsets("simple")[("u", 3)].offset == 7 and f.coord.group("late") is None


def test_a_lost_leadership_answers_parked_requests_and_leaves_an_empty_following_shard(h):
    gen, (lead,) = h.stable_group("g", 1)
    h.commit("g", gen, lead, {("t", 0): 3})
    parked = h.join("g", version=3, client_id="late")  # a rebalance starts: this join waits
    assert not h.answered(parked)
    shard = h.coord.shard_for("g")
    h.apply(h.coord.unload(shard, h.now, following=True))
    assert h.error(parked) == Err.NOT_COORDINATOR
    assert h.coord.shard_status(shard) is ShardStatus.FOLLOWING
    assert h.coord.group("g") is None and h.coord.committed_offsets("g") == {}
    assert h.error(h.heartbeat("g", gen, lead)) == Err.NOT_COORDINATOR
    before = len(h.log)
    h.sleep(60_000)  # no timer of the lost shard fires (no session expiry written)
    assert len(h.log) == before
    # replayed from its log again, it leads with the durable state (not the rebalance in memory)
    for _, key, value in [r for r in h.log if r[0] == shard]:
        h.coord.replay(shard, key, value)
    h.apply(h.coord.finish_loading(shard, h.now))
    assert h.coord.group("g").state == "Stable" and h.coord.group("g").members == (lead,)
    assert h.coord.committed_offsets("g")[("t", 0)].offset == 3


def test_an_active_shard_cannot_begin_following_and_a_not_owned_one_cannot_lead(h):
    shard = h.coord.shard_for("g")
    with pytest.raises(ValueError):
        h.coord.begin_following(shard)  # an ACTIVE shard is unloaded first
    h.apply(h.coord.unload(shard, 0))
    with pytest.raises(ValueError):
        h.coord.finish_loading(shard, 0)  # a NOT_OWNED shard has no replayed state to serve
