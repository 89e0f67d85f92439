"""OffsetDelete (47, KIP-496): delete a group's committed offsets for some partitions.

Rules: we serve v0, the only version (not flexible). The response's top-level ``error_code`` carries a
group-level error (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, NOT_COORDINATOR, ...) with no topics; otherwise each
partition has its own code (GROUP_SUBSCRIBED_TO_TOPIC, UNKNOWN_TOPIC_OR_PARTITION or NONE).
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=47,
    name="OffsetDelete",
    valid="0",
    flexible="none",
    request=(
        f("group_id", "string"),
        arr("topics", "0+",
            f("name", "string"),
            arr("partitions", "0+",
                f("partition_index", "int32"))),
    ),
    response=(
        f("error_code", "int16"),
        f("throttle_time_ms", "int32"),
        arr("topics", "0+",
            f("name", "string"),
            arr("partitions", "0+",
                f("partition_index", "int32"),
                f("error_code", "int16"))),
    ),
)
