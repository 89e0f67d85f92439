"""bench_coordinator's data for the load-time figure: a data dir holding N offset-commit records.

Rules:
- ``write_offsets_data_dir`` writes what the server itself would have written for ``groups`` simple groups
  committing ``per_group`` partitions each (4 topics, per_group/4 partitions): keys and values encoded by
  ``coordinator.core.records``, one v2 record batch per group commit (``protocol.record_batch.build_batch``),
  appended to ``__consumer_offsets-<shard>`` (shard = Kafka's hash of the group id) through
  ``coordinator.storage.LogManager`` with the compacted config of ``coordinator.runtime.groups``, then a
  clean close (fsync, index, checkpoint) like a server shutdown. Every key is distinct, so all N offsets
  are live after load (the most work a load can have for N records).
- ``load_in_process`` repeats the server's load path (``GroupService.load_all``: open the logs, read and
  decode each partition with ``read_offsets_partition``, replay every record into a ``Coordinator``,
  ``finish_loading``) without trio, timing each stage.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass

from coordinator.core.config import GroupConfig
from coordinator.core.coordinator import Coordinator
from coordinator.core.records import OffsetCommitValue, encode_offset_key, encode_offset_value
from coordinator.core.sharding import partition_for
from coordinator.runtime.groups import OFFSETS_LOG_CONFIG, OFFSETS_TOPIC, read_offsets_partition
from coordinator.storage.manager import LogManager
from protocol.record_batch import build_batch

TOPICS = ("orders", "payments", "clicks", "audit")


@dataclass(frozen=True, slots=True)
class WriteStats:
    records: int
    groups: int
    batches: int
    bytes: int
    seconds: float


def group_name(i: int) -> str:
    return f"load-group-{i:06d}"


def expected_offset(group_index: int, topic_index: int, partition: int) -> int:
    return group_index * 1000 + topic_index * 100 + partition


def write_offsets_data_dir(data_dir: str, records: int, per_group: int = 100, shards: int = 50,
                           topics: tuple[str, ...] = TOPICS) -> WriteStats:
    t0 = time.perf_counter()
    groups = records // per_group
    per_topic = per_group // len(topics)
    now = int(time.time() * 1000)
    pending: dict[int, list[bytes]] = defaultdict(list)
    manager = LogManager(data_dir)
    size = 0
    try:
        logs = {s: manager.create(OFFSETS_TOPIC, s, OFFSETS_LOG_CONFIG) for s in range(shards)}
        for g in range(groups):
            group = group_name(g)
            items = []
            for t, topic in enumerate(topics):
                for p in range(per_topic):
                    value = OffsetCommitValue(expected_offset(g, t, p), -1, "", now)
                    items.append((encode_offset_key(group, topic, p), encode_offset_value(value), [], now))
            batch = build_batch(items)
            size += len(batch)
            shard = partition_for(group, shards)
            pending[shard].append(batch)
            if len(pending[shard]) >= 64:
                logs[shard].append(pending.pop(shard))
        for shard, batches in pending.items():
            logs[shard].append(batches)
    finally:
        manager.close()
    return WriteStats(groups * per_topic * len(topics), groups, groups, size, time.perf_counter() - t0)


def _no_skips(key: bytes, error: ValueError) -> None:
    raise RuntimeError(f"bench data has an undecodable record ({error}): {key!r}")


def load_in_process(data_dir: str, shards: int = 50) -> dict[str, float]:
    """The server's load path, stage by stage (seconds), plus the record count."""
    t0 = time.perf_counter()
    manager = LogManager(data_dir)
    t_open = time.perf_counter() - t0
    core = Coordinator(GroupConfig(offsets_topic_num_partitions=shards))
    read_s = replay_s = finish_s = 0.0
    total = 0
    try:
        for shard in range(shards):
            core.begin_loading(shard)
        for shard in range(shards):
            plog = manager.get(OFFSETS_TOPIC, shard)
            if plog is None:
                plog = manager.create(OFFSETS_TOPIC, shard, OFFSETS_LOG_CONFIG)
            a = time.perf_counter()
            items = read_offsets_partition(plog)
            b = time.perf_counter()
            core.replay_many(shard, items, _no_skips)
            c = time.perf_counter()
            core.finish_loading(shard, int(time.time() * 1000))
            d = time.perf_counter()
            read_s += b - a
            replay_s += c - b
            finish_s += d - c
            total += len(items)
    finally:
        manager.close()
    return {"open_s": t_open, "read_decode_s": read_s, "replay_s": replay_s, "finish_s": finish_s,
            "total_s": time.perf_counter() - t0, "records": total}


if __name__ == "__main__":
    print("helper of tests.bench.bench_coordinator (run that); nothing to run on its own")
