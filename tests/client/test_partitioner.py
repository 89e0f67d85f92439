"""Our default partitioner against Java's Utils.murmur2 vectors and kafka-python's DefaultPartitioner."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kp_murmur2

from client.partitioner import DefaultPartitioner, murmur2, partition_for_key, to_positive

# Apache Kafka's clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java#testMurmur2
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_murmur2_matches_javas_utils_test_vectors() -> None:
    assert {k: murmur2(k) for k in JAVA_VECTORS} == JAVA_VECTORS


def test_to_positive_clears_only_the_sign_bit() -> None:
    assert to_positive(-973932308) == -973932308 & 0x7FFFFFFF == 1173551340
    assert to_positive(-(2**31)) == 0  # where abs() would overflow in Java
    assert to_positive(479470107) == 479470107


@settings(max_examples=200)
@given(st.binary(max_size=64))
def test_murmur2_agrees_with_kafka_python_on_random_keys(key: bytes) -> None:
    ours = murmur2(key)
    assert -(2**31) <= ours < 2**31
    assert ours & 0xFFFFFFFF == kp_murmur2(key)


@settings(max_examples=200)
@given(st.binary(min_size=0, max_size=40), st.integers(min_value=1, max_value=1000))
def test_keyed_partition_is_kafka_pythons_choice(key: bytes, n: int) -> None:
    assert partition_for_key(key, n) == (kp_murmur2(key) & 0x7FFFFFFF) % n


def test_kafka_python_java_compatibility_table_with_1000_partitions() -> None:
    # kafka-python's test_partitioner.py: values computed with Kafka's Java DefaultPartitioner
    expected = {b"": 681, b"a": 524, b"ab": 434, b"abc": 107, b"123456789": 566, b"\x00 ": 742}
    assert {k: partition_for_key(k, 1000) for k in expected} == expected


def test_keyed_records_ignore_stickiness() -> None:
    p = DefaultPartitioner(random.Random(1))
    assert [p.partition("t", b"key-7", 12) for _ in range(3)] == [partition_for_key(b"key-7", 12)] * 3


def test_keyless_records_stick_until_a_new_batch_then_move() -> None:
    p = DefaultPartitioner(random.Random(7))
    first = p.partition("t", None, 6)
    assert [p.partition("t", None, 6) for _ in range(5)] == [first] * 5
    p.on_new_batch("t", 6, first)
    second = p.partition("t", None, 6)
    assert second != first and 0 <= second < 6
    assert p.partition("other", None, 6) in range(6)  # each topic has its own sticky partition


def test_keyless_sticky_choice_uses_available_partitions_only() -> None:
    p = DefaultPartitioner(random.Random(3))
    seen = set()
    for _ in range(30):
        cur = p.partition("t", None, 8, available=[2, 5])
        seen.add(cur)
        p.on_new_batch("t", 8, cur, available=[2, 5])
    assert seen == {2, 5}


def test_single_partition_topic_stays_on_partition_zero() -> None:
    p = DefaultPartitioner(random.Random(0))
    p.on_new_batch("t", 1, 0)
    assert p.partition("t", None, 1) == 0
