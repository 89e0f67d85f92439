"""Hosted topics: CreateTopics, DeleteTopics, Produce, Fetch (long-poll), ListOffsets (transactions.py serves
InitProducerId; txn_partitions.py the partitions' side of transactions).

Rules:
- A topic is the set of its partition directories in the data dir (``<topic>-<p>``); the partition count is
  derived from them, so topics survive restarts without a separate catalogue. Internal topics (names
  starting with ``__``) are never listed, created or deleted through these APIs.
- Produce stores each v2 batch verbatim with only its base offset rewritten; a bad CRC is CORRUPT_MESSAGE, a
  batch over ``message.max.bytes`` is MESSAGE_TOO_LARGE, a non-v2 batch UNSUPPORTED_FOR_MESSAGE_FORMAT; in
  all those cases nothing of that partition's data is appended. The response (acks 1 or all) is released only
  after the fsync covering the append; acks=0 gets no response. Versions 0-2 are refused per partition.
- ``__consumer_offsets`` is readable through Fetch and ListOffsets like any topic (internal_topics.py); other
  ``__`` names answer as unknown.
- Fetch v13+ names topics by id (topic_ids.py).
- Fetch returns stored bytes below the high watermark (durable data only), LSO = high watermark, no aborted
  transactions, no fetch sessions (session id 0). It long-polls: it answers when ``min_bytes`` are available
  or ``max_wait_ms`` has passed, waking whenever a flush advances a high watermark.
- Zero-copy (zero_copy.py): on a connection whose ``zero_copy`` is true (a socket without TLS) each
  partition's stored bytes of at least ``zero_copy.MIN_RANGE`` are read as a file range
  (``PartitionLog.read_range``) and the answer is encoded as parts (``zero_copy.encode_answer``); the
  connection sends them by ``sendfile``. The same bytes as ``read`` gives, so every rule above holds alike
  (limits, the first batch whole, the bounds, errors). A look that does not answer (a delayed fetch still
  short of ``min_bytes``) releases its ranges; a closed connection, or one with TLS, gets bytes.
- Topic names: 1-249 characters of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``.
- Topic configs (``coordinator.core.topic_configs``): CreateTopics' ``configs`` are checked as Kafka checks
  them (INVALID_CONFIG naming the key, nothing created), stored with the topic (``TopicConfigStore``: written
  before the partitions, removed after them) and applied: each partition's ``LogConfig`` and the topic's
  produce ``Rules`` (one dict lookup per topic on the produce path) come from the topic's effective values.
  A name given twice in one CreateTopics request is INVALID_REQUEST ("Duplicate topic name."), and nothing
  of it is created. Altering configs applies them live (``set_configs``).
- Cluster mode (``broker.cluster`` set; ``coordinator.runtime.cluster_topics``): CreateTopics, DeleteTopics
  and CreatePartitions go to ``self.cluster``; Produce, Fetch and ListOffsets answer NOT_LEADER_OR_FOLLOWER
  for a partition this node does not lead (``self.cluster.lead_error``); follower fetches (replica_id >= 0),
  acks=all answers and the high watermark consumers read below are replication's (``ClusterTopics``).
  Single-node mode never takes these branches.
- Retention (``retention_loop``, every ``log.retention.check.interval.ms``): each user log's
  ``PartitionLog.apply_retention``, which deletes no segment above a high watermark (Kafka's
  ``deletableSegments``; the active segment too once it is wholly below): in single-node mode the log's own
  durable end; in cluster mode the bound ``retention_bound`` gives (``ClusterTopics`` sets it: a leader's
  replicated high watermark, a follower's own).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from coordinator.config import BY_NAME as SERVER_KEYS
from coordinator.core import topic_configs as tc
from coordinator.runtime import internal_topics, zero_copy
from coordinator.runtime.rate_limited_log import RateLimitedLog
from coordinator.runtime.topic_ids import TopicIds, stamp_fetch
from coordinator.runtime.txn_partitions import TxnPartitions, Verify, check_transactional, read_committed_view
from coordinator.storage.errors import LogOfflineError, OffsetOutOfRangeError, StorageError
from coordinator.storage.log import LogConfig, PartitionLog
from coordinator.storage.manager import LogManager
from coordinator.storage.producer_state import Duplicate, ProducerStates, scan_producer_states
from coordinator.storage.topic_config_store import FileTopicConfigStore, TopicConfigStore
from coordinator.storage_errors import StartupError
from protocol.compression import NAMES as CODECS
from protocol.errors import ErrorCode
from protocol.messages.fetch import empty_partition
from protocol.produce_validation import (
    Checked,
    Refusal,
    Rules,
    recompress,
    stamp_log_append_time,
    validate_produce,
)
from protocol.record_batch import CorruptBatchError

if TYPE_CHECKING:
    from coordinator.runtime.dispatch import Slot
    from coordinator.runtime.group_commit import GroupCommit
    from coordinator.runtime.services import ReplicatedTopics, ServerContext
    from protocol.codec import Request

log = logging.getLogger("groupcoord.topics")

_LEGAL = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_NO_LIMIT = 2**63 - 1  # Kafka's Long.MAX_VALUE: no timestamp limit
_TOPIC_NS = uuid.UUID("6ba7b812-9dad-11d1-80b4-00c04fd430c8")


def _shown(name: str | None) -> str:
    """A client-given name as an error message may quote it: repr'd and cut to 100 characters (a string
    field holds at most 32767 bytes, and a log line should stay a line)."""
    text = repr(name)
    return text if len(text) <= 100 else text[:97] + "..."


def valid_topic_name(name: str | None) -> bool:
    return bool(name) and name not in (".", "..") and bool(_LEGAL.match(name or ""))


def topic_id(name: str) -> uuid.UUID:
    return uuid.uuid5(_TOPIC_NS, name)


def legacy_offsets(segments: list[tuple[int, int]], log_start: int, end: int, timestamp: int,
                   max_num: int, now_ms: int) -> list[int]:
    """ListOffsets v0's ``old_style_offsets`` (Kafka's UnifiedLog.legacyFetchOffsetsBefore): one entry per
    segment (its base offset, at least the log start; its time) plus (end, now) when the last segment holds
    records; latest (-1) starts from the last entry, earliest (-2) from the first, a timestamp from the last
    entry not newer than it; up to ``max_num`` offsets from there back, newest first. A segment's time is
    its newest record's timestamp (Kafka used the file's mtime: the time of its last append)."""
    entries = [(max(base, log_start), ts) for base, ts in segments]
    if segments and end > segments[-1][0]:
        entries.append((end, now_ms))
    if timestamp == -1:
        start = len(entries) - 1
    elif timestamp == -2:
        start = 0 if entries else -1
    else:
        start = len(entries) - 1
        while start >= 0 and entries[start][1] > timestamp:
            start -= 1
    count = max(0, min(max_num, start + 1))
    return sorted((entries[start - j][0] for j in range(count)), reverse=True)


def user_topic_log_config(config: Any, overrides: dict[str, str] | None = None) -> LogConfig:
    """A user topic's LogConfig from its overrides, else the server keys (log.retention.ms, ...); -1 retention
    means unlimited, as does the largest max.compaction.lag.ms."""
    return log_config_of(tc.effective(overrides or {}, config))


def log_config_of(v: dict[str, Any]) -> LogConfig:
    ret, size, max_lag = v["retention.ms"], v["retention.bytes"], v["max.compaction.lag.ms"]
    return LogConfig(segment_bytes=v["segment.bytes"], retention_ms=None if ret < 0 else ret,
                     retention_bytes=None if size < 0 else size, compact="compact" in v["cleanup.policy"],
                     delete="delete" in v["cleanup.policy"], delete_retention_ms=v["delete.retention.ms"],
                     segment_ms=v["segment.ms"], min_compaction_lag_ms=v["min.compaction.lag.ms"],
                     max_compaction_lag_ms=None if max_lag >= tc.LONG_MAX else max_lag,
                     min_cleanable_dirty_ratio=v["min.cleanable.dirty.ratio"])


def produce_rules_of(v: dict[str, Any], version: int) -> Rules:
    before, after = v["message.timestamp.before.max.ms"], v["message.timestamp.after.max.ms"]
    codec = v["compression.type"]
    return Rules(max_batch_bytes=v["max.message.bytes"], produce_version=version,
                 log_append_time=v["message.timestamp.type"] == "LogAppendTime",
                 timestamp_before_max_ms=None if before >= _NO_LIMIT else before,
                 timestamp_after_max_ms=None if after >= _NO_LIMIT else after,
                 compacted="compact" in v["cleanup.policy"],
                 target_codec=None if codec == "producer" else CODECS["none" if codec == "uncompressed" else codec])


def _ranges_for(slot: Slot) -> bool:
    """Whether a Fetch answer on ``slot``'s connection may carry file ranges (zero_copy.py)."""
    conn = slot.conn
    return getattr(conn, "zero_copy", False) and not conn.closed and not slot.done


