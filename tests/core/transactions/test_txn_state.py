"""Transaction states (ids, names, legal transitions), metadata transitions, partitionFor parity, and the
per-version error rewrites."""

from __future__ import annotations

import pytest

from coordinator.core.transactions import TxnConfig, TxnCoordinator
from coordinator.core.transactions.errors import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    INIT_PRODUCER_ID,
    PRODUCE,
    TRANSACTION_ABORTABLE,
    TXN_OFFSET_COMMIT,
    append_error,
    client_error,
    verification_error,
)
from coordinator.core.transactions.metadata import TxnMetadata
from coordinator.core.transactions.state import (
    BY_NAME,
    EXPIRATION_ALLOWED,
    VALID_PREVIOUS,
    IllegalTransition,
    TxnState,
)
from protocol.errors import ErrorCode as E

S = TxnState


def test_ids_and_names_are_kafkas():
    expected = {0: "Empty", 1: "Ongoing", 2: "PrepareCommit", 3: "PrepareAbort", 4: "CompleteCommit",
                5: "CompleteAbort", 6: "Dead", 7: "PrepareEpochFence"}
    assert {int(s): s.kafka_name for s in TxnState} == expected
    assert {name: int(s) for name, s in BY_NAME.items()} == {v: k for k, v in expected.items()}


def test_valid_previous_states_are_kafkas():
    table = {
        S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
        S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
        S.PREPARE_COMMIT: {S.ONGOING},
        S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE},
        S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
        S.COMPLETE_ABORT: {S.PREPARE_ABORT},
        S.DEAD: {S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT},
        S.PREPARE_EPOCH_FENCE: {S.ONGOING},
    }
    assert {k: set(v) for k, v in VALID_PREVIOUS.items()} == table
    assert set(EXPIRATION_ALLOWED) == {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}


def _md(state: TxnState, epoch: int = 3) -> TxnMetadata:
    md = TxnMetadata.new("x", 42, 1000, 10)
    md.producer_epoch, md.state = epoch, state
    return md


@pytest.mark.parametrize("state", list(TxnState))
def test_prepare_commit_is_legal_only_from_ongoing(state):
    md = _md(state)
    if state is S.ONGOING:
        assert md.prepare_end(S.PREPARE_COMMIT, 20).state is S.PREPARE_COMMIT
        assert md.pending is S.PREPARE_COMMIT
    else:
        with pytest.raises(IllegalTransition):
            md.prepare_end(S.PREPARE_COMMIT, 20)
        assert md.pending is None


def test_a_second_prepare_while_pending_is_illegal():
    md = _md(S.ONGOING)
    md.prepare_end(S.PREPARE_ABORT, 20)
    with pytest.raises(IllegalTransition):
        md.prepare_add_partitions(frozenset({("t", 0)}), 21)


def test_complete_checks_the_partition_set_only_grows():
    md = _md(S.ONGOING)
    md.partitions = frozenset({("t", 0), ("t", 1)})
    t = md.prepare_add_partitions(frozenset({("t", 2)}), 20)
    md.partitions = frozenset({("t", 9)})  # something changed the set behind the transit's back
    with pytest.raises(IllegalTransition):
        md.complete(t)


def test_complete_rejects_an_epoch_jump():
    md = _md(S.COMPLETE_COMMIT, epoch=3)
    t = md.prepare_increment_epoch(1000, None, 20)
    assert t.producer_epoch == 4
    md.producer_epoch = 1  # now the transit would jump 1 -> 4
    with pytest.raises(IllegalTransition):
        md.complete(t)


def test_complete_installs_an_epoch_bump():
    md = _md(S.COMPLETE_ABORT, epoch=3)
    md.start_ms = 5
    t = md.prepare_increment_epoch(2000, 3, 20)
    md.complete(t)
    assert (md.state, md.producer_epoch, md.last_producer_epoch, md.timeout_ms, md.pending) == (
        S.EMPTY, 4, 3, 2000, None)
    assert md.start_ms == 5  # Kafka keeps the old start in memory; the record says -1
    assert t.log_value().start_ms == -1 and t.log_value().partitions is None


# ---------------------------------------------------------------- partitionFor


