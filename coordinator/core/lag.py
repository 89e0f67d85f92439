"""Consumer lag at the coordinator (issue #37): what each group has left to read, from what this node knows.

Rules (pure: values in, values out; the runtime's ``lag_sampler`` reads the logs and the clock):
- A partition's lag is its end (the offset consumers may read below: the high watermark) minus the group's
  committed offset, never below 0 (a committed offset past the end, e.g. of a recreated topic, is 0 lag).
  A partition whose end this node does not know (``ends`` has no entry: a topic it does not host) has no
  lag here: it is left out, never counted as 0.
- A group's lag per topic is the sum over its partitions with a known end; its total is the sum over topics.
- Cardinality is bounded: at most ``max_groups`` groups get series of their own, those with the largest
  total lag first (ties by name, so the choice is stable between scans); the others are summed per topic
  under the group label ``OTHER`` (a group named so is always in that sum). A client can create groups,
  never series.
- Lag seconds of a partition: ``now_ms`` minus the timestamp of the first record at or past the committed
  offset (the oldest record the group has not consumed), 0 when it has no lag; absent while that timestamp
  is unknown. Per (group, topic) the largest over its partitions whose age is known (absent when it lags and
  none is). Only groups with series of their own get it (the
  ``OTHER`` sum has none): the timestamps come from reading the logs, bounded by ``max_groups``.
- Per-partition series are produced only when asked (``per_partition``), for the groups with series of
  their own.
- ``first_timestamp``: the timestamp of the first record at or past an offset in stored batch bytes (what the
  runtime reads from a log, or fetches from a leader, for lag seconds).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from coordinator.core.offset_store import OffsetStore
from protocol.record_batch import CorruptBatchError, split_batches
from protocol.record_reader import records as batch_records

OTHER = "_other"
READ_BYTES = 64 * 1024  # read for a committed offset's record: enough for its batch (a larger one comes whole)
TopicPartition = tuple[str, int]
Ends = Mapping[TopicPartition, int]


@dataclass(slots=True)
class GroupLag:
    """One group's lag: per topic the records left, and per partition with lag the committed offset."""

    total: int = 0
    topics: dict[str, int] = field(default_factory=dict)
    partitions: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)  # tp -> (committed, lag)


def scan(store: OffsetStore, groups: Iterable[str], ends: Ends,
         unknown: set[TopicPartition] | None = None) -> dict[str, GroupLag]:
    """The lag of each of ``groups`` held in ``store`` (see the rules); groups with no known end are left
    out, and the partitions without one are added to ``unknown`` (when given: what to ask their leaders).
    Reads the store's words directly: ~10 million committed offsets are scanned in seconds."""
    out: dict[str, GroupLag] = {}
    for group in groups:
        held = store.partition_offsets(group)
        if not held:
            continue
        lag = GroupLag()
        topics = lag.topics
        for tp, committed in held:
            end = ends.get(tp)
            if end is None:
                if unknown is not None:
                    unknown.add(tp)
                continue
            n = end - committed if end > committed else 0
            topics[tp[0]] = topics.get(tp[0], 0) + n
            if n:
                lag.partitions[tp] = (committed, n)
        if topics:
            lag.total = sum(topics.values())
            out[group] = lag
    return out


@dataclass(frozen=True, slots=True)
class LagSeries:
    """What the metrics show: (group, topic) -> records, and seconds (own groups only); per partition when
    asked; and which groups were summed under ``OTHER``."""

    records: dict[tuple[str, str], int]
    seconds: dict[tuple[str, str], float]
    partition_records: dict[tuple[str, str, int], int]
    partition_seconds: dict[tuple[str, str, int], float]
    own_groups: frozenset[str]


def own_groups(lags: Mapping[str, GroupLag], max_groups: int) -> list[str]:
    """The groups with series of their own: the largest total lag first, then by name (a group named
    ``OTHER`` itself never has series of its own: its lag is in the ``OTHER`` sum)."""
    named = [g for g in lags if g != OTHER]
    if len(named) <= max_groups:
        return sorted(named)
    return sorted(sorted(named, key=lambda g: (-lags[g].total, g))[:max(0, max_groups)])


def to_wanted_timestamps(lags: Mapping[str, GroupLag], own: Iterable[str]) -> set[tuple[str, int, int]]:
    """(topic, partition, committed offset) whose record timestamp lag seconds needs (own groups, with lag)."""
    return {(tp[0], tp[1], committed) for g in own for tp, (committed, _) in lags[g].partitions.items()}


def series(lags: Mapping[str, GroupLag], max_groups: int, now_ms: int,
           timestamp: Callable[[str, int, int], int | None], per_partition: bool = False) -> LagSeries:
    """The series of one scan (see the rules). ``timestamp(topic, partition, offset)``: the timestamp of the
    first record at or past ``offset``, or None when unknown."""
    own = own_groups(lags, max_groups)
    records: dict[tuple[str, str], int] = {}
    seconds: dict[tuple[str, str], float] = {}
    p_records: dict[tuple[str, str, int], int] = {}
    p_seconds: dict[tuple[str, str, int], float] = {}
    for g in own:
        lag = lags[g]
        unread: set[str] = set()  # topics with a lagging partition whose record timestamp is unknown
        for topic, n in lag.topics.items():
            records[(g, topic)] = n
            seconds[(g, topic)] = 0.0
        if per_partition:
            for (topic, p), (_, n) in lag.partitions.items():
                p_records[(g, topic, p)] = n
        for (topic, p), (committed, _) in lag.partitions.items():
            ts = timestamp(topic, p, committed)
            if ts is None:
                unread.add(topic)
                continue
            age = max(0.0, (now_ms - ts) / 1000)
            if age > seconds[(g, topic)]:
                seconds[(g, topic)] = age
            if per_partition:
                p_seconds[(g, topic, p)] = age
        for topic in unread:  # no age is better than a wrong one (a later scan may read it)
            if not seconds[(g, topic)]:
                del seconds[(g, topic)]
    chosen = set(own)
    for g, lag in lags.items():
        if g in chosen:
            continue
        for topic, n in lag.topics.items():
            records[(OTHER, topic)] = records.get((OTHER, topic), 0) + n
    return LagSeries(records, seconds, p_records, p_seconds, frozenset(own))


def first_timestamp(data: bytes, offset: int) -> int | None:
    """The timestamp of the first record at or past ``offset`` in stored batch bytes, or None."""
    try:
        for batch in split_batches(data)[0]:
            for rec in batch_records(batch, verify_crc=False)[1]:
                if rec.offset >= offset:
                    return rec.timestamp
    except CorruptBatchError:
        return None
    return None
