"""Offset history (issue #37 item 4) in the sans-IO core: coordinator/core/offset_history.py.

- A commit that changes a partition's offset (or its generation or committer) writes one history record in the
  same write, right after the offset record; a repeated commit of the same offset by the same member writes none;
  an admin's anonymous commit is recorded with its client id and host.
- offsets.history.size bounds the entries per partition (slots; a lowered size tombstones the slots past it;
  0 writes none); a reload of the log, record by record, through the bulk replay and compacted to the latest record
  per key, shows the same history; a failed write keeps no entry.
- The hot path (commit_one / commit_settled) writes the same records and leaves the same state as the generic one.
- DeleteGroups, OffsetDelete and the offsets expiry tombstone the history with the offsets.
- DescribeGroups v5+ carries it in our tagged field when our request tag asks (on the wire too; not below v5).
- Memory: <= 64 B per kept commit at size 16 (tracemalloc).
"""

from __future__ import annotations

import tracemalloc

import pytest
from core_harness import COMMIT, DELETE, DESCRIBE, Harness  # type: ignore[import-not-found]

from coordinator.core.config import GroupConfig
from coordinator.core.coordinator import Coordinator
from coordinator.core.errors import Err
from coordinator.core.offset_history import (
    Entry,
    OffsetHistory,
    OffsetHistoryRecordError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    is_offset_history_key,
)
from coordinator.core.offsets import PendingCommit
from coordinator.core.records import RecordError, encode_offset_key
from protocol import codec

G = "ohist"
T = "orders"
OFFSET_DELETE = 47


def hist_records(log: list) -> list:
    return [r for r in log if is_offset_history_key(r[1])]


def compacted(log: list) -> list[tuple[int, bytes, bytes | None]]:
    latest: dict[tuple[int, bytes], tuple[int, tuple[int, bytes, bytes | None]]] = {}
    for i, r in enumerate(log):
        latest[(r[0], r[1])] = (i, r)
    return [r for _, r in sorted(latest.values(), key=lambda x: x[0]) if r[2] is not None]


def reload(h: Harness, log: list, *, bulk: bool = False, size: int | None = None) -> Coordinator:
    cfg = GroupConfig(offsets_topic_num_partitions=h.cfg.offsets_topic_num_partitions,
                      offsets_history_size=h.cfg.offsets_history_size if size is None else size)
    coord = Coordinator(cfg)
    skipped: list = []
    for shard in range(cfg.offsets_topic_num_partitions):
        coord.begin_loading(shard)
        mine = [(k, v) for s, k, v in log if s == shard]
        if bulk:
            coord.replay_many(shard, mine, lambda key, e: skipped.append(e))
        else:
            for k, v in mine:
                coord.replay(shard, k, v)
        coord.finish_loading(shard, h.now)
    assert not skipped
    return coord


def entries(coord: Coordinator, group: str = G) -> dict:
    return coord._env.shard_of(group).offset_history.entries(group)


def anonymous_commit(h: Harness, offsets: dict, client_id: str = "groupcoord-admin") -> object:
    topics: dict[str, list] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                             "committed_leader_epoch": -1, "committed_metadata": ""})
    return h.send(COMMIT, 8, {"group_id": G, "generation_id_or_member_epoch": -1, "member_id": "",
                              "group_instance_id": None, "retention_time_ms": -1,
                              "topics": [{"name": t, "partitions": p} for t, p in topics.items()]}, "reset", client_id)


def test_codec_round_trips_and_bad_records_are_record_errors() -> None:
    key = encode_key("g", "t", 7, 3)
    assert key[:2] == b"\x03\xea" and decode_key(key) == ("g", ("t", 7), 3)
    assert key == b"\x03\xea" + encode_offset_key("g", "t", 7)[2:] + b"\x00\x00\x00\x03"
    e = Entry(5, 1234, 1_700_000_000_000, 3, "m-1", "client-1", "/10.0.0.1")
    assert decode_value(encode_value(e)) == (5, 1234, 1_700_000_000_000, 3, ("m-1", "client-1", "/10.0.0.1"))
    value = encode_value(e)
    for bad in (value[:-1], value + b"\x00", b"\x00\x01" + value[2:], value[:10]):
        with pytest.raises(OffsetHistoryRecordError):
            decode_value(bad)
    assert issubclass(OffsetHistoryRecordError, RecordError)
    with pytest.raises(OffsetHistoryRecordError):
        decode_key(b"\x03\xea\x00")
    history = OffsetHistory()
    with pytest.raises(OffsetHistoryRecordError):
        history.replay(key, value[:-1])
    assert not history.rings  # a bad value changes nothing


