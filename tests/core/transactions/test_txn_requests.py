"""The request x state table: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn against every
state, with the error, the next state and the records written."""

from __future__ import annotations

import pytest
from txn_harness import T0, Runtime, in_state, partition_errors

from coordinator.core.transactions import PidAllocationError, TxnConfig, TxnCoordinator, TxnState
from coordinator.core.transactions.metadata import TxnMetadata
from protocol.errors import ErrorCode as E

S = TxnState
STATES = ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort"]


def _state(rt: Runtime, txn_id: str) -> TxnState:
    v = rt.coord.view(txn_id)
    assert v is not None
    return v.state


# ---------------------------------------------------------------- EndTxn

END_TABLE = {
    # state: (commit -> error, abort -> error); None = Prepare* written and NONE answered
    "Empty": (E.INVALID_TXN_STATE, E.INVALID_TXN_STATE),
    "Ongoing": (None, None),
    # Prepare* with markers in flight has Complete* pending, and Kafka checks pending before the state: so
    # the other result is CONCURRENT_TRANSACTIONS too (INVALID_TXN_STATE needs a Prepare* without pending,
    # which this core never leaves: a failed Complete* write is retried)
    "PrepareCommit": (E.CONCURRENT_TRANSACTIONS, E.CONCURRENT_TRANSACTIONS),
    "PrepareAbort": (E.CONCURRENT_TRANSACTIONS, E.CONCURRENT_TRANSACTIONS),
    "CompleteCommit": (E.NONE, E.INVALID_TXN_STATE),
    "CompleteAbort": (E.INVALID_TXN_STATE, E.NONE),
}


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_table(state, commit):
    rt = Runtime()
    rt.auto_markers = False
    pid, epoch = in_state(rt, "tx", state)
    before = rt.coord.view("tx")
    n_writes = len(rt.writes_seen)
    expected = END_TABLE[state][0 if commit else 1]
    reply = rt.end("tx", pid, epoch, commit)
    if expected is None:
        assert reply == {"error_code": 0}
        want = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        assert rt.last_value("tx").state is want
        assert _state(rt, "tx") is want
        assert rt.markers[-1].commit is commit
    else:
        assert reply == {"error_code": int(expected)}
        assert len(rt.writes_seen) == n_writes  # an answer without a write
        assert rt.coord.view("tx") == before


@pytest.mark.parametrize("version, fenced", [(0, E.INVALID_PRODUCER_EPOCH), (1, E.INVALID_PRODUCER_EPOCH),
                                             (2, E.PRODUCER_FENCED), (3, E.PRODUCER_FENCED)])
def test_end_txn_wrong_epoch_by_version(version, fenced):
    rt = Runtime()
    pid, epoch = in_state(rt, "tx", "Ongoing")
    assert rt.end("tx", pid, epoch - 1, True, version=version) == {"error_code": int(fenced)}
    assert rt.end("tx", pid, epoch + 1, True, version=version) == {"error_code": int(fenced)}
    assert _state(rt, "tx") is S.ONGOING


def test_end_txn_unknown_id_wrong_pid_empty_id():
    rt = Runtime()
    pid, epoch = in_state(rt, "tx", "Ongoing")
    assert rt.end("nope", pid, epoch, True) == {"error_code": int(E.INVALID_PRODUCER_ID_MAPPING)}
    assert rt.end("tx", pid + 1, epoch, True) == {"error_code": int(E.INVALID_PRODUCER_ID_MAPPING)}
    assert rt.end("", pid, epoch, True) == {"error_code": int(E.INVALID_REQUEST)}


