"""Online migration classic <-> consumer (core/consumer_group/migration.py), in both directions; test names follow
Kafka's GroupMetadataManagerTest cases. Records go through the byte codec and replay (cg_harness.Driver)."""

from __future__ import annotations

import pytest

from client.consumer_protocol import (
    Assignment,
    Subscription,
    TopicPartition,
    decode_assignment,
    encode_assignment,
    encode_subscription,
)
from coordinator.core.consumer_group import ConsumerGroupConfig
from coordinator.core.consumer_group import records as R
from coordinator.core.consumer_group.migration import (
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    MEMBER_ID_REQUIRED,
    REBALANCE_IN_PROGRESS,
    MigrationPolicy,
    classic_heartbeat,
    classic_join,
    classic_leave,
    classic_sync,
    parse_policy,
    upgrade,
)
from coordinator.core.consumer_group.model import Err, MemberState
from coordinator.core.group import STABLE, Group
from coordinator.core.member import Member as ClassicMember

from .cg_harness import Driver, assigned

TP = TopicPartition


def sub(*topics: str, owned: tuple[TopicPartition, ...] = (), version: int = 3) -> bytes:
    return encode_subscription(Subscription(tuple(topics), None, owned, -1, None, version))


def classic_group(members: dict[str, list[TopicPartition]], generation: int = 3, protocol_type: str = "consumer",
                  topics: tuple[str, ...] = ("foo",), session_ms: int = 10000) -> Group:
    group = Group("g", STABLE, 0, generation, protocol_type, "range", None)
    for member_id, owned in members.items():
        group.add(ClassicMember(member_id, None, "kafka-python", "/10.0.0.1", 30000, session_ms, protocol_type,
                                [("range", sub(*topics)), ("roundrobin", sub(*topics))],
                                encode_assignment(Assignment(tuple(owned)))))
    return group


def upgraded_driver(policy: str = "bidirectional", **config: int) -> tuple[Driver, dict]:
    """Classic members a (foo-0,1,2) and b (foo-3,4,5) at generation 3; consumer member gen-0 joins."""
    d = Driver(ConsumerGroupConfig(migration_policy=policy, **config))
    d.topic("foo", 6)
    group = classic_group({"a": [TP("foo", 0), TP("foo", 1), TP("foo", 2)],
                           "b": [TP("foo", 3), TP("foo", 4), TP("foo", 5)]})
    request = {"group_id": "g", "member_id": "c1", "member_epoch": 0, "instance_id": None, "rack_id": None,
               "rebalance_timeout_ms": 5000, "subscribed_topic_names": ["foo"], "subscribed_topic_regex": None,
               "server_assignor": "uniform", "topic_partitions": []}
    out = d.apply(upgrade(d.cg, group, request, 1, d.now, d.topics))
    assert out.response is not None
    return d, out.response


def classic_join_request(member_id: str = "", owned: tuple[TopicPartition, ...] = (),
                         protocols: tuple[str, ...] = ("range", "roundrobin"), session_ms: int = 10000) -> dict:
    return {"group_id": "g", "member_id": member_id, "group_instance_id": None, "session_timeout_ms": session_ms,
            "rebalance_timeout_ms": 30000, "protocol_type": "consumer",
            "protocols": [{"name": n, "metadata": sub("foo", owned=owned)} for n in protocols]}


# ---------------------------------------------------------------- the policy

@pytest.mark.parametrize(("name", "policy"), [("bidirectional", MigrationPolicy.BIDIRECTIONAL),
                                              ("UPGRADE", MigrationPolicy.UPGRADE),
                                              ("Downgrade", MigrationPolicy.DOWNGRADE),
                                              ("disabled", MigrationPolicy.DISABLED), ("both", MigrationPolicy.DISABLED),
                                              (None, MigrationPolicy.DISABLED)])
def test_migration_policy_parse(name: str | None, policy: MigrationPolicy) -> None:
    assert parse_policy(name) is policy
    assert policy.upgrade_enabled == (policy in (MigrationPolicy.UPGRADE, MigrationPolicy.BIDIRECTIONAL))
    assert policy.downgrade_enabled == (policy in (MigrationPolicy.DOWNGRADE, MigrationPolicy.BIDIRECTIONAL))


# ---------------------------------------------------------------- upgrade

