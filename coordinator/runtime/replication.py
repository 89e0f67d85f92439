"""Replication in cluster mode (issue #20): leaders track followers, advance the high watermark, keep the
ISR in ZooKeeper, and release acknowledgements; followers fetch (``replica_fetcher``).

Rules (Apache Kafka's ZooKeeper-era ``ReplicaManager``/``Partition``, with durable replication):
- ``on_view`` (called by the member on every published view, before groups follow leadership) makes this
  node the leader of each partition whose state names it (its log stamps the leader epoch into what it
  appends; the epoch starts at the log end in the leader-epoch cache) and a follower of the others it is a
  replica of (one ``ReplicaFetcher`` per leader node; a partition whose leader or epoch changed is truncated
  by leader epoch before its next fetch). A leader whose epoch moves on (the controller shrank the ISR for a
  dead broker) keeps its followers' progress and its waiting acknowledgements.
- Follower fetches (Fetch with replica_id >= 0) are served here, in fetch sessions (``fetch_sessions``: a
  request lists only what moved, an answer only partitions with news; every partition of the session is
  served each time, so each follower's progress is noted at every fetch): leader epoch checked (older:
  FENCED_LEADER_EPOCH, newer: UNKNOWN_LEADER_EPOCH), the fetch offset taken as the follower's durable end
  (``replica_state``), data sent up to the leader's log end (as Kafka: followers fsync while the leader
  does; the high watermark still waits for the leader's own fsync), and the high watermark returned. A
  fetch with nothing to send waits (``max_wait_ms``) until something is appended (``notify_append``); a
  wake-up serves only the session's partitions with records past their fetch offset, and with them those
  whose high watermark moved since last answered (Kafka's DelayedFetch: progress was noted when the fetch
  arrived).
  Every partition of the session is served at each fetch, cheaply (issue #35): one where nothing moved (the
  follower's offset the one noted, the leader's end, the high watermark and the last answered one; the
  follower in the ISR) is passed over and marked: the follower was caught up at that fetch, which is noted
  in its progress before the partition is next served and at each ISR check, so the caught-up clock reads as
  if every fetch had been noted. Otherwise an answer entry is built only for a partition that goes in the
  answer, and the high watermark is recomputed only when the follower's durable end moved or the leader's own
  durable end is past it; nothing else it depends on changes without recomputing it itself
  (``notify_local``, ``_write_isr``, and ``on_view``, also for an ISR changed at the same leader epoch).
  Answers are encoded by ``protocol.replica_fetch`` (Fetch v12; other versions and shapes by the generic
  codec), and requests decoded by it (the broker's hot decoder for Fetch v12).
- High watermark: the least durable end over the ISR (``replica_state.LeaderReplicaState.advance``), moved
  on every follower fetch and every local fsync the services report (``when_replicated``/``notify_local``).
  Consumers (Fetch replica_id -1) read below it, and retention deletes no segment above it
  (``retention_bound``; a follower's: the leader's last reported one, capped at its own durable end).
- Acknowledgements (``when_replicated``, and ``staging`` for the group commit): answered once the high
  watermark covers the write and the ISR has ``min.insync.replicas`` members (capped at the replica count);
  when the high watermark covers it with fewer, NOT_ENOUGH_REPLICAS_AFTER_APPEND (produce) /
  COORDINATOR_NOT_AVAILABLE (commits: Kafka's GroupMetadataManager maps both); past their timeout,
  REQUEST_TIMED_OUT / COORDINATOR_NOT_AVAILABLE; a lost leadership NOT_LEADER_OR_FOLLOWER / NOT_COORDINATOR.
  The errors are ``ReplicationError``s carrying both codes; the services pick theirs.
- Fencing: while the ZooKeeper session is SUSPENDED nothing is acknowledged (acks=1 included: waiters
  wait, and time out if it lasts); session LOST, or leaving the cluster, gives up every leadership (the
  member publishes an empty view) and fails the waiters.
- ISR: every ``ISR_CHECK_S`` (and at once when a follower catches up) each led partition's ISR change is
  written to its state znode with a version check (``ZkStore.update_isr``); a lost check fences the
  partition (it answers NOT_LEADER_OR_FOLLOWER, its waiters fail) until a view brings a new state.
- Fast failover (issue #35, ``coordinator.cluster.crash_detector`` decides, this module probes, the member
  acts; ``zookeeper.fast.failover.enable``): a replica fetcher whose connection to its leader was reset or
  closed by it, or whose connect failed, and the ISR check finding an in-sync follower that has fetched
  nothing for ``QUIET_MS``, report the peer (``peer_trouble``). A suspicion the detector lets through is
  probed: a plain TCP connect to the peer's inter-broker listener (every address it resolves to, each
  bounded by ``PROBE_TIMEOUT_S``), once more ``CONFIRM_MS`` after a first refusal; two refusals make
  ``ClusterMember.remove_crashed`` delete the peer's registration (if its session still owns it), and the
  controller moves its leaderships as on a session expiry. One probing task per peer at a time.
  A slow, stopped or partitioned peer never refuses (its kernel keeps its listening socket, or nothing
  answers at all): it waits out its session, as before. If a live node is removed all the same, nothing
  acknowledged is lost: it gives up its leaderships as soon as it sees it (``member``), and until then what
  it still leads cannot be acknowledged past what its in-sync followers hold (they follow the new leader
  epoch and their fetches to it are fenced), nor can it shrink the ISR to itself (the controller's write
  moved the state znode's version: the lost check fences the partition). An acks=1 write it takes in that
  moment is answered and may be lost, as on any deposed Kafka leader (acks=1 waits for no follower).
- Nothing here runs in single-node mode: the broker creates it only when ``zookeeper.connect`` is set.
- Metrics (``cluster_stats``, read at scrape time from the metrics thread, on copies): ISR shrinks and
  expands count every change of a led partition's ISR, whether this leader wrote it (a follower fell
  behind or caught up) or the controller did (a dead broker removed): a change that both drops and adds
  members counts once each. Under-replicated: led partitions whose ISR is smaller than their replicas.
  Lag per follower of a led partition: the leader's log end minus the follower's durable end at its last
  fetch (the whole log from its start while it has not fetched under this leader).
"""

