"""ConsumerProtocol Subscription/Assignment: byte tables, and agreement with kafka-python both ways."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as KAssignment
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KSubscription

from client.consumer_protocol import (
    Assignment,
    ConsumerProtocolError,
    Subscription,
    TopicPartition,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    group_by_topic,
)

TP = TopicPartition

# ---------------------------------------------------------------------------------------- byte tables

SUBSCRIPTION_CASES = [
    # (description, object, exact bytes)
    (
        "v0: topics [t], null user data",
        Subscription(("t",), None, version=0),
        (b"\x00\x00" b"\x00\x00\x00\x01" b"\x00\x01t" b"\xff\xff\xff\xff"),
    ),
    (
        "v1: two topics, user data 'ud', owns t0-[0,2]",
        Subscription(("a", "b"), b"ud", (TP("t0", 0), TP("t0", 2)), version=1),
        (b"\x00\x01" b"\x00\x00\x00\x02" b"\x00\x01a" b"\x00\x01b" b"\x00\x00\x00\x02ud"
        b"\x00\x00\x00\x01" b"\x00\x02t0" b"\x00\x00\x00\x02" b"\x00\x00\x00\x00" b"\x00\x00\x00\x02"),
    ),
    (
        "v2: no owned partitions, generation 7",
        Subscription(("a",), b"", (), 7, version=2),
        (b"\x00\x02" b"\x00\x00\x00\x01" b"\x00\x01a" b"\x00\x00\x00\x00" b"\x00\x00\x00\x00" b"\x00\x00\x00\x07"),
    ),
    (
        "v3: generation -1, rack r1",
        Subscription(("a",), None, (), -1, "r1", version=3),
        (b"\x00\x03" b"\x00\x00\x00\x01" b"\x00\x01a" b"\xff\xff\xff\xff" b"\x00\x00\x00\x00"
        b"\xff\xff\xff\xff" b"\x00\x02r1"),
    ),
    (
        "v3: null rack",
        Subscription((), None, (), 3, None, version=3),
        (b"\x00\x03" b"\x00\x00\x00\x00" b"\xff\xff\xff\xff" b"\x00\x00\x00\x00" b"\x00\x00\x00\x03" b"\xff\xff"),
    ),
]

ASSIGNMENT_CASES = [
    (
        "v0: t-[0], null user data",
        Assignment((TP("t", 0),), None, version=0),
        (b"\x00\x00" b"\x00\x00\x00\x01" b"\x00\x01t" b"\x00\x00\x00\x01" b"\x00\x00\x00\x00" b"\xff\xff\xff\xff"),
    ),
    (
        "v3: a-[1], b-[0,3] grouped by topic in first-appearance order, user data 'x'",
        Assignment((TP("a", 1), TP("b", 0), TP("b", 3)), b"x", version=3),
        (b"\x00\x03" b"\x00\x00\x00\x02" b"\x00\x01a" b"\x00\x00\x00\x01" b"\x00\x00\x00\x01"
        b"\x00\x01b" b"\x00\x00\x00\x02" b"\x00\x00\x00\x00" b"\x00\x00\x00\x03" b"\x00\x00\x00\x01x"),
    ),
]


@pytest.mark.parametrize("desc,obj,raw", SUBSCRIPTION_CASES, ids=[c[0] for c in SUBSCRIPTION_CASES])
def test_subscription_bytes_table(desc: str, obj: Subscription, raw: bytes) -> None:
    assert encode_subscription(obj) == raw
    assert decode_subscription(raw) == obj


@pytest.mark.parametrize("desc,obj,raw", ASSIGNMENT_CASES, ids=[c[0] for c in ASSIGNMENT_CASES])
def test_assignment_bytes_table(desc: str, obj: Assignment, raw: bytes) -> None:
    assert encode_assignment(obj) == raw
    assert decode_assignment(raw) == obj


def test_encoding_an_older_version_drops_newer_fields() -> None:
    sub = Subscription(("a",), None, (TP("a", 0),), 9, "r", version=0)
    assert decode_subscription(encode_subscription(sub)) == Subscription(("a",), None, version=0)


def test_newer_version_with_trailing_fields_is_read_with_the_v3_layout() -> None:
    v3 = encode_subscription(Subscription(("a",), b"u", (TP("a", 1),), 4, "r", version=3))
    v9 = b"\x00\x09" + v3[2:] + b"\x00\x00\x00\x2a" + b"future field"
    assert decode_subscription(v9) == Subscription(("a",), b"u", (TP("a", 1),), 4, "r", version=9)
    asn = encode_assignment(Assignment((TP("a", 1),), None, version=3))
    assert decode_assignment(b"\x00\x07" + asn[2:] + b"\x01\x02") == Assignment((TP("a", 1),), None, 7)


BAD_SUBSCRIPTIONS = [
    ("empty", b""),
    ("negative version", b"\xff\xff\x00\x00\x00\x00\xff\xff\xff\xff"),
    ("topic count -1 (null array)", b"\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff"),
    ("topic count larger than the bytes left", b"\x00\x00\x7f\xff\xff\xff\x00\x01a"),
    ("null topic name", b"\x00\x00\x00\x00\x00\x01\xff\xff\xff\xff\xff\xff"),
    ("string length -2", b"\x00\x00\x00\x00\x00\x01\xff\xfe"),
    ("user data length -5", b"\x00\x00\x00\x00\x00\x00\xff\xff\xff\xfb"),
    ("user data longer than the buffer", b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x09ab"),
    ("topic not UTF-8", b"\x00\x00\x00\x00\x00\x01\x00\x01\xff\xff\xff\xff\xff"),
    ("v1 missing owned_partitions", b"\x00\x01\x00\x00\x00\x00\xff\xff\xff\xff"),
    ("v2 partition count beyond bytes", b"\x00\x02\x00\x00\x00\x00\xff\xff\xff\xff\x00\x00\x00\x01\x00\x01t\x10\x00\x00\x00"),
    ("v3 truncated rack", b"\x00\x03\x00\x00\x00\x00\xff\xff\xff\xff\x00\x00\x00\x00\x00\x00\x00\x01\x00\x05ab"),
]


@pytest.mark.parametrize("desc,raw", BAD_SUBSCRIPTIONS, ids=[c[0] for c in BAD_SUBSCRIPTIONS])
def test_bad_subscription_bytes_raise_one_exception_type(desc: str, raw: bytes) -> None:
    with pytest.raises(ConsumerProtocolError):
        decode_subscription(raw)


@pytest.mark.parametrize("desc,obj,raw", SUBSCRIPTION_CASES + ASSIGNMENT_CASES)
def test_every_strict_prefix_of_a_valid_encoding_is_rejected(desc: str, obj: object, raw: bytes) -> None:
    decode = decode_subscription if isinstance(obj, Subscription) else decode_assignment
    for cut in range(len(raw)):
        with pytest.raises(ConsumerProtocolError):
            decode(raw[:cut])


def test_encoding_rejects_unknown_versions_and_overlong_strings() -> None:
    with pytest.raises(ConsumerProtocolError):
        encode_subscription(Subscription(("a",), version=4))
    with pytest.raises(ConsumerProtocolError):
        encode_assignment(Assignment((), version=-1))
    with pytest.raises(ConsumerProtocolError):
        encode_subscription(Subscription(("x" * 40000,)))


# ------------------------------------------------------------------------- agreement with kafka-python

names = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
user_data = st.none() | st.binary(max_size=20)
int32 = st.integers(-(2**31), 2**31 - 1)
grouped_partitions = st.dictionaries(names, st.lists(int32, max_size=5), max_size=4)


def _flat(grouped: dict[str, list[int]]) -> tuple[TopicPartition, ...]:
    return tuple(TP(t, p) for t, ps in grouped.items() for p in ps)


@st.composite
def subscriptions(draw: st.DrawFn) -> Subscription:
    version = draw(st.integers(0, 3))
    owned = draw(grouped_partitions) if version >= 1 else {}
    # a topic group with no partitions has no flat (topic, partition) form: keep non-empty groups only
    owned = {t: ps for t, ps in owned.items() if ps}
    return Subscription(
        topics=tuple(draw(st.lists(names, max_size=5))),
        user_data=draw(user_data),
        owned_partitions=_flat(owned),
        generation_id=draw(int32) if version >= 2 else -1,
        rack_id=draw(st.none() | names) if version >= 3 else None,
        version=version,
    )


@st.composite
def assignments(draw: st.DrawFn) -> Assignment:
    grouped = {t: ps for t, ps in draw(grouped_partitions).items() if ps}
    return Assignment(_flat(grouped), draw(user_data), draw(st.integers(0, 3)))


def _kafka_subscription(sub: Subscription) -> KSubscription:
    return KSubscription(
        version=sub.version,
        topics=list(sub.topics),
        user_data=sub.user_data,
        owned_partitions=[
            KSubscription.TopicPartition(topic=t, partitions=ps) for t, ps in group_by_topic(sub.owned_partitions)
        ],
        generation_id=sub.generation_id,
        rack_id=sub.rack_id,
    )


def _kafka_assignment(asn: Assignment) -> KAssignment:
    return KAssignment(
        version=asn.version,
        assigned_partitions=[
            KAssignment.TopicPartition(topic=t, partitions=ps) for t, ps in group_by_topic(asn.assigned_partitions)
        ],
        user_data=asn.user_data,
    )


@settings(max_examples=150, deadline=None)
@given(subscriptions())
def test_subscription_bytes_equal_kafka_pythons_and_decode_both_ways(sub: Subscription) -> None:
    ours = encode_subscription(sub)
    theirs = _kafka_subscription(sub).encode()
    assert ours == theirs
    assert decode_subscription(theirs) == sub
    decoded = KSubscription.decode(ours)
    assert (decoded.version, list(decoded.topics), decoded.user_data) == (sub.version, list(sub.topics), sub.user_data)
    if sub.version >= 1:
        got = tuple(TP(x.topic, p) for x in decoded.owned_partitions for p in x.partitions)
        assert got == sub.owned_partitions
    if sub.version >= 2:
        assert decoded.generation_id == sub.generation_id
    if sub.version >= 3:
        assert decoded.rack_id == sub.rack_id


@settings(max_examples=150, deadline=None)
@given(assignments())
def test_assignment_bytes_equal_kafka_pythons_and_decode_both_ways(asn: Assignment) -> None:
    ours = encode_assignment(asn)
    assert ours == _kafka_assignment(asn).encode()
    assert decode_assignment(ours) == asn
    decoded = KAssignment.decode(ours)
    got = tuple(TP(x.topic, p) for x in decoded.assigned_partitions for p in x.partitions)
    assert (decoded.version, got, decoded.user_data) == (asn.version, asn.assigned_partitions, asn.user_data)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_consumer_protocol_error(raw: bytes) -> None:
    for decode in (decode_subscription, decode_assignment):
        try:
            result = decode(raw)
        except ConsumerProtocolError:
            continue
        assert result.version >= 0
