"""Group state machine rules, one story each (Kafka classic GroupCoordinator semantics)."""

from __future__ import annotations

import pytest
from core_harness import DESCRIBE, HEARTBEAT, JOIN, LEAVE, LIST, SYNC, Harness

from coordinator.core.errors import Err
from coordinator.core.group import VALID_PREVIOUS, Group, GroupState, IllegalStateTransition
from coordinator.core.records import GroupMetadataKey, decode_group_value, decode_key


def group_values(records):
    return [decode_group_value(v) for _, k, v in records
            if isinstance(decode_key(k), GroupMetadataKey) and v is not None]


@pytest.mark.parametrize("to", list(GroupState))
@pytest.mark.parametrize("frm", list(GroupState))
def test_every_transition_is_checked_against_kafkas_table(frm, to):
    group = Group("g", frm)
    allowed = {
        (GroupState.STABLE, GroupState.PREPARING_REBALANCE), (GroupState.COMPLETING_REBALANCE, GroupState.PREPARING_REBALANCE),
        (GroupState.EMPTY, GroupState.PREPARING_REBALANCE), (GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE),
        (GroupState.COMPLETING_REBALANCE, GroupState.STABLE), (GroupState.PREPARING_REBALANCE, GroupState.EMPTY),
    } | {(s, GroupState.DEAD) for s in GroupState}
    assert ((frm, to) in allowed) == (frm in VALID_PREVIOUS[to])
    if (frm, to) in allowed:
        group.transition(to, 5)
        assert (group.state, group.previous_state, group.state_timestamp) == (to, frm, 5)
    else:
        with pytest.raises(IllegalStateTransition):
            group.transition(to, 5)
        assert group.state is frm


def test_member_id_required_from_v4_with_client_id_and_injected_uuid(h):
    t = h.join("g", version=4, client_id="kafka-python-1")
    assert h[t]["error_code"] == Err.MEMBER_ID_REQUIRED and h[t]["member_id"] == "kafka-python-1-u1"
    assert h.state("g") == "Empty" and h.coord.group("g").pending_members == 1
    old = h.join("g", version=3, client_id="old-client")  # v3 joins at once
    assert not h.answered(old) and h.state("g") == "PreparingRebalance"


def test_pending_member_that_never_rejoins_expires_after_its_session_timeout():
    h = Harness(group_initial_rebalance_delay_ms=0)
    gen, (lead,) = h.stable_group("g", 1, session=4000)
    newcomer = h.join("g", client_id="late", session=4000)
    assert h.error(newcomer) == Err.MEMBER_ID_REQUIRED
    rejoin = h.join("g", lead, session=4000)  # leader rejoin: rebalance, waits for the pending member
    h.sleep(3999)
    assert not h.answered(rejoin)
    assert h.error(h.heartbeat("g", gen, lead)) == Err.REBALANCE_IN_PROGRESS
    h.sleep(1)  # the pending id expires: nobody else is awaited
    assert h[rejoin]["generation_id"] == gen + 1
    assert h.coord.group("g").pending_members == 0
    assert h.error(h.join("g", h[newcomer]["member_id"], session=4000)) == Err.UNKNOWN_MEMBER_ID


def test_protocol_vote_picks_the_most_preferred_common_protocol():
    h = Harness()
    a = h.join("g", version=3, client_id="a", protocols=[("range", b"ra"), ("roundrobin", b"rr-a")])
    b = h.join("g", version=3, client_id="b", protocols=[("roundrobin", b"rr-b"), ("range", b"rb")])
    c = h.join("g", version=3, client_id="c", protocols=[("sticky", b"s"), ("roundrobin", b"rr-c"), ("range", b"rc")])
    h.settle(a)
    assert h[a]["protocol_name"] == "roundrobin"  # votes: range 1, roundrobin 2 (sticky is not common)
    assert [m["metadata"] for m in h[a]["members"]] == [b"rr-a", b"rr-b", b"rr-c"]
    assert h[b]["protocol_name"] == h[c]["protocol_name"] == "roundrobin"


