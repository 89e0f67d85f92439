"""Deferred target assignment (heartbeat.py ``defer_target``, ``assign_target``, ``finish``): the heartbeats of one
batch leave the group ASSIGNING, the target is computed once for all of them, and each pending heartbeat then
reconciles to it as a lone heartbeat would have. Also ``ConsumerGroup.copy`` (what a reverted batch restores) and
the O(1) assignor counts behind ``preferred_assignor``."""

from __future__ import annotations

from typing import Any

from cg_harness import Driver, assigned  # type: ignore[import-not-found]

from coordinator.core.consumer_group.model import GroupState


def _join_body(member_id: str, topics: list[str], **more: Any) -> dict[str, Any]:
    return {"group_id": "g", "member_id": member_id, "member_epoch": 0, "instance_id": None, "rack_id": None,
            "rebalance_timeout_ms": 300000, "subscribed_topic_names": topics, "subscribed_topic_regex": None,
            "server_assignor": None, "topic_partitions": [], **more}


def _batch_of_joins(d: Driver, ids: list[str]) -> list[Any]:
    """Joins as one batch: each deferred and replayed at once, then one target, then every pending finished."""
    outcomes = [d.apply(d.cg.heartbeat(_join_body(m, ["t"]), 1, d.now, d.topics, defer_target=True)) for m in ids]
    return outcomes


def test_deferred_joins_leave_the_group_assigning_and_one_target_gives_each_its_partitions() -> None:
    d = Driver()
    d.topic("t", 6)
    outcomes = _batch_of_joins(d, ["a", "b", "c"])
    group = d.group()
    assert group.group_epoch == 3 and group.assignment_epoch == 0 and group.state is GroupState.ASSIGNING
    assert not group.targets  # nothing was assigned yet
    assert all(o.pending is not None for o in outcomes)
    target = d.cg.assign_target("g")
    assert d.cg.assign_target("g") == target  # pure: computed from the group as it is
    d.apply(type(outcomes[0])(None, target))
    assert group.assignment_epoch == 3 and group.state is GroupState.RECONCILING
    assert {m: sum(len(ps) for ps in t.values()) for m, t in group.targets.items()} == {"a": 2, "b": 2, "c": 2}
    for o in outcomes:
        records = d.cg.finish("g", o, d.now)
        assert o.pending is None
        d.apply(type(o)(None, records))
        member_id = o.response["member_id"]
        # the response now says what a lone join computed against this target would: epoch 3, its partitions
        assert o.response["member_epoch"] == 3
        got = {tp["topic_id"]: frozenset(tp["partitions"]) for tp in o.response["assignment"]["topic_partitions"]}
        assert got == group.targets[member_id] == group.members[member_id].assigned
    assert group.state is GroupState.STABLE
    # the same records replayed from scratch give the same group (a follower, a restart)
    assert d.replayed_fresh().groups["g"].snapshot() == group.snapshot()


def test_without_deferral_a_join_gets_its_target_at_once() -> None:
    d = Driver()
    d.topic("t", 4)
    out = d.apply(d.cg.heartbeat(_join_body("a", ["t"]), 1, d.now, d.topics))
    assert out.pending is None and d.group().assignment_epoch == 1
    assert out.response["assignment"]["topic_partitions"][0]["partitions"] == [0, 1, 2, 3]


