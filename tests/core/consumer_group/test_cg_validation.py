"""Validation and identity (Kafka's GroupMetadataManagerTest): each refused request gets Kafka's code and
message, and writes nothing."""

from __future__ import annotations

import pytest
from cg_harness import Driver, tps

from coordinator.core.consumer_group import ConsumerGroupConfig

INVALID, UNKNOWN_MEMBER, FENCED_EPOCH, NOT_FOUND, MAX_SIZE, UNSUPPORTED_ASSIGNOR = 42, 25, 110, 69, 81, 112
JOIN = {"member_epoch": 0, "rebalance_timeout_ms": 5000, "subscribed_topic_names": ["t"], "topic_partitions": []}

CASES = [
    ("v1 empty member id", 1, {**JOIN, "member_id": ""}, "MemberId can't be empty."),
    ("heartbeat, empty member id", 0, {"member_id": "", "member_epoch": 1}, "MemberId can't be empty."),
    ("leave, empty member id", 0, {"member_id": "", "member_epoch": -1}, "MemberId can't be empty."),
    ("empty group id", 1, {**JOIN, "member_id": "m", "group_id": ""}, "GroupId can't be empty."),
    ("empty instance id", 1, {**JOIN, "member_id": "m", "instance_id": ""}, "InstanceId can't be empty."),
    ("empty rack id", 1, {**JOIN, "member_id": "m", "rack_id": ""}, "RackId can't be empty."),
    ("join without rebalance timeout", 1, {**JOIN, "member_id": "m", "rebalance_timeout_ms": -1},
     "RebalanceTimeoutMs must be provided in first request."),
    ("join with null owned partitions", 1, {**JOIN, "member_id": "m", "topic_partitions": None},
     "TopicPartitions must be empty when (re-)joining."),
    ("join owning partitions", 1, {**JOIN, "member_id": "m", "topic_partitions": tps(t=[0])},
     "TopicPartitions must be empty when (re-)joining."),
    ("join without subscription", 1, {**JOIN, "member_id": "m", "subscribed_topic_names": None},
     "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."),
    ("static leave without instance id", 1, {"member_id": "m", "member_epoch": -2}, "InstanceId can't be null."),
    ("epoch below -2", 1, {"member_id": "m", "member_epoch": -3}, "MemberEpoch is invalid."),
]


@pytest.mark.parametrize(("case", "version", "request_", "message"), CASES, ids=[c[0] for c in CASES])
def test_consumer_heartbeat_request_validation(case: str, version: int, request_: dict, message: str) -> None:
    d = Driver()
    r = d.send(version=version, **request_)
    assert (r["error_code"], r["error_message"]) == (INVALID, message)
    assert r["member_id"] is None and r["assignment"] is None
    assert d.log == [] and d.cg.groups == {}


def test_joining_with_an_empty_list_or_empty_regex_is_accepted() -> None:
    d = Driver()
    d.topic("t", 2)
    assert d.join("m1", [])["error_code"] == 0
    r = d.send(member_id="m2", member_epoch=0, rebalance_timeout_ms=5000, subscribed_topic_regex="",
               topic_partitions=[])
    assert r["error_code"] == 0 and r["assignment"] == {"topic_partitions": []}
    assert d.member("m2").subscribed_topic_regex is None  # "" clears the regex


def test_unsupported_assignor() -> None:
    r = Driver().join("m", ["t"], server_assignor="sticky")
    assert r["error_code"] == UNSUPPORTED_ASSIGNOR
    assert r["error_message"] == "ServerAssignor sticky is not supported. Supported assignors: uniform, range."


def test_member_id_generation() -> None:
    d = Driver()
    d.topic("t", 1)
    r = d.join("", ["t"], version=0)
    assert r["error_code"] == 0 and r["member_id"] == "gen-0" and r["member_epoch"] == 1
    assert "gen-0" in d.group().members
    # v1: the client generates its id, an empty one is refused
    assert d.join("", ["t"], version=1)["error_code"] == INVALID


def test_unknown_member_id_joins_consumer_group() -> None:
    d = Driver()
    r = d.beat("m", 1, None)
    assert (r["error_code"], r["error_message"]) == (NOT_FOUND, "Consumer group g not found.")
    d.topic("t", 1)
    d.join("m", ["t"])
    r = d.beat("other", 1, None)
    assert (r["error_code"], r["error_message"]) == (UNKNOWN_MEMBER, "Member other is not a member of group g.")


def test_consumer_group_member_epoch_validation() -> None:
    d = Driver()
    d.topic("t", 4)
    d.join("m", ["t"])
    assert d.member("m").member_epoch == 1
    r = d.beat("m", 2, tps(t=[0, 1, 2, 3]))
    assert r["error_code"] == FENCED_EPOCH
    assert r["error_message"].startswith("The consumer group member has a greater member epoch (2)")
    # move the member to epoch 2 (a second member joins; m revokes two partitions)
    d.join("n", ["t"])
    d.settle("m")
    d.settle("m")
    assert (d.member("m").member_epoch, d.member("m").previous_member_epoch) == (2, 1)
    held = d.member("m").assigned
    # the previous epoch with a subset of the assignment: the response was lost, accepted
    owned = [{"topic_id": t, "partitions": sorted(ps)} for t, ps in held.items()]
    assert d.beat("m", 1, owned)["error_code"] == 0
    # the previous epoch owning something else, or not saying: fenced
    other = sorted(set(range(4)) - set(next(iter(held.values()))))
    assert d.beat("m", 1, tps(t=other))["error_code"] == FENCED_EPOCH
    assert d.beat("m", 1, None)["error_code"] == FENCED_EPOCH
    assert d.beat("m", 0, None)["error_code"] == INVALID  # epoch 0 is a join: owned must be []


def test_fenced_member_rejoins_with_epoch_zero_and_same_id() -> None:
    d = Driver()
    d.topic("t", 2)
    d.join("m", ["t"])
    assert d.beat("m", 7, None)["error_code"] == FENCED_EPOCH
    r = d.join("m", ["t"])  # KAFKA-19233: the same id, epoch 0, nothing owned
    assert r["error_code"] == 0 and r["member_epoch"] == 1 and r["assignment"] == {"topic_partitions": tps(t=[0, 1])}


def test_new_member_is_rejected_with_maximum_members_is_reached() -> None:
    d = Driver(ConsumerGroupConfig(max_size=2))
    d.topic("t", 2)
    d.join("a", ["t"])
    d.join("b", ["t"])
    r = d.join("c", ["t"])
    assert (r["error_code"], r["error_message"]) == (
        MAX_SIZE, "The consumer group has reached its maximum capacity of 2 members.")
    assert "c" not in d.group().members
    assert d.settle("a")["error_code"] == 0  # existing members are never refused
    assert d.join("", ["t"], version=0)["error_code"] == MAX_SIZE
