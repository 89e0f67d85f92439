"""One member of a classic consumer group (Kafka's MemberMetadata).

Invariants:
- ``join`` is the parked JoinGroup (token, api version) while the member awaits the end of the join
  phase, else None; ``sync`` likewise for a parked SyncGroup. The group keeps a count of members with
  ``join`` set; change it only through ``Group.set_join``/``Group.take_join``.
- ``protocols`` is the ordered list of (protocol name, metadata bytes) the member supports; its order is
  the member's preference, used by the protocol vote.
- ``is_new`` is true from the member's first join until the join phase completes for it; a new member's
  parked JoinGroup expires after ``new_member_join_timeout_ms`` instead of the session timeout.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

Parked = tuple[object, int]  # (token, api version of the parked request)


class _Dropped:
    """Token placeholder for a parked request whose connection closed: completions to it are dropped."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "DROPPED"


DROPPED = _Dropped()


@dataclass(slots=True, eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join: Parked | None = None
    sync: Parked | None = None
    is_new: bool = False
    _names: frozenset[str] = field(default=frozenset(), repr=False)

    def __post_init__(self) -> None:
        self._names = frozenset(name for name, _ in self.protocols)

    @property
    def protocol_names(self) -> frozenset[str]:
        return self._names

    def set_protocols(self, protocols: list[tuple[str, bytes]]) -> None:
        self.protocols = protocols
        self._names = frozenset(name for name, _ in protocols)

    def metadata(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: Collection[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")
