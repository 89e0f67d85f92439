"""Pending transactional offsets rebuilt from the log: transactional batches, COMMIT/ABORT control batches and
plain commits, decoded by offsets_reader.decode_chunks and replayed with offsets_reader.replay_steps (the path of
load_all, parallel_load and follower catch-ups), give the state the live coordinator had; and the bulk replay's
fast path supersedes pending offsets exactly as Shard.replay does."""

from __future__ import annotations

import random

from coordinator.core.bulk_replay import replay_records
from coordinator.core.coordinator import Coordinator
from coordinator.core.outcome import Outcome
from coordinator.core.records import OffsetCommitValue, encode_offset_key, encode_offset_value
from coordinator.core.shard import Shard, ShardStatus
from coordinator.runtime.offsets_reader import OffsetRecords, TxnBatch, TxnMarker, decode_chunks, replay_steps
from protocol.control_batch import build_marker_batch
from protocol.record_batch import build_batch, build_kv_batch, parse_header, with_base_offset

GROUPS = ("g1", "g2")
PARTS = (("t", 0), ("t", 1), ("u", 0))


class Node:
    """A live coordinator whose writes go to one byte log the way the runtime writes them."""

    def __init__(self) -> None:
        self.core = Coordinator()
        for shard in range(self.core.config.offsets_topic_num_partitions):
            self.core.begin_loading(shard)
            self.core.finish_loading(shard, 0)
        self.logs: dict[int, list[bytes]] = {}
        self.next: dict[int, int] = {}
        self.now = 1000
        self.tokens = 0

    def _append(self, shard: int, batch: bytes) -> None:
        base = self.next.get(shard, 0)
        self.logs.setdefault(shard, []).append(with_base_offset(batch, base))
        self.next[shard] = parse_header(batch).last_offset_delta + base + 1

    def apply(self, out: Outcome) -> None:
        if out.records:
            by_shard: dict[int, list] = {}
            for shard, key, value in out.records:
                by_shard.setdefault(shard, []).append((key, value))
            for shard, items in by_shard.items():
                if out.producer is not None:
                    batch = build_batch([(k, v, (), self.now) for k, v in items], producer_id=out.producer[0],
                                        producer_epoch=out.producer[1], base_sequence=0, transactional=True)
                else:
                    batch = build_kv_batch(items, self.now)
                self._append(shard, batch)
            after = self.core.on_appended(out.write_id, self.now)
            self.apply(after)

    def send(self, api: int, version: int, req: dict) -> dict:
        self.tokens += 1
        self.now += 1
        out = self.core.handle(api, version, req, self.tokens, self.now)
        self.apply(out)
        return out.completions[0][1] if out.completions else {}

    def plain(self, group: str, offsets: dict) -> None:
        self.send(8, 7, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                         "group_instance_id": None, "topics": _topics(offsets)})

    def txn(self, group: str, pid: int, offsets: dict) -> None:
        self.send(28, 3, {"transactional_id": f"x{pid}", "group_id": group, "producer_id": pid, "producer_epoch": 1,
                          "generation_id": -1, "member_id": "", "group_instance_id": None,
                          "topics": _topics(offsets)})

    def marker(self, pid: int, commit: bool, shards: list[int] | None = None) -> None:
        self.now += 1
        for shard in shards if shards is not None else sorted(self.logs):
            self._append(shard, build_marker_batch(pid, 1, commit, 0, self.now))
            self.apply(self.core.complete_txn(shard, pid, commit, self.now))

    def offset_delete(self, group: str, topic: str, partition: int) -> None:
        self.send(47, 0, {"group_id": group,
                          "topics": [{"name": topic, "partitions": [{"partition_index": partition}]}]})

    def log_bytes(self, shard: int) -> bytes:
        return b"".join(self.logs.get(shard, []))


def _topics(offsets: dict) -> list[dict]:
    topics: dict[str, list] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                             "committed_leader_epoch": -1, "committed_metadata": ""})
    return [{"name": t, "partitions": p} for t, p in topics.items()]


def loaded(node: Node, chunk: int = 3) -> Coordinator:
    """A fresh coordinator loaded from the node's logs through decode_chunks and replay_steps."""
    core = Coordinator()
    for shard in range(core.config.offsets_topic_num_partitions):
        core.begin_loading(shard)
        problems: list[str] = []
        records, _ = decode_chunks([(0, node.log_bytes(shard))] if shard in node.logs else [], 0, problems)
        assert problems == []
        for _ in replay_steps(core, shard, records, _raise, chunk):
            pass
        core.finish_loading(shard, 0)
    return core


def _raise(key: bytes, e: ValueError) -> None:
    raise e


def view(core: Coordinator) -> tuple:
    """What the log decides: committed offsets, require_stable answers, pending producers (a group object that
    holds neither, e.g. created by a commit that was then aborted, lives in memory only, as in Kafka)."""
    committed = {g: core.committed_offsets(g) for g in GROUPS}
    stable = {}
    for g in GROUPS:
        out = core.handle(9, 7, {"group_id": g, "require_stable": True,
                                 "topics": [{"name": t, "partition_indexes": [0, 1]} for t in ("t", "u")]}, "f", 0)
        stable[g] = [(t["name"], p["partition_index"], p["error_code"], p["committed_offset"])
                     for t in out.completions[0][1]["topics"] for p in t["partitions"]]
    producers = {s: core.pending_txn_producers(s) for s in range(core.config.offsets_topic_num_partitions)}
    return committed, stable, producers


