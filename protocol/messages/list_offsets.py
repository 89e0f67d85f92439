"""ListOffsets (2): a client asks for the offset at a timestamp (or earliest -2 / latest -1) per partition.

Rules:
- We serve v1-7 (flexible from v6). ``max_num_offsets`` / ``old_style_offsets`` (v0 only) and
  ``timeout_ms`` (v10+) lie outside our range and are not declared.
- An unknown partition answers timestamp -1, offset -1 and leader epoch -1, as Kafka's
  ``ListOffsetsResponse.UNKNOWN_*`` values.
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=2,
    name="ListOffsets",
    valid="1-7",
    flexible="6+",
    request=(
        f("replica_id", "int32"),
        f("isolation_level", "int8", "2+"),
        arr("topics", "0+",
            f("name", "string"),
            arr("partitions", "0+",
                f("partition_index", "int32"),
                f("current_leader_epoch", "int32", "4+", default=-1),
                f("timestamp", "int64"))),
    ),
    response=(
        f("throttle_time_ms", "int32", "2+"),
        arr("topics", "0+",
            f("name", "string"),
            arr("partitions", "0+",
                f("partition_index", "int32"),
                f("error_code", "int16"),
                f("timestamp", "int64", "1+", default=-1),
                f("offset", "int64", "1+", default=-1),
                f("leader_epoch", "int32", "4+", default=-1))),
    ),
)
