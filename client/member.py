"""Group membership: coordinator discovery, JoinGroup/SyncGroup, heartbeats, leaving — one member's state.

States (seed 004): UNJOINED -> REBALANCING (JoinGroup sent) -> STABLE (SyncGroup answered); any failure
goes back to UNJOINED; a rejoin from STABLE goes to REBALANCING. ``_TRANSITIONS`` lists the legal moves
and every change is checked against it.

Rules and invariants:
- One lock (``self.cond``, a Condition over an RLock) guards all of this object's state. It is never held
  across network I/O or user code: requests are built under it, sent without it, and their responses are
  applied under it again, after checking the generation/state they were sent for is still current.
- Two threads use a member: the application thread (``poll``/``close``, through the consumer) and the
  heartbeat thread (``client.heartbeat``). Only the application thread joins, syncs, and calls the
  protocol hooks (which run user callbacks). The heartbeat thread only heartbeats, looks up the
  coordinator, marks it unknown, leaves on poll timeout, and records what the application must act on
  (``rejoin_needed``, a reset generation, a fatal error) for the next poll.
- Coordinator discovery sends FindCoordinator to the least-loaded node (``Transport.find_coordinator``).
- JoinGroup: a first join without a member id gets MEMBER_ID_REQUIRED and is resent at once with the id
  the coordinator gave; UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION reset the generation and rejoin;
  coordinator errors and dropped connections mark the coordinator unknown and retry after the backoff;
  FENCED_INSTANCE_ID and configuration errors (INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT, ...)
  are raised to the application.
- The leader (and only the leader) runs the assignment; ``skip_assignment`` (a static leader rejoining
  a stable group, JoinGroup v9) means "you are leader, but keep the current assignment".
- A join or sync that outlives the caller's poll timeout stays pending and is resumed by the next poll.
- A reset generation (-1) at the next rebalance means the member's partitions were lost, not revoked.
- Static members (``group_instance_id``) never send LeaveGroup, neither on close nor on poll timeout.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from client.cluster import Cluster, Node
from client.errors import (
    FencedInstanceIdError,
    KafkaConnectionError,
    KafkaError,
    RequestTimedOutError,
    error_for,
)
from client.heartbeat import Heartbeat, HeartbeatThread
from protocol.errors import ErrorCode, is_retriable

log = logging.getLogger(__name__)

JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
_COORDINATOR_MOVED = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})


class MemberState(enum.Enum):
    UNJOINED = "UNJOINED"
    REBALANCING = "REBALANCING"
    STABLE = "STABLE"


_TRANSITIONS = {
    MemberState.UNJOINED: {MemberState.UNJOINED, MemberState.REBALANCING},
    MemberState.REBALANCING: {MemberState.REBALANCING, MemberState.STABLE, MemberState.UNJOINED},
    MemberState.STABLE: {MemberState.REBALANCING, MemberState.UNJOINED},
}


@dataclass(frozen=True, slots=True)
class Generation:
    generation_id: int = -1
    member_id: str = ""
    protocol: str | None = None


NO_GENERATION = Generation()


@dataclass(frozen=True, slots=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class MemberConfig:
    group_id: str
    session_timeout_ms: int = 45000
    rebalance_timeout_ms: int = 300000
    heartbeat_interval_ms: int = 3000
    max_poll_interval_ms: int = 300000
    group_instance_id: str | None = None
    retry_backoff_ms: int = 100
    request_timeout_ms: int = 30000
    protocol_type: str = "consumer"


class ProtocolHooks(Protocol):
    """The embedding protocol's half (the consumer): metadata, assignment, and what happens around joins."""

    def join_protocols(self) -> list[tuple[str, bytes]]: ...
    def on_join_prepare(self, generation: Generation, lost: bool) -> None: ...
    def perform_assignment(self, leader_id: str, protocol: str, members: list[JoinedMember],
                           skip_assignment: bool) -> dict[str, bytes]: ...
    def on_join_complete(self, generation: Generation, assignment: bytes) -> None: ...


class PendingResponse(Protocol):
    version: int

    def done(self) -> bool: ...
    def wait(self, timeout_s: float | None = None) -> bool: ...
    def result(self, timeout_s: float | None = None) -> dict[str, Any]: ...