def test_end_txn_is_answered_only_once_prepare_is_durable_then_markers_then_complete():
    rt = Runtime()
    rt.auto_markers = False
    pid, epoch = in_state(rt, "tx", "Ongoing")
    rt.hold_writes = True
    tok = rt.token()
    out = rt.run(rt.coord.end_txn(tok, 3, "tx", pid, epoch, True, rt.now))
    assert out.replies == [] and out.markers == [] and len(out.writes) == 1
    assert rt.coord.view("tx").state is S.ONGOING and rt.coord.view("tx").pending is S.PREPARE_COMMIT
    # while the write is pending, the same id gets CONCURRENT_TRANSACTIONS
    assert rt.end("tx", pid, epoch, True) == {"error_code": int(E.CONCURRENT_TRANSACTIONS)}
    assert partition_errors(rt.add("tx", pid, epoch, [("v", 0)])) == {E.CONCURRENT_TRANSACTIONS}
    assert rt.init("tx")["error_code"] == E.CONCURRENT_TRANSACTIONS
    rt.settle()
    assert rt.reply(tok) == {"error_code": 0}
    task = rt.markers[-1]
    assert (task.txn_id, task.producer_id, task.producer_epoch, task.commit, task.coordinator_epoch) == (
        "tx", pid, epoch, True, 7)
    assert task.partitions == [("t", 0), ("u", 3)]
    # markers in flight: Prepare* with Complete* pending; nothing else written yet
    assert rt.coord.view("tx").state is S.PREPARE_COMMIT
    assert rt.coord.view("tx").pending is S.COMPLETE_COMMIT
    assert not rt.held
    rt.hold_writes = False
    rt.run(rt.coord.markers_done("tx", pid, epoch, rt.now))
    assert rt.last_value("tx").state is S.COMPLETE_COMMIT
    assert rt.last_value("tx").partitions == ()
    v = rt.coord.view("tx")
    assert (v.state, v.pending, v.partitions) == (S.COMPLETE_COMMIT, None, ())


def test_markers_done_for_another_epoch_or_twice_is_ignored():
    rt = Runtime()
    rt.auto_markers = False
    pid, epoch = in_state(rt, "tx", "PrepareAbort")
    n = len(rt.writes_seen)
    assert rt.run(rt.coord.markers_done("tx", pid, epoch + 1, rt.now)).writes == []
    assert rt.run(rt.coord.markers_done("other", pid, epoch, rt.now)).writes == []
    assert len(rt.writes_seen) == n
    assert len(rt.run(rt.coord.markers_done("tx", pid, epoch, rt.now)).writes) == 1
    assert rt.run(rt.coord.markers_done("tx", pid, epoch, rt.now)).writes == []
    assert rt.coord.view("tx").state is S.COMPLETE_ABORT


def test_a_transaction_with_no_partitions_completes_without_markers():
    rt = Runtime()
    pid, epoch = rt.producer("tx")
    assert rt.add("tx", pid, epoch, []) == {"results_by_topic_v3_and_below": []}
    assert rt.coord.view("tx").state is S.ONGOING
    assert rt.end("tx", pid, epoch, True) == {"error_code": 0}
    assert rt.markers == []
    assert [v.state for v in rt.records_for("tx")][-2:] == [S.PREPARE_COMMIT, S.COMPLETE_COMMIT]


# ---------------------------------------------------------------- AddPartitionsToTxn / AddOffsetsToTxn

ADD_TABLE = {
    "Empty": None,  # write Ongoing
    "Ongoing": None,
    "PrepareCommit": E.CONCURRENT_TRANSACTIONS,
    "PrepareAbort": E.CONCURRENT_TRANSACTIONS,
    "CompleteCommit": None,
    "CompleteAbort": None,
}


