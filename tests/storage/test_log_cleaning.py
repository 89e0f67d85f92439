"""Compaction, retention, ListOffsets helpers, trusted reopen, and the LogManager."""

from __future__ import annotations

import os

import pytest

from coordinator.storage.compaction import compact
from coordinator.storage.errors import OffsetOutOfRangeError, StorageError
from coordinator.storage.fs import FileSystem
from coordinator.storage.log import LogConfig, PartitionLog
from coordinator.storage.manager import LogManager
from protocol.record_batch import Compression, build_batch, iter_records

HOUR = 3_600_000


def keyed(key: bytes, value: bytes | None, ts: int) -> bytes:
    return build_batch([(key, value, [], ts)])


def all_records(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    out, offset = [], plog.log_start_offset
    while offset < plog.high_watermark:
        data = plog.read(offset, 1 << 20)
        if not data:
            break
        recs = list(iter_records(data))
        out += [(r.offset, r.key, r.value) for r in recs]
        offset = recs[-1].offset + 1 if recs else offset + 1
    return out


def test_compaction_keeps_the_latest_record_per_key_and_expired_tombstones_go(tmp_path):
    cfg = LogConfig(segment_bytes=300, compact=True, delete_retention_ms=HOUR)
    plog = PartitionLog.open(str(tmp_path / "__consumer_offsets-7"), cfg)
    now = 100 * HOUR
    plog.append([keyed(b"g1", b"a", now - 10 * HOUR)])            # 0: superseded by 6
    plog.append([keyed(b"g2", b"b", now - 10 * HOUR)])            # 1: superseded by tombstone 4
    plog.append([build_batch([(b"g3", b"c", [], now - 9 * HOUR),   # 2: latest for g3 (kept)
                              (b"g1", b"x", [], now - 9 * HOUR)])])  # 3: superseded by 6
    plog.append([keyed(b"g2", None, now - 8 * HOUR)])             # 4: tombstone older than 1 h: dropped
    plog.append([keyed(b"g4", None, now - 1)])                    # 5: fresh tombstone: kept
    plog.append([keyed(b"g1", b"latest", now)])                   # 6: latest for g1
    for i in range(6):
        plog.append([keyed(b"filler", b"%d" % i, now)])           # 7..12: roll segments
    plog.flush()
    assert len(plog.segment_base_offsets()) >= 3
    result = compact(plog, now)
    kept = all_records(plog)
    assert [(o, k, v) for o, k, v in kept if k != b"filler"] == [
        (2, b"g3", b"c"), (5, b"g4", None), (6, b"g1", b"latest")]
    assert [o for o, k, _ in kept if k == b"filler"][-1] == 12
    assert result.records_removed == 13 - len(kept) and result.bytes_after < result.bytes_before
    assert plog.append([keyed(b"g9", b"z", now)]) == (13, 13)
    plog.close()
    reopened = PartitionLog.open(plog.directory, cfg)
    assert all_records(reopened) == kept + [(13, b"g9", b"z")]


def test_compaction_rebuilds_gzip_batches_and_keeps_offsets(tmp_path):
    cfg = LogConfig(segment_bytes=200, compact=True)
    plog = PartitionLog.open(str(tmp_path / "c-0"), cfg)
    plog.append([build_batch([(b"a", b"1" * 50, [], 10), (b"b", b"2" * 50, [], 11), (b"a", b"3" * 50, [], 12)],
                             compression=Compression.GZIP)])
    plog.append([keyed(b"b", b"new", 20)])
    plog.append([keyed(b"c", b"x", 30)])
    plog.flush()
    compact(plog, 40)
    assert all_records(plog) == [(2, b"a", b"3" * 50), (3, b"b", b"new"), (4, b"c", b"x")]
    first = plog.read(0, 1)
    assert first[22] & 0x07 == Compression.GZIP  # attributes low byte keeps the codec


def test_time_retention_deletes_old_closed_segments_and_advances_log_start(tmp_path):
    cfg = LogConfig(segment_bytes=250, retention_ms=HOUR)
    plog = PartitionLog.open(str(tmp_path / "events-0"), cfg)
    now = 10 * HOUR
    for i in range(12):
        ts = now - 3 * HOUR if i < 6 else now
        plog.append([build_batch([(None, b"e%d" % i, [], ts)])])
    plog.flush()
    bases = plog.segment_base_offsets()
    deleted = plog.apply_retention(now)
    assert deleted == bases[:len(deleted)] and all(b < 6 for b in deleted)  # oldest first, only the old
    assert plog.log_start_offset == plog.segment_base_offsets()[0] > 0
    assert not os.path.exists(os.path.join(plog.directory, f"{deleted[0]:020d}.log"))
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(0, 100)
    assert plog.earliest_offset() == plog.log_start_offset
    remaining = plog.segment_base_offsets()
    # all old: the active segment goes too (Kafka's rule), after a roll to an empty one at the log end
    assert plog.apply_retention(now + 100 * HOUR) == remaining
    assert plog.segment_base_offsets() == [12] and plog.log_start_offset == plog.log_end_offset == 12
    plog.close()
    assert PartitionLog.open(plog.directory, cfg).log_start_offset == 12


def test_size_retention_keeps_the_newest_bytes(tmp_path):
    cfg = LogConfig(segment_bytes=250, retention_ms=None, retention_bytes=600)
    plog = PartitionLog.open(str(tmp_path / "s-0"), cfg)
    for i in range(20):
        plog.append([build_batch([(None, b"e%d" % i, [], 0)])])
    plog.flush()
    plog.apply_retention(0)
    assert 600 - 250 <= plog.size_bytes() <= 600 + 250
    assert all_records(plog)[-1][0] == 19


def test_list_offsets_helpers(tmp_path):
    plog = PartitionLog.open(str(tmp_path / "t-0"), LogConfig(segment_bytes=250))
    for i in range(10):
        plog.append([build_batch([(None, b"a", [], 1000 + 10 * i), (None, b"b", [], 1005 + 10 * i)])])
    plog.flush()
    assert (plog.earliest_offset(), plog.latest_offset()) == (0, 20)
    assert plog.offset_for_timestamp(0) == (0, 1000)
    assert plog.offset_for_timestamp(1031) == (7, 1035)  # first record with timestamp >= 1031
    assert plog.offset_for_timestamp(1040) == (8, 1040)
    assert plog.offset_for_timestamp(2000) is None


class CountingFS(FileSystem):
    def __init__(self) -> None:
        self.bytes_read = 0

    def pread(self, fd, size, offset):
        data = super().pread(fd, size, offset)
        self.bytes_read += len(data)
        return data


def test_reopen_after_clean_close_reads_only_index_files(tmp_path):
    cfg = LogConfig(segment_bytes=4000)
    plog = PartitionLog.open(str(tmp_path / "t-0"), cfg)
    for i in range(200):
        plog.append([build_batch([(None, b"x" * 40, [], i)])])
    plog.close()
    total = sum(os.path.getsize(os.path.join(plog.directory, n)) for n in os.listdir(plog.directory)
                if n.endswith(".log"))
    fs = CountingFS()
    reopened = PartitionLog.open(plog.directory, cfg, fs)
    assert reopened.log_end_offset == 200
    assert fs.bytes_read < 1000  # index files and the checkpoint, not the `total` bytes of the log
    assert total > 5 * 4000  # so reading everything would have been at least 20000 bytes


def test_log_manager_opens_creates_and_deletes_partitions(tmp_path):
    data = tmp_path / "data"
    mgr = LogManager(str(data))
    a = mgr.create("orders", 0)
    mgr.create("my-topic.v2", 3).append([build_batch([(None, b"x", [], 0)])])
    a.append([build_batch([(None, b"y", [], 0)])])
    mgr.close()
    (data / "not a partition").mkdir()
    mgr = LogManager(str(data))
    assert mgr.partitions() == [("my-topic.v2", 3), ("orders", 0)]
    assert mgr.get("orders", 0).log_end_offset == 1
    mgr.delete("orders", 0)
    assert mgr.partitions() == [("my-topic.v2", 3)] and not (data / "orders-0").exists()
    with pytest.raises(StorageError, match="invalid topic name"):
        mgr.create("../escape", 0)
    mgr.close()


def test_unwritable_data_dir_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    with pytest.raises(StorageError, match=f"data dir {blocker}/data is not writable: "):
        LogManager(str(blocker / "data"))
