"""One consumer group's durable state, changed only by ``replay(record)`` (at load and after each write).

State: group epoch, assignment epoch (0 for a new group, -1 once its TargetAssignmentMetadata is
tombstoned), members by id (with ``static_members``: instance id -> member id), each member's target, the
subscription metadata (topic name -> TopicMetadata) and ``partition_epochs`` (topic id -> partition ->
epoch of the member that holds it: its assigned and pending-revocation partitions).
Replay rules (Kafka's GroupMetadataManager.replay):
- MemberMetadata value upserts the member's subscription; tombstone removes the member, which must have no
  epoch left (its CurrentMemberAssignment tombstone comes first) and no target.
- TargetAssignmentMember value/tombstone sets/removes the member's target (the member need not exist).
- TargetAssignmentMetadata value sets the assignment epoch; tombstone sets -1 and needs no target left.
- CurrentMemberAssignment value updates the member's assignment and the partition epochs (a partition held
  by two members is a ReplayError); tombstone sets the epoch to -1 and clears its partitions.
- RegularExpression (16) value/tombstone sets/removes a regex's resolution (``resolved_regexes``).
- PartitionMetadata value/tombstone sets/clears the subscription metadata; Metadata value sets the group
  epoch. The Metadata tombstone (deleting the group) is applied by ``ConsumerGroups``: it needs no member,
  no target and an assignment epoch of -1.
Derived (each kept in step by replay, and copied by ``copy``): ``assignor_counts`` (server assignor -> members
naming it: ``preferred_assignor`` in O(1)), ``state`` (model.GroupState; O(1): ``unreconciled`` counts the
members not reconciled to the assignment epoch, kept in step by every replay that changes a member or the
assignment epoch), ``regex_members`` (regex -> member count), ``subscribed_topic_names`` (name -> member count)
over each member's EFFECTIVE subscription: its names and the topics its regex resolves to (nothing while
unresolved), kept in step by member and regex replays alike.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Mapping

from coordinator.core.consumer_group import records as R
from coordinator.core.consumer_group.member import Member
from coordinator.core.consumer_group.model import EMPTY, Assignment, GroupState, ReplayError, to_wire

CONSUMER_MEMBER_TYPE = 1  # ConsumerGroupDescribe v1 MemberType: a member on the consumer protocol
CLASSIC_MEMBER_TYPE = 0  # ... and one on the classic protocol (migration.py)


class ConsumerGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}
        self.targets: dict[str, Assignment] = {}
        self.subscription_metadata: dict[str, R.TopicMetadata] = {}
        self.partition_epochs: dict[uuid.UUID, dict[int, int]] = {}
        self.subscribed_topic_names: Counter[str] = Counter()
        self.resolved_regexes: dict[str, R.RegexValue] = {}
        self.regex_members: Counter[str] = Counter()
        self.unreconciled = 0  # members not reconciled to the assignment epoch
        self.assignor_counts: Counter[str] = Counter()  # server assignor -> members naming it

    def copy(self) -> ConsumerGroup:
        """An independent copy (members and assignments are immutable values: shared): what a reverted batch
        restores (runtime/consumer_batch.py)."""
        c = ConsumerGroup.__new__(ConsumerGroup)
        c.group_id, c.group_epoch, c.assignment_epoch = self.group_id, self.group_epoch, self.assignment_epoch
        c.members, c.static_members, c.targets = dict(self.members), dict(self.static_members), dict(self.targets)
        c.subscription_metadata = dict(self.subscription_metadata)
        c.partition_epochs = {t: dict(ps) for t, ps in self.partition_epochs.items()}
        c.subscribed_topic_names = Counter(self.subscribed_topic_names)
        c.resolved_regexes, c.regex_members = dict(self.resolved_regexes), Counter(self.regex_members)
        c.unreconciled, c.assignor_counts = self.unreconciled, Counter(self.assignor_counts)
        return c

    # ------------------------------------------------------------ derived
    @property
    def state(self) -> GroupState:
        if not self.members:
            return GroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return GroupState.ASSIGNING
        if self.unreconciled:
            return GroupState.RECONCILING
        return GroupState.STABLE

    def _count(self, old: Member | None, new: Member | None) -> None:
        """``unreconciled`` as a member goes from ``old`` to ``new`` (None: absent)."""
        epoch = self.assignment_epoch
        if old is not None and not old.is_reconciled_to(epoch):
            self.unreconciled -= 1
        if new is not None and not new.is_reconciled_to(epoch):
            self.unreconciled += 1

    def _set_assignment_epoch(self, epoch: int) -> None:
        if epoch != self.assignment_epoch:
            self.assignment_epoch = epoch
            self.unreconciled = sum(1 for m in self.members.values() if not m.is_reconciled_to(epoch))

    def partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.partition_epochs.get(topic_id, {}).get(partition, -1)

    def static_member(self, instance_id: str) -> Member | None:
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def effective_names(self, m: Member, resolved: Mapping[str, R.RegexValue] | None = None) -> frozenset[str]:
        """The topics ``m`` subscribes to: its names and what its regex resolves to in ``resolved`` (default:
        the group's resolutions)."""
        regex = m.subscribed_topic_regex
        if not regex:
            return frozenset(m.subscribed_topic_names)
        value = (self.resolved_regexes if resolved is None else resolved).get(regex)
        return frozenset(m.subscribed_topic_names).union(value.topics if value is not None else ())

    @property
    def last_regex_refresh_ms(self) -> int | None:
        """When the group's regexes were last resolved (the latest Timestamp of its records)."""
        return max((v.timestamp for v in self.resolved_regexes.values()), default=None)

    def target(self, member_id: str) -> Assignment:
        return self.targets.get(member_id, EMPTY)

    def preferred_assignor(self, default: str, known: tuple[str, ...],
                           replacing: Mapping[str, Member | None] = {}) -> str:
        """The most common ServerAssignor among the members (``replacing`` swaps members in or out by id;
        ties go to the one listed first in ``known``), else ``default``."""
        counts = self.assignor_counts
        if replacing:  # O(len(replacing)): the group's counts, the replaced members out and theirs in
            counts = Counter(counts)
            for member_id, m in replacing.items():
                old = self.members.get(member_id)
                if old is not None and old.server_assignor:
                    counts[old.server_assignor] -= 1
                if m is not None and m.server_assignor:
                    counts[m.server_assignor] += 1
            counts = +counts
        if not counts:
            return default
        return max(counts, key=lambda a: (counts[a], -known.index(a) if a in known else -len(known)))

    # ------------------------------------------------------------ replay
    def replay(self, key: R.Key, value: R.Value | None) -> None:
        if isinstance(key, R.MetadataKey):
            if value is not None:
                assert isinstance(value, R.MetadataValue)
                self.group_epoch = value.epoch
        elif isinstance(key, R.PartitionMetadataKey):
            topics = value.topics if isinstance(value, R.PartitionMetadataValue) else ()
            self.subscription_metadata = {t.topic_name: t for t in topics}
        elif isinstance(key, R.MemberMetadataKey):
            self._replay_member(key.member_id, value)
        elif isinstance(key, R.TargetAssignmentMetadataKey):
            if value is None:
                if self.targets:
                    raise ReplayError(f"group {self.group_id}: target assignment tombstone with targets left")
                self._set_assignment_epoch(-1)
            else:
                assert isinstance(value, R.TargetAssignmentMetadataValue)
                self._set_assignment_epoch(value.assignment_epoch)
        elif isinstance(key, R.TargetAssignmentMemberKey):
            if value is None:
                self.targets.pop(key.member_id, None)
            else:
                assert isinstance(value, R.TargetAssignmentMemberValue)
                self.targets[key.member_id] = dict(value.partitions)
        elif isinstance(key, R.CurrentAssignmentKey):
            self._replay_assignment(key.member_id, value)
        elif isinstance(key, R.RegexKey):
            self._replay_regex(key.regular_expression, value)

    def _replay_regex(self, regex: str, value: R.Value | None) -> None:
        users = [m for m in self.members.values() if m.subscribed_topic_regex == regex]
        for m in users:
            self._index(m, None)
        if value is None:
            self.resolved_regexes.pop(regex, None)
        else:
            assert isinstance(value, R.RegexValue)
            self.resolved_regexes[regex] = value
        for m in users:
            self._index(None, m)

    def _replay_member(self, member_id: str, value: R.Value | None) -> None:
        old = self.members.get(member_id)
        if value is None:
            if old is None:
                return
            if old.member_epoch != -1 or member_id in self.targets:
                raise ReplayError(f"group {self.group_id}: member {member_id} removed before its assignment "
                                  "and target tombstones")
            self._index(old, None)
            self._count(old, None)
            del self.members[member_id]
            return
        assert isinstance(value, R.MemberMetadataValue)
        new = (old or Member(member_id)).with_metadata(value)
        self._index(old, new)
        self._count(old, new)
        self.members[member_id] = new

    def _index(self, old: Member | None, new: Member | None) -> None:
        if old is not None:
            self.subscribed_topic_names.subtract(self.effective_names(old))
            if old.subscribed_topic_regex:
                self.regex_members[old.subscribed_topic_regex] -= 1
            if old.server_assignor:
                self.assignor_counts[old.server_assignor] -= 1
                if not self.assignor_counts[old.server_assignor]:
                    del self.assignor_counts[old.server_assignor]
            if old.instance_id is not None and self.static_members.get(old.instance_id) == old.member_id:
                del self.static_members[old.instance_id]
        if new is not None:
            self.subscribed_topic_names.update(self.effective_names(new))
            if new.subscribed_topic_regex:
                self.regex_members[new.subscribed_topic_regex] += 1
            if new.server_assignor:
                self.assignor_counts[new.server_assignor] += 1
            if new.instance_id is not None:
                self.static_members[new.instance_id] = new.member_id
        self.subscribed_topic_names = +self.subscribed_topic_names  # drop zero counts
        self.regex_members = +self.regex_members

    def _replay_assignment(self, member_id: str, value: R.Value | None) -> None:
        old = self.members.get(member_id)
        if old is None:
            if value is None:
                return
            old = Member(member_id)
            self._index(None, old)
            self._count(None, old)
            self.members[member_id] = old
        self._release(old)
        if value is None:
            new = old.replace(member_epoch=-1, previous_member_epoch=-1, assigned=EMPTY,
                              pending_revocation=EMPTY)
        else:
            assert isinstance(value, R.CurrentAssignmentValue)
            new = old.with_assignment(value)
        self._hold(new)
        self._count(old, new)
        self.members[member_id] = new

    def _release(self, m: Member) -> None:
        for topic, parts in m.owned.items():
            epochs = self.partition_epochs.get(topic, {})
            for p in parts:
                if epochs.get(p) != m.member_epoch:
                    raise ReplayError(f"group {self.group_id}: {topic}-{p} is not held at epoch "
                                      f"{m.member_epoch} by {m.member_id}")
                del epochs[p]
            if not epochs:
                self.partition_epochs.pop(topic, None)

    def _hold(self, m: Member) -> None:
        for topic, parts in m.owned.items():
            epochs = self.partition_epochs.setdefault(topic, {})
            for p in parts:
                if p in epochs:
                    raise ReplayError(f"group {self.group_id}: {topic}-{p} is already held at epoch "
                                      f"{epochs[p]} (wanted by {m.member_id})")
                epochs[p] = m.member_epoch

    # ------------------------------------------------------------ describe
    def describe(self, topic_names: Mapping[uuid.UUID, str], default_assignor: str,
                 known_assignors: tuple[str, ...]) -> dict:
        """The group's ConsumerGroupDescribe entry; topics missing from ``topic_names`` are left out."""

        def wire(a: Assignment) -> dict:
            return {"topic_partitions": [{**tp, "topic_name": topic_names[tp["topic_id"]]}
                                         for tp in to_wire(a) if tp["topic_id"] in topic_names]}

        members = [{
            "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
            "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
            "subscribed_topic_names": list(m.subscribed_topic_names),
            "subscribed_topic_regex": m.subscribed_topic_regex,
            "assignment": wire(m.assigned), "target_assignment": wire(self.target(m.member_id)),
            "member_type": CLASSIC_MEMBER_TYPE if m.classic is not None else CONSUMER_MEMBER_TYPE,
        } for m in sorted(self.members.values(), key=lambda m: m.member_id)]
        return {"error_code": 0, "error_message": None, "group_id": self.group_id,
                "group_state": self.state.value, "group_epoch": self.group_epoch,
                "assignment_epoch": self.assignment_epoch,
                "assignor_name": self.preferred_assignor(default_assignor, known_assignors),
                "members": members, "authorized_operations": -2147483648}

    # ------------------------------------------------------------ comparison (tests, reload checks)
    def snapshot(self) -> tuple:
        return (self.group_id, self.group_epoch, self.assignment_epoch, dict(self.members),
                dict(self.static_members), {k: dict(v) for k, v in self.targets.items()},
                dict(self.subscription_metadata), {k: dict(v) for k, v in self.partition_epochs.items()},
                dict(self.subscribed_topic_names), dict(self.resolved_regexes), dict(self.regex_members))
