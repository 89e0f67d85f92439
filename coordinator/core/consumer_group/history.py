"""Rebalance history of KIP-848 consumer groups (issue #37 item 2): one entry per group epoch bump.

Rules:
- The entry is computed by the core in the call whose records bump the group epoch (heartbeat.py, migration.py)
  and rides on its outcome (``HeartbeatOutcome.rebalance``, a ``rebalance_history.Rebalance`` whose seq is
  given when written: ``rebalance_history.append``); the runtime writes its records in the same batch, and they
  replay like the batch's others (load, following, after the durable write). Nothing is computed on a heartbeat
  that does not bump the epoch.
- The record, codec and ring are the classic groups' (rebalance_history.py): ``generation`` is the new group
  epoch, ``protocol_type`` "consumer", ``protocol`` the server assignor the group uses after the bump (the most
  common ServerAssignor of its members, else the default), no leader. Start is the bump time; the end is
  written as ``OPEN_END`` (-1, "reconciling") and set once the group is reconciled: the runtime asks
  ``Coordinator.consumer_rebalance_end`` after each durable write of the group, and when the group is Stable
  (every member at the assignment epoch, nothing to revoke; or Empty) the entry's record is written again with
  the end (one more record per rebalance, none per heartbeat: the group's state is O(1),
  ``ConsumerGroup.unreconciled``). An entry still open when the next bump comes ends at that bump (its
  reconciliation was overtaken). A migration-to-classic entry is closed when written (no reconciliation
  follows in this protocol). A crash between the bump and the end record leaves the entry open until the
  next write of the group finds it reconciled.
- Members before: the group's members at the call (a static member away with epoch -2 counted); after: those
  with the joiner added and the removed ones taken out. ``joined`` / ``left``: the ids (a static member that
  rejoins under a new id: its new id joined, its old one left).
- The trigger, by precedence, with the member whose request or timer bumped the epoch (id, client id, host):
  ``static-member-rejoined`` (an instance id took its member's place), ``member-joined`` (a new member, also a
  classic-protocol JoinGroup), ``subscription-changed`` (its topic names or regex changed), else
  ``topic-metadata-changed`` (a topic created or deleted, partitions added, or a regex's topics changed; no
  member; the reason names what changed); ``member-left`` (epoch -1 heartbeat, classic LeaveGroup: the first
  leaver, all in ``left``), ``session-expired`` (fenced at its session timeout), ``rebalance-timeout`` (fenced
  for not revoking in time); ``migration-from-classic`` (a consumer heartbeat upgrading a classic group: the
  joiner; before: the classic members); ``migration-to-classic`` (a leave or fence downgrading the group: the
  member that went, the reason the cause (member-left, session-expired, rebalance-timeout), generation the
  epoch the classic group starts at, protocol its classic protocol; no bump: the classic group's own rebalance
  ("downgrade") is its next entry).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from coordinator.core.consumer_group import records as R
from coordinator.core.consumer_group.group import ConsumerGroup
from coordinator.core.consumer_group.member import Member
from coordinator.core.rebalance_history import IDS_KEPT, OPEN_END, Rebalance, Trigger

PROTOCOL_TYPE = "consumer"
MEMBER_JOINED = "member-joined"
MEMBER_LEFT = "member-left"
SESSION_EXPIRED = "session-expired"
REBALANCE_TIMEOUT = "rebalance-timeout"
SUBSCRIPTION_CHANGED = "subscription-changed"
TOPIC_METADATA_CHANGED = "topic-metadata-changed"
STATIC_MEMBER_REJOINED = "static-member-rejoined"
MIGRATION_FROM_CLASSIC = "migration-from-classic"
MIGRATION_TO_CLASSIC = "migration-to-classic"


def entry(group: ConsumerGroup, generation: int, kind: str, member: Member | None, now_ms: int, protocol: str | None,
          *, joined: Iterable[str] = (), left: Iterable[str] = (), reason: str | None = None) -> Rebalance:
    """The history entry of a bump of ``group`` (its state before the bump) to ``generation``."""
    before = group.members  # O(joined + left): no copy of the members (a join storm makes one entry per join)
    gone = list(dict.fromkeys(m for m in left if m in before))
    new = list(dict.fromkeys(m for m in joined if m not in before))
    after = len(before) - len(gone) + len(new)
    trigger = Trigger(kind, reason=reason) if member is None else Trigger(
        kind, member.member_id, member.client_id or None, member.client_host or None, reason)
    end = now_ms if kind == MIGRATION_TO_CLASSIC else OPEN_END
    return Rebalance(0, generation, now_ms, end, trigger, PROTOCOL_TYPE, protocol, None, len(before), after,
                     tuple(new[:IDS_KEPT]), tuple(sorted(gone)[:IDS_KEPT]))


def retrigger(rebalance: Rebalance, kind: str) -> Rebalance:
    """The same entry with another trigger kind (an upgrade's join is a migration)."""
    t = rebalance.trigger
    return Rebalance(rebalance.seq, rebalance.generation, rebalance.start_ms, rebalance.end_ms,
                     Trigger(kind, t.member_id, t.client_id, t.client_host, t.reason), rebalance.protocol_type,
                     rebalance.protocol, rebalance.leader, rebalance.members_before, rebalance.members_after,
                     rebalance.joined, rebalance.left)


def heartbeat_kind(previous: Member | None, replaced: Member | None, updated: Member) -> str:
    """The trigger of a heartbeat's bump (module rules' precedence)."""
    if replaced is not None:
        return STATIC_MEMBER_REJOINED
    if previous is None:
        return MEMBER_JOINED
    if not updated.subscription_equals(previous):
        return SUBSCRIPTION_CHANGED
    return TOPIC_METADATA_CHANGED


def metadata_change(old: Mapping[str, R.TopicMetadata], new: Mapping[str, R.TopicMetadata],
                    regexes_changed: bool) -> str:
    """What moved in the subscription metadata (a topic-metadata-changed entry's reason)."""
    parts = []
    added = sorted(n for n in new if n not in old)
    removed = sorted(n for n in old if n not in new)
    grown = sorted(n for n in new if n in old and new[n] != old[n])
    if added:
        parts.append("topics added: " + ",".join(added))
    if removed:
        parts.append("topics removed: " + ",".join(removed))
    if grown:
        parts.append("partitions changed: " + ",".join(grown))
    if regexes_changed and not parts:
        parts.append("regex topics changed")
    return "; ".join(parts) or "topic metadata changed"