def test_inconsistent_group_protocol_for_no_common_protocol_or_other_type():
    h = Harness()
    h.join("g", version=3, client_id="a", protocols=[("range", b"")])
    bad = h.join("g", version=3, client_id="b", protocols=[("roundrobin", b"")])
    other = h.join("g", version=3, client_id="c", ptype="connect", protocols=[("range", b"")])
    assert h.error(bad) == h.error(other) == Err.INCONSISTENT_GROUP_PROTOCOL
    empty = h.join("g2", version=3, protocols=[])
    assert h.error(empty) == Err.INCONSISTENT_GROUP_PROTOCOL and h.state("g2") is None


def test_leader_is_kept_while_a_member_then_the_next_member_leads(h):
    gen, (lead, m2, m3) = h.stable_group("g", 3)
    # m3 rejoins with new metadata (a rebalance), then m2; the leader rejoins last but keeps leading.
    joins = [h.join("g", m3, protocols=[("range", b"new")]), h.join("g", m2)]
    assert not any(h.answered(t) for t in joins) and h.state("g") == "PreparingRebalance"
    final = h.join("g", lead)
    assert h[final]["leader"] == lead and h[final]["generation_id"] == gen + 1
    h.sync("g", gen + 1, lead, {})
    h.leave("g", lead)
    rejoin = [h.join("g", m) for m in (m2, m3)]
    assert h[rejoin[0]]["leader"] == m2 and len(h[rejoin[0]]["members"]) == 2


def test_rebalance_timeout_removes_members_that_did_not_rejoin(h):
    gen, (lead, slow) = h.stable_group("g", 2, rebalance=8000, session=30_000)
    rejoin = h.join("g", lead, rebalance=8000, session=30_000)
    assert h.state("g") == "PreparingRebalance"
    h.sleep(7999)
    assert not h.answered(rejoin)
    h.sleep(1)
    assert h[rejoin]["generation_id"] == gen + 1 and [m["member_id"] for m in h[rejoin]["members"]] == [lead]
    assert h.error(h.heartbeat("g", gen, slow)) == Err.UNKNOWN_MEMBER_ID


def test_initial_delay_is_extended_while_members_arrive_but_bounded_by_rebalance_timeout():
    h = Harness(group_initial_rebalance_delay_ms=1000)
    first = h.join("g", version=3, client_id="c0", rebalance=2500)
    for i in range(1, 6):  # a new member every 900 ms keeps extending the delay...
        h.sleep(900)
        h.join("g", version=3, client_id=f"c{i}", rebalance=2500)
    # ...but only until rebalance timeout (2500) is used up: 1000 + 1000 + 500 ms.
    assert h.now == 4500 and h.answered(first)
    assert len(h[first]["members"]) == 3  # c0..c2 made it; c3+ joined after the generation formed


def test_heartbeat_and_sync_fencing_by_generation_member_and_state(h):
    gen, (lead, m2) = h.stable_group("g", 2)
    assert h.error(h.heartbeat("g", gen + 1, m2)) == Err.ILLEGAL_GENERATION
    assert h.error(h.heartbeat("g", gen, "nobody")) == Err.UNKNOWN_MEMBER_ID
    assert h.error(h.heartbeat("nogroup", gen, m2)) == Err.UNKNOWN_MEMBER_ID
    assert h.error(h.sync("g", gen - 1, m2)) == Err.ILLEGAL_GENERATION
    assert h[h.sync("g", gen, m2)]["assignment"] == m2.encode()  # Stable: current assignment
    h.join("g", lead)
    assert h.error(h.heartbeat("g", gen, m2)) == Err.REBALANCE_IN_PROGRESS
    assert h.error(h.sync("g", gen, m2)) == Err.REBALANCE_IN_PROGRESS
    protocol_mismatch = h.send(SYNC, 5, {"group_id": "g", "generation_id": gen, "member_id": m2,
                                          "protocol_type": "connect", "protocol_name": None, "assignments": []})
    assert h.error(protocol_mismatch) == Err.INCONSISTENT_GROUP_PROTOCOL


def test_a_new_member_joining_completing_rebalance_cancels_parked_syncs(h):
    gen, (lead, m2) = h.stable_group("g", 2)
    h.join("g", lead)
    h.join("g", m2)
    assert h.state("g") == "CompletingRebalance"
    waiting = h.sync("g", gen + 1, m2)
    assert not h.answered(waiting)
    h.join("g", version=3, client_id="new")
    assert h.error(waiting) == Err.REBALANCE_IN_PROGRESS and h.state("g") == "PreparingRebalance"


