"""Metadata (3): brokers, topics and partition leaders.

Rules:
- We serve v0-13 (flexible from v9). A null ``topics`` (v1+) means all topics, an empty list none.
- ``cluster_authorized_operations`` exists only in v8-10 (request flag and response field);
  ``topic_authorized_operations`` from v8; both default to INT32_MIN ("not requested").
- Topic ``name`` is nullable in the request from v10 (lookup by ``topic_id``) and in the response from v12;
  we always write it. ``cluster_id`` is always written (never null); broker ``rack`` is null when unset, as
  Kafka.
"""

from protocol.schema import ApiSchema, arr, f

INT32_MIN = -2147483648

SCHEMA = ApiSchema(
    key=3,
    name="Metadata",
    valid="0-13",
    flexible="9+",
    request=(
        arr("topics", "0+",
            f("topic_id", "uuid", "10+"),
            f("name", "string", nullable="10+"),
            nullable="1+"),
        f("allow_auto_topic_creation", "bool", "4+", default=True),
        f("include_cluster_authorized_operations", "bool", "8-10"),
        f("include_topic_authorized_operations", "bool", "8+"),
    ),
    response=(
        f("throttle_time_ms", "int32", "3+"),
        arr("brokers", "0+",
            f("node_id", "int32"),
            f("host", "string"),
            f("port", "int32"),
            f("rack", "string", "1+", nullable="1+")),
        f("cluster_id", "string", "2+", nullable="2+"),
        f("controller_id", "int32", "1+", default=-1),
        arr("topics", "0+",
            f("error_code", "int16"),
            f("name", "string", nullable="12+"),
            f("topic_id", "uuid", "10+"),
            f("is_internal", "bool", "1+"),
            arr("partitions", "0+",
                f("error_code", "int16"),
                f("partition_index", "int32"),
                f("leader_id", "int32"),
                f("leader_epoch", "int32", "7+", default=-1),
                f("replica_nodes", "[]int32"),
                f("isr_nodes", "[]int32"),
                f("offline_replicas", "[]int32", "5+")),
            f("topic_authorized_operations", "int32", "8+", default=INT32_MIN)),
        f("cluster_authorized_operations", "int32", "8-10", default=INT32_MIN),
        f("error_code", "int16", "13+"),
    ),
)
