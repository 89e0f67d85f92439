"""Follower fetch sessions, the leader's side (coordinator/cluster/fetch_sessions.py, KIP-227): sessionless and
full requests, incremental updates and forgetting, the epoch and id errors, what an answer lists, and the
bounds on what the cache keeps."""

from __future__ import annotations

from coordinator.cluster.fetch_sessions import FetchSessions
from protocol.errors import ErrorCode

A, B, C = ("t", 0), ("t", 1), ("u", 0)
HOSTED = {A, B, C}


def listed(*tps: tuple[str, int], offset: int = 0) -> list[tuple[tuple[str, int], int, int, int]]:
    return [(tp, offset, 1, 1 << 20) for tp in tps]


def test_sessionless_fetches_keep_nothing_and_answer_every_partition() -> None:
    s = FetchSessions()
    ctx = s.context(2, 0, -1, listed(A, B), [], HOSTED.__contains__)
    assert ctx.session is None and ctx.session_id == 0 and ctx.error == 0
    assert list(ctx.parts) == [A, B] and len(s) == 0
    part = ctx.parts[A]
    assert ctx.must_answer(part, False, 0, 5, 0)
    ctx.answered(part, 0, 5, 0)
    assert ctx.must_answer(part, False, 0, 5, 0)  # no session: always


def test_a_full_request_opens_a_session_and_incremental_ones_update_it() -> None:
    s = FetchSessions()
    full = s.context(2, 0, 0, listed(A, B, C), [], HOSTED.__contains__)
    sid = full.session_id
    assert sid != 0 and len(s) == 1 and list(full.parts) == [A, B, C]
    nothing = s.context(2, sid, 1, [], [], HOSTED.__contains__)  # nothing moved: still every partition fetched
    assert nothing.error == 0 and list(nothing.parts) == [A, B, C]
    moved = s.context(2, sid, 2, listed(B, offset=40), [C], HOSTED.__contains__)
    assert list(moved.parts) == [A, B] and moved.parts[B].fetch_offset == 40 and moved.parts[A].fetch_offset == 0
    back = s.context(2, sid, 3, listed(C, offset=7), [], HOSTED.__contains__)
    assert list(back.parts) == [A, B, C] and back.parts[C].fetch_offset == 7


def test_an_answer_in_a_session_lists_only_partitions_with_news() -> None:
    s = FetchSessions()
    ctx = s.context(2, 0, 0, listed(A), [], HOSTED.__contains__)
    part = ctx.parts[A]
    assert ctx.must_answer(part, False, 0, 10, 0)  # never answered yet
    ctx.answered(part, 0, 10, 0)
    assert not ctx.must_answer(part, False, 0, 10, 0)  # same high watermark and log start, no records
    assert ctx.must_answer(part, True, 0, 10, 0)  # records
    assert ctx.must_answer(part, False, 0, 11, 0)  # high watermark moved
    assert ctx.must_answer(part, False, 0, 10, 3)  # log start moved
    assert ctx.must_answer(part, False, ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1)
    ctx.answered(part, ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1)
    assert ctx.must_answer(part, False, 0, 10, 0)  # after an error it is sent again, even unchanged


def test_wrong_epochs_unknown_ids_and_other_replicas_are_refused() -> None:
    s = FetchSessions()
    sid = s.context(2, 0, 0, listed(A), [], HOSTED.__contains__).session_id
    assert s.context(2, sid, 5, [], [], HOSTED.__contains__).error == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert s.context(3, sid, 1, [], [], HOSTED.__contains__).error == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert s.context(2, sid + 1, 1, [], [], HOSTED.__contains__).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert s.context(2, sid, 1, [], [], HOSTED.__contains__).error == 0  # a refusal does not move the epoch
    closed = s.context(2, sid, -1, listed(A), [], HOSTED.__contains__)  # closes it: sessionless
    assert closed.session is None and len(s) == 0
    assert s.context(2, sid, 2, [], [], HOSTED.__contains__).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_a_session_only_holds_partitions_this_node_hosts() -> None:
    s = FetchSessions()
    unknown = ("nope", 0)
    refused = s.context(2, 0, 0, listed(A, unknown), [], HOSTED.__contains__)
    assert refused.session is None and list(refused.parts) == [A, unknown] and len(s) == 0  # served, not kept
    sid = s.context(2, 0, 0, listed(A), [], HOSTED.__contains__).session_id
    once = s.context(2, sid, 1, listed(unknown, B), [], HOSTED.__contains__)
    assert list(once.parts) == [A, B, unknown]
    assert list(s.context(2, sid, 2, [], [], HOSTED.__contains__).parts) == [A, B]  # the unknown one was not kept


def test_one_session_per_replica_and_at_most_max_sessions() -> None:
    s = FetchSessions(max_sessions=3)
    first = s.context(2, 0, 0, listed(A), [], HOSTED.__contains__).session_id
    second = s.context(2, 0, 0, listed(B), [], HOSTED.__contains__).session_id  # replica 2 again: first closed
    assert len(s) == 1 and first != second
    assert s.context(2, first, 1, [], [], HOSTED.__contains__).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    ids = [s.context(r, 0, 0, listed(A), [], HOSTED.__contains__).session_id for r in (3, 4, 5)]
    assert len(s) == 3 and len(set(ids + [second])) == 4
    # replica 2's session was the least recently used: it made room for replica 5's
    assert s.context(2, second, 1, [], [], HOSTED.__contains__).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert s.context(3, ids[0], 1, [], [], HOSTED.__contains__).error == 0


def test_a_full_request_naming_an_old_session_closes_it() -> None:
    s = FetchSessions()
    old = s.context(2, 0, 0, listed(A), [], HOSTED.__contains__).session_id
    new = s.context(2, old, 0, listed(A, B), [], HOSTED.__contains__).session_id
    assert new != old and len(s) == 1
    assert s.context(2, old, 1, [], [], HOSTED.__contains__).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
