"""Online migration between the classic and the consumer protocol (Kafka 4.0's GroupMetadataManager).

Rules:
- Policy ``group.consumer.migration.policy`` (Kafka's ConsumerGroupMigrationPolicy): bidirectional | upgrade |
  downgrade | disabled, case-insensitive; anything else (or none) is disabled. Empty groups convert whatever
  the policy: an empty classic group is replaced by a consumer heartbeat (runtime/consumer_groups.py), an empty
  consumer group is deleted by a classic JoinGroup (coordinator.py ``_route``).
- Upgrade (``upgrade``, Kafka's validateOnlineUpgrade + convertToConsumerGroup + ConsumerGroup.fromClassicGroup):
  a consumer-protocol heartbeat with epoch 0 naming a non-empty classic group converts it when the policy allows
  upgrades, its protocol type is "consumer" and it has at most ``group.consumer.max.size`` members; otherwise
  GROUP_ID_NOT_FOUND "Group <id> is not a consumer group". Every classic member becomes a member at epoch =
  generation, STABLE, its subscription and rack from its embedded ConsumerProtocol subscription, its assigned
  partitions (and target) from its embedded assignment (topics unknown here are dropped; an empty assignment is
  none), its session timeout and protocols kept as ClassicMemberMetadata. Malformed embedded bytes (or two
  members owning one partition) refuse the upgrade with GROUP_ID_NOT_FOUND. Records, in one batch with the
  joining heartbeat's: the classic GroupMetadata tombstone (written by the runtime), MemberMetadata of each,
  Metadata{generation}, TargetAssignmentMember of each, TargetAssignmentMetadata{generation},
  CurrentMemberAssignment of each; then the heartbeat's own records, computed against the converted group.
  Each converted member's session deadline is its classic session timeout. The group's configs and rebalance
  history records are kept (a conversion is no deletion); the conversion is itself an entry (history.py:
  migration-from-classic, and migration-to-classic for a downgrade).
- Classic members inside a consumer group (Kafka's classicGroup*ToConsumerGroup):
  JoinGroup: protocol type "consumer" and a protocol every classic member supports (a group without classic
  members takes any non-empty list), else INCONSISTENT_GROUP_PROTOCOL; GROUP_MAX_SIZE_REACHED past the size;
  a dynamic member without id (v4+) gets MEMBER_ID_REQUIRED and a new id; then it is handled as a consumer
  heartbeat (``ConsumerGroups.heartbeat``) with its subscription, rack and owned partitions decoded from its
  first protocol's metadata: member update, epoch bump, target, reconciliation, records. Answer: generation =
  its member epoch, its first protocol's name, no leader, no members.
  SyncGroup: its current assigned partitions as a ConsumerProtocol assignment at the version of its first
  protocol's metadata; REBALANCE_IN_PROGRESS when the group epoch is above its epoch and it is not revoking;
  ILLEGAL_GENERATION for a generation other than its epoch; INCONSISTENT_GROUP_PROTOCOL for another protocol.
  Heartbeat: re-arms its session (its own timeout); REBALANCE_IN_PROGRESS (rejoin) when the group epoch is above
  its epoch, it must revoke, or the partitions it waits for are free. LeaveGroup: its removal (tombstones, new
  subscription metadata, epoch + 1), one bump for the batch. A consumer-protocol member named by these APIs is
  UNKNOWN_MEMBER_ID. OffsetCommit of a classic member is checked by generation (coordinator.py).
- Downgrade (``downgrade``, Kafka's validateOnlineDowngradeWithFencedMember + convertToClassicGroup +
  ClassicGroup.fromConsumerGroup): when a member leaves or is fenced and every other member (at least one) is
  classic, the policy allows downgrades and they fit ``group.max.size``, the group's tombstones are written
  (``ConsumerGroups.delete_records``) followed by a classic GroupMetadata (protocol type consumer, generation =
  group epoch, the protocol the members vote for, the first member leads, each member's target serialized at its
  metadata's version); the classic core then holds the group and starts a rebalance ("downgrade") so they rejoin.
- Divergences: no join and sync timeouts for classic members (their session covers a dead one); a static
  classic member does not replace a consumer-protocol one (no downgrade by replacement); an upgrade does not
  require the classic group to be Stable (Kafka neither: members of a rebalancing group are asked to rejoin).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Mapping
from typing import Any

from client.consumer_protocol import (
    ConsumerProtocolError,
    TopicPartition,
    decode_assignment,
    decode_subscription,
)
from coordinator.core.consumer_group import history as H
from coordinator.core.consumer_group import records as R
from coordinator.core.consumer_group.downgrade import (  # noqa: F401 (re-exported: the migration's vocabulary)
    PROTOCOL_TYPE,
    Downgrade,
    MigrationPolicy,
    _serialize,
    downgrade,
    parse_policy,
)
from coordinator.core.consumer_group.group import ConsumerGroup
from coordinator.core.consumer_group.heartbeat import (
    ConsumerGroups,
    Deadline,
    HeartbeatOutcome,
    TopicInfo,
    _metadata_value,
    _removal,
    _subscription_metadata,
)
from coordinator.core.consumer_group.member import Member, canonical_names
from coordinator.core.consumer_group.model import (
    Assignment,
    Err,
    MemberState,
    ReplayError,
    assignment,
    to_wire,
)
from coordinator.core.consumer_group.regex import TopicFilter, allow_all
from coordinator.core.group import Group

ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
REBALANCE_IN_PROGRESS = 27
MEMBER_ID_REQUIRED = 79


class _Refused(Exception):
    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _not_consumer(group_id: str) -> HeartbeatOutcome:
    from coordinator.core.consumer_group.heartbeat import error_response
    return HeartbeatOutcome(error_response(Err.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group."))


# ---------------------------------------------------------------- classic -> consumer

def upgrade(groups: ConsumerGroups, classic: Group, request: Mapping[str, Any], version: int, now_ms: int,
            topics: Mapping[str, TopicInfo], client_id: str = "", client_host: str = "",
            may_describe: TopicFilter = allow_all) -> HeartbeatOutcome:
    """A consumer heartbeat for the non-empty classic group ``classic``: the conversion's records followed by the
    heartbeat's (computed against the converted group), or GROUP_ID_NOT_FOUND (nothing written)."""
    group_id = classic.group_id
    refused = groups.validate(request, version)
    if refused is not None:
        return HeartbeatOutcome(refused)
    if (request["member_epoch"] != 0 or not parse_policy(groups.config.migration_policy).upgrade_enabled
            or classic.protocol_type != PROTOCOL_TYPE or len(classic.members) > groups.config.max_size):
        return _not_consumer(group_id)
    try:
        records = conversion_records(classic, topics)
        base = ConsumerGroup(group_id)
        for r in records:
            base.replay(r.key, r.value)
    except (ConsumerProtocolError, ReplayError, KeyError):
        from coordinator.core.consumer_group.heartbeat import error_response
        return HeartbeatOutcome(error_response(Err.GROUP_ID_NOT_FOUND, f"Cannot upgrade the classic group {group_id}"
                                               " to consumer group because the embedded consumer protocol is "
                                               "malformed."))
    outcome = groups.heartbeat(request, version, now_ms, topics, client_id, client_host, may_describe, base=base)
    if outcome.response is None or outcome.response["error_code"] != 0:
        return HeartbeatOutcome(outcome.response)
    sessions = [Deadline("session", group_id, m.member_id, now_ms + groups.member_session_ms(group_id, m))
                for m in base.members.values()]
    if outcome.rebalance is not None:
        entry = H.retrigger(outcome.rebalance, H.MIGRATION_FROM_CLASSIC)
    else:  # the joiner changed nothing: no bump, the conversion is still an entry (at the classic generation)
        joiner = Member(outcome.response["member_id"], client_id=client_id, client_host=client_host)
        entry = H.entry(base, base.group_epoch, H.MIGRATION_FROM_CLASSIC, joiner, now_ms,
                        groups.assignor_after(base, {}), joined=(joiner.member_id,))
    return HeartbeatOutcome(outcome.response, records + outcome.records, sessions + outcome.deadlines,
                            rebalance=entry)