def test_consumer_group_heartbeat_with_stable_classic_group() -> None:
    d, response = upgraded_driver()
    assert response["error_code"] == 0 and response["member_id"] == "c1"
    kinds = [type(r.key).__name__ for r in d.log]
    # the conversion (MemberMetadata x2, Metadata, Target x2, TargetMetadata, Current x2), then the join
    assert kinds[:8] == ["MemberMetadataKey", "MemberMetadataKey", "MetadataKey", "TargetAssignmentMemberKey",
                         "TargetAssignmentMemberKey", "TargetAssignmentMetadataKey", "CurrentAssignmentKey",
                         "CurrentAssignmentKey"]
    assert d.log[2].value == R.MetadataValue(3) and d.log[5].value == R.TargetAssignmentMetadataValue(3)
    g = d.group()
    assert g.group_epoch == 4 and g.assignment_epoch == 4  # the joiner bumped the converted epoch 3
    a = d.member("a")
    assert a.classic == R.ClassicMemberMetadata(10000, (("range", sub("foo")), ("roundrobin", sub("foo"))))
    assert a.member_epoch == 3 and a.subscribed_topic_names == ("foo",) and a.client_id == "kafka-python"
    # the new target takes partitions from both classic members, who must revoke them
    assert a.state is MemberState.UNREVOKED_PARTITIONS or d.group().target("a") != assigned(foo=[0, 1, 2])
    assert sum(len(ps) for t in g.targets.values() for ps in t.values()) == 6
    # sessions: each converted member's own classic timeout, the joiner the consumer one
    assert d.timers[("session", "g", "a")][0] == 10000
    assert d.timers[("session", "g", "c1")][0] == 45000


@pytest.mark.parametrize("case", ["policy", "downgrade-only", "protocol-type", "size", "epoch"])
def test_consumer_group_heartbeat_with_non_empty_classic_group(case: str) -> None:
    d = Driver(ConsumerGroupConfig(migration_policy={"policy": "disabled", "downgrade-only": "downgrade"}.get(
        case, "bidirectional"), max_size=1 if case == "size" else 2**31 - 1))
    d.topic("foo", 6)
    group = classic_group({"a": [TP("foo", 0)], "b": [TP("foo", 1)]},
                          protocol_type="other" if case == "protocol-type" else "consumer")
    request = {"group_id": "g", "member_id": "m", "member_epoch": 5 if case == "epoch" else 0,
               "rebalance_timeout_ms": 5000, "subscribed_topic_names": ["foo"], "topic_partitions": []}
    out = upgrade(d.cg, group, request, 1, d.now, d.topics)
    assert out.records == [] and out.response is not None
    assert out.response["error_code"] == Err.GROUP_ID_NOT_FOUND
    assert out.response["error_message"] == "Group g is not a consumer group."


def test_upgrade_with_malformed_embedded_protocol() -> None:
    d = Driver()
    d.topic("foo", 6)
    group = classic_group({"a": [TP("foo", 0)]})
    group.members["a"].assignment = b"\x00\x03\xff"
    request = {"group_id": "g", "member_id": "m", "member_epoch": 0, "rebalance_timeout_ms": 5000,
               "subscribed_topic_names": ["foo"], "topic_partitions": []}
    out = upgrade(d.cg, group, request, 1, d.now, d.topics)
    assert out.records == [] and out.response["error_code"] == Err.GROUP_ID_NOT_FOUND  # type: ignore[index]


# ---------------------------------------------------------------- classic members inside a consumer group

def test_joining_consumer_group_with_new_dynamic_member() -> None:
    d, _ = upgraded_driver()
    out = classic_join(d.cg, d.group(), classic_join_request(), 5, d.now, d.topics)
    assert out.records == [] and out.response["error_code"] == MEMBER_ID_REQUIRED  # type: ignore[index]
    member_id = out.response["member_id"]  # type: ignore[index]
    out = d.apply(classic_join(d.cg, d.group(), classic_join_request(member_id), 5, d.now, d.topics))
    r = out.response
    assert r is not None and r["error_code"] == 0 and r["member_id"] == member_id
    assert r["generation_id"] == d.member(member_id).member_epoch == d.group().group_epoch == 5
    assert r["protocol_name"] == "range" and r["leader"] == "" and r["members"] == []
    assert d.member(member_id).classic is not None
    assert d.timers[("session", "g", member_id)][0] == d.now + 10000


