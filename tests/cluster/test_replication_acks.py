"""The leader's acknowledgements (coordinator/runtime/replication.py) on trio with a mock clock and real partition
logs, the cluster member replaced by the view it would publish: a write is acknowledged once both followers'
fetches show it on their disks, never while the ZooKeeper session is SUSPENDED, with NOT_ENOUGH_REPLICAS*
when the ISR is too small, REQUEST_TIMED_OUT past its timeout, and NOT_LEADER_OR_FOLLOWER when leadership
goes; follower fetches are fenced by leader epoch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
import trio.testing
from replication_fakes import Member  # type: ignore[import-not-found]

from coordinator.cluster.state import BrokerInfo, ClusterView, PartitionState
from coordinator.runtime.replication import Replication, _answer
from coordinator.storage.log import PartitionLog
from protocol.errors import ErrorCode
from protocol.record_batch import build_batch

TP = ("t", 0)


def view(leader: int, isr: tuple[int, ...], epoch: int = 1) -> ClusterView:
    brokers = {i: BrokerInfo(i, "127.0.0.1", 1) for i in (1, 2, 3)}
    return ClusterView(brokers, 1, 1, {"t": {0: (1, 2, 3)}}, {TP: PartitionState(leader, epoch, isr, 1)})


def setup(tmp_path: Path, min_isr: int = 2) -> tuple[Replication, PartitionLog, Member]:
    plog = PartitionLog.open(str(tmp_path / "t-0"))
    member = Member()
    rep = Replication({"node.id": 1, "min.insync.replicas": min_isr, "replica.lag.time.max.ms": 30_000},
                      member, lambda t, p: plog if (t, p) == TP else None, lambda: None)  # type: ignore[arg-type]
    rep.on_view(view(1, (1, 2, 3)))
    return rep, plog, member


def write(plog: PartitionLog, n: int = 1) -> int:
    for _ in range(n):
        plog.append([build_batch([(b"k", b"v", [], 0)])])
    plog.flush()
    return plog.log_end_offset


def follower_fetch(rep: Replication, replica: int, offset: int, epoch: int = 1) -> dict[str, Any]:
    """A sessionless follower fetch of TP, served as ``handle_fetch`` serves it (without waiting)."""
    ctx = rep.sessions.context(replica, 0, -1, [(TP, offset, epoch, 1 << 20)], [], rep.logs.__contains__)
    served, _, _ = rep._serve_fetch(replica, ctx, 1 << 20)
    return _answer(ctx, served)["responses"][0]["partitions"][0]


def recorder() -> tuple[list[Any], Any]:
    got: list[Any] = []
    return got, lambda err: got.append(None if err is None else err.produce_error)


async def test_a_write_is_acknowledged_when_every_in_sync_follower_has_it(tmp_path: Path) -> None:
    rep, plog, _ = setup(tmp_path)
    end = write(plog, 3)
    got, cb = recorder()
    rep.when_replicated(plog, end, 5.0, cb)
    assert got == [] and rep.high_watermark("t", 0) == 0
    answer = follower_fetch(rep, 2, 0)
    assert answer["error_code"] == 0 and answer["records"]  # the data goes out, nothing acknowledged yet
    follower_fetch(rep, 2, end)  # 2 has it on disk
    assert got == [] and rep.high_watermark("t", 0) == 0  # 3 has not fetched: the ISR is 1, 2, 3
    follower_fetch(rep, 3, end)
    assert got == [None] and rep.high_watermark("t", 0) == end


async def test_nothing_is_acknowledged_while_the_session_is_suspended(tmp_path: Path) -> None:
    rep, plog, _ = setup(tmp_path)
    end = write(plog)
    got, cb = recorder()
    rep.set_suspended(True)
    rep.when_replicated(plog, end, 5.0, cb)
    got1, cb1 = recorder()
    rep.when_replicated(plog, 0, 5.0, cb1)  # acks=1 waits too
    follower_fetch(rep, 2, end)
    follower_fetch(rep, 3, end)
    assert got == [] and got1 == []
    rep.set_suspended(False)
    assert got == [None] and got1 == [None]


async def test_too_few_in_sync_replicas_refuse_before_and_after_the_append(tmp_path: Path) -> None:
    rep, plog, member = setup(tmp_path)
    end = write(plog)
    got, cb = recorder()
    rep.when_replicated(plog, end, 5.0, cb)
    member.state_versions[TP] = 1
    rep.on_view(view(1, (1,), epoch=2))  # the controller took 2 and 3 out (a new leader epoch)
    assert rep.can_acknowledge("t", 0) == ErrorCode.NOT_ENOUGH_REPLICAS
    assert got == [ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND]  # covered by the HW, with an ISR of one
    lenient, plog2, _ = setup(tmp_path / "lenient", min_isr=1)
    lenient.on_view(view(1, (1,), epoch=2))
    assert lenient.can_acknowledge("t", 0) == 0


async def test_a_write_not_replicated_in_time_times_out(tmp_path: Path, autojump_clock: trio.testing.MockClock
                                                        ) -> None:
    rep, plog, _ = setup(tmp_path)
    end = write(plog)
    got, cb = recorder()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(rep._timeout_loop)
        rep.when_replicated(plog, end, 2.0, cb)
        await trio.sleep(1.5)
        assert got == []
        await trio.sleep(1.0)
        assert got == [ErrorCode.REQUEST_TIMED_OUT]
        nursery.cancel_scope.cancel()


async def test_losing_leadership_fails_the_waiting_writes_and_fences_old_epochs(tmp_path: Path) -> None:
    rep, plog, member = setup(tmp_path)
    end = write(plog)
    got, cb = recorder()
    rep.when_replicated(plog, end, 5.0, cb)
    assert follower_fetch(rep, 2, 0, epoch=0)["error_code"] == ErrorCode.FENCED_LEADER_EPOCH
    assert follower_fetch(rep, 2, 0, epoch=2)["error_code"] == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert follower_fetch(rep, 9, 0)["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER  # not a replica
    member.state_versions[TP] = 1
    rep.on_view(view(2, (2, 3), epoch=2))
    assert got == [ErrorCode.NOT_LEADER_OR_FOLLOWER]
    assert rep.following[TP] == (2, 2) and plog.leader_epoch is None
    assert follower_fetch(rep, 3, 0, epoch=2)["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    for fetcher in rep.fetchers.values():
        fetcher.stop()
