"""Producer ids and epochs across a transactional id's life: KIP-360 resume and retry, epoch exhaustion,
zombie fencing, and what a failed write leaves behind."""

from __future__ import annotations

import pytest
from txn_harness import T0, Runtime, in_state, loaded, partition_errors

from coordinator.core.transactions import TxnLogValue, TxnState
from protocol.errors import ErrorCode as E

S = TxnState


def _empty(pid: int, epoch: int) -> TxnLogValue:
    return TxnLogValue(pid, epoch, 60_000, S.EMPTY, None, T0, -1)


# ---------------------------------------------------------------- KIP-360


def test_kip360_resume_bumps_and_a_lost_answer_can_be_retried():
    rt = Runtime()
    pid, epoch = rt.producer("tx")
    first = rt.init("tx", pid=pid, epoch=epoch, version=3)
    assert first == {"error_code": 0, "producer_id": pid, "producer_epoch": epoch + 1}
    assert rt.coord.view("tx").last_producer_epoch == epoch
    # the client never saw the answer and asks again with its old epoch: the same answer, no second bump
    assert rt.init("tx", pid=pid, epoch=epoch, version=3) == first
    assert rt.coord.view("tx").producer_epoch == epoch + 1
    # resuming from the new epoch bumps again
    assert rt.init("tx", pid=pid, epoch=epoch + 1, version=4)["producer_epoch"] == epoch + 2


@pytest.mark.parametrize("version, fenced", [(3, E.INVALID_PRODUCER_EPOCH), (4, E.PRODUCER_FENCED),
                                             (5, E.PRODUCER_FENCED)])
def test_kip360_stale_epoch_or_foreign_pid_is_fenced(version, fenced):
    rt = Runtime()
    pid, epoch = rt.producer("tx")
    rt.init("tx")  # another instance: epoch + 1
    before = rt.coord.view("tx")
    n = len(rt.writes_seen)
    err = {"error_code": int(fenced), "producer_id": -1, "producer_epoch": -1}
    assert rt.init("tx", pid=pid, epoch=epoch - 1 if epoch else 7, version=version) == err
    assert rt.init("tx", pid=pid + 50, epoch=epoch + 1, version=version) == err
    assert len(rt.writes_seen) == n and rt.coord.view("tx") == before


def test_kip360_after_a_plain_init_the_old_retry_is_fenced():
    rt = Runtime()
    pid, epoch = rt.producer("tx")
    rt.init("tx", pid=pid, epoch=epoch, version=4)  # bump, last epoch remembered
    rt.init("tx")  # a new instance: last epoch forgotten
    assert rt.coord.view("tx").last_producer_epoch == -1
    assert rt.init("tx", pid=pid, epoch=epoch, version=4)["error_code"] == E.PRODUCER_FENCED


def test_kip360_on_an_unknown_id_gets_a_new_producer():
    rt = Runtime()
    assert rt.init("tx", pid=77, epoch=3, version=4) == {"error_code": 0, "producer_id": 1000,
                                                         "producer_epoch": 0}


def test_kip360_retry_across_a_reload_is_fenced_as_in_kafka():
    rt = Runtime()
    pid, epoch = rt.producer("tx")
    rt.init("tx", pid=pid, epoch=epoch, version=4)
    again = loaded({"tx": rt.last_value("tx")})  # v0 records do not carry the last epoch
    assert again.coord.view("tx").last_producer_epoch == -1
    assert again.init("tx", pid=pid, epoch=epoch, version=4)["error_code"] == E.PRODUCER_FENCED


# ---------------------------------------------------------------- epoch exhaustion


def test_exhausted_epoch_rotates_to_a_new_producer_id():
    rt = loaded({"tx": _empty(500, 32766)})
    assert rt.init("tx") == {"error_code": 0, "producer_id": 1000, "producer_epoch": 0}
    v = rt.coord.view("tx")
    assert (v.last_producer_id, v.last_producer_epoch) == (500, -1)
    assert rt.last_value("tx") == _empty(1000, 0)


def test_epoch_below_exhaustion_still_bumps():
    rt = loaded({"tx": _empty(500, 32765)})
    assert rt.init("tx") == {"error_code": 0, "producer_id": 500, "producer_epoch": 32766}
    assert rt.init("tx") == {"error_code": 0, "producer_id": 1000, "producer_epoch": 0}


def test_kip360_rotation_can_be_retried_with_the_old_pid():
    rt = loaded({"tx": _empty(500, 32766)})
    first = rt.init("tx", pid=500, epoch=32766, version=4)
    assert first == {"error_code": 0, "producer_id": 1000, "producer_epoch": 0}
    assert rt.coord.view("tx").last_producer_epoch == 32766
    assert rt.init("tx", pid=500, epoch=32766, version=4) == first  # the retry: same pid, same epoch
    assert rt.init("tx", pid=500, epoch=32765, version=4)["error_code"] == E.PRODUCER_FENCED
    assert rt.init("tx", pid=1000, epoch=0, version=4) == {"error_code": 0, "producer_id": 1000,
                                                           "producer_epoch": 1}


def test_kip360_retry_of_the_bump_to_an_exhausted_epoch():
    # Kafka raises an internal error here; we answer the retry (see metadata.prepare_increment_epoch)
    rt = loaded({"tx": _empty(500, 32765)})
    first = rt.init("tx", pid=500, epoch=32765, version=4)
    assert first == {"error_code": 0, "producer_id": 500, "producer_epoch": 32766}
    assert rt.init("tx", pid=500, epoch=32765, version=4) == first
    assert rt.init("tx", pid=500, epoch=32000, version=4)["error_code"] == E.PRODUCER_FENCED


