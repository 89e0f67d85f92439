"""OffsetCommit (8), OffsetFetch (9) and offsets retention (KIP-211).

Commit validation (Kafka's validateOffsetCommit): generation < 0 on an Empty (or unknown: created as a
simple, offsets-only group) group is always accepted; otherwise a request carrying a generation >= 0, a
member id or an instance id must name a current member (FENCED_INSTANCE_ID / UNKNOWN_MEMBER_ID) of the
current generation (ILLEGAL_GENERATION); an anonymous commit to a non-empty group is UNKNOWN_MEMBER_ID;
CompletingRebalance answers REBALANCE_IN_PROGRESS. A valid member's commit re-arms its session.
Per partition: metadata longer than offset.metadata.max.bytes -> OFFSET_METADATA_TOO_LARGE (others
commit). Old versions: v0 carries no generation or member id (a commit with generation -1, accepted
only by an Empty or unknown group); v1's per-partition ``commit_timestamp`` (unless -1) is the stored
commit time, so retention (and the expire time) counts from it. Committed offsets become visible to OffsetFetch when their record is replayed (after append);
the response is released once durable. ``commit_one`` is the same rule for a one-partition request (the
common shape) without request dicts or hooks: it returns the partition's error or a PendingCommit, which
``commit_settled`` makes visible (durable) or drops (failed).
Fetch: offsets are returned whatever the group state; unknown partitions/groups give offset -1, epoch
-1, metadata ""; topics None means all committed; require_stable + a pending commit ->
UNSTABLE_OFFSET_COMMIT for that partition (a commit in flight, or a transactional offset of any producer
awaiting its marker: ``Shard.has_pending_commit``).
Retention (every offsets.retention.check.interval.ms): a KIP-848 consumer group (``shard.consumer``) never
expires the offsets of a topic one of its members subscribes to, and the others at their commit time plus
offsets.retention.minutes (Kafka 4's ConsumerGroup.isSubscribedToTopic and its commit-time expiration
condition; topics matched only by a regex are not known yet: they expire like unsubscribed ones); a group
with a protocol type that is Empty expires
all offsets once it has been Empty for offsets.retention.minutes; a Stable "consumer" group expires
offsets of topics no member subscribes to, by commit time; a simple group (no protocol type) expires by
commit time; an explicit v2-4 retention time sets a per-offset expire timestamp (clamped to int64: a
retention too far to represent never expires). Pending transactional offsets (``shard.txn``) are never
expired, nor is the offset of a partition that has one, nor a group that has any (Kafka's hasOffsets).
Per-group retention (``group_configs``, ours): a group's ``offsets.retention.minutes`` replaces the server's for
it; -1: none of its offsets expire (explicit v2-4 expire times included). A group the expiry removes takes its
configs with it (their tombstone in the same write), unless a KIP-848 consumer group of that id remains.
``count_expiring``: how many offsets the checks of the next ``within_ms`` would remove if nothing changed (the
same rules evaluated at now + within_ms; the gauge).
Bound (offsets.max.committed, ours; ``_Room``): a partition the group has no offset for is refused with
POLICY_VIOLATION (others in the request commit) once all shards hold the bound's entries; a group that has
offsets may go 10% past it. Replacing an existing offset is never refused.
Offset history (offset_history.py, ours): each written offset record is followed, in the same write, by the
partition's history record when ``offsets.history.size`` > 0 and the commit changed something (offset, generation
or committer: member id, client id and the connection's host); it becomes visible with the offset (replay, or
``commit_settled`` for ``commit_one``).
Exception safety: every record is encoded before any state changes (pending counts, writes), so a value
that cannot be encoded leaves the core exactly as it was. Pending commits never
expire. An Empty group left with no offsets (and no pending members) becomes Dead and is removed, with a
group tombstone when it ever had a generation.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .env import Env
from .errors import Err
from .group import COMPLETING, DEAD, EMPTY, PREPARING, STABLE, Group
from .group_configs import forget as forget_configs
from .offset_history import Staged
from .outcome import Effects
from .rebalance import schedule_session
from .records import OffsetCommitValue, encode_group_key, encode_offset_key, encode_offset_value
from .responses import offset_commit_response
from .shard import _ACTIVE, Shard

CONSUMER_PROTOCOL_TYPE = "consumer"
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


# ---------------------------------------------------------------- OffsetCommit

def handle_offset_commit(env: Env, fx: Effects, version: int, req: dict, token: object,
                         client_id: str = "", client_host: str = "") -> None:
    group_id = req["group_id"]
    generation = req.get("generation_id_or_member_epoch", req.get("generation_id", -1))
    generation = -1 if generation is None else generation
    member_id = req.get("member_id") or ""
    instance_id = req.get("group_instance_id") if version >= 7 else None
    topics = req.get("topics") or []
    error = Err.INVALID_GROUP_ID if group_id is None else env.status_error(group_id)
    shard = env.shard_of(group_id) if error is None else None
    if shard is not None:
        error = _validate_commit(env, fx.now_ms, shard, group_id, generation, member_id, instance_id)
    if error is not None:
        fx.complete(token, offset_commit_response(
            [(t["name"], [(p["partition_index"], error) for p in t["partitions"]]) for t in topics]))
        return
    expire = _expire_at(version, req.get("retention_time_ms", -1), fx.now_ms)
    results, written, records, values = [], [], [], []
    room = _Room(env, shard, group_id)
    for t in topics:
        name, parts = t["name"], []
        for p in t["partitions"]:
            index = p["partition_index"]
            value = _committed(env, version, p["committed_offset"], p.get("committed_leader_epoch"),
                               p.get("committed_metadata"), _commit_time(version, p, fx.now_ms), expire)
            if type(value) is OffsetCommitValue and not room.admits(name, index):
                value = Err.POLICY_VIOLATION
            if type(value) is not OffsetCommitValue:
                parts.append((index, value))
                continue
            # encoded before anything changes: a record that cannot be encoded leaves no state behind
            records.append((encode_offset_key(group_id, name, index), encode_offset_value(value)))
            written.append((group_id, name, index))
            values.append(value)
            parts.append((index, Err.NONE))
        results.append((name, parts))
    size = env.cfg.offsets_history_size
    for (key, value), tp, committed in zip(records, written, values):
        fx.write(shard.shard_id, key, value)
        shard.pending_commits[tp] += 1
        if size:
            staged = shard.offset_history.stage(size, key, group_id, (tp[1], tp[2]), committed.offset,
                                                committed.commit_timestamp, generation,
                                                (member_id, client_id, client_host),
                                                env.cfg.offsets_history_min_interval_ms)
            for hkey, hvalue in staged.records if staged is not None else ():
                fx.write(shard.shard_id, hkey, hvalue)
    fx.complete(token, offset_commit_response(results))
    if written:
        _track_pending(fx, shard, token, results, written)
    elif room.refused:
        _drop_bare(shard, group_id)


def _committed(env: Env, version: int, offset: int, leader_epoch: int | None, metadata: str | None, now_ms: int,
               expire: int | None) -> OffsetCommitValue | Err:
    """One partition's committed value, or OFFSET_METADATA_TOO_LARGE (the epoch is on the wire from v6)."""
    metadata = metadata or ""
    if len(metadata) > env.cfg.offset_metadata_max_bytes:
        return Err.OFFSET_METADATA_TOO_LARGE
    epoch = -1 if version < 6 or leader_epoch is None else leader_epoch
    return OffsetCommitValue(offset, epoch, metadata, now_ms, expire)


