"""Epochs, targets and reconciliation; timers; static membership; describe (Kafka's
GroupMetadataManagerTest stories, told through the Driver: records are encoded, decoded and replayed)."""

from __future__ import annotations

from cg_harness import Driver, assigned, topic_id, tps

from coordinator.core.consumer_group import records as R
from coordinator.core.consumer_group.assignors import AssignorError
from coordinator.core.consumer_group.model import GroupState, MemberState

FENCED_EPOCH, UNKNOWN_MEMBER, FENCED_INSTANCE, UNRELEASED_INSTANCE_ID = 110, 25, 82, 111


def kinds(d: Driver, since: int) -> list[str]:
    return [type(r.key).__name__.removesuffix("Key") + ("" if r.value is not None else "~")
            for r in d.log[since:]]


# ---------------------------------------------------------------- epochs and targets

def test_member_joins_empty_consumer_group() -> None:
    d = Driver()
    d.topic("foo", 6)
    r = d.join("m", ["foo"], rack_id="rack-1")
    assert r == {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "member_id": "m",
                 "member_epoch": 1, "heartbeat_interval_ms": 5000,
                 "assignment": {"topic_partitions": tps(foo=range(6))}}
    assert kinds(d, 0) == ["MemberMetadata", "PartitionMetadata", "Metadata", "TargetAssignmentMember",
                           "TargetAssignmentMetadata", "CurrentAssignment"]
    g = d.group()
    assert (g.group_epoch, g.assignment_epoch, g.state) == (1, 1, GroupState.STABLE)
    m = d.member("m")
    assert (m.rack_id, m.client_id, m.client_host, m.rebalance_timeout_ms) == ("rack-1", "client", "/127.0.0.1", 300000)
    assert g.subscription_metadata == {"foo": R.TopicMetadata(topic_id("foo"), "foo", 6)}


def test_new_joining_member_triggers_new_target_assignment() -> None:
    d = Driver()
    d.topic("foo", 6)
    d.join("a", ["foo"])
    start = len(d.log)
    r = d.join("b", ["foo"])
    assert r["member_epoch"] == 2 and r["assignment"] == {"topic_partitions": []}  # a still holds them all
    assert kinds(d, start) == ["MemberMetadata", "Metadata", "TargetAssignmentMember", "TargetAssignmentMember",
                               "TargetAssignmentMetadata", "CurrentAssignment"]
    g = d.group()
    assert sorted(len(t[topic_id("foo")]) for t in g.targets.values()) == [3, 3]
    assert d.member("b").state is MemberState.UNRELEASED_PARTITIONS


def test_updating_subscription_triggers_new_target_assignment() -> None:
    d = Driver()
    d.topic("foo", 2)
    d.topic("bar", 2)
    d.join("a", ["foo"])
    r = d.beat("a", 1, tps(foo=[0, 1]), subscribed_topic_names=["foo", "bar"], rebalance_timeout_ms=1000)
    assert d.group().group_epoch == 2 and d.group().assignment_epoch == 2
    assert r["member_epoch"] == 2 and r["assignment"] == {"topic_partitions": tps(foo=[0, 1], bar=[0, 1])}
    # the same subscription in another order is no change: no record at all
    start = len(d.log)
    d.beat("a", 2, None, subscribed_topic_names=["bar", "foo"])
    assert kinds(d, start) == []


def test_leaving_member_bumps_group_epoch() -> None:
    d = Driver()
    d.topic("foo", 2)
    d.join("a", ["foo"])
    d.join("b", ["foo"])
    start = len(d.log)
    r = d.send(member_id="b", member_epoch=-1)
    assert (r["error_code"], r["member_id"], r["member_epoch"]) == (0, "b", -1)
    assert kinds(d, start) == ["CurrentAssignment~", "TargetAssignmentMember~", "MemberMetadata~", "Metadata"]
    assert d.group().group_epoch == 3 and "b" not in d.group().members
    assert ("session", "g", "b") not in d.timers
    # the next heartbeat of a computes the target without b
    assert d.settle("a")["member_epoch"] == 3


