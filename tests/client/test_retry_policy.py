"""RetryPolicy (seed 001): the retry sequence notation, topic names, routing and headers, without a server."""

from __future__ import annotations

import pytest

from client.retry import RetryPolicy
from client.retry_policy import (
    MAX_EXCEPTION_BYTES,
    Origin,
    copy_headers,
    format_delay,
    header_int,
    parse_delay,
    strip_retry_headers,
)


class NotRetryable(ValueError):
    pass


def test_the_seeds_sequence_means_six_retries_over_three_topics() -> None:
    policy = RetryPolicy.parse("5m,5m,30m,30m,30m,1h")
    assert policy.delays_ms == (300_000, 300_000, 1_800_000, 1_800_000, 1_800_000, 3_600_000)
    assert policy.max_retries == 6
    assert policy.labels() == ["5m", "30m", "1h"]
    assert policy.retry_topics("orders") == ["orders-retry-5m", "orders-retry-30m", "orders-retry-1h"]
    assert policy.failed_topic("orders") == "orders-failed"
    assert str(policy) == "5m,5m,30m,30m,30m,1h"


@pytest.mark.parametrize(("text", "ms", "label"), [
    ("250ms", 250, "250ms"), ("1s", 1000, "1s"), ("90s", 90_000, "90s"), (" 2 m ", 120_000, "2m"),
    ("60m", 3_600_000, "1h"), ("1d", 86_400_000, "1d"), ("1500ms", 1500, "1500ms"),
])
def test_delays_in_every_unit_and_their_canonical_labels(text: str, ms: int, label: str) -> None:
    assert parse_delay(text) == ms
    assert format_delay(ms) == label


@pytest.mark.parametrize("bad", ["", "5", "5x", "m5", "0s", "-1s", "1.5s", "5m,"])
def test_bad_delays_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_delay(bad)
    if bad.strip(", ") in ("", "5m"):
        return  # "5m," is a valid sequence with a trailing comma; "" has no delay at all
    with pytest.raises(ValueError):
        RetryPolicy.parse(bad)


def test_an_empty_sequence_and_patterns_without_placeholders_are_refused() -> None:
    with pytest.raises(ValueError):
        RetryPolicy.parse(" , ")
    with pytest.raises(ValueError):
        RetryPolicy.parse("1s", retry_topic_pattern="{topic}.retry")
    with pytest.raises(ValueError):
        RetryPolicy.parse("1s", failed_topic_pattern="dlq")


def test_topic_patterns_are_configurable() -> None:
    policy = RetryPolicy.parse("1s,1m", retry_topic_pattern="retry.{delay}.{topic}", failed_topic_pattern="dlq.{topic}")
    assert policy.retry_topics("pay") == ["retry.1s.pay", "retry.1m.pay"]
    assert policy.failed_topic("pay") == "dlq.pay"


def test_routing_walks_the_sequence_then_fails_and_non_retryable_fails_at_once() -> None:
    policy = RetryPolicy.parse("1s,1s,2s,2s,2s,4s", not_retryable=[NotRetryable])
    now = 1_000_000
    routes = [policy.route("orders", done, RuntimeError("x"), now) for done in range(7)]
    assert [(r.topic, r.retry_number, r.timestamp_ms - now, r.failed) for r in routes] == [
        ("orders-retry-1s", 1, 1000, False), ("orders-retry-1s", 2, 1000, False),
        ("orders-retry-2s", 3, 2000, False), ("orders-retry-2s", 4, 2000, False),
        ("orders-retry-2s", 5, 2000, False), ("orders-retry-4s", 6, 4000, False),
        ("orders-failed", 6, 0, True),
    ]
    direct = policy.route("orders", 0, NotRetryable("bad"), now)
    assert (direct.topic, direct.retry_number, direct.failed) == ("orders-failed", 0, True)
    assert policy.route("orders", 2, KeyError("k"), now).topic == "orders-retry-2s"


