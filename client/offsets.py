"""Offsets: committed offsets (OffsetCommit/OffsetFetch), reset by ListOffsets, and local positions.

Rules and invariants:
- Request bodies are built per negotiated version: OffsetFetch v8+ batches ``groups[]``, v1-7 names one
  group; the builders here take the version and return the right shape, parsers accept both shapes.
- An OffsetFetch entry with offset -1 means "nothing committed" and is left out of the result.
- ``commit_error(code, ...)`` is the one place that turns an OffsetCommit error code into what the
  consumer does: ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID -> ``CommitFailedError`` (the member must reset
  its generation), REBALANCE_IN_PROGRESS -> ``RebalanceInProgressError``, FENCED_INSTANCE_ID ->
  ``FencedInstanceIdError``, coordinator errors -> retriable (mark the coordinator unknown), others as
  ``BrokerResponseError``.
- ``Positions`` is the consumer's local table: assigned partitions and, for each, the next offset to
  consume (None until initialised from the committed offset or the reset policy). Only the application
  thread touches it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from client.consumer_protocol import TopicPartition, group_by_topic
from client.errors import (
    BrokerResponseError,
    CommitFailedError,
    KafkaConnectionError,
    KafkaError,
    NoOffsetForPartitionError,
    RebalanceInProgressError,
    RequestTimedOutError,
    error_for,
)
from protocol.errors import ErrorCode, is_retriable

log = logging.getLogger(__name__)

OFFSET_COMMIT, OFFSET_FETCH, LIST_OFFSETS = 8, 9, 2
EARLIEST_TIMESTAMP, LATEST_TIMESTAMP = -2, -1
RESET_POLICIES = {"earliest": EARLIEST_TIMESTAMP, "latest": LATEST_TIMESTAMP, "none": None}

COORDINATOR_ERRORS = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})
FENCING_ERRORS = frozenset({ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID})


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    metadata: str = ""
    leader_epoch: int = -1


# ---------------------------------------------------------------------------------------------- commit
def offset_commit_body(group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                       offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> Callable[[int], dict[str, Any]]:
    def build(version: int) -> dict[str, Any]:
        topics = [{"name": topic, "partitions": [
            {"partition_index": p, "committed_offset": offsets[TopicPartition(topic, p)].offset,
             "committed_leader_epoch": offsets[TopicPartition(topic, p)].leader_epoch,
             "committed_metadata": offsets[TopicPartition(topic, p)].metadata}
            for p in parts]} for topic, parts in group_by_topic(sorted(offsets))]
        return {"group_id": group_id, "generation_id_or_member_epoch": generation_id, "member_id": member_id,
                "group_instance_id": group_instance_id, "retention_time_ms": -1, "topics": topics}
    return build


def parse_offset_commit(resp: dict[str, Any]) -> dict[TopicPartition, int]:
    return {TopicPartition(t["name"], p["partition_index"]): p["error_code"]
            for t in resp["topics"] for p in t["partitions"]}


def commit_error(code: int) -> BrokerResponseError:
    """The exception for a failed commit (see the module rules)."""
    if code in FENCING_ERRORS:
        return CommitFailedError(code)
    return error_for(code)


def first_error(codes: Mapping[TopicPartition, int]) -> int:
    """The error to act on: fencing first, then any other non-zero code, else NONE."""
    errors = [c for c in codes.values() if c]
    for c in errors:
        if c in FENCING_ERRORS or c == ErrorCode.FENCED_INSTANCE_ID:
            return c
    return errors[0] if errors else ErrorCode.NONE


# ---------------------------------------------------------------------------------------------- fetch
def offset_fetch_body(group_id: str, partitions: Iterable[TopicPartition] | None,
                      require_stable: bool = False) -> Callable[[int], dict[str, Any]]:
    grouped = None if partitions is None else group_by_topic(sorted(set(partitions)))

    def build(version: int) -> dict[str, Any]:
        topics = None if grouped is None else [{"name": t, "partition_indexes": ps} for t, ps in grouped]
        if version < 2 and topics is None:
            raise ValueError("OffsetFetch v1 cannot ask for all partitions")
        return {"group_id": group_id, "topics": topics, "require_stable": require_stable,
                "groups": [{"group_id": group_id, "member_id": None, "member_epoch": -1, "topics": topics}]}
    return build


def parse_offset_fetch(version: int, resp: dict[str, Any],
                       group_id: str) -> tuple[int, dict[TopicPartition, OffsetAndMetadata], dict[TopicPartition, int]]:
    """(group error, committed offsets, per-partition errors) from either response shape."""
    if version >= 8:
        group = next((g for g in resp["groups"] if g["group_id"] == group_id), None)
        if group is None:
            return ErrorCode.UNKNOWN_SERVER_ERROR, {}, {}
        group_error, topics = group["error_code"], group["topics"]
    else:
        group_error, topics = resp.get("error_code", 0), resp["topics"]
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    errors: dict[TopicPartition, int] = {}
    for t in topics:
        for p in t["partitions"]:
            tp = TopicPartition(t["name"], p["partition_index"])
            if p["error_code"]:
                errors[tp] = p["error_code"]
            elif p["committed_offset"] >= 0:
                offsets[tp] = OffsetAndMetadata(p["committed_offset"], p.get("metadata") or "",
                                                p.get("committed_leader_epoch", -1))
    return group_error, offsets, errors


# ---------------------------------------------------------------------------------------------- list offsets
def list_offsets_body(timestamps: Mapping[TopicPartition, int]) -> Callable[[int], dict[str, Any]]:
    def build(version: int) -> dict[str, Any]:
        return {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [
                {"partition_index": p, "current_leader_epoch": -1, "timestamp": timestamps[TopicPartition(topic, p)]}
                for p in parts]} for topic, parts in group_by_topic(sorted(timestamps))]}
    return build


def parse_list_offsets(resp: dict[str, Any]) -> dict[TopicPartition, tuple[int, int]]:
    """(error code, offset) per partition."""
    return {TopicPartition(t["name"], p["partition_index"]): (p["error_code"], p["offset"])
            for t in resp["topics"] for p in t["partitions"]}


# ---------------------------------------------------------------------------------------------- positions
class Positions:
    """Assigned partitions, their next offsets (None = not yet known) and the paused set."""

    def __init__(self) -> None:
        self._positions: dict[TopicPartition, int | None] = {}
        self.paused: set[TopicPartition] = set()

    def assigned(self) -> set[TopicPartition]:
        return set(self._positions)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Replace the assignment; positions of partitions we keep are kept."""
        new = set(partitions)
        self._positions = {tp: self._positions.get(tp) for tp in sorted(new)}
        self.paused &= new

    def add(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self._positions.setdefault(tp, None)

    def remove(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self._positions.pop(tp, None)
            self.paused.discard(tp)

    def is_assigned(self, tp: TopicPartition) -> bool:
        return tp in self._positions

    def position(self, tp: TopicPartition) -> int | None:
        return self._positions[tp]

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if tp not in self._positions:
            raise KeyError(tp)
        self._positions[tp] = offset

    def missing(self) -> list[TopicPartition]:
        return [tp for tp, pos in self._positions.items() if pos is None]

    def consumed(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """What an auto-commit or a bare commit() commits: every known position."""
        return {tp: OffsetAndMetadata(pos) for tp, pos in self._positions.items() if pos is not None}


# ---------------------------------------------------------------------------------------------- group offsets
@dataclass(slots=True)
class _AsyncCommit:
    future: Any
    offsets: dict[TopicPartition, OffsetAndMetadata]
    callback: Callable[..., None] | None
    generation: Any
    error: BaseException | None = None


class GroupOffsets:
    """Commits and fetches a member's offsets at its coordinator; resets positions (application thread).

    Commits carry the member's generation while it is STABLE; outside a generation a commit fails at once
    (RebalanceInProgressError while rebalancing, CommitFailedError otherwise). Coordinator errors and lost
    connections are retried by the synchronous calls until their timeout; asynchronous commits are never
    retried (a later commit may already have superseded them) and report to their callback instead.
    """

    def __init__(self, member: Any, cluster: Any, positions: Positions, reset_policy: str) -> None:
        self.member = member
        self.cluster = cluster
        self.positions = positions
        self.reset_policy = reset_policy
        self._async: list[_AsyncCommit] = []

    # -------------------------------------------------------------- commit
    def _generation(self, explicit: Any = None) -> Any:
        if explicit is not None:
            return explicit
        generation = self.member.generation_if_stable()
        if generation is not None:
            return generation
        if self.member.rebalance_in_progress():
            raise RebalanceInProgressError("commit during a rebalance: poll() to finish it, then commit again")
        raise CommitFailedError(message="the consumer is not a member of an active generation of the group")

    def _deadline(self, timeout_ms: int | None) -> int:
        return self.member.now_ms() + (timeout_ms if timeout_ms is not None else self.member.config.request_timeout_ms)

    def _coordinator(self, deadline_ms: int) -> Any:
        if not self.member.ensure_coordinator_ready(deadline_ms):
            raise RequestTimedOutError(f"group coordinator for {self.member.config.group_id!r} not available")
        node = self.member.coordinator
        if node is None:
            raise KafkaConnectionError("group coordinator lost")
        return node

    def _on_commit_error(self, code: int, generation: Any) -> BrokerResponseError:
        m = self.member
        if code in COORDINATOR_ERRORS:
            m.mark_coordinator_unknown(f"OffsetCommit: {error_for(code).name}")
        elif code in FENCING_ERRORS:
            if m.generation == generation:
                m.reset_generation(f"OffsetCommit: {error_for(code).name}",
                                   reset_member_id=code == ErrorCode.UNKNOWN_MEMBER_ID)
        elif code == ErrorCode.REBALANCE_IN_PROGRESS:
            m.request_rejoin("OffsetCommit: the group is rebalancing")
        elif code == ErrorCode.FENCED_INSTANCE_ID:
            m.fail(error_for(code))
        return commit_error(code)

    def commit_sync(self, offsets: Mapping[TopicPartition, OffsetAndMetadata], timeout_ms: int | None,
                    generation: Any = None) -> None:
        if not offsets:
            return
        deadline = self._deadline(timeout_ms)
        m = self.member
        while True:
            self.complete_async_commits()
            gen = self._generation(generation)
            node = self._coordinator(deadline)
            body = offset_commit_body(m.config.group_id, gen.generation_id, gen.member_id,
                                      m.config.group_instance_id, offsets)
            try:
                resp = m.transport.send_async(node, OFFSET_COMMIT, body).result(
                    max(deadline - m.now_ms(), 1) / 1000)
                code = first_error(parse_offset_commit(resp))
            except (KafkaConnectionError, RequestTimedOutError) as e:
                m.mark_coordinator_unknown(f"OffsetCommit failed: {e}")
                code, err = None, e
            else:
                if code == ErrorCode.NONE:
                    return
                err = self._on_commit_error(code, gen)
                if not err.retriable:
                    raise err
            if m.now_ms() + m.config.retry_backoff_ms >= deadline:
                raise err
            time.sleep(m.config.retry_backoff_ms / 1000)

    def commit_async(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                     callback: Callable[..., None] | None) -> None:
        entry = _AsyncCommit(None, dict(offsets), callback, None)
        self._async.append(entry)
        if not offsets:
            return
        try:
            entry.generation = gen = self._generation()
            node = self._coordinator(self.member.now_ms())
            body = offset_commit_body(self.member.config.group_id, gen.generation_id, gen.member_id,
                                      self.member.config.group_instance_id, offsets)
            entry.future = self.member.transport.send_async(node, OFFSET_COMMIT, body)
        except KafkaError as e:
            entry.error = e

    def complete_async_commits(self, wait_ms: int = 0) -> None:
        """Run the callbacks of finished async commits (waiting up to ``wait_ms`` for the rest)."""
        deadline = self.member.now_ms() + wait_ms
        still: list[_AsyncCommit] = []
        for entry in self._async:
            if entry.future is not None and entry.error is None:
                if not entry.future.wait(max(0, deadline - self.member.now_ms()) / 1000):
                    still.append(entry)
                    continue
                try:
                    code = first_error(parse_offset_commit(entry.future.result(0)))
                    if code:
                        entry.error = self._on_commit_error(code, entry.generation)
                except KafkaError as e:
                    self.member.mark_coordinator_unknown(f"async OffsetCommit failed: {e}")
                    entry.error = e
            if entry.error is not None and entry.callback is None:
                log.warning("async commit failed: %s", entry.error)
            if entry.callback is not None:
                entry.callback(entry.offsets, entry.error)
        self._async = still

    # -------------------------------------------------------------- fetch committed
    def fetch_committed(self, partitions: Iterable[TopicPartition] | None, timeout_ms: int | None
                        ) -> dict[TopicPartition, OffsetAndMetadata]:
        deadline = self._deadline(timeout_ms)
        m = self.member
        group_id = m.config.group_id
        body = offset_fetch_body(group_id, None if partitions is None else list(partitions), require_stable=True)
        while True:
            node = self._coordinator(deadline)
            try:
                fut = m.transport.send_async(node, OFFSET_FETCH, body)
                resp = fut.result(max(deadline - m.now_ms(), 1) / 1000)
                code, offsets, errors = parse_offset_fetch(fut.version, resp, group_id)
                code = code or next(iter(errors.values()), ErrorCode.NONE)
            except (KafkaConnectionError, RequestTimedOutError) as e:
                m.mark_coordinator_unknown(f"OffsetFetch failed: {e}")
                err: KafkaError = e
            else:
                if code == ErrorCode.NONE:
                    return offsets
                if code in COORDINATOR_ERRORS:
                    m.mark_coordinator_unknown(f"OffsetFetch: {error_for(code).name}")
                err = error_for(code, f"OffsetFetch for group {group_id!r}")
                if not err.retriable:
                    raise err
            if m.now_ms() + m.config.retry_backoff_ms >= deadline:
                raise err
            time.sleep(m.config.retry_backoff_ms / 1000)

    # -------------------------------------------------------------- positions
    def update_positions(self, partitions: Iterable[TopicPartition], timeout_ms: int | None) -> None:
        """Initialise unknown positions: the committed offset, else the reset policy (ListOffsets)."""
        missing = [tp for tp in partitions if self.positions.is_assigned(tp) and self.positions.position(tp) is None]
        if not missing:
            return
        committed = self.fetch_committed(missing, timeout_ms)
        for tp, om in committed.items():
            self.positions.seek(tp, om.offset)
        rest = [tp for tp in missing if tp not in committed]
        if not rest:
            return
        timestamp = RESET_POLICIES[self.reset_policy]
        if timestamp is None:
            raise NoOffsetForPartitionError(sorted(rest))
        for tp, offset in self.list_offsets({tp: timestamp for tp in rest}, timeout_ms).items():
            if self.positions.is_assigned(tp):
                self.positions.seek(tp, offset)

    def list_offsets(self, timestamps: Mapping[TopicPartition, int], timeout_ms: int | None
                     ) -> dict[TopicPartition, int]:
        """ListOffsets at each partition's leader; retriable errors refresh metadata and retry."""
        deadline = self._deadline(timeout_ms)
        wanted = dict(timestamps)
        found: dict[TopicPartition, int] = {}
        while True:
            by_leader: dict[int, dict[TopicPartition, int]] = {}
            for tp, ts in wanted.items():
                leader = self.cluster.leader_for(tp.topic, tp.partition)
                by_leader.setdefault(-1 if leader is None else leader, {})[tp] = ts
            retry: dict[TopicPartition, int] = dict(by_leader.pop(-1, {}))
            last: KafkaError | None = None
            for leader, part in by_leader.items():
                try:
                    _, resp = self.cluster.connection(leader).send(LIST_OFFSETS, list_offsets_body(part))
                except (KafkaConnectionError, RequestTimedOutError) as e:
                    retry.update(part)
                    last = e
                    continue
                for tp, (code, offset) in parse_list_offsets(resp).items():
                    if code == ErrorCode.NONE:
                        found[tp] = offset
                    elif is_retriable(code):
                        retry[tp] = part[tp]
                        last = error_for(code, str(tp))
                    else:
                        raise error_for(code, f"ListOffsets for {tp}")
            if not retry:
                return found
            if self.member.now_ms() >= deadline:
                raise last or RequestTimedOutError(f"no leader known for {sorted(retry)}")
            wanted = retry
            time.sleep(self.member.config.retry_backoff_ms / 1000)
            self.cluster.refresh_metadata({tp.topic for tp in retry})
