"""Fast failover (issue #35): telling a peer whose process is gone from one that is slow, stopped or cut off. Pure.

Why a refused connect is the signal: when a process dies (SIGKILL, a crash, OOM), its kernel closes its sockets
at once: its connections are reset (or closed) and its listening port refuses new connections (ECONNREFUSED:
nothing listens there any more). A process that is slow or stopped (SIGSTOP) keeps its listening socket: the
kernel still completes connects into its backlog, and its connections stay open; across a network partition
connects time out. So a refused connect is specific to a dead process; a timeout, a slow answer or a hung
connection is not, and such a peer waits out its ZooKeeper session, as Kafka's controller does.

Rules:
- Evidence is about one registration of a peer: its node id and the ZooKeeper session that owns its
  ``/brokers/ids/<id>`` as this node last read it (``retain``, before each suspicion). A peer registered by
  another session is another process: what was seen of the previous one is forgotten.
- A suspicion (``suspect``) is no evidence; it only asks the runtime for a probe: a plain TCP connect to the
  peer's inter-broker listener. ``broken`` suspicions (a replica fetch connection reset or closed by the peer,
  a connect to it that failed) start a probe sequence unless one runs or one ended less than ``GAP_MS`` ago.
  Quiet ones (an in-sync follower that stopped fetching: a dead process, or a stopped one) wait ``BACKOFF_MS``
  after a sequence that found no crash, doubling to ``MAX_BACKOFF_MS`` while that goes on (reset when the
  peer's session changes): a stopped process gets a few connects in its backlog, never one per check.
- A probe's outcome (``probed``): ``REFUSED`` (every address of the endpoint refused), ``REACHABLE``
  (connected) or ``UNKNOWN`` (timed out, host unreachable, anything else: no evidence either way). A first
  REFUSED asks for a confirming probe ``CONFIRM_MS`` later (the answer is that delay); a second REFUSED of the
  same registration, with nothing else between, is a crash: ``Crashed`` (once). Any other outcome ends the
  sequence. A sequence is thus two probes (``MAX_PROBES``), three after a clock step back; ``done`` ends one
  however it stopped (the runtime calls it when its probing stops, cancelled or not).
- On ``Crashed`` the runtime removes that registration (``ZkStore.remove_broker``, only while that session
  owns it), which the controller handles exactly as a session expiry, and calls ``removed``. When the same
  session registers the peer again, the peer was alive (a false positive: a firewall rejecting connects, a
  listener closed for a shutdown): it is not taken for crashed again before ``HOLD_MS`` has passed, doubling
  to ``MAX_HOLD_MS`` each time that session is removed again within its hold (no flapping).
- Bounded: state only for the peers registered in the last view, plus one hold per peer while its session
  is the held one or the hold runs. Every method takes ``now_ms`` (a monotonic clock's): no clock here, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

REFUSED, REACHABLE, UNKNOWN = "refused", "reachable", "unknown"
CONFIRM_MS = 150  # the confirming probe comes this long after the first refused one
GAP_MS = 500  # a broken connection starts a new probe sequence at most this often
BACKOFF_MS = 1_000  # a quiet follower is probed again at most this often at first ...
MAX_BACKOFF_MS = 30_000  # ... doubling up to this while it stays quiet but reachable
HOLD_MS = 10_000  # a session removed and registered again is not taken for crashed for this long ...
MAX_HOLD_MS = 300_000  # ... doubling up to this each time it happens again
MAX_PROBES = 3  # the runtime's bound on one sequence's probes


@dataclass(frozen=True, slots=True)
class Crashed:
    """A confirmed crash: remove peer ``node_id``'s registration if session ``owner`` still owns it."""

    node_id: int
    owner: int
    observed: str  # what was seen, for the log line


@dataclass(slots=True)
class _Peer:
    owner: int
    probing: bool = False
    why: str = ""  # the suspicion that started the current sequence
    refused_ms: int | None = None  # the first refused probe of the current sequence
    ended_ms: int | None = None  # when the last sequence that found no crash ended
    quiet_wait_ms: int = 0  # a quiet suspicion waits this long after that (0: ``GAP_MS``)
    quiet_sequence: bool = False  # the current sequence was started by a quiet suspicion


@dataclass(slots=True)
class _Hold:
    owner: int
    until_ms: int
    hold_ms: int


class CrashDetector:
    def __init__(self) -> None:
        self._peers: dict[int, _Peer] = {}
        self._holds: dict[int, _Hold] = {}

    def retain(self, owners: Mapping[int, int], now_ms: int) -> None:
        """The peers registered now (node id -> the session owning its registration)."""
        for node in [n for n, p in self._peers.items() if owners.get(n) != p.owner]:
            del self._peers[node]
        for node, owner in owners.items():
            if node not in self._peers:
                self._peers[node] = _Peer(owner)
        for node in [n for n, h in self._holds.items() if owners.get(n) != h.owner and h.until_ms <= now_ms]:
            del self._holds[node]

    def suspect(self, node_id: int, owner: int, why: str, now_ms: int, broken: bool = True) -> bool:
        """Something suggests the peer may be gone; True: probe it now (a sequence starts)."""
        p = self._peers.get(node_id)
        if p is None or p.owner != owner or p.probing:
            return False
        hold = self._holds.get(node_id)
        if hold is not None and hold.owner == owner and now_ms < hold.until_ms:
            return False
        if p.ended_ms is not None and now_ms < p.ended_ms + (GAP_MS if broken else max(GAP_MS, p.quiet_wait_ms)):
            return False
        p.probing, p.why, p.refused_ms, p.quiet_sequence = True, why, None, not broken
        return True

    def probed(self, node_id: int, owner: int, outcome: str, now_ms: int) -> int | Crashed | None:
        """A probe's outcome: the delay (ms) to the confirming probe, a ``Crashed``, or None (sequence over)."""
        p = self._peers.get(node_id)
        if p is None or p.owner != owner or not p.probing:
            return None
        if outcome == REFUSED:
            if p.refused_ms is None:
                p.refused_ms = now_ms
                return CONFIRM_MS
            gap = now_ms - p.refused_ms
            if gap >= CONFIRM_MS:
                p.probing, p.refused_ms = False, None
                return Crashed(node_id, owner, f"{p.why}; then 2 connects refused {gap} ms apart")
            if gap < 0:  # a clock that went back: this refusal is the first one
                p.refused_ms = now_ms
                return CONFIRM_MS
            return CONFIRM_MS - gap  # too early: confirm later
        self._end(p, now_ms)
        return None

    def done(self, node_id: int, owner: int, now_ms: int) -> None:
        """The runtime's probe sequence stopped (however): a sequence still open ends without a verdict."""
        p = self._peers.get(node_id)
        if p is not None and p.owner == owner and p.probing:
            self._end(p, now_ms)

    def removed(self, node_id: int, owner: int, now_ms: int) -> None:
        """The runtime removed this registration: hold that session (see the module rules)."""
        hold = self._holds.get(node_id)
        hold_ms = min(hold.hold_ms * 2, MAX_HOLD_MS) if hold is not None and hold.owner == owner else HOLD_MS
        self._holds[node_id] = _Hold(owner, now_ms + hold_ms, hold_ms)

    def _end(self, p: _Peer, now_ms: int) -> None:
        p.probing, p.refused_ms, p.ended_ms = False, None, now_ms
        if p.quiet_sequence:
            p.quiet_wait_ms = min(p.quiet_wait_ms * 2, MAX_BACKOFF_MS) if p.quiet_wait_ms else BACKOFF_MS