def conversion_records(classic: Group, topics: Mapping[str, TopicInfo]) -> list[R.Record]:
    """The records that create the consumer group ``classic`` becomes (ConsumerGroup.createConsumerGroupRecords)."""
    group_id, generation = classic.group_id, classic.generation
    members = []
    for m in classic.members.values():
        protocol = classic.protocol_name or m.protocols[0][0]
        sub = decode_subscription(m.metadata(protocol))
        owned = decode_assignment(m.assignment).assigned_partitions if m.assignment else ()
        members.append(Member(
            m.member_id, instance_id=m.group_instance_id, rack_id=sub.rack_id, client_id=m.client_id,
            client_host=m.client_host, subscribed_topic_names=canonical_names(sub.topics),
            rebalance_timeout_ms=m.rebalance_timeout_ms, member_epoch=generation, previous_member_epoch=generation,
            state=MemberState.STABLE, assigned=_to_ids(owned, topics),
            classic=R.ClassicMemberMetadata(m.session_timeout_ms, tuple(m.protocols))))
    return ([R.Record(R.MemberMetadataKey(group_id, m.member_id), m.metadata_value()) for m in members]
            + [R.Record(R.MetadataKey(group_id), R.MetadataValue(generation))]
            + [R.Record(R.TargetAssignmentMemberKey(group_id, m.member_id), R.TargetAssignmentMemberValue(dict(m.assigned)))
               for m in members]
            + [R.Record(R.TargetAssignmentMetadataKey(group_id), R.TargetAssignmentMetadataValue(generation))]
            + [R.Record(R.CurrentAssignmentKey(group_id, m.member_id), m.assignment_value()) for m in members])


