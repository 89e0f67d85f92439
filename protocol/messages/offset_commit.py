"""OffsetCommit (8): a member commits consumed offsets for a group.

Rules:
- We serve v0-9 (flexible from v8); v0 has no group membership (generation -1, member "": a simple commit). Kafka's JSON names the generation field
  ``GenerationIdOrMemberEpoch`` (a generation for classic groups, a member epoch for KIP-848 groups); -1
  with an empty member id commits for a group with no members.
- ``retention_time_ms`` exists only in v2-4; ``commit_timestamp`` only in v1 (-1: the broker's time).
  ``topic_id`` (v10+) lies outside our range and is not declared.
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=8,
    name="OffsetCommit",
    valid="0-9",
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
                f("commit_timestamp", "int64", "1", default=-1),
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
