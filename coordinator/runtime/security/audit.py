"""The audit trail: who changed what, and who was refused, kept durable and bounded (beyond Kafka, which only
logs these to log4j).

Rules:
- What is recorded: every state-changing admin request (CreateTopics, DeleteTopics, CreatePartitions,
  AlterConfigs, IncrementalAlterConfigs, DeleteGroups, OffsetDelete, CreateAcls, DeleteAcls,
  AlterUserScramCredentials) and every OffsetCommit made outside a group generation (generation -1, no
  member: an offsets reset, or a consumer that commits without a group), each with its outcome; and every
  authorization denial (Metadata's, ListGroups' and an all-topics OffsetFetch's silent filtering excepted,
  as Kafka logs those at no level). Group-less commits repeat: one event per group, principal, host and
  client id every ``COMMIT_EVENT_S`` (a reset is a single request: always recorded).
- An event is one JSON object: ``time`` (ms since the epoch), ``principal``, ``host``, ``client_id``,
  ``listener``, ``api``, ``resource_type``, ``resource`` (names, comma-separated), ``operation``,
  ``outcome`` ("ok", "denied", or the Kafka error names of what failed; "requested" for a one-partition
  commit, whose answer the hot path writes). ``groupcoord audit`` prints them.
- Where: ``<data dir>/audit/``, a partition log of its own (no topic, no client can write it): one record
  per event, appended on the event loop (a page-cache write) and fsynced within ``FLUSH_S`` by a background
  task, and at shutdown. Bounded by ``audit.retention.bytes`` and ``audit.retention.ms`` (whole segments go,
  oldest first). A write that fails is logged once (rate-limited) and never fails the request.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import trio

from coordinator.metrics import api_name
from coordinator.runtime.rate_limited_log import RateLimitedLog
from coordinator.storage.errors import StorageError
from coordinator.storage.log import LogConfig, PartitionLog
from protocol.errors import error_name
from protocol.record_batch import build_batch, iter_records

if TYPE_CHECKING:
    from coordinator.runtime.dispatch import Slot
    from protocol.codec import Request

AUDIT_DIR = "audit"
FLUSH_S = 1.0
COMMIT_EVENT_S = 10.0
SEGMENT_BYTES = 8 << 20

# api key -> (resource type, operation, how to name the resources of a request body)
ADMIN_APIS: dict[int, tuple[str, str]] = {
    19: ("TOPIC", "CREATE"), 20: ("TOPIC", "DELETE"), 37: ("TOPIC", "ALTER"), 33: ("CONFIG", "ALTER_CONFIGS"),
    44: ("CONFIG", "ALTER_CONFIGS"), 42: ("GROUP", "DELETE"), 47: ("GROUP", "DELETE_OFFSETS"),
    30: ("ACL", "CREATE"), 31: ("ACL", "DELETE"), 51: ("USER", "ALTER"), 8: ("GROUP", "RESET_OFFSETS"),
}


def resources_of(api_key: int, body: Any) -> str:
    """The names a request acts on, for the trail."""
    if api_key == 19 or api_key == 37:
        return ",".join(t["name"] for t in body["topics"])
    if api_key == 20:
        return ",".join(body.get("topic_names") or [t.get("name") or str(t.get("topic_id")) for t in body.get("topics")
                                                     or []])
    if api_key in (33, 44):
        return ",".join(f"{r['resource_type']}:{r['resource_name']}" for r in body["resources"])
    if api_key == 42:
        return ",".join(body["groups_names"])
    if api_key in (47, 8):
        topics = ",".join(t["name"] for t in body["topics"])
        return f"{body['group_id']} ({topics})"
    if api_key == 30:
        return ",".join(f"{c['principal']} {c['permission_type']}/{c['operation']} on {c['resource_type']}:"
                        f"{c['resource_name']}" for c in body["creations"])
    if api_key == 31:
        return ",".join(f"{f.get('principal_filter')} on {f['resource_type_filter']}:{f.get('resource_name_filter')}"
                        for f in body["filters"])
    if api_key == 51:
        return ",".join(dict.fromkeys([d["name"] for d in body.get("deletions") or []]
                                      + [u["name"] for u in body.get("upsertions") or []]))
    return ""


def errors_in(body: Any) -> list[int]:
    """Every non-zero error code anywhere in a response body."""
    found: list[int] = []
    stack = [body]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for k, v in item.items():
                if k == "error_code" and isinstance(v, int) and v:
                    found.append(v)
                elif isinstance(v, (dict, list)):
                    stack.append(v)
        elif isinstance(item, list):
            stack.extend(item)
    return found


class AuditLog:
    def __init__(self, data_dir: str, retention_bytes: int, retention_ms: int) -> None:
        config = LogConfig(segment_bytes=min(SEGMENT_BYTES, max(retention_bytes // 4, 1 << 16)),
                           retention_ms=retention_ms, retention_bytes=retention_bytes, compact=False, delete=True)
        self.log = PartitionLog.open(os.path.join(os.path.abspath(data_dir), AUDIT_DIR), config)
        self.problems = RateLimitedLog(logging.getLogger("groupcoord.audit"), 60.0)
        self._dirty = False
        self._last_commit: dict[tuple[str, str, str, str | None], float] = {}

    def record(self, event: dict[str, Any]) -> None:
        now = int(time.time() * 1000)
        event = {"time": now, **event}
        try:
            self.log.append([build_batch([(None, json.dumps(event, separators=(",", ":")).encode(), (), now)])])
            self._dirty = True
        except (StorageError, OSError) as e:
            self.problems.error("audit event not written: %s", e)

    def admin(self, request: Request, slot: Slot) -> None:
        """Record ``request``'s outcome once its answer is ready (chained into ``slot.merge``)."""
        what = ADMIN_APIS.get(request.api_key)
        if what is None:
            return
        body = request.body
        if request.api_key == 8:  # only commits outside a group generation: resets, group-less commits
            if not isinstance(body, dict):  # the hot decoder's one-partition commit
                if body.member_id or body.generation >= 0 or self._quiet(body.group_id, slot, request):
                    return
                resource = f"{body.group_id} ({body.topic})"
            else:
                if body.get("member_id") or body.get("generation_id_or_member_epoch", -1) >= 0 or \
                        self._quiet(body["group_id"], slot, request):
                    return
                resource = resources_of(8, body)
        else:
            resource = resources_of(request.api_key, body)
        conn, previous = slot.conn, slot.merge

        def event(outcome: str) -> None:
            self.record({"principal": getattr(conn, "principal", "User:ANONYMOUS"), "host": conn.host,
                         "client_id": request.header.client_id, "listener": getattr(conn, "listener", ""),
                         "api": api_name(request.api_key), "resource_type": what[0], "resource": resource,
                         "operation": what[1], "outcome": outcome})

        if not isinstance(body, dict):  # answered by the hot path, which bypasses merge: recorded as it arrives
            event("requested")
            return

        def merge(answer: dict[str, Any]) -> dict[str, Any]:
            if previous is not None:
                answer = previous(answer)
            codes = errors_in(answer)
            event("ok" if not codes else ",".join(sorted({error_name(c) for c in codes})))
            return answer

        slot.merge = merge

    def _quiet(self, group: str, slot: Slot, request: Request) -> bool:
        """A group-less committer commits again and again: one event per group, principal, host and client
        every ``COMMIT_EVENT_S`` (a reset is one request, so it is always the first in its window)."""
        conn = slot.conn
        key = (group, getattr(conn, "principal", ""), conn.host, request.header.client_id)
        now = time.monotonic()
        if self._last_commit.get(key, -COMMIT_EVENT_S) > now - COMMIT_EVENT_S:
            return True
        if len(self._last_commit) >= 10_000:  # bounded whatever clients name
            self._last_commit.clear()
        self._last_commit[key] = now
        return False

    def denied(self, request: Request, slot: Slot, denials: list[tuple[int, int, str]]) -> None:
        conn = slot.conn
        from protocol.acl_types import AclOperation, ResourceType

        for op, rtype, name in denials:
            self.record({"principal": getattr(conn, "principal", "User:ANONYMOUS"), "host": conn.host,
                         "client_id": request.header.client_id, "listener": getattr(conn, "listener", ""),
                         "api": api_name(request.api_key), "resource_type": ResourceType(rtype).name,
                         "resource": name, "operation": AclOperation(op).name, "outcome": "denied"})

    async def run(self) -> None:
        """fsync what was appended at least every FLUSH_S; apply retention now and then."""
        retention_at = 0.0
        while True:
            await trio.sleep(FLUSH_S)
            await self.flush()
            if trio.current_time() >= retention_at:
                retention_at = trio.current_time() + 60
                try:
                    await trio.to_thread.run_sync(self.log.apply_retention, int(time.time() * 1000))
                except (StorageError, OSError) as e:
                    self.problems.error("audit retention failed: %s", e)

    async def flush(self) -> None:
        if self._dirty:
            self._dirty = False
            try:
                await trio.to_thread.run_sync(self.log.flush)
            except (StorageError, OSError) as e:
                self.problems.error("audit events not fsynced: %s", e)

    def close(self) -> None:
        self.log.close()


def read_events(data_dir: str, since_ms: int = 0) -> Iterator[dict[str, Any]]:
    """Every event in ``<data dir>/audit`` at or after ``since_ms``, oldest first; readable while the server
    runs (segments are append-only; a partial last batch is skipped). Never writes."""
    directory = os.path.join(os.path.abspath(data_dir), AUDIT_DIR)
    if not os.path.isdir(directory):
        return
    for name in sorted(n for n in os.listdir(directory) if n.endswith(".log")):
        try:
            with open(os.path.join(directory, name), "rb") as f:
                data = f.read()
        except FileNotFoundError:  # removed by retention meanwhile
            continue
        for rec in iter_records(data):
            if rec.value is None:
                continue
            try:
                event = json.loads(bytes(rec.value))
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("time", 0) >= since_ms:
                yield event
