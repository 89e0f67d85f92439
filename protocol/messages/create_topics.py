"""CreateTopics (19): create topics with a partition count, replication factor or explicit assignment.

Rules:
- We serve v0-7 (flexible from v5); v0 has no ``validate_only``, v0-1 no throttle time. The request fields ``timeoutMs``/``validateOnly`` are camelCase in
  Kafka's JSON; in snake_case they are ``timeout_ms`` (default 60000) and ``validate_only``.
- v5+ responses echo ``num_partitions``, ``replication_factor`` (default -1) and the nullable ``configs``,
  plus a tagged ``topic_config_error_code`` (tag 0); ``topic_id`` from v7.
- ``error_message``: null on success, a message on error (Kafka). ``configs``: null on error (Kafka); on
  success (and with ``validate_only``) every topic config with its value, source and flags, as Kafka lists
  them. A name given twice is INVALID_REQUEST "Duplicate topic name." (one answer for it, nothing created).
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=19,
    name="CreateTopics",
    valid="0-7",
    flexible="5+",
    request=(
        arr("topics", "0+",
            f("name", "string"),
            f("num_partitions", "int32"),
            f("replication_factor", "int16"),
            arr("assignments", "0+",
                f("partition_index", "int32"),
                f("broker_ids", "[]int32")),
            arr("configs", "0+",
                f("name", "string"),
                f("value", "string", nullable="0+"))),
        f("timeout_ms", "int32", default=60000),
        f("validate_only", "bool", "1+"),
    ),
    response=(
        f("throttle_time_ms", "int32", "2+"),
        arr("topics", "0+",
            f("name", "string"),
            f("topic_id", "uuid", "7+"),
            f("error_code", "int16"),
            f("error_message", "string", "1+", nullable="0+"),
            f("topic_config_error_code", "int16", "5+", tag=0, tagged="5+"),
            f("num_partitions", "int32", "5+", default=-1),
            f("replication_factor", "int16", "5+", default=-1),
            arr("configs", "5+",
                f("name", "string", "5+"),
                f("value", "string", "5+", nullable="5+"),
                f("read_only", "bool", "5+"),
                f("config_source", "int8", "5+", default=-1),
                f("is_sensitive", "bool", "5+"),
                nullable="5+")),
    ),
)
