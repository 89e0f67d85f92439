"""Group -> offsets partition (shard) mapping, exactly as Kafka computes it.

Kafka: ``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions`` where hashCode is Java's
String.hashCode (31*h + c over UTF-16 code units, int32 overflow) and ``Utils.abs(Integer.MIN_VALUE)``
is 0 (not Math.abs, which would stay negative).
"""

from __future__ import annotations

_INT_MIN = -(2**31)


def java_string_hash(s: str) -> int:
    """Java's String.hashCode as a signed int32."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_abs(n: int) -> int:
    """org.apache.kafka.common.utils.Utils.abs: MIN_VALUE maps to 0."""
    return 0 if n == _INT_MIN else abs(n)


def partition_for(group_id: str, num_partitions: int) -> int:
    return kafka_abs(java_string_hash(group_id)) % num_partitions
