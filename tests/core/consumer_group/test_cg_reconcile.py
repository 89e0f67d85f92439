"""CurrentAssignmentBuilder's transitions (Kafka's CurrentAssignmentBuilderTest), as pure calls of
``reconcile(member, target_epoch, target, owned, partition_epoch)``. Topic a and b; ``held`` says which
partitions other members hold (their epoch), everything else is free."""

from __future__ import annotations

import pytest
from cg_harness import assigned as A
from cg_harness import topic_id

from coordinator.core.consumer_group.member import Member
from coordinator.core.consumer_group.model import MemberState, Reject
from coordinator.core.consumer_group.reconcile import reconcile

S, UNREVOKED, UNRELEASED = MemberState.STABLE, MemberState.UNREVOKED_PARTITIONS, MemberState.UNRELEASED_PARTITIONS


def held(**topics: dict[int, int]):  # type: ignore[no-untyped-def]
    table = {(topic_id(t), p): e for t, ps in topics.items() for p, e in ps.items()}
    return lambda t, p: table.get((t, p), -1)


def member(epoch: int, state: MemberState = S, previous: int | None = None, **kw) -> Member:  # type: ignore[no-untyped-def]
    return Member("m", member_epoch=epoch, previous_member_epoch=epoch - 1 if previous is None else previous,
                  state=state, rebalance_timeout_ms=1000, **kw)


def test_stable_to_stable() -> None:
    m = member(10, assigned=A(a=[1, 2], b=[3]))
    out = reconcile(m, 11, A(a=[1, 2], b=[3]), None, held())
    assert (out.state, out.member_epoch, out.previous_member_epoch) == (S, 11, 10)
    assert out.assigned == A(a=[1, 2], b=[3]) and out.pending_revocation == {}
    # already at the target epoch: unchanged, the same object
    assert reconcile(out, 11, A(a=[1, 2], b=[3]), None, held()) is out


def test_stable_to_stable_with_new_partitions() -> None:
    m = member(10, assigned=A(a=[1, 2]))
    out = reconcile(m, 11, A(a=[1, 2, 3], b=[4]), None, held())
    assert (out.state, out.member_epoch) == (S, 11)
    assert out.assigned == A(a=[1, 2, 3], b=[4])


def test_stable_to_unrevoked_partitions() -> None:
    m = member(10, assigned=A(a=[1, 2], b=[3, 4]))
    out = reconcile(m, 11, A(a=[2], b=[4, 5]), None, held())
    assert (out.state, out.member_epoch, out.previous_member_epoch) == (UNREVOKED, 10, 10)
    assert out.assigned == A(a=[2], b=[4]) and out.pending_revocation == A(a=[1], b=[3])


def test_stable_to_unreleased_partitions() -> None:
    m = member(10, assigned=A(a=[1]))
    out = reconcile(m, 11, A(a=[1, 2, 3]), None, held(a={3: 10}))
    assert (out.state, out.member_epoch) == (UNRELEASED, 11)
    assert out.assigned == A(a=[1, 2]) and out.pending_revocation == {}


def test_stable_to_unreleased_partitions_with_owned_partitions_not_having_revoked_partitions() -> None:
    # the member already dropped the partition it must revoke: no revocation round
    m = member(10, assigned=A(a=[1, 2]))
    out = reconcile(m, 11, A(a=[1, 3]), A(a=[1]), held(a={3: 10}))
    assert (out.state, out.member_epoch) == (UNRELEASED, 11)
    assert out.assigned == A(a=[1]) and out.pending_revocation == {}


def test_unrevoked_partitions_to_stable() -> None:
    m = member(10, UNREVOKED, assigned=A(a=[2]), pending_revocation=A(a=[1]))
    out = reconcile(m, 11, A(a=[2, 5]), A(a=[2]), held())
    assert (out.state, out.member_epoch, out.previous_member_epoch) == (S, 11, 10)
    assert out.assigned == A(a=[2, 5]) and out.pending_revocation == {}


def test_remains_in_unrevoked_partitions() -> None:
    m = member(10, UNREVOKED, assigned=A(a=[2]), pending_revocation=A(a=[1]))
    assert reconcile(m, 11, A(a=[2]), A(a=[1, 2]), held()) is m  # still reports partition 1
    assert reconcile(m, 11, A(a=[2]), None, held()) is m  # owned partitions not reported


def test_unrevoked_partitions_to_unrevoked_partitions() -> None:
    # revoked what was asked, but a newer target asks for more: epoch + 1, revoking again
    m = member(10, UNREVOKED, assigned=A(a=[2, 3]), pending_revocation=A(a=[1]))
    out = reconcile(m, 12, A(a=[3]), A(a=[2, 3]), held())
    assert (out.state, out.member_epoch, out.previous_member_epoch) == (UNREVOKED, 11, 10)
    assert out.assigned == A(a=[3]) and out.pending_revocation == A(a=[2])


def test_unrevoked_partitions_to_unreleased_partitions() -> None:
    m = member(10, UNREVOKED, assigned=A(a=[2]), pending_revocation=A(a=[1]))
    out = reconcile(m, 11, A(a=[2, 4]), A(a=[2]), held(a={4: 10}))
    assert (out.state, out.member_epoch) == (UNRELEASED, 11)
    assert out.assigned == A(a=[2]) and out.pending_revocation == {}


def test_unreleased_partitions_to_stable() -> None:
    m = member(11, UNRELEASED, assigned=A(a=[2]))
    out = reconcile(m, 11, A(a=[2, 4]), A(a=[2]), held())  # partition 4 was released
    assert (out.state, out.member_epoch) == (S, 11)
    assert out.assigned == A(a=[2, 4])


def test_unreleased_partitions_to_stable_with_new_partitions() -> None:
    m = member(11, UNRELEASED, assigned=A(a=[2]))
    out = reconcile(m, 12, A(a=[2, 4], b=[0]), A(a=[2]), held())
    assert (out.state, out.member_epoch, out.previous_member_epoch) == (S, 12, 11)
    assert out.assigned == A(a=[2, 4], b=[0])


def test_unreleased_partitions_to_unreleased_partitions() -> None:
    m = member(11, UNRELEASED, assigned=A(a=[2]))
    out = reconcile(m, 11, A(a=[2, 4]), A(a=[2]), held(a={4: 11}))
    assert (out.state, out.member_epoch, out.assigned) == (UNRELEASED, 11, A(a=[2]))


def test_unreleased_partitions_to_unrevoked_partitions() -> None:
    m = member(11, UNRELEASED, assigned=A(a=[2, 3]))
    out = reconcile(m, 12, A(a=[3, 4]), A(a=[2, 3]), held(a={4: 11}))
    assert (out.state, out.member_epoch) == (UNREVOKED, 11)
    assert out.assigned == A(a=[3]) and out.pending_revocation == A(a=[2])


def test_unknown_state() -> None:
    m = member(11, MemberState.UNKNOWN, assigned=A(a=[2]))
    with pytest.raises(Reject) as e:
        reconcile(m, 11, A(a=[2]), None, held())
    assert e.value.code == 110
    with pytest.raises(Reject):
        reconcile(m, 11, A(a=[2]), A(a=[2]), held())
    out = reconcile(m, 11, A(a=[2, 3]), {}, held())  # owns nothing: reconciled from scratch at the target
    assert (out.state, out.member_epoch) == (S, 11) and out.assigned == A(a=[2, 3])
