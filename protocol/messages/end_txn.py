"""EndTxn (26): a transactional producer commits (``committed`` true) or aborts its ongoing transaction.

Rules: the client sends it to the transaction coordinator, which answers once PrepareCommit/PrepareAbort is
durable and writes the markers afterwards. We serve v0-4 (flexible from v3), Kafka 3.9's range; v4 admits
TRANSACTION_ABORTABLE, which the coordinator never answers. v5 (TV2, KIP-890 part 2: the response returns the
producer id and epoch for the next transaction) is not served, and its response fields are not declared.
"""

from protocol.schema import ApiSchema, f

SCHEMA = ApiSchema(
    key=26,
    name="EndTxn",
    valid="0-4",
    flexible="3+",
    request=(
        f("transactional_id", "string"),
        f("producer_id", "int64"),
        f("producer_epoch", "int16"),
        f("committed", "bool"),
    ),
    response=(
        f("throttle_time_ms", "int32"),
        f("error_code", "int16"),
    ),
)