def test_commits_are_recorded_with_who_and_repeats_are_not() -> None:
    h = Harness(offsets_history_size=16)
    gen, members = h.stable_group(G, 1)
    m = members[0]
    h.now = 1_000
    h.commit(G, gen, m, {(T, 0): 10, (T, 1): 20})
    writes = [r for r in h.log if r[1][:2] in (b"\x00\x01", b"\x03\xea")]
    # each offset record is followed by its history record, in the same write
    assert [r[1][:2] for r in writes[-4:]] == [b"\x00\x01", b"\x03\xea", b"\x00\x01", b"\x03\xea"]
    h.now = 2_000
    h.commit(G, gen, m, {(T, 0): 10})  # same offset, same member: nothing new
    h.now = 3_000
    h.commit(G, gen, m, {(T, 0): 15})
    h.leave(G, m)  # an admin resets an Empty group's offsets
    h.now = 4_000
    assert h[anonymous_commit(h, {(T, 0): 10}, "groupcoord-reset-offsets/ops")]["topics"][0]["partitions"][0][
        "error_code"] == 0
    kept = entries(h.coord)
    assert [(e.offset, e.commit_ms) for e in kept[(T, 0)]] == [(10, 4_000), (15, 3_000), (10, 1_000)]
    newest, _, first = kept[(T, 0)]
    assert (newest.generation, newest.member_id, newest.client_id, newest.client_host) == (
        -1, "", "groupcoord-reset-offsets/ops", "/127.0.0.1")
    assert (first.generation, first.member_id, first.client_id) == (gen, m, "client")
    assert [e.seq for e in kept[(T, 0)]] == [2, 1, 0] and [e.offset for e in kept[(T, 1)]] == [20]
    assert len(hist_records(h.log)) == 4


def test_size_bounds_reload_compaction_and_a_lowered_size() -> None:
    h = Harness(offsets_history_size=3)
    for i in range(5):
        h.now = 1_000 * (i + 1)
        anonymous_commit(h, {(T, 0): 100 + i})
    want = [(4, 104), (3, 103), (2, 102)]
    assert [(e.seq, e.offset) for e in entries(h.coord)[(T, 0)]] == want
    assert len({r[1] for r in hist_records(h.log)}) == 3  # three slots: compaction keeps three
    for coord in (reload(h, h.log), reload(h, h.log, bulk=True), reload(h, compacted(h.log)),
                  reload(h, compacted(h.log), bulk=True)):
        assert entries(coord) == entries(h.coord)
    # the seq continues after a reload; a lowered size tombstones the slots past it with the next entry
    again = Harness(offsets_history_size=2)
    again.coord = reload(h, compacted(h.log), size=2)
    again.log = list(compacted(h.log))
    again.now = 9_000
    anonymous_commit(again, {(T, 0): 200})
    tail = again.log[-3:]
    assert tail[1][1] == encode_key(G, T, 0, 5 % 2) and tail[2] == (tail[2][0], encode_key(G, T, 0, 2), None)
    # seq 5 takes slot 1 (seq 4's), slot 0 keeps seq 3: at most ``size`` entries, the newest of each slot
    assert [(e.seq, e.offset) for e in entries(again.coord)[(T, 0)]] == [(5, 200), (3, 103)]
    assert entries(reload(again, compacted(again.log), size=2)) == entries(again.coord)


def test_size_zero_writes_nothing_and_a_failed_write_keeps_nothing() -> None:
    h = Harness(offsets_history_size=0)
    anonymous_commit(h, {(T, 0): 1})
    assert not hist_records(h.log) and not entries(h.coord)
    h = Harness(offsets_history_size=4)
    h.fail_next_write = int(Err.NOT_COORDINATOR)
    anonymous_commit(h, {(T, 0): 1})
    assert not entries(h.coord)
    anonymous_commit(h, {(T, 0): 2})
    assert [(e.seq, e.offset) for e in entries(h.coord)[(T, 0)]] == [(1, 2)]  # seq 0 was the failed write's


def test_hot_path_writes_and_keeps_what_the_generic_path_does() -> None:
    generic, hot = Harness(offsets_history_size=4), Harness(offsets_history_size=4)
    for i, offset in enumerate((5, 5, 6, 9, 9, 12, 13)):
        generic.now = hot.now = 1_000 * (i + 1)
        anonymous_commit(generic, {(T, 3): offset}, "c")
        pc = hot.coord.commit_offset(hot.now, 8, G, -1, "", None, T, 3, offset, -1, "", -1, "c", "/127.0.0.1")
        assert isinstance(pc, PendingCommit)
        hot.log.append((pc.shard_id, pc.key, pc.value))
        hot.log.extend((pc.shard_id, k, v) for k, v in (pc.history.records if pc.history else ()))
        hot.coord.commit_settled(pc, durable=True)
    assert [r[1:] for r in hot.log] == [r[1:] for r in generic.log if r[1][:2] in (b"\x00\x01", b"\x03\xea")]
    assert entries(hot.coord) == entries(generic.coord) and len(entries(hot.coord)[(T, 3)]) == 4
    assert entries(reload(hot, hot.log)) == entries(hot.coord)