def _commit_time(version: int, partition: dict, now_ms: int) -> int:
    """A v1 commit's own ``commit_timestamp`` when given (not -1), else the broker's time (Kafka's
    OffsetAndMetadata.fromRequest); retention then runs from it."""
    ts = partition.get("commit_timestamp", -1) if version == 1 else -1
    return now_ms if ts is None or ts == -1 else ts


def _expire_at(version: int, retention_ms: int | None, now_ms: int) -> int | None:
    """The explicit expire timestamp of a v2-4 commit's retention time (None: the configured retention)."""
    if not 2 <= version <= 4 or retention_ms is None or retention_ms == -1:
        return None
    return max(_INT64_MIN, min(now_ms + retention_ms, _INT64_MAX))  # a far retention never expires


class _Room:
    """offsets.max.committed for one request: a partition the group has no offset for adds an entry, admitted
    while every shard's entries plus those this request adds stay below the bound (a group that has offsets
    may go 10% past it, so existing groups keep committing new partitions). Entries written but not yet
    durable are not counted: the bound may be passed by what is in flight. Each refusal counts in
    ``stats.offsets_refused`` (the runtime logs it, rate-limited)."""

    __slots__ = ("added", "env", "group_id", "limit", "refused", "shard", "total")

    def __init__(self, env: Env, shard: Shard, group_id: str) -> None:
        self.env, self.shard, self.group_id = env, shard, group_id
        self.limit = env.cfg.offsets_max_committed
        if shard.offsets.has_group(group_id):
            self.limit += self.limit // 10
        self.total: int | None = None  # counted on the first new entry only
        self.added = 0
        self.refused = False

    def admits(self, topic: str, partition: int) -> bool:
        return self.shard.offsets.has(self.group_id, topic, partition) or self.admits_new()

    def admits_new(self) -> bool:
        if self.total is None:
            self.total = sum(len(s.offsets) for s in self.env.shards)
        if self.total + self.added >= self.limit:
            self.env.stats.offsets_refused += 1
            self.refused = True
            return False
        self.added += 1
        return True


