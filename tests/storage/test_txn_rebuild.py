"""scan_producer_states: state rebuilt from a real partition log equals the state built append by append."""

from __future__ import annotations

import random

from coordinator.storage import producer_state
from coordinator.storage.log import LogConfig, PartitionLog
from coordinator.storage.producer_state import ProducerStates, scan_producer_states
from protocol.control_batch import build_marker_batch
from protocol.record_batch import _seal, build_batch, encode_record, parse_header

SMALL = LogConfig(segment_bytes=2_000, index_interval_bytes=300)  # many segments


class Writer:
    """Appends to a log and records each append in an incremental ProducerStates, as Produce and the
    marker writer do (check -> append -> record)."""

    def __init__(self, plog: PartitionLog) -> None:
        self.plog = plog
        self.states = ProducerStates()
        self.seq: dict[int, int] = {}
        self.epoch: dict[int, int] = {}
        self.coordinator_epoch = 0
        self.ts = 1_000

    def data(self, pid: int, transactional: bool, n: int) -> bool:
        self.ts += 1
        batch = build_batch([(b"k", b"v" * 20, (), self.ts)] * n, producer_id=pid,
                            producer_epoch=self.epoch.get(pid, 0) if pid >= 0 else -1,
                            base_sequence=self.seq.get(pid, 0) if pid >= 0 else -1, transactional=transactional)
        h = parse_header(batch)
        if self.states.check(h) is not None:
            return False
        info = self.plog.append([batch])
        self.states.record(h, info.base_offset)
        if pid >= 0:
            self.seq[pid] = self.seq.get(pid, 0) + n
        return True

    def marker(self, pid: int, commit: bool) -> bool:
        self.ts += 1
        epoch = self.epoch.get(pid, 0)
        if self.states.check_marker(pid, epoch, self.coordinator_epoch) is not None:
            return False
        info = self.plog.append([build_marker_batch(pid, epoch, commit, self.coordinator_epoch, self.ts)])
        self.states.record_marker(pid, epoch, self.coordinator_epoch, commit, info.base_offset, self.ts)
        return True

    def bump(self, pid: int) -> None:
        self.epoch[pid] = self.epoch.get(pid, 0) + 1
        self.seq[pid] = 0


def random_run(w: Writer, rng: random.Random, steps: int, pids: int) -> None:
    for _ in range(steps):
        pid = rng.randrange(pids)
        roll = rng.random()
        if roll < 0.35:
            w.data(pid, True, rng.randint(1, 4))
        elif roll < 0.5:
            w.data(pid, False, rng.randint(1, 3))  # refused inside an open transaction
        elif roll < 0.55:
            w.data(-1, False, 2)
        elif roll < 0.8:
            w.marker(pid, rng.random() < 0.5)  # sometimes empty
        elif roll < 0.85:
            w.coordinator_epoch += 1
        elif roll < 0.9:
            w.marker(pid, False)
            w.bump(pid)  # the coordinator fenced it: new epoch, sequence 0
        else:
            w.data(pid, w.states.has_open_txn(pid), 1)


def probes(states: ProducerStates, pids: int) -> list[object]:
    """Answers that depend on every part of the state: kept batches, epochs, open transactions."""
    out: list[object] = []
    for p in states.producers():
        for txn in (False, True):
            for seq in range(max(0, p.last_sequence - 12), p.last_sequence + 3):
                h = parse_header(build_batch([(b"k", b"v", (), 0)] * 2, producer_id=p.producer_id,
                                             producer_epoch=p.producer_epoch, base_sequence=seq,
                                             transactional=txn))
                out.append(states.check(h))
    for pid in range(pids):
        out.append((states.has_open_txn(pid), states.check_marker(pid, 0, 0), states.check_marker(pid, 9, 0)))
    return out


