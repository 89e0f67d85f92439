"""Offsets-partition compaction with transactions (coordinator/storage/compaction.py): its conservative rule.

Stories: transactional offset commits (committed, aborted, or still waiting for their marker) and their
markers are kept verbatim, byte for byte; an aborted transactional record never makes the older committed
record of its key go, nor does a committed one (the group core replays them at load); a tombstone of a key a
transactional record holds is kept past delete.retention.ms (dropping it would let that record come back at
replay), while a tombstone of a key no transactional record holds goes; non-transactional records are compacted
as before."""

from __future__ import annotations

from coordinator.storage.compaction import compact
from coordinator.storage.log import LogConfig, PartitionLog
from protocol.control_batch import build_marker_batch
from protocol.record_batch import build_batch, decode_batch, parse_header, split_batches

HOUR = 3_600_000
NOW = 100 * HOUR
OLD = NOW - 10 * HOUR


def offsets_log(tmp_path) -> PartitionLog:
    cfg = LogConfig(segment_bytes=300, compact=True, delete_retention_ms=HOUR)
    return PartitionLog.open(str(tmp_path / "__consumer_offsets-3"), cfg)


def plain(key: bytes, value: bytes | None, ts: int = OLD) -> bytes:
    return build_batch([(key, value, [], ts)])


def txn(pid: int, seq: int, *kvs: tuple[bytes, bytes | None]) -> bytes:
    return build_batch([(k, v, [], OLD) for k, v in kvs], transactional=True, producer_id=pid, producer_epoch=0,
                       base_sequence=seq)


def batches(plog: PartitionLog) -> list[bytes]:
    out, offset = [], plog.log_start_offset
    for _ in range(10_000):
        data = plog.read(offset, 1 << 20)
        if not data:
            break
        got = [bytes(b) for b in split_batches(data)[0]]
        out += [b for b in got if parse_header(b).next_offset > offset]
        offset = parse_header(got[-1]).next_offset
    return out


def records(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for b in batches(plog):
        if not parse_header(b).is_control:
            out += [(r.offset, r.key, r.value) for r in decode_batch(b)[1]]
    return out


def test_transactional_batches_and_markers_stay_verbatim_and_never_count_as_latest(tmp_path):
    plog = offsets_log(tmp_path)
    plog.append([plain(b"g1-t-0", b"committed-1")])                       # 0
    plog.append([plain(b"g1-t-1", b"committed-2")])                       # 1
    plog.append([txn(7, 0, (b"g1-t-0", b"aborted"))])                     # 2: aborted below
    plog.append([build_marker_batch(7, 0, False, 0, OLD)])                # 3
    plog.append([txn(8, 0, (b"g1-t-1", b"txn-committed"))])               # 4: committed below
    plog.append([build_marker_batch(8, 0, True, 0, OLD)])                 # 5
    plog.append([txn(9, 0, (b"g1-t-2", b"pending"))])                     # 6: its marker has not come
    plog.append([plain(b"g1-t-3", b"v1")])                                # 7: superseded by 8
    plog.append([plain(b"g1-t-3", b"v2")])                                # 8
    for i in range(8):
        plog.append([plain(b"filler-%d" % i, b"x", NOW)])
    plog.flush()
    txn_bytes = [b for b in batches(plog) if parse_header(b).is_transactional]
    assert len(txn_bytes) == 5
    res = compact(plog, NOW)
    assert res.records_removed >= 1
    assert [b for b in batches(plog) if parse_header(b).is_transactional] == txn_bytes  # byte for byte
    recs = records(plog)
    # neither the aborted nor the committed transactional record made the older plain commit go
    assert (0, b"g1-t-0", b"committed-1") in recs and (1, b"g1-t-1", b"committed-2") in recs
    assert (7, b"g1-t-3", b"v1") not in recs and (8, b"g1-t-3", b"v2") in recs
    plog.close()


def test_a_tombstone_of_a_key_a_transactional_record_holds_is_kept(tmp_path):
    plog = offsets_log(tmp_path)
    plog.append([txn(7, 0, (b"g1-t-0", b"pending"))])        # 0: waits for its marker
    plog.append([plain(b"g1-t-0", None)])                     # 1: an old tombstone of that key: kept
    plog.append([plain(b"g1-t-1", b"v")])                     # 2
    plog.append([plain(b"g1-t-1", None)])                     # 3: an old tombstone of a plain key: goes
    for i in range(8):
        plog.append([plain(b"filler-%d" % i, b"x", NOW)])
    plog.flush()
    compact(plog, NOW)
    recs = records(plog)
    assert (0, b"g1-t-0", b"pending") in recs
    assert (1, b"g1-t-0", None) in recs
    assert not [r for r in recs if r[1] == b"g1-t-1"]
    plog.close()