from __future__ import annotations

import errno
import logging
import math
import socket
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from coordinator.cluster.crash_detector import MAX_PROBES, REACHABLE, REFUSED, UNKNOWN, CrashDetector, Crashed
from coordinator.cluster.fetch_sessions import FetchContext, FetchSessions, SessionPartition
from coordinator.cluster.replica_state import LeaderReplicaState
from coordinator.cluster.state import BrokerInfo, ClusterView, PartitionState, TopicPartition
from coordinator.cluster.zk import ZkError
from coordinator.runtime.rate_limited_log import RateLimitedLog
from coordinator.runtime.replica_fetcher import ReplicaFetcher
from coordinator.runtime.security.peer_login import DEFAULT_LISTENER, PeerLogin
from coordinator.storage.errors import StorageError
from coordinator.storage.leader_epochs import UNDEFINED
from protocol.errors import ErrorCode
from protocol.messages.fetch import empty_partition
from protocol.replica_fetch import encode_response

if TYPE_CHECKING:
    from coordinator.cluster.member import ClusterMember
    from coordinator.runtime.dispatch import Slot
    from coordinator.runtime.group_commit import GroupCommit
    from coordinator.runtime.services import PeerConnector
    from coordinator.storage.log import PartitionLog
    from protocol.codec import Request

log = logging.getLogger("groupcoord.replication")

ISR_CHECK_S = 0.25
TIMEOUT_CHECK_S = 0.1
QUIET_MS = 1_500  # an in-sync follower that has not fetched for this long is suspected (fetches wait 0.5 s)
PROBE_TIMEOUT_S = 1.0  # fast failover: a probe connect that takes longer is no evidence
Callback = Callable[[Exception | None], None]
OpenLog = Callable[[str, int], "PartitionLog | None"]


class ReplicationError(Exception):
    """Why a write was not acknowledged: the produce error code and the commit error code to answer."""

    def __init__(self, message: str, produce_error: int, commit_error: int) -> None:
        super().__init__(message)
        self.produce_error = produce_error
        self.commit_error = commit_error


def not_leader(tp: TopicPartition) -> ReplicationError:
    return ReplicationError(f"no longer the leader of {tp[0]}-{tp[1]}", ErrorCode.NOT_LEADER_OR_FOLLOWER,
                            ErrorCode.NOT_COORDINATOR)


def not_enough_replicas(tp: TopicPartition, isr: int, needed: int) -> ReplicationError:
    return ReplicationError(f"{tp[0]}-{tp[1]}: {isr} in-sync replicas, {needed} needed",
                            ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.COORDINATOR_NOT_AVAILABLE)


def timed_out(tp: TopicPartition) -> ReplicationError:
    return ReplicationError(f"{tp[0]}-{tp[1]}: not replicated in time", ErrorCode.REQUEST_TIMED_OUT,
                            ErrorCode.COORDINATOR_NOT_AVAILABLE)


@dataclass(slots=True)
class _ParkedFetch:
    """A follower fetch with nothing to send yet (Kafka's DelayedFetch): answered by ``notify_append`` once a
    partition of it has records past its fetch offset, or by ``_parked_loop`` at its deadline."""

    replica: int
    ctx: FetchContext
    slot: Slot
    budget: int
    deadline: float  # trio time


@dataclass(slots=True)
class _Waiter:
    required: int  # the high watermark that covers the write (its last offset + 1)
    deadline: float  # trio time
    callback: Callback


