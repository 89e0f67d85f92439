"""TxnOffsetCommit (28), v0-4: a transactional producer commits offsets for a group, pending until its marker.

Rules (Kafka 3.9's GroupCoordinator.handleTxnCommitOffsets / doTxnCommitOffsets / storeOffsets):
- Group status first (INVALID_GROUP_ID for a null or empty id, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR),
  for every partition; v0-1 get COORDINATOR_NOT_AVAILABLE instead of COORDINATOR_LOAD_IN_PROGRESS (KAFKA-7296).
  Partitions the runtime found unknown (``req["unknown_partitions"]``, Kafka's metadata check before the
  coordinator) answer UNKNOWN_TOPIC_OR_PARTITION and take no further part.
- An unknown group is created Empty (also when the commit is then refused; a refused commit that wrote
  nothing removes it again, as ``offsets._drop_bare``). Member validation is validateOffsetCommit with
  isTransactional=true: generation < 0 on an Empty group is accepted; a generation >= 0, a member id or an
  instance id must name a current member (FENCED_INSTANCE_ID / UNKNOWN_MEMBER_ID) of the current generation
  (ILLEGAL_GENERATION); otherwise (v0-2 carry no member data) it is accepted even on a non-empty group.
  No REBALANCE_IN_PROGRESS and no session re-arm (Kafka does neither for transactional commits).
- A KIP-848 consumer group in the shard is checked as Kafka 4.0's ConsumerGroup.validateOffsetCommit with
  isTransactional=true (the generation is the member epoch): a negative epoch on a group without members is
  accepted; else the member must exist (UNKNOWN_MEMBER_ID) and the epoch be its current one (ILLEGAL_GENERATION,
  Kafka's conversion of STALE_MEMBER_EPOCH for this API). An accepted commit is then stored like an anonymous one.
- Per partition: metadata longer than offset.metadata.max.bytes -> OFFSET_METADATA_TOO_LARGE, and
  offsets.max.committed (``offsets._Room``) -> POLICY_VIOLATION; the others are written. The leader epoch is on
  the wire from v2 (-1 before); commit time is now, no expire time.
- The write: all records of one request form ONE transactional batch (``Effects.producer`` = (pid, epoch)), one
  shard only, nothing else in that Outcome. While it is in flight its partitions count as pending commits
  (``shard.pending_commits``: require_stable answers UNSTABLE_OFFSET_COMMIT, retention skips them). Once durable
  ``Coordinator.on_appended`` puts the offsets into the shard's pending transactional offsets (``txn_offsets``),
  invisible to OffsetFetch until the COMMIT marker; the answers are released then. A failed write answers its
  error on every partition that was written.
- DeleteGroups (``forget_deleted_groups``): a deleted group's pending transactional offsets go with it (Kafka
  removes the group and so its pending offsets; its marker then finds nothing).
"""

from __future__ import annotations

from collections.abc import Iterable

from .env import Env
from .errors import Err
from .group import EMPTY, Group
from .offsets import _drop_bare, _Room, _track_pending
from .outcome import Effects
from .records import OffsetCommitValue, encode_offset_key, encode_offset_value
from .shard import _ACTIVE, Shard


def txn_offset_commit_response(results: Iterable[tuple[str, Iterable[tuple[int, int]]]]) -> dict:
    """The response dict: per topic name, (partition index, error code) pairs."""
    return {"throttle_time_ms": 0, "topics": [
        {"name": name, "partitions": [{"partition_index": i, "error_code": int(e)} for i, e in parts]}
        for name, parts in results]}


def refuse_all(req: dict, error: int) -> dict:
    """Every partition of the request answers ``error`` (e.g. the runtime cannot serve the API now)."""
    return txn_offset_commit_response((t["name"], [(p["partition_index"], error) for p in t.get("partitions") or ()])
                                      for t in req.get("topics") or ())