@pytest.mark.parametrize("state", STATES)
def test_add_partitions_table(state):
    rt = Runtime()
    rt.auto_markers = False
    pid, epoch = in_state(rt, "tx", state)
    before = rt.coord.view("tx")
    n = len(rt.writes_seen)
    rt.now += 500
    reply = rt.add("tx", pid, epoch, [("new", 1), ("t", 0)])
    expected = ADD_TABLE[state]
    if expected is None:
        assert partition_errors(reply) == {0}
        assert len(rt.writes_seen) == n + 1
        rec = rt.last_value("tx")
        v = rt.coord.view("tx")
        assert rec.state is S.ONGOING and v.state is S.ONGOING
        if state == "Ongoing":
            assert rec.partitions == (("new", 1), ("t", 0), ("u", 3))  # the union
            assert rec.start_ms == before.start_ms  # the transaction started earlier
        else:
            assert rec.partitions == (("new", 1), ("t", 0))
            assert rec.start_ms == rt.now  # a new transaction starts now
        assert v.partitions == rec.partitions and v.start_ms == rec.start_ms
    else:
        assert partition_errors(reply) == {expected}
        assert len(rt.writes_seen) == n
        assert rt.coord.view("tx") == before


def test_add_partitions_already_in_the_set_answers_at_once_without_a_write():
    rt = Runtime()
    pid, epoch = in_state(rt, "tx", "Ongoing")
    n = len(rt.writes_seen)
    rt.hold_writes = True
    reply = rt.add("tx", pid, epoch, [("u", 3), ("t", 0), ("t", 0)])
    assert reply == {"results_by_topic_v3_and_below": [
        {"name": "t", "results_by_partition": [{"partition_index": 0, "partition_error_code": 0}]},
        {"name": "u", "results_by_partition": [{"partition_index": 3, "partition_error_code": 0}]}]}
    assert len(rt.writes_seen) == n


def test_add_partitions_is_answered_after_the_write():
    rt = Runtime()
    pid, epoch = rt.producer("tx")
    rt.hold_writes = True
    tok = rt.token()
    rt.run(rt.coord.add_partitions(tok, 3, "tx", pid, epoch, [("t", 0)], rt.now))
    assert rt.reply(tok) is None and rt.coord.view("tx").state is S.EMPTY
    assert rt.coord.verify("tx", pid, epoch, "t", 0) != 0  # not in the transaction until durable
    rt.settle()
    assert partition_errors(rt.reply(tok)) == {0}
    assert rt.coord.verify("tx", pid, epoch, "t", 0) == 0


@pytest.mark.parametrize("version, fenced", [(0, E.INVALID_PRODUCER_EPOCH), (1, E.INVALID_PRODUCER_EPOCH),
                                             (2, E.PRODUCER_FENCED), (3, E.PRODUCER_FENCED)])
def test_add_checks_in_kafkas_order(version, fenced):
    rt = Runtime()
    pid, epoch = in_state(rt, "tx", "Ongoing")
    parts = [("t", 0), ("z", 9)]

    def add(txn_id, p, e):
        return partition_errors(rt.add(txn_id, p, e, parts, version=version))

    assert add("", pid, epoch) == {E.INVALID_REQUEST}
    assert add("nope", pid, epoch) == {E.INVALID_PRODUCER_ID_MAPPING}
    assert add("tx", pid + 1, epoch + 1) == {E.INVALID_PRODUCER_ID_MAPPING}  # pid before epoch
    assert add("tx", pid, epoch + 1) == {fenced}
    rt.hold_writes = True
    assert rt.add("tx", pid, epoch, parts, version=version) is None  # its write is held: no answer yet
    assert rt.held
    assert add("tx", pid, epoch + 1) == {fenced}  # epoch before pending
    assert add("tx", pid, epoch) == {E.CONCURRENT_TRANSACTIONS}
    offsets = rt.add_offsets("tx", pid, epoch, version=version)
    assert offsets == {"error_code": int(E.CONCURRENT_TRANSACTIONS)}
    assert rt.add_offsets("tx", pid, epoch - 1, version=version) == {"error_code": int(fenced)}


