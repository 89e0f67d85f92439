"""tick(): the timed-out transaction sweep, transactional id expiry, Complete* write retries, and
next_deadline()."""

from __future__ import annotations

from txn_harness import T0, Runtime, in_state, partition_errors

from coordinator.core.transactions import TxnConfig, TxnState
from coordinator.core.transactions.coordinator import TOMBSTONES_PER_WRITE
from coordinator.core.transactions.records import encode_key
from protocol.errors import ErrorCode as E

S = TxnState
CFG = TxnConfig(abort_timed_out_interval_ms=1_000, remove_expired_interval_ms=5_000, id_expiration_ms=60_000,
                complete_retry_backoff_ms=50)


def test_next_deadline_is_the_next_sweep():
    rt = Runtime(config=CFG)
    assert rt.coord.next_deadline() == T0 + 1_000
    rt.tick(T0 + 1_000)
    assert rt.coord.next_deadline() == T0 + 2_000
    rt.tick(T0 + 5_000)
    assert rt.coord.next_deadline() == T0 + 6_000  # abort sweep at +6000, expiry at +10000
    for p in range(rt.num_partitions):
        rt.coord.unload(p)
    assert rt.coord.next_deadline() is None


def test_timed_out_transaction_is_fenced_and_aborted():
    rt = Runtime(config=CFG)
    pid, epoch = rt.ongoing("tx", timeout_ms=1_500)
    start = rt.coord.view("tx").start_ms
    n = len(rt.writes_seen)
    rt.tick(start + 1_500)  # a sweep, but start + timeout < now is not yet true
    assert len(rt.writes_seen) == n and rt.coord.view("tx").state is S.ONGOING
    rt.tick(start + 1_501)  # past the deadline, but the next sweep is not due
    assert len(rt.writes_seen) == n
    rt.tick(start + 2_500)
    prepare = [r for r in rt.records_for("tx") if r.state is S.PREPARE_ABORT]
    assert [r.producer_epoch for r in prepare] == [epoch + 1]
    assert rt.markers[-1].commit is False and rt.markers[-1].producer_epoch == epoch + 1
    assert rt.coord.view("tx").state is S.COMPLETE_ABORT
    # the timed-out producer is fenced; its commit fails
    assert rt.end("tx", pid, epoch, True) == {"error_code": int(E.PRODUCER_FENCED)}
    assert rt.end("tx", pid, epoch, True, version=1) == {"error_code": int(E.INVALID_PRODUCER_EPOCH)}
    assert rt.init("tx")["producer_epoch"] == epoch + 2


def test_sweep_skips_pending_prepare_and_fresh_transactions():
    rt = Runtime(config=CFG)
    rt.auto_markers = False
    in_state(rt, "preparing", "PrepareCommit")
    pid, epoch = rt.ongoing("pending", timeout_ms=1_000)
    rt.ongoing("fresh", timeout_ms=60_000)
    in_state(rt, "empty", "Empty")
    rt.hold_writes = True
    rt.add("pending", pid, epoch, [("more", 0)])  # leaves a write pending
    held = set(rt.held)
    rt.tick(T0 + 10_000)
    assert set(rt.held) == held  # nothing new
    for txn_id, state in [("preparing", S.PREPARE_COMMIT), ("pending", S.ONGOING), ("fresh", S.ONGOING),
                          ("empty", S.EMPTY)]:
        assert rt.coord.view(txn_id).state is state
    rt.settle()
    rt.tick(T0 + 11_000)  # no longer pending: now it is fenced and aborted (its PrepareAbort write is held)
    v = rt.coord.view("pending")
    assert (v.state, v.pending, v.producer_epoch) == (S.ONGOING, S.PREPARE_ABORT, epoch + 1)
    assert rt.coord.view("fresh").state is S.ONGOING