def assert_same(rebuilt: ProducerStates, incremental: ProducerStates, plog: PartitionLog, pids: int) -> None:
    hw = plog.high_watermark
    assert rebuilt.producers() == incremental.producers()
    assert rebuilt.open_transactions() == incremental.open_transactions()
    assert rebuilt.aborted_transactions() == incremental.aborted_transactions()
    assert rebuilt.first_unstable_offset() == incremental.first_unstable_offset()
    assert rebuilt.last_stable_offset(hw) == incremental.last_stable_offset(hw)
    end = plog.log_end_offset
    for fetch in range(0, end, 7):
        assert rebuilt.aborted_between(fetch, end) == incremental.aborted_between(fetch, end)
    assert probes(rebuilt, pids) == probes(incremental, pids)


def rebuilt_from(plog: PartitionLog) -> ProducerStates:
    states = ProducerStates()
    scan_producer_states(plog, states)
    return states


def test_rebuild_equals_incremental_state(tmp_path) -> None:
    for seed in range(12):
        plog = PartitionLog.open(str(tmp_path / f"t-{seed}"), SMALL)
        try:
            w, rng = Writer(plog), random.Random(seed)
            random_run(w, rng, 120, 4)
            assert len(plog.segment_base_offsets()) > 3
            assert w.states.aborted_transactions(), "the run must abort something"
            assert_same(rebuilt_from(plog), w.states, plog, 4)  # nothing durable yet: hw 0
            plog.flush()
            random_run(w, rng, 60, 4)  # markers above the high watermark hold the LSO back
            assert_same(rebuilt_from(plog), w.states, plog, 4)
            plog.flush()
            assert_same(rebuilt_from(plog), w.states, plog, 4)
        finally:
            plog.close()


def test_rebuild_after_a_restart(tmp_path) -> None:
    path = str(tmp_path / "t-0")
    plog = PartitionLog.open(path, SMALL)
    w = Writer(plog)
    random_run(w, random.Random(99), 150, 3)
    plog.flush()
    plog.close()
    reopened = PartitionLog.open(path, SMALL)
    try:
        assert_same(rebuilt_from(reopened), w.states, reopened, 3)
    finally:
        reopened.close()


def test_rebuild_with_evictions_equals_incremental_state(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(producer_state, "MAX_PRODUCERS", 3)
    for seed in range(6):
        plog = PartitionLog.open(str(tmp_path / f"t-{seed}"), SMALL)
        try:
            w = Writer(plog)
            random_run(w, random.Random(100 + seed), 120, 7)
            plog.flush()
            assert len(w.states) >= 3
            assert_same(rebuilt_from(plog), w.states, plog, 7)
        finally:
            plog.close()


def test_an_open_transaction_far_back_is_found(tmp_path) -> None:
    plog = PartitionLog.open(str(tmp_path / "t"), SMALL)
    try:
        w = Writer(plog)
        assert w.data(1, True, 1)
        for _ in range(300):  # ~ 60 segments of other producers' data
            assert w.data(2, False, 3)
        assert w.data(3, True, 1) and w.marker(3, False)
        plog.flush()
        rebuilt = rebuilt_from(plog)
        assert rebuilt.first_unstable_offset() == 0 and rebuilt.has_open_txn(1)
        assert rebuilt.last_stable_offset(plog.high_watermark) == 0
        assert rebuilt.aborted_transactions()[0].last_stable_offset == 0
        assert_same(rebuilt, w.states, plog, 4)
    finally:
        plog.close()


def test_a_corrupt_marker_stops_the_replay(tmp_path) -> None:
    """A control batch whose record is not a marker (a valid CRC over garbage) ends what the scan trusts."""
    plog = PartitionLog.open(str(tmp_path / "t"), SMALL)
    try:
        w = Writer(plog)
        assert w.data(1, True, 2)
        expected = rebuilt_from(plog)
        bad = _seal(encode_record(0, 0, b"\x00", b"\x00"), 0, -1, 0x30, 0, 0, 0, 1, 0, -1, 1)  # 1-byte key
        plog.append([bad])
        assert w.data(2, True, 2)
        assert w.marker(1, False)
        rebuilt = rebuilt_from(plog)
        assert rebuilt.producers() == expected.producers()
        assert rebuilt.open_transactions() == expected.open_transactions()
        assert [t.producer_id for t in rebuilt.open_transactions()] == [1]
        assert rebuilt.aborted_transactions() == []
    finally:
        plog.close()
