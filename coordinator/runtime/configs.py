"""DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44), as Kafka's ConfigHelper and
ConfigAdminManager answer them.

Rules:
- Each resource is answered on its own: an error (unknown topic, bad config, unsupported type) applies to
  that resource only. Resource types are dispatched through tables keyed by Kafka's type id (TOPIC 2,
  BROKER 4, GROUP 32); any other type is INVALID_REQUEST "Unsupported resource type: ...".
- TOPIC describe: every topic key with its value and source (see ``coordinator.core.topic_configs``); an
  unknown topic is UNKNOWN_TOPIC_OR_PARTITION, an illegal name INVALID_TOPIC_EXCEPTION. The offsets topic is
  described with the overrides it has in Kafka (compact, producer compression, 100 MiB segments).
- BROKER describe: name "" (dynamic defaults: none here, so no entries) or this node's id: every server key
  (Kafka's name where one exists) with STATIC_BROKER_CONFIG when set, DEFAULT_CONFIG otherwise, all read-only.
  Another id is INVALID_REQUEST as in Kafka.
- TOPIC alter: checked exactly as CreateTopics checks configs (INVALID_CONFIG naming the key); AlterConfigs
  replaces the topic's overrides with those given, IncrementalAlterConfigs applies SET/DELETE/APPEND/
  SUBTRACT to them; a key named twice in one resource is INVALID_REQUEST. Unless ``validate_only``, the new
  overrides are stored and applied at once. BROKER alter: INVALID_REQUEST naming the static settings.
- GROUP (Kafka 4's group configs, and ours; rules in ``coordinator.core.group_configs``): describe gives every
  key with its value, source DYNAMIC_GROUP_CONFIG (8) when the group sets it, else DEFAULT_CONFIG (5);
  AlterConfigs replaces the group's set (Kafka 4 takes GROUP there too), IncrementalAlterConfigs applies SET /
  DELETE (APPEND / SUBTRACT: INVALID_CONFIG, the keys are not lists); an unknown key or a bad value is
  INVALID_CONFIG; an empty name INVALID_REQUEST. Unless ``validate_only`` the new set is written as a record in
  the group's offsets partition and the answer waits until it is durable (``GroupService.alter_group_configs``;
  replicated in cluster mode). Unlike Kafka 4, which keeps group configs in the metadata log so that any broker
  answers, they are stored with the group: a group this node does not coordinate answers NOT_COORDINATOR (its
  offsets partition loading: COORDINATOR_LOAD_IN_PROGRESS), describe and alter alike; ask the group's
  coordinator (FindCoordinator), as ``client.admin`` does. A config set for a group id with no group is kept.
- Cluster mode (``topics.cluster`` set): topic overrides are ZooKeeper's (``cluster_topics``): describe and
  the checks above read them there; an alter that passes the checks is written to ZooKeeper (the change
  applied to its current overrides, version-checked) and the whole answer waits until ZooKeeper took every
  such write (``_write_all``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from coordinator.config import KEYS as SERVER_KEYS
from coordinator.config import Key
from coordinator.core import group_configs as gc
from coordinator.core import topic_configs as tc
from coordinator.runtime.groups import OFFSETS_TOPIC, group_config_limits
from coordinator.runtime.topics import valid_topic_name
from coordinator.storage.errors import StorageError
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from coordinator.runtime.dispatch import Slot
    from coordinator.runtime.services import ServerContext
    from coordinator.runtime.topics import TopicService
    from protocol.codec import Request

log = logging.getLogger("groupcoord.configs")

TOPIC, BROKER, GROUP = 2, 4, 32
TYPE_NAMES = {0: "UNKNOWN", 2: "TOPIC", 4: "BROKER", 8: "BROKER_LOGGER", 16: "CLIENT_METRICS", 32: "GROUP"}
Write = Callable[[], Awaitable[tuple[int, str | None]]]  # a write to wait for (ZooKeeper, a group's record)
Change = Callable[[dict[str, str]], dict[str, str]]  # current overrides -> new ones (raises when refused)
_GROUP_ELSEWHERE = ("group {} is not coordinated by this node: its configs are stored with the group, ask its "
                    "coordinator (FindCoordinator)")
_OFFSETS_OVERRIDES = {"cleanup.policy": "compact", "compression.type": "producer", "segment.bytes": "104857600"}


class ResourceError(Exception):
    def __init__(self, code: int, message: str | None) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _server_type(k: Key) -> str:
    if k.type is bool:
        return "BOOLEAN"
    if k.type is float:
        return "DOUBLE"
    if k.type is str:
        return "STRING" if not k.name.endswith((".policy", ".overrides")) else "LIST"
    return "LONG" if k.name.endswith((".ms", ".bytes", ".size")) or (k.max or 0) > tc.INT_MAX else "INT"


def _server_string(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


class ConfigService:
    def __init__(self, broker: ServerContext, topics: TopicService) -> None:
        self.broker = broker
        self.topics = topics
        self.config = broker.config
        self.group_limits = group_config_limits(self.config)
        self._describe: dict[int, Callable[[str, list[str] | None, bool, bool], list[dict[str, Any]]]] = {
            TOPIC: self._describe_topic, BROKER: self._describe_broker, GROUP: self._describe_group}
        self._alter: dict[int, Callable[[str, Change, bool], Write | None]] = {
            TOPIC: self._alter_topic, BROKER: self._alter_broker, GROUP: self._alter_group}

    # ---------------------------------------------------------------- DescribeConfigs
    def handle_describe_configs(self, req: Request, slot: Slot) -> None:
        synonyms = bool(req.body.get("include_synonyms")) and req.version >= 1
        docs = bool(req.body.get("include_documentation")) and req.version >= 3
        results = []
        for r in req.body["resources"]:
            rtype, name = r["resource_type"], r["resource_name"]
            out: dict[str, Any] = {"error_code": 0, "error_message": None, "resource_type": rtype,
                                   "resource_name": name, "configs": []}
            try:
                describe = self._describe.get(rtype)
                if describe is None:
                    raise ResourceError(ErrorCode.INVALID_REQUEST,
                                        f"Unsupported resource type: {TYPE_NAMES.get(rtype, rtype)}")
                out["configs"] = describe(name, r["configuration_keys"], synonyms, docs)
            except ResourceError as e:
                out.update(error_code=e.code, error_message=e.message)
            results.append(out)
        slot.complete({"throttle_time_ms": 0, "results": results})

    def _topic_overrides(self, name: str) -> dict[str, str]:
        if name == OFFSETS_TOPIC:
            return dict(_OFFSETS_OVERRIDES)
        if not valid_topic_name(name):
            raise ResourceError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic name {name!r} is illegal")
        overrides = (self.topics.cluster or self.topics).configs_of(name)
        if overrides is None:
            raise ResourceError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist")
        return overrides

    def _describe_topic(self, name: str, keys: list[str] | None, synonyms: bool, docs: bool
                        ) -> list[dict[str, Any]]:
        return tc.describe_entries(self._topic_overrides(name), self.config, self.topics.server_is_set, keys,
                                   synonyms, docs)

    def _describe_broker(self, name: str, keys: list[str] | None, synonyms: bool, docs: bool
                         ) -> list[dict[str, Any]]:
        if name == "":
            return []  # Kafka: the cluster-wide dynamic defaults; this server has none
        self._check_broker_name(name)
        wanted = set(keys) if keys else None
        out = []
        for k in SERVER_KEYS:
            if wanted is not None and k.name not in wanted:
                continue
            value = _server_string(self.config[k.name])
            source = tc.SOURCE_STATIC_BROKER if self.topics.server_is_set(k.name) else tc.SOURCE_DEFAULT
            out.append({"name": k.name, "value": value, "read_only": True, "is_default": source == tc.SOURCE_DEFAULT,
                        "config_source": source, "is_sensitive": False,
                        "synonyms": [{"name": k.name, "value": value, "source": source}] if synonyms else [],
                        "config_type": tc.TYPE_IDS[_server_type(k)], "documentation": k.doc if docs else None})
        return out

    def _describe_group(self, name: str, keys: list[str] | None, synonyms: bool, docs: bool
                        ) -> list[dict[str, Any]]:
        if not name:
            raise ResourceError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
        return gc.describe(self._group_configs(name), self.group_limits, keys, synonyms, docs)

    def _group_configs(self, name: str) -> dict[str, str]:
        groups = getattr(self.broker, "groups", None)
        if groups is None:
            raise ResourceError(ErrorCode.INVALID_REQUEST, "Unsupported resource type: GROUP")
        current = groups.core.group_configs(name)
        if not isinstance(current, dict):
            code = int(current)
            raise ResourceError(code, _GROUP_ELSEWHERE.format(name) if code == ErrorCode.NOT_COORDINATOR else None)
        return current

    def _check_broker_name(self, name: str) -> None:
        try:
            node = int(name)
        except ValueError:
            raise ResourceError(ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}") \
                from None
        if node != self.broker.node_id:
            raise ResourceError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected "
                                f"{self.broker.node_id} or empty string, but received {name}")

    # ---------------------------------------------------------------- AlterConfigs / IncrementalAlterConfigs
    def handle_alter_configs(self, req: Request, slot: Slot) -> None:
        self._alter_all(req, slot, incremental=False)

    def handle_incremental_alter_configs(self, req: Request, slot: Slot) -> None:
        self._alter_all(req, slot, incremental=True)

    def _change(self, rtype: int, given: list[dict[str, Any]], incremental: bool) -> Change:
        """The change a resource's entries make to its current overrides (checked when applied)."""
        if rtype == BROKER:  # the names are what the error reports
            names = [c["name"] for c in given]
            return lambda _current: {n: "" for n in names}
        if incremental:
            ops = [(c["name"], c["config_operation"], c["value"]) for c in given]
            if rtype == GROUP:
                return lambda current: gc.apply_incremental(current, ops, self.group_limits)
            return lambda current: tc.apply_incremental(current, ops, self.config)
        if rtype == GROUP:
            values = {c["name"]: c["value"] for c in given}
            return lambda _current: gc.replace(values, self.group_limits)
        nulls = [c["name"] for c in given if c["value"] is None]
        if nulls:
            raise ResourceError(ErrorCode.INVALID_CONFIG,
                                f"Null value not supported for topic configs: {','.join(nulls)}")
        return lambda _current: tc.validate({c["name"]: c["value"] for c in given}, self.config)

    def _alter_all(self, req: Request, slot: Slot, incremental: bool) -> None:
        validate_only = bool(req.body.get("validate_only"))
        out = []
        writes: list[tuple[dict[str, Any], Write]] = []
        for r in req.body["resources"]:
            rtype, name = r["resource_type"], r["resource_name"]
            res: dict[str, Any] = {"error_code": 0, "error_message": None, "resource_type": rtype,
                                   "resource_name": name}
            try:
                alter = self._alter.get(rtype)
                if alter is None:
                    raise ResourceError(ErrorCode.INVALID_REQUEST,
                                        f"Unsupported resource type: {TYPE_NAMES.get(rtype, rtype)}")
                names = [c["name"] for c in r["configs"]]
                if len(set(names)) != len(names):
                    raise ResourceError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
                write = alter(name, self._change(rtype, r["configs"], incremental), validate_only)
                if write is not None:
                    writes.append((res, write))
            except ResourceError as e:
                res.update(error_code=e.code, error_message=e.message)
            except (tc.InvalidConfig, gc.InvalidGroupConfig) as e:
                res.update(error_code=ErrorCode.INVALID_CONFIG, error_message=str(e))
            except gc.InvalidGroupConfigRequest as e:
                res.update(error_code=ErrorCode.INVALID_REQUEST, error_message=str(e))
            except (StorageError, OSError) as e:
                log.error("storing configs of %s failed: %s", name, e)
                res.update(error_code=ErrorCode.KAFKA_STORAGE_ERROR, error_message=str(e))
            out.append(res)
        if writes:
            self.broker.nursery.start_soon(self._write_all, slot, {"throttle_time_ms": 0, "responses": out}, writes)
            return
        slot.complete({"throttle_time_ms": 0, "responses": out})

    async def _write_all(self, slot: Slot, body: dict[str, Any], writes: list[tuple[dict[str, Any], Write]]) -> None:
        for res, write in writes:
            res["error_code"], res["error_message"] = await write()
        if not slot.done:
            slot.complete(body)

    def _alter_topic(self, name: str, change: Change, validate_only: bool) -> Write | None:
        if name == OFFSETS_TOPIC:
            raise ResourceError(ErrorCode.INVALID_CONFIG, f"the configs of {OFFSETS_TOPIC} are fixed by this server")
        current = self._topic_overrides(name)
        new = change(current)
        cluster = self.topics.cluster
        if not validate_only and cluster is not None:
            return lambda: cluster.alter_configs(name, change)
        if not validate_only:
            self.topics.set_configs(name, new)
        return None

    def _alter_group(self, name: str, change: Change, validate_only: bool) -> Write | None:
        if not name:
            raise ResourceError(ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
        change(self._group_configs(name))  # checked now: a refusal answers without a write
        if validate_only:
            return None
        groups = self.broker.groups  # type: ignore[attr-defined]
        return lambda: groups.alter_group_configs(name, change)

    def _alter_broker(self, name: str, change: Change, validate_only: bool) -> Write | None:
        if name != "":
            self._check_broker_name(name)
        keys = ", ".join(sorted(change({}))) or "(none)"
        raise ResourceError(ErrorCode.INVALID_REQUEST, f"Cannot update these configs dynamically: {keys}: "
                            "groupcoord's broker settings are static (set them in the config file, an "
                            "environment variable or a flag, and restart)")