def test_add_offsets_adds_the_offsets_partition():
    rt = Runtime()
    pid, epoch = rt.producer("tx")
    assert rt.add_offsets("tx", pid, epoch, partition=17) == {"error_code": 0}
    assert rt.coord.view("tx").partitions == (("__consumer_offsets", 17),)
    n = len(rt.writes_seen)
    assert rt.add_offsets("tx", pid, epoch, partition=17) == {"error_code": 0}
    assert len(rt.writes_seen) == n
    assert rt.add_offsets("", pid, epoch) == {"error_code": int(E.INVALID_REQUEST)}
    assert rt.add_offsets("nope", pid, epoch) == {"error_code": int(E.INVALID_PRODUCER_ID_MAPPING)}


# ---------------------------------------------------------------- InitProducerId


INIT_TABLE = {
    "Empty": "bump",
    "Ongoing": "fence",
    "PrepareCommit": E.CONCURRENT_TRANSACTIONS,
    "PrepareAbort": E.CONCURRENT_TRANSACTIONS,
    "CompleteCommit": "bump",
    "CompleteAbort": "bump",
}


@pytest.mark.parametrize("state", STATES)
def test_init_producer_id_table(state):
    rt = Runtime()
    rt.auto_markers = False
    pid, epoch = in_state(rt, "tx", state)
    before = rt.coord.view("tx")
    n = len(rt.writes_seen)
    rt.now += 1000
    reply = rt.init("tx", timeout_ms=30_000)
    expected = INIT_TABLE[state]
    if expected == "bump":
        assert reply == {"error_code": 0, "producer_id": pid, "producer_epoch": epoch + 1}
        rec = rt.last_value("tx")
        assert (rec.state, rec.producer_epoch, rec.partitions, rec.start_ms, rec.timeout_ms) == (
            S.EMPTY, epoch + 1, None, -1, 30_000)
        assert rec.last_update_ms == rt.now
        assert rt.coord.view("tx").state is S.EMPTY
    elif expected == "fence":
        assert reply == {"error_code": int(E.CONCURRENT_TRANSACTIONS), "producer_id": -1, "producer_epoch": -1}
        rec = rt.last_value("tx")
        assert (rec.state, rec.producer_epoch) == (S.PREPARE_ABORT, epoch + 1)
        assert rec.partitions == (("t", 0), ("u", 3))
        task = rt.markers[-1]
        assert (task.commit, task.producer_epoch, task.partitions) == (False, epoch + 1, [("t", 0), ("u", 3)])
    else:
        assert reply == {"error_code": int(expected), "producer_id": -1, "producer_epoch": -1}
        assert len(rt.writes_seen) == n
        assert rt.coord.view("tx") == before


def test_init_on_ongoing_aborts_then_the_retry_gets_old_plus_two():
    rt = Runtime()
    pid, epoch = in_state(rt, "tx", "Ongoing")
    assert rt.init("tx")["error_code"] == E.CONCURRENT_TRANSACTIONS
    # markers were completed by the runtime: CompleteAbort at the fenced epoch
    assert rt.coord.view("tx").state is S.COMPLETE_ABORT
    # the old producer is fenced everywhere
    assert rt.end("tx", pid, epoch, True) == {"error_code": int(E.PRODUCER_FENCED)}
    assert partition_errors(rt.add("tx", pid, epoch, [("t", 5)])) == {E.PRODUCER_FENCED}
    assert rt.init("tx") == {"error_code": 0, "producer_id": pid, "producer_epoch": epoch + 2}
    states = [v.state for v in rt.records_for("tx")]
    assert states[-4:] == [S.ONGOING, S.PREPARE_ABORT, S.COMPLETE_ABORT, S.EMPTY]


def test_init_while_fence_markers_are_in_flight_is_concurrent():
    rt = Runtime()
    rt.auto_markers = False
    pid, epoch = in_state(rt, "tx", "Ongoing")
    assert rt.init("tx")["error_code"] == E.CONCURRENT_TRANSACTIONS
    assert rt.init("tx")["error_code"] == E.CONCURRENT_TRANSACTIONS
    assert [v.state for v in rt.records_for("tx")].count(S.PREPARE_ABORT) == 1
    m = rt.markers[-1]
    rt.run(rt.coord.markers_done(m.txn_id, m.producer_id, m.producer_epoch, rt.now))
    assert rt.init("tx")["producer_epoch"] == epoch + 2


