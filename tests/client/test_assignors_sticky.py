"""Sticky and cooperative-sticky stories: user data, generations, two-round moves, racks, member order."""

from __future__ import annotations

import pytest
from kafka.coordinator.assignors.sticky.user_data import StickyAssignorUserData

from client.assignors import (
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
)
from client.assignors.sticky import MemberData, decode_sticky_user_data, encode_sticky_user_data
from client.consumer_protocol import Assignment, ConsumerProtocolError, Subscription
from client.consumer_protocol import TopicPartition as TP


def tps(text: str) -> tuple[TP, ...]:
    return tuple(TP(w.split("p")[0], int(w.split("p")[1])) for w in text.split())


def show(result: dict) -> dict[str, str]:
    return {m: " ".join(f"{t}p{p}" for t, p in a.assigned_partitions) for m, a in sorted(result.items())}


# ------------------------------------------------------------------------------------------ user data


def test_sticky_user_data_is_javas_v1_layout() -> None:
    raw = encode_sticky_user_data(tps("t0p0 t0p2 t1p1"), 5)
    assert raw == (
        b"\x00\x00\x00\x02" b"\x00\x02t0" b"\x00\x00\x00\x02" b"\x00\x00\x00\x00" b"\x00\x00\x00\x02"
        b"\x00\x02t1" b"\x00\x00\x00\x01" b"\x00\x00\x00\x01" b"\x00\x00\x00\x05"
    )
    # the same bytes kafka-python's schema produces without its version header
    assert raw == StickyAssignorUserData([("t0", [0, 2]), ("t1", [1])], 5).encode(header=False)
    assert decode_sticky_user_data(raw) == MemberData(tps("t0p0 t0p2 t1p1"), 5)


def test_sticky_user_data_v0_has_no_generation_and_kafka_python_3_header_is_accepted() -> None:
    assert decode_sticky_user_data(encode_sticky_user_data(tps("a0p3"), None)) == MemberData(tps("a0p3"), None)
    kafka_python = StickyAssignorUserData([("t0", [1])], 9).encode()  # b"\x00\x01" + Java layout
    assert decode_sticky_user_data(kafka_python) == MemberData(tps("t0p1"), 9)
    with pytest.raises(ConsumerProtocolError):
        decode_sticky_user_data(b"\x00\x00\x00\x05\x00")


def test_sticky_sends_no_user_data_until_it_has_an_assignment_then_its_assignment_and_generation() -> None:
    a = StickyAssignor()
    assert a.subscription_user_data(["t0"]) is None
    a.on_assignment(Assignment(tps("t0p1 t0p3")), generation=4)
    assert decode_sticky_user_data(a.subscription_user_data(["t0"])) == MemberData(tps("t0p1 t0p3"), 4)


def test_cooperative_sticky_user_data_is_the_int32_generation_like_java() -> None:
    a = CooperativeStickyAssignor()
    assert a.subscription_user_data(["t0"]) == b"\xff\xff\xff\xff"
    a.on_assignment(Assignment(tps("t0p0")), generation=7)
    assert a.subscription_user_data(["t0"]) == b"\x00\x00\x00\x07"


@pytest.mark.parametrize(
    "desc,sub,generation",
    [
        ("v2+ generation field wins", Subscription(("t",), b"\x00\x00\x00\x01", tps("tp0"), 8, version=2), 8),
        ("v1: 4-byte user data is Java's generation", Subscription(("t",), b"\x00\x00\x00\x03", tps("tp0"), version=1), 3),
        ("v3 with generation -1 falls back to user data", Subscription(("t",), b"\x00\x00\x00\x02", tps("tp0")), 2),
        ("librdkafka: sticky-format user data", Subscription(("t",), encode_sticky_user_data(tps("tp0"), 6), tps("tp0"), version=1), 6),
        ("kafka-python: v1, empty user data", Subscription(("t",), b"", tps("tp0"), version=1), None),
    ],
)
def test_cooperative_member_data_sources(desc: str, sub: Subscription, generation: int | None) -> None:
    assert CooperativeStickyAssignor().member_data(sub) == MemberData(tps("tp0"), generation)


