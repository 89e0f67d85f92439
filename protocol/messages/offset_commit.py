"""OffsetCommit (8): a member commits consumed offsets for a group.

Rules:
- We serve v2-9 (flexible from v8). Kafka's JSON names the generation field
  ``GenerationIdOrMemberEpoch`` (a generation for classic groups, a member epoch for KIP-848 groups); -1
  with an empty member id commits for a group with no members.
- ``retention_time_ms`` exists only in v2-4. ``commit_timestamp`` (v1 only) and ``topic_id`` (v10+) lie
  outside our range and are not declared.
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=8,
    name="OffsetCommit",
    valid="2-9",
    flexible="8+",
    request=(
        f("group_id", "string"),
        f("generation_id_or_member_epoch", "int32", "1+", default=-1),
        f("member_id", "string", "1+"),
        f("group_instance_id", "string", "7+", nullable="7+"),
        f("retention_time_ms", "int64", "2-4", default=-1),
        arr("topics", "0+",
            f("name", "string", "0-9"),
            arr("partitions", "0+",
                f("partition_index", "int32"),
                f("committed_offset", "int64"),
                f("committed_leader_epoch", "int32", "6+", default=-1),
                f("committed_metadata", "string", nullable="0+"))),
    ),
    response=(
        f("throttle_time_ms", "int32", "3+"),
        arr("topics", "0+",
            f("name", "string", "0-9"),
            arr("partitions", "0+",
                f("partition_index", "int32"),
                f("error_code", "int16"))),
    ),
)
