"""OffsetForLeaderEpoch (23): the end offset of a leader epoch (KIP-101), asked by a follower before it
fetches, to cut the tail where its log diverges from the leader's.

Rules (Kafka's ``ReplicaManager.lastOffsetForLeaderEpoch``): we serve v2-4 (flexible from v4; Kafka 3.9
serves 2-4). Per partition: the largest epoch <= ``leader_epoch`` this leader knows and the start offset of
the next one (or the log end for the latest epoch); UNDEFINED (-1, -1) when the epoch is older than every
epoch it knows. ``current_leader_epoch`` fences: older than the leader's is FENCED_LEADER_EPOCH, newer
UNKNOWN_LEADER_EPOCH; a partition this node does not lead is NOT_LEADER_OR_FOLLOWER, one it does not know
UNKNOWN_TOPIC_OR_PARTITION. Served in cluster mode only.
"""

from protocol.schema import ApiSchema, arr, f

SCHEMA = ApiSchema(
    key=23,
    name="OffsetForLeaderEpoch",
    valid="2-4",
    flexible="4+",
    request=(
        f("replica_id", "int32", "3+", default=-2),
        arr("topics", "0+",
            f("topic", "string"),
            arr("partitions", "0+",
                f("partition", "int32"),
                f("current_leader_epoch", "int32", "2+", default=-1),
                f("leader_epoch", "int32"))),
    ),
    response=(
        f("throttle_time_ms", "int32", "2+"),
        arr("topics", "0+",
            f("topic", "string"),
            arr("partitions", "0+",
                f("error_code", "int16"),
                f("partition", "int32"),
                f("leader_epoch", "int32", "1+", default=-1),
                f("end_offset", "int64", default=-1))),
    ),
)