def test_joining_consumer_group_throws_exception_if_protocol_is_not_supported() -> None:
    d, _ = upgraded_driver()
    out = classic_join(d.cg, d.group(), classic_join_request("x", protocols=("sticky",)), 5, d.now, d.topics)
    assert out.records == [] and out.response["error_code"] == INCONSISTENT_GROUP_PROTOCOL  # type: ignore[index]


def test_joining_consumer_group_throws_exception_if_group_over_max_size() -> None:
    d, _ = upgraded_driver(max_size=3)
    out = classic_join(d.cg, d.group(), classic_join_request("x"), 5, d.now, d.topics)
    assert out.response["error_code"] == Err.GROUP_MAX_SIZE_REACHED  # type: ignore[index]


def _rejoin(d: Driver, member_id: str) -> dict:
    """A classic member's eager rejoin (owns nothing) and sync; returns the sync answer."""
    out = d.apply(classic_join(d.cg, d.group(), classic_join_request(member_id), 5, d.now, d.topics))
    assert out.response is not None and out.response["error_code"] == 0
    response, deadlines = classic_sync(d.cg, d.group(), {"group_id": "g", "member_id": member_id,
                                                         "generation_id": out.response["generation_id"],
                                                         "protocol_type": "consumer", "protocol_name": "range"},
                                       d.now)
    return response


def test_reconciliation_in_joining_consumer_group_with_eager_protocol() -> None:
    d, response = upgraded_driver()
    g = d.group()
    # the consumer member waits for partitions the classic members still hold
    assert response["assignment"]["topic_partitions"] == []
    for member_id in ("a", "b"):
        err, _ = classic_heartbeat(d.cg, g, {"member_id": member_id, "generation_id": 3}, d.now)
        assert err == REBALANCE_IN_PROGRESS  # they must rejoin to revoke
        sync = _rejoin(d, member_id)
        assert sync["error_code"] == 0
        owned = decode_assignment(sync["assignment"]).assigned_partitions
        assert {p for _, p in owned} == set(d.group().target(member_id)[d.topics["foo"].topic_id])
        assert d.member(member_id).member_epoch == d.group().group_epoch
        err, _ = classic_heartbeat(d.cg, d.group(), {"member_id": member_id,
                                                     "generation_id": d.member(member_id).member_epoch}, d.now)
        assert err == 0
    # every partition is free for the consumer member now: its next heartbeat takes its target
    r = d.send(member_id="c1", member_epoch=response["member_epoch"], topic_partitions=[])
    got = {p for tp in r["assignment"]["topic_partitions"] for p in tp["partitions"]}
    assert got == set(d.group().target("c1")[d.topics["foo"].topic_id]) and len(got) == 2
    owners = [p for m in d.group().members.values() for ps in m.assigned.values() for p in ps]
    assert sorted(owners) == [0, 1, 2, 3, 4, 5]  # every record once


def test_reconciliation_in_joining_consumer_group_with_cooperative_protocol() -> None:
    d, _ = upgraded_driver()
    target = sorted(d.group().target("a")[d.topics["foo"].topic_id])
    # a cooperative member rejoins still owning what it keeps
    owned = tuple(TP("foo", p) for p in target)
    out = d.apply(classic_join(d.cg, d.group(), classic_join_request("a", owned=owned), 5, d.now, d.topics))
    assert out.response["error_code"] == 0  # type: ignore[index]
    assert d.member("a").state is MemberState.STABLE and sorted(d.member("a").assigned[d.topics["foo"].topic_id]) \
        == target


@pytest.mark.parametrize(("request_", "error"), [
    ({"member_id": "zz", "generation_id": 3}, Err.UNKNOWN_MEMBER_ID),
    ({"member_id": "a", "generation_id": 2}, ILLEGAL_GENERATION),
    ({"member_id": "c1", "generation_id": 4}, Err.UNKNOWN_MEMBER_ID),
], ids=["unknown-member", "illegal-generation", "member-not-using-classic-protocol"])
def test_classic_group_heartbeat_to_consumer_group_errors(request_: dict, error: int) -> None:
    d, _ = upgraded_driver()
    err, deadlines = classic_heartbeat(d.cg, d.group(), request_, d.now)
    assert err == error and deadlines == []


