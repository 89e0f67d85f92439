"""The seeds' scenarios, driven with a manual clock, asserting on records and released responses."""

from __future__ import annotations

from core_harness import COMMIT, DESCRIBE, Harness

from coordinator.core.errors import Err
from coordinator.core.records import GroupMetadataKey, decode_group_value, decode_key


def group_records(records) -> list:
    return [decode_group_value(v) for _, k, v in records
            if isinstance(decode_key(k), GroupMetadataKey) and v is not None]


def test_members_join_leader_assigns_and_followers_wait_in_sync():
    h = Harness(group_initial_rebalance_delay_ms=3000)
    # t=0: the first member joins (v5): it is told to come back with a generated member id.
    first = h.join("g", client_id="alpha")
    assert h.error(first) == Err.MEMBER_ID_REQUIRED
    alpha = h[first]["member_id"]
    assert alpha == "alpha-u1"
    a = h.join("g", alpha, client_id="alpha")
    assert not h.answered(a) and h.state("g") == "PreparingRebalance"
    # Two more members arrive within the initial rebalance delay.
    h.sleep(1000)
    b, beta = h.join_new("g", client_id="beta")
    c, gamma = h.join_new("g", client_id="gamma")
    h.sleep(1999)
    assert not any(h.answered(t) for t in (a, b, c))
    h.sleep(1)  # t=3000: the first delay ends, but members arrived during it: re-armed for 3 s more
    assert not h.answered(a)
    h.sleep(3000)
    ja, jb, jc = h[a], h[b], h[c]
    assert [r["error_code"] for r in (ja, jb, jc)] == [0, 0, 0]
    assert ja["leader"] == jb["leader"] == jc["leader"] == alpha
    assert ja["generation_id"] == 1 and ja["protocol_name"] == "range"
    assert [m["member_id"] for m in ja["members"]] == [alpha, beta, gamma]
    assert jb["members"] == [] and jc["members"] == []
    assert h.state("g") == "CompletingRebalance"
    # Followers' SyncGroups wait for the leader.
    sb, sc = h.sync("g", 1, beta), h.sync("g", 1, gamma)
    assert not h.answered(sb) and not h.answered(sc)
    log_before = len(h.log)
    sa = h.sync("g", 1, alpha, {alpha: b"A", beta: b"B"})  # gamma missing: empty assignment
    # The group metadata record and all three responses come out of the same write.
    records, released = h.writes[-1]
    assert len(h.log) == log_before + 1
    (value,) = group_records(records)
    assert value.generation == 1 and value.leader == alpha and value.protocol == "range"
    assert [(m.member_id, m.assignment) for m in value.members] == [(alpha, b"A"), (beta, b"B"), (gamma, b"")]
    assert {t for t, _ in released} == {sa, sb, sc}
    assert (h[sa]["assignment"], h[sb]["assignment"], h[sc]["assignment"]) == (b"A", b"B", b"")
    assert h.state("g") == "Stable"
    assert h.coord.last_rebalance_ms == 6000  # PreparingRebalance at t=0, Stable at t=6000


def test_member_that_stops_heartbeating_is_removed_and_group_rebalances_without_it():
    h = Harness()
    gen, (lead, m2, m3) = h.stable_group("g", 3, session=6000)
    for _ in range(2):  # lead and m2 keep heartbeating every 2 s, m3 is silent
        h.sleep(2000)
        assert h.error(h.heartbeat("g", gen, lead)) == 0
        assert h.error(h.heartbeat("g", gen, m2)) == 0
    h.sleep(1999)
    assert h.state("g") == "Stable"
    h.sleep(1)  # t=6000 after m3's last sync: its session expires
    assert h.state("g") == "PreparingRebalance"
    assert h.coord.rebalances_by_reason()["session-expired"] == 1
    # The survivors learn it from their heartbeat and rejoin.
    assert h.error(h.heartbeat("g", gen, lead)) == Err.REBALANCE_IN_PROGRESS
    ja = h.join("g", lead, session=6000)
    jb = h.join("g", m2, session=6000)
    assert h[ja]["generation_id"] == gen + 1 and h[ja]["leader"] == lead
    assert [m["member_id"] for m in h[ja]["members"]] == [lead, m2]
    assert h.error(h.heartbeat("g", gen + 1, m3)) == Err.UNKNOWN_MEMBER_ID
    assert h.answered(jb)


