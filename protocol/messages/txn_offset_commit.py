"""TxnOffsetCommit (28): a transactional producer commits consumed offsets as part of its transaction.

Rules: the client sends it to the group coordinator; the offsets stay pending for the producer id until the
COMMIT or ABORT marker. We serve v0-4 (flexible from v3), Kafka 3.9's range: v2+ carries
``committed_leader_epoch`` (-1), v3+ the member's ``generation_id`` (-1), ``member_id`` and nullable
``group_instance_id`` (KIP-447). v5 (TV2: the partition is added implicitly) is not served.
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=28,
    name="TxnOffsetCommit",
    valid="0-4",
    flexible="3+",
    request=(
        f("transactional_id", "string"),
        f("group_id", "string"),
        f("producer_id", "int64"),
        f("producer_epoch", "int16"),
        f("generation_id", "int32", "3+", default=-1),
        f("member_id", "string", "3+"),
        f("group_instance_id", "string", "3+", nullable="3+"),
        arr("topics", "0+",
            f("name", "string"),
            arr("partitions", "0+",
                f("partition_index", "int32"),
                f("committed_offset", "int64"),
                f("committed_leader_epoch", "int32", "2+", default=-1),
                f("committed_metadata", "string", nullable="0+"))),
    ),
    response=(
        f("throttle_time_ms", "int32"),
        arr("topics", "0+",
            f("name", "string"),
            arr("partitions", "0+",
                f("partition_index", "int32"),
                f("error_code", "int16"))),
    ),
)