def test_copy_headers_replace_earlier_retry_headers_and_keep_the_users() -> None:
    first = copy_headers([("trace", b"t1")], 1, 5000, Origin("orders", 3, 42), RuntimeError("db down"))
    again = copy_headers(first, 2, 6000, Origin("orders", 3, 42), RuntimeError("still down"))
    assert again == (("trace", b"t1"), ("retry_number", b"2"), ("retry_timestamp", b"6000"),
                     ("retry_original_topic", b"orders"), ("retry_original_partition", b"3"),
                     ("retry_original_offset", b"42"), ("retry_exception", b"RuntimeError: still down"))
    assert header_int(again, "retry_number") == 2
    assert strip_retry_headers(again) == (("trace", b"t1"),)


def test_the_exception_text_is_capped_at_one_kib_on_a_character_boundary() -> None:
    headers = copy_headers([], 1, 0, Origin("t", 0, 0), RuntimeError("é" * 2000))
    text = dict(headers)["retry_exception"]
    assert text is not None and len(text) <= MAX_EXCEPTION_BYTES
    assert text.decode("utf-8").startswith("RuntimeError: éé")
    assert len(text) > MAX_EXCEPTION_BYTES - 2


def test_the_retrying_consumers_copies_carry_what_copy_headers_and_route_give() -> None:
    """``RetryingConsumer._failed`` builds a copy's headers itself (``client.retry.copy_headers_of``, no
    ``Origin`` or generator per copy): for every shape of record, main or retry topic, well-formed or not, the
    route and the headers are what ``policy.route`` and ``copy_headers`` give, with the origin read from the
    record's headers as ``ascii_int`` reads them (the record itself when one is missing or not a number)."""
    import random

    import client.retry as retry_module
    from client.consumer_protocol import TopicPartition
    from client.fetcher import ConsumerRecord
    from client.retry import RetryingConsumer
    from client.retry_policy import RETRY_NUMBER, ascii_int

    policy = RetryPolicy.parse("1s,2s,2s", not_retryable=[NotRetryable])
    rc = RetryingConsumer.__new__(RetryingConsumer)
    rc.policy = policy
    now = 1_700_000_000_123
    rnd = random.Random(11)
    values = [None, b"", b"7", b"42", b" 9 ", b"-3", b"1_0", b"x", b"\xff\xfe", b"\xd9\xa3", b"12\x00"]
    names = ["trace", "retry_number", "retry_timestamp", "retry_original_topic", "retry_original_partition",
             "retry_original_offset", "retry_exception", "été", "retry_numbers"]
    original = retry_module._clock
    retry_module._clock = lambda: now / 1000
    try:
        for i in range(3000):
            headers = tuple((rnd.choice(names), rnd.choice(values + [b"orders", b"caf\xc3\xa9", b"\xc3("]))
                            for _ in range(rnd.choice([0, 1, 3, 6, 9])))
            label = rnd.choice([None, "1s", "2s"])
            tp = TopicPartition("orders" if label is None else f"orders-retry-{label}", rnd.randint(0, 5))
            rec = ConsumerRecord(tp.topic, tp.partition, rnd.randint(0, 10**12), now - 5, 0, b"k", b"v", headers)
            exc = rnd.choice([RuntimeError("down é" * rnd.choice([1, 300])), NotRetryable("bad"), KeyError(i)])
            as_dict = dict(headers) if label is not None else None
            _, route, got = rc._failed(tp, rec, "orders", label, exc, as_dict)
            if label is None:
                retries, origin = 0, Origin("orders", tp.partition, rec.offset)
            else:
                assert as_dict is not None
                retries = ascii_int(as_dict.get(RETRY_NUMBER)) or 0
                topic = as_dict.get("retry_original_topic")
                partition = ascii_int(as_dict.get("retry_original_partition"))
                offset = ascii_int(as_dict.get("retry_original_offset"))
                if topic is not None and partition is not None and offset is not None:
                    origin = Origin(topic.decode("utf-8", "replace"), partition, offset)
                else:
                    origin = Origin("orders", tp.partition, rec.offset)
            expected_route = policy.route("orders", retries, exc, now)
            assert route == expected_route
            assert got == copy_headers(headers, expected_route.retry_number, expected_route.timestamp_ms, origin, exc)
    finally:
        retry_module._clock = original
