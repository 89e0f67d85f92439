"""ConsumerGroupDescribe (69): KIP-848 groups, their epochs, members and assignments.

Rules: we declare v0-1, flexible from v0. Per group: ``error_message`` nullable; ``group_state`` is
"Empty", "Assigning", "Reconciling", "Stable" or "Dead"; ``authorized_operations`` defaults to INT32_MIN
("not requested"). Per member: ``instance_id``, ``rack_id`` and ``subscribed_topic_regex`` nullable;
``assignment`` and ``target_assignment`` are (non-nullable) structs whose topics carry id and name;
``member_type`` (int8, v1+, KIP-1099) defaults to -1 (unknown), 0 = classic member, 1 = consumer member.
Declaring the schema does not serve the API: ApiVersions lists only the APIs that have a handler.
"""

from protocol.schema import ApiSchema, Field, arr, f, struct

INT32_MIN = -2147483648


def _assignment(name: str) -> Field:
    return struct(name, "0+",
                  arr("topic_partitions", "0+",
                      f("topic_id", "uuid"),
                      f("topic_name", "string"),
                      f("partitions", "[]int32")))


SCHEMA = ApiSchema(
    key=69,
    name="ConsumerGroupDescribe",
    valid="0-1",
    flexible="0+",
    request=(
        f("group_ids", "[]string"),
        f("include_authorized_operations", "bool"),
    ),
    response=(
        f("throttle_time_ms", "int32"),
        arr("groups", "0+",
            f("error_code", "int16"),
            f("error_message", "string", nullable="0+"),
            f("group_id", "string"),
            f("group_state", "string"),
            f("group_epoch", "int32"),
            f("assignment_epoch", "int32"),
            f("assignor_name", "string"),
            arr("members", "0+",
                f("member_id", "string"),
                f("instance_id", "string", nullable="0+"),
                f("rack_id", "string", nullable="0+"),
                f("member_epoch", "int32"),
                f("client_id", "string"),
                f("client_host", "string"),
                f("subscribed_topic_names", "[]string"),
                f("subscribed_topic_regex", "string", nullable="0+"),
                _assignment("assignment"),
                _assignment("target_assignment"),
                f("member_type", "int8", "1+", default=-1)),
            f("authorized_operations", "int32", default=INT32_MIN)),
    ),
)
