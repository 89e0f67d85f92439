"""DescribeTransactions (65, KIP-664): the state of some transactional ids.

Rules: an admin client sends it to each id's transaction coordinator. We declare v0, the only version
(flexible). ``transaction_state`` is the state's name ("Ongoing", "PrepareCommit", ...); ``topics`` lists
the partitions of an active transaction (during Prepare*, only those still waiting for a marker).
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=65,
    name="DescribeTransactions",
    valid="0",
    flexible="0+",
    request=(
        f("transactional_ids", "[]string"),
    ),
    response=(
        f("throttle_time_ms", "int32"),
        arr("transaction_states", "0+",
            f("error_code", "int16"),
            f("transactional_id", "string"),
            f("transaction_state", "string"),
            f("transaction_timeout_ms", "int32"),
            f("transaction_start_time_ms", "int64"),
            f("producer_id", "int64"),
            f("producer_epoch", "int16"),
            arr("topics", "0+",
                f("topic", "string"),
                f("partitions", "[]int32"))),
    ),
)
