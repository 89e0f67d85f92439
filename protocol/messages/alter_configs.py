"""AlterConfigs (33): replace the whole set of a resource's config overrides (the legacy, non-incremental form).

Rules: we serve v0-2 (flexible from v2). Keys not given return to their defaults. ``error_message`` is null
on success. ``validate_only`` checks without changing anything.
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=33,
    name="AlterConfigs",
    valid="0-2",
    flexible="2+",
    request=(
        arr("resources", "0+",
            f("resource_type", "int8"),
            f("resource_name", "string"),
            arr("configs", "0+",
                f("name", "string"),
                f("value", "string", nullable="0+"))),
        f("validate_only", "bool"),
    ),
    response=(
        f("throttle_time_ms", "int32"),
        arr("responses", "0+",
            f("error_code", "int16"),
            f("error_message", "string", nullable="0+"),
            f("resource_type", "int8"),
            f("resource_name", "string")),
    ),
)
