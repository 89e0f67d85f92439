"""The cheap replication round (issue #35 item 3): what the leader skips when it serves a follower fetch, and
what it must still do (coordinator/runtime/replication.py ``_serve_fetch``, ``_lead``), and the follower's
header walk (coordinator/runtime/replica_fetcher.py ``_brings_new_epoch``).

- The high watermark is recomputed at a fetch only when the follower's durable end moved or the leader's own
  durable end is past it: a leader fsync noted by no one still moves it at the next fetch, and a view that
  shrinks the ISR at the same leader epoch moves it at once (Kafka's ``maybeIncrementLeaderHW`` on an ISR
  change), with no fetch needed.
- A partition of a session that the incremental request does not list still has its follower's fetch noted
  (the caught-up clock that the ISR shrink reads).
- A session partition where nothing moved is passed over (no answer entry, no progress call), and the fetch
  still counts as caught up: noted before the partition is next served (a write wakes the waiting fetch) and
  at the ISR check. So a partition idle for longer than ``replica.lag.time.max.ms`` does not lose its
  followers from the ISR when a write comes, while a follower that stops fetching still leaves it.
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


class _Clock:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ms = int(time.time() * 1000) + 60_000  # past the caught-up time the leadership began with
        monkeypatch.setattr(replication_module, "_now_ms", lambda: self.ms)


def _settled(tmp_path: Path) -> tuple[Replication, PartitionLog, dict[int, Any]]:
    """Leader 1 of TP with ISR (1, 2, 3); both followers fetched everything in a session each: the high
    watermark is the log end and was answered to both. Returns the sessions' fetch contexts by replica."""
    rep, plog, _ = setup(tmp_path)
    end = append(plog, 2)
    plog.flush()
    ctxs = {}
    for r in (2, 3):
        ctxs[r] = rep.sessions.context(r, 0, 0, [(TP, end, 1, 1 << 20)], [], rep.logs.__contains__)
        _answer(ctxs[r], rep._serve_fetch(r, ctxs[r], 1 << 20, arrival=True)[0])
    for r in (2, 3):  # the high watermark moved at 3's fetch: 2 learns it at its next one
        ctxs[r] = _incremental(rep, ctxs[r])
        _answer(ctxs[r], rep._serve_fetch(r, ctxs[r], 1 << 20, arrival=True)[0])
    assert rep.high_watermark("t", 0) == end
    return rep, plog, ctxs


def _incremental(rep: Replication, ctx: Any, listed: list[Any] | None = None) -> Any:
    session = ctx.session
    return rep.sessions.context(session.replica, session.session_id, session.epoch, listed or [], [],
                                rep.logs.__contains__)


async def test_an_idle_session_partition_is_passed_over_and_its_fetch_still_counts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock(monkeypatch)
    rep, plog, ctxs = _settled(tmp_path)
    progress = rep.leaders[TP].followers[2]
    noted = progress.last_fetch_ms
    clock.ms += 5_000
    ctxs[2] = _incremental(rep, ctxs[2])
    served, size, error = rep._serve_fetch(2, ctxs[2], 1 << 20, arrival=True)
    assert (served, size, error) == ([], 0, False)  # passed over: nothing to answer
    assert progress.last_fetch_ms == noted and ctxs[2].parts[TP].skipped
    rep._settle_idle(TP, rep.leaders[TP])  # the ISR check notes it
    assert (progress.last_fetch_ms, progress.caught_up_ms) == (clock.ms, clock.ms)
    assert not ctxs[2].parts[TP].skipped


async def test_a_partition_idle_past_the_lag_limit_keeps_its_followers_when_a_write_comes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock(monkeypatch)
    rep, plog, ctxs = _settled(tmp_path)
    st = rep.leaders[TP]
    for _ in range(130):  # 65 s of fetches every 500 ms with nothing new: each passed over
        clock.ms += 500
        for r in (2, 3):
            ctxs[r] = _incremental(rep, ctxs[r])
            assert rep._serve_fetch(r, ctxs[r], 1 << 20, arrival=True)[0] == []
    # a write comes; 2's waiting fetch is served again (records now) and 3 has not fetched since: the ISR
    # check right after must see both caught up at their last fetch, 1 ms ago
    clock.ms += 1
    end = append(plog)
    news = rep._with_news(ctxs[2])
    served = rep._serve_fetch(2, ctxs[2], 1 << 20, news)[0]
    assert [tp for tp, _, res in served if res["records"]] == [TP]
    rep._settle_idle(TP, st)
    assert st.isr_change(end, clock.ms, 30_000) is None
    assert {r: st.followers[r].caught_up_ms for r in (2, 3)} == {2: clock.ms - 1, 3: clock.ms - 1}


async def test_a_follower_that_stops_fetching_still_leaves_the_isr(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock(monkeypatch)
    rep, plog, ctxs = _settled(tmp_path)
    st = rep.leaders[TP]
    clock.ms += 500
    for r in (2, 3):  # one idle fetch each, passed over; then 3 stops
        ctxs[r] = _incremental(rep, ctxs[r])
        rep._serve_fetch(r, ctxs[r], 1 << 20, arrival=True)
    last = clock.ms
    end = append(plog)
    plog.flush()
    for _ in range(70):  # 2 goes on fetching (and has everything) for 35 s
        clock.ms += 500
        ctxs[2] = _incremental(rep, ctxs[2], [(TP, end, 1, 1 << 20)])
        _answer(ctxs[2], rep._serve_fetch(2, ctxs[2], 1 << 20, arrival=True)[0])
    rep._settle_idle(TP, st)
    assert st.followers[3].caught_up_ms == last
    assert st.isr_change(end, clock.ms, 30_000) == (1, 2)


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
