"""Ownership: loading from the log (last value wins, tombstones), re-driving Prepare* markers after a
reload, unloading, and writes that finish after ownership changed."""

from __future__ import annotations

import pytest
from txn_harness import T0, Runtime, in_state, loaded, partition_errors

from coordinator.core.transactions import RecordError, TxnConfig, TxnCoordinator, TxnLogValue, TxnState
from coordinator.core.transactions.records import encode_key, encode_value
from protocol.errors import ErrorCode as E

S = TxnState


def _reload(rt: Runtime, coordinator_epoch: int, auto_markers: bool = True) -> Runtime:
    """A new coordinator that loads rt's log (a restart or a failover)."""
    again = Runtime(rt.num_partitions, coordinator_epoch=coordinator_epoch, first_pid=5000, load=False)
    again.auto_markers = auto_markers
    again.log = {p: list(records) for p, records in rt.log.items()}
    again.now = rt.now
    for p in range(rt.num_partitions):
        again.coord.begin_loading(p, coordinator_epoch)
        for key, value in again.log[p]:
            again.coord.replay(p, key, value)
        again.run(again.coord.finish_loading(p, again.now))
    return again


def test_reload_rebuilds_every_state_and_redrives_prepare_markers():
    rt = Runtime()
    rt.auto_markers = False
    ids = {}
    for state in ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort"]:
        ids[state] = in_state(rt, state.lower(), state)
    rt.now += 5_000
    again = _reload(rt, coordinator_epoch=8, auto_markers=False)
    for state in ids:
        v = again.coord.view(state.lower())
        old = rt.coord.view(state.lower())
        assert (v.producer_id, v.producer_epoch, v.partitions, v.start_ms, v.state) == (
            old.producer_id, old.producer_epoch, old.partitions, old.start_ms, old.state)
    # the two Prepare* transactions get their markers again, at the new coordinator epoch
    tasks = {m.txn_id: m for m in again.markers}
    assert set(tasks) == {"preparecommit", "prepareabort"}
    assert tasks["preparecommit"].commit is True and tasks["prepareabort"].commit is False
    assert {m.coordinator_epoch for m in tasks.values()} == {8}
    assert tasks["preparecommit"].partitions == [("t", 0), ("u", 3)]
    assert again.coord.view("preparecommit").pending is S.COMPLETE_COMMIT
    assert again.end("preparecommit", *ids["PrepareCommit"], True) == {"error_code": 51}
    # the client may already have its success: completing them needs only the markers
    for m in tasks.values():
        again.run(again.coord.markers_done(m.txn_id, m.producer_id, m.producer_epoch, again.now))
    assert again.last_value("preparecommit").state is S.COMPLETE_COMMIT
    assert again.last_value("prepareabort").state is S.COMPLETE_ABORT
    assert again.end("preparecommit", *ids["PrepareCommit"], True) == {"error_code": 0}
    # Ongoing is left alone (the timeout will abort it) and can still be committed by its producer
    assert again.end("ongoing", *ids["Ongoing"], True) == {"error_code": 0}


def test_replay_last_value_wins_and_tombstones_remove():
    v1 = TxnLogValue(1, 0, 1000, S.EMPTY, None, T0, -1)
    v2 = TxnLogValue(1, 1, 1000, S.ONGOING, (("t", 0),), T0 + 1, T0 + 1)
    c = TxnCoordinator(TxnConfig(), num_partitions=1, allocate_producer_id=lambda: 99)
    c.begin_loading(0, 3)
    assert c.status_error("a") == E.COORDINATOR_LOAD_IN_PROGRESS
    c.replay(0, encode_key("a"), encode_value(v1))
    c.replay(0, encode_key("a"), encode_value(v2))
    c.replay(0, encode_key("gone"), encode_value(v1))
    c.replay(0, encode_key("gone"), None)
    c.replay(0, encode_key("x"), None)  # a tombstone for an id never seen
    c.replay(0, b"\x00\x05\x00\x01z", encode_value(v1))  # an unknown key version: skipped
    out = c.init_producer_id("tok", 4, "a", 1000, -1, -1, T0)
    assert out.replies[0][1]["error_code"] == E.COORDINATOR_LOAD_IN_PROGRESS
    assert c.finish_loading(0, T0).markers == []
    assert c.status_error("a") is None
    v = c.view("a")
    assert (v.state, v.producer_epoch, v.partitions, v.start_ms) == (S.ONGOING, 1, (("t", 0),), T0 + 1)
    assert c.view("gone") is None and c.view("x") is None and c.view("z") is None


