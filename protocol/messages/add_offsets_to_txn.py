"""AddOffsetsToTxn (25): a transactional producer adds a group's offsets to its ongoing transaction.

Rules: the client sends it to the transaction coordinator before TxnOffsetCommit; the coordinator adds the
group's ``__consumer_offsets`` partition to the transaction. We serve v0-4 (flexible from v3), Kafka 3.9's
range; the fields are the same in every version (v2 admits PRODUCER_FENCED, v4 TRANSACTION_ABORTABLE, which the
coordinator never answers: Kafka 3.9 returns it only from KIP-890's verify path).
"""

from protocol.schema import ApiSchema, f

SCHEMA = ApiSchema(
    key=25,
    name="AddOffsetsToTxn",
    valid="0-4",
    flexible="3+",
    request=(
        f("transactional_id", "string"),
        f("producer_id", "int64"),
        f("producer_epoch", "int16"),
        f("group_id", "string"),
    ),
    response=(
        f("throttle_time_ms", "int32"),
        f("error_code", "int16"),
    ),
)
