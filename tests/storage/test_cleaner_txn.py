"""The user-topic cleaner with transactions (coordinator/storage/cleaner.py; Kafka's LogCleaner rules).

Stories: an aborted record never makes an older committed record of its key go, and aborted records go
whatever their key; nothing at or past the LSO is touched, so an open transaction's records survive; a marker
stays while its transaction has a batch in the log, gets a delete horizon once none has, and goes after
delete.retention.ms; a live producer's last batch survives as an empty batch keeping its offsets and sequence
(and goes once the producer is not live); the runtime's producer states and a rebuild from the log give the
same pass; a generated log of interleaved transactions, cleaned pass after pass, keeps every key's latest
committed value, no aborted record, the same open transactions on rebuild, and only markers that still have
data (or wait for their horizon)."""

from __future__ import annotations

import random

from coordinator.storage import cleaner
from coordinator.storage.log import LogConfig, PartitionLog
from coordinator.storage.producer_state import ProducerStates, scan_producer_states
from protocol.control_batch import build_marker_batch, parse_marker
from protocol.record_batch import (
    DELETE_HORIZON_MASK,
    BatchHeader,
    build_batch,
    decode_batch,
    parse_header,
    split_batches,
)

HOUR = 3_600_000
NOW = 1_000 * HOUR
TS = NOW - HOUR
BUF = 1 << 20


def compacted(tmp_path, name: str = "t-0", segment_bytes: int = 300) -> PartitionLog:
    cfg = LogConfig(segment_bytes=segment_bytes, compact=True, delete=False, retention_ms=None,
                    delete_retention_ms=HOUR)
    return PartitionLog.open(str(tmp_path / name), cfg)


class Writer:
    """Appends to one log, keeping each producer id's sequence."""

    def __init__(self, plog: PartitionLog) -> None:
        self.plog = plog
        self.seq: dict[int, int] = {}

    def plain(self, *kvs: tuple[bytes, bytes | None]) -> int:
        return self.plog.append([build_batch([(k, v, [], TS) for k, v in kvs])]).base_offset

    def produce(self, pid: int, *kvs: tuple[bytes, bytes | None], txn: bool = True, epoch: int = 0) -> int:
        seq = self.seq.get(pid, 0)
        self.seq[pid] = seq + len(kvs)
        batch = build_batch([(k, v, [], TS) for k, v in kvs], transactional=txn, producer_id=pid,
                            producer_epoch=epoch, base_sequence=seq)
        return self.plog.append([batch]).base_offset

    def marker(self, pid: int, commit: bool, epoch: int = 0) -> int:
        return self.plog.append([build_marker_batch(pid, epoch, commit, 0, TS)]).base_offset

    def fillers(self, n: int, tag: str = "f") -> None:
        for i in range(n):
            self.plain((f"{tag}-{i}".encode(), b"x" * 40))
        self.plog.flush()


def batches(plog: PartitionLog) -> list[tuple[BatchHeader, bytes]]:
    """Every batch of the log (header, bytes), in order."""
    out, offset = [], plog.log_start_offset
    for _ in range(100_000):
        data = plog.read(offset, 1 << 20)
        if not data:
            break
        got = [(parse_header(b), bytes(b)) for b in split_batches(data)[0]]
        out += [(h, b) for h, b in got if h.next_offset > offset]
        offset = got[-1][0].next_offset
    return out


