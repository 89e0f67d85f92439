"""JoinGroup (11): a member asks to join a group and learns its generation, leader and (leader only) members.

Null or empty, as Kafka's handler writes them: ``protocol_name`` is null on error from v7 (nullable there)
and "" before; ``protocol_type`` (v7+) null on error; member ``group_instance_id`` null for dynamic
members. Built in ``coordinator/core/responses.py``.
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=11,
    name="JoinGroup",
    valid="0-9",
    flexible="6+",
    request=(
        f("group_id", "string"),
        f("session_timeout_ms", "int32"),
        f("rebalance_timeout_ms", "int32", "1+", default=-1),
        f("member_id", "string"),
        f("group_instance_id", "string", "5+", nullable="5+"),
        f("protocol_type", "string"),
        arr("protocols", "0+",
            f("name", "string"),
            f("metadata", "bytes")),
        f("reason", "string", "8+", nullable="8+"),
    ),
    response=(
        f("throttle_time_ms", "int32", "2+"),
        f("error_code", "int16"),
        f("generation_id", "int32", default=-1),
        f("protocol_type", "string", "7+", nullable="7+"),
        f("protocol_name", "string", nullable="7+"),
        f("leader", "string"),
        f("skip_assignment", "bool", "9+"),
        f("member_id", "string"),
        arr("members", "0+",
            f("member_id", "string"),
            f("group_instance_id", "string", "5+", nullable="5+"),
            f("metadata", "bytes")),
    ),
)