def _to_ids(partitions: tuple[TopicPartition, ...] | list[TopicPartition],
            topics: Mapping[str, TopicInfo]) -> Assignment:
    out: dict[uuid.UUID, set[int]] = {}
    for topic, p in partitions:
        if topic in topics:
            out.setdefault(topics[topic].topic_id, set()).add(p)
    return assignment(out)


# ---------------------------------------------------------------- consumer -> classic

# ---------------------------------------------------------------- classic members inside a consumer group

def _member(group: ConsumerGroup, member_id: str, instance_id: str | None) -> Member:
    """Kafka's validateConsumerGroupMember + throwIfMemberDoesNotUseClassicProtocol."""
    if instance_id is None:
        member = group.members.get(member_id)
    else:
        member = group.static_member(instance_id)
        if member is not None and member.member_id != member_id:
            raise _Refused(82, f"Static member {member_id} with instance id {instance_id} was fenced by member "
                           f"{member.member_id}.")
    if member is None:
        raise _Refused(Err.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group.group_id}.")
    if member.classic is None:
        raise _Refused(Err.UNKNOWN_MEMBER_ID, f"Member {member_id} does not use the classic protocol.")
    return member


def _rejoin_needed(group: ConsumerGroup, m: Member) -> bool:
    if m.member_epoch < group.group_epoch or m.state is MemberState.UNREVOKED_PARTITIONS:
        return True
    return m.state is MemberState.UNRELEASED_PARTITIONS and not _waiting_on_unreleased(group, m)


def _waiting_on_unreleased(group: ConsumerGroup, m: Member) -> bool:
    for topic, parts in group.target(m.member_id).items():
        held = m.assigned.get(topic, frozenset())
        if any(p not in held and group.partition_epoch(topic, p) != -1 for p in parts):
            return True
    return False