def test_load_rebuilds_committed_aborted_and_pending_mixes() -> None:
    node = Node()
    node.plain("g1", {("t", 0): 1, ("t", 1): 1})
    node.txn("g1", 10, {("t", 0): 100, ("t", 1): 101})  # committed, but t-1 loses to a later plain commit
    node.plain("g1", {("t", 1): 2})
    node.txn("g1", 20, {("u", 0): 200})  # aborted
    node.txn("g2", 30, {("t", 0): 300})  # left pending at the end of the log
    node.marker(10, True)
    node.marker(20, False)
    live = view(node.core)
    assert live[0]["g1"][("t", 0)].offset == 100 and live[0]["g1"][("t", 1)].offset == 2
    assert ("u", 0) not in live[0]["g1"]
    assert ("t", 0, 88, -1) in live[1]["g2"]
    got = loaded(node)
    assert view(got) == live
    # the load left producer 30 pending: its marker, once written, commits it
    shard = got.shard_for("g2")
    got.complete_txn(shard, 30, True, 0)
    assert got.committed_offsets("g2")[("t", 0)].offset == 300


def test_reader_events_feed_the_replay_in_log_order() -> None:
    node = Node()
    node.txn("g1", 1, {("t", 0): 5})
    node.marker(1, True)
    node.plain("g1", {("t", 0): 6})
    shard = node.core.shard_for("g1")
    records, reached = decode_chunks([(0, node.log_bytes(shard))], 0)
    assert reached == node.next[shard]
    assert type(records) is OffsetRecords and len(records) == 1
    assert [(i, type(e)) for i, e in records.txn] == [(0, TxnBatch), (0, TxnMarker)]
    assert records.txn[0][1].producer_id == 1 and records.txn[1][1] == TxnMarker(1, True)
    got = loaded(node, chunk=1)
    assert got.committed_offsets("g1")[("t", 0)].offset == 6


def test_generated_sequences_load_as_they_ran() -> None:
    rng = random.Random(447)
    for _ in range(60):
        node = Node()
        open_pids: set[int] = set()
        for _ in range(rng.randrange(5, 25)):
            op = rng.random()
            group = rng.choice(GROUPS)
            offsets = {p: rng.randrange(1000) for p in rng.sample(PARTS, rng.randrange(1, 3))}
            if op < 0.3:
                node.plain(group, offsets)
            elif op < 0.65:
                pid = rng.randrange(1, 4)
                node.txn(group, pid, offsets)
                open_pids.add(pid)
            elif op < 0.9 and open_pids:
                pid = rng.choice(sorted(open_pids))
                node.marker(pid, rng.random() < 0.6)
                open_pids.discard(pid)
            else:
                topic, partition = rng.choice(PARTS)
                node.offset_delete(group, topic, partition)
        assert view(loaded(node, chunk=rng.randrange(1, 6))) == view(node.core)


def _pending_shard(status: ShardStatus) -> Shard:
    shard = Shard(0)
    shard.reset(status)
    for pid, (group, topic, partition) in enumerate((("g", "t", 0), ("g", "t", 1), ("h", "t", 0), ("new", "x", 3))):
        shard.replay_txn(pid, encode_offset_key(group, topic, partition),
                         encode_offset_value(OffsetCommitValue(pid, -1, "", 1, None)))
    return shard


def test_bulk_replay_supersedes_pending_offsets_like_shard_replay() -> None:
    records = [(encode_offset_key(g, t, p), encode_offset_value(OffsetCommitValue(50 + p, -1, "", 2, None)))
               for g, t, p in (("g", "t", 1), ("g", "t", 2), ("new", "x", 3), ("new", "x", 4), ("h", "u", 0))]
    for status in (ShardStatus.LOADING, ShardStatus.FOLLOWING):
        bulk, one_by_one = _pending_shard(status), _pending_shard(status)
        replay_records(bulk, records, _raise)
        for key, value in records:
            one_by_one.replay(key, value)
        for shard in (bulk, one_by_one):
            for pid in range(4):
                shard.complete_txn(pid, True)
        assert bulk.offsets.group_dict("g") == one_by_one.offsets.group_dict("g")
        assert bulk.offsets.group_dict("new") == one_by_one.offsets.group_dict("new")
        assert bulk.offsets.group_dict("h") == one_by_one.offsets.group_dict("h")
        # superseded: the plain commits of g/t/1 and new/x/3 came after the pending ones
        assert bulk.offsets.get("g", "t", 1).offset == 51 and bulk.offsets.get("new", "x", 3).offset == 53
        assert bulk.offsets.get("g", "t", 0).offset == 0 and bulk.offsets.get("h", "t", 0).offset == 2
