"""One offsets partition: the groups and committed offsets it owns, rebuilt by ``replay``.

Rules:
- status NOT_OWNED -> LOADING (runtime feeds every stored record through ``replay``) -> ACTIVE
  (``finish_loading``) -> NOT_OWNED (unload). Requests for a LOADING shard answer
  COORDINATOR_LOAD_IN_PROGRESS, for a NOT_OWNED one NOT_COORDINATOR.
- Cluster mode adds FOLLOWING: a shard this node replicates but does not lead is kept replayed from its log
  as the replica receives it (NOT_OWNED/ACTIVE -> FOLLOWING -> ACTIVE at ``finish_loading``). Requests answer
  NOT_COORDINATOR exactly as for NOT_OWNED; ``replay`` works as while LOADING; no timer ever runs for it.
- ``replay(key, value)`` is the same function at load time and after each durable append:
  offset commit records and their tombstones always apply; group metadata records rebuild the group only
  while LOADING or FOLLOWING (when ACTIVE the handler already changed the in-memory group, exactly as
  Kafka's classic groups are not re-replayed after their own writes).
- When ACTIVE every group id with committed offsets has a Group object (offsets-only "simple" groups
  are Empty with no protocol type), so listing, describing and deleting see them.
- ``pending_commits`` counts offset commits written but not yet durable per (group, topic, partition);
  retention never expires a partition with a pending commit (Kafka's pendingOffsetCommits).
- ``txn`` holds the pending transactional offsets (``txn_offsets.TxnOffsets``): ``replay_txn`` puts a
  transactional batch's records there (by producer id), ``complete_txn`` applies a COMMIT/ABORT marker. A plain
  offset commit (``replay`` or ``put_offset``) supersedes the pending entries of its partition, a plain
  tombstone drops them. ``has_pending_commit`` counts them too (require_stable, retention), and a group with
  pending transactional offsets gets a Group object like one with committed offsets.
- ``consumer`` holds the shard's KIP-848 consumer groups (``consumer_group.ConsumerGroups``). Their records
  (types 3-8 and 16) always apply, at load and after each durable write (the consumer-group core never changes
  itself: its records are its only way to change state). A record that breaks the groups' invariants
  (ReplayError) is refused as an undecodable one (RecordError, a ValueError: logged and skipped at load).
- ``history`` holds the rebalance histories (``rebalance_history.History``) of classic and consumer groups alike
  (one ring per group id): their records (our key version 1000) always apply, at load, while following and
  after each durable write.
- ``offset_history`` holds the offset histories (``offset_history.OffsetHistory``): their records (our key
  version 1002) always apply likewise.
- ``configs`` holds the per-group configs (``group_configs.GroupConfigs``): their records (our key version
  1001) always apply likewise; the shard's consumer groups read their session timeout and heartbeat interval
  overrides there (``ConsumerGroups.group_config``).
"""

from __future__ import annotations

from collections import Counter
from enum import Enum

from .consumer_group import ConsumerGroupConfig, ConsumerGroups
from .consumer_group import records as cg_records
from .consumer_group.model import ReplayError
from .group import EMPTY, STABLE, Group
from .group_configs import GroupConfigs, is_configs_key
from .group_configs import decode_key as decode_configs_key
from .member import Member
from .offset_history import OffsetHistory, is_offset_history_key
from .offset_store import OffsetStore
from .rebalance_history import History, is_history_key
from .records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitValue,
    RecordError,
    decode_group_value,
    decode_key,
    decode_offset_key,
    decode_offset_value,
)
from .txn_offsets import TxnOffsets

TopicPartition = tuple[str, int]


class ShardStatus(str, Enum):
    NOT_OWNED = "not-owned"
    LOADING = "loading"
    FOLLOWING = "following"
    ACTIVE = "active"


_ACTIVE = ShardStatus.ACTIVE  # a module global: reading an Enum member off its class costs ~5x more
REPLAYING = frozenset((ShardStatus.LOADING, ShardStatus.FOLLOWING))  # group metadata records rebuild groups


