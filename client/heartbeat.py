"""Heartbeat timers, the heartbeat thread's decision rule, and the thread itself.

Rules (seed 004, "Heartbeat Threads", and Kafka's AbstractCoordinator.HeartbeatThread), checked in order:
1. the member is closed                                   -> stop the thread;
2. the member is not STABLE                               -> send nothing; sleep until woken;
3. the coordinator is unknown                             -> look it up; on failure retry after the backoff;
4. no heartbeat response within session.timeout.ms         -> mark the coordinator unknown;
5. the application has not polled within max.poll.interval.ms -> leave the group (LeaveGroup);
6. the next heartbeat is not due yet                      -> sleep until it is (or until woken);
7. otherwise                                              -> send a heartbeat, record the response time.
A failed heartbeat (no response, or an error) makes the next one due after ``retry.backoff.ms``.

Invariants:
- ``Heartbeat`` is I/O-free bookkeeping over a millisecond clock the caller passes in (tests drive it
  with plain numbers); ``next_action`` is a pure function of it and the member's state.
- The thread decides under the member's lock, acts without it, and never calls user code: anything that
  needs the application (rebalance callbacks, fatal errors) is left in the member for the next poll().
"""

from __future__ import annotations

import enum
import logging
import threading
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Heartbeat:
    session_timeout_ms: int
    heartbeat_interval_ms: int
    max_poll_interval_ms: int
    retry_backoff_ms: int
    next_heartbeat_ms: int = 0
    session_deadline_ms: int = 0
    poll_deadline_ms: int = 0

    def reset_timeouts(self, now_ms: int) -> None:
        """After a successful join: full session, a full interval before the first heartbeat, fresh poll."""
        self.session_deadline_ms = now_ms + self.session_timeout_ms
        self.next_heartbeat_ms = now_ms + self.heartbeat_interval_ms
        self.poll_deadline_ms = now_ms + self.max_poll_interval_ms

    def reset_session(self, now_ms: int) -> None:
        self.session_deadline_ms = now_ms + self.session_timeout_ms

    def poll(self, now_ms: int) -> None:
        self.poll_deadline_ms = now_ms + self.max_poll_interval_ms

    def sent(self, now_ms: int) -> None:
        self.next_heartbeat_ms = now_ms + self.heartbeat_interval_ms

    def received(self, now_ms: int) -> None:
        self.session_deadline_ms = now_ms + self.session_timeout_ms

    def failed(self, now_ms: int) -> None:
        self.next_heartbeat_ms = now_ms + self.retry_backoff_ms

    def session_expired(self, now_ms: int) -> bool:
        return now_ms >= self.session_deadline_ms

    def poll_expired(self, now_ms: int) -> bool:
        return now_ms >= self.poll_deadline_ms

    def time_to_next_heartbeat(self, now_ms: int) -> int:
        return max(0, self.next_heartbeat_ms - now_ms)


class Action(enum.Enum):
    STOP = "stop"
    WAIT_FOR_STABLE = "wait-for-stable"
    FIND_COORDINATOR = "find-coordinator"
    SESSION_TIMED_OUT = "session-timed-out"
    LEAVE_GROUP = "leave-group"
    WAIT = "wait"
    SEND_HEARTBEAT = "send-heartbeat"


def next_action(*, closed: bool, stable: bool, coordinator_known: bool, hb: Heartbeat,
                now_ms: int) -> tuple[Action, int | None]:
    """What the heartbeat thread does now, and how long to sleep for WAIT (None: until woken)."""
    if closed:
        return Action.STOP, None
    if not stable:
        return Action.WAIT_FOR_STABLE, None
    if not coordinator_known:
        return Action.FIND_COORDINATOR, None
    if hb.session_expired(now_ms):
        return Action.SESSION_TIMED_OUT, None
    if hb.poll_expired(now_ms):
        return Action.LEAVE_GROUP, None
    wait = hb.time_to_next_heartbeat(now_ms)
    if wait > 0:
        return Action.WAIT, min(wait, hb.session_deadline_ms - now_ms, hb.poll_deadline_ms - now_ms)
    return Action.SEND_HEARTBEAT, None


class HeartbeatHost(Protocol):
    """What the thread needs from the member (``client.member.GroupMember`` provides it)."""

    cond: threading.Condition
    heartbeat: Heartbeat

    def now_ms(self) -> int: ...
    def heartbeat_view(self) -> tuple[bool, bool, bool]: ...   # (closed, stable, coordinator known)
    def lookup_coordinator(self) -> bool: ...
    def mark_coordinator_unknown(self, reason: str) -> None: ...
    def leave_group(self, reason: str) -> None: ...
    def send_heartbeat(self) -> None: ...


def run_once(host: HeartbeatHost, block: bool = True) -> Action:
    """One decision and its action. With ``block`` the waits happen here: under the lock for WAIT and
    WAIT_FOR_STABLE (so a notify between deciding and waiting cannot be missed), after a failed lookup
    for the backoff. Tests call it with ``block=False`` and a manual clock."""
    with host.cond:
        now = host.now_ms()
        closed, stable, known = host.heartbeat_view()
        action, wait_ms = next_action(closed=closed, stable=stable, coordinator_known=known,
                                      hb=host.heartbeat, now_ms=now)
        if action is Action.SESSION_TIMED_OUT:
            host.mark_coordinator_unknown("session timed out without a successful heartbeat response")
        elif action is Action.WAIT_FOR_STABLE and block:
            host.cond.wait()
        elif action is Action.WAIT and block:
            host.cond.wait((wait_ms or 0) / 1000)
    if action is Action.FIND_COORDINATOR:
        if not host.lookup_coordinator() and block:
            with host.cond:
                host.cond.wait(host.heartbeat.retry_backoff_ms / 1000)
    elif action is Action.LEAVE_GROUP:
        host.leave_group("consumer poll timeout has expired: poll() was not called within max.poll.interval.ms")
    elif action is Action.SEND_HEARTBEAT:
        host.send_heartbeat()
    return action


class HeartbeatThread(threading.Thread):
    def __init__(self, host: HeartbeatHost, name: str = "groupcoord-heartbeat") -> None:
        super().__init__(name=name, daemon=True)
        self.host = host

    def run(self) -> None:
        try:
            while run_once(self.host) is not Action.STOP:
                pass
        except Exception:  # never silent; the member stays usable and reports problems on the next poll
            log.exception("heartbeat thread failed")
            raise