class Transport(Protocol):
    """The network as a member sees it (``ClusterTransport`` in production, a fake in unit tests)."""

    def find_coordinator(self, group_id: str) -> Node: ...
    def send_async(self, node: Node, api_key: int, body: Any) -> PendingResponse: ...
    def drop(self, node: Node) -> None: ...


class ClusterTransport:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def find_coordinator(self, group_id: str) -> Node:
        return self.cluster.find_coordinator(group_id)

    def send_async(self, node: Node, api_key: int, body: Any) -> PendingResponse:
        return self.cluster.coordinator_connection(node).send_async(api_key, body)

    def drop(self, node: Node) -> None:
        self.cluster.close_coordinator_connection(node)


@dataclass(slots=True)
class _InFlight:
    kind: str  # "join" | "sync"
    future: PendingResponse
    deadline_ms: int
    generation: Generation


class GroupMember:
    def __init__(self, config: MemberConfig, transport: Transport, hooks: ProtocolHooks,
                 clock: Callable[[], float] = time.monotonic, start_heartbeat_thread: bool = True) -> None:
        self.config = config
        self.transport = transport
        self.hooks = hooks
        self._clock = clock
        self.cond = threading.Condition(threading.RLock())
        self.state = MemberState.UNJOINED
        self.generation = NO_GENERATION
        self.coordinator: Node | None = None
        self.rejoin_needed = True
        self.rejoin_reason = "initial join"
        self.is_leader = False
        self.fatal_error: KafkaError | None = None
        self.closed = False
        self._needs_join_prepare = True
        self._in_flight: _InFlight | None = None
        self._retry_at_ms = 0
        self.heartbeat = Heartbeat(config.session_timeout_ms, config.heartbeat_interval_ms,
                                   config.max_poll_interval_ms, config.retry_backoff_ms)
        self._start_thread = start_heartbeat_thread
        self._thread: HeartbeatThread | None = None

    # ------------------------------------------------------------------ small helpers
    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _transition(self, new: MemberState) -> None:
        if new not in _TRANSITIONS[self.state]:
            raise AssertionError(f"illegal member transition {self.state.name} -> {new.name}")
        self.state = new
        self.cond.notify_all()

    @property
    def is_static(self) -> bool:
        return self.config.group_instance_id is not None

    def heartbeat_view(self) -> tuple[bool, bool, bool]:
        with self.cond:
            return self.closed, self.state is MemberState.STABLE, self.coordinator is not None

    def generation_if_stable(self) -> Generation | None:
        with self.cond:
            return self.generation if self.state is MemberState.STABLE else None

    def rebalance_in_progress(self) -> bool:
        with self.cond:
            return self.state is MemberState.REBALANCING or (self.rejoin_needed and self.state is MemberState.STABLE)

    def request_rejoin(self, reason: str) -> None:
        with self.cond:
            if not self.rejoin_needed:
                log.info("group %s: rejoin requested: %s", self.config.group_id, reason)
            self.rejoin_needed, self.rejoin_reason = True, reason
            self.cond.notify_all()

    def reset_generation(self, reason: str, reset_member_id: bool) -> None:
        """Forget the generation (partitions are now lost) and rejoin; keep the member id unless told."""
        with self.cond:
            member_id = "" if reset_member_id else self.generation.member_id
            log.info("group %s: resetting generation (%s)", self.config.group_id, reason)
            self.generation = Generation(-1, member_id, None)
            self.is_leader = False
            self._transition(MemberState.UNJOINED)
            self.rejoin_needed, self.rejoin_reason = True, reason

    def mark_coordinator_unknown(self, reason: str) -> None:
        with self.cond:
            node, self.coordinator = self.coordinator, None
            self.cond.notify_all()
        if node is not None:
            log.info("group %s: coordinator %s unknown: %s", self.config.group_id, node, reason)
            self.transport.drop(node)

    def fail(self, error: KafkaError) -> None:
        with self.cond:
            if self.fatal_error is None:
                self.fatal_error = error
            self.cond.notify_all()

    # ------------------------------------------------------------------ coordinator
    def lookup_coordinator(self) -> bool:
        """One FindCoordinator; True when a coordinator is known afterwards. Fatal errors are recorded."""
        try:
            node = self.transport.find_coordinator(self.config.group_id)
        except KafkaError as e:
            if not e.retriable:
                self.fail(e)
            log.debug("group %s: coordinator lookup failed: %s", self.config.group_id, e)
            return False
        with self.cond:
            self.coordinator = node
            self.heartbeat.reset_session(self.now_ms())
            self.cond.notify_all()
        return True

    def ensure_coordinator_ready(self, deadline_ms: int) -> bool:
        while True:
            self.raise_if_failed()
            with self.cond:
                if self.coordinator is not None:
                    return True
            if self.lookup_coordinator():
                return True
            if not self._sleep_until(min(deadline_ms, self.now_ms() + self.config.retry_backoff_ms)):
                return False
            if self.now_ms() >= deadline_ms:
                return False

    def _sleep_until(self, until_ms: int) -> bool:
        """Wait on the lock's condition until ``until_ms`` (woken early by notify); False if closed."""
        with self.cond:
            wait = until_ms - self.now_ms()
            if wait > 0 and not self.closed:
                self.cond.wait(wait / 1000)
            return not self.closed

    def raise_if_failed(self) -> None:
        with self.cond:
            if self.fatal_error is not None:
                raise self.fatal_error

    # ------------------------------------------------------------------ application thread
    def poll(self, deadline_ms: int) -> bool:
        """Drive membership until STABLE or the deadline; True when the member is STABLE afterwards."""
        with self.cond:
            self.heartbeat.poll(self.now_ms())
            self.cond.notify_all()
        self.raise_if_failed()
        if self._start_thread and self._thread is None:
            self._thread = HeartbeatThread(self, name=f"groupcoord-heartbeat-{self.config.group_id}")
            self._thread.start()
        if not self.ensure_coordinator_ready(deadline_ms):
            return False
        with self.cond:
            needed = self.rejoin_needed or self._in_flight is not None or self.state is not MemberState.STABLE
        if needed and not self._join_group_if_needed(deadline_ms):
            return False
        return self.generation_if_stable() is not None

    def _join_group_if_needed(self, deadline_ms: int) -> bool:
        while True:
            with self.cond:
                if self._in_flight is None and not self.rejoin_needed and self.state is MemberState.STABLE:
                    return True
            self.raise_if_failed()
            if self._in_flight is None:
                if self.now_ms() < self._retry_at_ms:
                    if not self._sleep_until(min(deadline_ms, self._retry_at_ms)) or self.now_ms() >= deadline_ms:
                        return False
                    continue
                if not self.ensure_coordinator_ready(deadline_ms):
                    return False
                if self._needs_join_prepare:
                    with self.cond:
                        generation = self.generation
                    self._needs_join_prepare = False
                    self.hooks.on_join_prepare(generation, lost=generation.generation_id < 0)
                self._send_join()
                continue
            flight = self._in_flight
            wait_ms = min(deadline_ms, flight.deadline_ms) - self.now_ms()
            if not flight.future.wait(max(wait_ms, 0) / 1000):
                if self.now_ms() >= flight.deadline_ms:
                    self._in_flight = None
                    self.mark_coordinator_unknown(f"{flight.kind} request timed out")
                    self._backoff()
                    continue
                return False
            self._in_flight = None
            try:
                resp = flight.future.result(0)
            except KafkaError as e:
                self.mark_coordinator_unknown(f"{flight.kind} failed: {e}")
                self._backoff()
                continue
            if flight.kind == "join":
                self._on_join_response(flight, resp)
            else:
                self._on_sync_response(flight, resp)

    def _backoff(self) -> None:
        self._retry_at_ms = self.now_ms() + self.config.retry_backoff_ms

    def _send(self, kind: str, api_key: int, body: Any, timeout_ms: int, generation: Generation) -> None:
        node = self.coordinator
        if node is None:
            return
        try:
            fut = self.transport.send_async(node, api_key, body)
        except (KafkaConnectionError, RequestTimedOutError) as e:
            self.mark_coordinator_unknown(f"cannot send {kind}: {e}")
            self._backoff()
            return
        self._in_flight = _InFlight(kind, fut, self.now_ms() + timeout_ms, generation)

    def _send_join(self) -> None:
        c = self.config
        protocols = [{"name": n, "metadata": m} for n, m in self.hooks.join_protocols()]
        with self.cond:
            if self.state is not MemberState.REBALANCING:
                self._transition(MemberState.REBALANCING)
            generation = self.generation
            reason = self.rejoin_reason
        if c.group_instance_id is not None:
            _require = _requires_version(JOIN_GROUP, 5, "static membership (group.instance.id)")
        else:
            _require = None

        def body(version: int) -> dict[str, Any]:
            if _require:
                _require(version)
            return {"group_id": c.group_id, "session_timeout_ms": c.session_timeout_ms,
                    "rebalance_timeout_ms": c.rebalance_timeout_ms, "member_id": generation.member_id,
                    "group_instance_id": c.group_instance_id, "protocol_type": c.protocol_type,
                    "protocols": protocols, "reason": reason}
        log.info("group %s: joining (member %r, reason: %s)", c.group_id, generation.member_id, reason)
        self._send("join", JOIN_GROUP, body, c.rebalance_timeout_ms + 5000, generation)

    def _on_join_response(self, flight: _InFlight, resp: dict[str, Any]) -> None:
        code = resp["error_code"]
        c = self.config
        if code == ErrorCode.NONE:
            with self.cond:
                if self.state is not MemberState.REBALANCING:
                    return  # reset meanwhile (e.g. close); the loop decides again
                self.generation = Generation(resp["generation_id"], resp["member_id"], resp["protocol_name"])
                self.is_leader = resp["leader"] == resp["member_id"]
                generation = self.generation
                self.rejoin_needed = False
            log.info("group %s: joined generation %d as %s (%s)", c.group_id, generation.generation_id,
                     generation.member_id, "leader" if self.is_leader else "follower")
            assignments: dict[str, bytes] = {}
            if self.is_leader:
                members = [JoinedMember(m["member_id"], m.get("group_instance_id"), m["metadata"])
                           for m in resp["members"]]
                assignments = self.hooks.perform_assignment(resp["leader"], generation.protocol or "", members,
                                                            bool(resp.get("skip_assignment")))
            self._send_sync(generation, assignments)
            return
        if code == ErrorCode.MEMBER_ID_REQUIRED:
            with self.cond:
                self.generation = Generation(-1, resp["member_id"], None)
            return  # resend at once with the id the coordinator gave us
        self._on_group_error("JoinGroup", code)

    def _send_sync(self, generation: Generation, assignments: dict[str, bytes]) -> None:
        c = self.config

        def body(version: int) -> dict[str, Any]:
            return {"group_id": c.group_id, "generation_id": generation.generation_id,
                    "member_id": generation.member_id, "group_instance_id": c.group_instance_id,
                    "protocol_type": c.protocol_type, "protocol_name": generation.protocol,
                    "assignments": [{"member_id": m, "assignment": a} for m, a in sorted(assignments.items())]}
        self._send("sync", SYNC_GROUP, body, c.request_timeout_ms + c.rebalance_timeout_ms, generation)

    def _on_sync_response(self, flight: _InFlight, resp: dict[str, Any]) -> None:
        code = resp["error_code"]
        if code != ErrorCode.NONE:
            self._on_group_error("SyncGroup", code)
            return
        with self.cond:
            if self.generation != flight.generation or self.state is not MemberState.REBALANCING:
                self.rejoin_needed = True
                return
            self._transition(MemberState.STABLE)
            self.heartbeat.reset_timeouts(self.now_ms())
            generation = self.generation
            rejoin_requested_meanwhile = self.rejoin_needed
        self._needs_join_prepare = True
        log.info("group %s: generation %d stable", self.config.group_id, generation.generation_id)
        self.hooks.on_join_complete(generation, resp["assignment"] or b"")
        if rejoin_requested_meanwhile:
            self.request_rejoin(self.rejoin_reason)

    def _on_group_error(self, api: str, code: int) -> None:
        """Errors shared by JoinGroup and SyncGroup (see module rules)."""
        name = error_for(code).name
        if code == ErrorCode.UNKNOWN_MEMBER_ID:
            self.reset_generation(f"{api}: {name}", reset_member_id=True)
        elif code == ErrorCode.ILLEGAL_GENERATION:
            self.reset_generation(f"{api}: {name}", reset_member_id=False)
        elif code == ErrorCode.REBALANCE_IN_PROGRESS:
            self.request_rejoin(f"{api}: {name}")
        elif code in _COORDINATOR_MOVED:
            self.mark_coordinator_unknown(f"{api}: {name}")
            self.request_rejoin(f"{api}: {name}")
            self._backoff()
        elif code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS or is_retriable(code):
            self.request_rejoin(f"{api}: {name}")
            self._backoff()
        elif code == ErrorCode.FENCED_INSTANCE_ID:
            self.fail(FencedInstanceIdError(f"{api}: group.instance.id {self.config.group_instance_id!r} "
                                            "is used by another member"))
            self.raise_if_failed()
        else:
            with self.cond:
                if self.state is not MemberState.UNJOINED:
                    self._transition(MemberState.UNJOINED)
            raise error_for(code, f"{api} for group {self.config.group_id!r}")

    # ------------------------------------------------------------------ heartbeat thread
    def send_heartbeat(self) -> None:
        c = self.config
        with self.cond:
            node, generation = self.coordinator, self.generation
            if node is None or self.state is not MemberState.STABLE:
                return
            self.heartbeat.sent(self.now_ms())
        body = {"group_id": c.group_id, "generation_id": generation.generation_id,
                "member_id": generation.member_id, "group_instance_id": c.group_instance_id}
        try:
            resp = self.transport.send_async(node, HEARTBEAT, body).result(
                min(c.request_timeout_ms, c.session_timeout_ms) / 1000)
        except KafkaError as e:
            with self.cond:
                self.heartbeat.failed(self.now_ms())
            self.mark_coordinator_unknown(f"heartbeat failed: {e}")
            return
        self.on_heartbeat_response(generation, resp["error_code"])

    def on_heartbeat_response(self, generation: Generation, code: int) -> None:
        now = self.now_ms()
        with self.cond:
            if code == ErrorCode.NONE:
                self.heartbeat.received(now)
                return
            self.heartbeat.failed(now)
            if self.generation != generation:
                return  # the answer is about a generation we already left
        name = error_for(code).name
        if code in _COORDINATOR_MOVED:
            self.mark_coordinator_unknown(f"heartbeat: {name}")
        elif code == ErrorCode.REBALANCE_IN_PROGRESS:
            self.request_rejoin("heartbeat: the group is rebalancing")
        elif code == ErrorCode.UNKNOWN_MEMBER_ID:
            self.reset_generation(f"heartbeat: {name}", reset_member_id=True)
        elif code == ErrorCode.ILLEGAL_GENERATION:
            self.reset_generation(f"heartbeat: {name}", reset_member_id=False)
        elif code == ErrorCode.FENCED_INSTANCE_ID:
            self.fail(FencedInstanceIdError(f"heartbeat: group.instance.id {self.config.group_instance_id!r} "
                                            "is used by another member"))
        elif not is_retriable(code):
            self.fail(error_for(code, "heartbeat"))

    def leave_group(self, reason: str) -> None:
        """Leave (LeaveGroup unless static), forget the generation and member id, and rejoin on next poll."""
        c = self.config
        with self.cond:
            node, generation, state = self.coordinator, self.generation, self.state
        if (not self.is_static and node is not None and generation.member_id
                and state is not MemberState.UNJOINED):
            log.info("group %s: member %s leaving: %s", c.group_id, generation.member_id, reason)
            body = {"group_id": c.group_id, "member_id": generation.member_id,
                    "members": [{"member_id": generation.member_id, "group_instance_id": None,
                                 "reason": reason}]}
            try:
                self.transport.send_async(node, LEAVE_GROUP, body).result(c.request_timeout_ms / 1000)
            except KafkaError as e:
                log.info("group %s: LeaveGroup failed: %s", c.group_id, e)
        with self.cond:
            if self.state is not MemberState.UNJOINED or self.generation.member_id:
                self.reset_generation(f"left: {reason}", reset_member_id=True)

    def close(self, timeout_ms: int | None = None, leave: bool = True) -> None:
        """Stop the heartbeat thread; then LeaveGroup (dynamic members, if ``leave``)."""
        with self.cond:
            if self.closed:
                return
            self.closed = True
            self.cond.notify_all()
        if self._thread is not None:
            self._thread.join((timeout_ms or self.config.request_timeout_ms) / 1000)
        self._in_flight = None
        if leave:
            self.leave_group("the consumer is being closed")


def _requires_version(api_key: int, minimum: int, feature: str) -> Callable[[int], None]:
    def check(version: int) -> None:
        if version < minimum:
            raise KafkaError(f"{feature} needs api {api_key} v{minimum}+, the coordinator offers v{version}")
    return check
