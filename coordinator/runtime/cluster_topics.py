"""User topics in cluster mode (issue #20): CreateTopics, DeleteTopics, auto-creation, local logs, leadership.

Rules (Apache Kafka's ZooKeeper-era broker is the spec):
- CreateTopics on any node writes the topic's replica assignment (``/brokers/topics/<t>``) and config
  (``/config/topics/<t>``) in one transaction; the controller elects each partition's leader (first live
  replica, ISR = live replicas, leader epoch 0). The replication factor is the request's, or
  ``default.replication.factor`` for -1; one larger than the live brokers is INVALID_REPLICATION_FACTOR
  (Kafka's "Replication factor: N larger than available brokers: M."), as is one below 1. Explicit
  assignments are taken as given (num_partitions and replication_factor must then be -1, INVALID_REQUEST
  otherwise; partitions numbered 0..n-1, distinct registered brokers, one size: INVALID_REPLICA_ASSIGNMENT
  otherwise). A topic in the view or whose znodes exist is TOPIC_ALREADY_EXISTS.
- The answer waits, at most ``timeout_ms``, until this node's view has a leader for every new partition
  (Kafka's DelayedCreatePartitions); past it REQUEST_TIMED_OUT (the topic is created all the same). A
  ``timeout_ms`` <= 0 answers at once.
- DeleteTopics writes ``/admin/delete_topics/<t>``; the controller deletes the znodes. The answer waits, at
  most ``timeout_ms``, until the topic has left this node's view (REQUEST_TIMED_OUT otherwise). A topic not
  in the view (or an internal one) is UNKNOWN_TOPIC_OR_PARTITION.
- Every node follows the view (``follow``, called by the member before it publishes a view): it creates the
  local logs of the partitions it is a replica of (with the topic's config from ZooKeeper), and deletes the
  local logs of a topic that was in its previous view and no longer is. Local user topics that ZooKeeper
  never named (a node's pre-cluster data, or a deletion it missed while down) are kept, logged once, and
  never served: Metadata, Produce, Fetch and ListOffsets only know the view's topics.
- ``lead_error``: Produce, Fetch (replica_id -1) and ListOffsets of a partition this node does not lead are
  NOT_LEADER_OR_FOLLOWER (Kafka's ReplicaManager), of a topic or partition the view does not have
  UNKNOWN_TOPIC_OR_PARTITION; an acks=all Produce while the ISR is below ``min.insync.replicas`` is
  NOT_ENOUGH_REPLICAS, nothing appended. Follower fetches (replica_id >= 0) go to ``replication``.
- Produce answers (``complete_produce``): acks=1 once the leader's own fsync covers the append; acks=all
  once the high watermark covers it with enough in-sync replicas (``Replication.when_replicated``, bounded
  by the request's ``timeout_ms``), else that partition's ``ReplicationError.produce_error``. Consumers read
  below the replicated high watermark (``high_watermark``), and retention deletes no local segment above
  this node's high watermark for the partition (``retention_bound``, given to ``TopicService``).
- Metadata lists the view's topics with leader, replicas, ISR and leader epoch (the same on every node);
  auto-creation (``auto.create.topics.enable``, ``num.partitions``, ``default.replication.factor``) is
  queued with the member and answered LEADER_NOT_AVAILABLE; a default replication factor above the live
  brokers is INVALID_REPLICATION_FACTOR (Kafka's KafkaApis.createTopic).
- Topic configs live in ZooKeeper (``/config/topics/<t>``). DescribeConfigs on any node answers from the
  member's copy (``configs_of``: every topic of the view, whether or not this node holds a replica), checked
  as CreateTopics checks them (a config ZooKeeper holds that this server refuses: the server's defaults,
  logged). AlterConfigs/IncrementalAlterConfigs (``alter_configs``, after configs.py's checks) write the new
  overrides through the member (version-checked, with a change notification) and are answered once
  ZooKeeper took them: 0, UNKNOWN_TOPIC_OR_PARTITION when the topic is gone, INVALID_CONFIG when the change
  does not apply to ZooKeeper's current overrides, REQUEST_TIMED_OUT (retriable) when ZooKeeper failed or
  did not answer. The writing node applies them to its logs before answering; every node applies what it
  reads while following (``follow``: the local logs' LogConfig, produce rules and ``min.insync.replicas``
  through ``TopicService.set_configs``, which keeps the local copy a restart starts from until ZooKeeper is
  read). The offsets topic's configs stay fixed (configs.py).
- CreatePartitions (Kafka's ``ZkAdminManager.createPartitions``; any node, as CreateTopics): a topic named
  twice is INVALID_REQUEST "Duplicate topic in request." (one answer); queued for deletion
  INVALID_TOPIC_EXCEPTION; unknown UNKNOWN_TOPIC_OR_PARTITION; the offsets topic INVALID_PARTITIONS (its count
  is ``offsets.topic.num.partitions``); a count that does not grow INVALID_PARTITIONS with Kafka's messages,
  more than ``MAX_PARTITIONS`` likewise. Explicit assignments: brokers must be live, one per new partition,
  non-empty, distinct, of the topic's replication factor (INVALID_REPLICA_ASSIGNMENT, Kafka's messages);
  otherwise ``assign_replicas`` places them as Kafka's ``createNewPartitionsAssignment`` does (start at the
  first broker whose id is at least partition 0's first replica; more replicas than live brokers is
  INVALID_REPLICATION_FACTOR). ``validate_only`` writes nothing. The assignment is re-checked against
  ZooKeeper's and written at its version (retried when it moved); the answer waits for the new partitions'
  leaders as CreateTopics does; a ``timeout_ms`` <= 0 answers REQUEST_TIMED_OUT at once after the write, as
  Kafka does (librdkafka hides it). Every replica creates the new local logs while following the view.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from coordinator.cluster.assignment import assign_replicas
from coordinator.cluster.metadata import topic_entry
from coordinator.cluster.state import NO_LEADER, ClusterView
from coordinator.cluster.zk import ZkError
from coordinator.core import topic_configs as tc
from coordinator.runtime.topics import _shown, topic_id, valid_topic_name
from coordinator.storage.errors import StorageError
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from coordinator.cluster.member import ClusterMember
    from coordinator.runtime.dispatch import Slot
    from coordinator.runtime.replication import Replication
    from coordinator.runtime.topics import TopicService
    from coordinator.storage.log import PartitionLog
    from protocol.codec import Request

log = logging.getLogger("groupcoord.cluster.topics")

MAX_WAIT_S = 60.0  # CreateTopics/DeleteTopics wait at most this long for the view, whatever timeout_ms says
MAX_PARTITIONS = 10_000  # a topic's partition count at most (as single-node mode's CreateTopics/CreatePartitions)


class ClusterTopics:
    def __init__(self, ts: TopicService, member: ClusterMember) -> None:
        self.ts = ts
        self.member = member
        self.config = ts.config
        self.node_id = member.node_id
        self._known: set[str] = set()  # user topics of the last view followed
        self._strays: set[str] = set()  # local topics ZooKeeper does not name (logged once)
        self._checked: dict[str, tuple[dict[str, str], dict[str, str]]] = {}  # topic -> (ZooKeeper's, checked)
        self.replication: Replication | None = None  # set by the broker
        member.on_topics = self.follow
        ts.retention_bound = self.retention_bound

    # ---------------------------------------------------------------- following the view
    def follow(self, view: ClusterView, configs: dict[str, dict[str, str]]) -> None:
        ts = self.ts
        for topic, parts in view.assignments.items():
            if topic.startswith("__"):
                continue
            overrides = self._overrides(topic, configs.get(topic, {}))
            if ts.partition_count(topic) is not None and ts.configs_of(topic) != overrides:
                self._apply_configs(topic, overrides)  # changed in ZooKeeper (or while this node was down)
            mine = {p for p, replicas in parts.items() if self.node_id in replicas}
            if not mine or all(ts.logs.get(topic, p) is not None for p in mine):
                continue
            try:
                ts.create(topic, max(mine) + 1, overrides, only=mine)
                log.info("created local logs of %s partitions %s", topic, sorted(mine))
            except (StorageError, OSError) as e:
                log.error("creating local logs of topic %s failed: %s", topic, e)
        for topic in ts.topics():
            if topic in view.assignments:
                continue
            if topic in self._known and self.member.view_complete:  # never on a half-read snapshot
                try:
                    ts.delete(topic)
                    log.info("deleted local logs of topic %s (deleted from the cluster)", topic)
                except StorageError as e:
                    log.error("deleting local logs of topic %s failed: %s", topic, e)
            elif topic not in self._strays:
                self._strays.add(topic)
                log.warning("local topic %s is not in the cluster (ZooKeeper): kept on disk, not served", topic)
        self._known = {t for t in view.assignments if not t.startswith("__")}
        for topic in [t for t in self._checked if t not in view.assignments]:
            del self._checked[topic]

    # ---------------------------------------------------------------- topic configs
    def _overrides(self, topic: str, raw: dict[str, str]) -> dict[str, str]:
        """A topic's overrides as ZooKeeper holds them, checked (cached while they stay the same); refused
        ones give the server's defaults, logged once."""
        cached = self._checked.get(topic)
        if cached is not None and cached[0] == raw:
            return cached[1]
        try:
            checked = tc.validate(raw, self.config)
        except tc.InvalidConfig as e:
            log.error("topic %s: its config in ZooKeeper is refused (%s); using the server's defaults", topic, e)
            checked = {}
        self._checked[topic] = (dict(raw), checked)
        return checked

    def _apply_configs(self, topic: str, overrides: dict[str, str]) -> None:
        try:
            self.ts.set_configs(topic, overrides)
        except (StorageError, OSError) as e:  # retried on the next view (the local copy still differs)
            log.error("applying the configs of topic %s failed: %s", topic, e)

    def configs_of(self, name: str) -> dict[str, str] | None:
        """A user topic's overrides (ZooKeeper's, checked), or None when the view has no such topic."""
        if name.startswith("__") or name not in self.member.view.assignments:
            return None
        return dict(self._overrides(name, self.member.topic_configs.get(name, {})))

    async def alter_configs(self, name: str, change: Callable[[dict[str, str]], dict[str, str]]
                            ) -> tuple[int, str | None]:
        """Write a topic's changed overrides to ZooKeeper and apply them here; (error code, message)."""
        try:
            new = await self.member.alter_topic_config(name, change)
        except tc.InvalidConfig as e:
            return ErrorCode.INVALID_CONFIG, str(e)
        except ZkError as e:
            log.warning("altering the configs of topic %s failed: %s", name, e)
            return ErrorCode.REQUEST_TIMED_OUT, f"ZooKeeper did not take the change: {e}"
        except Exception as e:  # a bug answers this resource, never takes the server down
            log.exception("altering the configs of topic %s failed", name)
            return ErrorCode.UNKNOWN_SERVER_ERROR, str(e)[:200]
        if new is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
        overrides = self._overrides(name, new)
        if self.ts.partition_count(name) is not None and self.ts.configs_of(name) != overrides:
            self._apply_configs(name, overrides)
        return 0, None

    def lead_error(self, topic: str, partition: int, fetch: dict[str, Any] | None = None, acks: int = 1) -> int:
        """0 when this node leads the partition (and may serve the request), else the error to answer."""
        view = self.member.view
        parts = view.assignments.get(topic)
        if parts is None or partition not in parts:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        leader = view.leader(topic, partition)
        if leader != self.node_id:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if acks == -1 and self.replication is not None:
            return self.replication.can_acknowledge(topic, partition)
        return 0

    def high_watermark(self, topic: str, partition: int) -> int:
        assert self.replication is not None
        return self.replication.high_watermark(topic, partition)

    def retention_bound(self, topic: str, partition: int) -> int | None:
        """The offset retention may delete a local log up to (``Replication.retention_bound``)."""
        return None if self.replication is None else self.replication.retention_bound(topic, partition)

    def handle_follower_fetch(self, req: Request, slot: Slot) -> None:
        assert self.replication is not None
        self.replication.handle_fetch(req, slot, self.ts.broker.nursery)

    def complete_produce(self, slot: Slot, body: dict[str, Any], pending: list[tuple[PartitionLog, int]], acks: int,
                         timeout_ms: int) -> None:
        """Answer a Produce (acks 1 or -1) once each appended partition is durable here (acks=1) or replicated
        (acks=all); a partition that fails gets its own error, the others their offsets."""
        replication = self.replication
        assert replication is not None
        if not pending:
            slot.complete(body)
            return
        replication.notify_append()  # followers waiting on these logs fetch what was just appended
        by_dir = {f"{t['name']}-{p['index']}": p for t in body["responses"] for p in t["partition_responses"]}
        remaining = [len(pending)]
        timeout_s = max(0, timeout_ms) / 1000

        def settle(plog: PartitionLog, err: Exception | None) -> None:
            if err is not None:
                res = by_dir.get(plog.name)
                if res is not None and res["error_code"] == 0:
                    res.update(error_code=getattr(err, "produce_error", ErrorCode.KAFKA_STORAGE_ERROR),
                               base_offset=-1, error_message=str(err)[:200])
            remaining[0] -= 1
            if remaining[0] == 0:
                slot.complete(body)
                self.ts._wake_fetchers()

        for plog, last in pending:
            def durable(err: Exception | None, plog: PartitionLog = plog, last: int = last) -> None:
                if err is not None:
                    settle(plog, err)
                    return
                required = last + 1 if acks == -1 else 0  # acks=1: this node's fsync, a live session
                replication.when_replicated(plog, required, timeout_s, lambda e: settle(plog, e))
            self.ts.commit.when_durable(plog, last, durable)

    def appended_unanswered(self, pending: list[tuple[PartitionLog, int]]) -> None:
        """An acks=0 Produce appended these: nobody waits for an answer, but followers fetch the data now
        and, once this node's fsync covers it, the high watermark may move (consumers then read it)."""
        replication = self.replication
        assert replication is not None
        replication.notify_append()
        for plog, last in pending:
            def durable(err: Exception | None, plog: PartitionLog = plog) -> None:
                if err is None:
                    replication.notify_local(plog)
            self.ts.commit.when_durable(plog, last, durable)

    # ---------------------------------------------------------------- Metadata
    def metadata_entry(self, view: ClusterView, name: str, allow_auto_create: bool, listener: str = "PLAINTEXT",
                       version: int = 12) -> dict[str, Any]:
        """A user topic's Metadata entry for a client of ``listener``, auto-creating it (queued) when asked
        and allowed."""
        if name in view.assignments:
            return topic_entry(view, name, topic_id, False, listener, version)
        unknown = {"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": name, "partitions": []}
        if (not allow_auto_create or not self.config["auto.create.topics.enable"] or not valid_topic_name(name)
                or name.startswith("__")):
            return unknown
        rf, live = self.config["default.replication.factor"], len(view.brokers)
        if rf > live:
            return {**unknown, "error_code": ErrorCode.INVALID_REPLICATION_FACTOR}
        self.member.request_topic(name, self.config["num.partitions"], rf)
        return {**unknown, "error_code": ErrorCode.LEADER_NOT_AVAILABLE}

    # ---------------------------------------------------------------- CreateTopics
    def handle_create_topics(self, req: Request, slot: Slot) -> None:
        view = self.member.view
        live = sorted(view.brokers)
        results: list[dict[str, Any]] = []
        to_create: list[tuple[dict[str, Any], dict[int, tuple[int, ...]], dict[str, str]]] = []
        names = [t["name"] for t in req.body["topics"]]
        repeated = {n for n in names if names.count(n) > 1}
        for name in sorted(repeated, key=names.index):
            results.append({"name": name, "topic_id": topic_id(name), "error_code": ErrorCode.INVALID_REQUEST,
                            "error_message": "Duplicate topic name.", "num_partitions": -1,
                            "replication_factor": -1, "configs": None})
        for t in req.body["topics"]:
            name = t["name"]
            if name in repeated:
                continue
            res: dict[str, Any] = {"name": name, "topic_id": topic_id(name), "error_code": 0,
                                   "error_message": None, "num_partitions": -1, "replication_factor": -1,
                                   "configs": None}
            results.append(res)
            overrides: dict[str, str] = {}
            replicas, problem = self._replicas(t, live)
            if not valid_topic_name(name) or name.startswith("__"):
                problem = (ErrorCode.INVALID_TOPIC_EXCEPTION, f"illegal name {_shown(name)}")
            elif name in view.assignments:
                problem = (ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
            elif problem is None and (bad := self.ts._check_new_configs(t["configs"], overrides)) is not None:
                problem = (ErrorCode.INVALID_CONFIG, bad)
            if problem is not None:
                res.update(error_code=problem[0], error_message=problem[1])
                continue
            res.update(num_partitions=len(replicas), replication_factor=len(replicas[0]))
            if req.version >= 5:
                res["configs"] = [{k: e[k] for k in ("name", "value", "read_only", "config_source", "is_sensitive")}
                                  for e in tc.describe_entries(overrides, self.config, self.ts.server_is_set,
                                                               None, False, False)]
            if not req.body.get("validate_only"):
                to_create.append((res, replicas, overrides))
        if not to_create:
            slot.complete({"throttle_time_ms": 0, "topics": results})
            return
        timeout_s = min(MAX_WAIT_S, max(0, req.body.get("timeout_ms", 60000)) / 1000)
        self.ts.broker.nursery.start_soon(self._create, slot, results, to_create, timeout_s)

    def _replicas(self, t: dict[str, Any], live: list[int]
                  ) -> tuple[dict[int, tuple[int, ...]], tuple[int, str] | None]:
        """The new topic's replica assignment, or the error refusing it."""
        n, rf, given = t["num_partitions"], t["replication_factor"], t["assignments"]
        if given:
            if n != -1 or rf != -1:
                return {}, (ErrorCode.INVALID_REQUEST, "Both numPartitions or replicationFactor and "
                            "replicasAssignments were set. Both cannot be used at the same time.")
            replicas = {a["partition_index"]: tuple(a["broker_ids"]) for a in given}
            sizes = {len(r) for r in replicas.values()}
            if sorted(replicas) != list(range(len(replicas))) or len(replicas) != len(given):
                return {}, (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                            "partitions should be a consecutive 0-based integer sequence")
            if len(sizes) != 1 or 0 in sizes or any(len(set(r)) != len(r) for r in replicas.values()):
                return {}, (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                            "every partition needs the same number of distinct replicas")
            unknown = sorted({b for r in replicas.values() for b in r} - set(live))
            if unknown:
                return {}, (ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Unknown broker(s) in replica assignment: "
                            f"{', '.join(map(str, unknown))}.")
            return replicas, None
        if n == -1:
            n = self.config["num.partitions"]
        if rf == -1:
            rf = self.config["default.replication.factor"]
        if n <= 0 or n > 10_000:
            return {}, (ErrorCode.INVALID_PARTITIONS, f"bad partition count {n}")
        if rf <= 0:
            return {}, (ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
        if rf > len(live):
            return {}, (ErrorCode.INVALID_REPLICATION_FACTOR,
                        f"Replication factor: {rf} larger than available brokers: {len(live)}.")
        return assign_replicas(live, n, rf, start_index=random.randrange(len(live))), None

    async def _create(self, slot: Slot, results: list[dict[str, Any]],
                      to_create: list[tuple[dict[str, Any], dict[int, tuple[int, ...]], dict[str, str]]],
                      timeout_s: float) -> None:
        created: list[tuple[str, dict[int, tuple[int, ...]]]] = []
        for res, replicas, overrides in to_create:
            try:
                ok = await self.member.create_user_topic(res["name"], replicas, overrides)
            except Exception as e:  # a ZooKeeper fault answers this topic, never the server
                log.warning("creating topic %s failed: %s", res["name"], e)
                ok = None
            if ok:
                created.append((res["name"], replicas))
                continue
            code = ErrorCode.TOPIC_ALREADY_EXISTS if ok is False else ErrorCode.REQUEST_TIMED_OUT
            res.update(error_code=code, num_partitions=-1, replication_factor=-1, configs=None,
                       error_message=f"Topic '{res['name']}' already exists." if ok is False
                       else "ZooKeeper did not take the topic")

        def led(view: ClusterView) -> bool:
            return all(view.assignments.get(name) is not None and view.leader(name, p) != NO_LEADER
                       for name, replicas in created for p in replicas)

        if created and timeout_s > 0 and not await self.member.wait_view(led, timeout_s):
            for res in results:
                if any(res["name"] == name for name, _ in created):
                    res.update(error_code=ErrorCode.REQUEST_TIMED_OUT,
                               error_message="the topic was created; its leaders were not elected in time")
        if not slot.done:
            slot.complete({"throttle_time_ms": 0, "topics": results})

    # ---------------------------------------------------------------- DeleteTopics
    def handle_delete_topics(self, req: Request, slot: Slot) -> None:
        view = self.member.view
        if req.version >= 6:
            names = [t["name"] for t in req.body["topics"]]
        else:
            names = list(req.body["topic_names"])
        by_id = {topic_id(n): n for n in view.assignments if not n.startswith("__")}
        out: list[dict[str, Any]] = []
        doomed: list[str] = []
        for i, name in enumerate(names):
            if name is None and req.version >= 6:
                name = by_id.get(req.body["topics"][i]["topic_id"])
            res: dict[str, Any] = {"name": name, "topic_id": topic_id(name) if name else None, "error_code": 0}
            if name is None or name.startswith("__") or name not in view.assignments:
                res.update(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                           error_message="This server does not host this topic-partition.")
            elif name not in doomed:
                doomed.append(name)
            out.append(res)
        if not doomed:
            slot.complete({"throttle_time_ms": 0, "responses": out})
            return
        timeout_s = min(MAX_WAIT_S, max(0, req.body.get("timeout_ms", 30000)) / 1000)
        self.ts.broker.nursery.start_soon(self._delete, slot, out, doomed, timeout_s)

    async def _delete(self, slot: Slot, out: list[dict[str, Any]], doomed: list[str], timeout_s: float) -> None:
        marked = []
        for name in doomed:
            try:
                await self.member.delete_topic(name)
                marked.append(name)
            except Exception as e:  # a ZooKeeper fault answers this topic, never the server
                log.warning("deleting topic %s failed: %s", name, e)
                for res in out:
                    if res["name"] == name:
                        res.update(error_code=ErrorCode.REQUEST_TIMED_OUT, error_message=str(e))

        def gone(view: ClusterView) -> bool:
            return not any(name in view.assignments for name in marked)

        if marked and timeout_s > 0 and not await self.member.wait_view(gone, timeout_s):
            for res in out:
                if res["name"] in marked and not res["error_code"]:
                    res.update(error_code=ErrorCode.REQUEST_TIMED_OUT,
                               error_message="the topic is marked for deletion; it was not deleted in time")
        if not slot.done:
            slot.complete({"throttle_time_ms": 0, "responses": out})

    # ---------------------------------------------------------------- CreatePartitions
    def handle_create_partitions(self, req: Request, slot: Slot) -> None:
        view = self.member.view
        live = sorted(view.brokers)
        counts = Counter(t["name"] for t in req.body["topics"])
        results: list[dict[str, Any]] = [
            {"name": n, "error_code": ErrorCode.INVALID_REQUEST, "error_message": "Duplicate topic in request."}
            for n, c in counts.items() if c > 1]
        to_grow: list[tuple[dict[str, Any], dict[str, Any]]] = []
        for t in req.body["topics"]:
            name = t["name"]
            if counts[name] > 1:
                continue
            res: dict[str, Any] = {"name": name, "error_code": 0, "error_message": None}
            results.append(res)
            if name in self.member.deleting:
                problem: tuple[int, str] | None = (ErrorCode.INVALID_TOPIC_EXCEPTION, "The topic is queued for deletion.")
            else:
                problem = self._new_partitions(name, t, view.assignments.get(name), live)[1]
            if problem is not None:
                res.update(error_code=problem[0], error_message=problem[1])
            elif not req.body.get("validate_only"):
                to_grow.append((res, t))
        if not to_grow:
            slot.complete({"throttle_time_ms": 0, "results": results})
            return
        timeout_ms = req.body.get("timeout_ms", 30000)
        timeout_s = min(MAX_WAIT_S, max(0, timeout_ms) / 1000)
        self.ts.broker.nursery.start_soon(self._grow, slot, results, to_grow, timeout_s)

    def _new_partitions(self, name: str, t: dict[str, Any], existing: dict[int, tuple[int, ...]] | None,
                        live: list[int]) -> tuple[dict[int, tuple[int, ...]], tuple[int, str] | None]:
        """The new partitions' replicas for growing ``existing`` as ``t`` asks, or the error refusing it."""
        none: dict[int, tuple[int, ...]] = {}
        if name == self.member.offsets_topic:
            return none, (ErrorCode.INVALID_PARTITIONS, f"The partition count of {name} is fixed by "
                          "offsets.topic.num.partitions.")
        if existing is None or name.startswith("__"):
            return none, (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic {_shown(name)} does not exist.")
        old, count = len(existing), t["count"]
        if count < old:
            return none, (ErrorCode.INVALID_PARTITIONS, f"Topic currently has {old} partitions, which is higher "
                          f"than the requested {count}.")
        if count == old:
            return none, (ErrorCode.INVALID_PARTITIONS, f"Topic already has {old} partitions.")
        if count > MAX_PARTITIONS:
            return none, (ErrorCode.INVALID_PARTITIONS, f"Topic {name} may have at most {MAX_PARTITIONS} "
                          f"partitions; {count} is too many.")
        added = count - old
        first = existing.get(0) or existing[min(existing)]
        rf = len(first)
        given = t["assignments"]
        if given is None:
            if rf > len(live):
                return none, (ErrorCode.INVALID_REPLICATION_FACTOR,
                              f"Replication factor: {rf} larger than available brokers: {len(live)}.")
            start = next((i for i, b in enumerate(live) if b >= first[0]), 0)
            return assign_replicas(live, added, rf, start_index=start, first_partition=old), None
        lists = [tuple(a["broker_ids"]) for a in given]
        unknown = sorted({b for r in lists for b in r} - set(live))
        bad = ErrorCode.INVALID_REPLICA_ASSIGNMENT
        if unknown:
            return none, (bad, f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}.")
        if len(lists) != added:
            return none, (bad, f"Increasing the number of partitions by {added} but {len(lists)} assignments "
                          "provided.")
        replicas = {old + i: r for i, r in enumerate(lists)}
        for p, r in replicas.items():
            if not r:
                return none, (bad, f"Cannot have replication factor of 0 for partition id {p}.")
            if len(set(r)) != len(r):
                return none, (bad, f"Duplicate brokers not allowed in replica assignment: "
                              f"{', '.join(map(str, r))} for partition id {p}.")
        wrong = [(p, len(r)) for p, r in replicas.items() if len(r) != rf]
        if wrong:
            return none, (bad, f"Inconsistent replication factor between partitions, partition 0 has {rf} while "
                          f"partitions [{', '.join(str(p) for p, _ in wrong)}] have replication factors "
                          f"[{', '.join(str(n) for _, n in wrong)}], respectively.")
        return replicas, None

    async def _grow(self, slot: Slot, results: list[dict[str, Any]],
                    to_grow: list[tuple[dict[str, Any], dict[str, Any]]], timeout_s: float) -> None:
        grown: list[tuple[str, list[int]]] = []
        for res, t in to_grow:
            try:
                problem, added = await self._grow_one(t)
            except (ZkError, ValueError) as e:  # a ZooKeeper fault answers this topic, never the server
                log.warning("growing topic %s failed: %s", t["name"], e)
                problem, added = (ErrorCode.REQUEST_TIMED_OUT, f"ZooKeeper did not take the partitions: {e}"), []
            except Exception as e:  # a bug answers this topic, never takes the server down
                log.exception("growing topic %s failed", t["name"])
                problem, added = (ErrorCode.UNKNOWN_SERVER_ERROR, str(e)[:200]), []
            if problem is not None:
                res.update(error_code=problem[0], error_message=problem[1])
            else:
                grown.append((t["name"], added))

        def led(view: ClusterView) -> bool:
            return all(view.leader(name, p) != NO_LEADER for name, added in grown for p in added)

        if grown and (timeout_s <= 0 or not await self.member.wait_view(led, timeout_s)):
            for res in results:
                if any(res["name"] == name for name, _ in grown):
                    res.update(error_code=ErrorCode.REQUEST_TIMED_OUT, error_message=None if timeout_s <= 0 else
                               "the partitions were created; their leaders were not elected in time")
        if not slot.done:
            slot.complete({"throttle_time_ms": 0, "results": results})

    async def _grow_one(self, t: dict[str, Any]) -> tuple[tuple[int, str] | None, list[int]]:
        """Check ``t`` against ZooKeeper's assignment and write the grown one at its version (read again
        when another write moved it): (error, new partitions)."""
        name = t["name"]
        for _ in range(3):
            current = await self.member.topic_assignment(name)
            replicas, problem = self._new_partitions(name, t, None if current is None else current[0],
                                                     sorted(self.member.view.brokers))
            if problem is not None:
                return problem, []
            assert current is not None
            if await self.member.set_topic_assignment(name, {**current[0], **replicas}, current[1]):
                return None, sorted(replicas)
        return (ErrorCode.REQUEST_TIMED_OUT, f"the assignment of topic {name} kept changing"), []
