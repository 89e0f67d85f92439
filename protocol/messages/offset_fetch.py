"""OffsetFetch (9): a member reads a group's committed offsets (null topics = all partitions, v2+).

Rules:
- We serve v0-9 (flexible from v6); v0 is v1's shape (Kafka read v0 from ZooKeeper; we have one store).
  Two shapes: v0-7 ask for one group (``group_id``, ``topics``) and answer
  ``topics`` plus a top-level ``error_code`` (v2-7); v8+ batch groups in ``groups[]`` on both sides.
- ``topic_id`` (v10+) lies outside our range and is not declared.
- ``metadata`` is nullable but, as in Kafka, never null: "" for a partition with no committed offset (offset
  -1, leader epoch -1) and for a commit that sent null metadata.
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=9,
    name="OffsetFetch",
    valid="0-9",
    flexible="6+",
    request=(
        f("group_id", "string", "0-7"),
        arr("topics", "0-7",
            f("name", "string", "0-7"),
            f("partition_indexes", "[]int32", "0-7"),
            nullable="2-7"),
        arr("groups", "8+",
            f("group_id", "string", "8+"),
            f("member_id", "string", "9+", nullable="9+"),
            f("member_epoch", "int32", "9+", default=-1),
            arr("topics", "8+",
                f("name", "string", "8-9"),
                f("partition_indexes", "[]int32", "8+"),
                nullable="8+")),
        f("require_stable", "bool", "7+"),
    ),
    response=(
        f("throttle_time_ms", "int32", "3+"),
        arr("topics", "0-7",
            f("name", "string", "0-7"),
            arr("partitions", "0-7",
                f("partition_index", "int32", "0-7"),
                f("committed_offset", "int64", "0-7"),
                f("committed_leader_epoch", "int32", "5-7", default=-1),
                f("metadata", "string", "0-7", nullable="0-7"),
                f("error_code", "int16", "0-7"))),
        f("error_code", "int16", "2-7"),
        arr("groups", "8+",
            f("group_id", "string", "8+"),
            arr("topics", "8+",
                f("name", "string", "8-9"),
                arr("partitions", "8+",
                    f("partition_index", "int32", "8+"),
                    f("committed_offset", "int64", "8+"),
                    f("committed_leader_epoch", "int32", "8+", default=-1),
                    f("metadata", "string", "8+", nullable="8+"),
                    f("error_code", "int16", "8+"))),
            f("error_code", "int16", "8+")),
    ),
)
