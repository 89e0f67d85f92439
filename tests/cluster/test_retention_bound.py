"""Retention in cluster mode deletes no segment above the high watermark (Kafka's ``deletableSegments``):
``Replication.retention_bound`` is a leader's replicated high watermark, a follower's own (the leader's last
reported one, capped at its durable end; its log start before any report), and None for a log the node does
not replicate. Real partition logs, the cluster member replaced by the view it would publish."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replication_fakes import Member  # type: ignore[import-not-found]

from coordinator.cluster.state import BrokerInfo, ClusterView, PartitionState
from coordinator.runtime.replication import Replication, _answer
from coordinator.storage.log import LogConfig, PartitionLog
from protocol.record_batch import build_batch

TP = ("t", 0)
HOUR = 3_600_000
NOW = 100 * HOUR


def view(leader: int) -> ClusterView:
    brokers = {i: BrokerInfo(i, "127.0.0.1", 1) for i in (1, 2, 3)}
    return ClusterView(brokers, 1, 1, {"t": {0: (1, 2, 3)}}, {TP: PartitionState(leader, 1, (1, 2, 3), 1)})


def setup(tmp_path: Path, leader: int) -> tuple[Replication, PartitionLog]:
    plog = PartitionLog.open(str(tmp_path / "t-0"), LogConfig(retention_ms=HOUR))
    rep = Replication({"node.id": 1, "min.insync.replicas": 1, "replica.lag.time.max.ms": 30_000},
                      Member(), lambda t, p: plog if (t, p) == TP else None, lambda: None)  # type: ignore[arg-type]
    rep.on_view(view(leader))
    return rep, plog


def write_old(plog: PartitionLog, n: int) -> int:
    for i in range(n):
        plog.append([build_batch([(b"k", b"v%d" % i, [], NOW - 2 * HOUR)])])
    plog.flush()
    return plog.log_end_offset


def follower_fetch(rep: Replication, replica: int, offset: int) -> dict[str, Any]:
    ctx = rep.sessions.context(replica, 0, -1, [(TP, offset, 1, 1 << 20)], [], rep.logs.__contains__)
    served, _, _ = rep._serve_fetch(replica, ctx, 1 << 20)
    return _answer(ctx, served)["responses"][0]["partitions"][0]


async def test_a_leader_deletes_its_active_segment_only_once_every_in_sync_replica_has_it(tmp_path: Path) -> None:
    rep, plog = setup(tmp_path, leader=1)
    end = write_old(plog, 4)
    assert rep.retention_bound("t", 0) == 0  # no follower has fetched: the high watermark is 0
    assert plog.apply_retention(NOW, rep.retention_bound("t", 0)) == []
    follower_fetch(rep, 2, end)
    assert rep.retention_bound("t", 0) == 0  # replica 3 is in the ISR and has nothing
    follower_fetch(rep, 3, end)
    assert rep.retention_bound("t", 0) == end
    assert plog.apply_retention(NOW, rep.retention_bound("t", 0)) == [0]
    assert (plog.log_start_offset, plog.log_end_offset) == (end, end)
    assert follower_fetch(rep, 2, end)["error_code"] == 0  # followers at the end keep fetching from there
    plog.close()


async def test_a_follower_deletes_below_its_own_high_watermark(tmp_path: Path) -> None:
    rep, plog = setup(tmp_path, leader=2)
    try:
        end = write_old(plog, 5)  # as if fetched from leader 2
        assert rep.retention_bound("t", 0) == 0  # no high watermark reported yet: its log start
        rep.follower_hw[TP] = 3
        assert rep.retention_bound("t", 0) == 3
        assert plog.apply_retention(NOW, rep.retention_bound("t", 0)) == []  # the active segment ends at 5
        rep.follower_hw[TP] = end + 10  # the leader is ahead: capped at this log's durable end
        assert rep.retention_bound("t", 0) == end
        assert plog.apply_retention(NOW, rep.retention_bound("t", 0)) == [0]
        assert (plog.log_start_offset, plog.log_end_offset) == (end, end)
        assert rep.retention_bound("other", 0) is None  # not replicated here: the log's own durable end
    finally:
        for fetcher in rep.fetchers.values():
            fetcher.stop()
        plog.close()
