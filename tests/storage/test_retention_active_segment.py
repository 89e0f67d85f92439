"""Retention deletes the active segment too, as Kafka's ``UnifiedLog.deleteOldSegments`` does.

Rules checked: a non-empty active segment that qualifies (time or size) is rolled and deleted, so log start =
log end = the new empty active segment's base offset, recorded in the checkpoint and kept by a reopen (clean
or not); appends continue at the same offsets; an empty active segment is never deleted; no segment goes
whose upper bound (next base offset, or the log end) is above the high watermark given, nor above the log's
own durable end; appends racing retention keep their offsets."""

from __future__ import annotations

import os
import threading

import pytest

from coordinator.storage.errors import OffsetOutOfRangeError
from coordinator.storage.log import CHECKPOINT_FILE, LogConfig, PartitionLog
from protocol.record_batch import build_batch, iter_records

HOUR = 3_600_000
NOW = 100 * HOUR
OLD = NOW - 2 * HOUR


def record(i: int, ts: int = OLD) -> bytes:
    return build_batch([(b"k%d" % i, b"v%d" % i, [], ts)])


def files(plog: PartitionLog) -> list[str]:
    return sorted(n for n in os.listdir(plog.directory) if n.endswith((".log", ".index")))


def checkpoint(plog: PartitionLog) -> str:
    with open(os.path.join(plog.directory, CHECKPOINT_FILE)) as f:
        return f.read()


def offsets_from(plog: PartitionLog, offset: int) -> list[int]:
    out: list[int] = []
    while offset < plog.high_watermark:
        data = plog.read(offset, 1 << 20)
        if not data:
            break
        out += [r.offset for r in iter_records(data)]
        offset = out[-1] + 1
    return out


def test_an_expired_active_segment_is_rolled_and_deleted_and_appends_continue(tmp_path) -> None:
    cfg = LogConfig(retention_ms=HOUR)
    plog = PartitionLog.open(str(tmp_path / "events-0"), cfg)
    for i in range(5):
        plog.append([record(i)])
    plog.flush()
    assert plog.segment_base_offsets() == [0]
    assert plog.apply_retention(NOW) == [0]
    assert plog.segment_base_offsets() == [5]
    assert (plog.log_start_offset, plog.log_end_offset, plog.high_watermark) == (5, 5, 5)
    assert files(plog) == [f"{5:020d}.log"]  # the old .log and .index are gone
    assert checkpoint(plog) == "1 5 5\n"  # recovery point, log start
    assert plog.read(5, 1 << 20) == b""  # nothing old from the log start
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(0, 1 << 20)
    assert plog.apply_retention(NOW) == []  # the new active segment is empty: nothing to delete
    assert plog.append([record(5, NOW)]) == (5, 5)
    plog.flush()
    assert offsets_from(plog, plog.log_start_offset) == [5]
    plog.close()
    reopened = PartitionLog.open(plog.directory, cfg)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (5, 6)
    assert offsets_from(reopened, 5) == [5]
    reopened.close()


@pytest.mark.parametrize("clean", [True, False], ids=["clean-close", "crash"])
def test_a_reopen_right_after_everything_went_keeps_log_start_at_the_end(tmp_path, clean: bool) -> None:
    cfg = LogConfig(retention_ms=HOUR)
    plog = PartitionLog.open(str(tmp_path / "events-0"), cfg)
    plog.append([build_batch([(None, b"x", [], OLD)] * 3)])
    plog.flush()
    assert plog.apply_retention(NOW) == [0]
    if clean:
        plog.close()  # writes the empty active segment's index: the reopen trusts it
    # else: the files as a crash leaves them (no index for the empty active segment: it is scanned)
    reopened = PartitionLog.open(plog.directory, cfg)
    try:
        assert reopened.segment_base_offsets() == [3]
        assert (reopened.log_start_offset, reopened.log_end_offset, reopened.high_watermark) == (3, 3, 3)
        assert reopened.read(3, 1 << 20) == b""
        assert reopened.append([record(3, NOW)]) == (3, 3)
        reopened.flush()
        assert offsets_from(reopened, 3) == [3]
    finally:
        reopened.close()
        plog.close()


def test_an_empty_active_segment_is_never_deleted(tmp_path) -> None:
    plog = PartitionLog.open(str(tmp_path / "empty-0"), LogConfig(retention_ms=1, retention_bytes=0))
    before = files(plog)
    assert plog.apply_retention(NOW) == []
    assert files(plog) == before and plog.segment_base_offsets() == [0]
    plog.close()