def test_reconciliation_process() -> None:
    d = Driver()
    d.topic("foo", 6)
    d.join("a", ["foo"])
    d.join("b", ["foo"])
    d.settle("a")
    assert d.member("a").state is MemberState.UNREVOKED_PARTITIONS and d.member("a").member_epoch == 1
    # b waits for the partitions a still holds
    assert d.settle("b")["assignment"] is None and d.member("b").state is MemberState.UNRELEASED_PARTITIONS
    d.join("c", ["foo"])  # epoch 3 while a is still revoking: c gets what is free (nothing)
    assert d.member("c").assigned == {}
    # a revokes, but the epoch-3 target takes one more from it: epoch + 1, revoking again
    r = d.settle("a")
    assert (d.member("a").member_epoch, d.member("a").state) == (2, MemberState.UNREVOKED_PARTITIONS)
    assert r["member_epoch"] == 2 and len(r["assignment"]["topic_partitions"][0]["partitions"]) == 2
    r = d.settle("a")
    assert (d.member("a").member_epoch, d.member("a").state) == (3, MemberState.STABLE)
    for m in ("b", "c", "a", "b", "c", "a", "b", "c"):
        d.settle(m)
    g = d.group()
    assert g.state is GroupState.STABLE
    owners = [p for m in g.members.values() for p in m.assigned[topic_id("foo")]]
    assert sorted(owners) == list(range(6)) and all(len(m.assigned[topic_id("foo")]) == 2 for m in g.members.values())


def test_consumer_group_heartbeat_full_response() -> None:
    d = Driver()
    d.topic("foo", 2)
    d.join("a", ["foo"])
    assert d.beat("a", 1, tps(foo=[0, 1]))["assignment"] is None  # not full, nothing changed
    full = d.beat("a", 1, tps(foo=[0, 1]), rebalance_timeout_ms=1000, subscribed_topic_names=["foo"])
    assert full["assignment"] == {"topic_partitions": tps(foo=[0, 1])}


def test_consumer_group_states() -> None:
    d = Driver()
    d.topic("foo", 2)
    d.join("a", ["foo"])
    assert d.group().state is GroupState.STABLE
    d.join("b", ["foo"])
    assert d.group().state is GroupState.RECONCILING
    d.topic("foo", 4)  # more partitions: the next heartbeat bumps the epoch
    g = d.group()
    g.group_epoch += 1  # (a bumped epoch before its target: what ASSIGNING means)
    assert g.state is GroupState.ASSIGNING
    g.group_epoch -= 1
    d.send(member_id="a", member_epoch=-1)
    d.send(member_id="b", member_epoch=-1)
    assert d.group().state is GroupState.EMPTY


def test_partition_assignor_exception_on_regular_heartbeat() -> None:
    def failing(members, partitions):  # type: ignore[no-untyped-def]
        raise AssignorError("boom")

    d = Driver(assignors={"uniform": failing, "range": failing})
    d.topic("foo", 2)
    r = d.join("a", ["foo"])
    assert r["error_code"] == -1 and r["member_id"] is None
    assert d.log == []  # nothing of the heartbeat is written


def test_topic_created_deleted_or_grown_bumps_on_next_heartbeat() -> None:
    d = Driver()
    d.topic("foo", 2)
    d.join("a", ["foo", "bar"])  # bar does not exist yet
    assert d.member("a").assigned == assigned(foo=[0, 1])
    d.topic("bar", 1)
    r = d.settle("a")
    assert d.group().group_epoch == 2 and r["assignment"] == {"topic_partitions": tps(foo=[0, 1], bar=[0])}
    d.topic("foo", 3)
    r = d.settle("a")
    assert d.group().group_epoch == 3 and r["assignment"] == {"topic_partitions": tps(foo=[0, 1, 2], bar=[0])}
    del d.topics["bar"]
    d.settle("a")
    assert d.group().group_epoch == 4 and d.member("a").assigned == assigned(foo=[0, 1, 2])
    assert "bar" not in d.group().subscription_metadata


def test_subscription_metadata_refreshed_after_group_is_loaded() -> None:
    d = Driver()
    d.topic("foo", 2)
    d.join("a", ["foo"])
    loaded = d.replayed_fresh()
    assert loaded.groups["g"].snapshot() == d.group().snapshot()
    d.cg = loaded
    d.topic("foo", 4)  # changed while the group was not loaded
    r = d.settle("a")
    assert d.group().group_epoch == 2 and r["assignment"] == {"topic_partitions": tps(foo=range(4))}


def test_regex_only_member_subscribes_to_what_its_regex_resolves_to() -> None:  # test_cg_regex.py: the rest
    d = Driver()
    d.topic("foo", 2)
    r = d.send(member_id="a", member_epoch=0, rebalance_timeout_ms=1000, subscribed_topic_regex="foo.*",
               topic_partitions=[])
    assert r["error_code"] == 0 and r["assignment"] == {"topic_partitions": tps(foo=[0, 1])}
    assert d.member("a").subscribed_topic_regex == "foo.*"
    before = d.group().group_epoch
    d.beat("a", r["member_epoch"], [], subscribed_topic_regex="bar.*")  # a regex change bumps
    assert d.group().group_epoch == before + 1


