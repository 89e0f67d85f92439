"""The group member's state machine against a scripted coordinator and a manual clock (no sockets, no sleeps)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fakes_member import COORD, FakeTransport, ManualClock, Never, RecordingHooks, error, join_ok, sync_ok

from client.errors import BrokerResponseError, FencedInstanceIdError, KafkaConnectionError
from client.heartbeat import Action, run_once
from client.member import GroupMember, MemberConfig, MemberState
from protocol.errors import ErrorCode

JOIN, HEARTBEAT, LEAVE, SYNC = 11, 12, 13, 14


def make(instance_id: str | None = None) -> tuple[GroupMember, FakeTransport, RecordingHooks, ManualClock]:
    clock, transport, hooks = ManualClock(), FakeTransport(), RecordingHooks()
    config = MemberConfig("g", session_timeout_ms=3000, rebalance_timeout_ms=10000, heartbeat_interval_ms=1000,
                          max_poll_interval_ms=5000, group_instance_id=instance_id, retry_backoff_ms=100)
    member = GroupMember(config, transport, hooks, clock=clock, start_heartbeat_thread=False)
    return member, transport, hooks, clock


def join_as_leader(member: GroupMember, transport: FakeTransport, clock: ManualClock) -> None:
    transport.script(JOIN, error(ErrorCode.MEMBER_ID_REQUIRED, member_id="m-1"),
                     join_ok(1, "m-1", "m-1", ["m-1", "m-2"]))
    transport.script(SYNC, sync_ok(b"mine"))
    assert member.poll(clock.ms + 100) is True


def test_first_join_retries_with_the_member_id_then_the_leader_assigns_and_syncs() -> None:
    member, transport, hooks, clock = make()
    join_as_leader(member, transport, clock)
    assert [b["member_id"] for b in transport.bodies(JOIN)] == ["", "m-1"]
    sync = transport.bodies(SYNC)[0]
    assert (sync["generation_id"], sync["member_id"]) == (1, "m-1")
    assert sync["assignments"] == [{"member_id": "m-1", "assignment": b"A"}, {"member_id": "m-2", "assignment": b"A"}]
    assert hooks.calls == [("prepare", (-1, True)), ("assign", ["m-1", "m-2"]), ("complete", (1, b"mine"))]
    assert member.state is MemberState.STABLE and member.is_leader


def test_a_follower_syncs_without_assignments() -> None:
    member, transport, hooks, clock = make()
    transport.script(JOIN, join_ok(3, "m-2", "m-1"))
    transport.script(SYNC, sync_ok(b"yours"))
    assert member.poll(clock.ms + 100)
    assert transport.bodies(SYNC)[0]["assignments"] == []
    assert ("complete", (3, b"yours")) in hooks.calls and not member.is_leader


def test_a_join_still_waiting_at_the_deadline_is_resumed_by_the_next_poll() -> None:
    member, transport, hooks, clock = make()
    pending = Never()
    transport.script(JOIN, pending)
    transport.script(SYNC, sync_ok())
    assert member.poll(clock.ms) is False
    assert member.state is MemberState.REBALANCING and len(transport.bodies(JOIN)) == 1
    pending.arrive(join_ok(1, "m-1", "m-0"))
    assert member.poll(clock.ms) is True
    assert len(transport.bodies(JOIN)) == 1 and member.generation.generation_id == 1


def test_heartbeat_rebalance_in_progress_keeps_the_generation_and_revokes_at_the_next_poll() -> None:
    member, transport, hooks, clock = make()
    join_as_leader(member, transport, clock)
    member.on_heartbeat_response(member.generation, ErrorCode.REBALANCE_IN_PROGRESS)
    assert member.rejoin_needed and member.generation.generation_id == 1
    transport.script(JOIN, join_ok(2, "m-1", "m-2"))
    transport.script(SYNC, sync_ok())
    assert member.poll(clock.ms + 100)
    assert hooks.calls[3] == ("prepare", (1, False))  # revoke, not lose
    assert transport.bodies(JOIN)[-1]["member_id"] == "m-1"


@pytest.mark.parametrize("code, member_id_after", [(ErrorCode.UNKNOWN_MEMBER_ID, ""),
                                                    (ErrorCode.ILLEGAL_GENERATION, "m-1")])
def test_heartbeat_fencing_resets_the_generation_and_the_partitions_are_lost(code: int, member_id_after: str) -> None:
    member, transport, hooks, clock = make()
    join_as_leader(member, transport, clock)
    member.on_heartbeat_response(member.generation, code)
    assert member.state is MemberState.UNJOINED
    assert (member.generation.generation_id, member.generation.member_id) == (-1, member_id_after)
    transport.script(JOIN, join_ok(2, "m-9", "m-0"))
    transport.script(SYNC, sync_ok())
    member.poll(clock.ms + 100)
    assert hooks.calls[3] == ("prepare", (-1, True))


def test_a_late_heartbeat_answer_for_an_old_generation_is_ignored() -> None:
    member, transport, hooks, clock = make()
    join_as_leader(member, transport, clock)
    old = member.generation
    member.on_heartbeat_response(old, ErrorCode.REBALANCE_IN_PROGRESS)
    transport.script(JOIN, join_ok(2, "m-1", "m-1", ["m-1"]))
    transport.script(SYNC, sync_ok())
    member.poll(clock.ms + 100)
    member.on_heartbeat_response(old, ErrorCode.ILLEGAL_GENERATION)
    assert member.state is MemberState.STABLE and member.generation.generation_id == 2


@pytest.mark.parametrize("code", [ErrorCode.INCONSISTENT_GROUP_PROTOCOL, ErrorCode.INVALID_SESSION_TIMEOUT])
def test_configuration_errors_from_join_group_are_raised(code: int) -> None:
    member, transport, _, clock = make()
    transport.script(JOIN, error(code))
    with pytest.raises(BrokerResponseError) as info:
        member.poll(clock.ms + 100)
    assert info.value.code == code and member.state is MemberState.UNJOINED


def test_fenced_instance_id_is_fatal_for_every_later_poll() -> None:
    member, transport, _, clock = make("instance-a")
    transport.script(JOIN, error(ErrorCode.FENCED_INSTANCE_ID))
    with pytest.raises(FencedInstanceIdError):
        member.poll(clock.ms + 100)
    with pytest.raises(FencedInstanceIdError):
        member.poll(clock.ms + 100)
    assert transport.bodies(JOIN)[0]["group_instance_id"] == "instance-a"


def test_coordinator_moved_during_join_marks_it_unknown_and_retries_after_backoff() -> None:
    member, transport, _, clock = make()
    transport.script(JOIN, error(ErrorCode.NOT_COORDINATOR), join_ok(1, "m-1", "m-0"))
    transport.script(SYNC, sync_ok())
    assert member.poll(clock.ms) is False  # the retry waits for the backoff
    assert transport.dropped == [COORD] and len(transport.bodies(JOIN)) == 1
    clock.advance(100)
    assert member.poll(clock.ms) is True


def test_a_dropped_connection_during_sync_rejoins() -> None:
    member, transport, _, clock = make()
    transport.script(JOIN, join_ok(1, "m-1", "m-0"), join_ok(2, "m-1", "m-0"))
    transport.script(SYNC, KafkaConnectionError("gone"), sync_ok())
    assert member.poll(clock.ms) is False
    clock.advance(100)
    assert member.poll(clock.ms) is True and member.generation.generation_id == 2


# ------------------------------------------------------------------ heartbeat thread rules (run_once, no waits)
def test_no_heartbeat_unless_stable() -> None:
    member, transport, _, clock = make()
    assert run_once(member, block=False) is Action.WAIT_FOR_STABLE
    assert transport.bodies(HEARTBEAT) == []


def test_heartbeats_follow_the_interval_once_stable() -> None:
    member, transport, _, clock = make()
    join_as_leader(member, transport, clock)
    assert run_once(member, block=False) is Action.WAIT
    clock.advance(1000)
    member.poll(clock.ms)
    transport.script(HEARTBEAT, {"error_code": 0})
    assert run_once(member, block=False) is Action.SEND_HEARTBEAT
    assert transport.bodies(HEARTBEAT) == [{"group_id": "g", "generation_id": 1, "member_id": "m-1",
                                            "group_instance_id": None}]
    assert run_once(member, block=False) is Action.WAIT


def test_session_timeout_marks_the_coordinator_unknown_then_the_thread_looks_it_up() -> None:
    member, transport, _, clock = make()
    join_as_leader(member, transport, clock)
    clock.advance(3000)
    member.poll(clock.ms)
    assert run_once(member, block=False) is Action.SESSION_TIMED_OUT
    assert member.coordinator is None and transport.dropped == [COORD]
    transport.find_replies.append(KafkaConnectionError("nobody home"))
    assert run_once(member, block=False) is Action.FIND_COORDINATOR and member.coordinator is None
    assert run_once(member, block=False) is Action.FIND_COORDINATOR and member.coordinator == COORD


def keep_session_alive_without_polling(member: GroupMember, transport: FakeTransport, clock: ManualClock) -> None:
    """Heartbeats every interval up to max.poll.interval.ms (5000) after the last poll, which then expires."""
    for _ in range(4):
        clock.advance(1000)
        transport.script(HEARTBEAT, {"error_code": 0})
        assert run_once(member, block=False) is Action.SEND_HEARTBEAT
    clock.advance(1000)


def test_poll_timeout_sends_leave_group_and_resets_the_member() -> None:
    member, transport, _, clock = make()
    join_as_leader(member, transport, clock)
    keep_session_alive_without_polling(member, transport, clock)
    transport.script(LEAVE, {"error_code": 0, "members": []})
    assert run_once(member, block=False) is Action.LEAVE_GROUP
    assert transport.bodies(LEAVE)[0]["members"][0]["member_id"] == "m-1"
    assert member.state is MemberState.UNJOINED and member.generation.member_id == ""
    assert member.rejoin_needed


def test_a_static_member_neither_leaves_on_poll_timeout_nor_on_close() -> None:
    member, transport, _, clock = make("instance-a")
    join_as_leader(member, transport, clock)
    keep_session_alive_without_polling(member, transport, clock)
    assert run_once(member, block=False) is Action.LEAVE_GROUP
    assert transport.bodies(LEAVE) == [] and member.state is MemberState.UNJOINED
    member.close(leave=True)
    assert transport.bodies(LEAVE) == []


def test_close_of_a_dynamic_member_sends_leave_group_once() -> None:
    member, transport, _, clock = make()
    join_as_leader(member, transport, clock)
    transport.script(LEAVE, {"error_code": 0, "members": []})
    member.close()
    member.close()
    assert len(transport.bodies(LEAVE)) == 1
    assert run_once(member, block=False) is Action.STOP