def test_static_member_restarts_without_a_rebalance_and_its_old_id_is_fenced():
    h = Harness()
    joins = [h.join("g", instance=f"pod-{i}", client_id=f"c{i}") for i in range(2)]
    h.settle(joins[0])
    ids = [h[t]["member_id"] for t in joins]
    assert ids == ["pod-0-u1", "pod-1-u2"]  # static members skip MEMBER_ID_REQUIRED
    h.sync("g", 1, ids[0], {ids[0]: b"p0", ids[1]: b"p1"}, instance="pod-0")
    h.sync("g", 1, ids[1], instance="pod-1")
    rebalances = sum(h.coord.rebalances_by_reason().values())
    # pod-1 restarts: it lost its member id and joins with an empty one and its instance id.
    log_before = len(h.log)
    again = h.join("g", instance="pod-1", client_id="c1")
    assert h.error(again) == 0
    new_id = h[again]["member_id"]
    assert new_id == "pod-1-u3" and h[again]["generation_id"] == 1
    assert h[again]["leader"] == ids[0] and h[again]["members"] == []
    assert h.state("g") == "Stable" and sum(h.coord.rebalances_by_reason().values()) == rebalances
    # The new member id is persisted, with the assignment it inherits.
    (value,) = group_records(h.log[log_before:])
    assert [(m.member_id, m.group_instance_id, m.assignment) for m in value.members] == [
        (ids[0], "pod-0", b"p0"), (new_id, "pod-1", b"p1")]
    assert h[h.sync("g", 1, new_id, instance="pod-1")]["assignment"] == b"p1"
    # The old process (a zombie with the old member id) is fenced everywhere.
    assert h.error(h.heartbeat("g", 1, ids[1], instance="pod-1")) == Err.FENCED_INSTANCE_ID
    assert h.error(h.sync("g", 1, ids[1], instance="pod-1")) == Err.FENCED_INSTANCE_ID
    assert h.error(h.join("g", ids[1], instance="pod-1")) == Err.FENCED_INSTANCE_ID
    zombie = h.commit("g", 1, ids[1], {("t", 0): 5}, instance="pod-1")
    assert h[zombie]["topics"][0]["partitions"][0]["error_code"] == Err.FENCED_INSTANCE_ID


def test_zombie_commit_with_an_old_generation_is_refused():
    h = Harness()
    gen, (lead, zombie) = h.stable_group("g", 2, session=5000)
    ok = h.commit("g", gen, zombie, {("orders", 0): 10})
    assert h[ok]["topics"][0]["partitions"][0]["error_code"] == 0
    # The zombie stalls (GC pause); the leader keeps heartbeating, so only the zombie expires.
    for _ in range(3):
        h.sleep(2000)
        h.heartbeat("g", gen, lead)
    assert h.state("g") == "PreparingRebalance"
    h.join("g", lead, session=5000)
    h.sync("g", gen + 1, lead, {lead: b"all"})
    assert h.state("g") == "Stable"
    log_before = len(h.log)
    # The zombie wakes up and commits with its old generation: refused, nothing written.
    late = h.commit("g", gen, zombie, {("orders", 0): 99})
    assert h[late]["topics"][0]["partitions"][0]["error_code"] == Err.UNKNOWN_MEMBER_ID
    stale = h.commit("g", gen, lead, {("orders", 0): 98})
    assert h[stale]["topics"][0]["partitions"][0]["error_code"] == Err.ILLEGAL_GENERATION
    assert len(h.log) == log_before
    assert h.fetch("g", {"orders": [0]})[("orders", 0)]["committed_offset"] == 10


