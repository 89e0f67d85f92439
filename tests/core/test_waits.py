"""coordinator.core.waits through the core: who a rebalancing classic group waits for, since when, and stuck."""

from __future__ import annotations

from core_harness import Harness

from coordinator.core.waits import JOIN_PENDING, LEADER_SYNC, REJOIN, SYNC, classic_waiting, is_stuck


def waiting(h: Harness, group: str):  # type: ignore[no-untyped-def]
    g = h.coord._env.group(group)
    return classic_waiting(g) if g is not None else None


def test_a_rebalance_waits_for_the_leaders_sync_then_for_members_not_rejoined_and_pending_ids() -> None:
    h = Harness()
    t1, m1 = h.join_new("g", client_id="c1", rebalance=5_000)
    h.settle(t1)
    gen = h[t1]["generation_id"]
    # CompletingRebalance: the leader's SyncGroup
    w = waiting(h, "g")
    assert w is not None and w.state == "CompletingRebalance"
    assert [(m.member_id, m.client_id, m.reason) for m in w.members] == [(m1, "c1", LEADER_SYNC)]
    assert w.since_ms == h.now and w.rebalance_timeout_ms == 5_000
    assert not is_stuck(w, h.now + 10_000, -1) and is_stuck(w, h.now + 10_001, -1)  # twice the rebalance timeout
    assert is_stuck(w, h.now + 501, 500) and not is_stuck(w, h.now + 500, 500)
    h.settle(h.sync("g", gen, m1, {m1: b"a"}))
    assert h.state("g") == "Stable" and waiting(h, "g") is None

    # a second member: PreparingRebalance waits for m1 to rejoin (m2 has a parked JoinGroup), and for an id
    # handed out with MEMBER_ID_REQUIRED that has not joined yet
    t2, m2 = h.join_new("g", client_id="c2")
    first = h.join("g", client_id="c3")
    pending = h[first]["member_id"]
    w = waiting(h, "g")
    assert w is not None and w.state == "PreparingRebalance"
    assert [(m.member_id, m.reason) for m in w.members] == [(m1, REJOIN), (pending, JOIN_PENDING)]

    # both rejoin (the pending id too): CompletingRebalance, then Stable with m2 not synced yet
    t1 = h.join("g", m1, client_id="c1")
    t3 = h.join("g", pending, client_id="c3")
    h.settle(t1)
    gen = h[t1]["generation_id"]
    leader = h[t1]["leader"]
    h.settle(h.sync("g", gen, leader, {m1: b"a", m2: b"b", pending: b"c"}))
    assert h.state("g") == "Stable"
    w = waiting(h, "g")
    others = sorted({m1, m2, pending} - {leader})
    assert w is not None and [(m.member_id, m.reason) for m in w.members] == [(m, SYNC) for m in others]
    for m in others:
        h.settle(h.sync("g", gen, m))
    assert waiting(h, "g") is None
    del t2, t3
