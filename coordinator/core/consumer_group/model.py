"""Shared vocabulary of the consumer-group core: assignments, member and group states, error codes.

Rules:
- An ``Assignment`` maps topic id -> frozenset of partition numbers and never holds an empty set; it is
  treated as immutable (functions here return new mappings).
- Member states are Kafka's ``MemberState`` (stored as int8): an unknown stored value reads as UNKNOWN.
- The group state is derived, never stored: EMPTY (no members), ASSIGNING (group epoch > assignment epoch),
  RECONCILING (some member is not STABLE at the assignment epoch), else STABLE.
- Error codes are values in responses; ``Reject`` is the one internal exception, raised inside a request's
  handling and turned into an error response at the heartbeat entry.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from enum import Enum, IntEnum

Assignment = Mapping[uuid.UUID, frozenset[int]]
EMPTY: Assignment = {}


class MemberState(IntEnum):
    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127

    @classmethod
    def of(cls, value: int) -> MemberState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


class GroupState(str, Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class Err(IntEnum):
    """Kafka's error codes used by consumer groups."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    UNKNOWN_MEMBER_ID = 25
    UNSUPPORTED_VERSION = 35
    INVALID_REQUEST = 42
    GROUP_ID_NOT_FOUND = 69
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    INVALID_REGULAR_EXPRESSION = 128


class Reject(Exception):
    """A request Kafka refuses with ``code`` and ``message``."""

    def __init__(self, code: Err, message: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class ReplayError(RuntimeError):
    """Records that break the group's invariants (Kafka's IllegalStateException on replay): a bug."""


def assignment(pairs: Mapping[uuid.UUID, Iterable[int]]) -> Assignment:
    """A normalised assignment from any mapping of topic id -> partitions (empty entries dropped)."""
    return {t: frozenset(ps) for t, ps in pairs.items() if ps}


def intersect(a: Assignment, b: Assignment) -> Assignment:
    return assignment({t: ps & b.get(t, frozenset()) for t, ps in a.items()})


def minus(a: Assignment, b: Assignment) -> Assignment:
    return assignment({t: ps - b.get(t, frozenset()) for t, ps in a.items()})


def union(a: Assignment, b: Assignment) -> Assignment:
    return assignment({t: a.get(t, frozenset()) | b.get(t, frozenset()) for t in {*a, *b}})


def size(a: Assignment) -> int:
    return sum(len(ps) for ps in a.values())


def from_wire(topic_partitions: Iterable[Mapping] | None) -> Assignment:
    """A request's or record's [{topic_id, partitions}] as an assignment (duplicate topics merge)."""
    out: dict[uuid.UUID, set[int]] = {}
    for tp in topic_partitions or ():
        out.setdefault(tp["topic_id"], set()).update(tp["partitions"])
    return assignment(out)


def to_wire(a: Assignment) -> list[dict]:
    """[{topic_id, partitions}] sorted by topic id then partition: the same bytes for the same value."""
    return [{"topic_id": t, "partitions": sorted(a[t])} for t in sorted(a, key=lambda u: u.bytes)]