# ---------------------------------------------------------------- timers

def test_session_timeout_lifecycle() -> None:
    d = Driver()
    d.topic("foo", 1)
    d.join("a", ["foo"])
    assert d.timers[("session", "g", "a")] == (45000, -1)
    d.advance(40000)
    d.settle("a")
    assert d.timers[("session", "g", "a")] == (85000, -1)
    d.send(member_id="a", member_epoch=-1)
    assert ("session", "g", "a") not in d.timers


def test_session_timeout_expiration() -> None:
    d = Driver()
    d.topic("foo", 2)
    d.join("a", ["foo"])
    d.advance(1000)
    d.join("b", ["foo"])
    start = len(d.log)
    assert d.advance(44000) == [("session", "g", "a")]
    assert kinds(d, start) == ["CurrentAssignment~", "TargetAssignmentMember~", "MemberMetadata~", "Metadata"]
    assert "a" not in d.group().members and d.group().group_epoch == 3
    assert d.settle("b")["assignment"] == {"topic_partitions": tps(foo=[0, 1])}


def test_session_timeout_expiration_static_member() -> None:
    d = Driver()
    d.topic("foo", 2)
    d.join("a", ["foo"], instance_id="i")
    assert d.send(member_id="a", member_epoch=-2, instance_id="i")["member_epoch"] == -2
    d.advance(45000)
    assert "a" not in d.group().members and "i" not in d.group().static_members
    assert d.group().group_epoch == 2


def test_rebalance_timeout_lifecycle() -> None:
    d = Driver()
    d.topic("foo", 2)
    d.join("a", ["foo"], rebalance_timeout_ms=12000)
    d.join("b", ["foo"])
    d.settle("a")  # must revoke one partition: armed at a's epoch 1
    assert d.timers[("rebalance", "g", "a")] == (12000, 1)
    d.settle("a")  # revoked: cancelled
    assert ("rebalance", "g", "a") not in d.timers and d.member("a").member_epoch == 2


def test_rebalance_timeout_expiration() -> None:
    d = Driver()
    d.topic("foo", 2)
    d.join("a", ["foo"], rebalance_timeout_ms=12000)
    d.join("b", ["foo"])
    d.settle("a")
    d.advance(5000)
    d.settle("b")  # b keeps its session alive
    assert d.advance(7000) == [("rebalance", "g", "a")]
    assert "a" not in d.group().members
    assert d.settle("b")["assignment"] == {"topic_partitions": tps(foo=[0, 1])}
    # an expiry for an epoch the member has left does nothing
    assert d.cg.expire_rebalance("g", "b", 1, d.now, d.topics).records == []


# ---------------------------------------------------------------- static membership

def test_group_epoch_bump_when_new_static_member_joins() -> None:
    d = Driver()
    d.topic("foo", 2)
    d.join("a", ["foo"], instance_id="i1")
    d.join("b", ["foo"], instance_id="i2")
    assert d.group().group_epoch == 2 and d.group().static_members == {"i1": "a", "i2": "b"}


def test_static_member_gets_back_assignment_upon_rejoin() -> None:
    d = Driver()
    d.topic("foo", 4)
    d.join("a", ["foo"], instance_id="i1")
    d.join("b", ["foo"], instance_id="i2")
    for m in ("a", "b", "a", "b"):
        d.settle(m)
    held = d.member("b").assigned
    epoch = d.group().group_epoch
    d.send(member_id="b", member_epoch=-2, instance_id="i2")
    start = len(d.log)
    r = d.join("b2", ["foo"], instance_id="i2")
    assert kinds(d, start) == ["CurrentAssignment~", "TargetAssignmentMember~", "MemberMetadata~",
                               "MemberMetadata", "TargetAssignmentMember", "CurrentAssignment",
                               "CurrentAssignment"]  # same subscription: no second MemberMetadata
    assert d.group().group_epoch == epoch  # no rebalance
    assert r["member_id"] == "b2" and r["member_epoch"] == epoch
    assert r["assignment"] == {"topic_partitions": [{"topic_id": t, "partitions": sorted(ps)} for t, ps in held.items()]}
    assert d.group().static_members["i2"] == "b2" and "b" not in d.group().members


def test_static_member_rejoins_with_new_subscribed_topics() -> None:
    d = Driver()
    d.topic("foo", 2)
    d.topic("bar", 2)
    d.join("a", ["foo"], instance_id="i1")
    d.send(member_id="a", member_epoch=-2, instance_id="i1")
    r = d.join("a2", ["foo", "bar"], instance_id="i1")
    assert d.group().group_epoch == 2
    assert r["assignment"] == {"topic_partitions": tps(foo=[0, 1], bar=[0, 1])}