def test_init_argument_checks():
    rt = Runtime()
    max_ms = TxnConfig().max_timeout_ms
    err = {"producer_id": -1, "producer_epoch": -1}
    assert rt.init("") == {"error_code": int(E.INVALID_REQUEST), **err}
    for bad in (0, -5, max_ms + 1):
        assert rt.init("tx", timeout_ms=bad) == {"error_code": int(E.INVALID_TRANSACTION_TIMEOUT), **err}
    assert rt.init("tx", pid=5, epoch=-1, version=3) == {"error_code": int(E.INVALID_REQUEST), **err}
    assert rt.init("tx", pid=-1, epoch=2, version=3) == {"error_code": int(E.INVALID_REQUEST), **err}
    assert rt.writes_seen == []
    assert rt.init("tx", timeout_ms=max_ms)["error_code"] == 0


def test_init_without_transactional_id_gives_a_fresh_pid_and_keeps_no_state():
    rt = Runtime()
    assert rt.init(None) == {"error_code": 0, "producer_id": 1000, "producer_epoch": 0}
    assert rt.init(None) == {"error_code": 0, "producer_id": 1001, "producer_epoch": 0}
    assert rt.writes_seen == []
    assert list(rt.coord.ongoing()) == []


def test_init_first_write_is_empty_epoch_zero_with_a_new_pid():
    rt = Runtime()
    assert rt.init("a") == {"error_code": 0, "producer_id": 1000, "producer_epoch": 0}
    assert rt.init("b") == {"error_code": 0, "producer_id": 1001, "producer_epoch": 0}
    assert rt.last_value("a") == rt.last_value("a")._replace(producer_id=1000, producer_epoch=0, start_ms=-1,
                                                              partitions=None, state=S.EMPTY, last_update_ms=T0)


def test_pid_allocation_failure_is_answered_with_its_code():
    def fail() -> int:
        raise PidAllocationError(E.COORDINATOR_LOAD_IN_PROGRESS)

    c = TxnCoordinator(TxnConfig(), num_partitions=1, allocate_producer_id=fail)
    c.begin_loading(0, 1)
    c.finish_loading(0, T0)
    out = c.init_producer_id("t", 4, "tx", 1000, -1, -1, T0)
    assert out.replies == [("t", {"error_code": int(E.COORDINATOR_LOAD_IN_PROGRESS), "producer_id": -1,
                                  "producer_epoch": -1})]
    assert out.writes == [] and c.view("tx") is None
    out = c.init_producer_id("u", 4, None, 1000, -1, -1, T0)
    assert out.replies[0][1]["error_code"] == E.COORDINATOR_LOAD_IN_PROGRESS


@pytest.mark.parametrize("state, commit, want", [
    (S.PREPARE_COMMIT, True, E.CONCURRENT_TRANSACTIONS), (S.PREPARE_COMMIT, False, E.INVALID_TXN_STATE),
    (S.PREPARE_ABORT, False, E.CONCURRENT_TRANSACTIONS), (S.PREPARE_ABORT, True, E.INVALID_TXN_STATE),
    (S.COMPLETE_COMMIT, True, E.NONE), (S.COMPLETE_ABORT, True, E.INVALID_TXN_STATE),
    (S.EMPTY, False, E.INVALID_TXN_STATE), (S.ONGOING, True, None),
])
def test_end_txn_state_rule_without_pending(state, commit, want):
    # the state half of EndTxn's checks, for a Prepare* that has no pending transition
    md = TxnMetadata.new("x", 5, 1000, T0)
    md.producer_epoch, md.state = 2, state
    assert TxnCoordinator._end_error(md, 5, 2, commit, True) == want
