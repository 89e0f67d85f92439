"""WriteTxnMarkers (27): the transaction coordinator asks partition leaders to write COMMIT/ABORT markers.

Rules: sent broker to broker (CLUSTER_ACTION), never by clients; ``transaction_result`` true is COMMIT. We
declare v0-1 (flexible from v1), Kafka 3.9's range; Kafka 4's JSON dropped v0 (same fields, not flexible).
v2's ``transaction_version`` (KIP-1228) is not declared. Our own markers are appended in process.
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=27,
    name="WriteTxnMarkers",
    valid="0-1",
    flexible="1+",
    request=(
        arr("markers", "0+",
            f("producer_id", "int64"),
            f("producer_epoch", "int16"),
            f("transaction_result", "bool"),
            arr("topics", "0+",
                f("name", "string"),
                f("partition_indexes", "[]int32")),
            f("coordinator_epoch", "int32")),
    ),
    response=(
        arr("markers", "0+",
            f("producer_id", "int64"),
            arr("topics", "0+",
                f("name", "string"),
                arr("partitions", "0+",
                    f("partition_index", "int32"),
                    f("error_code", "int16")))),
    ),
)
