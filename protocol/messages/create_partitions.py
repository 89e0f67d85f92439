"""CreatePartitions (37): grow a topic's partition count (groups subscribed to it then rebalance).

Rules: v0-3, flexible from v2. ``assignments`` is null for "let the cluster place them" (a single node
holds every partition). Not in DESIGN.md's first table: added so that partition growth, a rebalance
trigger of seed 000, can be exercised by real clients (kafka-python ``create_partitions``).
``error_message``: null on success, a message on error, as Kafka.
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=37,
    name="CreatePartitions",
    valid="0-3",
    flexible="2+",
    request=(
        arr("topics", "0+",
            f("name", "string"),
            f("count", "int32"),
            arr("assignments", "0+",
                f("broker_ids", "[]int32"),
                nullable="0+")),
        f("timeout_ms", "int32"),
        f("validate_only", "bool"),
    ),
    response=(
        f("throttle_time_ms", "int32"),
        arr("results", "0+",
            f("name", "string"),
            f("error_code", "int16"),
            f("error_message", "string", nullable="0+")),
    ),
)
