"""Bulk replay: the load path's ``Shard.replay`` of many records in one loop, with the same result.

Rules:
- ``replay_records(shard, records, skipped)`` leaves the shard exactly as ``shard.replay(key, value)`` of
  each record in order would, where a record whose replay raises ValueError (an undecodable key or value)
  is reported to ``skipped(key, error)`` (the same error) and changes nothing. That is the contract; the
  rest of this docstring is how it is made fast (a load replays ~1M records, and this loop is most of it).
- Fast path: an offset commit record of a LOADING or FOLLOWING shard (key v0/v1, value the 24-byte v3 without
  metadata, what we write for nearly every commit). Consecutive records of one group share its key prefix
  (version, length, group bytes): a key that starts with the previous prefix reuses its decoded group, and
  likewise a topic whose length and bytes match the previous one reuses its string. Nothing is decoded
  twice and no per-record key or value object is built: the three words go straight into the shard's
  ``OffsetStore`` (``put_words``), and a run of records of a group the store does not hold yet, in
  increasing (topic id, partition) order (one commit's batch, as a load mostly sees), is gathered and
  handed over as one array (``adopt``); a record out of that order ends the run (it is adopted as far as it
  got, and the rest goes one at a time).
- Pending transactional offsets (``shard.txn``): a plain commit supersedes them, as ``Shard.put_offset`` does.
  The fast path tests ``shard.txn.keys`` (empty unless a transaction is open) before it builds a key, so
  without transactions it costs one truthiness test per record.
- Everything else goes through ``shard.replay`` itself, which alone decides what a record means and which
  error it raises: tombstones, group metadata records, other value versions or metadata, an ACTIVE shard
  (where a new group id also gets a Group), and every key or value the fast path does not fully recognise.
  The caches are dropped, and a gathered run adopted, before such a record.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable

from .shard import REPLAYING, Shard

_V3_EMPTY = struct.Struct(">hqihq")  # OffsetCommitValue v3 with empty metadata: the whole 24 bytes
_PARTITION = struct.Struct(">i")

Skipped = Callable[[bytes, ValueError], None]


def replay_records(shard: Shard, records: Iterable[tuple[bytes, bytes | None]], skipped: Skipped) -> None:
    if shard.status not in REPLAYING:
        for key, value in records:
            _replay_one(shard, key, value, skipped)
        return
    store = shard.offsets
    put, adopt, groups = store.put_words, store.adopt, store._groups
    pending_txn, supersede = shard.txn.keys, shard.txn.plain_committed  # the same dict for the whole call
    unpack_value = _V3_EMPTY.unpack
    unpack_partition = _PARTITION.unpack_from
    no_match: tuple[bytes, ...] = ()  # bytes.startswith(()) is always False
    prefix: bytes | tuple[bytes, ...] = no_match
    topic_prefix: bytes | tuple[bytes, ...] = no_match
    group = topic = ""
    tid = 0
    run_keys: list[int] = []  # the run of a group not held when it began, while its keys increase
    run_vals: list[int] = []
    adopting = False
    for key, value in records:
        try:
            if key.startswith(prefix):
                e = len(prefix)
            else:
                if key[0] or key[1] > 1 or key[2] > 0x7F:  # not an offset key v0/v1, or a negative length
                    raise _Generic
                e = 4 + (key[2] << 8 | key[3])
                name = key[4:e].decode()
                if adopting:
                    adopt(group, run_keys, run_vals)
                    run_keys, run_vals = [], []
                group = name
                prefix = key[:e]
                adopting = group not in groups
            if key.startswith(topic_prefix, e):
                f = e + len(topic_prefix)
            else:
                if key[e] > 0x7F:
                    raise _Generic
                f = e + 2 + (key[e] << 8 | key[e + 1])
                topic = key[e + 2:f].decode()
                topic_prefix = key[e:f]
                tid = -1  # allocated when a run first needs it (an id is never left unused)
            if f + 4 != len(key) or value is None or len(value) != 24:
                raise _Generic
            version, offset, epoch, metadata_len, commit_ts = unpack_value(value)
            if version != 3 or metadata_len:
                raise _Generic
        except (_Generic, IndexError, UnicodeDecodeError):
            if adopting:  # the record may be about the run's group (a tombstone): the run lands first
                adopt(group, run_keys, run_vals)
                run_keys, run_vals, adopting = [], [], False
            prefix = topic_prefix = no_match
            _replay_one(shard, key, value, skipped)
            continue
        partition = unpack_partition(key, f)[0]
        if pending_txn and (group, topic, partition) in pending_txn:
            supersede((group, topic, partition))
        if adopting:
            if tid < 0:
                tid = store.topic_id(topic)
            k = tid << 32 | (partition & 0xFFFFFFFF)
            if not run_keys or k > run_keys[-1]:
                run_keys.append(k)
                run_vals += (offset, commit_ts, epoch << 2)
                continue
            adopt(group, run_keys, run_vals)  # out of order or again: one at a time from here
            run_keys, run_vals, adopting = [], [], False
        put(group, topic, partition, offset, commit_ts, epoch << 2)
    if adopting:
        adopt(group, run_keys, run_vals)


class _Generic(Exception):
    """This record is not for the fast path (internal)."""


def _replay_one(shard: Shard, key: bytes, value: bytes | None, skipped: Skipped) -> None:
    try:
        shard.replay(key, value)
    except ValueError as e:
        skipped(key, e)
