"""A classic consumer group's in-memory state (Kafka's GroupMetadata / ClassicGroup).

States and the table of valid previous states (checked on every transition; anything else is a bug and
raises IllegalStateTransition):

    PreparingRebalance  <- Stable, CompletingRebalance, Empty
    CompletingRebalance <- PreparingRebalance
    Stable              <- CompletingRebalance
    Empty               <- PreparingRebalance
    Dead                <- Stable, PreparingRebalance, CompletingRebalance, Empty, Dead

Bookkeeping invariants (kept O(1) per member change so no request is O(members)):
- ``members`` is insertion ordered; the leader is the first joiner and stays leader while a member; when
  it leaves, the first remaining member leads.
- ``supported[p]`` = number of members that list protocol p; a protocol is a candidate when every member
  supports it (count == len(members)).
- ``num_awaiting_join`` = number of members with a parked JoinGroup.
- ``static_members`` maps group.instance.id -> member id for static members.
- ``pending_members``: member ids handed out with MEMBER_ID_REQUIRED and not yet joined (KIP-394).
- ``pending_sync``: members of the current generation that have not sent SyncGroup yet.
- Memory (a coordinator holds ~1M groups, nearly all offsets-only and memberless): both sets start as one
  shared empty frozenset, changed only through add_pending/drop_pending/add_sync/drop_sync/clear_sync;
  ``members``, ``static_members`` and ``supported`` start as shared read-only empty mappings that ``add``
  replaces with the group's own on its first member (writing to them before that raises, never shares).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType

from .member import Member, Parked


class GroupState(str, Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    PREPARING: frozenset({STABLE, COMPLETING, EMPTY}),
    COMPLETING: frozenset({PREPARING}),
    STABLE: frozenset({COMPLETING}),
    EMPTY: frozenset({PREPARING}),
    DEAD: frozenset({STABLE, PREPARING, COMPLETING, EMPTY, DEAD}),
}


_NO_IDS: frozenset[str] = frozenset()
_NO_MEMBERS: Mapping[str, Member] = MappingProxyType({})
_NO_STATIC: Mapping[str, str] = MappingProxyType({})
_NO_SUPPORT: Mapping[str, int] = MappingProxyType(Counter())


class IllegalStateTransition(RuntimeError):
    """A transition not in VALID_PREVIOUS was attempted: a bug in the coordinator."""


class Group:
    __slots__ = (
        "assignment_write",
        "generation",
        "group_id",
        "initial_delay",
        "last_rebalance_ms",
        "leader_id",
        "members",
        "new_member_added",
        "num_awaiting_join",
        "pending_members",
        "pending_sync",
        "previous_state",
        "protocol_name",
        "protocol_type",
        "rebalance_started_ms",
        "state",
        "state_timestamp",
        "static_members",
        "supported",
    )

    def __init__(self, group_id: str, state: GroupState = EMPTY, state_timestamp: int | None = None,
                 generation: int = 0, protocol_type: str | None = None,
                 protocol_name: str | None = None, leader_id: str | None = None) -> None:
        self.group_id = group_id
        self.state = state
        self.previous_state = state
        self.state_timestamp = state_timestamp
        self.generation = generation
        self.protocol_type = protocol_type
        self.protocol_name = protocol_name
        self.leader_id = leader_id
        # the three member maps start as shared read-only empties (see the docstring): ``_own`` makes them
        # the group's own on its first member
        self.members: dict[str, Member] = _NO_MEMBERS  # type: ignore[assignment]
        self.static_members: dict[str, str] = _NO_STATIC  # type: ignore[assignment]
        # both start as the shared empty frozenset (a set costs 216 B and a coordinator holds ~1M groups,
        # nearly all offsets-only): the add_*/drop_* methods below replace it with a set on first use
        self.pending_members: set[str] | frozenset[str] = _NO_IDS
        self.pending_sync: set[str] | frozenset[str] = _NO_IDS
        # generation whose assignment (group metadata record) is written but not yet durable, or None
        self.assignment_write: int | None = None
        self.supported: Counter[str] = _NO_SUPPORT  # type: ignore[assignment]
        self.num_awaiting_join = 0
        self.new_member_added = False
        # (current delay, remaining) while the initial rebalance delay of an Empty group runs, else None.
        self.initial_delay: tuple[int, int] | None = None
        self.rebalance_started_ms: int | None = None
        self.last_rebalance_ms: int | None = None

    def __repr__(self) -> str:
        return f"Group({self.group_id!r}, {self.state.value}, gen={self.generation}, n={len(self.members)})"

    # ------------------------------------------------------------ state

    def transition(self, to: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS[to]:
            raise IllegalStateTransition(
                f"group {self.group_id}: {self.state.value} -> {to.value} is not a valid transition")
        self.previous_state = self.state
        self.state = to
        self.state_timestamp = now_ms

    @property
    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS[PREPARING]

    # ------------------------------------------------------------ members

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def _own(self) -> None:
        if type(self.members) is not dict:
            self.members, self.static_members, self.supported = {}, {}, Counter()

    def add(self, member: Member) -> None:
        self._own()
        if not self.members:
            self.protocol_type = member.protocol_type
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.supported.update(member.protocol_names)
        if member.join is not None:
            self.num_awaiting_join += 1
        self.drop_pending(member.member_id)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None) if member_id in self.members else None
        if member is not None:
            self.supported.subtract(member.protocol_names)
            if member.join is not None:
                self.num_awaiting_join -= 1
            instance = member.group_instance_id
            if instance is not None and self.static_members.get(instance) == member_id:
                del self.static_members[instance]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.drop_pending(member_id)
        self.drop_sync(member_id)
        return member

    def add_pending(self, member_id: str) -> None:
        if not self.pending_members:
            self.pending_members = set()
        self.pending_members.add(member_id)  # type: ignore[union-attr]

    def drop_pending(self, member_id: str) -> None:
        if member_id in self.pending_members:
            self.pending_members.discard(member_id)  # type: ignore[union-attr]

    def add_sync(self, member_id: str) -> None:
        if not self.pending_sync:
            self.pending_sync = set()
        self.pending_sync.add(member_id)  # type: ignore[union-attr]

    def drop_sync(self, member_id: str) -> None:
        if member_id in self.pending_sync:
            self.pending_sync.discard(member_id)  # type: ignore[union-attr]

    def clear_sync(self) -> None:
        self.pending_sync = _NO_IDS

    def update_protocols(self, member: Member, protocols: list[tuple[str, bytes]]) -> None:
        self.supported.subtract(member.protocol_names)
        member.set_protocols(protocols)
        self.supported.update(member.protocol_names)

    def set_join(self, member: Member, parked: Parked | None) -> Parked | None:
        """Park (or clear) the member's JoinGroup; returns the previously parked one, if any."""
        old = member.join
        self.num_awaiting_join += (parked is not None) - (old is not None)
        member.join = parked
        return old

    def take_join(self, member: Member) -> Parked | None:
        return self.set_join(member, None)

    def replace_static(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """Give static member ``instance_id`` a new member id (the caller answers its parked requests)."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        if self.leader_id == old_id:
            self.leader_id = new_id
        self.static_members[instance_id] = new_id
        if old_id in self.pending_sync:
            self.drop_sync(old_id)
            self.add_sync(new_id)
        return member

    def current_static(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def is_static_fenced(self, instance_id: str | None, member_id: str) -> bool:
        current = self.current_static(instance_id)
        return current is not None and current != member_id

    def all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_members

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # ------------------------------------------------------------ protocols

    def supports_protocols(self, protocol_type: str, names: frozenset[str]) -> bool:
        if self.state is EMPTY:
            return bool(protocol_type) and bool(names)
        n = len(self.members)
        supported = self.supported
        return self.protocol_type == protocol_type and any(supported[p] == n for p in names)

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {p for p, count in self.supported.items() if count == n}

    def select_protocol(self) -> str:
        """Each member votes for its most preferred candidate; most votes wins (ties: first voted)."""
        if not self.members:
            raise IllegalStateTransition(f"group {self.group_id}: cannot select a protocol with no members")
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        return votes.most_common(1)[0][0]
