"""ListOffsets (2): a client asks for the offset at a timestamp (or earliest -2 / latest -1) per partition.

Rules:
- We serve v0-9 (flexible from v6), Kafka 3.9's range. v8 and v9 only add timestamps a client may ask for:
  -4 (earliest local, KIP-405) is the log start offset, as Kafka answers without tiered storage; -5 (latest
  tiered, KIP-1005) is offset -1 with leader epoch -1, Kafka's answer when remote storage is off. Kafka
  applies both at any version, and so do we. v0 asks for up to ``max_num_offsets`` offsets and is answered with
  ``old_style_offsets`` (Kafka's v0 handler: latest -> [log end], earliest -> [log start], a timestamp ->
  the start of the first segment not newer than it, as it read segment base offsets). ``timeout_ms`` (v10+)
  lies outside our range and is not declared.
- An unknown partition answers timestamp -1, offset -1 and leader epoch -1, as Kafka's
  ``ListOffsetsResponse.UNKNOWN_*`` values.
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=2,
    name="ListOffsets",
    valid="0-9",
    flexible="6+",
    request=(
        f("replica_id", "int32"),
        f("isolation_level", "int8", "2+"),
        arr("topics", "0+",
            f("name", "string"),
            arr("partitions", "0+",
                f("partition_index", "int32"),
                f("current_leader_epoch", "int32", "4+", default=-1),
                f("timestamp", "int64"),
                f("max_num_offsets", "int32", "0", default=1))),
    ),
    response=(
        f("throttle_time_ms", "int32", "2+"),
        arr("topics", "0+",
            f("name", "string"),
            arr("partitions", "0+",
                f("partition_index", "int32"),
                f("error_code", "int16"),
                f("old_style_offsets", "[]int64", "0"),
                f("timestamp", "int64", "1+", default=-1),
                f("offset", "int64", "1+", default=-1),
                f("leader_epoch", "int32", "4+", default=-1))),
    ),
)
