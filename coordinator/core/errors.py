"""Kafka error codes used by the group coordinator core.

Rules: error codes are *values* placed in response dicts, never raised. The only exceptions in the core
are for bugs (an invalid state transition, a malformed stored record); see `group.IllegalStateTransition`
and `records.RecordError`.
"""

from enum import IntEnum


class Err(IntEnum):
    """Apache Kafka's numeric error codes (org.apache.kafka.common.protocol.Errors)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    UNSTABLE_OFFSET_COMMIT = 88
