"""ConsumerGroupHeartbeat (68): KIP-848's one RPC for joining, heartbeating, reconciling and leaving.

Rules: we declare v0-1, flexible from v0 (Kafka 4.x). ``subscribed_topic_regex`` exists from v1 only. The
request's nullable fields mean "unchanged since the last heartbeat" when null; ``rebalance_timeout_ms``
defaults to -1 (unchanged). ``topic_partitions`` (the partitions the member owns) is a nullable array.
In the response, ``member_id`` and ``error_message`` are nullable strings and ``assignment`` is a nullable
struct (int8 -1 for null): null unless the request was full or the member's assignment changed.
Declaring the schema does not serve the API: ApiVersions lists only the APIs that have a handler.
"""

from protocol.schema import ApiSchema, arr, f, struct

SCHEMA = ApiSchema(
    key=68,
    name="ConsumerGroupHeartbeat",
    valid="0-1",
    flexible="0+",
    request=(
        f("group_id", "string"),
        f("member_id", "string"),
        f("member_epoch", "int32"),
        f("instance_id", "string", nullable="0+"),
        f("rack_id", "string", nullable="0+"),
        f("rebalance_timeout_ms", "int32", default=-1),
        f("subscribed_topic_names", "[]string", nullable="0+"),
        f("subscribed_topic_regex", "string", "1+", nullable="1+"),
        f("server_assignor", "string", nullable="0+"),
        arr("topic_partitions", "0+",
            f("topic_id", "uuid"),
            f("partitions", "[]int32"),
            nullable="0+"),
    ),
    response=(
        f("throttle_time_ms", "int32"),
        f("error_code", "int16"),
        f("error_message", "string", nullable="0+"),
        f("member_id", "string", nullable="0+"),
        f("member_epoch", "int32"),
        f("heartbeat_interval_ms", "int32"),
        struct("assignment", "0+",
               arr("topic_partitions", "0+",
                   f("topic_id", "uuid"),
                   f("partitions", "[]int32")),
               nullable="0+"),
    ),
)
