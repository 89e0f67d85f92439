"""The cleaner of compacted user topics (coordinator/storage/cleaner.py) and the topic config store.

Stories: twenty keys updated fifty times keep only their latest values at their original offsets; a
tombstone survives its first pass (its batch gains a delete horizon) and goes after delete.retention.ms;
keyless records go; a key map too small for the dirty section cleans in several passes without losing a
latest value; a pass interrupted after some segments were swapped (a crash) loses nothing; retention never
deletes from a compact-only log; the store writes atomically and names a garbage file."""

from __future__ import annotations

import os
import threading
import time

import pytest

from coordinator.storage import cleaner
from coordinator.storage.errors import StorageError
from coordinator.storage.log import LogConfig, PartitionLog
from coordinator.storage.topic_config_store import FileTopicConfigStore
from protocol.record_batch import DELETE_HORIZON_MASK, build_batch, iter_records, parse_header, split_batches

HOUR = 3_600_000
NOW = 1_000 * HOUR


def compacted(tmp_path, **kw) -> PartitionLog:
    cfg = LogConfig(segment_bytes=kw.pop("segment_bytes", 2048), compact=True, delete=False, retention_ms=None,
                    delete_retention_ms=kw.pop("delete_retention_ms", HOUR), **kw)
    return PartitionLog.open(str(tmp_path / "t-0"), cfg)