def test_delete_groups_offset_delete_and_expiry_tombstone_the_history() -> None:
    h = Harness(offsets_history_size=4)
    for i in range(3):
        anonymous_commit(h, {(T, 0): i, (T, 1): 10 + i})
    before = len(h.log)
    token = h.send(OFFSET_DELETE, 0, {"group_id": G, "topics": [{"name": T, "partitions": [{"partition_index": 1}]}]})
    assert h[token]["error_code"] == 0
    tombstones = [r for r in h.log[before:] if r[2] is None and is_offset_history_key(r[1])]
    assert sorted(r[1] for r in tombstones) == sorted(encode_key(G, T, 1, s) for s in range(3))
    assert list(entries(h.coord)) == [(T, 0)]
    before = len(h.log)
    token = h.send(DELETE, 2, {"groups_names": [G]})
    assert h[token]["results"][0]["error_code"] == 0
    assert sorted(r[1] for r in h.log[before:] if is_offset_history_key(r[1])) == sorted(
        encode_key(G, T, 0, s) for s in range(3))
    assert not entries(h.coord) and not compacted([r for r in h.log if is_offset_history_key(r[1])])
    # the retention timer
    h = Harness(offsets_history_size=4, offsets_retention_minutes=1, offsets_retention_check_interval_ms=1_000)
    anonymous_commit(h, {(T, 0): 1})
    anonymous_commit(h, {(T, 0): 2})
    h.sleep(120_000)
    assert not entries(h.coord) and not compacted([r for r in h.log if is_offset_history_key(r[1])])
    assert not reload(h, h.log)._env.shard_of(G).offset_history.rings


def test_describe_groups_v5_carries_it_on_the_wire() -> None:
    h = Harness(offsets_history_size=4)
    req = {"groups": [G], "include_authorized_operations": False}
    assert "offset_history" not in h[h.send(DESCRIBE, 5, req)]["groups"][0]  # none yet
    h.now = 5_000
    anonymous_commit(h, {(T, 0): 7}, "admin-x")
    assert "offset_history" not in h[h.send(DESCRIBE, 4, {**req, "include_offset_history": True})]["groups"][0]
    assert "offset_history" not in h[h.send(DESCRIBE, 5, req)]["groups"][0]  # not asked for: Kafka clients
    asked = h.send(DESCRIBE, 5, {**req, "include_offset_history": True})
    want = [{"name": T, "partitions": [{"partition_index": 0, "entries": [
        {"seq": 0, "committed_offset": 7, "commit_timestamp": 5_000, "generation": -1, "member_id": "",
         "client_id": "admin-x", "client_host": "/127.0.0.1"}]}]}]
    assert h[asked]["groups"][0]["offset_history"] == want
    frame = codec.encode_response(DESCRIBE, 5, 1, {"throttle_time_ms": 0, **h[asked]})
    _, decoded = codec.decode_response(DESCRIBE, 5, frame[4:])
    assert decoded["groups"][0]["offset_history"] == want


def test_memory_per_kept_commit_at_size_16() -> None:
    """2,000 partitions (200 groups x 10) x 16 kept commits, by 4 committers: <= 64 B per kept commit."""
    groups = [f"group-{i:05d}" for i in range(200)]
    topics = [f"topic-{t}" for t in range(2)]
    keys = {(g, t, p): encode_offset_key(g, t, p) for g in groups for t in topics for p in range(5)}
    whos = [(f"member-{i}", f"client-{i}", f"/10.0.0.{i}") for i in range(4)]
    history = OffsetHistory()
    size = 16
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for n in range(size):
        for (g, t, p), key in keys.items():
            staged = history.stage(size, key, g, (t, p), 1000 + n, 1_700_000_000_000 + n, 3, whos[n % 4])
            assert staged is not None
            history.apply_staged(staged)
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    kept = len(history)
    assert kept == len(keys) * size
    per = used / kept
    print(f"offset history: {per:.1f} B per kept commit ({kept} kept)")
    assert per <= 64


def test_a_fast_committer_is_recorded_once_per_min_interval_and_another_committer_always() -> None:
    hist = OffsetHistory()
    key = encode_offset_key(G, T, 0)
    me, admin = ("m-1", "app", "10.0.0.1"), ("", "groupcoord-reset-offsets/ops", "10.0.0.9")

    def commit(offset: int, at: int, who: tuple[str, str, str] = me) -> bool:
        staged = hist.stage(16, key, G, (T, 0), offset, at, 3, who, 1000)
        if staged is not None:
            hist.apply_staged(staged)
        return staged is not None

    assert commit(10, 5_000)  # the first entry
    assert not commit(11, 5_400) and not commit(12, 5_999)  # the same committer within 1 s: not recorded
    assert commit(13, 6_000)  # 1 s after the newest kept entry
    assert commit(14, 6_001, admin)  # another committer: always
    assert commit(15, 6_002)  # back to the member: the newest entry is the admin's
    assert [e.offset for e in hist.entries(G)[(T, 0)]] == [15, 14, 13, 10]
    every = OffsetHistory()
    assert every.stage(16, key, G, (T, 0), 1, 0, 3, me, 0) is not None  # min interval 0: each move
