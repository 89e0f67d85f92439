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


# ---------------------------------------------------------------------- transactions

TXN_STATE, FENCED = ErrorCode.INVALID_TXN_STATE, ErrorCode.TRANSACTION_COORDINATOR_FENCED


def txn(pid: int, epoch: int, seq: int, n: int = 2, ts: int = 0):
    return parse_header(build_batch([(b"k", b"v", (), ts)] * n, producer_id=pid, producer_epoch=epoch,
                                    base_sequence=seq, transactional=True))


def appended(s: ProducerStates, h, offset: int) -> None:
    assert s.check(h) is None
    s.record(h, offset)


def test_each_of_the_last_five_batches_is_answered_as_a_duplicate() -> None:
    s = ProducerStates()
    for i in range(7):  # sequences 0-2, 3-5, ... at offsets 10, 13, ...
        appended(s, txn(7, 0, 3 * i, n=3), 10 + 3 * i)
    for i in range(2, 7):
        assert s.check(txn(7, 0, 3 * i, n=3)) == Duplicate(10 + 3 * i, 12 + 3 * i)
    for i in range(2):
        assert s.check(txn(7, 0, 3 * i, n=3)) == OUT_OF_ORDER
    assert s.check(txn(7, 0, 3, n=2)) == OUT_OF_ORDER, "a different range over a kept first sequence"


def test_a_transactional_batch_opens_a_transaction_at_its_base_offset() -> None:
    s = ProducerStates()
    assert not s.has_open_txn(7)
    appended(s, txn(7, 2, 0), 40)
    appended(s, txn(7, 2, 2), 45)
    assert s.has_open_txn(7) and s.has_open_txn(7, 2) and not s.has_open_txn(7, 3)
    assert s.first_unstable_offset() == 40
    assert [(p.producer_id, p.producer_epoch, p.last_sequence, p.current_txn_start_offset)
            for p in s.producers()] == [(7, 2, 3, 40)]
    assert s.open_transactions()[0][:3] == (7, 2, 40)


def test_a_non_transactional_batch_inside_an_open_transaction_is_invalid_txn_state() -> None:
    s = ProducerStates()
    appended(s, txn(7, 0, 0), 0)
    assert s.check(header(7, 0, 2)) == TXN_STATE
    assert s.check(header(7, 1, 0)) == TXN_STATE, "a new epoch does not close the transaction"
    assert s.check(header(7, 0, 4)) == OUT_OF_ORDER, "sequence checks come first"
    assert s.check(header(8, 0, 0)) is None, "other producer ids are not concerned"
    s.record_marker(7, 0, 0, True, 2)
    assert s.check(header(7, 0, 2)) is None


def test_marker_epochs() -> None:
    s = ProducerStates()
    assert s.check_marker(7, 0, 0) is None, "unknown producer id"
    appended(s, txn(7, 3, 0), 0)
    s.record_marker(7, 3, 5, True, 2)
    assert s.check_marker(7, 2, 9) == BAD_EPOCH
    assert s.check_marker(7, 3, 4) == FENCED
    assert s.check_marker(7, 3, 5) is None and s.check_marker(7, 4, 6) is None
    assert s.producers()[0].coordinator_epoch == 5


def test_a_marker_without_an_open_transaction_changes_only_the_epochs() -> None:
    s = ProducerStates()
    appended(s, header(7, 1, 0), 0)  # sequences 0-1
    assert s.record_marker(7, 1, 4, False, 2, timestamp=99) is None
    assert s.first_unstable_offset() is None and s.last_stable_offset(3) == 3
    assert s.aborted_transactions() == [] and s.aborted_between(0, 100) == []
    assert s.producers()[0] == producer_state.ProducerInfo(7, 1, 1, 99, 4, -1)
    assert s.check(header(7, 1, 0)) == Duplicate(0, 1), "same epoch: the kept batches stay"
    assert s.record_marker(7, 2, 4, True, 3) is None
    assert s.check(header(7, 1, 2)) == BAD_EPOCH and s.check(header(7, 2, 0)) is None


def test_markers_complete_transactions_and_feed_the_aborted_index() -> None:
    s = ProducerStates()
    appended(s, txn(7, 0, 0), 10)
    appended(s, txn(7, 0, 2), 12)
    done = s.record_marker(7, 0, 0, False, 14)
    assert done == producer_state.CompletedTxn(7, 10, 14, True)
    assert s.aborted_transactions() == [producer_state.AbortedTxn(7, 10, 14, 15)]
    appended(s, txn(7, 0, 4), 15)
    assert s.record_marker(7, 0, 0, True, 17) == producer_state.CompletedTxn(7, 15, 17, False)
    assert len(s.aborted_transactions()) == 1, "a commit is not indexed"
    assert s.check(txn(7, 0, 2)) == Duplicate(12, 13), "markers keep the batches of their epoch"


def test_lso_with_two_interleaved_producers() -> None:
    s = ProducerStates()
    assert s.last_stable_offset(0) == 0 and s.last_stable_offset(5) == 5, "no transactions: the high watermark"
    appended(s, txn(1, 0, 0), 0)   # A: 0-1
    appended(s, header(3, 0, 0), 2)  # plain: 2-3
    appended(s, txn(2, 0, 0), 4)   # B: 4-5
    appended(s, txn(1, 0, 2), 6)   # A: 6-7
    appended(s, txn(2, 0, 2), 8)   # B: 8-9
    assert s.first_unstable_offset() == 0
    assert s.last_stable_offset(10) == 0
    s.record_marker(1, 0, 0, True, 10)  # A commits
    assert s.first_unstable_offset() == 4
    assert s.last_stable_offset(10) == 0, "A's marker is not below the high watermark yet"
    assert s.last_stable_offset(11) == 4, "then B holds it"
    appended(s, txn(1, 0, 4), 11)  # A's next transaction: 11-12
    assert s.first_unstable_offset() == 4 and s.last_stable_offset(13) == 4
    s.record_marker(2, 0, 0, False, 13)  # B aborts
    assert s.last_stable_offset(14) == 11
    assert s.aborted_transactions() == [producer_state.AbortedTxn(2, 4, 13, 11)]
    s.record_marker(1, 0, 0, False, 14)
    assert s.first_unstable_offset() is None and s.last_stable_offset(15) == 15
    assert s.last_stable_offset(3) == 3, "capped at the high watermark"


