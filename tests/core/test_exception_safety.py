"""Exception safety (issue #25): a handler whose record cannot be encoded raises before it changes anything,
so the group, its offsets and its pending commits are exactly as before, and the same request then succeeds.
The encoder is made to fail once, as an encoding bug or an unencodable value would."""

from __future__ import annotations

import pytest
from core_harness import COMMIT, DESCRIBE, FETCH, Harness

from coordinator.core import offsets, rebalance


def fail_once(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[int]:
    real = getattr(module, name)
    calls: list[int] = []

    def flaky(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("cannot encode")
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, flaky)
    return calls


def commit_errors(h: Harness, token: object) -> set[int]:
    return {p["error_code"] for t in h[token]["topics"] for p in t["partitions"]}  # type: ignore[index]


def describe(h: Harness, group: str) -> dict:
    token = h.send(DESCRIBE, 5, {"groups": [group], "include_authorized_operations": False})
    return h[token]["groups"][0]


def stable_fetch(h: Harness, group: str, partitions: dict) -> dict:
    topics = [{"name": t, "partition_indexes": ps} for t, ps in partitions.items()]
    token = h.send(FETCH, 7, {"group_id": group, "topics": topics, "require_stable": True})
    return {(t["name"], p["partition_index"]): (p["committed_offset"], p["error_code"])
            for t in h[token]["topics"] for p in t["partitions"]}


def test_leader_sync_that_cannot_encode_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness()
    joins = [h.join_new("g", client_id=f"c{i}") for i in range(2)]
    h.settle(joins[0][0])
    generation = h[joins[0][0]]["generation_id"]
    leader, follower = joins[0][1], joins[1][1]
    follower_sync = h.sync("g", generation, follower)  # parked until the leader's assignment is durable
    before = describe(h, "g")
    assert before["group_state"] == "CompletingRebalance"
    calls = fail_once(monkeypatch, rebalance, "encode_group_value")
    with pytest.raises(ValueError):
        h.sync("g", generation, leader, {leader: b"a", follower: b"b"})
    assert describe(h, "g") == before, "nothing changed"
    assert not h.answered(follower_sync)
    retry = h.sync("g", generation, leader, {leader: b"a", follower: b"b"})
    assert len(calls) == 2
    assert (h.error(retry), h[retry]["assignment"]) == (0, b"a")
    assert (h.error(follower_sync), h[follower_sync]["assignment"]) == (0, b"b")
    assert h.state("g") == "Stable"
    answered_syncs = [t for t in h.responses if t.label.startswith("sync")]
    assert len(answered_syncs) == 2, f"the failed request left nothing parked to be answered later: {answered_syncs}"


def test_commit_that_cannot_encode_its_second_partition_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness()
    generation, members = h.stable_group("g", 1)
    assert commit_errors(h, h.commit("g", generation, members[0], {("t", 0): 5, ("t", 1): 6})) == {0}
    before = (describe(h, "g"), stable_fetch(h, "g", {"t": [0, 1]}))
    assert before[1] == {("t", 0): (5, 0), ("t", 1): (6, 0)}
    real = offsets.encode_offset_value
    seen: list[int] = []

    def second_fails(value):  # type: ignore[no-untyped-def]
        seen.append(1)
        if len(seen) == 2:
            raise ValueError("cannot encode")
        return real(value)

    monkeypatch.setattr(offsets, "encode_offset_value", second_fails)
    with pytest.raises(ValueError):
        h.send(COMMIT, 7, {"group_id": "g", "generation_id_or_member_epoch": generation, "member_id": members[0],
                           "group_instance_id": None, "retention_time_ms": -1,
                           "topics": [{"name": "t", "partitions": [
                               {"partition_index": p, "committed_offset": 50 + p, "committed_leader_epoch": -1,
                                "committed_metadata": ""} for p in (0, 1)]}]})
    assert (describe(h, "g"), stable_fetch(h, "g", {"t": [0, 1]})) == before, \
        "no offset moved, and no partition is left pending (require_stable answers, not UNSTABLE_OFFSET_COMMIT)"
    assert commit_errors(h, h.commit("g", generation, members[0], {("t", 0): 7, ("t", 1): 8})) == {0}
    assert stable_fetch(h, "g", {"t": [0, 1]}) == {("t", 0): (7, 0), ("t", 1): (8, 0)}


def test_static_member_replacement_that_cannot_encode_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness()
    joins = [h.join("g", instance=f"pod-{i}", client_id=f"c{i}") for i in range(2)]
    h.settle(joins[0])
    ids = [h[t]["member_id"] for t in joins]
    h.sync("g", 1, ids[0], {ids[0]: b"p0", ids[1]: b"p1"}, instance="pod-0")
    h.sync("g", 1, ids[1], instance="pod-1")
    before = describe(h, "g")
    calls = fail_once(monkeypatch, rebalance, "encode_group_value")
    with pytest.raises(ValueError):
        h.join("g", instance="pod-1", client_id="c1")  # pod-1 restarts with an empty member id
    assert describe(h, "g") == before, "same members, ids, order and assignments"
    assert h.error(h.heartbeat("g", 1, ids[1], instance="pod-1")) == 0, "the old id is not fenced"
    again = h.join("g", instance="pod-1", client_id="c1")
    assert len(calls) == 2
    assert h.error(again) == 0 and h[again]["generation_id"] == 1
    new_id = h[again]["member_id"]
    assert new_id != ids[1] and h.error(h.heartbeat("g", 1, ids[1], instance="pod-1")) != 0
    assert [m["member_id"] for m in describe(h, "g")["members"]] == [ids[0], new_id]
