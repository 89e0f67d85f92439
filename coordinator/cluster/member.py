"""One node's part in the cluster: register, run for controller, follow partition leadership.

Rules:
- ``connect`` is bounded by ``zookeeper.session.timeout.ms`` (Kafka's default connection timeout): an
  unreachable ZooKeeper is a ``StartupError`` before storage opens, never a hang.
- ``run`` registers ``/brokers/ids/<node.id>`` (retrying while a previous session's znode has not expired,
  at most one session timeout plus a margin; after that a duplicate ``node.id`` is a ``StartupError``), then
  loops: read a snapshot (re-arming watches), re-register after a new session, try to become controller when
  there is none, let the controller reconcile, create the offsets topic when asked, publish the view and tell
  ``on_leadership`` which offsets partitions this node leads. It wakes on any watch, a connection-state
  change, a request, or every ``REFRESH_S`` as a safety net; a failed read is retried on the next wake.
- Session LOST: this node gives up every leadership at once (serves no group) until a fresh snapshot from
  a new session says otherwise. SUSPENDED (connection lost, session maybe alive) calls ``on_suspended(True)``
  at once: replication acknowledges nothing until the session is CONNECTED again (``on_suspended(False)``).
- Registration gone while the session lives (a peer took this node for crashed: fast failover,
  ``crash_detector``; a stopped process that wakes, or a false positive): one WARNING line, every leadership
  given up at once as on LOST (waiting acknowledgements fail, groups unload), then it registers again with
  the same session and follows the next snapshot, where the controller may have elected others (what it led
  is fenced by their newer leader epochs and by the version-checked ISR writes).
- ``close`` (controlled shutdown, then stop) gives up every leadership and closes the session, so the
  controller moves them to other in-sync replicas at once; the loop does nothing after it.
- The offsets topic is created lazily, as Kafka does: the first FindCoordinator (or Metadata naming it)
  makes this node write its assignment with ``offsets.topic.replication.factor`` capped at the live
  brokers; the controller then elects its leaders. Until then groups answer COORDINATOR_NOT_AVAILABLE.
  ``__transaction_state`` likewise (``request_txn_topic``, ``transaction.state.log.replication.factor``);
  ``on_txn_leadership`` gets the transaction state partitions this node leads with their leader epochs.
- ``view`` is only replaced, never mutated: readers on the trio thread may keep a reference.
- User topics (issue #20): CreateTopics on any node writes the assignment and config (``create_user_topic``);
  auto-creation is queued (``request_topic``) and written by the loop; DeleteTopics writes a deletion
  request (``delete_topic``) that the controller carries out. Before each publish the loop reads the config
  of every user topic it has not seen yet, then calls ``on_topics(view, configs)`` (the runtime creates and
  deletes local logs) BEFORE ``on_leadership``, so a node never leads a partition it has no log for.
  ``view_changed`` is set on every publish (CreateTopics/DeleteTopics wait on it, bounded).
- Topic configs (Kafka's ``AdminZkClient.changeTopicConfig`` and ``ZkNodeChangeNotificationListener``):
  ``alter_topic_config`` reads ``/config/topics/<t>``, applies the change and writes it back at the version
  read, with a change notification, retrying a lost version check (after a short random pause) a bounded
  number of times; one node writes one config at a time (``_config_lock``), so only other nodes' writes
  can win the check. Every node (the writer included) watches ``/config/changes``: each turn it reads the
  notifications newer than the last one it processed and re-reads the configs they name (kept as stale
  until a read succeeds) before publishing, so ``on_topics`` gets them; at start it reads every topic's
  config. A config read older (by zxid) than the one this node holds is ignored (a read
  racing with this node's own write). Notifications older than Kafka's 15 minutes are purged.
  ``deleting`` is the set of topics queued for deletion in the last snapshot.
- CreatePartitions: ``topic_assignment`` / ``set_topic_assignment`` read and write ``/brokers/topics/<t>``
  at a version; the controller elects the new partitions' leaders as it does a new topic's.
- Auto leader rebalance (``auto.leader.rebalance.enable``, Kafka's): while this node is controller, the loop
  also wakes when the controller's imbalance check is due (every ``leader.imbalance.check.interval.seconds``)
  and runs ``Controller.rebalance`` on a turn whose ``step`` had nothing to write, never after ``close``
  (checked again after the snapshot read, so a leaving controller writes nothing).
- Fast failover (``remove_crashed``): once replication confirmed that a peer's process is gone
  (``crash_detector``), this node deletes the peer's registration (and ``/controller`` if the peer held it)
  if the session it last read as the owner (``broker_owners``, published with each view) still owns it
  (``ZkStore.remove_broker``). The controller then acts as on that session's expiry. One WARNING line names
  the peer, what was observed and what was done (INFO when another node had removed it already).
- Metrics (read at scrape time, ``cluster_stats``): ``leader_elections`` sums what this node's controller
  terms elected (preferred-leader moves included); ``controller_changes`` counts the published views whose
  controller (id, epoch) differs from the last one this node saw (the first one seen is not a change);
  ``offline_partitions`` is counted by the controller only (0 elsewhere, as Kafka's OfflinePartitionsCount).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable

import trio
from kazoo.exceptions import KazooException, NodeExistsError

from coordinator.config import Config
from coordinator.storage_errors import StartupError

from .assignment import assign_replicas
from .controller import FIRST_REBALANCE_DELAY_S, Controller
from .crash_detector import Crashed
from .state import NO_LEADER, BrokerInfo, ClusterView, broker_info, change_sequence, expired_changes
from .zk import Snapshot, TopicConfig, ZkError, ZkStore

TXN_TOPIC = "__transaction_state"  # runtime/transactions.py's TXN_TOPIC (the runtime imports the cluster layer)

log = logging.getLogger("groupcoord.cluster")

REFRESH_S = 3.0
RETRY_S = 0.5
MIN_SLEEP_S = 0.05
MAX_STREAK = 8
WRITE_ATTEMPTS = 10  # a version-checked write lost to another node's is read and tried again this often


class ClusterMember:
    def __init__(self, config: Config, offsets_topic: str) -> None:
        self.node_id: int = config["node.id"]
        self.rack: str | None = config["broker.rack"] or None
        self.offsets_topic = offsets_topic
        self.offsets_partitions: int = config["offsets.topic.num.partitions"]
        self.offsets_rf: int = config["offsets.topic.replication.factor"]
        self.txn_topic = TXN_TOPIC  # transactions (#38): created on first use, like the offsets topic
        self.txn_partitions: int = config["transaction.state.log.num.partitions"]
        self.txn_rf: int = config["transaction.state.log.replication.factor"]
        self.unclean: bool = config["unclean.leader.election.enable"]
        self.auto_rebalance: bool = config["auto.leader.rebalance.enable"]
        self.imbalance_pct: int = config["leader.imbalance.per.broker.percentage"]
        self.imbalance_interval_s: float = config["leader.imbalance.check.interval.seconds"]
        self.session_timeout_s = config["zookeeper.session.timeout.ms"] / 1000
        self.connect_string: str = config["zookeeper.connect"]
        self.zk = ZkStore(self.connect_string, config["zookeeper.session.timeout.ms"])
        self.view = ClusterView()
        self.controller: Controller | None = None
        self.on_leadership: Callable[[set[int]], None] = lambda _led: None
        # the transaction state partitions this node leads, with their leader epochs (the coordinator epoch)
        self.on_txn_leadership: Callable[[dict[int, int]], None] = lambda _led: None
        self.on_topics: Callable[[ClusterView, dict[str, dict[str, str]]], None] = lambda _v, _c: None
        self.on_replicas: Callable[[ClusterView], None] = lambda _v: None  # replication (leaders, followers)
        self.on_suspended: Callable[[bool], None] = lambda _s: None  # replication: stop acknowledging at once
        self.closed = False
        self.state_versions: dict[tuple[str, int], int] = {}  # partition-state znode versions of ``view``
        self.broker_owners: dict[int, int] = {}  # node id -> session owning its registration, as of ``view``
        self._registered_session: int | None = None  # the session this node registered with last
        self.topic_configs: dict[str, dict[str, str]] = {}  # user topic -> its overrides (ZooKeeper's)
        self._config_zxids: dict[str, int] = {}  # user topic -> mzxid of the config in ``topic_configs``
        self._last_change = -1  # sequence of the last config change notification processed
        self._stale_configs: set[str] = set()  # topics named by a notification, not read again yet
        self._change_ctimes: dict[str, int] = {}  # notifications read -> creation time (for the purge)
        self.deleting: set[str] = set()  # topics queued for deletion (last snapshot)
        self._config_lock = trio.Lock()  # this node's config writes, one at a time
        self.view_changed = trio.Event()
        self.view_complete = False  # the last snapshot read every znode it listed (no decode problems)
        self._wanted_topics: dict[str, tuple[int, int]] = {}  # auto-creation: topic -> (partitions, rf)
        self.me: BrokerInfo | None = None
        self._wake = trio.Event()
        self._want_offsets_topic = False
        self._want_txn_topic = False
        self.connection_state = "CONNECTING"
        self.leader_elections = 0
        self.controller_changes = 0
        self._seen_controller: tuple[int, int] | None = None

    # ---------------------------------------------------------------- lifecycle
    async def connect(self) -> None:
        try:
            await self.zk.connect(self.session_timeout_s, self._on_state)
        except (ZkError, ValueError) as e:
            await self.zk.close()
            raise StartupError(f"zookeeper.connect={self.connect_string}: {e}") from None

    async def close(self) -> None:
        """Leave the cluster: give up every leadership here at once, then close the session (its ephemeral
        znode goes at once, so the controller moves this node's leaderships without waiting for expiry).
        Called at SIGTERM before the drain (controlled shutdown) and again at stop (then a no-op)."""
        if self.closed:
            return
        self.closed = True
        self._give_up()
        await self.zk.close()

    def _on_state(self, state: str) -> None:  # kazoo's thread
        def on_trio() -> None:
            self.connection_state = state
            if self.closed:  # our own close() ended the session: nothing to react to, nothing to warn of
                log.info("ZooKeeper session closed (%s)", state)
                return
            if state == "CONNECTED":
                log.info("ZooKeeper session CONNECTED")
            else:
                log.warning("ZooKeeper session %s", state)
            self.on_suspended(state == "SUSPENDED")
            if state == "LOST":
                self.controller = None
                self._give_up()
            self._wake.set()
        self.zk.signal(on_trio)

    def _give_up(self) -> None:
        """Lead nothing, follow nothing, until the next published view."""
        self.view = ClusterView()
        self.broker_owners = {}
        self.on_replicas(self.view)
        self.on_leadership(set())
        self.on_txn_leadership({})

    def _on_watch(self, _event: object) -> None:  # kazoo's thread
        self.zk.signal(self._wake.set)

    # ---------------------------------------------------------------- requests from the services
    def request_offsets_topic(self) -> None:
        if self.offsets_topic not in self.view.assignments and not self._want_offsets_topic:
            self._want_offsets_topic = True
            self._wake.set()

    def request_txn_topic(self) -> None:
        """FindCoordinator for a transactional id: create ``__transaction_state`` if it does not exist yet."""
        if self.txn_topic not in self.view.assignments and not self._want_txn_topic:
            self._want_txn_topic = True
            self._wake.set()

    def request_topic(self, topic: str, partitions: int, rf: int) -> None:
        """Auto-creation (Metadata): written by the loop; the caller answers LEADER_NOT_AVAILABLE."""
        if topic not in self.view.assignments and topic not in self._wanted_topics:
            self._wanted_topics[topic] = (partitions, rf)
            self._wake.set()

    async def create_user_topic(self, topic: str, replicas: dict[int, tuple[int, ...]],
                                configs: dict[str, str]) -> bool:
        """Write a new topic's assignment and config; False when it exists. Raises ``ZkError``."""
        created = await self.zk.create_user_topic(topic, replicas, configs)
        if created:
            log.info("created topic %s: %d partitions, replicas %s", topic, len(replicas),
                     {p: list(r) for p, r in sorted(replicas.items())[:8]})
            self._wake.set()
        return created

    async def delete_topic(self, topic: str) -> None:
        """Ask the controller to delete a topic. Raises ``ZkError``."""
        await self.zk.mark_for_deletion(topic)
        self._wake.set()

    async def alter_topic_config(self, topic: str, change: Callable[[dict[str, str]], dict[str, str]]
                                 ) -> dict[str, str] | None:
        """Change a topic's overrides in ZooKeeper: ``change`` gets the current ones and returns the new ones
        (checking them: what it raises is raised). None when the topic has no config znode (it does not
        exist). Raises ``ZkError``."""
        async with self._config_lock:
            for attempt in range(WRITE_ATTEMPTS):
                if attempt:
                    await trio.sleep(random.uniform(0.01, 0.05))
                current = await self.zk.read_topic_config(topic)
                if current is None:
                    return None
                new = change(dict(current.config))
                written = await self.zk.write_topic_config(topic, new, current.version)
                if written is not None:
                    self._keep_config(topic, written)
                    self._wake.set()
                    log.info("topic %s config written to ZooKeeper: %s", topic, new)
                    return dict(new)
        raise ZkError(f"the config of topic {topic} kept changing under this write")

    async def topic_assignment(self, topic: str) -> tuple[dict[int, tuple[int, ...]], int] | None:
        """A topic's replica assignment as ZooKeeper has it now, and its znode version (None: no topic).
        Raises ``ZkError`` (and ``ValueError`` for one that does not decode)."""
        return await self.zk.read_assignment(topic)

    async def set_topic_assignment(self, topic: str, replicas: dict[int, tuple[int, ...]], version: int) -> bool:
        """Write a topic's grown assignment at ``version``; False when it moved on. Raises ``ZkError``."""
        done = await self.zk.write_assignment(topic, replicas, version)
        if done:
            log.info("topic %s now has %d partitions", topic, len(replicas))
            self._wake.set()
        return done

    async def wait_view(self, done: Callable[[ClusterView], bool], timeout_s: float) -> bool:
        """Wait (bounded) until a published view satisfies ``done``."""
        self._wake.set()
        with trio.move_on_after(timeout_s):
            while not done(self.view):
                await self.view_changed.wait()
            return True
        return done(self.view)

    def offline_partitions(self) -> int:
        """Partitions with no live leader, counted by the controller only (0 on other nodes)."""
        view = self.view
        if self.controller is None:
            return 0
        return sum(1 for t, parts in view.assignments.items() for p in parts if view.leader(t, p) < 0)

    async def remove_crashed(self, crashed: Crashed, address: str) -> bool:
        """Fast failover: remove the registration of a peer whose crash replication confirmed (see the module
        rules); True when this node removed it."""
        node = crashed.node_id
        if self.closed or node == self.node_id:
            return False
        try:
            controller = await self.zk.remove_broker(node, crashed.owner)
        except ZkError as e:
            log.warning("node %s (%s) looks crashed (%s), but removing its registration failed: %s", node, address,
                        crashed.observed, e)
            return False
        if controller is None:
            log.info("node %s (%s) looks crashed (%s); its registration of session 0x%x is gone already", node,
                     address, crashed.observed, crashed.owner)
            return False
        log.warning("node %s (%s) crashed: %s; removed its registration (ZooKeeper session 0x%x)%s, so its "
                    "leaderships move now, not at its session's expiry", node, address, crashed.observed,
                    crashed.owner, " and /controller" if controller else "")
        self._wake.set()
        return True

    def leader_of(self, topic: str, partition: int) -> BrokerInfo | None:
        leader = self.view.leader(topic, partition)
        return None if leader == NO_LEADER else self.view.brokers.get(leader)

    # ---------------------------------------------------------------- the loop
    async def run(self, endpoints: list[tuple[str, str, int]], protocols: dict[str, str]) -> None:
        """``endpoints``: every advertised listener (name, host, port); ``protocols``: their security protocols."""
        self.me = broker_info(self.node_id, self.rack, endpoints, protocols)
        await self._register_at_start()
        streak = 0  # turns in a row that asked to read again at once (bounded: then wait for a wake)
        while True:
            self._wake = trio.Event()  # replaced before reading: a change during the read wakes the next turn
            try:
                again = await self._turn()
            except (ZkError, KazooException) as e:  # a session/connection error mid-turn: retried next wake
                log.warning("cluster turn failed: %s", e)
                again = False
            streak = streak + 1 if again else 0
            if again and streak < MAX_STREAK:
                continue
            with trio.move_on_after(self._sleep_s()):
                await self._wake.wait()

    def _sleep_s(self) -> float:
        """How long the loop may wait for a wake: ``REFRESH_S``, or less when the imbalance check is due sooner."""
        if self.controller is None or not self.auto_rebalance:
            return REFRESH_S
        # overdue (a turn that wrote, or failed, came first): wait a little, never spin
        return max(MIN_SLEEP_S, min(REFRESH_S, self.controller.next_rebalance - trio.current_time()))

    async def _register_at_start(self) -> None:
        assert self.me is not None
        deadline = trio.current_time() + self.session_timeout_s + 5.0
        while True:
            try:
                await self.zk.register_broker(self.me)
                self._registered_session = self.zk.session_id()
                log.info("registered as broker %s (%s, rack %s)", self.node_id, ", ".join(
                    f"{n}://{h}:{p}" for n, h, p in self.me.endpoints) or f"{self.me.host}:{self.me.port}",
                    self.rack)
                return
            except NodeExistsError:
                if trio.current_time() >= deadline:
                    raise StartupError(f"node.id {self.node_id} is already registered in ZooKeeper "
                                       f"({self.connect_string}) by a live broker") from None
            except ZkError as e:
                if trio.current_time() >= deadline:
                    raise StartupError(f"cannot register in ZooKeeper ({self.connect_string}): {e}") from None
            await trio.sleep(RETRY_S)

    async def _turn(self) -> bool:
        """One reconciliation; True when it changed ZooKeeper and should read again at once."""
        assert self.me is not None
        if self.closed:  # left the cluster (controlled shutdown): follow nothing any more
            return False
        try:
            snap = await self.zk.read_snapshot(self._on_watch)
        except ZkError as e:
            log.warning("reading cluster state failed: %s", e)
            await trio.sleep(RETRY_S)
            return False
        for problem in snap.problems:
            log.error("cluster state: %s", problem)
        self.view_complete = not snap.problems
        session = self.zk.session_id()
        if session is None:
            return False
        if snap.broker_owners.get(self.node_id) != session:
            if session == self._registered_session:  # removed under a live session: taken for crashed
                self._registered_session = None
                log.warning("this node's registration /brokers/ids/%s was removed while its ZooKeeper session "
                            "0x%x lives (a peer took it for crashed): giving up every leadership, then "
                            "registering again", self.node_id, session)
                self._give_up()
            return await self._reregister()
        view = snap.view
        if view.controller_id == -1:
            won = await self._elect()
            if won:
                return True
        if self.controller is not None and not self.controller.holds(snap, session):
            log.info("no longer controller (epoch %s)", self.controller.epoch)
            self.controller = None
        if self.controller is not None:
            try:
                if await self.controller.step(self.zk, snap, self.unclean):
                    return True
                if await self._rebalance(snap):
                    return True
            except ZkError as e:
                log.warning("controller step failed: %s", e)
            finally:
                if self.controller is not None:
                    self.leader_elections += self.controller.leader_elections
                    self.controller.leader_elections = 0
        if self._want_offsets_topic and await self._create_offsets_topic(snap):
            return True
        if self._want_txn_topic and await self._create_txn_topic(snap):
            return True
        if self._wanted_topics and await self._create_wanted_topics(view):
            return True
        await self._config_changes(snap.config_changes)
        for topic in view.assignments:
            if topic not in (self.offsets_topic, self.txn_topic) and (topic not in self.topic_configs
                                                                       or topic in self._stale_configs):
                read = await self.zk.read_topic_config(topic)
                if read is not None and read.problem is not None:
                    log.error("cluster state: %s; the topic gets the server's defaults", read.problem)
                self._keep_config(topic, read or TopicConfig({}, -1, -1))
                self._stale_configs.discard(topic)
        self._stale_configs &= set(view.assignments)  # a topic not in the view is read when it appears
        for topic in [t for t in self.topic_configs if t not in view.assignments]:
            del self.topic_configs[topic]  # deleted: a topic created again under its name is read again
            self._config_zxids.pop(topic, None)
        self.deleting = set(snap.deleting)
        self.state_versions = snap.state_versions
        self.broker_owners = dict(snap.broker_owners)
        self._publish(view)
        return False

    def _keep_config(self, topic: str, read: TopicConfig) -> None:
        """Hold a topic's config read (or written) now, unless this node holds a newer one already."""
        if read.mzxid < self._config_zxids.get(topic, -1):
            return
        self.topic_configs[topic] = read.config
        self._config_zxids[topic] = read.mzxid

    async def _config_changes(self, names: list[str]) -> None:
        """Mark stale the topics named by the change notifications newer than the last one processed; purge
        the ones read that are older than Kafka's expiry."""
        fresh = {n: seq for n in names if (seq := change_sequence(n)) is not None and seq > self._last_change}
        if fresh:
            for name, (topic, ctime) in (await self.zk.read_config_changes(sorted(fresh))).items():
                self._change_ctimes[name] = ctime
                if topic is not None:
                    self._stale_configs.add(topic)
            self._last_change = max(fresh.values())
        listed = set(names)
        for name in [n for n in self._change_ctimes if n not in listed]:
            del self._change_ctimes[name]  # purged by another node
        old = expired_changes(self._change_ctimes, int(time.time() * 1000))
        if old:
            await self.zk.delete_config_changes(old)
            for name in old:
                self._change_ctimes.pop(name, None)

    async def _create_wanted_topics(self, view: ClusterView) -> bool:
        wanted, self._wanted_topics = self._wanted_topics, {}
        created = False
        for topic, (partitions, rf) in wanted.items():
            if topic in view.assignments or not view.brokers:
                continue
            try:
                if rf > len(view.brokers):
                    continue  # refused by the caller already; the brokers left since
                replicas = assign_replicas(view.brokers, partitions, rf,
                                           start_index=random.randrange(len(view.brokers)))
                created = await self.create_user_topic(topic, replicas, {}) or created
            except (ZkError, ValueError) as e:
                log.warning("auto-creating topic %s failed: %s", topic, e)
        return created

    async def _reregister(self) -> bool:
        assert self.me is not None
        try:
            await self.zk.register_broker(self.me)
            self._registered_session = self.zk.session_id()
            log.info("registered again as broker %s (ZooKeeper session 0x%x)", self.node_id,
                     self._registered_session or 0)
            return True
        except NodeExistsError:
            log.warning("broker %s is still registered by an older session; waiting for it to expire",
                        self.node_id)
        except ZkError as e:
            log.warning("registering again failed: %s", e)
        await trio.sleep(RETRY_S)
        return False

    async def _elect(self) -> bool:
        try:
            won = await self.zk.elect_controller(self.node_id)
        except ZkError as e:
            log.warning("controller election failed: %s", e)
            return False
        if won is None:
            return False
        epoch, version = won
        self.controller = Controller(self.node_id, epoch, version,
                                     next_rebalance=trio.current_time() + FIRST_REBALANCE_DELAY_S)
        log.info("elected controller with epoch %s", epoch)
        return True

    async def _rebalance(self, snap: Snapshot) -> bool:
        """The controller's imbalance check, when due (after a ``step`` with nothing to write); True when it
        moved a leadership."""
        controller = self.controller
        now = trio.current_time()
        if controller is None or not self.auto_rebalance or self.closed or now < controller.next_rebalance:
            return False
        controller.next_rebalance = now + self.imbalance_interval_s
        return await controller.rebalance(self.zk, snap, self.imbalance_pct) > 0

    async def _create_offsets_topic(self, snap: Snapshot) -> bool:
        self._want_offsets_topic = False
        view = snap.view
        if self.offsets_topic in view.assignments or not view.brokers:
            return False
        replicas = assign_replicas(view.brokers, self.offsets_partitions, self.offsets_rf,
                                   start_index=random.randrange(len(view.brokers)))
        try:
            created = await self.zk.create_topic(self.offsets_topic, replicas)
        except ZkError as e:
            log.warning("creating %s failed: %s", self.offsets_topic, e)
            self._want_offsets_topic = True
            return False
        if created:
            log.info("created %s: %d partitions, replication factor %d over brokers %s", self.offsets_topic,
                     self.offsets_partitions, len(replicas[0]), sorted(view.brokers))
        return True

    async def _create_txn_topic(self, snap: Snapshot) -> bool:
        self._want_txn_topic = False
        view = snap.view
        if self.txn_topic in view.assignments or not view.brokers:
            return False
        replicas = assign_replicas(view.brokers, self.txn_partitions, self.txn_rf,
                                   start_index=random.randrange(len(view.brokers)))
        try:
            created = await self.zk.create_topic(self.txn_topic, replicas)
        except ZkError as e:
            log.warning("creating %s failed: %s", self.txn_topic, e)
            self._want_txn_topic = True
            return False
        if created:
            log.info("created %s: %d partitions, replication factor %d over brokers %s", self.txn_topic,
                     self.txn_partitions, len(replicas[0]), sorted(view.brokers))
        return True

    def _publish(self, view: ClusterView) -> None:
        try:
            self.on_topics(view, self.topic_configs)
        except Exception:  # a local storage fault must not stop the node following the cluster
            log.exception("following the cluster's topics failed")
        if view.controller_id >= 0:
            seen = (view.controller_id, view.controller_epoch)
            if self._seen_controller is not None and seen != self._seen_controller:
                self.controller_changes += 1
            self._seen_controller = seen
        self.view = view
        try:
            self.on_replicas(view)
        except Exception:  # a bug in following must not stop the node following the cluster
            log.exception("following the cluster's replicas failed")
        self.on_leadership(view.led_by(self.node_id, self.offsets_topic))
        try:
            self.on_txn_leadership({p: view.states[(self.txn_topic, p)].leader_epoch
                                    for p in view.led_by(self.node_id, self.txn_topic)})
        except Exception:  # a bug in following must not stop the node following the cluster
            log.exception("following the transaction state partitions failed")
        self.view_changed.set()
        self.view_changed = trio.Event()
