"""Leases on steady ConsumerGroupHeartbeats: repeat a heartbeat's answer without computing it again.

A member that is stable sends the same heartbeat every interval (same member id and epoch, every other field
null or unchanged), and while nothing it depends on changes, ``ConsumerGroups.heartbeat`` answers it the same
way, writes nothing and only re-arms its session. A lease says so for one request, so that the runtime can
answer the same request bytes again without decoding them or running the heartbeat.

Rules:
- ``grant(groups, request, outcome, now_ms, topics, catalogue)`` right after ``groups.heartbeat`` answered
  ``request`` with ``outcome`` (nothing replayed in between; ``topics`` the snapshot it was given,
  ``catalogue`` the runtime's token for that snapshot, which must change whenever a topic is created, deleted
  or grown) returns a ``Lease``, or None unless the heartbeat was steady: no records, error 0, no
  downgrade, a member of the group on the consumer protocol, its request epoch (> 0) its epoch, which is the
  group epoch and the target assignment epoch, state STABLE with nothing pending revocation (so the heartbeat
  neither bumped nor assigned nor reconciled), and no regex re-resolution due that could write (below).
- A lease is renewable (``renew(groups, lease, now_ms, catalogue)``: the member's new session deadline,
  absolute ms, else None) while every input of that heartbeat is unchanged:
  - the group: no record replayed into it since the grant (``ConsumerGroups.written``: another member's
    heartbeat, a fence or leave, a session or rebalance expiry, a migration, the group's deletion: any write;
    a batch's speculative replays count, and a reverted batch bumps it again: runtime/consumer_batch.py);
  - the ``ConsumerGroups`` itself (a shard unloaded and loaded again builds a new one);
  - the topic catalogue (``catalogue`` token: a topic created, deleted or grown may change the subscription
    metadata, which bumps the group epoch on the next heartbeat; the hot path must not hide it);
  - the group's configs (its ``consumer.session.timeout.ms`` and ``consumer.heartbeat.interval.ms``: the
    session it re-arms and the interval it answers): a replayed group-configs record touches ``written`` too
    (``ConsumerGroups.touch``, called by the shard), and the server's own values never change while it runs;
  - regexes: the group's regexes are re-resolved at most every REGEX_REFRESH_MS after the latest resolution
    and only when the topic snapshot's version differs from a regex's. If, at the grant, every regex in use
    is resolved at the snapshot's version, nothing is re-resolved while the catalogue is unchanged; else the
    lease ends when the refresh falls due (``refresh_due_ms``).
- Nothing else a heartbeat reads can change without one of those: member state and targets change only by
  replay; the request's bytes (the runtime's key) fix every request field and the client id; the runtime
  checks the client host, the shard's status, and that no operation of the group is queued or in flight.
- Pure: values in, values out; a lease changes nothing, and renewing one changes nothing here (the runtime
  re-arms the session deadline it returns).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coordinator.core.consumer_group.model import MemberState
from coordinator.core.consumer_group.regex import REGEX_REFRESH_MS, snapshot_version

if TYPE_CHECKING:
    from coordinator.core.consumer_group.heartbeat import ConsumerGroups, HeartbeatOutcome, TopicInfo


@dataclass(frozen=True, slots=True)
class Lease:
    groups: ConsumerGroups  # the shard's consumer groups it was granted by
    group_id: str
    member_id: str
    written: int  # ConsumerGroups.written[group_id] at the grant
    catalogue: object  # the topic catalogue's token at the grant
    session_ms: int  # the session timeout the heartbeat re-armed
    interval_ms: int  # the heartbeat interval it answered
    refresh_due_ms: int | None  # regexes: when a re-resolution falls due (None: not while the catalogue holds)
    response: dict[str, Any]  # the answer (the same every time)
    session_key: tuple[str, str, str]  # the member's session Deadline key


def grant(groups: ConsumerGroups, request: Mapping[str, Any], outcome: HeartbeatOutcome, now_ms: int,
          topics: Mapping[str, TopicInfo], catalogue: object) -> Lease | None:
    """A lease on ``request``'s answer, or None (see the module's rules)."""
    response = outcome.response
    if outcome.records or outcome.downgrade is not None or response is None or response["error_code"]:
        return None
    group_id, member_id, epoch = request["group_id"], request["member_id"], request["member_epoch"]
    group = groups.groups.get(group_id)
    member = group.members.get(member_id) if group is not None else None
    if group is None or member is None or epoch <= 0 or member.classic is not None:
        return None
    if not (epoch == member.member_epoch == group.group_epoch == group.assignment_epoch
            == response["member_epoch"]) or response["member_id"] != member_id:
        return None
    if member.state is not MemberState.STABLE or member.pending_revocation:
        return None
    written = groups.written.get(group_id)
    if written is None:
        return None
    refresh_due = None
    in_use = [r for r, n in group.regex_members.items() if n > 0]
    if in_use:
        resolved = group.resolved_regexes
        last = group.last_regex_refresh_ms
        if last is None or any(r not in resolved for r in in_use):
            return None
        version = snapshot_version(topics)
        if any(resolved[r].version != version for r in in_use):
            refresh_due = last + REGEX_REFRESH_MS
            if now_ms >= refresh_due:
                return None
    session_ms = groups.member_session_ms(group_id, member)
    return Lease(groups, group_id, member_id, written, catalogue, session_ms, response["heartbeat_interval_ms"],
                 refresh_due, response, ("session", group_id, member_id))


def renew(groups: ConsumerGroups, lease: Lease, now_ms: int, catalogue: object) -> int | None:
    """The member's session deadline once the lease's heartbeat is repeated at ``now_ms``, or None when the
    lease no longer holds (then the heartbeat must be computed)."""
    group_id = lease.group_id
    if (lease.groups is not groups or groups.written.get(group_id) != lease.written
            or catalogue != lease.catalogue):
        return None
    due = lease.refresh_due_ms
    if due is not None and now_ms >= due:
        return None
    return now_ms + lease.session_ms