def test_idle_ids_expire_with_a_tombstone_and_are_removed_once_durable():
    rt = Runtime(config=CFG)
    in_state(rt, "empty", "Empty")
    in_state(rt, "done", "CompleteCommit")
    in_state(rt, "open", "Ongoing")
    rt.hold_writes = True
    rt.tick(T0 + 60_000)  # an expiry sweep; last update T0 <= now - id_expiration_ms
    tombstones = [w for w in rt.held.values() if all(v is None for _, v in w.records)]
    keys = sorted(k for w in tombstones for k, _ in w.records)
    assert keys == sorted([encode_key("empty"), encode_key("done")])
    assert rt.coord.view("empty").pending is S.DEAD
    assert rt.init("empty")["error_code"] == E.CONCURRENT_TRANSACTIONS  # a tombstone is in flight
    rt.settle()
    assert rt.coord.view("empty") is None and rt.coord.view("done") is None
    assert rt.last_value("empty") is None
    assert rt.coord.view("open").state is S.ONGOING  # Ongoing ids never expire
    assert rt.coord.describe(["empty"])[0]["error_code"] == 105
    rt.hold_writes = False
    assert rt.init("empty") == {"error_code": 0, "producer_id": 1003, "producer_epoch": 0}


def test_expiry_waits_for_the_idle_time_and_the_sweep():
    rt = Runtime(config=CFG)
    in_state(rt, "a", "Empty")
    rt.tick(T0 + 55_000)  # a sweep (the first was due at +5000): "a" is idle for 55 s only
    assert rt.coord.view("a") is not None and rt.writes_seen[-1].records[0][1] is not None
    assert rt.coord.next_deadline() == T0 + 56_000  # the abort sweep; the expiry one is at +60000
    rt.tick(T0 + 59_999)  # not an expiry sweep
    assert rt.coord.view("a") is not None
    rt.tick(T0 + 60_000)  # the sweep; idle exactly id_expiration_ms expires (Kafka's <=)
    assert rt.coord.view("a") is None and rt.last_value("a") is None


def test_failed_tombstone_write_keeps_the_id():
    rt = Runtime(config=CFG)
    pid, epoch = in_state(rt, "a", "Empty")
    rt.hold_writes = True
    rt.tick(T0 + 60_000)
    (wid,) = rt.held
    rt.fail(wid, E.NOT_ENOUGH_REPLICAS)
    v = rt.coord.view("a")
    assert v is not None and v.pending is None and v.state is S.EMPTY
    rt.hold_writes = False
    assert partition_errors(rt.add("a", pid, epoch, [("t", 0)])) == {0}


def test_failed_complete_write_is_retried_after_the_backoff():
    rt = Runtime(config=CFG)
    rt.auto_markers = False
    pid, epoch = in_state(rt, "tx", "PrepareCommit")
    rt.hold_writes = True
    rt.run(rt.coord.markers_done("tx", pid, epoch, rt.now))
    (wid,) = rt.held
    rt.fail(wid, E.NOT_ENOUGH_REPLICAS)
    v = rt.coord.view("tx")
    assert (v.state, v.pending, v.partitions) == (S.PREPARE_COMMIT, S.COMPLETE_COMMIT, ())
    assert rt.end("tx", pid, epoch, True) == {"error_code": int(E.CONCURRENT_TRANSACTIONS)}
    assert rt.coord.next_deadline() == rt.now + 50
    rt.tick(rt.now + 49)
    assert not rt.held
    rt.tick(rt.now + 1)
    assert len(rt.held) == 1
    rt.settle()
    assert rt.coord.view("tx").state is S.COMPLETE_COMMIT
    assert rt.end("tx", pid, epoch, True) == {"error_code": 0}


def test_many_expired_ids_are_split_into_bounded_tombstone_writes():
    rt = Runtime(num_partitions=1, config=CFG)
    n = TOMBSTONES_PER_WRITE + 3
    for i in range(n):
        rt.producer(f"id-{i}")
    rt.hold_writes = True
    rt.tick(T0 + 60_000)
    sizes = sorted(len(w.records) for w in rt.held.values())
    assert sizes == [3, TOMBSTONES_PER_WRITE]
    rt.settle()
    assert all(rt.coord.view(f"id-{i}") is None for i in range(n))