def test_members_that_never_send_sync_group_are_removed_after_the_rebalance_timeout(h):
    gen, (lead, m2) = h.stable_group("g", 2, rebalance=5000)
    h.join("g", lead, rebalance=5000)
    j2 = h.join("g", m2, rebalance=5000)
    s2 = h.sync("g", gen + 1, m2)
    h.sleep(5000)  # the leader never syncs
    assert h.error(s2) == Err.REBALANCE_IN_PROGRESS
    assert h.coord.group("g").members == (m2,) and h.state("g") == "PreparingRebalance"
    assert h.coord.rebalances_by_reason()["sync-expired"] == 1
    assert h.answered(j2)


def test_group_max_size():
    h = Harness(group_max_size=2)
    _gen, (a, b) = h.stable_group("g", 2)
    third = h.join("g", version=3, client_id="c")
    assert h.error(third) == Err.GROUP_MAX_SIZE_REACHED and h[third]["member_id"] == ""
    assert h.coord.group("g").members == (a, b) and h.state("g") == "Stable"


@pytest.mark.parametrize("session,expected", [(999, Err.INVALID_SESSION_TIMEOUT), (1000, Err.MEMBER_ID_REQUIRED),
                                              (60_000, Err.MEMBER_ID_REQUIRED), (60_001, Err.INVALID_SESSION_TIMEOUT)])
def test_session_timeout_bounds(session, expected):
    h = Harness(group_min_session_timeout_ms=1000, group_max_session_timeout_ms=60_000)
    assert h.error(h.join("g", session=session)) == expected


def test_join_v0_uses_the_session_timeout_as_rebalance_timeout(h):
    t = h.send(JOIN, 0, {"group_id": "g", "session_timeout_ms": 7000, "member_id": "", "protocol_type": "consumer",
                         "protocols": [{"name": "range", "metadata": b""}]})
    h.settle(t)
    assert h.error(t) == 0 and h[t]["protocol_name"] == "range"
    assert h.coord._env.shard_of("g").groups["g"].members[h[t]["member_id"]].rebalance_timeout_ms == 7000


def test_leave_group_v0_single_and_v3_batch_and_last_leave_empties_the_group(h):
    gen, (a, b, c) = h.stable_group("g", 3)
    one = h.leave("g", c, version=1)
    assert h[one] == {"error_code": 0} and h.state("g") == "PreparingRebalance"
    unknown = h.leave("g", "ghost", version=1)
    assert h[unknown] == {"error_code": Err.UNKNOWN_MEMBER_ID}
    log_before = len(h.log)
    batch = h.leave("g", a, b, "ghost")
    assert [(m["member_id"], m["error_code"]) for m in h[batch]["members"]] == [
        (a, 0), (b, 0), ("ghost", Err.UNKNOWN_MEMBER_ID)]
    assert h.state("g") == "Empty"
    (value,) = group_values(h.log[log_before:])
    assert (value.generation, value.members, value.leader, value.protocol) == (gen + 1, (), None, None)


def test_static_member_removed_by_instance_id_and_rejoin_with_changed_protocol_rebalances(h):
    t0 = h.join("g", instance="i0", client_id="a")
    t1 = h.join("g", instance="i1", client_id="b")
    h.settle(t0)
    m0, m1 = h[t0]["member_id"], h[t1]["member_id"]
    h.sync("g", 1, m0, {m0: b"0", m1: b"1"}, instance="i0")
    changed = h.join("g", instance="i1", client_id="b", protocols=[("roundrobin", b""), ("range", b"")])
    # Protocol would still be "range" (i0 only supports it): no rebalance needed.
    assert h.error(changed) == 0 and h.state("g") == "Stable"
    req = {"group_id": "g", "members": [{"member_id": "", "group_instance_id": "i1", "reason": None}]}
    gone = h.send(LEAVE, 5, req)
    assert h[gone]["members"][0]["error_code"] == 0 and h.state("g") == "PreparingRebalance"
    assert h.coord.group("g").members == (m0,)


def test_static_leader_restart_v9_skips_assignment_and_pre_v9_returns_the_old_leader():
    for version, expect_leader_is_self in ((9, True), (7, False)):
        h = Harness()
        t = h.join("g", instance="i0", version=version)
        h.settle(t)
        old = h[t]["member_id"]
        h.sync("g", 1, old, {old: b"x"}, instance="i0", version=5)
        again = h.join("g", instance="i0", version=version)
        r = h[again]
        assert r["error_code"] == 0 and r["member_id"] != old
        assert (r["leader"] == r["member_id"]) is expect_leader_is_self
        assert r["skip_assignment"] is expect_leader_is_self
        assert h.state("g") == "Stable"