# ------------------------------------------------------------------------------------------ generations


def eager_sub(topics: str, owned: str, generation: int | None) -> Subscription:
    return Subscription(tuple(topics.split()), encode_sticky_user_data(tps(owned), generation), version=0)


def test_claims_from_an_older_generation_are_ignored() -> None:
    # A (gen 3) owned t0p0; B still claims t0p0 t0p1 t0p2 from generation 2: B's claims do not count,
    # so B gets no preference and the two free partitions follow the least-loaded rule
    result = StickyAssignor().assign(
        {"t0": 4}, {"A": eager_sub("t0", "t0p0 t0p3", 3), "B": eager_sub("t0", "t0p0 t0p1 t0p2", 2)}
    )
    assert show(result) == {"A": "t0p0 t0p3", "B": "t0p1 t0p2"}


def test_a_partition_claimed_twice_in_the_same_generation_belongs_to_neither() -> None:
    # both claim t0p0 in generation 3: it is unassigned and goes to the least loaded (B has 1, A has 2)
    subs = {"A": eager_sub("t0", "t0p0 t0p1 t0p2", 3), "B": eager_sub("t0", "t0p0 t0p3", 3)}
    assert show(StickyAssignor().assign({"t0": 4}, subs)) == {"A": "t0p1 t0p2", "B": "t0p3 t0p0"}


def test_claims_on_unsubscribed_topics_and_missing_partitions_are_dropped_before_duplicates_are_found() -> None:
    # A (subscribed to t0 only) also claims t1p0 and a t0p9 that does not exist; B rightfully owns t1p0.
    # A's bad claims vanish, B keeps t1p0, and the free t0p0 goes to the first of the equally loaded (A)
    subs = {"A": eager_sub("t0", "t1p0 t0p9 t0p1", 1), "B": eager_sub("t0 t1", "t1p0", 1)}
    assert show(StickyAssignor().assign({"t0": 2, "t1": 1}, subs)) == {"A": "t0p1 t0p0", "B": "t1p0"}


# ------------------------------------------------------------------------------- cooperative two rounds

# t0 has 6 partitions; C0 owns p0-p2 and C1 owns p3-p5 (generation 4); C2 joins.
#                 round 1 (C2 joins)         round 2 (everyone rejoins with round-1 ownership)
#   sticky        C0 p0 p1, C1 p3 p4, C2 p2 p5    -
#   coop-sticky   C0 p0 p1, C1 p3 p4, C2 -        C0 p0 p1, C1 p3 p4, C2 p2 p5
JOIN = {
    "C0": Subscription(("t0",), None, tps("t0p0 t0p1 t0p2"), 4),
    "C1": Subscription(("t0",), None, tps("t0p3 t0p4 t0p5"), 4),
    "C2": Subscription(("t0",)),
}


def test_eager_sticky_moves_the_partitions_at_once() -> None:
    assert show(StickyAssignor().assign({"t0": 6}, JOIN)) == {"C0": "t0p0 t0p1", "C1": "t0p3 t0p4", "C2": "t0p2 t0p5"}


def test_cooperative_sticky_revokes_first_and_assigns_in_the_follow_up_rebalance() -> None:
    round1 = CooperativeStickyAssignor().assign({"t0": 6}, JOIN)
    assert show(round1) == {"C0": "t0p0 t0p1", "C1": "t0p3 t0p4", "C2": ""}
    rejoin = {m: Subscription(("t0",), None, round1[m].assigned_partitions, 5) for m in JOIN}
    round2 = CooperativeStickyAssignor().assign({"t0": 6}, rejoin)
    assert show(round2) == {"C0": "t0p0 t0p1", "C1": "t0p3 t0p4", "C2": "t0p2 t0p5"}