class Shard:
    __slots__ = ("configs", "consumer", "groups", "history", "offset_history", "offsets", "pending_commits", "shard_id",
                 "status", "txn")

    def __init__(self, shard_id: int, consumer: ConsumerGroupConfig | None = None) -> None:
        self.shard_id = shard_id
        self.status = ShardStatus.NOT_OWNED
        self.groups: dict[str, Group] = {}
        self.offsets = OffsetStore()
        self.pending_commits: Counter[tuple[str, str, int]] = Counter()
        self.txn = TxnOffsets()
        self.consumer = ConsumerGroups(consumer)
        self.history = History()
        self.offset_history = OffsetHistory()
        self.configs = GroupConfigs()
        self.consumer.group_config = self.configs.int_value

    def reset(self, status: ShardStatus) -> None:
        self.status = status
        self.groups = {}
        self.offsets = OffsetStore()
        self.pending_commits = Counter()
        self.txn = TxnOffsets()
        timed = self.consumer.timed
        self.consumer = ConsumerGroups(self.consumer.config, new_member_id=self.consumer.new_member_id,
                                       assignors=self.consumer.assignors)
        self.consumer.timed = timed
        self.history = History()
        self.offset_history = OffsetHistory()
        self.configs = GroupConfigs()
        self.consumer.group_config = self.configs.int_value

    def replay(self, key: bytes, value: bytes | None) -> None:
        offset_key = decode_offset_key(key)  # the hot path (a load replays ~1M of these): no key object
        if offset_key is None:
            self._replay_other(key, value)
            return
        group, tp = offset_key
        if value is None:
            self.offsets.delete(group, tp[0], tp[1])
            if self.txn.keys:
                self.txn.plain_deleted((group, tp[0], tp[1]))
            return
        self.put_offset(group, tp, decode_offset_value(value))  # decoded first: a bad value changes nothing

    def put_offset(self, group: str, tp: TopicPartition, committed: OffsetCommitValue) -> None:
        """What replaying an offset commit record does, given its decoded value."""
        self.offsets.put(group, tp[0], tp[1], committed)
        if self.txn.keys:
            self.txn.plain_committed((group, tp[0], tp[1]))
        if self.status is _ACTIVE and group not in self.groups:
            self.groups[group] = Group(group)

    def replay_txn(self, producer_id: int, key: bytes, value: bytes | None) -> None:
        """A record of ``producer_id``'s transactional batch: an offset commit goes to the pending offsets (a
        tombstone leaves them); any other record replays as usual (Kafka's load reads them alike)."""
        offset_key = decode_offset_key(key)
        if offset_key is None:
            self.replay(key, value)
            return
        group, tp = offset_key
        if value is None:
            self.txn.remove(producer_id, (group, tp[0], tp[1]))
            return
        self.txn.add(producer_id, (group, tp[0], tp[1]), decode_offset_value(value))
        if self.status is _ACTIVE and group not in self.groups:
            self.groups[group] = Group(group)

    def complete_txn(self, producer_id: int, commit: bool) -> None:
        """The COMMIT/ABORT marker of ``producer_id`` (see txn_offsets for which offsets a COMMIT installs)."""
        store = self.offsets
        for (group, topic, partition), value in self.txn.complete(producer_id, commit):
            store.put(group, topic, partition, value)
            if self.status is _ACTIVE and group not in self.groups:
                self.groups[group] = Group(group)

    def _replay_other(self, key: bytes, value: bytes | None) -> None:
        if is_history_key(key):  # ours: a rebalance of a group's history (rebalance_history.py)
            self.history.replay(key, value)
            return
        if is_offset_history_key(key):  # ours: a commit of a partition's offset history (offset_history.py)
            self.offset_history.replay(key, value)
            return
        if is_configs_key(key):  # ours: a group's configs (group_configs.py)
            self.configs.replay(key, value)
            self.consumer.touch(decode_configs_key(key))  # its KIP-848 leases end (lease.py: configs they hold)
            return
        if len(key) >= 2 and key[0] == 0 and (3 <= key[1] <= 8 or key[1] == 16):  # a consumer-group record
            record = cg_records.decode_record(key, value)
            if record is not None:
                try:
                    self.consumer.replay(record)
                except ReplayError as e:
                    raise RecordError(f"consumer-group record refused: {e}") from None
                return
        decoded = decode_key(key)
        if isinstance(decoded, GroupMetadataKey) and self.status in REPLAYING:
            if value is None:
                self.groups.pop(decoded.group, None)
            else:
                self.groups[decoded.group] = group_from_record(decoded.group, decode_group_value(value))

    def finish_loading(self) -> None:
        for group_id in self.offsets.groups():
            if group_id not in self.groups:
                self.groups[group_id] = Group(group_id)
        for group_id in self.txn.groups():
            if group_id not in self.groups:
                self.groups[group_id] = Group(group_id)
        self.history.loaded(self.groups.values())
        self.status = ShardStatus.ACTIVE

    def has_pending_commit(self, group_id: str, topic: str, partition: int) -> bool:
        """A commit written but not durable yet, or a transactional offset awaiting its marker."""
        key = (group_id, topic, partition)
        return self.pending_commits.get(key, 0) > 0 or key in self.txn.keys


def group_from_record(group_id: str, v: GroupMetadataValue) -> Group:
    """Kafka's loadGroup: Empty if the record has no members, else Stable with the stored assignment."""
    group = Group(group_id, STABLE if v.members else EMPTY,
                  None if v.current_state_timestamp == -1 else v.current_state_timestamp,
                  v.generation, v.protocol_type or None, v.protocol, v.leader)
    protocol = v.protocol or ""
    for m in v.members:
        group.add(Member(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout,
                         m.session_timeout, v.protocol_type, [(protocol, m.subscription)], m.assignment))
    group.leader_id = v.leader if v.leader in group.members else group.leader_id
    return group
