"""The hand-built one-partition OffsetCommit answer is byte-identical to the generic encoder's, for every
version it serves, any topic name length and any error; its cache stays bounded."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import codec, hotpath
from protocol.hotpath import offset_commit_answer


def generic(version: int, correlation_id: int, topic: str, partition: int, error: int) -> bytes:
    body = {"throttle_time_ms": 0, "topics": [{"name": topic, "partitions": [
        {"partition_index": partition, "error_code": error}]}]}
    return codec.encode_response(8, version, correlation_id, body)


@settings(max_examples=200, deadline=None)
@given(version=st.integers(2, 9), correlation_id=st.integers(-2**31, 2**31 - 1),
       topic=st.text(min_size=1, max_size=200), partition=st.integers(0, 2**31 - 1),
       error=st.sampled_from([0, 12, 14, 15, 16, 22, 25, 27, 82]))
def test_same_bytes_as_the_generic_encoder(version: int, correlation_id: int, topic: str, partition: int,
                                           error: int) -> None:
    assert offset_commit_answer(version, correlation_id, topic, partition, error) == \
        generic(version, correlation_id, topic, partition, error)


def test_the_cache_is_cleared_at_its_limit() -> None:
    hotpath._tails.clear()
    for p in range(hotpath.ANSWER_CACHE_LIMIT + 5):
        offset_commit_answer(8, 1, "t", p, 0)
    assert 0 < len(hotpath._tails) <= hotpath.ANSWER_CACHE_LIMIT
    assert offset_commit_answer(8, 7, "t", 3, 0) == generic(8, 7, "t", 3, 0)  # still right after a clear