def test_aborted_txn_last_stable_offsets() -> None:
    """Kafka's lastStableOffset(completedTxn): the oldest open transaction of another producer id, else the
    marker's offset + 1, taken when the marker is appended."""
    s = ProducerStates()
    appended(s, txn(1, 0, 0, n=1), 0)
    appended(s, txn(2, 0, 0, n=1), 1)
    appended(s, txn(3, 0, 0, n=1), 2)
    s.record_marker(2, 0, 0, False, 3)  # 1 (older than 2) is still open
    s.record_marker(1, 0, 0, False, 4)  # 3 is open
    appended(s, txn(2, 0, 1, n=1), 5)
    s.record_marker(3, 0, 0, False, 6)  # 2's new transaction is open
    s.record_marker(2, 0, 0, False, 7)  # nothing open
    assert [(t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset)
            for t in s.aborted_transactions()] == [(2, 1, 3, 0), (1, 0, 4, 2), (3, 2, 6, 5), (2, 5, 7, 8)]


def test_aborted_between_bounds_and_order() -> None:
    s = ProducerStates()
    appended(s, txn(1, 0, 0), 0)     # 1: 0-1
    appended(s, txn(2, 0, 0), 2)     # 2: 2-3
    s.record_marker(2, 0, 0, False, 4)
    s.record_marker(1, 0, 0, False, 5)
    appended(s, txn(3, 0, 0), 6)     # 3: 6-7
    s.record_marker(3, 0, 0, False, 8)
    assert s.aborted_between(0, 100) == [(1, 0), (2, 2), (3, 6)], "first-offset order, not marker order"
    assert s.aborted_between(5, 100) == [(1, 0), (3, 6)], "last offset == fetch offset is included"
    assert s.aborted_between(6, 100) == [(3, 6)]
    assert s.aborted_between(0, 6) == [(1, 0), (2, 2)], "first offset == upper bound is excluded"
    assert s.aborted_between(0, 7) == [(1, 0), (2, 2), (3, 6)]
    assert s.aborted_between(0, 2) == [(1, 0)]
    assert s.aborted_between(9, 100) == [], "every marker is below the fetch offset"


def test_eviction_never_forgets_an_open_transaction(monkeypatch) -> None:
    monkeypatch.setattr(producer_state, "MAX_PRODUCERS", 3)
    s = ProducerStates()
    appended(s, txn(100, 0, 0), 0)
    for pid in range(6):
        appended(s, header(pid, 0, 0), 2 + 2 * pid)
    assert len(s) == 3 and s.has_open_txn(100)
    assert [p.producer_id for p in s.producers()] == [100, 4, 5]
    assert s.record_marker(100, 0, 0, False, 20) == producer_state.CompletedTxn(100, 0, 20, True)
    assert s.first_unstable_offset() is None
    for pid in (200, 201, 202):
        appended(s, txn(pid, 0, 0), 30 + pid)
    appended(s, header(203, 0, 0), 40)
    assert [p.producer_id for p in s.producers()] == [200, 201, 202, 203], "all open: none is forgotten"
    assert [t.producer_id for t in s.open_transactions()] == [200, 201, 202]


def test_idle_producers_expire_but_not_with_an_open_transaction() -> None:
    s = ProducerStates()
    appended(s, header(1, 0, 0, n=1), 0)
    s.record(parse_header(build_batch([(b"k", b"v", (), 5_000)], producer_id=2, producer_epoch=0,
                                      base_sequence=0)), 1)
    appended(s, txn(3, 0, 0, n=1, ts=0), 2)
    assert s.expire_producers(now_ms=4_000, expiration_ms=4_000) == 1
    assert sorted(p.producer_id for p in s.producers()) == [2, 3]
    assert s.expire_producers(now_ms=100_000, expiration_ms=4_000) == 1
    assert s.has_open_txn(3) and len(s) == 1


def test_retention_forgets_aborted_transactions_wholly_below_the_log_start() -> None:
    s = ProducerStates()
    for i, pid in enumerate((1, 2, 3)):
        appended(s, txn(pid, 0, 0), 10 * i)
        s.record_marker(pid, 0, 0, False, 10 * i + 2)  # aborted [0, 2], [10, 12], [20, 22]
    s.truncate_before(12)
    assert [t.first_offset for t in s.aborted_transactions()] == [10, 20], "[10, 12] still reaches 12"
    s.truncate_before(13)
    assert s.aborted_between(0, 100) == [(3, 20)]


def test_a_same_epoch_batch_after_only_a_marker_is_accepted_at_any_sequence() -> None:
    """A rebuilt state may know a producer only by its marker (its batches went with retention)."""
    s = ProducerStates()
    s.record_marker(7, 2, 0, True, 0)
    assert s.check(header(7, 2, 57)) is None
    assert s.check(header(7, 1, 0)) == BAD_EPOCH and s.check(header(7, 3, 5)) == OUT_OF_ORDER
