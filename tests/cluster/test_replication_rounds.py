"""The cheap replication round (issue #35 item 3): what the leader skips when it serves a follower fetch, and
what it must still do (coordinator/runtime/replication.py ``_serve_fetch``, ``_lead``), and the follower's
header walk (coordinator/runtime/replica_fetcher.py ``_brings_new_epoch``).

- The high watermark is recomputed at a fetch only when the follower's durable end moved or the leader's own
  durable end is past it: a leader fsync noted by no one still moves it at the next fetch, and a view that
  shrinks the ISR at the same leader epoch moves it at once (Kafka's ``maybeIncrementLeaderHW`` on an ISR
  change), with no fetch needed.
- A partition of a session that the incremental request does not list still has its follower's fetch noted
  (the caught-up clock that the ISR shrink reads).
- ``_brings_new_epoch`` answers as the batch split it replaces, on whole, partial and malformed input."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from replication_fakes import Member  # type: ignore[import-not-found]

from coordinator.cluster.state import BrokerInfo, ClusterView, PartitionState
from coordinator.runtime import replication as replication_module
from coordinator.runtime.replica_fetcher import _brings_new_epoch
from coordinator.runtime.replication import Replication, _answer
from coordinator.storage.log import PartitionLog
from protocol.record_batch import build_batch, parse_header, split_batches

TP = ("t", 0)


def view(isr: tuple[int, ...], epoch: int = 1) -> ClusterView:
    brokers = {i: BrokerInfo(i, "127.0.0.1", 1) for i in (1, 2, 3)}
    return ClusterView(brokers, 1, 1, {"t": {0: (1, 2, 3)}}, {TP: PartitionState(1, epoch, isr, 1)})


def setup(tmp_path: Path) -> tuple[Replication, PartitionLog, Member]:
    plog = PartitionLog.open(str(tmp_path / "t-0"))
    member = Member()
    rep = Replication({"node.id": 1, "min.insync.replicas": 2, "replica.lag.time.max.ms": 30_000},
                      member, lambda t, p: plog if (t, p) == TP else None, lambda: None)  # type: ignore[arg-type]
    rep.on_view(view((1, 2, 3)))
    return rep, plog, member


def append(plog: PartitionLog, n: int = 1) -> int:
    for _ in range(n):
        plog.append([build_batch([(b"k", b"v", [], 0)])])
    return plog.log_end_offset


def fetch(rep: Replication, replica: int, offset: int) -> None:
    ctx = rep.sessions.context(replica, 0, -1, [(TP, offset, 1, 1 << 20)], [], rep.logs.__contains__)
    _answer(ctx, rep._serve_fetch(replica, ctx, 1 << 20)[0])


def recorder() -> tuple[list[Any], Any]:
    got: list[Any] = []
    return got, lambda err: got.append(None if err is None else err.produce_error)


async def test_a_leader_fsync_noted_by_no_one_moves_the_high_watermark_at_the_next_fetch(tmp_path: Path) -> None:
    rep, plog, _ = setup(tmp_path)
    end = append(plog, 3)  # in the page cache only: the leader's durable end is 0
    fetch(rep, 2, end)
    fetch(rep, 3, end)  # both followers have it on disk; the leader does not yet
    assert rep.high_watermark("t", 0) == 0
    plog.flush()  # the leader's own fsync, reported to no one
    fetch(rep, 2, end)  # the same offsets as before: the followers' ends did not move
    assert rep.high_watermark("t", 0) == end


async def test_a_smaller_isr_at_the_same_epoch_moves_the_high_watermark_at_once(tmp_path: Path) -> None:
    rep, plog, member = setup(tmp_path)
    end = append(plog, 2)
    plog.flush()
    got, cb = recorder()
    rep.when_replicated(plog, end, 5.0, cb)
    fetch(rep, 2, end)
    assert got == [] and rep.high_watermark("t", 0) == 0  # 3 has not fetched it
    member.state_versions[TP] = 1  # a newer state at the same leader epoch: 3 left the ISR
    rep.on_view(view((1, 2)))
    assert got == [None] and rep.high_watermark("t", 0) == end


async def test_an_unlisted_session_partition_still_has_its_fetch_noted(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    rep, plog, _ = setup(tmp_path)
    end = append(plog, 2)
    plog.flush()
    t0 = int(time.time() * 1000) + 60_000  # past the caught-up time the leadership began with
    clock = [t0]
    monkeypatch.setattr(replication_module, "_now_ms", lambda: clock[0])
    ctx = rep.sessions.context(2, 0, 0, [(TP, end, 1, 1 << 20)], [], rep.logs.__contains__)  # opens a session
    assert ctx.session is not None
    _answer(ctx, rep._serve_fetch(2, ctx, 1 << 20)[0])
    progress = rep.leaders[TP].followers[2]
    assert (progress.log_end, progress.last_fetch_ms, progress.caught_up_ms) == (end, t0, t0)
    clock[0] += 5_000
    ctx = rep.sessions.context(2, ctx.session.session_id, 1, [], [], rep.logs.__contains__)  # lists nothing
    assert TP in ctx.parts
    _answer(ctx, rep._serve_fetch(2, ctx, 1 << 20)[0])
    assert (progress.last_fetch_ms, progress.caught_up_ms) == (t0 + 5_000, t0 + 5_000)


def _reference(latest_epoch: int, data: bytes) -> bool:
    """The check ``_brings_new_epoch`` replaced: split the batches, read the last one's header."""
    try:
        batches = split_batches(data)[0]
    except Exception:
        return True
    return bool(batches) and parse_header(batches[-1]).partition_leader_epoch > latest_epoch


def _batch(epoch: int) -> bytes:
    b = bytearray(build_batch([(b"k", b"v", [], 0)]))
    b[12:16] = epoch.to_bytes(4, "big", signed=True)
    return bytes(b)


@pytest.mark.parametrize("data", [
    b"", _batch(0), _batch(3), _batch(0) + _batch(3), _batch(3) + _batch(0), _batch(0) + _batch(3)[:30],
    _batch(3)[:11], _batch(0)[:8] + (5).to_bytes(4, "big") + _batch(0)[12:],  # a length below any batch
    _batch(0)[:16] + b"\x01" + _batch(0)[17:],  # magic 1
])
def test_the_epoch_check_answers_as_the_batch_split(tmp_path: Path, data: bytes) -> None:
    plog = PartitionLog.open(str(tmp_path / "t-0"))
    plog.become_leader(1)  # the log's latest epoch is 1
    latest = plog.epoch_cache().latest_epoch
    assert _brings_new_epoch(plog, data) == _reference(latest, data)