def classic_heartbeat(groups: ConsumerGroups, group: ConsumerGroup, req: Mapping[str, Any],
                      now_ms: int) -> tuple[int, list[Deadline]]:
    """A classic Heartbeat: its error code and the member's re-armed session."""
    try:
        member = _member(group, req["member_id"], req.get("group_instance_id"))
    except _Refused as e:
        return int(e.code), []
    if req["generation_id"] != member.member_epoch:
        return ILLEGAL_GENERATION, []
    session = [Deadline("session", group.group_id, member.member_id,
                        now_ms + groups.member_session_ms(group.group_id, member))]
    return (REBALANCE_IN_PROGRESS if _rejoin_needed(group, member) else 0), session


def classic_sync(groups: ConsumerGroups, group: ConsumerGroup, req: Mapping[str, Any],
                 now_ms: int) -> tuple[dict, list[Deadline]]:
    """A classic SyncGroup: the member's current assignment (ConsumerProtocol) and its re-armed session."""
    def refuse(code: int) -> tuple[dict, list[Deadline]]:
        return {"error_code": code, "protocol_type": None, "protocol_name": None, "assignment": b""}, []

    try:
        member = _member(group, req["member_id"], req.get("group_instance_id"))
    except _Refused as e:
        return refuse(int(e.code))
    if req["generation_id"] != member.member_epoch:
        return refuse(ILLEGAL_GENERATION)
    first_name, first_meta = member.classic.protocols[0]  # type: ignore[union-attr]
    ptype, pname = req.get("protocol_type"), req.get("protocol_name")
    if (ptype is not None and ptype != PROTOCOL_TYPE) or (pname is not None and pname != first_name):
        return refuse(INCONSISTENT_GROUP_PROTOCOL)
    if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
        return refuse(REBALANCE_IN_PROGRESS)
    names = {t.topic_id: t.topic_name for t in group.subscription_metadata.values()}
    data = _serialize(member.assigned, names, first_meta)
    session = [Deadline("session", group.group_id, member.member_id,
                        now_ms + groups.member_session_ms(group.group_id, member))]
    return {"error_code": 0, "protocol_type": ptype, "protocol_name": pname, "assignment": data}, session


def classic_join(groups: ConsumerGroups, group: ConsumerGroup, req: Mapping[str, Any], version: int, now_ms: int,
                 topics: Mapping[str, TopicInfo], client_id: str = "", client_host: str = "") -> HeartbeatOutcome:
    """A classic JoinGroup: its response (a JoinGroup answer) with the records and deadlines of the update."""
    from coordinator.core.responses import join_response

    member_id = req.get("member_id") or ""
    instance_id = req.get("group_instance_id") if version >= 5 else None
    protocols = tuple((p["name"], bytes(p["metadata"])) for p in req.get("protocols") or ())
    unknown = member_id == ""
    if unknown:
        member_id = groups.new_member_id()

    def refuse(code: int, mid: str = member_id) -> HeartbeatOutcome:
        return HeartbeatOutcome(join_response(version, code, mid))

    if len(group.members) >= groups.config.max_size and member_id not in group.members:
        return refuse(Err.GROUP_MAX_SIZE_REACHED, "")
    classic = [m for m in group.members.values() if m.classic is not None]
    names = {n for n, _ in protocols}
    if (req.get("protocol_type") or "") != PROTOCOL_TYPE or not names or (classic and not any(
            all(n in {p for p, _ in m.classic.protocols} for m in classic) for n in names)):  # type: ignore[union-attr]
        return refuse(INCONSISTENT_GROUP_PROTOCOL)
    if unknown and instance_id is None and version >= 4:
        return refuse(MEMBER_ID_REQUIRED)
    try:
        sub = decode_subscription(protocols[0][1])
    except ConsumerProtocolError:
        return refuse(INCONSISTENT_GROUP_PROTOCOL)
    existing = group.members.get(member_id) if instance_id is None else group.static_member(instance_id)
    if existing is not None and existing.member_id == member_id and existing.classic is None:
        return refuse(Err.UNKNOWN_MEMBER_ID)
    session = req["session_timeout_ms"]
    rebalance = req.get("rebalance_timeout_ms", -1)
    if version == 0 or rebalance is None or rebalance < 0:
        rebalance = session
    epoch = existing.member_epoch if existing is not None and existing.member_id == member_id else 0
    request = {"group_id": group.group_id, "member_id": member_id, "member_epoch": epoch,
               "instance_id": instance_id, "rack_id": sub.rack_id or None, "rebalance_timeout_ms": rebalance,
               "subscribed_topic_names": list(sub.topics), "subscribed_topic_regex": None, "server_assignor": None,
               "topic_partitions": to_wire(_to_ids(sub.owned_partitions, topics)) if epoch else [],
               "classic": R.ClassicMemberMetadata(session, protocols)}
    outcome = groups.heartbeat(request, 1, now_ms, topics, client_id, client_host)
    response = outcome.response or {}
    if response.get("error_code"):
        return refuse(response["error_code"])
    return HeartbeatOutcome(join_response(version, 0, member_id, response["member_epoch"], PROTOCOL_TYPE,
                                          protocols[0][0], "", []), outcome.records, outcome.deadlines,
                            rebalance=outcome.rebalance)


