"""Every assignment example of seed 002 (assignors) and seed 000 (rebalance), reproduced exactly.

Each row reads like the seed: partitions per topic, who subscribes to what, and the seed's result per
consumer, in the seed's order. "t1p0" is partition 0 of topic t1. The sticky rows are played as real
rebalances: round one's assignments go through ``on_assignment`` on each member, and round two's
subscriptions carry what each surviving member's assignor puts in its user data (or owned_partitions).
"""

from __future__ import annotations

import re

import pytest

from client.assignors import (
    BUILTIN_ASSIGNORS,
    CooperativeStickyAssignor,
    StickyAssignor,
)
from client.consumer_protocol import Assignment, Subscription, decode_subscription, encode_subscription
from client.consumer_protocol import TopicPartition as TP


def tps(text: str) -> list[tuple[str, int]]:
    out = []
    for word in text.split():
        m = re.fullmatch(r"(.+)p(\d+)", word)
        assert m, word
        out.append((m.group(1), int(m.group(2))))
    return out


def show(assignment: dict) -> dict[str, str]:
    return {m: " ".join(f"{t}p{p}" for t, p in a.assigned_partitions) for m, a in sorted(assignment.items())}


def subs(table: dict[str, str]) -> dict[str, Subscription]:
    return {m: Subscription(tuple(topics.split())) for m, topics in table.items()}


SEVEN = {"t0": 7}
FOUR_FOUR = {"t0": 4, "t1": 4}
THREE_THREE = {"t0": 3, "t1": 3}
ONE_TWO_THREE = {"t0": 1, "t1": 2, "t2": 3}
UNEVEN = {"C0": "t0", "C1": "t0 t1", "C2": "t0 t1 t2"}

# (where in the seeds, assignor, partitions per topic, subscriptions, expected assignment)
ONE_ROUND = [
    ("002 intro fig.1: one consumer, 7 partitions", "range", SEVEN, {"C0": "t0"},
     {"C0": "t0p0 t0p1 t0p2 t0p3 t0p4 t0p5 t0p6"}),
    ("002 intro fig.2: C1 joins", "range", SEVEN, {"C0": "t0", "C1": "t0"},
     {"C0": "t0p0 t0p1 t0p2 t0p3", "C1": "t0p4 t0p5 t0p6"}),
    ("002 intro fig.3: C2 joins", "range", SEVEN, {"C0": "t0", "C1": "t0", "C2": "t0"},
     {"C0": "t0p0 t0p1 t0p2", "C1": "t0p3 t0p4", "C2": "t0p5 t0p6"}),
    ("002 intro: 8 consumers, 7 partitions, C7 gets nothing", "range", SEVEN, {f"C{i}": "t0" for i in range(8)},
     {**{f"C{i}": f"t0p{i}" for i in range(7)}, "C7": ""}),
    ("002 §1 / 000 §4 range: t0,t1 x 4 partitions", "range", FOUR_FOUR, {"C0": "t0 t1", "C1": "t0 t1"},
     {"C0": "t0p0 t0p1 t1p0 t1p1", "C1": "t0p2 t0p3 t1p2 t1p3"}),
    ("002 §1 / 000 §4 range: t0,t1 x 3 partitions (uneven)", "range", THREE_THREE, {"C0": "t0 t1", "C1": "t0 t1"},
     {"C0": "t0p0 t0p1 t1p0 t1p1", "C1": "t0p2 t1p2"}),
    ("002 §2 / 000 §4 roundrobin: t0,t1 x 3 partitions", "roundrobin", THREE_THREE, {"C0": "t0 t1", "C1": "t0 t1"},
     {"C0": "t0p0 t0p2 t1p1", "C1": "t0p1 t1p0 t1p2"}),
    ("002 §2 / 000 §4 roundrobin: uneven subscriptions", "roundrobin", ONE_TWO_THREE, UNEVEN,
     {"C0": "t0p0", "C1": "t1p0", "C2": "t1p1 t2p0 t2p1 t2p2"}),
    ("002 §3 result set 1: roundrobin, uneven", "roundrobin", ONE_TWO_THREE, UNEVEN,
     {"C0": "t0p0", "C1": "t1p0", "C2": "t1p1 t2p0 t2p1 t2p2"}),
    ("002 §3 after C0 leaves: roundrobin", "roundrobin", ONE_TWO_THREE, {"C1": "t0 t1", "C2": "t0 t1 t2"},
     {"C1": "t0p0 t1p1", "C2": "t1p0 t2p0 t2p1 t2p2"}),
    ("002 §3 after C1 leaves: roundrobin, t0-t3 x 2", "roundrobin", {f"t{i}": 2 for i in range(4)},
     {"C0": "t0 t1 t2 t3", "C2": "t0 t1 t2 t3"},
     {"C0": "t0p0 t1p0 t2p0 t3p0", "C2": "t0p1 t1p1 t2p1 t3p1"}),
    ("000 §1.1 fig: group A, 4 consumers on P0-P3", "range", {"t": 4}, {f"A{i}": "t" for i in range(4)},
     {"A0": "tp0", "A1": "tp1", "A2": "tp2", "A3": "tp3"}),
    ("000 §1.1 fig: group B, 2 consumers on P0-P3", "range", {"t": 4}, {"B0": "t", "B1": "t"},
     {"B0": "tp0 tp1", "B1": "tp2 tp3"}),
]


