"""ConsumerGroupHeartbeat over the consumer groups of one shard: join, heartbeat, leave, timer expiry.

Rules:
- Every entry takes values and ``now_ms`` and returns a ``HeartbeatOutcome``: the response body (or None
  for timers), the records to append as ONE atomic batch in Kafka's order, and ``Deadline``s (absolute ms;
  ``at_ms`` None cancels). Nothing here changes state: the caller appends the records and replays them
  through ``replay`` (as at load), so a failed write changes nothing. A refused request has no records.
- Validation is Kafka 4.x's (GroupCoordinatorService), then the state machine's errors (§1.2 of the
  research note), each with Kafka's code and message.
- Heartbeat order (GroupMetadataManager.consumerGroupHeartbeat): group (created only by epoch 0), max
  size, member (dynamic by id; static by instance id with replacement of a member that left with -2),
  updated member -> MemberMetadata if changed, the group's regexes (below) -> RegularExpression records,
  epoch bump if its subscription changed or the group is new (epoch 0) or a used regex's topics changed or
  the subscription metadata (from the ``topics`` snapshot) changed -> PartitionMetadata, Metadata; a new
  target when group epoch > assignment epoch -> TargetAssignmentMember for each changed target,
  TargetAssignmentMetadata; reconcile -> CurrentMemberAssignment; session deadline re-armed;
  rebalance deadline armed on entering UNREVOKED_PARTITIONS, cancelled on leaving it.
- An outcome whose records bump the group epoch (a leave or fence too) carries its rebalance history entry
  (``HeartbeatOutcome.rebalance``, history.py); nothing is computed for one that does not.
- The response's assignment is everything the member owns now, only on a full request (epoch 0, or
  rebalance timeout, names and owned partitions all given) or when its assigned partitions changed.
- Regex subscriptions (v1 SubscribedTopicRegex; regex.py): a member's effective subscription is its names
  and the topics its regex resolves to. A regex no member of the group uses yet is compiled
  (INVALID_REGULAR_EXPRESSION if it does not) and resolved in that heartbeat. The group's regexes are
  re-resolved against the ``topics`` snapshot (the broker's view of the topics, given to every heartbeat)
  at most once per REGEX_REFRESH_MS (10 s) after the latest resolution, unless a regex is new, and only
  when the snapshot's version differs from the one a regex was resolved at: so a topic created or deleted
  later is picked up by a heartbeat 10 s or more after the last resolution. Each new resolution is a
  RegularExpression record (type 16: topics, version, timestamp), and one whose topics changed bumps the
  group epoch; the last member leaving a regex (changing it, leaving, fenced) tombstones its record.
  Resolved topics are filtered by ``may_describe`` (the member's DESCRIBE ACL; default all allowed).
- Leave: epoch -1 fences (tombstones CurrentMemberAssignment, TargetAssignmentMember, MemberMetadata, its
  regex's record if it was the last user; new subscription metadata; epoch + 1); epoch -2 (static) only
  writes the member at epoch -2, keeping its partitions reserved until it rejoins or its session expires.
- Divergences: the subscription metadata is recomputed on every heartbeat from the given snapshot (Kafka
  does so on a refresh deadline or flag); an existing member rejoining with epoch 0 is accepted
  (KAFKA-19233, after 4.0); regexes are resolved in the heartbeat that needs it (Kafka: on a background
  executor, then a write of its own) and the record's Version is a fingerprint of the topic snapshot
  (Kafka: the metadata image offset). Classic-protocol members and online migration: migration.py (a fence
  whose remaining members are all classic may end the group, ``HeartbeatOutcome.downgrade``).
- Deferred targets (batches of one group's heartbeats, runtime/consumer_batch.py): with ``defer_target`` a
  heartbeat that leaves the group ASSIGNING does not compute the target assignment; its member reconciles to
  the current target epoch and the outcome is ``pending``. Once every heartbeat of the batch is replayed the
  caller computes the target ONCE (``assign_target``: over the members as they are then) and completes each
  pending outcome in order (``finish``: the member reconciles to the new target as step 3 would have; its
  response and deadlines updated). Without ``defer_target`` (a lone heartbeat) a join gets its target at once.
  The distinct subscriptions are turned into topic-id sets once per computation (``_assign``). ``target_job`` /
  ``TargetJob.run`` / ``target_records`` are ``assign_target`` in three steps, so that the runtime can run the
  assignor (``run``: only the job's own immutable inputs) on a worker thread; a job's result is dropped when the
  group was written since the job was made (``written`` changed).
- Leases (lease.py): ``written`` numbers the latest record replayed into each group, so that a lease on a
  steady heartbeat's answer ends with any write to its group.
- Per-group configs (Kafka 4's GroupConfig; ``group_configs.py``): a group's ``consumer.session.timeout.ms`` and
  ``consumer.heartbeat.interval.ms`` override the server's (``group_config``, set by the shard), read on each
  heartbeat (the session deadline it arms, the interval it answers) and at load: a change reaches each member
  from its next heartbeat.
"""

from __future__ import annotations

