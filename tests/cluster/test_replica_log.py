"""The partition log's replication parts (coordinator/storage/log.py, leader_epochs.py) on a real data dir: a
leader stamps its epoch, a follower appends the leader's bytes verbatim (checked), truncation cuts whole
batches durably, and the leader-epoch cache answers OffsetForLeaderEpoch and survives a reopen."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.storage.leader_epochs import UNDEFINED, LeaderEpochCache
from coordinator.storage.log import PartitionLog
from protocol.record_batch import CorruptBatchError, build_batch, parse_header, split_batches


def batch(*values: bytes) -> bytes:
    return build_batch([(b"k", v, [], 1_000) for v in values])


def all_bytes(plog: PartitionLog) -> bytes:
    return plog.read(plog.log_start_offset, 1 << 30, upper_bound=plog.log_end_offset)


def test_a_leader_stamps_its_epoch_and_records_where_it_began(tmp_path: Path) -> None:
    plog = PartitionLog.open(str(tmp_path / "t-0"))
    plog.append([batch(b"a", b"b")])  # single-node style: the producer's epoch (-1) is kept
    plog.become_leader(3)
    plog.append([batch(b"c")])
    plog.append_own(batch(b"d"), 1, 1_000)
    plog.flush()
    epochs = [parse_header(b).partition_leader_epoch for b in split_batches(all_bytes(plog))[0]]
    assert epochs == [-1, 3, 3]
    assert plog.epoch_cache().entries() == [(3, 2)]
    plog.close()
    again = PartitionLog.open(str(tmp_path / "t-0"))
    assert again.epoch_cache().entries() == [(3, 2)]  # from leader-epoch-checkpoint
    again.close()


def test_a_follower_appends_the_leaders_batches_verbatim(tmp_path: Path) -> None:
    leader = PartitionLog.open(str(tmp_path / "leader" / "t-0"))
    leader.become_leader(0)
    leader.append([batch(b"a", b"b")])
    leader.become_leader(2)
    leader.append([batch(b"c")])
    leader.flush()
    follower = PartitionLog.open(str(tmp_path / "follower" / "t-0"))
    data = all_bytes(leader)
    info = follower.append_as_follower(data + data[:20])  # a cut trailing batch is ignored
    assert info is not None and (info.base_offset, info.last_offset) == (0, 2)
    follower.flush()
    assert all_bytes(follower) == data
    assert follower.epoch_cache().entries() == [(0, 0), (2, 2)]
    assert follower.append_as_follower(data[:20]) is None


def test_a_follower_refuses_a_gap_an_overlap_or_a_bad_crc(tmp_path: Path) -> None:
    leader = PartitionLog.open(str(tmp_path / "leader" / "t-0"))
    leader.append([batch(b"a"), batch(b"b"), batch(b"c")])
    leader.flush()
    batches = [bytes(b) for b in split_batches(all_bytes(leader))[0]]
    follower = PartitionLog.open(str(tmp_path / "follower" / "t-0"))
    with pytest.raises(CorruptBatchError):
        follower.append_as_follower(batches[1])  # starts at 1, the log ends at 0
    with pytest.raises(CorruptBatchError):
        follower.append_as_follower(batches[0] + batches[2])  # not contiguous
    damaged = bytearray(batches[0])
    damaged[-1] ^= 1
    with pytest.raises(CorruptBatchError):
        follower.append_as_follower(bytes(damaged))
    assert follower.log_end_offset == 0  # nothing of any of them was appended
    follower.append_as_follower(batches[0])
    with pytest.raises(CorruptBatchError):
        follower.append_as_follower(batches[0])  # again: overlaps
    assert follower.log_end_offset == 1


def test_truncation_cuts_whole_batches_durably_and_forgets_later_epochs(tmp_path: Path) -> None:
    d = str(tmp_path / "t-0")
    plog = PartitionLog.open(d)
    plog.become_leader(1)
    plog.append([batch(b"a", b"b")])  # offsets 0-1
    plog.become_leader(4)
    plog.append([batch(b"c", b"d")])  # 2-3
    plog.append([batch(b"e")])  # 4
    plog.flush()
    keep = all_bytes(plog)[:len(split_batches(all_bytes(plog))[0][0])]
    assert plog.truncate_to(3) == 2  # 3 is inside the batch 2-3: the whole batch goes
    assert plog.log_end_offset == plog.high_watermark == 2
    assert all_bytes(plog) == keep
    assert plog.epoch_cache().entries() == [(1, 0)]
    assert plog.truncate_to(10) == 2  # past the end: nothing to cut
    plog.append([batch(b"f")])  # appends go on at the cut
    assert plog.log_end_offset == 3
    plog.close()
    again = PartitionLog.open(d)
    assert again.log_end_offset == 3
    assert again.epoch_cache().entries() == [(1, 0)]
    again.close()


def test_truncation_across_segments_deletes_the_later_ones(tmp_path: Path) -> None:
    from coordinator.storage.log import LogConfig

    d = tmp_path / "t-0"
    plog = PartitionLog.open(str(d), LogConfig(segment_bytes=200))
    for i in range(10):
        plog.append([batch(b"x" * 80 + bytes([i]))])
    plog.flush()
    assert len(plog.segment_base_offsets()) > 3
    assert plog.truncate_to(2) == 2
    assert plog.segment_base_offsets()[-1] <= 2
    assert sorted(p.name for p in d.glob("*.log"))[-1] <= f"{2:020d}.log"
    plog.close()
    reopened = PartitionLog.open(str(d))
    assert reopened.log_end_offset == 2
    reopened.close()


def test_the_epoch_cache_answers_offset_for_leader_epoch() -> None:
    cache = LeaderEpochCache([(1, 0), (3, 10), (6, 25)])
    assert cache.end_offset_for(0, 40) == UNDEFINED  # older than every epoch known
    assert cache.end_offset_for(1, 40) == (1, 10)
    assert cache.end_offset_for(2, 40) == (1, 10)  # unknown epoch: the largest one below it
    assert cache.end_offset_for(3, 40) == (3, 25)
    assert cache.end_offset_for(6, 40) == (6, 40)  # the latest: the log end
    assert cache.end_offset_for(9, 40) == (6, 40)
    assert LeaderEpochCache().end_offset_for(1, 5) == UNDEFINED
    assert not cache.assign(5, 30) and cache.entries()[-1] == (6, 25)  # epochs only grow
    assert cache.assign(7, 25) and cache.entries() == [(1, 0), (3, 10), (7, 25)]  # epoch 6 wrote nothing
    assert LeaderEpochCache.decode(cache.encode()).entries() == cache.entries()  # type: ignore[union-attr]
    assert LeaderEpochCache.decode(b"0\n2\n1 0\n") is None  # damaged: a count it does not hold
    assert LeaderEpochCache.decode(b"0\n2\n3 0\n1 5\n") is None  # not increasing


def test_a_follower_of_a_compacted_log_keeps_the_leaders_gaps(tmp_path: Path) -> None:
    from coordinator.storage.log import LogConfig

    compacted = LogConfig(compact=True)
    leader = PartitionLog.open(str(tmp_path / "leader" / "t-0"), compacted)
    leader.append([batch(b"a"), batch(b"b"), batch(b"c")])
    leader.flush()
    batches = [bytes(b) for b in split_batches(all_bytes(leader))[0]]
    follower = PartitionLog.open(str(tmp_path / "follower" / "t-0"), compacted)
    follower.append_as_follower(batches[0])
    info = follower.append_as_follower(batches[2])  # offset 1 was cleaned away on the leader
    assert info is not None and (info.base_offset, follower.log_end_offset) == (2, 3)
    assert [parse_header(b).base_offset for b in split_batches(all_bytes(follower))[0]] == [0, 2]
    plain = PartitionLog.open(str(tmp_path / "plain" / "t-0"))
    plain.append_as_follower(batches[0])
    with pytest.raises(CorruptBatchError):
        plain.append_as_follower(batches[2])  # a log that is not compacted has no gaps


def test_a_follower_behind_the_leaders_log_start_restarts_there(tmp_path: Path) -> None:
    d = str(tmp_path / "t-0")
    plog = PartitionLog.open(d)
    plog.become_leader(2)
    plog.append([batch(b"old"), batch(b"older")])
    plog.restart_at(40)
    assert (plog.log_start_offset, plog.log_end_offset, plog.high_watermark) == (40, 40, 40)
    assert plog.epoch_cache().entries() == []
    leader = PartitionLog.open(str(tmp_path / "leader" / "t-0"))
    leader.append([batch(b"x")])
    moved = bytearray(split_batches(all_bytes(leader))[0][0])
    moved[0:8] = (40).to_bytes(8, "big")  # base offset: outside the CRC
    plog.append_as_follower(bytes(moved))
    plog.close()
    again = PartitionLog.open(d)
    assert (again.log_start_offset, again.log_end_offset) == (40, 41)
    again.close()