def test_cooperative_holds_back_a_partition_a_stale_member_still_declares() -> None:
    # A owns t0p0 in generation 2, B is new, Z is a zombie from generation 1 still declaring t0p1 t0p2.
    # Z's claims give it no preference (ideal: A t0p0, B t0p1, Z t0p2, least loaded first), but t0p1 is
    # not handed to B while Z still declares it
    subs = {
        "A": Subscription(("t0",), None, tps("t0p0"), 2),
        "B": Subscription(("t0",)),
        "Z": Subscription(("t0",), None, tps("t0p1 t0p2"), 1),
    }
    assert show(StickyAssignor().assign({"t0": 3}, subs)) == {"A": "t0p0", "B": "t0p1", "Z": "t0p2"}
    assert show(CooperativeStickyAssignor().assign({"t0": 3}, subs)) == {"A": "t0p0", "B": "", "Z": "t0p2"}


# -------------------------------------------------------------------------------------------- racks

# t has 4 partitions: p0, p1 have replicas on rack r2; p2, p3 on rack r1. A is on r1, B on r2.
RACKS = {("t", 0): {"r2"}, ("t", 1): {"r2"}, ("t", 2): {"r1"}, ("t", 3): {"r1"}}
RACK_SUBS = {"A": Subscription(("t",), rack_id="r1"), "B": Subscription(("t",), rack_id="r2")}


@pytest.mark.parametrize(
    "assignor,without_racks,with_racks",
    [
        (RangeAssignor(), {"A": "tp0 tp1", "B": "tp2 tp3"}, {"A": "tp2 tp3", "B": "tp0 tp1"}),
        (StickyAssignor(), {"A": "tp0 tp2", "B": "tp1 tp3"}, {"A": "tp2 tp3", "B": "tp0 tp1"}),
        (CooperativeStickyAssignor(), {"A": "tp0 tp2", "B": "tp1 tp3"}, {"A": "tp2 tp3", "B": "tp0 tp1"}),
    ],
    ids=["range", "sticky", "cooperative-sticky"],
)
def test_rack_aware_assignors_prefer_replicas_on_the_members_rack(assignor, without_racks, with_racks) -> None:
    assert show(assignor.assign({"t": 4}, RACK_SUBS)) == without_racks
    assert show(assignor.assign({"t": 4}, RACK_SUBS, RACKS)) == with_racks


def test_rack_preference_never_unbalances() -> None:
    # all four partitions live on r1 only: A (r1) may still take only its quota of 2
    racks = {("t", p): {"r1"} for p in range(4)}
    for assignor in (RangeAssignor(), StickyAssignor()):
        result = assignor.assign({"t": 4}, RACK_SUBS, racks)
        assert sorted(len(a.assigned_partitions) for a in result.values()) == [2, 2]


def test_rack_awareness_can_be_switched_off() -> None:
    assert show(RangeAssignor(rack_aware=False).assign({"t": 4}, RACK_SUBS, RACKS)) == {"A": "tp0 tp1", "B": "tp2 tp3"}


def test_sticky_keeps_owned_partitions_even_when_they_are_off_rack() -> None:
    # stickiness before locality: A keeps p0, p1 (rack r2) rather than swapping with B
    subs = {
        "A": Subscription(("t",), None, tps("tp0 tp1"), 3, rack_id="r1"),
        "B": Subscription(("t",), None, tps("tp2 tp3"), 3, rack_id="r2"),
    }
    assert show(StickyAssignor().assign({"t": 4}, subs, RACKS)) == {"A": "tp0 tp1", "B": "tp2 tp3"}


# --------------------------------------------------------------------------------------- member order


def test_static_members_sort_first_by_group_instance_id_like_kafkas_member_info() -> None:
    subs = {
        "a-dynamic": Subscription(("t",)),
        "b-static": Subscription(("t",), group_instance_id="instance-2"),
        "c-static": Subscription(("t",), group_instance_id="instance-1"),
    }
    assert show(RangeAssignor().assign({"t": 3}, subs)) == {"a-dynamic": "tp2", "b-static": "tp1", "c-static": "tp0"}
    assert show(RoundRobinAssignor().assign({"t": 3}, subs)) == {"a-dynamic": "tp2", "b-static": "tp1", "c-static": "tp0"}


def test_each_assignment_uses_the_version_its_member_subscribed_with() -> None:
    subs = {"old": Subscription(("t",), version=0), "new": Subscription(("t",), version=3)}
    result = RangeAssignor().assign({"t": 2}, subs)
    assert (result["old"].version, result["new"].version) == (0, 3)
