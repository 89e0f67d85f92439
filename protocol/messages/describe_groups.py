"""DescribeGroups (15): state, protocol and members (with metadata and assignment) of named groups.

Rules: we serve v0-6 (flexible from v5). ``include_authorized_operations`` and the group's
``authorized_operations`` (default INT32_MIN, "not requested") from v3; member ``group_instance_id`` from
v4; group ``error_message`` from v6: null unless the group is unknown ("Group G not found.", KIP-1043).
Member ``group_instance_id`` is null for a dynamic member; ``protocol_type``/``protocol_data`` are empty
strings (not null) for a group without them, as Kafka. Ours, v5+ as tagged fields 1000/1001 (absent unless
the group waits for members in a rebalance): ``waiting_since_ms`` and ``waiting_for`` (member id, client
id, host, reason), read by ``groupcoord groups describe``; and 1002, ``history`` (absent unless the group has
one): its last ``group.history.size`` rebalances, newest first (coordinator/core/rebalance_history.py), read by
``groupcoord groups history``; 1003, ``offset_history`` (absent unless the group has one): per topic and
partition its last ``offsets.history.size`` commits, newest first (coordinator/core/offset_history.py), read by
``groupcoord groups offsets --history`` and ``reset-offsets --to-commit-time``, sent only to a request that asks
for it with our request tag 1000 ``include_offset_history`` (a group of many partitions has up to 16 entries
each: Kafka clients, which skip the field, must not pay for it).
"""

from protocol.schema import OURS_FROM_TAG, ApiSchema, arr, f

INT32_MIN = -2147483648
WAITING_SINCE_TAG, WAITING_FOR_TAG = OURS_FROM_TAG, OURS_FROM_TAG + 1  # ours (protocol/schema.py)
HISTORY_TAG = OURS_FROM_TAG + 2
OFFSET_HISTORY_TAG = OURS_FROM_TAG + 3
INCLUDE_OFFSET_HISTORY_TAG = OURS_FROM_TAG  # request tag (ours)

SCHEMA = ApiSchema(
    key=15,
    name="DescribeGroups",
    valid="0-6",
    flexible="5+",
    request=(
        f("groups", "[]string"),
        f("include_authorized_operations", "bool", "3+"),
        f("include_offset_history", "bool", "5+", tag=INCLUDE_OFFSET_HISTORY_TAG, tagged="5+", default=False),  # ours
    ),
    response=(
        f("throttle_time_ms", "int32", "1+"),
        arr("groups", "0+",
            f("error_code", "int16"),
            f("error_message", "string", "6+", nullable="6+"),
            f("group_id", "string"),
            f("group_state", "string"),
            f("protocol_type", "string"),
            f("protocol_data", "string"),
            arr("members", "0+",
                f("member_id", "string"),
                f("group_instance_id", "string", "4+", nullable="4+"),
                f("client_id", "string"),
                f("client_host", "string"),
                f("member_metadata", "bytes"),
                f("member_assignment", "bytes")),
            f("authorized_operations", "int32", "3+", default=INT32_MIN),
            # ours (issue #37), tagged: clients that do not know them skip them (KIP-482); sent only while the
            # group waits for members in a rebalance (coordinator/core/waits.py)
            f("waiting_since_ms", "int64", "5+", tag=WAITING_SINCE_TAG, tagged="5+", default=-1),
            arr("waiting_for", "5+",
                f("member_id", "string", "5+"),
                f("client_id", "string", "5+"),
                f("client_host", "string", "5+"),
                f("reason", "string", "5+"),
                tag=WAITING_FOR_TAG, tagged="5+"),
            # ours (issue #37): the group's rebalance history, newest first; sent only when it has one
            arr("history", "5+",
                f("seq", "int64", "5+"),
                f("generation", "int32", "5+"),
                f("start_ms", "int64", "5+"),
                f("end_ms", "int64", "5+"),
                f("trigger", "string", "5+"),
                f("member_id", "string", "5+", nullable="5+"),
                f("client_id", "string", "5+", nullable="5+"),
                f("client_host", "string", "5+", nullable="5+"),
                f("reason", "string", "5+", nullable="5+"),
                f("protocol_type", "string", "5+", nullable="5+"),
                f("protocol", "string", "5+", nullable="5+"),
                f("leader", "string", "5+", nullable="5+"),
                f("members_before", "int32", "5+"),
                f("members_after", "int32", "5+"),
                f("joined", "[]string", "5+"),
                f("left", "[]string", "5+"),
                tag=HISTORY_TAG, tagged="5+"),
            # ours (issue #37 item 4): the group's offset history; sent only when it has one
            arr("offset_history", "5+",
                f("name", "string", "5+"),
                arr("partitions", "5+",
                    f("partition_index", "int32", "5+"),
                    arr("entries", "5+",
                        f("seq", "int64", "5+"),
                        f("committed_offset", "int64", "5+"),
                        f("commit_timestamp", "int64", "5+"),
                        f("generation", "int32", "5+"),
                        f("member_id", "string", "5+"),
                        f("client_id", "string", "5+"),
                        f("client_host", "string", "5+"))),
                tag=OFFSET_HISTORY_TAG, tagged="5+")),
    ),
)