def test_failed_write_of_the_leaders_assignment_answers_the_error_and_rebalances(h):
    g = "g"
    joins = [h.join_new(g, client_id=f"c{i}") for i in range(2)]
    h.settle(joins[0][0])
    (_, lead), (_, m2) = joins
    follower = h.sync(g, 1, m2)
    h.fail_next_write = Err.NOT_COORDINATOR
    leader = h.sync(g, 1, lead, {lead: b"a", m2: b"b"})
    assert h.error(leader) == h.error(follower) == Err.NOT_COORDINATOR
    assert h.state(g) == "PreparingRebalance" and h.coord.rebalances_by_reason()["write-failed"] == 1
    assert h.coord.pending_writes() == 0


def test_failed_write_of_a_static_rejoin_reverts_the_member_id(h):
    t = h.join("g", instance="i0")
    h.settle(t)
    old = h[t]["member_id"]
    h.sync("g", 1, old, {old: b"x"}, instance="i0")
    h.fail_next_write = Err.NOT_COORDINATOR
    again = h.join("g", instance="i0")
    assert h.error(again) == Err.NOT_COORDINATOR and h[again]["member_id"] == ""
    assert h.coord.group("g").members == (old,)
    assert h.error(h.heartbeat("g", 1, old, instance="i0")) == 0


def test_closed_connection_drops_its_parked_join_but_the_member_still_counts(h):
    a = h.join("g", version=3, client_id="a")
    b = h.join("g", version=3, client_id="b")
    h.coord.connection_closed([b])
    h.settle(a)
    assert not h.answered(b) and len(h[a]["members"]) == 2


def test_loading_and_not_owned_shards():
    h = Harness()
    shard = h.coord.shard_for("g")
    h.coord.unload(shard, 0)
    assert h.error(h.join("g")) == Err.NOT_COORDINATOR
    h.coord.begin_loading(shard)
    assert h.error(h.join("g")) == Err.COORDINATOR_LOAD_IN_PROGRESS
    assert h.error(h.heartbeat("g", 1, "m")) == Err.NONE  # Kafka answers heartbeats blindly while loading
    assert h.error(h.sync("g", 1, "m")) == Err.REBALANCE_IN_PROGRESS  # ... and SyncGroup with a rejoin hint
    assert h[h.send(LIST, 4, {"states_filter": []})]["error_code"] == Err.COORDINATOR_LOAD_IN_PROGRESS
    described = h[h.send(DESCRIBE, 5, {"groups": ["g"]})]["groups"][0]
    assert described["error_code"] == Err.COORDINATOR_LOAD_IN_PROGRESS


def test_unload_answers_parked_requests_not_coordinator(h):
    a = h.join("g", version=3)
    h.apply(h.coord.unload(h.coord.shard_for("g"), h.now))
    assert h.error(a) == Err.NOT_COORDINATOR and h.coord.group("g") is None
    assert h.coord.shard_status(h.coord.shard_for("g")).value == "not-owned"


def test_invalid_group_id_and_unknown_member_of_unknown_group(h):
    assert h.error(h.join("")) == Err.INVALID_GROUP_ID
    assert h.error(h.join("g", "someone")) == Err.UNKNOWN_MEMBER_ID
    assert h.error(h.send(HEARTBEAT, 0, {"group_id": "", "generation_id": 1, "member_id": "m"})) == Err.INVALID_GROUP_ID


def test_introspection_counts_groups_members_and_rebalances(h):
    h.stable_group("a", 2)
    h.stable_group("b", 1)
    h.join("b", version=3, client_id="x")
    assert h.coord.groups_by_state() == {"Stable": 1, "PreparingRebalance": 1}
    assert h.coord.member_counts() == {"a": 2, "b": 2}
    assert h.coord.rebalances_by_reason() == {"member-joined": 3}
    assert h.coord.completed_rebalances == 2 and h.coord.last_rebalance_ms == 100


def test_unknown_api_is_a_caller_bug(h):
    with pytest.raises(ValueError):
        h.coord.handle(3, 0, {}, object(), 0)