class Replication:
    def __init__(self, config: Any, member: ClusterMember, open_log: OpenLog,
                 wake_consumers: Callable[[], None], min_isr_of: Callable[[str], int] | None = None,
                 on_lead: Callable[[PartitionLog], None] = lambda _plog: None,
                 commit: GroupCommit | None = None, peer: PeerConnector | None = None) -> None:
        self.node_id: int = config["node.id"]
        # how followers reach leaders: the inter-broker listener with its TLS and SASL (PLAINTEXT by default)
        self.peer: PeerConnector = peer if peer is not None else PeerLogin({}, DEFAULT_LISTENER)
        self.min_isr: int = config["min.insync.replicas"]
        # a topic's min.insync.replicas (its override, else the server's)
        self.min_isr_of: Callable[[str], int] = min_isr_of or (lambda _topic: self.min_isr)
        self.on_lead = on_lead  # a log this node starts leading (caches built from its tail are dropped)
        self.commit = commit  # the node's group commit: followers' small appends go through its journal
        if commit is not None:  # a round appended staged writes (commits, group metadata): followers fetch them
            commit.on_appended = self.notify_append
        # a followed log's new batches, called on the trio thread once they are durable here (in log order)
        self.on_follower_append: Callable[[PartitionLog, list[memoryview]], None] = lambda _plog, _batches: None
        # a followed log was cut back (truncation by leader epoch, or emptied behind its leader's log start)
        self.on_follower_truncate: Callable[[PartitionLog], None] = lambda _plog: None
        self.lag_max_ms: int = config["replica.lag.time.max.ms"]
        self.member = member
        self.open_log = open_log
        self.wake_consumers = wake_consumers
        self.leaders: dict[TopicPartition, LeaderReplicaState] = {}
        self.fenced: set[TopicPartition] = set()  # lost an ISR version check: not leading until a new state
        self._fenced_epochs: dict[TopicPartition, int] = {}
        self.logs: dict[TopicPartition, PartitionLog] = {}  # led or followed partitions' logs
        self._tp_of: dict[PartitionLog, TopicPartition] = {}
        self._isr_versions: dict[TopicPartition, int] = {}  # state znode version we know for a led partition
        self._controller_epochs: dict[TopicPartition, int] = {}
        self.follower_hw: dict[TopicPartition, int] = {}  # high watermark a leader told this follower
        self.following: dict[TopicPartition, tuple[int, int]] = {}  # tp -> (leader, leader epoch)
        self._waiters: dict[TopicPartition, deque[_Waiter]] = {}
        # follower fetches waiting for records (no task each: notify_append serves them, _parked_loop ends them)
        self._parked: list[_ParkedFetch] = []
        self._parked_wake = trio.Event()
        self._parked_until = math.inf  # the deadline _parked_loop sleeps until
        self._isr_wake = trio.Event()
        self.sessions = FetchSessions()  # follower fetch sessions this node (as a leader) keeps
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._fetchers_changed = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._problems = RateLimitedLog(log, 5.0)
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.suspended = False  # the ZooKeeper session is SUSPENDED: nothing is acknowledged
        self.fast_failover: bool = config.get("zookeeper.fast.failover.enable", True)
        self.crashes = CrashDetector()  # fast failover: which peers to probe, and when one crashed
        member.on_replicas = self.on_view
        member.on_suspended = self.set_suspended

    # ---------------------------------------------------------------- following the view
    def on_view(self, view: ClusterView) -> None:
        me = self.node_id
        seen: set[TopicPartition] = set()
        wanted: dict[int, dict[TopicPartition, int]] = {}  # leader node -> tp -> leader epoch
        for topic, parts in view.assignments.items():
            for p, replicas in parts.items():
                if me not in replicas:
                    continue
                tp = (topic, p)
                st = view.states.get(tp)
                if st is None:
                    continue
                try:
                    plog = self.open_log(topic, p)
                except (StorageError, OSError) as e:
                    self._problems.error("cannot open the log of %s-%s: %s", topic, p, e)
                    continue
                if plog is None:
                    continue
                seen.add(tp)
                self.logs[tp] = plog
                self._tp_of[plog] = tp
                if st.leader == me and me in view.brokers:
                    self._lead(tp, plog, st, replicas, view)
                elif st.leader in view.brokers:
                    self._stop_leading(tp)
                    wanted.setdefault(st.leader, {})[tp] = st.leader_epoch
                    self.following[tp] = (st.leader, st.leader_epoch)
                else:
                    self._stop_leading(tp)
                    self.following.pop(tp, None)
        for tp in [tp for tp in self.leaders if tp not in seen]:
            self._stop_leading(tp)
        for tp in [tp for tp in self.following if tp not in seen]:
            del self.following[tp]
        for tp in [tp for tp in self.logs if tp not in seen]:  # deleted topics: forget their logs
            self._tp_of.pop(self.logs.pop(tp), None)
            self.follower_hw.pop(tp, None)
        self._set_fetchers(view.brokers, wanted)

    def _lead(self, tp: TopicPartition, plog: PartitionLog, st: PartitionState, replicas: tuple[int, ...],
              view: ClusterView) -> None:
        version = self.member.state_versions.get(tp, -1)
        cur = self.leaders.get(tp)
        if tp in self.fenced:
            if self._fenced_epochs.get(tp) == st.leader_epoch and version <= self._isr_versions.get(tp, -1):
                return  # still the state whose version check we lost
            self.fenced.discard(tp)
        self.following.pop(tp, None)
        if cur is not None and cur.leader_epoch == st.leader_epoch:
            if version > self._isr_versions.get(tp, -1):  # a newer state than the one we wrote
                self._count_isr_change(cur.isr, st.isr)
                cur.isr, cur.replicas = st.isr, replicas
                self._isr_versions[tp] = version
                self._controller_epochs[tp] = st.controller_epoch
                self._advance(tp, cur, plog)  # a smaller ISR may move the high watermark
            return
        now = _now_ms()
        try:
            plog.become_leader(st.leader_epoch)
        except StorageError as e:
            self._problems.error("cannot lead %s-%s: %s", tp[0], tp[1], e)
            return
        hw = min(self.follower_hw.get(tp, plog.log_start_offset), plog.high_watermark)
        fresh = LeaderReplicaState(self.node_id, st.leader_epoch, replicas, st.isr,
                                   cur.high_watermark if cur is not None else hw, plog.log_end_offset, now)
        if cur is not None:  # a new epoch of our own leadership (the controller shrank the ISR)
            self._count_isr_change(cur.isr, st.isr)
            for r, f in cur.followers.items():
                if r in fresh.followers:
                    fresh.followers[r] = f
        else:
            self.on_lead(plog)
            log.info("leading %s-%s at epoch %d (ISR %s, log end %d)", tp[0], tp[1], st.leader_epoch,
                     list(st.isr), plog.log_end_offset)
        self.leaders[tp] = fresh
        self._isr_versions[tp] = version
        self._controller_epochs[tp] = st.controller_epoch
        self._advance(tp, fresh, plog)

    def _stop_leading(self, tp: TopicPartition, fenced_epoch: int | None = None) -> None:
        st = self.leaders.pop(tp, None)
        if st is None:
            return
        plog = self.logs.get(tp)
        if plog is not None:
            plog.become_follower()
        if fenced_epoch is not None:
            self.fenced.add(tp)
            self._fenced_epochs[tp] = fenced_epoch
        log.info("no longer leading %s-%s (epoch %d)%s", tp[0], tp[1], st.leader_epoch,
                 ": the ISR version check was lost" if fenced_epoch is not None else "")
        waiters = self._waiters.pop(tp, None)
        for w in waiters or ():
            _call(w.callback, not_leader(tp))

    def _set_fetchers(self, brokers: dict[int, BrokerInfo], wanted: dict[int, dict[TopicPartition, int]]) -> None:
        for node, fetcher in list(self.fetchers.items()):
            info = brokers.get(node)
            if node not in wanted or info is None or info != fetcher.leader:
                fetcher.stop()
                del self.fetchers[node]
        for node, parts in wanted.items():
            fetcher = self.fetchers.get(node)
            if fetcher is None:
                fetcher = self.fetchers[node] = ReplicaFetcher(self, brokers[node])
                self._fetchers_changed.set()
            fetcher.follow(parts)

    # ---------------------------------------------------------------- background
    async def run(self) -> None:
        """Fetcher tasks (one per leader node), the ISR checker and the acknowledgement timeouts."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._isr_loop)
            nursery.start_soon(self._timeout_loop)
            nursery.start_soon(self._parked_loop)
            started: set[ReplicaFetcher] = set()
            while True:
                for fetcher in list(self.fetchers.values()):
                    if fetcher not in started:
                        started.add(fetcher)
                        nursery.start_soon(fetcher.run)
                started = {f for f in started if not f.stopped}
                await self._fetchers_changed.wait()
                self._fetchers_changed = trio.Event()

    async def _isr_loop(self) -> None:
        while True:
            with trio.move_on_after(ISR_CHECK_S):
                await self._isr_wake.wait()
            self._isr_wake = trio.Event()
            now = _now_ms()
            live = set(self.member.view.brokers)
            quiet: dict[int, str] = {}  # fast failover: in-sync followers that stopped fetching
            for tp, st in list(self.leaders.items()):
                plog = self.logs.get(tp)
                if plog is None or tp in self.fenced:
                    continue
                self._settle_idle(tp, st)
                for r in st.isr:
                    f = st.followers.get(r)
                    silent = now - max(f.last_fetch_ms, st.now_ms) if f is not None else 0
                    if silent > QUIET_MS and r not in quiet:
                        quiet[r] = f"in-sync follower of {tp[0]}-{tp[1]} has not fetched for {silent} ms"
                new = st.isr_change(plog.log_end_offset, now, self.lag_max_ms, live)
                if new is not None:
                    await self._write_isr(tp, st, new)
            for r, why in quiet.items():
                self.peer_trouble(r, why, broken=False)

    # ---------------------------------------------------------------- fast failover
    def peer_trouble(self, node_id: int, what: str, broken: bool = True) -> None:
        """A sign that peer ``node_id``'s process may be gone (see the module rules): probe it when the
        detector says so. ``broken``: a connection to it broke or a connect failed (else: it went quiet)."""
        member = self.member
        if not self.fast_failover or self._nursery is None or member.closed or node_id == self.node_id:
            return
        owners, now = member.broker_owners, _mono_ms()
        self.crashes.retain({n: s for n, s in owners.items() if n != self.node_id}, now)
        owner = owners.get(node_id)
        info = member.view.brokers.get(node_id)
        if owner is None or info is None:
            return
        if self.crashes.suspect(node_id, owner, what, now, broken):
            self._nursery.start_soon(self._probe_peer, node_id, owner, info)

    async def _probe_peer(self, node_id: int, owner: int, info: BrokerInfo) -> None:
        at = info.endpoint(self.peer.listener)
        address = f"{at[0]}:{at[1]}" if at is not None else f"no {self.peer.listener} listener"
        try:
            for _ in range(MAX_PROBES):
                outcome = UNKNOWN if at is None else await probe_listener(at[0], at[1], PROBE_TIMEOUT_S)
                log.debug("probe of node %s (%s): %s", node_id, address, outcome)
                verdict = self.crashes.probed(node_id, owner, outcome, _mono_ms())
                if isinstance(verdict, Crashed):
                    if await self.member.remove_crashed(verdict, address):
                        self.crashes.removed(node_id, owner, _mono_ms())
                    return
                if verdict is None:
                    return
                await trio.sleep(verdict / 1000)
        except Exception:  # runs in replication's nursery: a bug here must not take the server down
            log.exception("probing node %s (%s) failed", node_id, address)
        finally:
            self.crashes.done(node_id, owner, _mono_ms())

    async def _write_isr(self, tp: TopicPartition, st: LeaderReplicaState, isr: tuple[int, ...]) -> None:
        st.pending_isr = isr
        state = PartitionState(self.node_id, st.leader_epoch, isr, self._controller_epochs.get(tp, 0))
        try:
            version = await self.member.zk.update_isr(tp, state, self._isr_versions.get(tp, -1))
        except ZkError as e:
            self._problems.warning("ISR update of %s-%s failed: %s", tp[0], tp[1], e)
            st.pending_isr = None
            return
        if self.leaders.get(tp) is not st:  # leadership changed meanwhile
            return
        if version is None:
            self._stop_leading(tp, fenced_epoch=st.leader_epoch)
            return
        shrunk = len(isr) < len(st.isr)
        log.info("ISR of %s-%s %s: %s -> %s", tp[0], tp[1], "shrunk" if shrunk else "expanded", list(st.isr),
                 list(isr))
        self._count_isr_change(st.isr, isr)
        st.isr_written(isr, _now_ms())
        self._isr_versions[tp] = version
        plog = self.logs.get(tp)
        if plog is not None:
            self._advance(tp, st, plog)

    def _count_isr_change(self, old: tuple[int, ...], new: tuple[int, ...]) -> None:
        if set(old) - set(new):
            self.isr_shrinks += 1
        if set(new) - set(old):
            self.isr_expands += 1

    def cluster_stats(self) -> dict[str, Any]:
        """What the metrics export about this node's replication (see the module rules); runs in the metrics
        thread, so it reads copies of what the trio thread changes."""
        under = 0
        lag: list[tuple[str, int, int, int]] = []
        for tp, st in list(self.leaders.items()):
            plog = self.logs.get(tp)
            if tp in self.fenced or plog is None:
                continue
            if len(st.isr) < len(st.replicas):
                under += 1
            end, start = plog.log_end_offset, plog.log_start_offset
            for follower, f in list(st.followers.items()):
                lag.append((tp[0], tp[1], follower, max(0, end - (f.log_end if f.log_end >= 0 else start))))
        member = self.member
        return {"under_replicated": under, "offline": member.offline_partitions(),
                "controller": int(member.controller is not None), "isr_shrinks": self.isr_shrinks,
                "isr_expands": self.isr_expands, "leader_elections": member.leader_elections,
                "controller_changes": member.controller_changes, "lag": lag}

    async def _timeout_loop(self) -> None:
        while True:
            await trio.sleep(TIMEOUT_CHECK_S)
            now = trio.current_time()
            for tp, waiters in list(self._waiters.items()):
                if any(w.deadline <= now for w in waiters):  # timeouts differ (Produce's own): look at all
                    expired = [w for w in waiters if w.deadline <= now]
                    self._waiters[tp] = waiters = deque(w for w in waiters if w.deadline > now)
                    for w in expired:
                        _call(w.callback, timed_out(tp))
                if not waiters:
                    self._waiters.pop(tp, None)

    # ---------------------------------------------------------------- high watermark and acknowledgements
    def set_suspended(self, suspended: bool) -> None:
        """SUSPENDED: stop acknowledging at once (waiters wait; they time out if it lasts); CONNECTED: go on."""
        if suspended == self.suspended:
            return
        self.suspended = suspended
        log.warning("ZooKeeper session %s: %s", "SUSPENDED" if suspended else "back",
                    "acknowledging nothing until it is back" if suspended else "acknowledging again")
        if not suspended:
            for tp, st in list(self.leaders.items()):
                self._release(tp, st)

    def _advance(self, tp: TopicPartition, st: LeaderReplicaState, plog: PartitionLog) -> None:
        if st.advance(plog.high_watermark):
            self._release(tp, st)
            self.wake_consumers()

    def _release(self, tp: TopicPartition, st: LeaderReplicaState) -> None:
        waiters = self._waiters.get(tp)
        if not waiters or self.suspended:
            return
        hw = st.high_watermark
        ready = [w for w in waiters if w.required <= hw]  # (acks=1's 0 may follow others after a suspension)
        if not ready:
            return
        ok = st.acks_ok(self.min_isr_of(tp[0]))
        if len(ready) == len(waiters):
            waiters.clear()
        else:
            self._waiters[tp] = deque(w for w in waiters if w.required > hw)
        for w in ready:  # in the order they were written
            _call(w.callback, None if ok or w.required <= 0 else
                  not_enough_replicas(tp, len(st.isr), self.needed(tp, st)))

    def needed(self, tp: TopicPartition, st: LeaderReplicaState) -> int:
        return min(self.min_isr_of(tp[0]), len(st.replicas))

    def high_watermark(self, topic: str, partition: int) -> int:
        """What consumers may read below: the replicated high watermark where this node leads."""
        st = self.leaders.get((topic, partition))
        return st.high_watermark if st is not None else 0

    def retention_bound(self, topic: str, partition: int) -> int | None:
        """The offset retention may delete this node's log of a partition up to (Kafka deletes no segment
        above the high watermark, so the log start never passes it): where this node leads, the replicated
        high watermark; where it is a replica otherwise, its own (the leader's last reported one, capped at
        its durable end, as ``_lead`` would start from; its log start while none was reported: nothing
        goes); None for a log it does not replicate (a stray local topic: the log's own durable end)."""
        tp = (topic, partition)
        st = self.leaders.get(tp)
        if st is not None:
            return st.high_watermark
        plog = self.logs.get(tp)
        if plog is None:
            return None
        return min(self.follower_hw.get(tp, plog.log_start_offset), plog.high_watermark)

    def can_acknowledge(self, topic: str, partition: int) -> int:
        """0, or the produce error refusing an acks=all write before it is appended (Kafka's
        NOT_ENOUGH_REPLICAS check in ``Partition.appendRecordsToLeader``)."""
        tp = (topic, partition)
        st = self.leaders.get(tp)
        if st is None or tp in self.fenced:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if not st.acks_ok(self.min_isr_of(topic)):
            return ErrorCode.NOT_ENOUGH_REPLICAS
        return 0

    def notify_append(self) -> None:
        """Something was appended to a led log: waiting follower fetches look again (once per wake-up: the
        group commit calls this once per round that appended, produce once per request), on the caller's turn:
        each is answered if a partition of it has records past its fetch offset (Kafka's DelayedFetch: the
        followers' progress was noted when the fetch arrived; in a session the answer lists those partitions
        and those whose high watermark moved since last answered: ``_with_news``)."""
        if not self._parked:
            return
        parked, self._parked = self._parked, []  # a callback of a release below may park or notify again
        keep = []
        for p in parked:
            if p.slot.done:
                continue
            if p.slot.conn.closed:
                p.slot.complete(None)
                continue
            news = self._with_news(p.ctx)
            if not news:
                keep.append(p)
                continue
            try:
                served, size, error = self._serve_fetch(p.replica, p.ctx, p.budget, news)
                if size or error:
                    p.slot.complete(_answer(p.ctx, served), encode_response)
                    continue
            except Exception:  # a bug here must not fail the round that appended
                log.exception("delayed follower fetch failed")
                p.slot.conn.closed = True
                p.slot.complete(None)
                continue
            keep.append(p)
        self._parked[:0] = keep

    def notify_local(self, plog: PartitionLog) -> None:
        """The leader's own fsync moved this log's durable end: the HW may move (what was appended has woken
        the follower fetches already, when it was appended)."""
        tp = self._tp_of.get(plog)
        st = self.leaders.get(tp) if tp is not None else None
        if st is not None and tp is not None:
            self._advance(tp, st, plog)

    def when_replicated(self, plog: PartitionLog, required: int, timeout_s: float, callback: Callback) -> None:
        """``callback(None)`` once the high watermark reaches ``required`` with enough in-sync replicas, else
        ``callback(ReplicationError)``; call it after the leader's own fsync covered the write. ``required``
        0 (acks=1) waits for nothing but a live session and this node's leadership."""
        tp = self._tp_of.get(plog)
        st = self.leaders.get(tp) if tp is not None else None
        if tp is None or st is None or tp in self.fenced:
            _call(callback, not_leader(tp or (plog.name, -1)))
            return
        self.notify_local(plog)
        if required <= 0 and not self.suspended:
            _call(callback, None)
            return
        if st.high_watermark >= required and not self.suspended:
            _call(callback, None if st.acks_ok(self.min_isr_of(tp[0])) else
                  not_enough_replicas(tp, len(st.isr), self.needed(tp, st)))
            return
        waiters = self._waiters.get(tp)
        if waiters is None:
            waiters = self._waiters[tp] = deque()
        waiters.append(_Waiter(required, trio.current_time() + timeout_s, callback))

    def staging(self, stage: Callable[[PartitionLog, list[Any], Callback], None], timeout_s: float
                ) -> Callable[[PartitionLog, list[Any], Callback], None]:
        """The group commit's ``stage`` with its callback deferred until the write is replicated: when the
        local fsync covering the batch has been noted (``note_durable`` comes before the callbacks), the log's
        durable end is the offset to wait for (it covers the batch; it may cover later writes too, which only
        waits a little longer)."""
        def replicated_stage(plog: PartitionLog, records: list[Any], callback: Callback) -> None:
            def durable(err: Exception | None) -> None:
                if err is not None:
                    callback(err)
                else:
                    self.when_replicated(plog, plog.high_watermark, timeout_s, callback)
            stage(plog, records, durable)
        return replicated_stage

    # ---------------------------------------------------------------- serving followers
    def handle_fetch(self, req: Request, slot: Slot, nursery: trio.Nursery) -> None:
        body = req.body
        ctx = self.sessions.context(
            body["replica_id"], body.get("session_id", 0), body.get("session_epoch", -1),
            (((t["topic"], p["partition"]), p["fetch_offset"], p.get("current_leader_epoch", -1),
              p["partition_max_bytes"]) for t in body["topics"] for p in t["partitions"]),
            ((t["topic"], p) for t in body.get("forgotten_topics_data") or () for p in t["partitions"]),
            self.logs.__contains__)
        if ctx.error:
            slot.complete({"throttle_time_ms": 0, "error_code": ctx.error, "session_id": 0, "responses": []})
            return
        budget = body.get("max_bytes", 0x7FFFFFFF)
        served, size, error = self._serve_fetch(body["replica_id"], ctx, budget, arrival=True)
        if size or error or body["max_wait_ms"] <= 0:
            slot.complete(_answer(ctx, served), encode_response)
            return
        deadline = trio.current_time() + body["max_wait_ms"] / 1000
        self._parked.append(_ParkedFetch(body["replica_id"], ctx, slot, budget, deadline))
        if deadline < self._parked_until:
            self._parked_wake.set()

    async def _parked_loop(self) -> None:
        """Answers each parked follower fetch at its deadline (served once more: the records or the high
        watermark that arrived last), and drops those whose connection closed."""
        while True:
            self._parked_wake = trio.Event()
            self._parked_until = min((p.deadline for p in self._parked), default=math.inf)
            with trio.move_on_at(self._parked_until):
                await self._parked_wake.wait()
            now = trio.current_time()
            due = [p for p in self._parked if p.deadline <= now or p.slot.done or p.slot.conn.closed]
            if not due:
                continue
            self._parked = [p for p in self._parked if not (p.deadline <= now or p.slot.done or p.slot.conn.closed)]
            for p in due:
                if p.slot.done:
                    continue
                if p.slot.conn.closed:
                    p.slot.complete(None)
                    continue
                try:
                    served = self._serve_fetch(p.replica, p.ctx, p.budget)[0]
                    p.slot.complete(_answer(p.ctx, served), encode_response)
                except Exception:  # runs in replication's nursery: a bug here must not take the server down
                    log.exception("delayed follower fetch failed")
                    p.slot.conn.closed = True
                    p.slot.complete(None)

    def _with_news(self, ctx: FetchContext) -> dict[TopicPartition, SessionPartition]:
        """The partitions of a waiting fetch to serve at a wake-up: in a session, those whose log has records
        past the fetch offset (or is gone: its error), and when there is any, also those whose high watermark
        moved since they were last answered (the answer goes out now: it tells them too, so the next fetch
        can pass them over); sessionless, all (its answer lists every one)."""
        if ctx.session is None:
            return ctx.parts
        logs, leaders = self.logs, self.leaders
        news = {}
        moved = []
        for tp, part in ctx.parts.items():
            plog = logs.get(tp)
            if plog is None or plog.log_end_offset > part.fetch_offset:
                news[tp] = part
            else:
                st = leaders.get(tp)
                if st is not None and st.high_watermark != part.sent_hw:
                    moved.append((tp, part))
        if news and moved:
            news.update(moved)
        return news

    def _serve_fetch(self, replica: int, ctx: FetchContext, budget: int,
                     parts: dict[TopicPartition, SessionPartition] | None = None, arrival: bool = False
                     ) -> tuple[list[tuple[TopicPartition, SessionPartition, dict[str, Any]]], int, bool]:
        """Every partition of the fetch (or of ``parts``) served (follower progress noted, the high watermark
        moved, records read up to the log end): (partition, its session entry, its answer) for each that
        belongs in the answer (in a session, one with nothing new is left out here), the bytes read, any error.
        ``arrival``: the fetch has just arrived (else a waiting fetch is served again).
        Runs for every partition of a session at every follower fetch, so the common case is cheap:
        - In a session, a partition where nothing moved (the follower's offset is the one noted, the leader's
          end, the high watermark and what it was last answered; the same log start; the follower in the ISR)
          is passed over, marked ``skipped``: the follower was caught up at this fetch. That is noted
          (``note_idle_fetch``, at the session's ``fetched_ms``) before the partition is next served, and by
          the ISR check (``_settle_idle``), so the caught-up clock reads as if every fetch had been noted.
        - Otherwise an answer entry is built only for a partition that goes in the answer, and the high
          watermark is recomputed only when this follower's durable end moved or the leader's own is past it
          (nothing else it depends on changed since the last time: ``notify_local``, ISR writes and views
          recompute it themselves)."""
        now = _now_ms()
        total, any_error = 0, False
        out: list[tuple[TopicPartition, SessionPartition, dict[str, Any]]] = []
        session = ctx.session
        idle_ms = 0  # when a partition marked skipped was passed over (the follower caught up then)
        if session is not None:
            idle_ms = session.fetched_ms
            if arrival:
                session.fetched_ms = now
        leaders, logs, fenced = self.leaders, self.logs, self.fenced
        for tp, part in (ctx.parts if parts is None else parts).items():
            st = leaders.get(tp)
            plog = logs.get(tp)
            epoch = part.leader_epoch
            if st is None or plog is None or tp in fenced or (epoch != -1 and epoch != st.leader_epoch) or \
                    replica not in st.followers:
                res = empty_partition(tp[1])
                res["error_code"] = self._fence(tp, st, epoch) or ErrorCode.NOT_LEADER_OR_FOLLOWER
                out.append((tp, part, res))
                any_error = True
                continue
            offset = part.fetch_offset
            leader_end = plog.log_end_offset  # followers fetch all it has; the HW waits for its own fsync
            log_start = plog.log_start_offset
            if session is not None:
                hw = st.high_watermark
                if offset == leader_end == hw == part.sent_hw and log_start == part.sent_log_start and \
                        st.followers[replica].log_end == offset and replica in st.isr:
                    part.skipped = True  # nothing moved: caught up at this fetch (settled later)
                    continue
                if part.skipped:
                    st.note_idle_fetch(replica, idle_ms)
                    part.skipped = False
            if offset < log_start or offset > leader_end:
                res = empty_partition(tp[1])
                res.update(error_code=ErrorCode.OFFSET_OUT_OF_RANGE, high_watermark=st.high_watermark,
                           log_start_offset=log_start)
                out.append((tp, part, res))
                any_error = True
                continue
            moved = st.on_fetch(replica, offset, leader_end, now)
            if (moved or plog.high_watermark > st.high_watermark) and st.advance(plog.high_watermark):
                self._release(tp, st)
                self.wake_consumers()
            hw = st.high_watermark
            if offset >= hw and replica not in st.isr:
                self._isr_wake.set()
            if offset >= leader_end or (budget <= 0 and total > 0):
                if session is not None and hw == part.sent_hw and log_start == part.sent_log_start:
                    continue  # nothing for its answer (``FetchContext.must_answer``)
                res = empty_partition(tp[1])
                res.update(high_watermark=hw, last_stable_offset=hw, log_start_offset=log_start)
                out.append((tp, part, res))
                continue
            res = empty_partition(tp[1])
            res.update(high_watermark=hw, last_stable_offset=hw, log_start_offset=log_start)
            out.append((tp, part, res))
            try:
                data = plog.read(offset, min(part.max_bytes, max(budget, 1)), upper_bound=leader_end)
            except (StorageError, OSError):
                res["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
                any_error = True
                continue
            res["records"] = data
            total += len(data)
            budget -= len(data)
        return out, total, any_error

    def _settle_idle(self, tp: TopicPartition, st: LeaderReplicaState) -> None:
        """Note the fetches that passed over a led partition (``_serve_fetch``) in its followers' progress."""
        for r in st.followers:
            session = self.sessions.of_replica(r)
            if session is None:
                continue
            part = session.parts.get(tp)
            if part is not None and part.skipped:
                st.note_idle_fetch(r, session.fetched_ms)
                part.skipped = False

    def _fence(self, tp: TopicPartition, st: LeaderReplicaState | None, epoch: int) -> int:
        if st is None or tp in self.fenced:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER if tp in self.logs or tp in self.fenced \
                else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if epoch != -1 and epoch < st.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if epoch > st.leader_epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        return 0

    # ---------------------------------------------------------------- OffsetForLeaderEpoch (23)
    def handle_offset_for_leader_epoch(self, req: Request, slot: Slot) -> None:
        out = []
        for t in req.body["topics"]:
            parts = []
            for p in t["partitions"]:
                tp = (t["topic"], p["partition"])
                res = {"error_code": 0, "partition": p["partition"], "leader_epoch": UNDEFINED[0],
                       "end_offset": UNDEFINED[1]}
                parts.append(res)
                st = self.leaders.get(tp)
                error = self._fence(tp, st, p.get("current_leader_epoch", -1))
                plog = self.logs.get(tp)
                if error or plog is None:
                    res["error_code"] = error or ErrorCode.NOT_LEADER_OR_FOLLOWER
                    continue
                res["leader_epoch"], res["end_offset"] = plog.epoch_cache().end_offset_for(
                    p["leader_epoch"], plog.log_end_offset)
            out.append({"topic": t["topic"], "partitions": parts})
        slot.complete({"throttle_time_ms": 0, "topics": out})


def _answer(ctx: FetchContext, served: list[tuple[TopicPartition, SessionPartition, dict[str, Any]]]
            ) -> dict[str, Any]:
    """The Fetch answer: in a session only the partitions with news (``fetch_sessions``), recorded as sent."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp, part, res in served:
        error, hw, log_start = res["error_code"], res["high_watermark"], res["log_start_offset"]
        if ctx.must_answer(part, bool(res["records"]), error, hw, log_start):
            ctx.answered(part, error, hw, log_start)
            by_topic.setdefault(tp[0], []).append(res)
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": ctx.session_id,
            "responses": [{"topic": t, "partitions": parts} for t, parts in by_topic.items()]}


def _now_ms() -> int:
    return int(time.time() * 1000)


def _mono_ms() -> int:
    return int(time.monotonic() * 1000)


async def probe_listener(host: str, port: int, timeout_s: float) -> str:
    """Fast failover's probe: a plain TCP connect to a peer's listener, closed at once (no request, no TLS).
    ``REFUSED`` when every address ``host`` resolves to refused it (nothing listens: the process is gone),
    ``REACHABLE`` when one accepted it (a stopped process's kernel still does), else ``UNKNOWN``."""
    try:
        with trio.fail_after(timeout_s):
            infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, trio.TooSlowError):
        return UNKNOWN
    refused = 0
    for family, kind, proto, _, address in infos:
        try:
            sock = trio.socket.socket(family, kind, proto)
        except OSError:  # out of descriptors, say: no evidence
            continue
        try:
            with trio.move_on_after(timeout_s):
                await sock.connect(address)
                return REACHABLE
        except OSError as e:
            if e.errno == errno.ECONNREFUSED:
                refused += 1
        finally:
            sock.close()
    return REFUSED if infos and refused == len(infos) else UNKNOWN


def _call(callback: Callback, error: Exception | None) -> None:
    try:
        callback(error)
    except Exception:
        log.exception("an acknowledgement callback failed")
