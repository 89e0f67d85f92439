"""Authorization on the server: the durable ACLs, the ACL admin APIs, and each request's check.

Rules:
- On only with ``authorizer.class.name`` (Kafka's ``kafka.security.authorizer.AclAuthorizer`` and its
  successors are accepted, so configs carry over); ``super.users`` (``;``-separated principals) may do
  anything; ``allow.everyone.if.no.acl.found`` (default false) opens resources that have no ACL.
- The ACLs (single node) are records of the server's own security log (``storage/keyed_store.py``): key
  ``acl`` + the pattern's ZooKeeper path (``/kafka-acl/Topic/orders``), value the node's JSON in Kafka's
  layout; replayed at start. CreateAcls and DeleteAcls are answered once their change is durable.
- Before a request's handler runs, ``admit`` checks what Kafka checks for that API (``api_acls.py``) for
  the connection's principal and host. Decisions are cached per connection until the ACLs change (the
  index's version), so a steady stream of requests costs dict lookups. Denied checks count in
  ``groupcoord_authorization_denied_total{api,resource_type}``, once per request and resource type, and
  each goes to the audit trail (``audit.py``); the silent filtering of listings does neither.
- Cluster mode (``follow_zookeeper``): the ACLs are ZooKeeper's (``/kafka-acl``, ``/kafka-acl-extended``,
  Kafka's AclAuthorizer layout, shared by every node; ``cluster/security_zk.py``), not the local log. A change
  is written per pattern as a version-checked read-modify-write (this request's additions and removals on
  what ZooKeeper holds, so two nodes' concurrent changes both land) with Kafka's change notification,
  answered once ZooKeeper has it, and applied here at once; other nodes' changes arrive through ``apply``.
- Off: every request passes as before, and the ACL APIs answer SECURITY_DISABLED ("No Authorizer is
  configured on the broker"), as Kafka does.
- CreateAcls validates each binding as Kafka (INVALID_REQUEST with its message); DescribeAcls groups the
  matching ACLs by resource pattern; DeleteAcls answers, per filter, the bindings it removed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from coordinator.core.security.acls import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclIndex,
    Authorizer,
    ResourcePattern,
    ResourcePatternFilter,
    acl_node_path,
    decode_acl_node,
    encode_acl_node,
    parse_acl_node_path,
    parse_super_users,
    validate_binding,
    validate_filter,
)
from coordinator.runtime.security import api_acls
from coordinator.storage.errors import StorageError
from coordinator.storage.keyed_store import KeyedStore
from protocol.acl_types import AclOperation, ResourceType
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from coordinator.cluster.security_zk import ZkSecurity
    from coordinator.metrics import Metrics
    from coordinator.runtime.dispatch import Slot
    from coordinator.runtime.security.audit import AuditLog
    from protocol.codec import Request

PREFIX = b"acl"
_READ, _GROUP, _TOPIC = int(AclOperation.READ), int(ResourceType.GROUP), int(ResourceType.TOPIC)
DISABLED = "No Authorizer is configured on the broker"


class Authorization:
    def __init__(self, config: Any, store: KeyedStore, metrics: Metrics,
                 topic_name: Callable[[Any], str | None], exists: Callable[[str], bool]) -> None:
        self.store = store
        self.metrics = metrics
        self.index = AclIndex()
        for key, value in store.items().items():
            if key.startswith(PREFIX + b"/"):
                pattern = parse_acl_node_path(key[len(PREFIX):].decode())
                self.index.replace(pattern, decode_acl_node(value))
        self.authorizer = Authorizer(self.index, parse_super_users(config["super.users"]),
                                     config["allow.everyone.if.no.acl.found"])
        self.topic_name = topic_name
        self.exists = exists
        self.audit: AuditLog | None = None  # set by the broker: denials go to the audit trail
        self.zk: ZkSecurity | None = None  # cluster mode: ZooKeeper holds the ACLs
        self._lock = trio.Lock()  # one ACL change at a time (each read-modify-writes patterns)

    def follow_zookeeper(self, zk: ZkSecurity) -> int:
        """Cluster mode: forget the local log's ACLs (ZooKeeper's arrive through ``apply``); how many there were."""
        local = len(self.index)
        for p in self.index.patterns():
            self.index.replace(p, ())
        self.zk = zk
        return local

    def apply(self, pattern: ResourcePattern, entries: frozenset[AccessControlEntry]) -> None:
        """A pattern's ACLs as ZooKeeper holds them now (empty: none)."""
        self.index.replace(pattern, entries)

    # ---------------------------------------------------------------- a request's check
    def admit(self, request: Request, slot: Slot) -> bool:
        conn = slot.conn
        principal, host = conn.principal, conn.host
        authorizer = self.authorizer
        cache: dict[tuple[int, int, str], bool] | None = getattr(conn, "acl_cache", None)
        if cache is None or getattr(conn, "acl_version", -1) != self.index.version:
            cache = {}
            conn.acl_cache = cache  # type: ignore[attr-defined]
            conn.acl_version = self.index.version  # type: ignore[attr-defined]
        elif request.api_key == 8 and not isinstance(request.body, dict):  # the hot one-partition commit
            body = request.body  # both decisions cached as allowed: nothing else to check, nothing to record
            if cache.get((_READ, _GROUP, body.group_id)) and cache.get((_READ, _TOPIC, body.topic)):
                return True
        denied: list[tuple[int, int, str]] = []

        def acl(op: int, rtype: int, name: str, quiet: bool = False) -> bool:
            key = (op, rtype, name)
            allowed = cache.get(key)
            if allowed is None:
                allowed = cache[key] = authorizer.authorize(principal, host, op, rtype, name)
                if len(cache) > 10_000:  # bounded whatever a client names
                    cache.clear()
            if not allowed and not quiet:
                denied.append(key)
            return allowed

        ctx = api_acls.Context(authorizer, principal, host, self.topic_name, self.exists)
        passed = api_acls.admit(request, slot, acl, ctx)
        if denied:
            for rtype in {rtype for _, rtype, _ in denied}:
                self.metrics.authorization_denied(request.api_key, ResourceType(rtype).name)
            if self.audit is not None:
                self.audit.denied(request, slot, denied)
        return passed

    # ---------------------------------------------------------------- ACL admin APIs (29, 30, 31)
    def describe(self, body: dict[str, Any]) -> dict[str, Any]:
        f = _filter(body, "resource_type_filter", "resource_name_filter", "pattern_type_filter",
                    "principal_filter", "host_filter")
        problem = validate_filter(f)
        if problem is not None:
            return {"throttle_time_ms": 0, "error_code": problem.code, "error_message": problem.message,
                    "resources": []}
        grouped: dict[ResourcePattern, list[AccessControlEntry]] = {}
        for b in self.index.acls(f):
            grouped.setdefault(b.pattern, []).append(b.entry)
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "resources": [
            {"resource_type": int(p.resource_type), "resource_name": p.name, "pattern_type": int(p.pattern_type),
             "acls": [{"principal": e.principal, "host": e.host, "operation": int(e.operation),
                       "permission_type": int(e.permission_type)} for e in entries]}
            for p, entries in grouped.items()]}

    async def create(self, body: dict[str, Any]) -> dict[str, Any]:
        results: list[dict[str, Any]] = []
        fresh: list[AclBinding] = []
        for c in body["creations"]:
            binding = AclBinding(ResourcePattern(c["resource_type"], c["resource_name"],
                                                 c.get("resource_pattern_type", 3)),
                                 AccessControlEntry(c["principal"], c["host"], c["operation"], c["permission_type"]))
            problem = validate_binding(binding)
            results.append({"error_code": problem.code if problem else 0,
                            "error_message": problem.message if problem else None})
            if problem is None:
                fresh.append(binding)
        async with self._lock:
            error = await self._write(lambda index: [index.add(b) for b in fresh])
        if error is not None:
            for r in results:
                if not r["error_code"]:
                    r.update(error_code=ErrorCode.KAFKA_STORAGE_ERROR, error_message=error)
        return {"throttle_time_ms": 0, "results": results}

    async def delete(self, body: dict[str, Any]) -> dict[str, Any]:
        filters = [_filter(f, "resource_type_filter", "resource_name_filter", "pattern_type_filter",
                           "principal_filter", "host_filter") for f in body["filters"]]
        problems = [validate_filter(f) for f in filters]
        removed: list[list[AclBinding]] = []
        async with self._lock:
            def apply(index: AclIndex) -> None:
                removed.extend(index.remove(f) if p is None else [] for f, p in zip(filters, problems))

            error = await self._write(apply)
        out = []
        for p, gone in zip(problems, removed):
            if p is not None or error is not None:
                out.append({"error_code": p.code if p else ErrorCode.KAFKA_STORAGE_ERROR,
                            "error_message": p.message if p else error, "matching_acls": []})
                continue
            out.append({"error_code": 0, "error_message": None, "matching_acls": [
                {"error_code": 0, "error_message": None, "resource_type": int(b.pattern.resource_type),
                 "resource_name": b.pattern.name, "pattern_type": int(b.pattern.pattern_type),
                 "principal": b.entry.principal, "host": b.entry.host, "operation": int(b.entry.operation),
                 "permission_type": int(b.entry.permission_type)} for b in gone]})
        return {"throttle_time_ms": 0, "filter_results": out}

    async def _write(self, change: Callable[[AclIndex], object]) -> str | None:
        """Apply ``change`` to a copy of the touched patterns, write them durably, then to the live index."""
        trial = AclIndex(self.index.acls())
        change(trial)
        touched = {p for p in set(trial.patterns()) | set(self.index.patterns())
                   if set(trial.entries(p)) != set(self.index.entries(p))}
        if not touched:
            return None
        if self.zk is not None:
            from coordinator.cluster.zk import ZkError  # cluster mode only: kazoo is there

            for p in touched:
                now, then = set(self.index.entries(p)), set(trial.entries(p))
                added, removed = frozenset(then - now), frozenset(now - then)
                try:
                    written = await self.zk.update_acl(p, lambda cur, a=added, r=removed: (cur - r) | a)
                except ZkError as e:
                    return f"ZooKeeper: {e}"
                self.index.replace(p, written)
            return None
        records = [(PREFIX + acl_node_path(p).encode(), encode_acl_node(trial.entries(p)) if trial.entries(p)
                    else None) for p in touched]
        try:
            await trio.to_thread.run_sync(self.store.write, records)
        except (StorageError, OSError) as e:
            return str(e)
        for p in touched:
            self.index.replace(p, trial.entries(p))
        return None


def _filter(body: dict[str, Any], rtype: str, name: str, ptype: str, principal: str, host: str
            ) -> AclBindingFilter:
    return AclBindingFilter(ResourcePatternFilter(body[rtype], body.get(name), body.get(ptype, 3)),
                            AccessControlEntryFilter(body.get(principal), body.get(host), body["operation"],
                                                     body["permission_type"]))


def disabled_describe() -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": ErrorCode.SECURITY_DISABLED, "error_message": DISABLED,
            "resources": []}


def disabled_create(body: dict[str, Any]) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "results": [{"error_code": ErrorCode.SECURITY_DISABLED, "error_message": DISABLED}
                                               for _ in body["creations"]]}


def disabled_delete(body: dict[str, Any]) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "filter_results": [
        {"error_code": ErrorCode.SECURITY_DISABLED, "error_message": DISABLED, "matching_acls": []}
        for _ in body["filters"]]}
