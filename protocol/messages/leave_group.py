"""LeaveGroup (13): members leave a group (one ``member_id`` in v0-2, a batch of ``members[]`` from v3).

Rules: we serve v0-5 (flexible from v4); a per-member ``reason`` from v5; the response carries per-member
errors from v3. Member ``group_instance_id`` echoes the request (null for a dynamic member), as Kafka.
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=13,
    name="LeaveGroup",
    valid="0-5",
    flexible="4+",
    request=(
        f("group_id", "string"),
        f("member_id", "string", "0-2"),
        arr("members", "3+",
            f("member_id", "string", "3+"),
            f("group_instance_id", "string", "3+", nullable="3+"),
            f("reason", "string", "5+", nullable="5+")),
    ),
    response=(
        f("throttle_time_ms", "int32", "1+"),
        f("error_code", "int16"),
        arr("members", "3+",
            f("member_id", "string", "3+"),
            f("group_instance_id", "string", "3+", nullable="3+"),
            f("error_code", "int16", "3+")),
    ),
)
