"""DescribeProducers (61, KIP-664): the active producers of some partitions, as the partition leader sees them.

Rules: an admin client sends it to each partition's leader (``kafka-transactions.sh find-hanging``). We
declare v0, the only version (flexible). Per partition: nullable ``error_message``; per producer:
``producer_epoch`` is an int32 here, and ``last_sequence``, ``last_timestamp`` and
``current_txn_start_offset`` default to -1 (none).
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=61,
    name="DescribeProducers",
    valid="0",
    flexible="0+",
    request=(
        arr("topics", "0+",
            f("name", "string"),
            f("partition_indexes", "[]int32")),
    ),
    response=(
        f("throttle_time_ms", "int32"),
        arr("topics", "0+",
            f("name", "string"),
            arr("partitions", "0+",
                f("partition_index", "int32"),
                f("error_code", "int16"),
                f("error_message", "string", nullable="0+"),
                arr("active_producers", "0+",
                    f("producer_id", "int64"),
                    f("producer_epoch", "int32"),
                    f("last_sequence", "int32", default=-1),
                    f("last_timestamp", "int64", default=-1),
                    f("coordinator_epoch", "int32"),
                    f("current_txn_start_offset", "int64", default=-1)))),
    ),
)