def _drop_bare(shard: Shard, group_id: str) -> None:
    """A refused commit leaves no group behind: the one its validation created for an unknown group id
    (Empty, never a generation, no members, no offsets) goes again, so refused commits cost no memory."""
    group = shard.groups.get(group_id)
    if (group is not None and group.state is EMPTY and group.generation == 0 and not group.members
            and not group.pending_members and group.protocol_type is None and not shard.offsets.has_group(group_id)
            and not shard.txn.has_group(group_id)):
        del shard.groups[group_id]


def _release_pending(shard: Shard, key: tuple[str, str, int]) -> None:
    pending = shard.pending_commits
    if key in pending:
        pending[key] -= 1
        if pending[key] <= 0:
            del pending[key]


def _track_pending(fx: Effects, shard: Shard, token: object, results: list, written: list) -> None:
    def release() -> None:
        for key in written:
            _release_pending(shard, key)

    def on_fail(fail_fx: Effects, error: int) -> None:
        release()
        fail_fx.complete(token, offset_commit_response(
            [(name, [(i, error if e == Err.NONE else e) for i, e in parts]) for name, parts in results]))

    fx.on_done(lambda _fx: release())
    fx.on_fail(on_fail)


class PendingCommit(NamedTuple):
    """One partition's offset commit, written but not yet durable (``commit_one``)."""

    shard_id: int
    key: bytes
    value: bytes
    committed: OffsetCommitValue
    group_id: str
    tp: tuple[str, int]
    history: Staged | None = None  # the offset history's records, to append right after the commit's


def commit_one(env: Env, now_ms: int, version: int, group_id: str | None, generation: int, member_id: str,
               instance_id: str | None, topic: str, partition: int, offset: int, leader_epoch: int | None,
               metadata: str | None, retention_ms: int | None, client_id: str = "",
               client_host: str = "") -> Err | PendingCommit:
    """``handle_offset_commit`` for a request of one topic with one partition, without request dicts,
    Effects or hooks: the partition's error (nothing written), or the record to append. The same rules in
    the same order; the caller settles the PendingCommit with ``commit_settled``."""
    error = Err.INVALID_GROUP_ID if group_id is None else env.status_error(group_id)
    if error is not None:
        return error
    assert group_id is not None
    shard = env.shard_of(group_id)
    error = _validate_commit(env, now_ms, shard, group_id, generation, member_id,
                             instance_id if version >= 7 else None)
    if error is not None:
        return error
    committed = _committed(env, version, offset, leader_epoch, metadata, now_ms,
                           _expire_at(version, retention_ms, now_ms))
    if type(committed) is not OffsetCommitValue:
        return committed
    if not shard.offsets.has(group_id, topic, partition) and not _Room(env, shard, group_id).admits_new():
        _drop_bare(shard, group_id)
        return Err.POLICY_VIOLATION
    key = encode_offset_key(group_id, topic, partition)
    value = encode_offset_value(committed)
    size = env.cfg.offsets_history_size
    staged = shard.offset_history.stage(size, key, group_id, (topic, partition), offset, committed.commit_timestamp,
                                        generation, (member_id, client_id, client_host),
                                        env.cfg.offsets_history_min_interval_ms) if size else None
    pc = PendingCommit(shard.shard_id, key, value, committed, group_id, (topic, partition), staged)
    shard.pending_commits[(group_id, topic, partition)] += 1  # only once the record is encoded
    return pc