def test_classic_group_heartbeat_to_consumer_group_maintains_session() -> None:
    d, _ = upgraded_driver()
    d.now = 7000
    _, deadlines = classic_heartbeat(d.cg, d.group(), {"member_id": "a", "generation_id": 3}, d.now)
    assert [(x.kind, x.at_ms) for x in deadlines] == [("session", 17000)]


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_classic_group_sync_to_consumer_group_with_all_consumer_protocol_versions(version: int) -> None:
    d, _ = upgraded_driver()
    request = classic_join_request("x")
    request["protocols"] = [{"name": "range", "metadata": sub("foo", version=version)}]
    out = d.apply(classic_join(d.cg, d.group(), request, 5, d.now, d.topics))
    sync, _ = classic_sync(d.cg, d.group(), {"member_id": "x", "generation_id": out.response["generation_id"],  # type: ignore
                                             "protocol_type": "consumer", "protocol_name": "range"}, d.now)
    assert sync["error_code"] == 0 and decode_assignment(sync["assignment"]).version == version


def test_classic_group_sync_to_consumer_group_errors() -> None:
    d, _ = upgraded_driver()
    g = d.group()
    assert classic_sync(d.cg, g, {"member_id": "a", "generation_id": 2}, 0)[0]["error_code"] == ILLEGAL_GENERATION
    assert classic_sync(d.cg, g, {"member_id": "a", "generation_id": 3, "protocol_name": "roundrobin"},
                        0)[0]["error_code"] == INCONSISTENT_GROUP_PROTOCOL
    # epoch bumped by the joiner and "a" is not revoking yet: rejoin first
    if d.member("a").state is not MemberState.UNREVOKED_PARTITIONS:
        assert classic_sync(d.cg, g, {"member_id": "a", "generation_id": 3}, 0)[0]["error_code"] == REBALANCE_IN_PROGRESS


def test_consumer_group_member_using_classic_protocol_batch_leave_group() -> None:
    d, _ = upgraded_driver()
    epoch = d.group().group_epoch
    out = d.apply(classic_leave(d.cg, d.group(), {"group_id": "g", "members": [
        {"member_id": "a"}, {"member_id": "b"}, {"member_id": "c1"}]}, 3, d.topics))
    assert [m["error_code"] for m in out.response["members"]] == [0, 0, Err.UNKNOWN_MEMBER_ID]  # type: ignore
    assert set(d.group().members) == {"c1"} and d.group().group_epoch == epoch + 1


# ---------------------------------------------------------------- downgrade

def test_last_consumer_protocol_member_leaving_consumer_group() -> None:
    d, response = upgraded_driver()
    epoch = d.group().group_epoch
    out = d.cg.heartbeat({"group_id": "g", "member_id": "c1", "member_epoch": -1}, 1, d.now, d.topics)
    assert out.downgrade is not None and out.response["member_epoch"] == -1  # type: ignore[index]
    d.apply(out)
    assert "g" not in d.cg.groups  # every consumer record tombstoned
    value = out.downgrade.value
    assert value.protocol_type == "consumer" and value.generation == epoch and value.protocol == "range"
    assert value.leader == "a" and [m.member_id for m in value.members] == ["a", "b"]
    for m in value.members:
        assert m.session_timeout == 10000 and m.subscription == sub("foo")
        parts = {p for _, p in decode_assignment(m.assignment).assigned_partitions}
        assert len(parts) == 2  # its target in the group it leaves
    assert out.downgrade.protocols["a"] == (("range", sub("foo")), ("roundrobin", sub("foo")))


def test_last_consumer_protocol_member_session_timeout_in_consumer_group() -> None:
    d, _ = upgraded_driver()
    out = d.cg.expire_session("g", "c1", 50000, d.topics)
    assert out.downgrade is not None and out.downgrade.value.current_state_timestamp == 50000


@pytest.mark.parametrize("case", ["policy-upgrade-only", "classic-max-size"])
def test_no_conversion_when_size_exceeds_classic_max_group_size(case: str) -> None:
    if case == "classic-max-size":
        d, _ = upgraded_driver(classic_max_size=1)
    else:
        d, _ = upgraded_driver("upgrade")
    out = d.apply(d.cg.heartbeat({"group_id": "g", "member_id": "c1", "member_epoch": -1}, 1, d.now, d.topics))
    assert out.downgrade is None and set(d.group().members) == {"a", "b"}


def test_classic_member_leaving_keeps_consumer_group() -> None:
    d, _ = upgraded_driver()
    out = d.cg.expire_session("g", "a", 50000, d.topics)
    assert out.downgrade is None  # a consumer-protocol member stays