def _complete_fetch(slot: Slot, resp: dict[str, Any], ranges: bool) -> None:
    """Answer a Fetch: as parts when its records may be file ranges (released if the slot is done already)."""
    if not ranges:
        slot.complete(resp)
    elif slot.done:
        zero_copy.release_body(resp)
    else:
        slot.complete(resp, zero_copy.encode_answer)


class TopicService:
    def __init__(self, broker: ServerContext, logs: LogManager, commit: GroupCommit,
                 store: TopicConfigStore | None = None) -> None:
        self.broker = broker
        self.config = broker.config
        self.logs = logs
        self.commit = commit
        self.store: TopicConfigStore = store or FileTopicConfigStore(self.config["data.dir"])
        self._overrides: dict[str, dict[str, str]] = {}  # topic -> its config overrides (normalised)
        self._effective: dict[str, dict[str, Any]] = {}  # topic -> every key's effective value (cache)
        self._rules: dict[tuple[str, int], Rules] = {}  # (topic, produce version) -> rules (cache)
        self.hw_advanced = trio.Event()
        self._producers: weakref.WeakKeyDictionary[PartitionLog, ProducerStates] = weakref.WeakKeyDictionary()
        self.refused_batches = 0
        self._refusal_log = RateLimitedLog(log, 5.0)
        # topic -> partition count: scanned once, then kept by create()/delete() (per-request lookups)
        self._counts: dict[str, int] = {}
        self.catalogue_version = 0  # bumped whenever _counts changes (consumer heartbeat leases hold while it holds)
        for topic, part in logs.partitions():
            if not topic.startswith("__"):
                self._counts[topic] = max(self._counts.get(topic, 0), part + 1)
        self._load_configs()
        self.cluster: ReplicatedTopics | None = None  # cluster mode (#20): set by the broker
        # (topic, partition) -> the offset retention may delete up to; None: the log's own high watermark.
        # Cluster mode: set by ClusterTopics (the replicated high watermark)
        self.retention_bound: Callable[[str, int], int | None] = lambda _topic, _partition: None
        self.topic_ids = TopicIds(self._known_names, topic_id)  # Fetch v13+ (topic_ids.py)
        self.offsets_tail = internal_topics.TailWatcher(self._offsets_high_watermarks, self._wake_fetchers)
        self.txn = TxnPartitions(self)  # transactions at the partitions (txn_partitions.py)
        # the transaction coordinator's KIP-890 check (transactions.py); None: transactions are not served
        self.verify_txn: Verify | None = None

    def _known_names(self) -> list[str]:
        cluster = self.broker.cluster
        if cluster is not None:
            return list(cluster.view.assignments)
        return [*self._counts, internal_topics.OFFSETS_TOPIC]

    def _replicated_hw(self, topic: str, part: dict[str, Any]) -> int | None:
        """Cluster mode: the high watermark consumers read below (replication's); None in single-node mode."""
        return None if self.cluster is None else self.cluster.high_watermark(topic, part["partition_index"])

    def _offsets_high_watermarks(self) -> list[int]:
        """The offsets partitions' high watermarks as Fetch reads below them (internal_topics.TailWatcher)."""
        name, count = internal_topics.OFFSETS_TOPIC, self.config["offsets.topic.num.partitions"]
        if self.cluster is not None:
            return [self.cluster.high_watermark(name, p) for p in range(count)]
        get = self.logs.get
        return [plog.high_watermark for p in range(count) if (plog := get(name, p)) is not None]

    def _load_configs(self) -> None:
        """Read every topic's stored overrides, check them, and apply them to the open logs; a stored file
        that does not hold valid configs stops the server (see topic_config_store)."""
        try:
            stored = self.store.load_all()
        except StorageError as e:
            raise StartupError(str(e)) from None
        for topic, overrides in stored.items():
            if topic not in self._counts:  # a crash between writing the configs and creating partitions
                log.warning("removing the configs of topic %s, which has no partitions", topic)
                self.store.remove(topic)
                continue
            try:
                self._overrides[topic] = tc.validate(overrides, self.config)
            except tc.InvalidConfig as e:
                where = getattr(self.store, "path", lambda t: t)(topic)
                raise StartupError(f"topic config file {where}: {e}; repair or delete it") from None
            self._apply(topic)

    # ---------------------------------------------------------------- configs
    def configs_of(self, name: str) -> dict[str, str] | None:
        """A topic's overrides, or None if there is no such topic."""
        return dict(self._overrides.get(name, {})) if name in self._counts else None

    def effective(self, name: str) -> dict[str, Any]:
        """Every key's effective value for topic ``name``; cached for existing topics only (a name a client
        made up must not grow the cache)."""
        v = self._effective.get(name)
        if v is None:
            v = tc.effective(self._overrides.get(name, {}), self.config)
            if name in self._counts:
                self._effective[name] = v
        return v

    def server_is_set(self, key: str) -> bool:
        """Whether the server's setting differs from its default (Kafka: STATIC_BROKER_CONFIG)."""
        k = SERVER_KEYS.get(key)
        return k is not None and self.config[key] != k.default

    def set_configs(self, name: str, overrides: dict[str, str]) -> None:
        """Persist a topic's new (checked) overrides and apply them at once. Cluster mode calls it with the
        overrides ZooKeeper holds (``ClusterTopics``): the file is then the local copy a restart starts from."""
        if overrides:
            self.store.save(name, overrides)
        else:
            self.store.remove(name)
        old = self._overrides.get(name, {})
        self._overrides[name] = dict(overrides)
        self._apply(name)
        changed = sorted(k for k in set(old) | set(overrides) if old.get(k) != overrides.get(k))
        log.info("topic %s configs changed: %s", name, ", ".join(f"{k}={overrides.get(k, '(default)')}"
                                                                for k in changed) or "nothing")

    def _apply(self, name: str) -> None:
        self._effective.pop(name, None)
        for key in [k for k in self._rules if k[0] == name]:
            del self._rules[key]
        lc = self.log_config(name)
        self.logs.topic_configs[name] = lc
        for p in range(self._counts.get(name, 0)):
            plog = self.logs.get(name, p)
            if plog is not None:
                plog.config = lc

    def _forget(self, name: str) -> None:
        self._overrides.pop(name, None)
        self._effective.pop(name, None)
        self.logs.topic_configs.pop(name, None)
        for key in [k for k in self._rules if k[0] == name]:
            del self._rules[key]

    # ---------------------------------------------------------------- catalogue
    def topics(self) -> dict[str, int]:
        """A copy of the catalogue (callers may edit it)."""
        return dict(self._counts)

    def partition_count(self, name: str) -> int | None:
        return self._counts.get(name)

    def log_config(self, name: str | None = None) -> LogConfig:
        return log_config_of(self.effective(name)) if name is not None else user_topic_log_config(self.config)

    def create(self, name: str, partitions: int, overrides: dict[str, str] | None = None,
               only: set[int] | None = None) -> None:
        """Create a topic (or grow one) with checked ``overrides``; they are stored before any partition.
        ``only`` (cluster mode): create just these partitions (the ones this node is a replica of)."""
        if name not in self._counts:
            self._forget(name)
            if overrides:
                self.store.save(name, overrides)
                self._overrides[name] = dict(overrides)
                unused = tc.not_acted_on(overrides)
                if unused:
                    log.info("topic %s: configs stored and reported but not acted on: %s", name, ", ".join(unused))
        lc = self.log_config(name)
        self.logs.topic_configs[name] = lc
        for p in range(partitions):
            if self.logs.get(name, p) is None and (only is None or p in only):
                self.logs.create(name, p, lc)
                self._counts[name] = max(self._counts.get(name, 0), p + 1)
                self.catalogue_version += 1

    def delete(self, name: str) -> None:
        count = self._counts.pop(name, 0)
        self.catalogue_version += 1
        for p in range(count):
            if self.logs.get(name, p) is not None:  # cluster mode: a node holds only its replicas
                self.logs.delete(name, p)
        self._forget(name)
        self.store.remove(name)

    def auto_create(self, name: str) -> bool:
        if not self.config["auto.create.topics.enable"] or not valid_topic_name(name) or name.startswith("__"):
            return False
        self.create(name, self.config["num.partitions"])
        log.info("auto-created topic %s with %d partitions", name, self.config["num.partitions"])
        return True

    # ---------------------------------------------------------------- CreateTopics / DeleteTopics
    def handle_create_topics(self, req: Request, slot: Slot) -> None:
        if self.cluster is not None:
            self.cluster.handle_create_topics(req, slot)
            return
        existing = self.topics()
        results = []
        names = [t["name"] for t in req.body["topics"]]
        repeated = {n for n in names if names.count(n) > 1}
        for name in sorted(repeated, key=names.index):  # Kafka: one answer per repeated name, nothing created
            results.append({"name": name, "topic_id": topic_id(name), "error_code": ErrorCode.INVALID_REQUEST,
                            "error_message": "Duplicate topic name.", "num_partitions": -1,
                            "replication_factor": -1, "configs": None})
        for t in req.body["topics"]:
            name, n = t["name"], t["num_partitions"]
            if name in repeated:
                continue
            if n == -1:
                n = len(t["assignments"]) or self.config["num.partitions"]
            res: dict[str, Any] = {"name": name, "topic_id": topic_id(name), "error_code": 0,
                                   "error_message": None, "num_partitions": n, "replication_factor": 1,
                                   "configs": None}
            overrides: dict[str, str] = {}
            if not valid_topic_name(name) or name.startswith("__"):
                res.update(error_code=ErrorCode.INVALID_TOPIC_EXCEPTION, error_message=f"illegal name {_shown(name)}")
            elif name in existing:
                res.update(error_code=ErrorCode.TOPIC_ALREADY_EXISTS, error_message=f"topic {name} exists")
            elif n <= 0 or n > 10_000:
                res.update(error_code=ErrorCode.INVALID_PARTITIONS, error_message=f"bad partition count {n}")
            elif t["replication_factor"] not in (-1, 1):
                res.update(error_code=ErrorCode.INVALID_REPLICATION_FACTOR,
                           error_message="a single node holds one replica")
            elif (bad := self._check_new_configs(t["configs"], overrides)) is not None:
                res.update(error_code=ErrorCode.INVALID_CONFIG, error_message=bad)
            elif not req.body.get("validate_only"):
                try:
                    self.create(name, n, overrides)
                    existing[name] = n
                except (StorageError, OSError) as e:
                    res.update(error_code=ErrorCode.KAFKA_STORAGE_ERROR, error_message=str(e))
            if res["error_code"]:
                res.update(num_partitions=-1, replication_factor=-1)
            elif req.version >= 5:
                res["configs"] = [{k: e[k] for k in ("name", "value", "read_only", "config_source", "is_sensitive")}
                                  for e in tc.describe_entries(overrides, self.config, self.server_is_set, None,
                                                               False, False)]
            results.append(res)
        slot.complete({"throttle_time_ms": 0, "topics": results})

    def _check_new_configs(self, given: list[dict[str, Any]], out: dict[str, str]) -> str | None:
        """Fill ``out`` with CreateTopics' checked ``configs``; the reason they are refused, or None."""
        nulls = [c["name"] for c in given if c["value"] is None]
        if nulls:
            return f"Null value not supported for topic configs: {','.join(map(str, nulls))}"
        try:
            out.update(tc.validate({c["name"]: c["value"] for c in given}, self.config))
        except tc.InvalidConfig as e:
            return str(e)
        return None

    def handle_delete_topics(self, req: Request, slot: Slot) -> None:
        if self.cluster is not None:
            self.cluster.handle_delete_topics(req, slot)
            return
        if req.version >= 6:
            names = [t["name"] for t in req.body["topics"]]
        else:
            names = list(req.body["topic_names"])
        existing = self.topics()
        by_id = {topic_id(n): n for n in existing}
        out = []
        for i, name in enumerate(names):
            if name is None and req.version >= 6:
                name = by_id.get(req.body["topics"][i]["topic_id"])
            res: dict[str, Any] = {"name": name, "topic_id": topic_id(name) if name else None, "error_code": 0}
            if name is None or name not in existing:
                res.update(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                           error_message="This server does not host this topic-partition.")
            else:
                try:
                    self.delete(name)
                except StorageError as e:
                    log.error("deleting topic %s failed: %s", name, e)
                    res.update(error_code=ErrorCode.KAFKA_STORAGE_ERROR, error_message=str(e))
                existing.pop(name)
            out.append(res)
        slot.complete({"throttle_time_ms": 0, "responses": out})

    def handle_create_partitions(self, req: Request, slot: Slot) -> None:
        if self.cluster is not None:
            self.cluster.handle_create_partitions(req, slot)
            return
        existing = self.topics()
        results = []
        for t in req.body["topics"]:
            name, count = t["name"], t["count"]
            res: dict[str, Any] = {"name": name, "error_code": 0, "error_message": None}
            have = existing.get(name)
            if have is None:
                res.update(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, error_message=f"no topic {_shown(name)}")
            elif count <= have or count > 10_000:
                res.update(error_code=ErrorCode.INVALID_PARTITIONS,
                           error_message=f"topic {name} has {have} partitions; {count} is not an increase")
            elif not req.body.get("validate_only"):
                try:
                    self.create(name, count)
                    log.info("topic %s grew from %d to %d partitions", name, have, count)
                except (StorageError, OSError) as e:
                    res.update(error_code=ErrorCode.KAFKA_STORAGE_ERROR, error_message=str(e))
            results.append(res)
        slot.complete({"throttle_time_ms": 0, "results": results})

    # ---------------------------------------------------------------- Produce
    def produce_rules(self, version: int, name: str | None = None) -> Rules:
        """The produce rules of a topic (server defaults for None); cached per (topic, version)."""
        if name is None:
            return produce_rules_of(tc.effective({}, self.config), version)
        rules = produce_rules_of(self.effective(name), version)
        if name in self._counts:
            self._rules[(name, version)] = rules
        return rules

    def handle_produce(self, req: Request, slot: Slot) -> None:
        acks = req.body["acks"]
        now_ms = int(time.time() * 1000)
        checked: list[tuple[dict[str, Any], PartitionLog, Checked, memoryview, Rules]] = []
        responses = []
        version = req.version
        for t in req.body["topic_data"]:
            name = t["name"]
            parts_out = []
            count = self.partition_count(name)
            rules = (self._rules.get((name, version)) or self.produce_rules(version, name)) if count else None
            for p in t["partition_data"]:
                res: dict[str, Any] = {"index": p["index"], "error_code": 0, "base_offset": -1,
                                       "log_append_time_ms": -1, "log_start_offset": -1, "record_errors": [],
                                       "error_message": None}
                parts_out.append(res)
                plog = self.logs.get(name, p["index"]) if count is not None else None
                if req.version < 3:
                    res["error_code"] = ErrorCode.UNSUPPORTED_VERSION
                    continue
                if name.startswith("__"):  # Kafka: internal topics take no client writes
                    res.update(error_code=ErrorCode.INVALID_TOPIC_EXCEPTION,
                               error_message=f"Cannot append to internal topic {_shown(name)}")
                    continue
                if self.cluster is not None and (err := self.cluster.lead_error(name, p["index"], acks=acks)):
                    res["error_code"] = err
                    continue
                if plog is None:
                    res["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                assert rules is not None  # the topic exists: it has a log
                records = memoryview(p["records"] or b"")
                outcome = validate_produce(records, rules, now_ms)
                if isinstance(outcome, Refusal):
                    self._refuse(res, outcome, name, p["index"])
                else:
                    checked.append((res, plog, outcome, records, rules))
            responses.append({"name": name, "partition_responses": parts_out})
        txn_id = req.body.get("transactional_id")
        if any(c[2].transactional for c in checked) and (txn_id is None or self.verify_txn is None):
            for r in (r for t in responses for r in t["partition_responses"]):  # Kafka: the whole request
                r.update(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                         error_message="transactional records need a transactional id" if txn_id is None
                         else "transactions are not supported by this server")
            checked = []
        pending: list[tuple[PartitionLog, int]] = []
        for res, plog, outcome, records, rules in checked:
            last = self._append(plog, outcome, records, rules, now_ms, res, txn_id, version)
            if last is not None:
                pending.append((plog, last))
        body = {"responses": responses, "throttle_time_ms": 0}
        if acks == 0:
            slot.complete(None)
            if self.cluster is not None:  # followers fetch it at once; the high watermark moves once replicated
                self.cluster.appended_unanswered(pending)
                return
            for plog, last in pending:  # nobody waits for the answer, but fetchers wait for the data
                self.commit.when_durable(plog, last, lambda err: self._wake_fetchers())
            return
        if self.cluster is not None:  # cluster mode: acks=all waits for the in-sync replicas
            self.cluster.complete_produce(slot, body, pending, acks, req.body.get("timeout_ms", 30000))
            return
        self._complete_when_durable(slot, body, pending)

    def _refuse(self, res: dict[str, Any], refusal: Refusal, topic: str, partition: int) -> None:
        res.update(error_code=refusal.error_code, error_message=refusal.message,
                   record_errors=[{"batch_index": i, "batch_index_error_message": m}
                                  for i, m in refusal.record_errors])
        self.refused_batches += 1
        self._refusal_log.warning("refused a produced batch for %s-%d: %s", topic, partition, refusal.message)

    def _append(self, plog: PartitionLog, checked: Checked, records: memoryview, rules: Rules, now_ms: int,
                res: dict[str, Any], txn_id: str | None = None, version: int = 0) -> int | None:
        """Append one checked batch (or find it already appended); the last offset to wait for, or None."""
        header = checked.header
        states = self._producer_states(plog) if header.producer_id >= 0 else None
        if states is not None:
            if header.is_transactional:  # KIP-890: the first batch of a transaction here is verified
                topic, _, part = plog.name.rpartition("-")
                refused = check_transactional(states, header, self.verify_txn, txn_id, topic, int(part), version)
                if refused is not None:
                    res.update(error_code=refused, error_message=f"producer {header.producer_id} epoch "
                               f"{header.producer_epoch}: {ErrorCode(refused).name}")
                    return None
            seen = states.check(header)
            if isinstance(seen, Duplicate):
                res.update(base_offset=seen.base_offset, log_start_offset=plog.log_start_offset)
                return seen.last_offset
            if seen is not None:
                res.update(error_code=seen, error_message=f"producer {header.producer_id} epoch "
                           f"{header.producer_epoch} sequence {header.base_sequence}: {ErrorCode(seen).name}")
                return None
        batch: bytes | memoryview = records
        if rules.target_codec is not None and header.compression != rules.target_codec:
            batch = recompress(records, rules.target_codec, rules.max_decompressed)
        if rules.log_append_time:
            batch = stamp_log_append_time(batch, now_ms)
            res["log_append_time_ms"] = now_ms
        try:
            info = self.commit.append(plog, [batch])
        except LogOfflineError:
            res["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
            return None
        except CorruptBatchError as e:  # the log's own check of what it stores: validation missed something
            log.error("partition log refused a validated batch: %s", e)
            res.update(error_code=ErrorCode.CORRUPT_MESSAGE, error_message=str(e))
            return None
        if states is not None:
            states.record(header, info.base_offset)
        res.update(base_offset=info.base_offset, log_start_offset=plog.log_start_offset)
        return info.last_offset

    def forget_producer_states(self, plog: PartitionLog) -> None:
        """Cluster mode: a log this node starts leading may have grown (or been cut) while it followed; its
        producer states are rebuilt from its tail on next use."""
        self._producers.pop(plog, None)

    def producer_states(self, plog: PartitionLog) -> ProducerStates:
        return self._producer_states(plog)

    def lead_error(self, topic: str, partition: int) -> int | None:
        """Cluster mode: why this node may not write to the partition (not its leader, unknown); None if it may
        (always on a single node)."""
        return (self.cluster.lead_error(topic, partition) or None) if self.cluster is not None else None

    def replication(self) -> Any:
        """Cluster mode: replication (markers wait for it, txn_partitions.py); None on a single node."""
        return None if self.cluster is None else self.cluster.replication

    def producer_states_known(self) -> list[tuple[PartitionLog, ProducerStates]]:
        """The partitions whose producer states are built (a copy: the metrics thread reads it)."""
        return list(self._producers.items())

    def _producer_states(self, plog: PartitionLog) -> ProducerStates:
        """The partition's producer states, rebuilt from the batch headers of its log on first use."""
        states = self._producers.get(plog)
        if states is None:
            states = self._producers[plog] = ProducerStates()
            try:
                scan_producer_states(plog, states)
            except (StorageError, OSError) as e:  # the append will meet the same fault and answer it
                log.error("reading producer states of %s failed: %s", plog.directory, e)
        return states

    def _complete_when_durable(self, slot: Slot, body: dict[str, Any],
                               pending: list[tuple[PartitionLog, int]]) -> None:
        if not pending:
            slot.complete(body)
            return
        remaining = [len(pending)]
        failed: list[Exception] = []

        def done(err: Exception | None) -> None:
            if err is not None:
                failed.append(err)
            remaining[0] -= 1
            if remaining[0] == 0:
                if failed:
                    for t in body["responses"]:
                        for p in t["partition_responses"]:
                            if p["error_code"] == 0:
                                p.update(error_code=ErrorCode.KAFKA_STORAGE_ERROR, base_offset=-1)
                slot.complete(body)
                self._wake_fetchers()

        for plog, last in pending:
            self.commit.when_durable(plog, last, done)

    def _wake_fetchers(self) -> None:
        self.hw_advanced.set()
        self.hw_advanced = trio.Event()

    wake_fetchers = _wake_fetchers

    # ---------------------------------------------------------------- Fetch
    def handle_fetch(self, req: Request, slot: Slot) -> None:
        body = req.body
        if req.version >= 13:  # names topics by id; v15+: replica_id from replica_state (topic_ids.py)
            self.topic_ids.resolve_fetch(body, req.version)
        if self.cluster is not None and body.get("replica_id", -1) >= 0:  # a follower (replication.py)
            self.cluster.handle_follower_fetch(req, slot)
            return
        deadline = trio.current_time() + max(0, body["max_wait_ms"]) / 1000
        woken = self.hw_advanced  # taken before looking, so an advance after the look cannot be missed
        ranges = _ranges_for(slot)
        first = self._fetch_once(req, ranges)
        if first[1] >= max(1, body["min_bytes"]) or body["max_wait_ms"] <= 0 or first[2]:
            _complete_fetch(slot, first[0], ranges)
            return
        if ranges:
            zero_copy.release_body(first[0])
        if internal_topics.reads_offsets_topic(body):  # group commit does not wake fetchers: this does
            self.offsets_tail.watch(self.broker.nursery, slot, deadline)
        self.broker.nursery.start_soon(self._fetch_wait, req, slot, deadline, woken)

    async def _fetch_wait(self, req: Request, slot: Slot, deadline: float, woken: trio.Event) -> None:
        min_bytes = max(1, req.body["min_bytes"])
        try:
            with trio.move_on_at(deadline):
                while not slot.conn.closed:
                    await woken.wait()
                    woken = self.hw_advanced
                    ranges = _ranges_for(slot)
                    resp, size, error = self._fetch_once(req, ranges)
                    if size >= min_bytes or error:
                        _complete_fetch(slot, resp, ranges)
                        return
                    if ranges:  # no await since the look: nothing can cancel between it and this
                        zero_copy.release_body(resp)
            if not slot.done:
                ranges = _ranges_for(slot)
                _complete_fetch(slot, self._fetch_once(req, ranges)[0], ranges)
        except Exception:  # runs in the connections' nursery: a bug here must not take the server down
            log.exception("delayed fetch failed")
            slot.conn.closed = True
            slot.complete(None)

    def _fetch_once(self, req: Request, ranges: bool = False) -> tuple[dict[str, Any], int, bool]:
        """(response, bytes of records, whether an error should end the wait). ``ranges``: records of at
        least ``zero_copy.MIN_RANGE`` bytes are file ranges (the caller sends or releases them)."""
        body = req.body
        budget = body.get("max_bytes", 0x7FFFFFFF)
        committed = body.get("isolation_level", 0) == 1
        total = 0
        any_error = False
        out = []
        for t in body["topics"]:
            name = t["topic"]
            parts = []
            for p in t["partitions"]:
                res = empty_partition(p["partition"])
                parts.append(res)
                if self.cluster is not None and (err := self.cluster.lead_error(name, p["partition"], fetch=body)):
                    res["error_code"] = err
                    any_error = True
                    continue
                plog = self.logs.get(name, p["partition"])
                if plog is None or internal_topics.hidden(name):
                    res["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    any_error = True
                    continue
                hw = plog.high_watermark if self.cluster is None else \
                    self.cluster.high_watermark(name, p["partition"])  # cluster mode: the replicated one
                res.update(high_watermark=hw, last_stable_offset=hw, log_start_offset=plog.log_start_offset)
                offset = p["fetch_offset"]
                if offset < plog.log_start_offset or offset > plog.log_end_offset:
                    res["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
                    any_error = True
                    continue
                upper = hw
                if self.verify_txn is not None and name != internal_topics.OFFSETS_TOPIC:  # txn_partitions.py
                    try:
                        states = self._producer_states(plog)
                        if committed:
                            upper, res["aborted_transactions"] = read_committed_view(states, hw, offset)
                            res["last_stable_offset"] = upper
                        else:
                            res["last_stable_offset"] = states.last_stable_offset(hw)
                    except (StorageError, OSError):
                        res["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
                        any_error = True
                        continue
                if offset >= upper or (budget <= 0 and total > 0):
                    continue
                limit = min(p["partition_max_bytes"], max(budget, 1))
                try:  # hw: a journaled log's passes its recovery point
                    data = plog.read_range(offset, limit, upper_bound=upper, min_range=zero_copy.MIN_RANGE) \
                        if ranges else plog.read(offset, limit, upper_bound=upper)
                except OffsetOutOfRangeError:
                    res["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
                    any_error = True
                    continue
                except (StorageError, OSError):
                    res["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
                    any_error = True
                    continue
                res["records"] = data
                total += len(data)
                budget -= len(data)
            out.append({"topic": name, "partitions": parts})
        if req.version >= 13:
            stamp_fetch(body, out)
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": out}, total, any_error

    # ---------------------------------------------------------------- ListOffsets
    def handle_list_offsets(self, req: Request, slot: Slot) -> None:
        out = []
        committed = req.version >= 2 and req.body.get("isolation_level", 0) == 1 and self.verify_txn is not None
        for t in req.body["topics"]:
            parts = []
            for p in t["partitions"]:
                res: dict[str, Any] = {"partition_index": p["partition_index"], "error_code": 0,
                                       "timestamp": -1, "offset": -1, "leader_epoch": 0}
                parts.append(res)
                if self.cluster is not None and (err := self.cluster.lead_error(t["name"], p["partition_index"])):
                    res.update(error_code=err, leader_epoch=-1)
                    continue
                plog = self.logs.get(t["name"], p["partition_index"])
                if plog is None or internal_topics.hidden(t["name"]):
                    res.update(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, leader_epoch=-1)
                    continue
                ts = p["timestamp"]
                if req.version == 0:
                    if ts < -2:  # Kafka: v0 knows only latest (-1) and earliest (-2)
                        res["error_code"] = ErrorCode.UNSUPPORTED_VERSION
                        continue
                    res["old_style_offsets"] = legacy_offsets(
                        plog.segment_times(), plog.log_start_offset, plog.high_watermark, ts,
                        p.get("max_num_offsets", 1), int(time.time() * 1000))
                    continue
                if ts == -2:
                    res["offset"] = plog.log_start_offset
                elif ts == -1:  # cluster mode: the replicated high watermark; read_committed: the LSO
                    res["offset"] = plog.high_watermark if self.cluster is None else \
                        self.cluster.high_watermark(t["name"], p["partition_index"])
                    if committed:
                        res["offset"] = self.txn.lso(plog, res["offset"])
                elif ts == -3:
                    found = internal_topics.offset_of_max_timestamp(plog, self._replicated_hw(t["name"], p))
                    if found is not None:
                        res["offset"], res["timestamp"] = found
                elif ts == -4:  # earliest local (v8+, KIP-405): nothing is tiered, so the log start
                    res["offset"] = plog.log_start_offset
                elif ts == -5:  # latest tiered (v9+, KIP-1005): nothing is tiered (Kafka: -1, epoch -1)
                    res["leader_epoch"] = -1
                elif ts < 0:
                    res["offset"] = plog.high_watermark  # other negative timestamps: the latest offset
                else:
                    upper = self._replicated_hw(t["name"], p)
                    if committed:  # Kafka: only offsets below the LSO
                        upper = self.txn.lso(plog, plog.high_watermark if upper is None else upper)
                    found = internal_topics.offset_for_timestamp(plog, ts, upper)
                    if found is not None:
                        res["offset"], res["timestamp"] = found
            out.append({"name": t["name"], "partitions": parts})
        slot.complete({"throttle_time_ms": 0, "topics": out})

    # ---------------------------------------------------------------- retention
    async def retention_loop(self, interval_s: float = 60.0) -> None:
        """Every ``interval_s``: retention of each user log, up to its ``retention_bound`` (read here, on the
        trio thread; the log caps it at its own durable end when it deletes, after any truncation)."""
        while True:
            await trio.sleep(interval_s)
            now = int(time.time() * 1000)
            for topic, part in self.logs.partitions():
                plog = self.logs.get(topic, part)
                if plog is not None and not topic.startswith("__"):
                    try:
                        await trio.to_thread.run_sync(plog.apply_retention, now, self.retention_bound(topic, part))
                    except (StorageError, OSError) as e:
                        log.error("retention of %s-%s failed: %s", topic, part, e)