def _java_hash(units: list[int]) -> int:
    h = 0
    for u in units:
        h = (31 * h + u) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def test_partition_for_matches_java_string_hashcode_over_utf16_units():
    txn_id = "交易-😀-txn"
    # UTF-16 code units, written out: 交 U+4EA4, 易 U+6613, '-', 😀 = surrogates D83D DE00, '-', t, x, n
    units = [0x4EA4, 0x6613, 0x2D, 0xD83D, 0xDE00, 0x2D, 0x74, 0x78, 0x6E]
    h = _java_hash(units)
    expected = (0 if h == -(2**31) else abs(h)) % 50
    c = TxnCoordinator(TxnConfig(), num_partitions=50, allocate_producer_id=lambda: 1)
    assert c.partition_for(txn_id) == expected
    # hashing code points instead of UTF-16 units gives another partition: the test can tell them apart
    naive = _java_hash([ord(ch) for ch in txn_id])
    assert (abs(naive) % 50) != expected


def test_partition_for_maps_int_min_hash_to_zero():
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE in Java; Utils.abs makes it 0
    assert _java_hash([ord(ch) for ch in "polygenelubricants"]) == -(2**31)
    c = TxnCoordinator(TxnConfig(), num_partitions=7, allocate_producer_id=lambda: 1)
    assert c.partition_for("polygenelubricants") == 0
    assert (2**31) % 7 != 0  # Math.abs would have given another partition


# ---------------------------------------------------------------- error rewrites


@pytest.mark.parametrize("api, first_new", [(INIT_PRODUCER_ID, 4), (ADD_PARTITIONS_TO_TXN, 2),
                                            (ADD_OFFSETS_TO_TXN, 2), (END_TXN, 2)])
def test_producer_fenced_is_invalid_producer_epoch_for_old_versions(api, first_new):
    for version in range(0, 6):
        want = E.PRODUCER_FENCED if version >= first_new else E.INVALID_PRODUCER_EPOCH
        assert client_error(api, version, E.PRODUCER_FENCED) == want
        assert client_error(api, version, E.CONCURRENT_TRANSACTIONS) == E.CONCURRENT_TRANSACTIONS


@pytest.mark.parametrize("api, first_new", [(INIT_PRODUCER_ID, 5), (ADD_PARTITIONS_TO_TXN, 5),
                                            (ADD_OFFSETS_TO_TXN, 4), (END_TXN, 4), (PRODUCE, 11),
                                            (TXN_OFFSET_COMMIT, 4)])
def test_transaction_abortable_only_for_versions_that_know_it(api, first_new):
    for version in range(0, 13):
        want = TRANSACTION_ABORTABLE if version >= first_new else E.INVALID_TXN_STATE
        assert client_error(api, version, TRANSACTION_ABORTABLE) == want


def test_verification_answers_for_produce():
    assert verification_error(PRODUCE, 11, E.PRODUCER_FENCED) == E.INVALID_PRODUCER_EPOCH
    assert verification_error(PRODUCE, 10, TRANSACTION_ABORTABLE) == E.INVALID_TXN_STATE
    assert verification_error(PRODUCE, 11, TRANSACTION_ABORTABLE) == TRANSACTION_ABORTABLE
    assert verification_error(TXN_OFFSET_COMMIT, 3, TRANSACTION_ABORTABLE) == E.INVALID_TXN_STATE
    assert verification_error(PRODUCE, 9, E.CONCURRENT_TRANSACTIONS) == E.CONCURRENT_TRANSACTIONS


@pytest.mark.parametrize("error, want", [
    (E.UNKNOWN_TOPIC_OR_PARTITION, E.COORDINATOR_NOT_AVAILABLE),
    (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
    (E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, E.COORDINATOR_NOT_AVAILABLE),
    (E.REQUEST_TIMED_OUT, E.COORDINATOR_NOT_AVAILABLE),
    (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
    (E.KAFKA_STORAGE_ERROR, E.NOT_COORDINATOR),
    (E.MESSAGE_TOO_LARGE, E.UNKNOWN_SERVER_ERROR),
    (E.RECORD_LIST_TOO_LARGE, E.UNKNOWN_SERVER_ERROR),
    (E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_NOT_AVAILABLE),
    (E.NOT_COORDINATOR, E.NOT_COORDINATOR),
    (E.UNKNOWN_SERVER_ERROR, E.UNKNOWN_SERVER_ERROR),
])
def test_append_errors_map_as_kafka(error, want):
    assert append_error(error) == want