def commit_settled(env: Env, pc: PendingCommit, durable: bool) -> None:
    """The PendingCommit's write is durable (its offset becomes visible, as replay would make it) or failed."""
    shard = env.shards[pc.shard_id]
    if durable and shard.status is _ACTIVE:
        shard.put_offset(pc.group_id, pc.tp, pc.committed)
        if pc.history is not None:
            shard.offset_history.apply_staged(pc.history)
    _release_pending(shard, (pc.group_id, pc.tp[0], pc.tp[1]))


def _validate_commit(env: Env, now_ms: int, shard: Shard, group_id: str, generation: int, member_id: str,
                     instance_id: str | None) -> Err | None:
    group = shard.groups.get(group_id)
    if group is None:
        if generation >= 0:
            return Err.ILLEGAL_GENERATION
        shard.groups[group_id] = Group(group_id, EMPTY, now_ms)
        return None
    if generation < 0 and group.state is EMPTY:
        return None
    if generation >= 0 or member_id or instance_id is not None:
        if group.is_static_fenced(instance_id, member_id):
            return Err.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return Err.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return Err.ILLEGAL_GENERATION
    elif group.state is not EMPTY:
        return Err.UNKNOWN_MEMBER_ID
    if group.state is COMPLETING:
        return Err.REBALANCE_IN_PROGRESS
    member = group.members.get(member_id)
    if member is not None and group.state in (STABLE, PREPARING):
        schedule_session(env, now_ms, group, member)
    return None


# ---------------------------------------------------------------- OffsetFetch

def handle_offset_fetch(env: Env, fx: Effects, version: int, req: dict, token: object,
                        client_id: str = "", client_host: str = "") -> None:
    require_stable = bool(req.get("require_stable")) if version >= 7 else False
    if version >= 8:
        groups = []
        for g in req.get("groups") or ():
            error, topics = _fetch_group(env, g["group_id"], g.get("topics"), require_stable)
            groups.append({"group_id": g["group_id"], "topics": topics, "error_code": int(error)})
        fx.complete(token, {"groups": groups})
        return
    requested = req.get("topics")
    error, topics = _fetch_group(env, req["group_id"], requested, require_stable)
    if error != Err.NONE and version < 2:
        topics = [{"name": t["name"], "partitions": [_partition(p, None, error) for p in t["partition_indexes"]]}
                  for t in requested or ()]
    fx.complete(token, {"topics": topics, "error_code": int(error)})


def _partition(index: int, value: OffsetCommitValue | None, error: int = Err.NONE) -> dict:
    if value is None:
        return {"partition_index": index, "committed_offset": -1, "committed_leader_epoch": -1,
                "metadata": "", "error_code": int(error)}
    return {"partition_index": index, "committed_offset": value.offset,
            "committed_leader_epoch": value.leader_epoch, "metadata": value.metadata, "error_code": int(error)}


def _fetch_group(env: Env, group_id: str, requested: list[dict] | None,
                 require_stable: bool) -> tuple[Err, list[dict]]:
    error = Err.INVALID_GROUP_ID if group_id is None else env.status_error(group_id)
    if error is not None:
        return error, []
    shard = env.shard_of(group_id)
    offsets = shard.offsets
    if requested is None:
        by_topic: dict[str, list[dict]] = {}
        for (topic, index), value in sorted(offsets.group_items(group_id)):
            by_topic.setdefault(topic, []).append(_partition(index, value))
        return Err.NONE, [{"name": t, "partitions": parts} for t, parts in by_topic.items()]
    topics = []
    for t in requested:
        name, parts = t["name"], []
        for index in t.get("partition_indexes") or ():
            if require_stable and shard.has_pending_commit(group_id, name, index):
                parts.append(_partition(index, None, Err.UNSTABLE_OFFSET_COMMIT))
            else:
                parts.append(_partition(index, offsets.get(group_id, name, index)))
        topics.append({"name": name, "partitions": parts})
    return Err.NONE, topics