def data_records(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for h, b in batches(plog):
        if not h.is_control:
            out += [(r.offset, r.key, r.value) for r in decode_batch(b)[1]]
    return out


def values(plog: PartitionLog) -> list[bytes | None]:
    return [v for _, _, v in data_records(plog)]


def latest(recs: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes | None, bytes | None]:
    out = {}
    for _, k, v in recs:
        out[k] = v
    return out


def markers(plog: PartitionLog) -> dict[int, BatchHeader]:
    return {h.base_offset: h for h, _ in batches(plog) if h.is_control}


def rebuilt(plog: PartitionLog) -> ProducerStates:
    states = ProducerStates()
    scan_producer_states(plog, states)
    return states


# ---------------------------------------------------------------------------------------------------------


def test_an_aborted_record_never_makes_an_older_committed_one_go_and_aborted_records_go(tmp_path):
    plog = compacted(tmp_path)
    w = Writer(plog)
    w.plain((b"A", b"committed-A"))
    w.produce(7, (b"B", b"committed-B"))
    w.marker(7, True)
    w.produce(8, (b"A", b"aborted-A"), (b"B", b"aborted-B"), (b"C", b"aborted-C"))
    w.produce(8, (b"A", None))  # an aborted tombstone must not delete A either
    w.marker(8, False)
    w.produce(8, (b"D", b"committed-D"))  # pid 8 goes on: its aborted batches are not its last any more
    w.marker(8, True)
    w.fillers(20)
    res = cleaner.clean(plog, NOW, BUF)
    assert res.records_removed >= 4
    recs = data_records(plog)
    got = latest(recs)
    assert got[b"A"] == b"committed-A" and got[b"B"] == b"committed-B" and got[b"D"] == b"committed-D"
    assert b"C" not in got
    assert not [v for v in values(plog) if v is not None and v.startswith(b"aborted")]
    assert all(k != b"A" or v is not None for _, k, v in recs)  # the aborted tombstone went too
    plog.close()


def test_the_same_pass_from_the_runtime_producer_states_or_from_a_scan(tmp_path):
    out = []
    for name, from_states in (("a-0", True), ("b-0", False)):
        plog = compacted(tmp_path, name)
        w = Writer(plog)
        w.plain((b"A", b"v1"))
        w.produce(3, (b"A", b"aborted"))
        w.marker(3, False)
        w.produce(3, (b"A", b"v2"))
        w.marker(3, True)
        w.plain((b"A", b"v3"))
        w.fillers(15)
        txns = cleaner.transactions_of(rebuilt(plog), plog.high_watermark) if from_states else None
        if from_states:
            assert [(t.producer_id, t.first_offset) for t in txns.aborted] == [(3, 1)]
            assert txns.live_producers == {3}
        cleaner.clean(plog, NOW, BUF, txns)
        out.append([(h.base_offset, h.record_count, h.attributes, b[61:]) for h, b in batches(plog)])
        assert latest(data_records(plog))[b"A"] == b"v3"
        assert b"aborted" not in values(plog)
        plog.close()
    assert out[0] == out[1]


def test_nothing_at_or_past_the_lso_is_cleaned_and_an_open_transaction_survives(tmp_path):
    plog = compacted(tmp_path)
    w = Writer(plog)
    w.plain((b"A", b"old"))
    w.plain((b"A", b"new"))
    w.produce(4, (b"B", b"committed-then"))
    w.marker(4, True)
    w.fillers(6, "low")
    lso = w.produce(9, (b"A", b"open-1"), (b"B", b"open-2"))  # pid 9's transaction stays open
    w.plain((b"A", b"after"))  # decided, but past the LSO: must not make "new" go
    w.plain((b"B", b"after"))
    w.produce(4, (b"B", b"aborted-later"))
    w.marker(4, False)  # decided past the LSO: its batch stays until the LSO moves
    w.plain((b"K", b"1"))
    w.plain((b"K", b"2"))
    w.plain((b"x", None))  # a tombstone past the LSO gets no horizon
    w.fillers(20, "high")
    states = rebuilt(plog)
    txns = cleaner.transactions_of(states, plog.high_watermark)
    assert txns.last_stable_offset == lso
    tail = [(h, b) for h, b in batches(plog) if h.base_offset >= lso]
    res = cleaner.clean(plog, NOW, BUF, txns)
    assert res.upper_bound == lso and res.end_offset <= lso and res.records_removed >= 1
    assert [(h, b) for h, b in batches(plog) if h.base_offset >= lso] == tail  # byte for byte
    recs = data_records(plog)
    assert (0, b"A", b"old") not in recs and (1, b"A", b"new") in recs
    assert b"open-1" in values(plog) and b"open-2" in values(plog) and b"aborted-later" in values(plog)
    assert [t.first_offset for t in rebuilt(plog).open_transactions()] == [lso]
    # held by the open transaction: not due, and a pass finds nothing to do (the runtime puts it aside)
    assert not cleaner.due(plog, NOW, lso)
    again = cleaner.clean(plog, NOW, BUF, txns)
    assert again.segments_rewritten == 0 and again.end_offset == again.first_dirty
    # the transaction commits: the LSO moves and the rest is cleaned
    w.marker(9, True)
    w.fillers(20, "more")
    res = cleaner.clean(plog, NOW, BUF)
    assert res.upper_bound > lso
    got = latest(data_records(plog))
    assert got[b"A"] == b"after" and got[b"B"] == b"after" and got[b"K"] == b"2"
    assert b"aborted-later" not in values(plog)
    plog.close()


def test_a_marker_stays_while_its_data_does_then_gets_a_horizon_then_goes(tmp_path):
    plog = compacted(tmp_path)
    w = Writer(plog)
    abort_at = (w.produce(5, (b"A", b"aborted")), w.marker(5, False))[1]
    c1 = (w.produce(5, (b"C", b"c1")), w.marker(5, True))[1]  # C is overwritten below: its data goes
    c2 = (w.produce(5, (b"D", b"d1")), w.marker(5, True))[1]  # D is not: its marker stays
    w.plain((b"C", b"c2"))
    w.produce(5, (b"E", b"e1"), txn=False)  # pid 5's last batch (non-transactional, after the markers)
    w.fillers(20)
    first = cleaner.clean(plog, NOW, BUF)
    m = markers(plog)
    assert set(m) == {abort_at, c1, c2}  # kept this pass: none may go before its horizon
    for offset in (abort_at, c1):  # data gone: a horizon now + delete.retention.ms, like a tombstone
        assert m[offset].attributes & DELETE_HORIZON_MASK and m[offset].base_timestamp == NOW + HOUR
        assert parse_marker(dict(batches(plog))[m[offset]] if False else
                            next(b for h, b in batches(plog) if h.base_offset == offset)) is not None
    assert not m[c2].attributes & DELETE_HORIZON_MASK  # its data (D) is still there
    assert first.markers_removed == 0
    assert cleaner.read_state(plog).next_horizon == NOW + HOUR
    assert not cleaner.due(plog, NOW + HOUR - 1) and cleaner.due(plog, NOW + HOUR)
    cleaner.clean(plog, NOW + HOUR - 1, BUF)
    assert set(markers(plog)) == {abort_at, c1, c2}
    last = cleaner.clean(plog, NOW + HOUR, BUF)
    assert set(markers(plog)) == {c2} and last.markers_removed == 2
    assert cleaner.read_state(plog).next_horizon == -1  # nothing left to wait for: not due again by time
    got = latest(data_records(plog))
    assert got == {**{k: v for k, v in got.items() if k.startswith(b"f-")}, b"C": b"c2", b"D": b"d1", b"E": b"e1"}
    assert not rebuilt(plog).open_transactions()
    plog.close()


def test_a_live_producers_last_batch_survives_empty_with_its_offsets_and_sequence(tmp_path):
    plog = compacted(tmp_path)
    w = Writer(plog)
    w.produce(11, (b"x", b"0"), txn=False)  # seq 0
    last11 = w.produce(11, (b"K1", b"a"), (b"K2", b"b"), (b"K3", b"c"), txn=False)  # seq 1-3, all overwritten
    part12 = w.produce(12, (b"K4", b"a"), (b"K5", b"b"), txn=False)  # K4 overwritten, K5 kept
    w.seq[12] = 10
    aborted13 = w.produce(13, (b"K6", b"aborted"))
    w.marker(13, False)
    w.plain((b"K1", b"z"), (b"K2", b"z"), (b"K3", b"z"), (b"K4", b"z"))
    w.fillers(20)
    res = cleaner.clean(plog, NOW, BUF)
    assert res.empty_batches == 2
    by_offset = {h.base_offset: (h, b) for h, b in batches(plog)}
    h, b = by_offset[last11]
    assert (h.record_count, h.last_offset_delta, h.producer_id, h.producer_epoch, h.base_sequence) == (0, 2, 11, 0, 1)
    assert decode_batch(b)[1] == []  # a valid empty batch (CRC checked)
    h, b = by_offset[part12]
    assert (h.record_count, h.last_offset_delta, h.base_sequence) == (1, 1, 0)
    assert [(r.offset, r.key) for r in decode_batch(b)[1]] == [(part12 + 1, b"K5")]
    h, _ = by_offset[aborted13]  # aborted, but pid 13's last batch: kept empty, so its marker stays too
    assert h.record_count == 0 and h.is_transactional
    assert not rebuilt(plog).open_transactions()
    assert {p.producer_id: p.producer_epoch for p in rebuilt(plog).producers()} == {11: 0, 12: 0, 13: 0}
    assert b"aborted" not in values(plog)
    # producer ids 11 and 13 expired (the runtime no longer lists them): their last batches go
    txns = cleaner.transactions_of(rebuilt(plog), plog.high_watermark)
    cleaner.clean(plog, NOW, BUF, cleaner.Transactions(txns.last_stable_offset, txns.aborted, frozenset({12})))
    by_offset = {h.base_offset: h for h, _ in batches(plog)}
    assert last11 not in by_offset and aborted13 not in by_offset and part12 in by_offset
    plog.close()


def test_a_producers_last_entry_of_a_newer_epoch_is_its_marker_and_it_stays(tmp_path):
    plog = compacted(tmp_path)
    w = Writer(plog)
    w.produce(21, (b"A", b"aborted"))
    bump = w.marker(21, False, epoch=1)  # an abort that also fenced epoch 0 (a timeout): pid 21's last entry
    w.fillers(20)
    for now in (NOW, NOW + 2 * HOUR, NOW + 4 * HOUR):
        cleaner.clean(plog, now, BUF)
    assert bump in markers(plog)
    assert {p.producer_id: p.producer_epoch for p in rebuilt(plog).producers()} == {21: 1}
    assert b"aborted" not in values(plog)
    assert cleaner.read_state(plog).next_horizon == -1
    plog.close()


def _generate(plog: PartitionLog, rng: random.Random, steps: int) -> tuple[set[bytes], int | None]:
    """Interleaved transactions of four producer ids with plain writes; returns the aborted values and the
    first offset of the transaction left open (None: all decided)."""
    w = Writer(plog)
    open_txn: dict[int, list[bytes]] = {}
    aborted: set[bytes] = set()
    for n in range(steps):
        pid = rng.randrange(1, 5)
        roll = rng.random()
        key = b"k%d" % rng.randrange(12)
        value = None if rng.random() < 0.1 else b"%d-%d" % (pid, n)
        if roll < 0.25:
            w.plain((key, value))
        elif roll < 0.7 or pid not in open_txn:
            w.produce(pid, (key, value), (b"k%d" % rng.randrange(12), b"%d-%d-b" % (pid, n)))
            open_txn.setdefault(pid, []).extend([value or b"", b"%d-%d-b" % (pid, n)])
        else:
            commit = rng.random() < 0.5
            w.marker(pid, commit)
            if not commit:
                aborted.update(open_txn[pid])
            del open_txn[pid]
    left_open = None
    for pid in sorted(open_txn):
        if pid == 4 and left_open is None:
            left_open = min(h.base_offset for h, _ in batches(plog) if h.producer_id == 4 and not h.is_control
                            and h.base_offset > max([o for o, m in markers(plog).items() if m.producer_id == 4],
                                                    default=-1))
            continue
        w.marker(pid, True)
    w.fillers(30)
    aborted.discard(b"")
    return aborted, left_open


def test_generated_transactional_logs_cleaned_pass_after_pass(tmp_path):
    for seed in range(6):
        plog = compacted(tmp_path, f"g{seed}-0", segment_bytes=500)
        rng = random.Random(seed)
        aborted, left_open = _generate(plog, rng, 150)
        before_states = rebuilt(plog)
        lso = before_states.last_stable_offset(plog.high_watermark)
        assert lso == (left_open if left_open is not None else plog.high_watermark)
        aborted_ranges = [(t.producer_id, t.first_offset, t.last_offset) for t in before_states.aborted_transactions()]
        # the read_committed view below the LSO, before cleaning: every key's latest non-aborted record
        expected = {}
        for h, b in batches(plog):
            if h.is_control or h.base_offset >= lso:
                continue
            if h.is_transactional and any(p == h.producer_id and f <= h.base_offset <= last
                                          for p, f, last in aborted_ranges):
                continue
            for r in decode_batch(b)[1]:
                expected[r.key] = r.value
        snapshot = batches(plog)
        ends = []
        for i in range(5):  # time moves on by half a horizon a pass
            res = cleaner.clean(plog, NOW + i * HOUR // 2, BUF,
                                cleaner.transactions_of(rebuilt(plog), plog.high_watermark))
            ends.append(res.end_offset)
        end = min(ends)  # below it every pass cleaned; the segment holding the LSO is never touched
        assert 0 < end <= lso, seed
        after = batches(plog)
        assert [(h, b) for h, b in after if h.base_offset >= end] == \
            [(h, b) for h, b in snapshot if h.base_offset >= end], seed
        # a read_committed reader (drops what the rebuilt aborted index lists) sees every key's latest value
        ranges = [(t.producer_id, t.first_offset, t.last_offset) for t in rebuilt(plog).aborted_transactions()]
        got = {}
        for h, b in after:
            if h.is_control or h.base_offset >= lso:
                continue
            dropped = h.is_transactional and any(p == h.producer_id and f <= h.base_offset <= last
                                                 for p, f, last in ranges)
            for r in decode_batch(b)[1]:
                if r.offset < end:  # cleaned: no aborted record is left at all
                    assert r.value not in aborted and not dropped, (seed, r)
                if not dropped:
                    got[r.key] = r.value
        # tombstones may have gone (their horizon passed): a gone key reads as deleted
        assert {k: v for k, v in got.items() if v is not None} == {k: v for k, v in expected.items()
                                                                   if v is not None}, seed
        states = rebuilt(plog)
        assert [(t.producer_id, t.first_offset) for t in states.open_transactions()] == \
            [(t.producer_id, t.first_offset) for t in before_states.open_transactions()], seed
        assert states.last_stable_offset(plog.high_watermark) == lso, seed
        assert {p.producer_id: p.producer_epoch for p in states.producers()} == \
            {p.producer_id: p.producer_epoch for p in before_states.producers()}, seed
        # every marker left below the LSO still has a batch of its transaction before it, or waits for its horizon
        pending: dict[int, bool] = {}
        for h, _ in after:
            if h.base_offset >= end:
                break
            if h.is_control:
                has_data = pending.pop(h.producer_id, False)
                assert has_data or (h.attributes & DELETE_HORIZON_MASK and h.base_timestamp > NOW + 2 * HOUR), seed
            elif h.is_transactional:
                pending[h.producer_id] = True
        plog.close()
