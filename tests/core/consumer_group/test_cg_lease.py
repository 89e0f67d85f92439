"""Leases on steady ConsumerGroupHeartbeats (core/consumer_group/lease.py): granted only for a steady heartbeat
that wrote nothing, and renewable only while ``heartbeat`` would answer the same request the same way, write
nothing and re-arm the session to the same deadline. Every renewal below is checked against the real
heartbeat (``renew_checked``), and every event that ends a lease is shown to end it."""

from __future__ import annotations

from typing import Any

from cg_harness import Driver

from coordinator.core.consumer_group import ConsumerGroupConfig, ConsumerGroups, Deadline
from coordinator.core.consumer_group import records as R
from coordinator.core.consumer_group.heartbeat import HEARTBEAT_INTERVAL_KEY, SESSION_TIMEOUT_KEY
from coordinator.core.consumer_group.lease import Lease, grant, renew
from coordinator.core.consumer_group.regex import REGEX_REFRESH_MS
from coordinator.core.group_configs import encode_key as encode_configs_key
from coordinator.core.group_configs import encode_value as encode_configs_value
from coordinator.core.shard import Shard

SESSION_MS = ConsumerGroupConfig().session_timeout_ms


class Catalogue:
    """The runtime's topic-catalogue token: bumped whenever the Driver's topics change."""

    def __init__(self, d: Driver) -> None:
        self.d = d
        self.version = 0

    def topic(self, name: str, partitions: int) -> None:
        self.d.topic(name, partitions)
        self.version += 1


def steady(d: Driver, member_id: str, **more: Any) -> dict[str, Any]:
    """What a stable member sends: its id and epoch, everything else null."""
    return {"group_id": "g", "member_id": member_id, "member_epoch": d.member(member_id).member_epoch,
            "instance_id": None, "rack_id": None, "rebalance_timeout_ms": -1, "subscribed_topic_names": None,
            "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": None, **more}


def beat_and_grant(d: Driver, body: dict[str, Any], catalogue: Catalogue) -> tuple[dict[str, Any], Lease | None]:
    """The heartbeat, its lease (asked right after it, before its records are replayed), then its records."""
    out = d.cg.heartbeat(body, 1, d.now, d.topics, "client", "/127.0.0.1")
    lease = grant(d.cg, body, out, d.now, d.topics, catalogue.version)
    d.apply(out)
    assert out.response is not None
    return out.response, lease


def renew_checked(d: Driver, lease: Lease, body: dict[str, Any], catalogue: Catalogue) -> int | None:
    """``renew`` now, and the heartbeat it stands for: a renewal must be exactly that heartbeat (same answer,
    no records, the same session deadline)."""
    at = renew(d.cg, lease, d.now, catalogue.version)
    out = d.cg.heartbeat(body, 1, d.now, d.topics, "client", "/127.0.0.1")
    if at is not None:
        assert out.records == [] and out.downgrade is None
        assert out.response == lease.response
        assert out.deadlines == [Deadline("session", "g", body["member_id"], at)]
    return at


def stable_pair() -> tuple[Driver, Catalogue]:
    """Members a and b, stable on foo's 4 partitions (2 each) at group epoch 2."""
    d = Driver()
    c = Catalogue(d)
    c.topic("foo", 4)
    d.join("a", ["foo"])
    d.join("b", ["foo"])
    for _ in range(3):
        d.settle("a")
        d.settle("b")
    g = d.group()
    assert g.group_epoch == g.assignment_epoch == 2
    assert all(m.member_epoch == 2 and not m.pending_revocation for m in g.members.values())
    return d, c


def leased(d: Driver, c: Catalogue, member_id: str = "a") -> tuple[dict[str, Any], Lease]:
    body = steady(d, member_id)
    _, lease = beat_and_grant(d, body, c)
    assert lease is not None
    return body, lease


# ---------------------------------------------------------------- granted only when steady

def test_steady_heartbeat_is_leased_and_renewed_as_the_heartbeat_would_answer() -> None:
    d, c = stable_pair()
    body, lease = leased(d, c)
    assert lease.response == {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "member_id": "a",
                              "member_epoch": 2, "heartbeat_interval_ms": 5000, "assignment": None}
    for step in (1000, 4000, SESSION_MS - 1):
        d.now += step
        assert renew_checked(d, lease, body, c) == d.now + SESSION_MS


def test_full_request_is_leased_with_its_assignment() -> None:
    """librdkafka may resend every field: still steady (nothing changes), the answer carries the assignment."""
    d, c = stable_pair()
    m = d.member("a")
    body = steady(d, "a", rebalance_timeout_ms=300000, subscribed_topic_names=["foo"],
                  topic_partitions=[{"topic_id": t, "partitions": sorted(ps)} for t, ps in m.assigned.items()])
    _, lease = beat_and_grant(d, body, c)
    assert lease is not None and lease.response["assignment"] is not None
    d.now += 100
    assert renew_checked(d, lease, body, c) is not None