def test_replay_of_an_empty_record_ignores_its_partitions_and_bad_records_raise():
    c = TxnCoordinator(TxnConfig(), num_partitions=1, allocate_producer_id=lambda: 99)
    c.begin_loading(0, 3)
    odd = TxnLogValue(1, 0, 1000, S.EMPTY, (("t", 0),), T0, -1)
    c.replay(0, encode_key("a"), encode_value(odd))
    with pytest.raises(RecordError):
        c.replay(0, encode_key("b"), b"\x00\x00\x01")
    with pytest.raises(RecordError):
        c.replay(0, encode_key("b"), encode_value(odd._replace(state=S.DEAD)))
    c.finish_loading(0, T0)
    assert c.view("a").partitions == ()
    with pytest.raises(RuntimeError):
        c.replay(0, encode_key("a"), None)  # not loading any more


def test_not_owned_partitions_answer_not_coordinator():
    rt = Runtime(num_partitions=4, load=False)
    rt.coord.begin_loading(rt.coord.partition_for("mine"), 1)
    rt.run(rt.coord.finish_loading(rt.coord.partition_for("mine"), rt.now))
    other = next(t for t in ("a", "b", "c", "d", "e", "f", "g")
                 if rt.coord.partition_for(t) != rt.coord.partition_for("mine"))
    assert rt.coord.status_error(other) == E.NOT_COORDINATOR
    assert rt.init(other)["error_code"] == E.NOT_COORDINATOR
    assert partition_errors(rt.add(other, 1, 0, [("t", 0)])) == {E.NOT_COORDINATOR}
    assert rt.end(other, 1, 0, True) == {"error_code": int(E.NOT_COORDINATOR)}
    assert rt.coord.verify(other, 1, 0, "t", 0) == E.NOT_COORDINATOR
    assert rt.coord.describe([other])[0]["error_code"] == E.NOT_COORDINATOR
    assert rt.init("mine")["error_code"] == 0


def test_unload_answers_waiting_requests_and_ignores_their_late_writes():
    rt = Runtime()
    pid, epoch = in_state(rt, "tx", "Ongoing")
    rt.hold_writes = True
    tok = rt.token()
    rt.run(rt.coord.end_txn(tok, 3, "tx", pid, epoch, True, rt.now))
    (wid,) = rt.held
    p = rt.coord.partition_for("tx")
    out = rt.run(rt.coord.unload(p))
    assert out.replies == [(tok, {"error_code": int(E.NOT_COORDINATOR)})]
    assert rt.coord.view("tx") is None
    assert rt.coord.status_error("tx") == E.NOT_COORDINATOR
    late = rt.coord.write_done(wid, None, rt.now)
    assert (late.replies, late.writes, late.markers) == ([], [], [])


def test_a_write_finishing_after_a_reload_answers_not_coordinator():
    rt = Runtime()
    pid, epoch = rt.producer("tx")
    rt.hold_writes = True
    tok = rt.token()
    rt.run(rt.coord.add_partitions(tok, 3, "tx", pid, epoch, [("t", 0)], rt.now))
    (wid,) = rt.held
    p = rt.coord.partition_for("tx")
    rt.coord.begin_loading(p, 8)  # leadership bounced: a new coordinator epoch
    assert rt.coord.write_done(wid, None, rt.now).replies == [
        (tok, {"results_by_topic_v3_and_below": [{"name": "t", "results_by_partition": [
            {"partition_index": 0, "partition_error_code": int(E.COORDINATOR_LOAD_IN_PROGRESS)}]}]})]


def test_markers_done_from_a_previous_coordinator_epoch_is_ignored():
    rt = Runtime()
    rt.auto_markers = False
    pid, epoch = in_state(rt, "tx", "PrepareCommit")
    p = rt.coord.partition_for("tx")
    rt.coord.begin_loading(p, 9)
    for key, value in rt.log[p]:
        rt.coord.replay(p, key, value)
    assert rt.coord.markers_done("tx", pid, epoch, rt.now).writes == []  # the old task was dropped
    out = rt.run(rt.coord.finish_loading(p, rt.now))
    assert [m.coordinator_epoch for m in out.markers] == [9]
    assert len(rt.coord.markers_done("tx", pid, epoch, rt.now).writes) == 1


def test_loading_a_partition_we_do_not_have_is_an_error():
    c = TxnCoordinator(TxnConfig(), num_partitions=2, allocate_producer_id=lambda: 1)
    with pytest.raises(ValueError):
        c.begin_loading(2, 0)
    with pytest.raises(RuntimeError):
        c.finish_loading(1, T0)


def test_loaded_helper_reads_what_it_wrote():
    rt = loaded({"a": TxnLogValue(5, 2, 1000, S.COMPLETE_ABORT, (), T0, T0 - 5)})
    v = rt.coord.view("a")
    assert (v.producer_id, v.producer_epoch, v.state, v.start_ms) == (5, 2, S.COMPLETE_ABORT, T0 - 5)