@pytest.mark.parametrize("where,name,partitions,table,expected", ONE_ROUND, ids=[r[0] for r in ONE_ROUND])
def test_seed_example(where: str, name: str, partitions: dict, table: dict, expected: dict) -> None:
    result = BUILTIN_ASSIGNORS[name]().assign(partitions, subs(table))
    assert show(result) == expected


# (where, partitions, subscriptions, round-1 expected, member that leaves, round-2 expected)
STICKY_ROUNDS = [
    ("002 §3 sticky, identical: C0,C1,C2 on t0-t3 x 2, then C1 leaves",
     {f"t{i}": 2 for i in range(4)}, {m: "t0 t1 t2 t3" for m in ("C0", "C1", "C2")},
     {"C0": "t0p0 t1p1 t3p0", "C1": "t0p1 t2p0 t3p1", "C2": "t1p0 t2p1"},
     "C1",
     {"C0": "t0p0 t1p1 t3p0 t2p0", "C2": "t1p0 t2p1 t0p1 t3p1"}),
    ("002 §3 sticky, uneven (result set 2), then C0 leaves",
     ONE_TWO_THREE, UNEVEN,
     {"C0": "t0p0", "C1": "t1p0 t1p1", "C2": "t2p0 t2p1 t2p2"},
     "C0",
     {"C1": "t1p0 t1p1 t0p0", "C2": "t2p0 t2p1 t2p2"}),
]


def play_two_rounds(cls: type[StickyAssignor], partitions: dict, table: dict, leaver: str) -> tuple[dict, dict]:
    """Round 1 on a fresh group; every member learns its assignment; round 2 without ``leaver``."""
    members = {m: cls() for m in table}
    first_subs = {
        m: Subscription(tuple(table[m].split()), members[m].subscription_user_data(table[m].split()))
        for m in table
    }
    first = members["C2"].assign(partitions, first_subs)  # C2 leads: a survivor in both rows
    for m, assignment in first.items():
        members[m].on_assignment(assignment, generation=1)
    second_subs = {}
    for m, topic_list in table.items():
        if m == leaver:
            continue
        topics = tuple(topic_list.split())
        sub = Subscription(topics, members[m].subscription_user_data(topics), first[m].assigned_partitions, 1)
        second_subs[m] = decode_subscription(encode_subscription(sub))  # through the wire, as the leader sees it
    return first, members["C2"].assign(partitions, second_subs)


@pytest.mark.parametrize("cls", [StickyAssignor, CooperativeStickyAssignor], ids=["sticky", "cooperative-sticky"])
@pytest.mark.parametrize("where,partitions,table,expected1,leaver,expected2", STICKY_ROUNDS,
                         ids=[r[0] for r in STICKY_ROUNDS])
def test_seed_sticky_example_before_and_after_a_member_leaves(
    cls: type[StickyAssignor], where: str, partitions: dict, table: dict, expected1: dict, leaver: str, expected2: dict
) -> None:
    first, second = play_two_rounds(cls, partitions, table, leaver)
    assert show(first) == expected1
    assert show(second) == expected2


def test_seed_sticky_example_also_holds_when_ownership_comes_only_from_user_data() -> None:
    # Java's eager StickyAssignor: previous ownership travels only in the user data (v0, no owned_partitions)
    partitions = {f"t{i}": 2 for i in range(4)}
    topics = ("t0", "t1", "t2", "t3")
    survivors = {"C0": StickyAssignor(), "C2": StickyAssignor()}
    survivors["C0"].on_assignment(Assignment(tuple(TP(*x) for x in tps("t0p0 t1p1 t3p0"))), generation=1)
    survivors["C2"].on_assignment(Assignment(tuple(TP(*x) for x in tps("t1p0 t2p1"))), generation=1)
    round_two = {m: Subscription(topics, a.subscription_user_data(topics), version=0) for m, a in survivors.items()}
    second = StickyAssignor().assign(partitions, round_two)
    assert show(second) == {"C0": "t0p0 t1p1 t3p0 t2p0", "C2": "t1p0 t2p1 t0p1 t3p1"}
