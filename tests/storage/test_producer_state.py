"""ProducerStates: Kafka's sequence rules for idempotent producers, one story per rule."""

from __future__ import annotations

from coordinator.storage import producer_state
from coordinator.storage.producer_state import Duplicate, ProducerStates
from protocol.errors import ErrorCode
from protocol.record_batch import build_batch, parse_header

OUT_OF_ORDER, BAD_EPOCH = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.INVALID_PRODUCER_EPOCH


def header(pid: int, epoch: int, seq: int, n: int = 2):
    return parse_header(build_batch([(b"k", b"v", (), 0)] * n, producer_id=pid, producer_epoch=epoch,
                                    base_sequence=seq))


def test_a_retry_of_any_of_the_last_five_batches_is_a_duplicate_with_its_offsets() -> None:
    s = ProducerStates()
    for i in range(6):  # sequences 0-1, 2-3, ... 10-11 at offsets 100, 102, ...
        h = header(7, 0, 2 * i)
        assert s.check(h) is None
        s.record(h, 100 + 2 * i)
    assert s.check(header(7, 0, 2)) == Duplicate(102, 103)
    assert s.check(header(7, 0, 10)) == Duplicate(110, 111)
    assert s.check(header(7, 0, 0)) == OUT_OF_ORDER, "older than the five kept: not a known retry"
    assert s.check(header(7, 0, 12)) is None
    assert s.check(header(7, 0, 14)) == OUT_OF_ORDER, "a gap"


def test_epochs() -> None:
    s = ProducerStates()
    s.record(header(7, 3, 0), 0)
    assert s.check(header(7, 2, 2)) == BAD_EPOCH
    assert s.check(header(7, 4, 5)) == OUT_OF_ORDER, "a new epoch starts at sequence 0"
    h = header(7, 4, 0)
    assert s.check(h) is None
    s.record(h, 2)
    assert s.check(header(7, 4, 0)) == Duplicate(2, 3)


def test_unknown_producers_and_no_producer_id_are_accepted() -> None:
    s = ProducerStates()
    assert s.check(header(9, 0, 500)) is None
    assert s.check(header(-1, -1, -1)) is None


def test_sequences_wrap_at_int32() -> None:
    s = ProducerStates()
    h = header(7, 0, 2**31 - 2, n=2)  # last sequence 2^31 - 1
    s.record(h, 0)
    assert s.check(header(7, 0, 0)) is None
    assert s.check(header(7, 0, 1)) == OUT_OF_ORDER


def test_producer_ids_are_bounded(monkeypatch) -> None:
    monkeypatch.setattr(producer_state, "MAX_PRODUCERS", 3)
    s = ProducerStates()
    for pid in range(5):
        s.record(header(pid, 0, 0), pid * 2)
    assert len(s) == 3
    assert s.check(header(0, 0, 0)) is None, "the oldest id was forgotten"
    assert s.check(header(4, 0, 0)) == Duplicate(8, 9)