# ---------------------------------------------------------------- retention

def expire_offsets(env: Env, fx: Effects, shard: Shard) -> None:
    now, default = fx.now_ms, env.cfg.offsets_retention_ms
    store, configs = shard.offsets, shard.configs
    for group_id, group in list(shard.groups.items()):
        retention = configs.retention_ms(group_id, default) if configs.values else default
        if retention is not None and store.has_group(group_id):
            for tp in _expired(shard, group, store.group_items(group_id), now, retention):
                store.delete(group_id, tp[0], tp[1])
                fx.write(shard.shard_id, encode_offset_key(group_id, tp[0], tp[1]), None)
        if group.state is EMPTY and not store.has_group(group_id) and not group.pending_members \
                and not shard.txn.has_group(group_id):
            group.transition(DEAD, now)
            del shard.groups[group_id]
            if group.generation > 0:
                fx.write(shard.shard_id, encode_group_key(group_id), None)
            if group_id not in shard.consumer.groups:
                for key in forget_configs(configs, group_id):
                    fx.write(shard.shard_id, key, None)


def count_expiring(env: Env, shard: Shard, group_ids: list[str], now_ms: int, within_ms: int) -> int:
    """How many offsets of ``group_ids`` the retention checks up to ``now_ms + within_ms`` would remove, if
    nothing else changed (read-only: ``expire_offsets``' rules at that time)."""
    at, default = now_ms + within_ms, env.cfg.offsets_retention_ms
    store, configs = shard.offsets, shard.configs
    n = 0
    for group_id in group_ids:
        group = shard.groups.get(group_id)
        if group is None or not store.has_group(group_id):
            continue
        retention = configs.retention_ms(group_id, default) if configs.values else default
        if retention is not None:
            n += len(_expired(shard, group, store.group_items(group_id), at, retention))
    return n


def _expired(shard: Shard, group: Group, offsets: list[tuple[tuple[str, int], OffsetCommitValue]], now: int,
             retention: int) -> list[tuple[str, int]]:
    ptype, skip = group.protocol_type, frozenset()
    empty_since = None
    consumer = shard.consumer.groups.get(group.group_id)
    if consumer is not None:  # a KIP-848 group (its offsets sit in a memberless classic group object)
        skip = frozenset(consumer.subscribed_topic_names)
    elif ptype is not None and group.state is EMPTY:
        empty_since = group.state_timestamp
    elif ptype == CONSUMER_PROTOCOL_TYPE and group.state is STABLE:
        topics = subscribed_topics(group)
        if topics is None:
            return []
        skip = topics
    elif ptype is not None:
        return []
    out = []
    for tp, value in offsets:
        if tp[0] in skip or shard.has_pending_commit(group.group_id, tp[0], tp[1]):
            continue
        if value.expire_timestamp is not None:
            if now >= value.expire_timestamp:
                out.append(tp)
        elif now - (empty_since if empty_since is not None else value.commit_timestamp) >= retention:
            out.append(tp)
    return out


_H = struct.Struct(">h")
_I = struct.Struct(">i")


def subscribed_topics(group: Group) -> frozenset[str] | None:
    """Topics in the members' ConsumerProtocol subscriptions (int16 version, [string] topics, ...)."""
    protocol = group.protocol_name
    if protocol is None:
        return None
    topics: set[str] = set()
    try:
        for member in group.members.values():
            data = member.metadata(protocol)
            count = _I.unpack_from(data, 2)[0]
            pos = 6
            for _ in range(count):
                n = _H.unpack_from(data, pos)[0]
                topics.add(data[pos + 2:pos + 2 + n].decode())
                pos += 2 + n
    except (struct.error, KeyError, UnicodeDecodeError):
        return None
    return frozenset(topics)
