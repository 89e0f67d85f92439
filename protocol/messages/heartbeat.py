"""Heartbeat (12): a member tells the coordinator it is alive in its generation.

Rules: we serve v0-4 (flexible from v4); ``group_instance_id`` (static membership) from v3.
"""

from protocol.schema import ApiSchema, f

SCHEMA = ApiSchema(
    key=12,
    name="Heartbeat",
    valid="0-4",
    flexible="4+",
    request=(
        f("group_id", "string"),
        f("generation_id", "int32"),
        f("member_id", "string"),
        f("group_instance_id", "string", "3+", nullable="3+"),
    ),
    response=(
        f("throttle_time_ms", "int32", "1+"),
        f("error_code", "int16"),
    ),
)
