"""The migration policy and the downgrade of a consumer group to a classic one (migration.py states the rules;
this part sits apart so the heartbeat's fencing can call it: ``ConsumerGroups._fence``).

Rules: ``parse_policy`` is Kafka's ConsumerGroupMigrationPolicy.parse (case-insensitive, unknown or None ->
disabled). ``downgrade`` is Kafka's validateOnlineDowngradeWithFencedMember + ClassicGroup.fromConsumerGroup:
None unless every other member (at least one) is on the classic protocol, the policy allows downgrades and they
fit ``classic_max_size``; else the classic group's record value (protocol type consumer, generation = group epoch,
the protocol the members vote for, the first member leads, each member's target as a ConsumerProtocol
assignment at its metadata's version) and each member's protocols.
"""

from __future__ import annotations

import struct
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from client.consumer_protocol import Assignment as ProtocolAssignment
from client.consumer_protocol import TopicPartition, encode_assignment
from coordinator.core.consumer_group.group import ConsumerGroup
from coordinator.core.consumer_group.model import Assignment, to_wire
from coordinator.core.records import GroupMetadataValue, MemberRecord

PROTOCOL_TYPE = "consumer"


class MigrationPolicy(str, Enum):
    DISABLED = "disabled"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    BIDIRECTIONAL = "bidirectional"

    @property
    def upgrade_enabled(self) -> bool:
        return self in (MigrationPolicy.UPGRADE, MigrationPolicy.BIDIRECTIONAL)

    @property
    def downgrade_enabled(self) -> bool:
        return self in (MigrationPolicy.DOWNGRADE, MigrationPolicy.BIDIRECTIONAL)


def parse_policy(name: str | None) -> MigrationPolicy:
    """Kafka's ConsumerGroupMigrationPolicy.parse: case-insensitive, unknown or None -> DISABLED."""
    try:
        return MigrationPolicy((name or "").lower())
    except ValueError:
        return MigrationPolicy.DISABLED



@dataclass(frozen=True, slots=True)
class Downgrade:
    """The classic group that follows a consumer group's tombstones: its record's value, and each member's
    protocols (the record keeps only the selected one's metadata)."""

    group_id: str
    value: GroupMetadataValue
    protocols: Mapping[str, tuple[tuple[str, bytes], ...]]


def downgrade(group: ConsumerGroup, leaving_id: str, policy: str, classic_max_size: int,
              now_ms: int) -> Downgrade | None:
    """The classic group ``group`` becomes when ``leaving_id`` goes, or None when it stays a consumer group."""
    others = [m for m in group.members.values() if m.member_id != leaving_id]
    if not others or any(m.classic is None for m in others):
        return None
    if not parse_policy(policy).downgrade_enabled or len(others) > classic_max_size:
        return None
    support = Counter(name for m in others for name in {n for n, _ in m.classic.protocols})  # type: ignore[union-attr]
    candidates = {name for name, count in support.items() if count == len(others)}
    if not candidates:
        return None
    votes = Counter(next(n for n, _ in m.classic.protocols if n in candidates) for m in others)  # type: ignore
    protocol = votes.most_common(1)[0][0]
    names = {t.topic_id: t.topic_name for t in group.subscription_metadata.values()}
    records = []
    for m in others:
        metadata = next(meta for n, meta in m.classic.protocols if n == protocol)  # type: ignore[union-attr]
        records.append(MemberRecord(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                                    m.classic.session_timeout_ms, metadata,  # type: ignore[union-attr]
                                    _serialize(group.target(m.member_id), names, metadata)))
    value = GroupMetadataValue(PROTOCOL_TYPE, group.group_epoch, protocol, others[0].member_id, now_ms,
                               tuple(records))
    return Downgrade(group.group_id, value, {m.member_id: m.classic.protocols for m in others})  # type: ignore


def _serialize(a: Assignment, names: Mapping[uuid.UUID, str], metadata: bytes) -> bytes:
    """``a`` as a ConsumerProtocol assignment, at the version of the member's subscription ``metadata``."""
    version = struct.unpack_from(">h", metadata)[0] if len(metadata) >= 2 else 0
    parts = tuple(TopicPartition(names[tp["topic_id"]], p) for tp in to_wire(a) if tp["topic_id"] in names
                  for p in tp["partitions"])
    return encode_assignment(ProtocolAssignment(parts, None, min(max(version, 0), 3)))
