"""Produce (0): a client appends record batches to partitions; the response gives each batch's base offset.

Rules:
- We serve v0-11 (Kafka 3.9's range; v11 only tells us the client handles TRANSACTION_ABORTABLE, which we never
  answer, so it is v10 on the wire); v0-2 are declared (so they can be decoded) but the handler rejects them (DESIGN.md).
- Apache Kafka 4.x's ProduceRequest/Response.json start at v3 (KIP-896 removed v0-2). For v0-2 the fields
  below are those of Kafka's older protocol (3.x JSON, kafka-python's ``kafka/protocol/old/produce.py``):
  request ``acks timeout_ms topic_data[name partition_data[index records]]``; response
  ``responses[name partition_responses[index error_code base_offset]]``, ``throttle_time_ms`` from v1,
  ``log_append_time_ms`` from v2. The version strings already say so ("0+", "1+", "2+").
- ``topic_id`` (v13+) lies beyond our range and is not declared.
- ``error_message`` (v8+) null on success; ``record_errors`` an empty array unless a record is named.
"""

from protocol.schema import ApiSchema, arr, f, struct

SCHEMA = ApiSchema(
    key=0,
    name="Produce",
    valid="0-11",
    flexible="9+",
    request=(
        f("transactional_id", "string", "3+", nullable="3+"),
        f("acks", "int16"),
        f("timeout_ms", "int32"),
        arr("topic_data", "0+",
            f("name", "string", "0-12"),
            arr("partition_data", "0+",
                f("index", "int32"),
                f("records", "records", nullable="0+"))),
    ),
    response=(
        arr("responses", "0+",
            f("name", "string", "0-12"),
            arr("partition_responses", "0+",
                f("index", "int32"),
                f("error_code", "int16"),
                f("base_offset", "int64"),
                f("log_append_time_ms", "int64", "2+", default=-1),
                f("log_start_offset", "int64", "5+", default=-1),
                arr("record_errors", "8+",
                    f("batch_index", "int32", "8+"),
                    f("batch_index_error_message", "string", "8+", nullable="8+")),
                f("error_message", "string", "8+", nullable="8+"),
                struct("current_leader", "10+",
                       f("leader_id", "int32", "10+", default=-1),
                       f("leader_epoch", "int32", "10+", default=-1),
                       tag=0, tagged="10+"))),
        f("throttle_time_ms", "int32", "1+"),
        arr("node_endpoints", "10+",
            f("node_id", "int32", "10+"),
            f("host", "string", "10+"),
            f("port", "int32", "10+"),
            f("rack", "string", "10+", nullable="10+"),
            tag=0, tagged="10+"),
    ),
)
