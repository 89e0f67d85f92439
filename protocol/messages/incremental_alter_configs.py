"""IncrementalAlterConfigs (44): change some of a resource's config overrides.

Rules: we serve v0-1 (flexible from v1). ``config_operation``: 0 SET, 1 DELETE (back to the default),
2 APPEND and 3 SUBTRACT (list-typed keys only). ``error_message`` is null on success. ``validate_only``
checks without changing anything.
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=44,
    name="IncrementalAlterConfigs",
    valid="0-1",
    flexible="1+",
    request=(
        arr("resources", "0+",
            f("resource_type", "int8"),
            f("resource_name", "string"),
            arr("configs", "0+",
                f("name", "string"),
                f("config_operation", "int8"),
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