def test_no_lease_for_a_join_a_write_an_error_or_a_leave() -> None:
    d, c = stable_pair()
    # a join (epoch 0) writes
    _, lease = beat_and_grant(d, {**steady(d, "b"), "member_epoch": 0, "member_id": "c",
                                  "rebalance_timeout_ms": 1000, "subscribed_topic_names": ["foo"],
                                  "topic_partitions": []}, c)
    assert lease is None
    # the group is now assigning / reconciling: the members' next heartbeats are not steady
    assert d.group().group_epoch == 3
    _, lease = beat_and_grant(d, steady(d, "a"), c)
    assert lease is None
    # an error (a stale epoch) is never leased
    _, lease = beat_and_grant(d, {**steady(d, "a"), "member_epoch": 99}, c)
    assert lease is None
    # a leave writes
    response, lease = beat_and_grant(d, {**steady(d, "b"), "member_epoch": -1}, c)
    assert response["error_code"] == 0 and lease is None


def test_no_lease_while_the_member_is_not_reconciled() -> None:
    d, c = stable_pair()
    d.join("c", ["foo"])  # epoch 3: a and b must revoke, c waits for their partitions
    d.settle("c")
    assert d.member("c").member_epoch == 3 and d.member("c").state.name != "STABLE"
    _, lease = beat_and_grant(d, steady(d, "c"), c)
    assert lease is None


def test_no_lease_when_the_heartbeat_changes_the_member() -> None:
    d, c = stable_pair()
    _, lease = beat_and_grant(d, steady(d, "a", rack_id="rack-2"), c)  # a MemberMetadata record
    assert lease is None


# ---------------------------------------------------------------- what ends a lease

def test_any_write_to_the_group_ends_it() -> None:
    d, c = stable_pair()
    body, lease = leased(d, c)
    body_b, lease_b = leased(d, c, "b")
    d.now += 10
    assert renew_checked(d, lease, body, c) is not None
    d.settle("b")  # writes nothing: both leases hold
    assert renew_checked(d, lease, body, c) is not None
    d.beat("b", 2, None, rack_id="r")  # b's MemberMetadata: a write to the group
    assert renew_checked(d, lease, body, c) is None
    assert renew_checked(d, lease_b, body_b, c) is None
    # a new lease from the next steady heartbeat holds again
    body, lease = leased(d, c)
    assert renew_checked(d, lease, body, c) is not None


def test_fencing_by_session_expiry_ends_it_and_the_fenced_member_is_refused() -> None:
    d, c = stable_pair()
    body, lease = leased(d, c)
    d.settle("b")
    d.advance(SESSION_MS + 1)  # a's session expires (only b re-armed): a is fenced
    assert "a" not in d.group().members
    assert renew_checked(d, lease, body, c) is None
    assert d.cg.heartbeat(body, 1, d.now, d.topics).response["error_code"] == 25  # UNKNOWN_MEMBER_ID


def test_leave_ends_it() -> None:
    d, c = stable_pair()
    body, lease = leased(d, c)
    d.beat("a", -1, None)
    assert renew_checked(d, lease, body, c) is None


def test_group_deleted_and_recreated_ends_it() -> None:
    d, c = stable_pair()
    body, lease = leased(d, c)
    for record in d.cg.delete_records("g"):
        d.cg.replay(record)
    assert "g" not in d.cg.groups and renew(d.cg, lease, d.now, c.version) is None
    d.join("a", ["foo"])
    assert renew(d.cg, lease, d.now, c.version) is None


def test_topic_grown_created_or_deleted_ends_it_and_the_heartbeat_bumps_the_epoch() -> None:
    d, c = stable_pair()
    body, lease = leased(d, c)
    c.topic("foo", 6)  # grown
    assert renew_checked(d, lease, body, c) is None
    out = d.cg.heartbeat(body, 1, d.now, d.topics)
    assert any(isinstance(r.key, R.MetadataKey) for r in out.records)  # the epoch bump the hot path must not hide
    # an unrelated topic: the token moved, so the lease ends too (the heartbeat then writes nothing, and leases)
    d, c = stable_pair()
    body, lease = leased(d, c)
    c.topic("other", 1)
    assert renew_checked(d, lease, body, c) is None
    _, again = beat_and_grant(d, body, c)
    assert again is not None


def test_group_config_change_ends_it() -> None:
    for key, value in ((SESSION_TIMEOUT_KEY, 60000), (HEARTBEAT_INTERVAL_KEY, 3000)):
        d, c = stable_pair()
        body, lease = leased(d, c)
        overrides: dict[tuple[str, str], int] = {}
        d.cg.group_config = lambda g, k, o=overrides: o.get((g, k))  # type: ignore[misc]
        assert renew_checked(d, lease, body, c) is not None
        overrides[("g", key)] = value
        d.cg.touch("g")  # what the shard does when it replays the group's configs record (below)
        assert renew_checked(d, lease, body, c) is None
        _, again = beat_and_grant(d, body, c)  # the next steady heartbeat leases the new values
        assert again is not None and renew_checked(d, again, body, c) is not None