import base64
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from coordinator.core.consumer_group import history as H
from coordinator.core.consumer_group import records as R
from coordinator.core.consumer_group.assignors import BUILTIN, Assignor, AssignorError, MemberSpec
from coordinator.core.consumer_group.downgrade import downgrade
from coordinator.core.consumer_group.group import ConsumerGroup
from coordinator.core.consumer_group.member import Member, canonical_names
from coordinator.core.consumer_group.model import (
    Assignment,
    Err,
    MemberState,
    Reject,
    ReplayError,
    from_wire,
    to_wire,
)
from coordinator.core.consumer_group.reconcile import reconcile
from coordinator.core.consumer_group.regex import (
    REGEX_REFRESH_MS,
    TopicFilter,
    allow_all,
    compile_regex,
    resolve,
    snapshot_version,
)
from coordinator.core.rebalance_history import Rebalance

LEAVE_EPOCH = -1
SESSION_TIMEOUT_KEY = "consumer.session.timeout.ms"  # Kafka 4's group config keys (group_configs.py)
HEARTBEAT_INTERVAL_KEY = "consumer.heartbeat.interval.ms"
STATIC_LEAVE_EPOCH = -2
UNKNOWN_SERVER_ERROR_MESSAGE = "The server experienced an unexpected error when processing the request."


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    """group.consumer.* broker settings (the first assignor is the default)."""

    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 5000
    max_size: int = 2**31 - 1
    assignors: tuple[str, ...] = ("uniform", "range")
    migration_policy: str = "bidirectional"  # group.consumer.migration.policy (migration.py)
    classic_max_size: int = 2**31 - 1  # group.max.size: a downgrade must fit a classic group


class TopicInfo(NamedTuple):
    topic_id: uuid.UUID
    partitions: int


# not frozen (never changed once made; hashable all the same): the runtime's hot path makes one per renewed
# heartbeat (lease.py), and a frozen dataclass's __init__ costs four times as much
@dataclass(slots=True, unsafe_hash=True)
class Deadline:
    kind: str  # "session" | "rebalance"
    group_id: str
    member_id: str
    at_ms: int | None  # None: cancel
    epoch: int = -1  # rebalance: the epoch the member must have left by at_ms

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind, self.group_id, self.member_id)


@dataclass(slots=True)
class HeartbeatOutcome:
    response: dict[str, Any] | None
    records: list[R.Record] = field(default_factory=list)
    deadlines: list[Deadline] = field(default_factory=list)
    downgrade: Any = None  # migration.Downgrade: the records end the group, a classic group follows them
    rebalance: Rebalance | None = None  # the history entry of the epoch bump (history.py; its seq given when written)
    pending: Pending | None = None  # its target was deferred (``defer_target``): ``finish`` completes it


@dataclass(frozen=True, slots=True)
class Pending:
    """What ``finish`` needs of a heartbeat whose target assignment was deferred."""

    member_id: str
    member_epoch: int  # the epoch its outcome left the member at
    owned: Assignment | None  # the request's owned partitions
    full: bool  # a full request: the response carries the assignment whatever it is
    before: Assignment  # the member's assigned partitions before the heartbeat


def _call(fn: Callable[[], Any]) -> Any:
    return fn()


def _run_assignor(assignor: Assignor, specs: Mapping[str, MemberSpec], partitions: Mapping[uuid.UUID, int],
                  timed: Callable[[Callable[[], Any]], Any]) -> dict[str, Assignment]:
    try:
        targets = timed(lambda: assignor(specs, partitions))
    except AssignorError as e:
        raise Reject(Err.UNKNOWN_SERVER_ERROR, UNKNOWN_SERVER_ERROR_MESSAGE) from e
    return {m: targets.get(m, {}) for m in specs}


@dataclass(slots=True)
class TargetJob:
    """A group's target assignment to compute (``ConsumerGroups.target_job``): the assignor's inputs, made on the
    caller's thread; ``run`` reads only them (immutable member specs, topic partition counts), so it may run on a
    worker thread while the group waits."""

    group_id: str
    group_epoch: int
    written: int  # ConsumerGroups.written of the group when made: its result applies only while unchanged
    current: dict[str, Assignment]
    had: set[str]  # members that had a target record
    specs: dict[str, MemberSpec]
    partitions: dict[uuid.UUID, int]
    assignor: Assignor
    timed: Callable[[Callable[[], Any]], Any]

    @property
    def weight(self) -> int:
        """How much work it is, roughly: members plus the partitions they subscribe to."""
        return len(self.specs) + sum(self.partitions.values())

    def run(self) -> dict[str, Assignment]:
        """The new targets; Reject(UNKNOWN_SERVER_ERROR) when the assignor fails."""
        return _run_assignor(self.assignor, self.specs, self.partitions, self.timed)


def _no_override(group_id: str, key: str) -> int | None:
    return None