def test_fencing_an_ongoing_transaction_at_the_last_epoch_then_rotating():
    rt = loaded({"tx": _empty(500, 32765)})
    pid, epoch = rt.producer("tx")
    assert (pid, epoch) == (500, 32766)
    assert partition_errors(rt.add("tx", pid, epoch, [("t", 0)])) == {0}
    assert rt.init("tx")["error_code"] == E.CONCURRENT_TRANSACTIONS
    assert rt.last_value("tx").producer_epoch == 32767  # the fence may use Short.MAX_VALUE
    assert rt.init("tx") == {"error_code": 0, "producer_id": 1000, "producer_epoch": 0}


# ---------------------------------------------------------------- failed writes


@pytest.mark.parametrize("error, answer", [
    (E.KAFKA_STORAGE_ERROR, E.NOT_COORDINATOR), (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
    (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE), (E.REQUEST_TIMED_OUT, E.COORDINATOR_NOT_AVAILABLE),
    (E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_NOT_AVAILABLE), (E.NOT_COORDINATOR, E.NOT_COORDINATOR),
    (E.MESSAGE_TOO_LARGE, E.UNKNOWN_SERVER_ERROR),
])
def test_failed_add_partitions_write_leaves_the_state_as_before(error, answer):
    rt = Runtime()
    pid, epoch = in_state(rt, "tx", "Ongoing")
    before = rt.coord.view("tx")
    rt.hold_writes = True
    tok = rt.token()
    rt.run(rt.coord.add_partitions(tok, 3, "tx", pid, epoch, [("new", 0)], rt.now))
    (wid,) = rt.held
    rt.fail(wid, error)
    assert partition_errors(rt.reply(tok)) == {answer}
    assert rt.coord.view("tx") == before
    assert rt.coord.verify("tx", pid, epoch, "new", 0) != 0
    rt.hold_writes = False
    assert partition_errors(rt.add("tx", pid, epoch, [("new", 0)])) == {0}


def test_failed_end_txn_write_leaves_ongoing_and_can_be_retried():
    rt = Runtime()
    pid, epoch = in_state(rt, "tx", "Ongoing")
    before = rt.coord.view("tx")
    rt.hold_writes = True
    tok = rt.token()
    rt.run(rt.coord.end_txn(tok, 3, "tx", pid, epoch, True, rt.now))
    (wid,) = rt.held
    rt.fail(wid, E.REQUEST_TIMED_OUT)
    assert rt.reply(tok) == {"error_code": int(E.COORDINATOR_NOT_AVAILABLE)}
    assert rt.coord.view("tx") == before and rt.markers == []
    rt.hold_writes = False
    assert rt.end("tx", pid, epoch, True) == {"error_code": 0}
    assert rt.coord.view("tx").state is S.COMPLETE_COMMIT


def test_failed_init_write_on_a_known_id_changes_nothing():
    rt = Runtime()
    pid, epoch = rt.producer("tx")
    before = rt.coord.view("tx")
    rt.hold_writes = True
    tok = rt.token()
    rt.run(rt.coord.init_producer_id(tok, 4, "tx", 60_000, -1, -1, rt.now))
    (wid,) = rt.held
    rt.fail(wid, E.NOT_ENOUGH_REPLICAS)
    assert rt.reply(tok) == {"error_code": int(E.COORDINATOR_NOT_AVAILABLE), "producer_id": -1,
                             "producer_epoch": -1}
    assert rt.coord.view("tx") == before
    rt.hold_writes = False
    assert rt.init("tx")["producer_epoch"] == epoch + 1


def test_failed_first_init_keeps_the_allocated_pid_for_the_retry():
    rt = Runtime()
    rt.hold_writes = True
    tok = rt.token()
    rt.run(rt.coord.init_producer_id(tok, 4, "tx", 60_000, -1, -1, rt.now))
    rt.fail(next(iter(rt.held)), E.KAFKA_STORAGE_ERROR)
    assert rt.reply(tok)["error_code"] == E.NOT_COORDINATOR
    v = rt.coord.view("tx")
    assert (v.state, v.producer_id, v.producer_epoch, v.pending) == (S.EMPTY, 1000, -1, None)
    rt.hold_writes = False
    assert rt.init("tx") == {"error_code": 0, "producer_id": 1000, "producer_epoch": 0}


def test_failed_epoch_fence_is_not_bumped_twice():
    # Kafka's testFailureToFenceEpoch: the fence's epoch stays bumped in memory, the next fence reuses it
    rt = Runtime()
    pid, epoch = in_state(rt, "tx", "Ongoing")
    rt.hold_writes = True
    tok = rt.token()
    rt.run(rt.coord.init_producer_id(tok, 4, "tx", 60_000, -1, -1, rt.now))
    (wid,) = rt.held
    assert rt.coord.view("tx").producer_epoch == epoch + 1  # bumped before the write, as Kafka
    rt.fail(wid, E.NOT_ENOUGH_REPLICAS)
    assert rt.reply(tok)["error_code"] == E.COORDINATOR_NOT_AVAILABLE
    v = rt.coord.view("tx")
    assert (v.state, v.producer_epoch, v.pending) == (S.ONGOING, epoch + 1, None)
    assert rt.last_value("tx").state is S.ONGOING  # nothing durable changed
    # the old producer is fenced by the in-memory epoch
    assert partition_errors(rt.add("tx", pid, epoch, [("t", 0)])) == {E.PRODUCER_FENCED}
    rt.hold_writes = False
    assert rt.init("tx")["error_code"] == E.CONCURRENT_TRANSACTIONS
    prepare = [r for r in rt.records_for("tx") if r.state is S.PREPARE_ABORT]
    assert [r.producer_epoch for r in prepare] == [epoch + 1]
    assert rt.init("tx")["producer_epoch"] == epoch + 2
