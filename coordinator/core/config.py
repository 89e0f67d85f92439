"""Group coordinator configuration: a frozen dataclass whose fields are Kafka broker keys.

Each field is the Kafka broker key with dots replaced by underscores; `GroupConfig.from_kafka_keys`
accepts the dotted names (e.g. ``{"group.initial.rebalance.delay.ms": 0}``) and rejects unknown keys.
Defaults are Apache Kafka's defaults. Invariant: min session timeout <= max session timeout, all
durations >= 0, group.max.size >= 1, offsets.topic.num.partitions >= 1 (checked in __post_init__).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True, slots=True)
class GroupConfig:
    # group.initial.rebalance.delay.ms: wait this long for more members before the first rebalance of an
    # Empty group; extended by the same amount while members keep arriving, bounded by rebalance timeout.
    group_initial_rebalance_delay_ms: int = 3000
    # group.min.session.timeout.ms / group.max.session.timeout.ms: JoinGroup session timeout bounds.
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    # group.max.size: members per group (Kafka default Int.MaxValue).
    group_max_size: int = 2_147_483_647
    # offsets.topic.num.partitions: number of shards (offsets partitions).
    offsets_topic_num_partitions: int = 50
    # offsets.retention.minutes: KIP-211 retention (7 days).
    offsets_retention_minutes: int = 10_080
    # offsets.retention.check.interval.ms: how often expired offsets are looked for.
    offsets_retention_check_interval_ms: int = 600_000
    # offset.metadata.max.bytes: longest commit metadata string accepted.
    offset_metadata_max_bytes: int = 4096
    # offsets.max.committed (ours): committed offsets this node keeps at most; past it a group without offsets
    # gets POLICY_VIOLATION for its commits, groups with offsets may add 10% more (offsets.py).
    offsets_max_committed: int = 20_000_000
    # Not a Kafka config (GroupCoordinator.NewMemberJoinTimeoutMs): a new member's parked JoinGroup
    # expires after this long.
    new_member_join_timeout_ms: int = 300_000
    # group.history.size (ours): rebalances kept per group as records (rebalance_history.py); 0 records none.
    # Off here (Kafka keeps no history); the server's key defaults to 50 (coordinator/config.py).
    group_history_size: int = 0
    # offsets.history.size (ours): commits kept per group and partition as records (offset_history.py); 0 records
    # none. Off here (Kafka keeps none) and in the server's key too (coordinator/config.py says why).
    offsets_history_size: int = 0
    # offsets.history.min.interval.ms (ours): a committer's commits of a partition closer than this to its newest kept
    # entry (same generation) are not recorded; a move by another committer always is (offset_history.py)
    offsets_history_min_interval_ms: int = 0

    def __post_init__(self) -> None:
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ValueError("group.min.session.timeout.ms must be <= group.max.session.timeout.ms")
        if self.group_max_size < 1 or self.offsets_topic_num_partitions < 1:
            raise ValueError("group.max.size and offsets.topic.num.partitions must be >= 1")
        for f in fields(self):
            if getattr(self, f.name) < 0:
                raise ValueError(f"{f.name.replace('_', '.')} must be >= 0")

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000

    @classmethod
    def kafka_keys(cls) -> dict[str, str]:
        """Kafka dotted key -> field name."""
        return {f.name.replace("_", "."): f.name for f in fields(cls)}

    @classmethod
    def from_kafka_keys(cls, values: Mapping[str, Any]) -> GroupConfig:
        keys = cls.kafka_keys()
        unknown = sorted(k for k in values if k not in keys)
        if unknown:
            raise ValueError(f"unknown group coordinator config keys: {unknown}")
        return cls(**{keys[k]: int(v) for k, v in values.items()})