def test_replaying_the_log_into_a_fresh_coordinator_reproduces_groups_and_offsets():
    h = Harness()
    gen, (lead, m2) = h.stable_group("g1", 2)
    h.commit("g1", gen, lead, {("t", 0): 100, ("t", 1): 200}, metadata="meta", epoch=4)
    h.commit("g1", gen, m2, {("t", 1): 250})
    h.settle(h.join("g2", instance="s-0", client_id="s"))
    h.sync("g2", 1, "s-0-u3", {"s-0-u3": b"x"}, instance="s-0")
    h.commit("simple", -1, "", {("u", 3): 7})
    h.leave("g2", "s-0-u3")  # g2 becomes Empty, generation 2
    before = {v.group_id: v for v in h.coord.groups()}
    fresh = Harness()
    for shard in range(fresh.cfg.offsets_topic_num_partitions):
        fresh.coord.unload(shard, 0)
        fresh.coord.begin_loading(shard)
    for shard, key, value in h.log:
        fresh.coord.replay(shard, key, value)
    for shard in range(fresh.cfg.offsets_topic_num_partitions):
        fresh.coord.finish_loading(shard, 0)
    after = {v.group_id: v for v in fresh.coord.groups()}
    assert set(after) == set(before) == {"g1", "g2", "simple"}
    for gid, b in before.items():
        a = after[gid]
        assert (a.state, a.generation, a.protocol, a.leader, a.members) == (
            b.state, b.generation, b.protocol, b.leader, b.members), gid
        assert fresh.coord.committed_offsets(gid) == h.coord.committed_offsets(gid)
    assert fresh.coord.committed_offsets("g1")[("t", 1)].offset == 250
    assert fresh.coord.committed_offsets("g1")[("t", 0)].metadata == "meta"
    assert fresh.coord.committed_offsets("g1")[("t", 0)].leader_epoch == 4
    described = fresh[fresh.send(DESCRIBE, 5, {"groups": ["g1"], "include_authorized_operations": False})]
    assert [(m["member_id"], m["member_assignment"]) for m in described["groups"][0]["members"]] == [
        (lead, lead.encode()), (m2, m2.encode())]
    # Loaded members still have to heartbeat; a loaded Stable group accepts its members' commits.
    assert fresh.error(fresh.heartbeat("g1", gen, lead)) == 0
    assert fresh[fresh.send(COMMIT, 7, {"group_id": "g1", "generation_id_or_member_epoch": gen,
                                        "member_id": m2, "topics": []})] == {"topics": []}


def test_a_thousand_members_rebalance_in_one_pass():
    h = Harness()
    joins = [h.join("big", version=3, client_id=f"c{i}") for i in range(1000)]
    h.settle(joins[0])
    leader_response = h[joins[0]]
    assert len(leader_response["members"]) == 1000
    ids = [h[t]["member_id"] for t in joins]
    syncs = [h.sync("big", 1, m) for m in ids[1:]]
    h.sync("big", 1, ids[0], {m: b"a" for m in ids})
    assert all(h[t]["assignment"] == b"a" for t in syncs)
    assert h.state("big") == "Stable"


def test_a_follower_syncing_while_the_assignment_is_being_written_waits_for_it_to_be_durable():
    """Kafka's rule: no SyncGroup answer carries an assignment before the group metadata record is durable,
    also for a follower whose SyncGroup arrives after the leader's but before the fsync."""
    h = Harness(group_initial_rebalance_delay_ms=0)
    a, alpha = h.join_new("g", client_id="alpha")
    h.settle(a)
    b = h.join("g", client_id="beta")
    beta = h[b]["member_id"]
    jb = h.join("g", beta, client_id="beta")   # a rebalance: alpha must rejoin
    ja = h.join("g", alpha, client_id="alpha")
    gen = h[ja]["generation_id"]
    assert h[jb]["generation_id"] == gen and h.state("g") == "CompletingRebalance"
    h.hold_writes = True                        # the fsync has not returned yet
    sa = h.sync("g", gen, alpha, {alpha: b"A", beta: b"B"})
    sb = h.sync("g", gen, beta)                 # arrives during the write
    assert not h.answered(sa) and not h.answered(sb)
    hb = h.heartbeat("g", gen, beta)            # heartbeats are fine meanwhile
    assert h.error(hb) == Err.NONE
    h.release_writes()                          # durable: both answered, with their assignments
    assert (h.error(sa), h[sa]["assignment"]) == (Err.NONE, b"A")
    assert (h.error(sb), h[sb]["assignment"]) == (Err.NONE, b"B")


def test_a_rebalance_during_the_assignment_write_sends_the_waiting_follower_back_to_join():
    h = Harness(group_initial_rebalance_delay_ms=0)
    a, alpha = h.join_new("g", client_id="alpha")
    h.settle(a)
    b = h.join("g", client_id="beta")
    beta = h[b]["member_id"]
    jb = h.join("g", beta, client_id="beta")
    ja = h.join("g", alpha, client_id="alpha")
    gen = h[ja]["generation_id"]
    h.hold_writes = True
    sa = h.sync("g", gen, alpha, {alpha: b"A", beta: b"B"})
    sb = h.sync("g", gen, beta)
    c = h.join("g", client_id="gamma")          # a third member: member id required, no rebalance yet
    gamma = h[c]["member_id"]
    h.join("g", gamma, client_id="gamma")       # now a rebalance starts while the write is pending
    assert h.error(sb) == Err.REBALANCE_IN_PROGRESS
    assert h.state("g") == "PreparingRebalance"
    h.release_writes()                          # the leader still learns its generation's assignment
    assert (h.error(sa), h[sa]["assignment"]) == (Err.NONE, b"A")
    assert jb in h.responses
