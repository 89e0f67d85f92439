"""AddPartitionsToTxn (24): a transactional producer adds partitions to its ongoing transaction.

Rules: the client sends it to the transaction coordinator before its first Produce to each partition. We
declare v0-3, the client form (flexible from v3), whose fields Kafka names ``V3AndBelow*``. The v4-5 broker
form (``transactions[]`` with ``verify_only``, KIP-890's verify path between brokers, and a top-level
``error_code`` in the response) is not declared: in one process the partitions ask the coordinator directly.
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=24,
    name="AddPartitionsToTxn",
    valid="0-3",
    flexible="3+",
    request=(
        f("v3_and_below_transactional_id", "string", "0-3"),
        f("v3_and_below_producer_id", "int64", "0-3"),
        f("v3_and_below_producer_epoch", "int16", "0-3"),
        arr("v3_and_below_topics", "0-3",
            f("name", "string"),
            f("partitions", "[]int32")),
    ),
    response=(
        f("throttle_time_ms", "int32"),
        arr("results_by_topic_v3_and_below", "0-3",
            f("name", "string"),
            arr("results_by_partition", "0+",
                f("partition_index", "int32"),
                f("partition_error_code", "int16"))),
    ),
)