def test_no_group_epoch_bump_when_static_member_temporarily_leaves() -> None:
    d = Driver()
    d.topic("foo", 2)
    d.join("a", ["foo"], instance_id="i1")
    start = len(d.log)
    r = d.send(member_id="a", member_epoch=-2, instance_id="i1")
    assert (r["member_id"], r["member_epoch"]) == ("a", -2)
    assert kinds(d, start) == ["CurrentAssignment"]
    assert d.group().group_epoch == 1 and d.member("a").member_epoch == -2
    assert d.member("a").assigned == assigned(foo=[0, 1])  # still reserved


def test_leaving_static_member_bumps_group_epoch() -> None:
    d = Driver()
    d.topic("foo", 2)
    d.join("a", ["foo"], instance_id="i1")
    d.send(member_id="a", member_epoch=-1, instance_id="i1")
    assert d.group().group_epoch == 2 and d.group().members == {} and d.group().static_members == {}


def test_should_throw_unreleased_instance_id_when_new_member_joins_with_in_use_instance_id() -> None:
    d = Driver()
    d.topic("foo", 2)
    d.join("a", ["foo"], instance_id="i1")
    r = d.join("b", ["foo"], instance_id="i1")
    assert r["error_code"] == UNRELEASED_INSTANCE_ID
    assert r["error_message"] == ("Static member b with instance id i1 cannot join the group because the "
                                  "instance id is owned by a member.")


def test_should_throw_unknown_member_id_when_unknown_static_member_joins() -> None:
    d = Driver()
    d.topic("foo", 2)
    d.join("a", ["foo"], instance_id="i1")
    r = d.beat("b", 1, None, instance_id="i2")
    assert (r["error_code"], r["error_message"]) == (UNKNOWN_MEMBER, "Instance id i2 is unknown.")


def test_should_throw_fenced_instance_id_when_static_member_with_different_member_id_joins() -> None:
    d = Driver()
    d.topic("foo", 2)
    d.join("a", ["foo"], instance_id="i1")
    r = d.beat("b", 1, None, instance_id="i1")
    assert (r["error_code"], r["error_message"]) == (FENCED_INSTANCE, "Static member b with instance id i1 was "
                                                                      "fenced by member a.")


def test_consumer_group_member_epoch_validation_for_static_member() -> None:
    d = Driver()
    d.topic("foo", 2)
    d.join("a", ["foo"], instance_id="i1")
    assert d.beat("a", 5, None, instance_id="i1")["error_code"] == FENCED_EPOCH
    assert d.beat("a", 1, tps(foo=[0, 1]), instance_id="i1")["error_code"] == 0


def test_unknown_or_fenced_static_member_leaves() -> None:
    d = Driver()
    d.topic("foo", 2)
    d.join("a", ["foo"], instance_id="i1")
    r = d.send(member_id="a", member_epoch=-2, instance_id="i9")
    assert (r["error_code"], r["error_message"]) == (UNKNOWN_MEMBER, "Instance id i9 is unknown.")
    assert d.send(member_id="b", member_epoch=-1, instance_id="i1")["error_code"] == FENCED_INSTANCE
    assert d.send(member_id="z", member_epoch=-1)["error_code"] == UNKNOWN_MEMBER
    assert d.send(group_id="nope", member_id="z", member_epoch=-1)["error_code"] == 69


# ---------------------------------------------------------------- describe

def test_consumer_group_describe() -> None:
    d = Driver()
    d.topic("foo", 2)
    d.join("a", ["foo"], instance_id="i1", rack_id="r", server_assignor="range")
    [described, missing] = d.cg.describe(["g", "x"], {topic_id("foo"): "foo"})
    assert missing == {"error_code": 69, "error_message": "Group x not found.", "group_id": "x"}
    assert (described["group_state"], described["group_epoch"], described["assignment_epoch"],
            described["assignor_name"]) == ("Stable", 1, 1, "range")
    [m] = described["members"]
    assert (m["member_id"], m["instance_id"], m["rack_id"], m["member_type"]) == ("a", "i1", "r", 1)
    part = [{"topic_id": topic_id("foo"), "topic_name": "foo", "partitions": [0, 1]}]
    assert m["assignment"] == m["target_assignment"] == {"topic_partitions": part}
    # a topic the image no longer names is left out
    assert d.cg.describe(["g"], {})[0]["members"][0]["assignment"] == {"topic_partitions": []}
