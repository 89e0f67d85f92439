"""ListTransactions (66, KIP-664): the transactions a coordinator knows, filtered by state and producer id.

Rules: an admin client sends it to every broker. We serve v0-1 (flexible from v0), Kafka 3.9's range: v1
adds ``duration_filter`` (-1: no filter, KIP-994). v2's ``transactional_id_pattern`` is not declared.
Unknown state names come back in ``unknown_state_filters``.
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=66,
    name="ListTransactions",
    valid="0-1",
    flexible="0+",
    request=(
        f("state_filters", "[]string"),
        f("producer_id_filters", "[]int64"),
        f("duration_filter", "int64", "1+", default=-1),
    ),
    response=(
        f("throttle_time_ms", "int32"),
        f("error_code", "int16"),
        f("unknown_state_filters", "[]string"),
        arr("transaction_states", "0+",
            f("transactional_id", "string"),
            f("producer_id", "int64"),
            f("transaction_state", "string")),
    ),
)
