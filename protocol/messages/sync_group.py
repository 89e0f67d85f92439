"""SyncGroup (14): the leader hands in assignments; every member receives its own.

Rules: we serve v0-5 (flexible from v4); ``group_instance_id`` from v3; ``protocol_type`` and
``protocol_name`` (both nullable) from v5 on both sides: the group's on success, null on error, as
Kafka's handler writes them.
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=14,
    name="SyncGroup",
    valid="0-5",
    flexible="4+",
    request=(
        f("group_id", "string"),
        f("generation_id", "int32"),
        f("member_id", "string"),
        f("group_instance_id", "string", "3+", nullable="3+"),
        f("protocol_type", "string", "5+", nullable="5+"),
        f("protocol_name", "string", "5+", nullable="5+"),
        arr("assignments", "0+",
            f("member_id", "string"),
            f("assignment", "bytes")),
    ),
    response=(
        f("throttle_time_ms", "int32", "1+"),
        f("error_code", "int16"),
        f("protocol_type", "string", "5+", nullable="5+"),
        f("protocol_name", "string", "5+", nullable="5+"),
        f("assignment", "bytes"),
    ),
)
