"""One consumer-group member: its subscription (from MemberMetadata) and its current assignment (from
CurrentMemberAssignment), as one immutable value.

Rules:
- ``subscribed_topic_names`` is kept sorted and without duplicates, so a reordered resend of the same
  subscription is not a change (no record, no epoch bump).
- ``member_epoch`` / ``previous_member_epoch`` / ``state`` / ``assigned`` / ``pending_revocation`` are the
  current assignment; ``with_epoch`` moves the epoch and keeps the one before as the previous epoch.
- ``classic`` (MemberMetadata tag 0) marks a member on the classic protocol: its session timeout and protocols.
- A member is reconciled to epoch E when it is STABLE at E. A member owns (for the group's partition-epoch
  map) its assigned partitions and those pending revocation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field

from coordinator.core.consumer_group.model import Assignment, MemberState, union
from coordinator.core.consumer_group.records import (
    ClassicMemberMetadata,
    CurrentAssignmentValue,
    MemberMetadataValue,
)


def canonical_names(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(names)))


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    classic: ClassicMemberMetadata | None = None  # set for a member on the classic protocol (migration.py)

    @property
    def uses_classic(self) -> bool:
        return self.classic is not None

    def replace(self, **changes: object) -> Member:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def with_epoch(self, epoch: int, **changes: object) -> Member:
        return self.replace(member_epoch=epoch, previous_member_epoch=self.member_epoch, **changes)

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == epoch

    @property
    def owned(self) -> Assignment:
        return union(self.assigned, self.pending_revocation)

    def subscription_equals(self, other: Member) -> bool:
        return (self.subscribed_topic_names == other.subscribed_topic_names
                and self.subscribed_topic_regex == other.subscribed_topic_regex)

    # ---- records
    def metadata_value(self) -> MemberMetadataValue:
        return MemberMetadataValue(self.instance_id, self.rack_id, self.client_id, self.client_host,
                                   self.subscribed_topic_names, self.subscribed_topic_regex,
                                   self.rebalance_timeout_ms, self.server_assignor, self.classic)

    def assignment_value(self) -> CurrentAssignmentValue:
        return CurrentAssignmentValue(self.member_epoch, self.previous_member_epoch, int(self.state),
                                      dict(self.assigned), dict(self.pending_revocation))

    def with_metadata(self, v: MemberMetadataValue) -> Member:
        return self.replace(instance_id=v.instance_id, rack_id=v.rack_id, client_id=v.client_id,
                            client_host=v.client_host,
                            subscribed_topic_names=canonical_names(v.subscribed_topic_names),
                            subscribed_topic_regex=v.subscribed_topic_regex,
                            rebalance_timeout_ms=v.rebalance_timeout_ms, server_assignor=v.server_assignor,
                            classic=v.classic)

    def with_assignment(self, v: CurrentAssignmentValue) -> Member:
        return self.replace(member_epoch=v.member_epoch, previous_member_epoch=v.previous_member_epoch,
                            state=MemberState.of(v.state), assigned=dict(v.assigned),
                            pending_revocation=dict(v.pending_revocation))