def test_deferred_heartbeat_of_a_member_revoking_gets_its_revocation_after_the_target() -> None:
    d = Driver()
    d.topic("t", 4)
    d.join("a", ["t"])
    assert d.member("a").assigned == assigned(t=[0, 1, 2, 3])
    (o,) = _batch_of_joins(d, ["b"])
    # a's steady heartbeat in the same batch, deferred too
    owned = [{"topic_id": t, "partitions": sorted(ps)} for t, ps in d.member("a").assigned.items()]
    body = {**_join_body("a", ["t"]), "member_epoch": 1, "rebalance_timeout_ms": -1,
            "subscribed_topic_names": None, "topic_partitions": owned}
    oa = d.apply(d.cg.heartbeat(body, 1, d.now, d.topics, defer_target=True))
    assert oa.pending is not None and oa.response["member_epoch"] == 1
    d.apply(type(o)(None, d.cg.assign_target("g")))
    for out in (o, oa):  # finish adds its deadlines to the outcome's (armed once the batch is durable)
        d.apply(type(out)(None, d.cg.finish("g", out, d.now), out.deadlines))
    # a must give two partitions up (still epoch 1, its assignment shrunk); b waits for them (unreleased)
    assert oa.response["member_epoch"] == 1
    assert len(oa.response["assignment"]["topic_partitions"][0]["partitions"]) == 2
    assert d.member("b").assigned == {} and o.response["member_epoch"] == 2
    assert ("rebalance", "g", "a") in d.timers  # a revokes within its rebalance timeout


def test_a_finish_for_a_member_that_moved_on_changes_nothing() -> None:
    d = Driver()
    d.topic("t", 2)
    (o,) = _batch_of_joins(d, ["a"])
    d.apply(d.cg.heartbeat({**_join_body("a", ["t"]), "member_epoch": -1}, 1, d.now, d.topics))  # it left
    assert d.cg.assign_target("g") == []  # no members: nothing to assign
    assert d.cg.finish("g", o, d.now) == []


def test_copy_is_independent_and_keeps_the_counters() -> None:
    d = Driver()
    d.topic("t", 4)
    d.join("a", ["t"], server_assignor="range")
    d.join("b", ["t"])
    group = d.group()
    saved = group.copy()
    assert saved.snapshot() == group.snapshot() and saved.unreconciled == group.unreconciled
    assert saved.assignor_counts == group.assignor_counts == {"range": 1}
    d.settle("a")
    d.settle("b")
    d.join("c", ["t"], server_assignor="uniform")
    assert saved.snapshot() != group.snapshot()
    assert set(saved.members) == {"a", "b"} and saved.assignor_counts == {"range": 1}
    assert group.assignor_counts == {"range": 1, "uniform": 1}
    assert saved.preferred_assignor("uniform", ("uniform", "range")) == "range"


def test_a_target_job_run_elsewhere_gives_the_records_assign_target_gives() -> None:
    d = Driver()
    d.topic("t", 6)
    _batch_of_joins(d, ["a", "b", "c"])
    expected = d.cg.assign_target("g")
    job = d.cg.target_job("g")
    assert job is not None and job.weight == 3 + 6
    assert d.cg.target_records(job, job.run()) == expected
    assert d.cg.is_heavy("g", job.weight) and not d.cg.is_heavy("g", job.weight + 1)
    assert d.cg.is_heavy("g", 3)  # the members alone reach it


def test_a_target_job_is_dropped_when_its_group_was_written_since() -> None:
    d = Driver()
    d.topic("t", 6)
    _batch_of_joins(d, ["a", "b"])
    job = d.cg.target_job("g")
    assert job is not None
    targets = job.run()
    _batch_of_joins(d, ["c"])  # a write of the group after the job was made: its inputs are stale
    assert d.cg.target_records(job, targets) == []
    fresh = d.cg.target_job("g")
    assert fresh is not None and set(fresh.specs) == {"a", "b", "c"}
    assert d.cg.target_records(fresh, fresh.run()) == d.cg.assign_target("g")


def test_no_job_for_a_group_with_its_target_in_place() -> None:
    d = Driver()
    d.topic("t", 2)
    outcomes = _batch_of_joins(d, ["a"])
    d.apply(type(outcomes[0])(None, d.cg.assign_target("g")))
    assert d.cg.target_job("g") is None and d.cg.target_job("missing") is None
    assert not d.cg.is_heavy("missing", 1) and d.cg.is_heavy("missing", 0)
