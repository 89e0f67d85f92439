"""DeleteGroups (42): delete empty groups (NON_EMPTY_GROUP otherwise), one result per group.

Rules: we serve v0-2 (flexible from v2). Kafka's JSON spells the request field ``GroupsNames``.
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=42,
    name="DeleteGroups",
    valid="0-2",
    flexible="2+",
    request=(
        f("groups_names", "[]string"),
    ),
    response=(
        f("throttle_time_ms", "int32"),
        arr("results", "0+",
            f("group_id", "string"),
            f("error_code", "int16")),
    ),
)