def random_member_id() -> str:
    """Java's Uuid.randomUuid().toString(): 22 URL-safe base64 characters."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def error_response(code: Err, message: str | None) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": int(code), "error_message": message, "member_id": None,
            "member_epoch": 0, "heartbeat_interval_ms": 0, "assignment": None}


class ConsumerGroups:
    def __init__(self, config: ConsumerGroupConfig | None = None, *,
                 new_member_id: Callable[[], str] = random_member_id,
                 assignors: Mapping[str, Assignor] | None = None) -> None:
        self.config = config or ConsumerGroupConfig()
        self.new_member_id = new_member_id
        impls = BUILTIN if assignors is None else assignors
        self.assignors = {name: impls[name] for name in self.config.assignors}
        self.groups: dict[str, ConsumerGroup] = {}
        # (group id, key) -> the group's override of a group config, None without one (Shard sets it)
        self.group_config: Callable[[str, str], int | None] = _no_override
        # group id -> the number of the latest record replayed into it (numbered across the shard's groups, never
        # reused: a lease holds while it is unchanged, lease.py); dropped with the group
        self.written: dict[str, int] = {}
        self._replayed = 0
        # runs each target assignment computation (the runtime times it: a histogram; no clock here)
        self.timed: Callable[[Callable[[], Any]], Any] = _call

    def session_timeout_ms(self, group_id: str) -> int:
        value = self.group_config(group_id, SESSION_TIMEOUT_KEY)
        return self.config.session_timeout_ms if value is None else value

    def member_session_ms(self, group_id: str, member: Member) -> int:
        """A classic-protocol member's own session timeout (its JoinGroup's), else the group's."""
        return member.classic.session_timeout_ms if member.classic is not None else self.session_timeout_ms(group_id)

    def heartbeat_interval_ms(self, group_id: str) -> int:
        value = self.group_config(group_id, HEARTBEAT_INTERVAL_KEY)
        return self.config.heartbeat_interval_ms if value is None else value

    def touch(self, group_id: str) -> None:
        """Something the group's answers depend on changed outside its records (its per-group configs): its
        leases end, as with a write (lease.py)."""
        if group_id in self.written:
            self._replayed += 1
            self.written[group_id] = self._replayed

    # ------------------------------------------------------------ replay
    def replay(self, record: R.Record) -> None:
        group_id = record.key.group_id
        group = self.groups.get(group_id)
        self._replayed += 1
        self.written[group_id] = self._replayed  # any write ends the group's leases (lease.py)
        if record.value is None:
            if group is None:
                self.written.pop(group_id, None)
                return
            if isinstance(record.key, R.MetadataKey):
                if group.members or group.targets or group.assignment_epoch != -1:
                    raise ReplayError(f"group {group_id} deleted before its members and targets")
                del self.groups[group_id]
                self.written.pop(group_id, None)
                return
        elif group is None:
            group = self.groups[group_id] = ConsumerGroup(group_id)
        group.replay(record.key, record.value)

    # ------------------------------------------------------------ heartbeat
    def heartbeat(self, request: Mapping[str, Any], version: int, now_ms: int,
                  topics: Mapping[str, TopicInfo], client_id: str = "", client_host: str = "",
                  may_describe: TopicFilter = allow_all, base: ConsumerGroup | None = None,
                  defer_target: bool = False) -> HeartbeatOutcome:
        """``topics`` is the broker's topic snapshot (name -> TopicInfo; iterable for regexes) and
        ``may_describe`` whether the member may DESCRIBE a topic (regex resolution only). ``base``: the group
        to join instead of the stored one (a classic group being upgraded, migration.py). ``defer_target``:
        a group left ASSIGNING is not given its new target here; the outcome is ``pending`` until the
        caller's ``assign_target`` and ``finish`` (batches, module rules)."""
        try:
            self._validate(request, version)
            if request["member_epoch"] in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                return self._leave(request, topics, now_ms)
            return self._heartbeat(request, now_ms, topics, client_id, client_host, may_describe, base,
                                   defer_target)
        except Reject as e:
            return HeartbeatOutcome(error_response(e.code, e.message))

    def validate(self, request: Mapping[str, Any], version: int) -> dict[str, Any] | None:
        """The request-level checks alone (Kafka's GroupCoordinatorService makes them before routing to a
        shard): the error response, or None."""
        try:
            self._validate(request, version)
        except Reject as e:
            return error_response(e.code, e.message)
        return None

    def _validate(self, req: Mapping[str, Any], version: int) -> None:
        epoch = req["member_epoch"]
        if (version >= 1 or epoch > 0 or epoch == LEAVE_EPOCH) and req["member_id"] == "":
            raise Reject(Err.INVALID_REQUEST, "MemberId can't be empty.")
        for name, label in (("group_id", "GroupId"), ("instance_id", "InstanceId"), ("rack_id", "RackId")):
            if req.get(name) == "":
                raise Reject(Err.INVALID_REQUEST, f"{label} can't be empty.")
        if epoch == 0:
            if req.get("rebalance_timeout_ms", -1) == -1:
                raise Reject(Err.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request.")
            if req.get("topic_partitions") is None or req["topic_partitions"]:
                raise Reject(Err.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining.")
            if req.get("subscribed_topic_names") is None and req.get("subscribed_topic_regex") is None:
                raise Reject(Err.INVALID_REQUEST, "Either SubscribedTopicNames or SubscribedTopicRegex must"
                             " be non-null when (re-)joining.")
        elif epoch == STATIC_LEAVE_EPOCH:
            if req.get("instance_id") is None:
                raise Reject(Err.INVALID_REQUEST, "InstanceId can't be null.")
        elif epoch < STATIC_LEAVE_EPOCH:
            raise Reject(Err.INVALID_REQUEST, "MemberEpoch is invalid.")
        assignor = req.get("server_assignor")
        if assignor is not None and assignor not in self.assignors:
            raise Reject(Err.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {assignor} is not supported. Supported "
                         f"assignors: {', '.join(self.config.assignors)}.")

    def _heartbeat(self, req: Mapping[str, Any], now_ms: int, topics: Mapping[str, TopicInfo],
                   client_id: str, client_host: str, may_describe: TopicFilter,
                   base: ConsumerGroup | None = None, defer_target: bool = False) -> HeartbeatOutcome:
        group_id, member_id, epoch = req["group_id"], req["member_id"], req["member_epoch"]
        instance_id = req.get("instance_id")
        owned = None if req.get("topic_partitions") is None else from_wire(req["topic_partitions"])
        records: list[R.Record] = []
        deadlines: list[Deadline] = []
        group = self.groups.get(group_id) if base is None else base
        if group is None:
            if epoch != 0:
                raise Reject(Err.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
            group = ConsumerGroup(group_id)  # it exists once its first record is replayed
        if len(group.members) >= self.config.max_size and (member_id == "" or member_id not in group.members):
            raise Reject(Err.GROUP_MAX_SIZE_REACHED, "The consumer group has reached its maximum capacity of "
                         f"{self.config.max_size} members.")
        if member_id == "":
            member_id = self.new_member_id()

        # the member, and the static member it replaces
        replaced: Member | None = None
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if epoch != 0:
                    raise Reject(Err.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
                member = Member(member_id)
            else:
                _check_epoch(member, epoch, owned)
        else:
            existing = group.static_member(instance_id)
            if epoch == 0:
                if existing is None:
                    member = group.members.get(member_id) or Member(member_id)
                else:
                    if existing.member_epoch != STATIC_LEAVE_EPOCH:
                        raise Reject(Err.UNRELEASED_INSTANCE_ID, f"Static member {member_id} with instance id "
                                     f"{instance_id} cannot join the group because the instance id is owned by "
                                     f"{existing.member_id} member.")
                    replaced = existing
                    member = existing.replace(member_id=member_id, member_epoch=0, previous_member_epoch=0)
                    records += _removal(group_id, existing.member_id)
                    records += [R.Record(R.MemberMetadataKey(group_id, member_id), member.metadata_value()),
                                R.Record(R.TargetAssignmentMemberKey(group_id, member_id),
                                         R.TargetAssignmentMemberValue(dict(group.target(existing.member_id)))),
                                R.Record(R.CurrentAssignmentKey(group_id, member_id), member.assignment_value())]
                    if existing.member_id != member_id:
                        deadlines += _cancel_timers(group_id, existing.member_id)
            else:
                if existing is None:
                    raise Reject(Err.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
                if existing.member_id != member_id:
                    raise Reject(Err.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id "
                                 f"{instance_id} was fenced by member {existing.member_id}.")
                _check_epoch(existing, epoch, owned)
                member = existing
        old_id = replaced.member_id if replaced is not None else member_id

        # 1. the member's subscription, the group's regexes, the subscription metadata, the group epoch
        updated = _apply_request(member, req, client_id, client_host)
        previous = group.members.get(old_id)
        regex_records, resolved, regexes_changed = self._regexes(group, previous, updated, now_ms, topics,
                                                                 may_describe)
        bump = group.group_epoch == 0 or regexes_changed
        if updated.metadata_value() != member.metadata_value():  # always for a new member (its timeout)
            records.append(R.Record(R.MemberMetadataKey(group_id, member_id), updated.metadata_value()))
            bump = bump or not updated.subscription_equals(member)
        records += regex_records
        if regexes_changed:  # other members' effective subscriptions moved too
            names: Counter[str] = Counter()
            for m in group.members.values():
                if m.member_id != old_id:
                    names.update(group.effective_names(m, resolved))
        else:
            names = Counter(group.subscribed_topic_names)
            if previous is not None:
                names.subtract(group.effective_names(previous))
        names.update(group.effective_names(updated, resolved))
        metadata = _subscription_metadata(+names, topics)
        if metadata != group.subscription_metadata:
            records.append(R.Record(R.PartitionMetadataKey(group_id),
                                    _metadata_value(metadata)))
            bump = True
        group_epoch = group.group_epoch + 1 if bump else group.group_epoch
        rebalance = None
        if bump:
            records.append(R.Record(R.MetadataKey(group_id), R.MetadataValue(group_epoch)))
            rebalance = self._bump_entry(group, group_epoch, previous, replaced, updated, old_id, metadata,
                                         regexes_changed, now_ms)

        # 2. the target assignment
        own_target = group.target(old_id)
        deferred = defer_target and group_epoch > group.assignment_epoch
        if group_epoch > group.assignment_epoch and not deferred:
            members = {m.member_id: m for m in group.members.values() if m.member_id != old_id}
            members[member_id] = updated
            current = {m: group.target(m) for m in members}
            current[member_id] = own_target
            had = {m for m in members if m in group.targets}
            if old_id in group.targets or replaced is not None:
                had.add(member_id)
            targets = self._assign(group, members, current, metadata, resolved,
                                   replacing={old_id: None, member_id: updated})
            records += self._target_records(group, targets, current, had, group_epoch)
            target_epoch, target = group_epoch, targets[member_id]
        else:
            target_epoch, target = group.assignment_epoch, own_target

        # 3. reconciliation
        reconciled = updated
        if not updated.is_reconciled_to(target_epoch):
            reconciled = reconcile(updated, target_epoch, target, owned, group.partition_epoch)
        if reconciled.assignment_value() != updated.assignment_value():
            records.append(R.Record(R.CurrentAssignmentKey(group_id, member_id), reconciled.assignment_value()))
            if reconciled.state is MemberState.UNREVOKED_PARTITIONS:
                deadlines.append(Deadline("rebalance", group_id, member_id,
                                          now_ms + reconciled.rebalance_timeout_ms, reconciled.member_epoch))
            else:
                deadlines.append(Deadline("rebalance", group_id, member_id, None))
        deadlines.append(Deadline("session", group_id, member_id, now_ms + self.member_session_ms(group_id, updated)))

        full = epoch == 0 or (req.get("rebalance_timeout_ms", -1) != -1
                              and req.get("subscribed_topic_names") is not None and owned is not None)
        response = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "member_id": member_id,
                    "member_epoch": reconciled.member_epoch,
                    "heartbeat_interval_ms": self.heartbeat_interval_ms(group_id), "assignment": None}
        if full or reconciled.assigned != member.assigned:
            response["assignment"] = {"topic_partitions": to_wire(reconciled.assigned)}
        pending = Pending(member_id, reconciled.member_epoch, owned, full, member.assigned) if deferred else None
        return HeartbeatOutcome(response, records, deadlines, rebalance=rebalance, pending=pending)

    # ------------------------------------------------------------ deferred targets (batches)
    def assign_target(self, group_id: str) -> list[R.Record]:
        """The records of the group's new target assignment when it is ASSIGNING (group epoch > assignment
        epoch, members left), computed once over its members as they are now (the subscription metadata and
        regex resolutions replayed); none otherwise, or when the assignor fails (the next heartbeat that
        computes it answers the error)."""
        job = self.target_job(group_id)
        if job is None:
            return []
        try:
            targets = job.run()
        except Reject:
            return []
        return self.target_records(job, targets)

    def target_job(self, group_id: str) -> TargetJob | None:
        """``assign_target`` in two steps, for a caller that runs the assignor elsewhere (a worker thread): the
        job holds the assignor's inputs, built now; ``job.run()`` touches no state of this object (it may run
        on another thread while the group's operations wait); ``target_records`` turns its result into records.
        None when the group needs no new target."""
        group = self.groups.get(group_id)
        if group is None or not group.members or group.group_epoch <= group.assignment_epoch:
            return None
        current = {m: group.target(m) for m in group.members}
        name, specs, partitions = self._specs(group, group.members, current, group.subscription_metadata,
                                              group.resolved_regexes, {})
        return TargetJob(group_id, group.group_epoch, self.written.get(group_id, 0), current, set(group.targets),
                         specs, partitions, self.assignors[name], self.timed)

    def is_heavy(self, group_id: str, min_weight: int) -> bool:
        """Whether the group's next target would weigh at least ``min_weight`` (``TargetJob.weight``: its members
        plus its subscribed partitions, as they stand); the sum stops once it is reached. No group weighs 0."""
        group = self.groups.get(group_id)
        if group is None:
            return min_weight <= 0
        weight = len(group.members)
        for t in group.subscription_metadata.values():
            if weight >= min_weight:
                break
            weight += t.num_partitions
        return weight >= min_weight

    def target_records(self, job: TargetJob, targets: Mapping[str, Assignment]) -> list[R.Record]:
        """The records of a job's result; none when the group was written since the job was made (its inputs
        are stale: the next computation starts again from the state then)."""
        group = self.groups.get(job.group_id)
        if group is None or self.written.get(job.group_id, 0) != job.written:
            return []
        return self._target_records(group, targets, job.current, job.had, job.group_epoch)

    def finish(self, group_id: str, outcome: HeartbeatOutcome, now_ms: int) -> list[R.Record]:
        """Complete a ``pending`` outcome once the group's target is in place (``assign_target``'s records
        replayed): the member reconciles to it as its heartbeat would have (step 3), the records of that are
        returned, and the outcome's response and deadlines are updated in place. Nothing when the member is
        gone or moved on since, or has nothing to reconcile."""
        pending = outcome.pending
        outcome.pending = None
        group = self.groups.get(group_id)
        member = group.members.get(pending.member_id) if group is not None and pending is not None else None
        if member is None or pending is None or member.member_epoch != pending.member_epoch:
            return []
        target_epoch = group.assignment_epoch
        if group.group_epoch > target_epoch or member.is_reconciled_to(target_epoch):
            return []
        reconciled = reconcile(member, target_epoch, group.target(member.member_id), pending.owned,
                               group.partition_epoch)
        if reconciled.assignment_value() == member.assignment_value():
            return []
        record = R.Record(R.CurrentAssignmentKey(group_id, member.member_id), reconciled.assignment_value())
        if reconciled.state is MemberState.UNREVOKED_PARTITIONS:
            outcome.deadlines.append(Deadline("rebalance", group_id, member.member_id,
                                              now_ms + reconciled.rebalance_timeout_ms, reconciled.member_epoch))
        else:
            outcome.deadlines.append(Deadline("rebalance", group_id, member.member_id, None))
        response = outcome.response
        if response is not None:
            response["member_epoch"] = reconciled.member_epoch
            if pending.full or reconciled.assigned != pending.before:
                response["assignment"] = {"topic_partitions": to_wire(reconciled.assigned)}
            else:
                response["assignment"] = None
        return [record]

    def _target_records(self, group: ConsumerGroup, targets: Mapping[str, Assignment],
                        current: Mapping[str, Assignment], had: set[str], epoch: int) -> list[R.Record]:
        """TargetAssignmentMember for each new or changed target, then TargetAssignmentMetadata at ``epoch``."""
        group_id = group.group_id
        records = [R.Record(R.TargetAssignmentMemberKey(group_id, m), R.TargetAssignmentMemberValue(dict(target)))
                   for m, target in targets.items() if m not in had or target != current[m]]
        records.append(R.Record(R.TargetAssignmentMetadataKey(group_id), R.TargetAssignmentMetadataValue(epoch)))
        return records

    def _bump_entry(self, group: ConsumerGroup, epoch: int, previous: Member | None, replaced: Member | None,
                    updated: Member, old_id: str, metadata: Mapping[str, R.TopicMetadata], regexes_changed: bool,
                    now_ms: int) -> Rebalance:
        """A heartbeat's epoch bump as a history entry (history.py)."""
        kind = H.heartbeat_kind(previous, replaced, updated)
        protocol = self.assignor_after(group, {old_id: None, updated.member_id: updated})
        reason = (H.metadata_change(group.subscription_metadata, metadata, regexes_changed)
                  if kind == H.TOPIC_METADATA_CHANGED else None)
        return H.entry(group, epoch, kind, None if kind == H.TOPIC_METADATA_CHANGED else updated, now_ms, protocol,
                       joined=(updated.member_id,), left=(old_id,) if old_id != updated.member_id else (),
                       reason=reason)

    def assignor_after(self, group: ConsumerGroup, replacing: Mapping[str, Member | None]) -> str:
        """The server assignor the group uses once ``replacing`` applies (``ConsumerGroup.preferred_assignor``)."""
        return group.preferred_assignor(self.config.assignors[0], self.config.assignors, replacing)

    def _regexes(self, group: ConsumerGroup, previous: Member | None, updated: Member, now_ms: int,
                 topics: Mapping[str, TopicInfo], may_describe: TopicFilter
                 ) -> tuple[list[R.Record], dict[str, R.RegexValue], bool]:
        """The RegularExpression records of this heartbeat (tombstones of regexes no member uses any more,
        then the new or changed resolutions), the resolutions once they apply, and whether the topics of a
        regex in use changed (an epoch bump)."""
        old_regex = previous.subscribed_topic_regex if previous is not None else None
        new_regex = updated.subscribed_topic_regex
        if new_regex and new_regex != old_regex and not group.regex_members.get(new_regex):
            compile_regex(new_regex)  # a regex new to the group: INVALID_REGULAR_EXPRESSION if it does not compile
        used = Counter(group.regex_members)
        if old_regex:
            used[old_regex] -= 1
        if new_regex:
            used[new_regex] += 1
        in_use = sorted(+used)
        group_id = group.group_id
        records = [R.Record(R.RegexKey(group_id, r), None) for r in sorted(group.resolved_regexes)
                   if r not in in_use]
        resolved = {r: group.resolved_regexes[r] for r in in_use if r in group.resolved_regexes}
        last = group.last_regex_refresh_ms
        if not in_use or (len(resolved) == len(in_use) and last is not None and now_ms - last < REGEX_REFRESH_MS):
            return records, resolved, False
        version = snapshot_version(topics)
        changed = False
        for r in in_use:
            old = resolved.get(r)
            if old is not None and old.version == version:
                continue
            try:
                matched = resolve(r, topics, may_describe)
            except Reject:  # compiled when it was brought: only a different RE2 build could refuse it now
                matched = ()
            changed = changed or old is None or old.topics != matched
            resolved[r] = R.RegexValue(matched, version, now_ms)
            records.append(R.Record(R.RegexKey(group_id, r), resolved[r]))
        return records, resolved, changed

    def _assign(self, group: ConsumerGroup, members: Mapping[str, Member], current: Mapping[str, Assignment],
                metadata: Mapping[str, R.TopicMetadata], resolved: Mapping[str, R.RegexValue],
                replacing: Mapping[str, Member | None]) -> dict[str, Assignment]:
        name, specs, partitions = self._specs(group, members, current, metadata, resolved, replacing)
        return _run_assignor(self.assignors[name], specs, partitions, self.timed)

    def _specs(self, group: ConsumerGroup, members: Mapping[str, Member], current: Mapping[str, Assignment],
               metadata: Mapping[str, R.TopicMetadata], resolved: Mapping[str, R.RegexValue],
               replacing: Mapping[str, Member | None]
               ) -> tuple[str, dict[str, MemberSpec], dict[uuid.UUID, int]]:
        """The assignor to use and its inputs."""
        name = group.preferred_assignor(self.config.assignors[0], self.config.assignors, replacing)
        partitions = {t.topic_id: t.num_partitions for t in metadata.values()}
        # one topic-id set per DISTINCT subscription, shared by its members (the assignor groups members by it,
        # and a frozenset caches its hash)
        subscriptions: dict[tuple[tuple[str, ...], str | None], frozenset[uuid.UUID]] = {}
        specs = {}
        for m in members.values():
            key = (m.subscribed_topic_names, m.subscribed_topic_regex)
            topic_ids = subscriptions.get(key)
            if topic_ids is None:
                topic_ids = subscriptions[key] = frozenset(
                    metadata[n].topic_id for n in group.effective_names(m, resolved) if n in metadata)
            specs[m.member_id] = MemberSpec(topic_ids, current[m.member_id], m.instance_id)
        return name, specs, partitions

    # ------------------------------------------------------------ leave and fencing
    def _leave(self, req: Mapping[str, Any], topics: Mapping[str, TopicInfo], now_ms: int) -> HeartbeatOutcome:
        group_id, member_id, epoch = req["group_id"], req["member_id"], req["member_epoch"]
        instance_id = req.get("instance_id")
        group = self.groups.get(group_id)
        if group is None:
            raise Reject(Err.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        response = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "member_id": member_id,
                    "member_epoch": epoch, "heartbeat_interval_ms": 0, "assignment": None}
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise Reject(Err.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise Reject(Err.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
            if member.member_id != member_id:
                raise Reject(Err.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id {instance_id} "
                             f"was fenced by member {member.member_id}.")
            if epoch == STATIC_LEAVE_EPOCH:
                away = member.replace(member_epoch=STATIC_LEAVE_EPOCH, pending_revocation={})
                record = R.Record(R.CurrentAssignmentKey(group_id, member_id), away.assignment_value())
                return HeartbeatOutcome(response, [record])
        return self._fence(group, member, topics, response, now_ms, H.MEMBER_LEFT)

    def _fence(self, group: ConsumerGroup, member: Member, topics: Mapping[str, TopicInfo],
               response: dict[str, Any] | None, now_ms: int, kind: str) -> HeartbeatOutcome:
        group_id = group.group_id
        classic = downgrade(group, member.member_id, self.config.migration_policy, self.config.classic_max_size,
                            now_ms)
        if classic is not None:
            deadlines = [d for m in group.members for d in _cancel_timers(group_id, m)]
            entry = H.entry(group, group.group_epoch, H.MIGRATION_TO_CLASSIC, member, now_ms, classic.value.protocol,
                            left=(member.member_id,), reason=kind)
            return HeartbeatOutcome(response, self.delete_records(group_id), deadlines, classic, entry)
        records = _removal(group_id, member.member_id)
        regex = member.subscribed_topic_regex
        if regex and group.regex_members.get(regex) == 1 and regex in group.resolved_regexes:
            records.append(R.Record(R.RegexKey(group_id, regex), None))  # its last member left
        names = Counter(group.subscribed_topic_names)
        names.subtract(group.effective_names(member))
        metadata = _subscription_metadata(+names, topics)
        if metadata != group.subscription_metadata:
            records.append(R.Record(R.PartitionMetadataKey(group_id),
                                    _metadata_value(metadata)))
        records.append(R.Record(R.MetadataKey(group_id), R.MetadataValue(group.group_epoch + 1)))
        entry = H.entry(group, group.group_epoch + 1, kind, member, now_ms,
                        self.assignor_after(group, {member.member_id: None}), left=(member.member_id,))
        return HeartbeatOutcome(response, records, _cancel_timers(group_id, member.member_id), rebalance=entry)

    def expire_session(self, group_id: str, member_id: str, now_ms: int,
                       topics: Mapping[str, TopicInfo]) -> HeartbeatOutcome:
        """The member's session deadline passed: fence it (nothing if it is already gone)."""
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return HeartbeatOutcome(None)
        return self._fence(group, member, topics, None, now_ms, H.SESSION_EXPIRED)

    def expire_rebalance(self, group_id: str, member_id: str, epoch: int, now_ms: int,
                         topics: Mapping[str, TopicInfo]) -> HeartbeatOutcome:
        """The member did not revoke within its rebalance timeout: fenced if it is still at ``epoch``."""
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None or member.member_epoch != epoch:
            return HeartbeatOutcome(None)
        return self._fence(group, member, topics, None, now_ms, H.REBALANCE_TIMEOUT)

    def loaded_deadlines(self, now_ms: int) -> list[Deadline]:
        """After a load: every member's session deadline, and the rebalance deadline of those revoking."""
        out = []
        for group in self.groups.values():
            for m in group.members.values():
                out.append(Deadline("session", group.group_id, m.member_id,
                                    now_ms + self.member_session_ms(group.group_id, m)))
                if m.state is MemberState.UNREVOKED_PARTITIONS:
                    out.append(Deadline("rebalance", group.group_id, m.member_id,
                                        now_ms + m.rebalance_timeout_ms, m.member_epoch))
        return out

    def delete_records(self, group_id: str) -> list[R.Record]:
        """The tombstones that delete a group (Kafka's ConsumerGroup.createGroupTombstoneRecords, in its order:
        assignments, targets, the target epoch, members, the resolved regexes, the subscription metadata, the
        group epoch)."""
        group = self.groups.get(group_id)
        if group is None:
            return []
        members = sorted(group.members)
        targets = sorted(set(group.targets) | set(members))
        return ([R.Record(R.CurrentAssignmentKey(group_id, m), None) for m in members]
                + [R.Record(R.TargetAssignmentMemberKey(group_id, m), None) for m in targets]
                + [R.Record(R.TargetAssignmentMetadataKey(group_id), None)]
                + [R.Record(R.MemberMetadataKey(group_id, m), None) for m in members]
                + [R.Record(R.RegexKey(group_id, r), None) for r in sorted(group.resolved_regexes)]
                + [R.Record(R.PartitionMetadataKey(group_id), None), R.Record(R.MetadataKey(group_id), None)])

    # ------------------------------------------------------------ describe
    def describe(self, group_ids: Iterable[str], topic_names: Mapping[uuid.UUID, str]) -> list[dict[str, Any]]:
        out = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None:
                out.append({"error_code": int(Err.GROUP_ID_NOT_FOUND), "error_message": f"Group {group_id} not found.",
                            "group_id": group_id})
            else:
                out.append(group.describe(topic_names, self.config.assignors[0], self.config.assignors))
        return out


def _check_epoch(member: Member, epoch: int, owned: Assignment | None) -> None:
    """FENCED_MEMBER_EPOCH unless the epoch is the member's, 0 (a rejoin), or its previous epoch with a
    subset of its partitions (the response that moved it on was lost)."""
    if epoch == 0 or epoch == member.member_epoch:
        return
    if epoch > member.member_epoch:
        raise Reject(Err.FENCED_MEMBER_EPOCH, f"The consumer group member has a greater member epoch ({epoch}) "
                     f"than the one known by the group coordinator ({member.member_epoch}). The member must "
                     "abandon all its partitions and rejoin.")
    subset = owned is not None and all(t in member.assigned and ps <= member.assigned[t] for t, ps in owned.items())
    if epoch != member.previous_member_epoch or not subset:
        raise Reject(Err.FENCED_MEMBER_EPOCH, f"The consumer group member has a smaller member epoch ({epoch}) "
                     f"than the one known by the group coordinator ({member.member_epoch}). The member must "
                     "abandon all its partitions and rejoin.")


def _apply_request(member: Member, req: Mapping[str, Any], client_id: str, client_host: str) -> Member:
    """The member with the request's non-null fields applied (Kafka's maybeUpdate*)."""
    names, regex = req.get("subscribed_topic_names"), req.get("subscribed_topic_regex")
    timeout = req.get("rebalance_timeout_ms", -1)

    def pick(key: str, old: Any) -> Any:
        value = req.get(key)
        return old if value is None else value

    return member.replace(
        instance_id=pick("instance_id", member.instance_id), rack_id=pick("rack_id", member.rack_id),
        rebalance_timeout_ms=member.rebalance_timeout_ms if timeout == -1 else timeout,
        server_assignor=pick("server_assignor", member.server_assignor),
        subscribed_topic_names=member.subscribed_topic_names if names is None else canonical_names(names),
        subscribed_topic_regex=member.subscribed_topic_regex if regex is None else (regex or None),
        client_id=client_id, client_host=client_host, classic=req.get("classic"))


def _subscription_metadata(names: Mapping[str, int], topics: Mapping[str, TopicInfo]) -> dict[str, R.TopicMetadata]:
    return {n: R.TopicMetadata(topics[n].topic_id, n, topics[n].partitions) for n in sorted(names) if n in topics}


def _metadata_value(metadata: Mapping[str, R.TopicMetadata]) -> R.PartitionMetadataValue:
    """Topics in the order they are written (by topic id), so a decoded record equals the one written."""
    return R.PartitionMetadataValue(tuple(sorted(metadata.values(), key=lambda t: t.topic_id.bytes)))


def _removal(group_id: str, member_id: str) -> list[R.Record]:
    """A member's tombstones, in the order replay requires."""
    return [R.Record(R.CurrentAssignmentKey(group_id, member_id), None),
            R.Record(R.TargetAssignmentMemberKey(group_id, member_id), None),
            R.Record(R.MemberMetadataKey(group_id, member_id), None)]


def _cancel_timers(group_id: str, member_id: str) -> list[Deadline]:
    return [Deadline("session", group_id, member_id, None), Deadline("rebalance", group_id, member_id, None)]