def classic_leave(groups: ConsumerGroups, group: ConsumerGroup, req: Mapping[str, Any], version: int,
                  topics: Mapping[str, TopicInfo], now_ms: int = 0) -> HeartbeatOutcome:
    """A classic LeaveGroup: each named classic member removed, one epoch bump for all (a LeaveGroup answer)."""
    from coordinator.core.responses import leave_response

    if version >= 3:
        leaving = [(m.get("member_id") or "", m.get("group_instance_id")) for m in req.get("members") or ()]
    else:
        leaving = [(req.get("member_id") or "", None)]
    results, gone = [], []
    reasons = [m.get("reason") if version >= 5 else None for m in req.get("members") or ()] or [None]
    reason = None  # the first leaver's (LeaveGroup v5+): its history entry keeps it
    for i, (member_id, instance_id) in enumerate(leaving):
        try:
            if instance_id is not None and not member_id:
                found = group.static_member(instance_id)
                member = _member(group, found.member_id if found else "", instance_id)
            else:
                member = _member(group, member_id, instance_id)
            if member.member_id not in {m.member_id for m in gone}:
                gone.append(member)
                reason = reasons[i] if len(gone) == 1 and i < len(reasons) else reason
            results.append({"member_id": member.member_id, "group_instance_id": instance_id, "error_code": 0})
        except _Refused as e:
            results.append({"member_id": member_id, "group_instance_id": instance_id, "error_code": int(e.code)})
    response = leave_response(version, 0, results)
    if not gone:
        return HeartbeatOutcome(response)
    gid = group.group_id
    records = [r for m in gone for r in _removal(gid, m.member_id)]
    names: Counter[str] = Counter(group.subscribed_topic_names)
    for m in gone:
        names.subtract(group.effective_names(m))
    metadata = _subscription_metadata(+names, topics)
    if metadata != group.subscription_metadata:
        records.append(R.Record(R.PartitionMetadataKey(gid), _metadata_value(metadata)))
    records.append(R.Record(R.MetadataKey(gid), R.MetadataValue(group.group_epoch + 1)))
    deadlines = [Deadline(kind, gid, m.member_id, None) for m in gone for kind in ("session", "rebalance")]
    entry = H.entry(group, group.group_epoch + 1, H.MEMBER_LEFT, gone[0], now_ms,
                    groups.assignor_after(group, {m.member_id: None for m in gone}),
                    left=[m.member_id for m in gone], reason=reason)
    return HeartbeatOutcome(response, records, deadlines, rebalance=entry)