def test_a_replayed_group_configs_record_touches_the_group() -> None:
    """The shard's replay of a group's configs record (ours, key version 1001) ends that group's leases and
    only that group's: ``written`` moves for it, not for another group."""
    shard = Shard(0, ConsumerGroupConfig())
    for gid in ("g", "other"):
        shard.replay(*R.encode_record(R.Record(R.MetadataKey(gid), R.MetadataValue(1))))
    before = dict(shard.consumer.written)
    shard.replay(encode_configs_key("g"), encode_configs_value({"consumer.session.timeout.ms": "60000"}))
    assert shard.consumer.written["g"] != before["g"] and shard.consumer.written["other"] == before["other"]
    moved = shard.consumer.written["g"]
    shard.replay(encode_configs_key("g"), None)  # its overrides dropped: the leases end again
    assert shard.consumer.written["g"] != moved
    shard.replay(encode_configs_key("nobody"), encode_configs_value({"consumer.session.timeout.ms": "60000"}))
    assert "nobody" not in shard.consumer.written  # no consumer group of that id: nothing to end


def test_shard_reloaded_ends_it() -> None:
    """A shard unloaded and loaded again has new ConsumerGroups (Shard.reset): an old lease is not theirs."""
    d, c = stable_pair()
    body, lease = leased(d, c)
    reloaded = ConsumerGroups(d.cg.config)
    for record in d.log:
        reloaded.replay(record)
    assert renew(reloaded, lease, d.now, c.version) is None


def test_regex_lease_ends_when_a_refresh_falls_due_with_a_newer_catalogue() -> None:
    d = Driver()
    c = Catalogue(d)
    c.topic("orders-1", 2)
    d.send(member_id="a", member_epoch=0, rebalance_timeout_ms=1000, subscribed_topic_regex="orders-.*",
           topic_partitions=[])
    d.settle("a")
    body = steady(d, "a")
    # every regex resolved at the current catalogue: nothing is re-resolved while it holds, past 10 s too
    _, lease = beat_and_grant(d, body, c)
    assert lease is not None and lease.refresh_due_ms is None
    d.now += 3 * REGEX_REFRESH_MS
    assert renew_checked(d, lease, body, c) is not None
    # a topic created: the lease ends; the heartbeat right after (a resolution is under 10 s old? no: older)
    # re-resolves and bumps the epoch
    c.topic("orders-2", 2)
    assert renew_checked(d, lease, body, c) is None
    out = d.apply(d.cg.heartbeat(body, 1, d.now, d.topics, "client", "/127.0.0.1"))
    assert any(isinstance(r.key, R.RegexKey) for r in out.records)
    d.settle("a")
    # created within 10 s of that resolution: the heartbeat does not re-resolve yet, a lease is granted, and
    # it ends when the refresh falls due (when that heartbeat writes)
    d.now += 1000
    c.topic("orders-3", 2)
    body = steady(d, "a")
    _, lease = beat_and_grant(d, body, c)
    assert lease is not None and lease.refresh_due_ms is not None
    d.now = lease.refresh_due_ms - 1
    assert renew_checked(d, lease, body, c) is not None
    d.now = lease.refresh_due_ms
    assert renew_checked(d, lease, body, c) is None
    assert any(isinstance(r.key, R.RegexKey) for r in d.cg.heartbeat(body, 1, d.now, d.topics).records)


def test_renewal_never_differs_from_the_heartbeat_over_a_story() -> None:
    """Members join, settle, leave, topics grow, time passes: at every step, each member's lease (when it has
    one) renews only as its heartbeat would answer (``renew_checked`` asserts it)."""
    d, c = stable_pair()
    leases: dict[str, tuple[dict[str, Any], Lease]] = {}
    renewed = ended = 0
    events = [lambda: d.join("c", ["foo"]), lambda: d.settle("a"), lambda: d.settle("b"),
              lambda: d.settle("c"), lambda: c.topic("foo", 8), lambda: d.beat("c", -1, None),
              lambda: d.settle("a"), lambda: d.settle("b"), lambda: setattr(d, "now", d.now + 1000)]
    for event in events * 2:
        for m in list(d.group().members):
            if m not in leases:
                _, lease = beat_and_grant(d, steady(d, m), c)
                if lease is not None:
                    leases[m] = (steady(d, m), lease)
        try:
            event()
        except (AssertionError, KeyError):  # an event for a member that is gone: nothing happens
            pass
        for m, (body, lease) in list(leases.items()):
            if m in d.group().members and renew_checked(d, lease, body, c) is not None:
                renewed += 1
            else:
                del leases[m]
                ended += 1
    assert renewed and ended

