"""ListGroups (16): every group this coordinator owns, optionally filtered by state (v4+) and type (v5+).

Rules: we serve v0-5 (flexible from v3); each listed group carries ``group_state`` from v4 and
``group_type`` from v5.
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=16,
    name="ListGroups",
    valid="0-5",
    flexible="3+",
    request=(
        f("states_filter", "[]string", "4+"),
        f("types_filter", "[]string", "5+"),
    ),
    response=(
        f("throttle_time_ms", "int32", "1+"),
        f("error_code", "int16"),
        arr("groups", "0+",
            f("group_id", "string"),
            f("protocol_type", "string"),
            f("group_state", "string", "4+"),
            f("group_type", "string", "5+")),
    ),
)