def records(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    out, offset = [], plog.log_start_offset
    for _ in range(100_000):
        data = plog.read(offset, 1 << 20)
        if not data:
            break
        recs = list(iter_records(data))
        out += [(r.offset, r.key, r.value) for r in recs if r.offset >= offset]
        offset = parse_header(split_batches(data)[0][-1]).next_offset
    return out


def produce_updates(plog: PartitionLog, keys: int, rounds: int) -> dict[bytes, bytes]:
    latest = {}
    for r in range(rounds):
        for k in range(keys):
            key, value = b"key-%02d" % k, b"value-%d" % r
            plog.append([build_batch([(key, value, [], NOW - HOUR)])])
            latest[key] = value
    plog.flush()
    return latest


def latest_of(recs: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes | None, bytes | None]:
    out = {}
    for _, k, v in recs:
        out[k] = v
    return out


def test_twenty_keys_updated_fifty_times_keep_their_latest_values_and_offsets(tmp_path):
    plog = compacted(tmp_path)
    latest = produce_updates(plog, 20, 50)
    before = records(plog)
    assert cleaner.due(plog, NOW) and cleaner.dirty_ratio(plog, NOW) == 1.0
    res = cleaner.clean(plog, NOW, 1 << 20)
    after = records(plog)
    assert res.records_removed > 0 and len(after) < len(before) // 5
    assert latest_of(after) == latest
    offsets = [o for o, _, _ in after]
    assert offsets == sorted(set(offsets))
    assert set(after) <= set(before)  # every kept record is an original one at its original offset
    assert not cleaner.due(plog, NOW)  # nothing dirty any more
    assert cleaner.read_state(plog).first_dirty == plog.segment_base_offsets()[-1]
    plog.close()
    reopened = PartitionLog.open(plog.directory, plog.config)
    assert records(reopened) == after
    reopened.close()


def test_a_tombstone_gets_a_delete_horizon_then_goes_after_delete_retention(tmp_path):
    plog = compacted(tmp_path, delete_retention_ms=HOUR)
    produce_updates(plog, 5, 3)
    plog.append([build_batch([(b"key-01", None, [], NOW - HOUR)])])
    produce_updates(plog, 5, 40)  # more traffic, then the tombstone's key is not written again
    plog.append([build_batch([(b"key-01", None, [], NOW - HOUR)])])
    for i in range(60):
        plog.append([build_batch([(b"other-%d" % i, b"x", [], NOW - HOUR)])])
    plog.flush()
    cleaner.clean(plog, NOW, 1 << 20)
    tomb = [r for r in records(plog) if r[1] == b"key-01"]
    assert len(tomb) == 1 and tomb[0][2] is None  # kept on the first pass
    stamped = [parse_header(b) for b in split_batches(plog.read(tomb[0][0], 1 << 20))[0][:1]]
    assert stamped[0].attributes & DELETE_HORIZON_MASK and stamped[0].base_timestamp == NOW + HOUR
    assert cleaner.read_state(plog).next_horizon == NOW + HOUR
    assert not cleaner.due(plog, NOW + HOUR - 1)
    assert cleaner.due(plog, NOW + HOUR)  # the horizon passing makes the log due
    cleaner.clean(plog, NOW + HOUR, 1 << 20)
    assert [r for r in records(plog) if r[1] == b"key-01"] == []
    assert latest_of(records(plog))[b"key-02"] == b"value-39"


def test_keyless_records_are_dropped_by_the_cleaner(tmp_path):
    plog = compacted(tmp_path)
    plog.append([build_batch([(None, b"no key", [], NOW), (b"k", b"v", [], NOW)])])
    produce_updates(plog, 20, 10)
    cleaner.clean(plog, NOW, 1 << 20)
    assert all(k is not None for _, k, _ in records(plog))


def test_a_small_key_map_cleans_in_several_passes_without_losing_a_latest_value(tmp_path):
    plog = compacted(tmp_path, segment_bytes=1024)
    latest = produce_updates(plog, 20, 30)
    small = 8 * cleaner.ENTRY_BYTES  # eight keys per pass
    passes = 0
    for _ in range(200):
        passes += 1
        res = cleaner.clean(plog, NOW, small)
        assert res.map_entries <= 8
        assert latest_of(records(plog)) == latest
        if not cleaner.due(plog, NOW):
            break
    assert passes > 1
    assert len(records(plog)) < 20 * 30 // 3


def test_a_pass_interrupted_between_segment_swaps_loses_no_latest_value(tmp_path, monkeypatch):
    plog = compacted(tmp_path)
    latest = produce_updates(plog, 20, 50)
    swaps = []
    real_swap = cleaner.swap_in_cleaned

    def crash_after_two(*args):
        if len(swaps) == 2:
            raise KeyboardInterrupt("simulated crash")
        swaps.append(args[1].base_offset)
        real_swap(*args)

    monkeypatch.setattr(cleaner, "swap_in_cleaned", crash_after_two)
    with pytest.raises(KeyboardInterrupt):
        cleaner.clean(plog, NOW, 1 << 20)
    assert cleaner.read_state(plog).first_dirty == 0  # the checkpoint is written last
    directory, cfg = plog.directory, plog.config
    plog._close_fds()  # as a crash would: no clean close, a .cleaned file left behind
    assert any(n.endswith(".cleaned") for n in os.listdir(directory))
    reopened = PartitionLog.open(directory, cfg)
    assert not any(n.endswith(".cleaned") for n in os.listdir(directory))
    assert latest_of(records(reopened)) == latest
    monkeypatch.setattr(cleaner, "swap_in_cleaned", real_swap)
    cleaner.clean(reopened, NOW, 1 << 20)
    assert latest_of(records(reopened)) == latest
    reopened.close()


def test_min_compaction_lag_keeps_young_segments_out_of_the_pass(tmp_path):
    plog = compacted(tmp_path, min_compaction_lag_ms=2 * HOUR)
    produce_updates(plog, 20, 20)  # written at NOW - 1 h: too young
    assert cleaner.dirty_ratio(plog, NOW) == 0.0 and not cleaner.due(plog, NOW)
    assert cleaner.clean(plog, NOW, 1 << 20).records_removed == 0
    assert cleaner.due(plog, NOW + 2 * HOUR)


def test_retention_never_deletes_from_a_compact_only_log(tmp_path):
    plog = compacted(tmp_path, retention_bytes=None)
    produce_updates(plog, 20, 20)
    plog.config = LogConfig(segment_bytes=2048, compact=True, delete=False, retention_ms=1, retention_bytes=1)
    assert plog.apply_retention(NOW + 100 * HOUR) == []
    plog.config = LogConfig(segment_bytes=2048, compact=True, delete=True, retention_ms=1)
    assert plog.apply_retention(NOW + 100 * HOUR) != []  # compact,delete: retention applies too


def test_topic_config_store_round_trip_and_garbage_is_named(tmp_path):
    store = FileTopicConfigStore(str(tmp_path))
    assert store.load_all() == {}
    store.save("orders", {"cleanup.policy": "compact"})
    store.save("a.b-c", {"retention.ms": "5"})
    assert FileTopicConfigStore(str(tmp_path)).load_all() == {"orders": {"cleanup.policy": "compact"},
                                                              "a.b-c": {"retention.ms": "5"}}
    assert not any(n.endswith(".tmp") for n in os.listdir(store.directory))
    store.remove("a.b-c")
    assert list(store.load_all()) == ["orders"]
    with open(store.path("orders"), "w") as f:
        f.write("{not json")
    with pytest.raises(StorageError, match=r"orders\.json"):
        store.load_all()


def test_closing_the_log_stops_a_pass_at_the_next_batch(tmp_path, monkeypatch):
    # A topic deleted (its log closed, on the trio thread) during a pass: close() takes the cleaner lock, so
    # without the stop it would wait for the whole pass. The pass is held after 5 batches until close() has
    # begun; then it must stop at once (one more batch at most), leave no .cleaned file, and lose nothing.
    plog = compacted(tmp_path)
    latest = produce_updates(plog, 20, 50)
    total = sum(1 for _ in records(plog))
    yielded = []
    real_iter = cleaner._iter_batches

    def held(p, seg, size):
        for batch in real_iter(p, seg, size):
            yielded.append(1)
            if len(yielded) == 5:
                deadline = time.monotonic() + 10
                while not p.closing and time.monotonic() < deadline:
                    time.sleep(0.001)
            yield batch

    monkeypatch.setattr(cleaner, "_iter_batches", held)
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            cleaner.clean(plog, NOW, 1 << 20)
            outcome.append(None)
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            outcome.append(e)

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 10
    while len(yielded) < 5 and time.monotonic() < deadline:
        time.sleep(0.001)
    plog.close()
    t.join(10)
    assert not t.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], cleaner.CleaningAborted), outcome
    assert len(yielded) <= 6 < total  # stopped at the batch after close() began, not at the pass's end
    assert not any(n.endswith(".cleaned") for n in os.listdir(plog.directory))
    monkeypatch.setattr(cleaner, "_iter_batches", real_iter)
    reopened = PartitionLog.open(plog.directory, plog.config)
    assert latest_of(records(reopened)) == latest
    reopened.close()