def test_a_fresh_active_segment_stays_while_older_closed_ones_go(tmp_path) -> None:
    plog = PartitionLog.open(str(tmp_path / "mixed-0"), LogConfig(segment_bytes=200, retention_ms=HOUR))
    for i in range(6):
        plog.append([record(i)])
    plog.append([record(6, NOW)])  # the active segment holds a fresh record
    plog.flush()
    bases = plog.segment_base_offsets()
    assert len(bases) > 2
    assert plog.apply_retention(NOW) == bases[:-1]
    assert plog.segment_base_offsets() == bases[-1:]
    plog.close()


def test_no_segment_goes_above_the_high_watermark_given(tmp_path) -> None:
    plog = PartitionLog.open(str(tmp_path / "replicated-0"), LogConfig(segment_bytes=200, retention_ms=HOUR))
    for i in range(8):
        plog.append([record(i)])
    plog.flush()
    bases = plog.segment_base_offsets()
    end = plog.log_end_offset
    assert len(bases) >= 3 and end == 8
    assert plog.apply_retention(NOW, high_watermark=bases[1] - 1) == []  # segment 0's upper bound is bases[1]
    assert plog.apply_retention(NOW, high_watermark=bases[1]) == bases[:1]
    assert plog.apply_retention(NOW, high_watermark=end - 1) == bases[1:-1]  # the active one stays
    assert plog.segment_base_offsets() == bases[-1:] and plog.log_start_offset == bases[-1]
    assert plog.apply_retention(NOW, high_watermark=end) == bases[-1:]  # wholly below: it goes
    assert (plog.log_start_offset, plog.log_end_offset) == (end, end)
    plog.close()


def test_unflushed_data_bounds_retention_whatever_bound_is_given(tmp_path) -> None:
    plog = PartitionLog.open(str(tmp_path / "unflushed-0"), LogConfig(retention_ms=HOUR))
    plog.append([record(0)])
    assert plog.high_watermark == 0
    assert plog.apply_retention(NOW) == []  # single-node mode: the log's own durable end
    assert plog.apply_retention(NOW, high_watermark=10) == []  # a bound is capped at the durable end
    plog.flush()
    assert plog.apply_retention(NOW, high_watermark=10) == [0]
    assert (plog.log_start_offset, plog.log_end_offset) == (1, 1)
    plog.close()


def test_size_retention_deletes_the_active_segment_only_when_all_its_bytes_are_over(tmp_path) -> None:
    path = str(tmp_path / "sized-0")
    plog = PartitionLog.open(path, LogConfig(segment_bytes=200, retention_ms=None, retention_bytes=1))
    for i in range(6):
        plog.append([record(i, NOW)])
    plog.flush()
    bases = plog.segment_base_offsets()
    assert len(bases) >= 2
    active_size = plog.size_bytes()
    # retention.bytes 1: every closed segment goes; the active one would leave 0 < 1 byte: it stays
    assert plog.apply_retention(NOW) == bases[:-1]
    assert plog.segment_base_offsets() == bases[-1:] and 0 < plog.size_bytes() <= active_size
    plog.config = LogConfig(segment_bytes=200, retention_ms=None, retention_bytes=0)
    assert plog.apply_retention(NOW) == bases[-1:]  # the log exceeds 0 bytes by all of the active segment
    assert (plog.log_start_offset, plog.log_end_offset, plog.size_bytes()) == (6, 6, 0)
    assert plog.append([record(6, NOW)]) == (6, 6)
    plog.close()


def test_appends_racing_retention_keep_consecutive_offsets(tmp_path) -> None:
    plog = PartitionLog.open(str(tmp_path / "race-0"), LogConfig(segment_bytes=400, retention_ms=HOUR))
    got: list[tuple[int, int]] = []
    done = threading.Event()

    def appender() -> None:
        try:
            for i in range(300):
                got.append(plog.append([record(i)]))
                if i % 7 == 0:
                    plog.flush()
        finally:
            done.set()

    t = threading.Thread(target=appender)
    t.start()
    deleted = 0
    while not done.is_set():
        deleted += len(plog.apply_retention(NOW))
    t.join()
    plog.flush()
    deleted += len(plog.apply_retention(NOW))
    assert got == [(i, i) for i in range(300)]
    assert deleted > 0 and plog.log_start_offset == plog.log_end_offset == 300
    assert plog.segment_base_offsets() == [300]
    assert plog.append([record(300, NOW)]) == (300, 300)
    plog.close()