def handle_txn_offset_commit(env: Env, fx: Effects, version: int, req: dict, token: object,
                             client_id: str = "", client_host: str = "") -> None:
    group_id = req.get("group_id")
    topics = req.get("topics") or []
    unknown = req.get("unknown_partitions") or frozenset()
    generation = req.get("generation_id", -1) if version >= 3 else -1
    generation = -1 if generation is None else generation
    member_id = (req.get("member_id") or "") if version >= 3 else ""
    instance_id = req.get("group_instance_id") if version >= 3 else None
    error = Err.INVALID_GROUP_ID if not group_id else env.status_error(group_id)
    if error is Err.COORDINATOR_LOAD_IN_PROGRESS and version < 2:
        error = Err.COORDINATOR_NOT_AVAILABLE
    shard = env.shard_of(group_id) if error is None else None
    if shard is not None:
        error = _validate(shard, fx.now_ms, group_id, generation, member_id, instance_id)
    pid, epoch = req["producer_id"], req["producer_epoch"]
    results, written, records = [], [], []
    room = _Room(env, shard, group_id) if shard is not None and error is None else None
    for t in topics:
        name, parts = t["name"], []
        for p in t.get("partitions") or ():
            index = p["partition_index"]
            if (name, index) in unknown:
                parts.append((index, Err.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            if error is not None:
                parts.append((index, error))
                continue
            assert room is not None
            metadata = p.get("committed_metadata") or ""
            if len(metadata) > env.cfg.offset_metadata_max_bytes:
                parts.append((index, Err.OFFSET_METADATA_TOO_LARGE))
                continue
            if not room.admits(name, index):
                parts.append((index, Err.POLICY_VIOLATION))
                continue
            leader_epoch = p.get("committed_leader_epoch", -1) if version >= 2 else -1
            value = OffsetCommitValue(p["committed_offset"], -1 if leader_epoch is None else leader_epoch,
                                      metadata, fx.now_ms, None)
            # encoded before anything changes: a record that cannot be encoded leaves no state behind
            records.append((encode_offset_key(group_id, name, index), encode_offset_value(value)))
            written.append((group_id, name, index))
            parts.append((index, Err.NONE))
        results.append((name, parts))
    response = txn_offset_commit_response(results)
    if not written:
        if shard is not None:
            _drop_bare(shard, group_id)
        fx.complete(token, response)
        return
    assert shard is not None
    for (key, value), tp in zip(records, written):
        fx.write(shard.shard_id, key, value)
        shard.pending_commits[tp] += 1
    fx.producer = (pid, epoch)
    fx.complete(token, response)
    # in flight: pending commits until durable; a failed write answers its error on the written partitions
    # (OffsetCommit's response shape: the same topics/partitions/error_code, throttle time left to the codec)
    _track_pending(fx, shard, token, results, written)


def _validate(shard: Shard, now_ms: int, group_id: str, generation: int, member_id: str,
              instance_id: str | None) -> Err | None:
    consumer = shard.consumer.groups.get(group_id)
    if consumer is not None:  # KIP-848 (see the rules); accepted: stored like an anonymous commit
        if generation >= 0 or consumer.members:
            member = consumer.members.get(member_id)
            if member is None:
                return Err.UNKNOWN_MEMBER_ID
            if generation != member.member_epoch:
                return Err.ILLEGAL_GENERATION
        if group_id not in shard.groups:
            shard.groups[group_id] = Group(group_id, EMPTY, now_ms)
        return None
    group = shard.groups.get(group_id)
    if group is None:
        group = shard.groups[group_id] = Group(group_id, EMPTY, now_ms)
    if generation < 0 and group.state is EMPTY:
        return None
    if generation >= 0 or member_id or instance_id is not None:  # Kafka's validateCurrentMember
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is None:
                return Err.UNKNOWN_MEMBER_ID
            if current != member_id:
                return Err.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return Err.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return Err.ILLEGAL_GENERATION
    return None


def forget_deleted_groups(env: Env, group_ids: Iterable[str | None]) -> None:
    """After DeleteGroups: the pending transactional offsets of each group that no longer exists are dropped."""
    for group_id in group_ids:
        if not group_id:
            continue
        shard = env.shard_of(group_id)
        if shard.status is _ACTIVE and group_id not in shard.groups and shard.txn.has_group(group_id):
            shard.txn.drop_group(group_id)
