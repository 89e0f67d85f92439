"""DescribeTransactions, ListTransactions, ongoing(), and the KIP-890 part 1 verify answers."""

from __future__ import annotations

from txn_harness import T0, Runtime, in_state

from coordinator.core.transactions import TxnState
from coordinator.core.transactions.errors import TRANSACTION_ABORTABLE
from protocol.errors import ErrorCode as E

S = TxnState


def test_describe_an_ongoing_transaction():
    rt = Runtime()
    pid, epoch = rt.producer("tx", timeout_ms=30_000)
    rt.now += 10
    rt.add("tx", pid, epoch, [("b", 2), ("a", 1), ("b", 0)])
    (entry,) = rt.coord.describe(["tx"])
    assert entry == {"error_code": 0, "transactional_id": "tx", "transaction_state": "Ongoing",
                     "transaction_timeout_ms": 30_000, "transaction_start_time_ms": T0 + 10,
                     "producer_id": pid, "producer_epoch": epoch,
                     "topics": [{"topic": "a", "partitions": [1]}, {"topic": "b", "partitions": [0, 2]}]}


def test_describe_errors_and_state_names():
    rt = Runtime()
    rt.auto_markers = False
    in_state(rt, "p", "PrepareAbort")
    in_state(rt, "e", "Empty")
    got = {d["transactional_id"]: d for d in rt.coord.describe(["p", "e", "unknown", ""])}
    assert got["p"]["transaction_state"] == "PrepareAbort" and got["p"]["topics"] != []
    assert got["e"]["transaction_state"] == "Empty" and got["e"]["topics"] == []
    assert got["unknown"]["error_code"] == 105 and got["unknown"]["transaction_state"] == ""
    assert got[""]["error_code"] == E.INVALID_REQUEST


def test_list_transactions_filters():
    rt = Runtime()
    rt.auto_markers = False
    a_pid, _ = in_state(rt, "a", "Ongoing")
    rt.now += 1_000
    in_state(rt, "b", "Ongoing")
    in_state(rt, "c", "PrepareCommit")
    in_state(rt, "d", "Empty")

    def ids(states=(), pids=(), duration=-1):
        body = rt.coord.list_transactions(list(states), list(pids), duration, rt.now + 500)
        assert body["error_code"] == 0
        return sorted(t["transactional_id"] for t in body["transaction_states"]), body["unknown_state_filters"]

    assert ids() == (["a", "b", "c", "d"], [])
    assert ids(["Ongoing"]) == (["a", "b"], [])
    assert ids(["Ongoing", "PrepareCommit", "Bogus"]) == (["a", "b", "c"], ["Bogus"])
    assert ids(["Bogus"]) == ([], ["Bogus"])  # only unknown filters: nothing matches
    assert ids(pids=[a_pid]) == (["a"], [])
    # running longer than 1000 ms at now+500: "a" (1500 ms); "b" and "c" started 500 ms ago; Empty's start
    # is -1, so Kafka's arithmetic lists it too
    assert ids(duration=1_000) == (["a", "d"], [])
    entry = next(t for t in rt.coord.list_transactions([], [], -1, rt.now)["transaction_states"]
                 if t["transactional_id"] == "c")
    assert entry == {"transactional_id": "c", "producer_id": entry["producer_id"],
                     "transaction_state": "PrepareCommit"}


def test_list_transactions_while_loading():
    rt = Runtime()
    rt.coord.begin_loading(0, 9)
    assert rt.coord.list_transactions([], [], -1, rt.now) == {
        "error_code": int(E.COORDINATOR_LOAD_IN_PROGRESS), "unknown_state_filters": [], "transaction_states": []}


def test_ongoing_views_are_snapshots():
    rt = Runtime()
    rt.auto_markers = False
    in_state(rt, "o", "Ongoing")
    in_state(rt, "p", "PrepareCommit")
    in_state(rt, "c", "CompleteAbort")
    in_state(rt, "e", "Empty")
    views = {v.txn_id: v for v in rt.coord.ongoing()}
    assert set(views) == {"o", "p"}
    assert views["o"].partitions == (("t", 0), ("u", 3))
    pid, epoch = views["o"].producer_id, views["o"].producer_epoch
    rt.end("o", pid, epoch, False)
    assert views["o"].state is S.ONGOING  # the snapshot did not change
    assert rt.coord.view("o").state is S.PREPARE_ABORT


def test_verify_answers_as_kafkas_verify_only():
    rt = Runtime()
    rt.auto_markers = False
    pid, epoch = in_state(rt, "tx", "Ongoing")
    v = rt.coord.verify
    assert v("tx", pid, epoch, "t", 0) == 0
    assert v("tx", pid, epoch, "t", 1) == TRANSACTION_ABORTABLE
    assert v("tx", pid, epoch + 1, "t", 0) == E.PRODUCER_FENCED
    assert v("tx", pid + 1, epoch, "t", 0) == E.INVALID_PRODUCER_ID_MAPPING
    assert v("unknown", pid, epoch, "t", 0) == E.INVALID_PRODUCER_ID_MAPPING
    assert v("", pid, epoch, "t", 0) == E.INVALID_REQUEST
    rt.end("tx", pid, epoch, True)
    assert v("tx", pid, epoch, "t", 0) == E.CONCURRENT_TRANSACTIONS  # Prepare*: markers on their way
    m = rt.markers[-1]
    rt.run(rt.coord.markers_done(m.txn_id, m.producer_id, m.producer_epoch, rt.now))
    assert v("tx", pid, epoch, "t", 0) == TRANSACTION_ABORTABLE  # finished: a late batch must not start one
    e_pid, e_epoch = in_state(rt, "empty", "Empty")
    assert v("empty", e_pid, e_epoch, "t", 0) == TRANSACTION_ABORTABLE
