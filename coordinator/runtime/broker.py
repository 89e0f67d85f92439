"""The node's request handlers: routes each decoded request to what serves it.

Rules:
- The broker is the composition root (with server.py): it builds the services and wires them together;
  nothing else in the runtime imports it. Connections know it as a ``dispatch.RequestHandler``, the
  services as a ``services.ServerContext``.
- ``handlers`` maps api key -> handler; ApiVersions advertises exactly the declared ranges of the APIs that
  have a handler, so a client never sees an API we cannot serve.
- A handler either completes the slot at once or keeps it and completes it later (group coordination,
  durable writes). It never raises for something a client sent: Kafka error codes go in the response.
  A handler bug is logged, answered with a closed connection, and the server keeps running.
- throttle_time_ms is always 0 (kafka-python pauses the connection otherwise).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import trio

from coordinator.config import Config, consumer_protocol_enabled
from coordinator.core.coordinator import SUPPORTED_APIS
from coordinator.core.security.listeners import inter_broker_listener, listener_specs
from coordinator.metrics import Metrics
from coordinator.runtime.configs import ConfigService
from coordinator.runtime.connection_limits import ConnectionLimits
from coordinator.runtime.consumer_groups import ConsumerGroupService
from coordinator.runtime.dispatch import Handler
from coordinator.runtime.group_commit import GroupCommit
from coordinator.runtime.groups import OFFSETS_LOG_CONFIG, OFFSETS_TOPIC, GroupService
from coordinator.runtime.lag_sampler import LagSampler
from coordinator.runtime.security.audit import ADMIN_APIS as AUDITED
from coordinator.runtime.security.audit import AuditLog
from coordinator.runtime.security.authorization import (
    Authorization,
    disabled_create,
    disabled_delete,
    disabled_describe,
)
from coordinator.runtime.security.listener_security import ListenerSecurity
from coordinator.runtime.security.tls import TlsContexts, setting
from coordinator.runtime.security.users import UserStore
from coordinator.runtime.stuck_groups import StuckGroups
from coordinator.runtime.topic_cleaner import user_compaction_loop
from coordinator.runtime.topics import TopicService, topic_id, user_topic_log_config, valid_topic_name
from coordinator.runtime.transactions import TXN_LOG_CONFIG, TXN_TOPIC, TransactionService
from coordinator.storage.compaction import compact
from coordinator.storage.errors import StorageError
from coordinator.storage.fsync_process import FsyncProcess
from coordinator.storage.journal import Journal
from coordinator.storage.keyed_store import KeyedStore
from coordinator.storage.manager import LogManager
from coordinator.storage.producer_ids import ProducerIds
from coordinator.storage_errors import StartupError
from protocol.codec import Request
from protocol.errors import ErrorCode, ProtocolError
from protocol.hotpath import decode_offset_commit
from protocol.messages import ALL
from protocol.primitives import ZERO_UUID
from protocol.replica_fetch import decode_request as decode_fetch_v12

if TYPE_CHECKING:
    from coordinator.cluster.member import ClusterMember
    from coordinator.cluster.security_zk import SecuritySync
    from coordinator.runtime.cluster_topics import ClusterTopics
    from coordinator.runtime.connection import Connection
    from coordinator.runtime.dispatch import ClientConnection, Slot
    from coordinator.runtime.replication import Replication
    from coordinator.runtime.security.peer_login import PeerLogin
    from coordinator.storage.log import PartitionLog

log = logging.getLogger("groupcoord.broker")


def _no_principal(subject_dn: str) -> str | None:
    return None


def _has_top_level_error(api_key: int, version: int) -> bool:
    schema = ALL.get(api_key)
    return schema is not None and any(f.name == "error_code" and f.present_in(version) for f in schema.response)


class Broker:
    def __init__(self, config: Config, metrics: Metrics) -> None:
        self.config = config
        self.metrics = metrics
        self.node_id: int = config["node.id"]
        self.listener_specs = listener_specs(config)  # type: ignore[arg-type]
        # what Metadata and FindCoordinator answer, per listener (a port of 0 is filled in once bound)
        self.endpoints: dict[str, tuple[str, int]] = {
            s.name: (s.advertised_host, s.advertised_port or s.port) for s in self.listener_specs}
        inter = inter_broker_listener(self.listener_specs, config)  # type: ignore[arg-type]
        self.inter_broker_listener = inter.name
        self.advertised_host, self.advertised_port = self.endpoints[inter.name]  # registered in ZooKeeper
        self.listener_security: dict[str, ListenerSecurity] = {}  # TLS and SASL listeners (start)
        self.tls: TlsContexts | None = None
        self.users: UserStore | None = None
        self.peer_login: PeerLogin | None = None  # cluster mode: this node as a client of its peers
        self.security_sync: SecuritySync | None = None  # cluster mode: users and ACLs follow ZooKeeper
        self.handlers: dict[int, Handler] = {
            18: self.handle_api_versions,
            3: self.handle_metadata,
            17: self.handle_sasl_handshake,
            36: self.handle_sasl_authenticate,
            50: self.handle_describe_user_scram_credentials,
            51: self.handle_alter_user_scram_credentials,
            29: self.handle_describe_acls,
            30: self.handle_create_acls,
            31: self.handle_delete_acls,
        }
        self.authorization: Authorization | None = None  # authorizer.class.name set: every request is checked
        self.audit: AuditLog | None = None  # the audit trail (admin changes, denials): opened with storage
        # api key -> hot handler: request payload -> whole response frame, or None for the generic path
        self.hot: dict[int, Callable[[bytes], bytes | None]] = {}
        # api key -> hot decoder: request payload -> the generic decoder's Request, or None (use the generic)
        self.hot_decoders: dict[int, Callable[[bytes], Request | None]] = {}
        # api key -> hot handler that needs the connection: (conn, payload) -> frame or None (connection.py)
        self.hot_per_connection: dict[int, Callable[[Any, bytes], bytes | None]] = {}
        self.connections: set[Connection] = set()
        self.limits = ConnectionLimits(config, metrics, time.monotonic)
        self.connection_log = self.limits.protocol_log
        self.logs: LogManager | None = None
        self.journal: Journal | None = None
        self.groups: GroupService | None = None
        self.consumer_groups: ConsumerGroupService | None = None  # KIP-848 (group.coordinator.rebalance.protocols)
        self.commit: GroupCommit | None = None
        self.topic_service: TopicService | None = None
        self.transactions: TransactionService | None = None  # the transaction coordinator (#38)
        self.cluster_pids: Any = None  # cluster mode: producer id blocks from ZooKeeper (cluster_producer_ids.py)
        self.cluster_topics: ClusterTopics | None = None  # cluster mode: the user topics' cluster half
        self.cluster: ClusterMember | None = None  # cluster mode (zookeeper.connect set), else None
        self.replication: Replication | None = None  # cluster mode: replication.py
        self.nursery: trio.Nursery  # set while running
        self.shutdown_requested = trio.Event()

    # ---------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Open storage (recovering every partition log); called before the listener binds."""
        if self.config["zookeeper.connect"]:  # cluster mode: reach ZooKeeper (bounded) before opening storage
            from coordinator.cluster.member import ClusterMember

            self.cluster = ClusterMember(self.config, OFFSETS_TOPIC)
            await self.cluster.connect()
        user_topics = user_topic_log_config(self.config)
        try:
            self.tls = TlsContexts(self.config, self.listener_specs)
        except ValueError as e:
            raise StartupError(f"TLS: {e}") from None

        def open_storage() -> tuple[LogManager, Journal | None, KeyedStore, AuditLog]:
            logs = LogManager(self.config["data.dir"], user_topics, topic_configs={OFFSETS_TOPIC: OFFSETS_LOG_CONFIG,
                                                                                   TXN_TOPIC: TXN_LOG_CONFIG})
            security: KeyedStore | None = None
            audit: AuditLog | None = None
            try:
                security = KeyedStore.open(self.config["data.dir"])
                audit = AuditLog(self.config["data.dir"], self.config["audit.retention.bytes"],
                                 self.config["audit.retention.ms"])
                if not self.config["log.journal.enable"]:
                    return logs, None, security, audit
                return logs, logs.open_journal()[0], security, audit
            except BaseException:
                if audit is not None:
                    audit.close()
                if security is not None:
                    security.close()
                logs.close()
                raise

        try:
            self.logs, self.journal, security_store, self.audit = await trio.to_thread.run_sync(open_storage)
        except (StorageError, OSError) as e:
            raise StartupError(f"cannot use data dir {self.config['data.dir']}: {e}") from None
        try:
            self.users = UserStore(security_store)
            self._open_listener_security()
            if self.cluster is not None:  # how this node logs in to its peers' inter-broker listener
                from coordinator.runtime.security.peer_login import PeerLogin

                self.peer_login = PeerLogin(self.config, next(s for s in self.listener_specs
                                                              if s.name == self.inter_broker_listener))
            if self.config["authorizer.class.name"]:
                self.authorization = Authorization(self.config, security_store, self.metrics,
                                                   self._topic_name, self._topic_exists)
                self.authorization.audit = self.audit
        except ValueError as e:
            raise StartupError(str(e)) from None
        if self.cluster is not None:
            await self._follow_zookeeper_security()
        self.commit = GroupCommit(self.config["log.flush.linger.ms"], self.metrics, self.journal,
                                  self.config["log.journal.checkpoint.bytes"], self._fsync_child(),
                                  # cluster mode: a commit is answered once replicated, never by the fsync child
                                  hand_off=self.config["log.journal.fsync.process.answers"] and self.cluster is None)
        # cluster mode: the child's answer only wakes this node up for a round whose acknowledgements wait for the
        # followers anyway; while the journal's fsyncs are fast, rounds fsync it on the event loop (group_commit)
        self.commit.sync_rounds_here = self.cluster is not None
        self.groups = GroupService(self, self.logs, self.commit)
        self.topic_service = ts = TopicService(self, self.logs, self.commit)
        if self.cluster is not None:  # cluster mode (#20): user topics follow ZooKeeper
            from coordinator.runtime.cluster_topics import ClusterTopics

            ts.cluster = self.cluster_topics = ClusterTopics(ts, self.cluster)
        self._serve_transactions(ts)  # transactions (#38)
        if self.cluster_topics is not None:
            self._start_replication(self.cluster_topics)
        for key in SUPPORTED_APIS:
            self.handlers[key] = self.groups.handle
        self.handlers[10] = self.groups.handle_find_coordinator
        if consumer_protocol_enabled(self.config):  # KIP-848: advertised only when served
            self.consumer_groups = ConsumerGroupService(self, self.groups)
            self.handlers[68] = self.consumer_groups.handle_heartbeat
            self.handlers[69] = self.consumer_groups.handle_describe
        if self.config["hot.path.enable"]:
            if self.authorization is None:  # with ACLs, Heartbeat takes the generic path (it is checked too)
                self.hot[12] = self.groups.hot_heartbeat
                if self.consumer_groups is not None:  # steady ConsumerGroupHeartbeats (consumer_heartbeat_lease.py)
                    self.hot_per_connection[68] = self.consumer_groups.hot_heartbeat
            self.hot_decoders[8] = decode_offset_commit  # a decoder only: the request still meets the checks
            self.hot_decoders[1] = decode_fetch_v12  # followers' fetches (and any other Fetch v12 without tags)
        self.handlers.update({0: ts.handle_produce, 1: ts.handle_fetch, 2: ts.handle_list_offsets,
                              19: ts.handle_create_topics, 20: ts.handle_delete_topics,
                              37: ts.handle_create_partitions})
        cs = ConfigService(self, ts)
        self.handlers.update({32: cs.handle_describe_configs, 33: cs.handle_alter_configs,
                              44: cs.handle_incremental_alter_configs})

    def _serve_transactions(self, ts: TopicService) -> None:
        """The transaction coordinator and its APIs; the transactional InitProducerId replaces the topic
        service's idempotent-only one."""
        assert self.groups is not None
        pids: Callable[[], int]
        if self.cluster is not None:  # cluster-wide blocks claimed in ZooKeeper
            from coordinator.runtime.cluster_producer_ids import ClusterProducerIds

            pids = self.cluster_pids = ClusterProducerIds(self.cluster, self.config["node.id"])
        else:
            try:
                pids = ProducerIds(self.config["data.dir"])
            except StorageError as e:
                raise StartupError(str(e)) from None
        self.transactions = txn = TransactionService(self, self.logs, self.commit, self.groups, ts, pids)
        ts.verify_txn = self.groups.verify_txn = txn.verify
        self.metrics.transactions.source = txn.metrics
        self.handlers.update({22: txn.handle_init_producer_id, 24: txn.handle_add_partitions,
                              25: txn.handle_add_offsets, 26: txn.handle_end_txn, 27: txn.handle_write_txn_markers,
                              61: ts.txn.handle_describe_producers,
                              65: txn.handle_describe_transactions, 66: txn.handle_list_transactions})

    async def _follow_zookeeper_security(self) -> None:
        """Cluster mode: the users and ACLs are ZooKeeper's, read before serving and kept up to date."""
        from coordinator.cluster.security_zk import SecuritySync, ZkSecurity
        from coordinator.cluster.zk import ZkError

        assert self.cluster is not None and self.users is not None
        zk = ZkSecurity(self.cluster.zk)
        authz = self.authorization
        local = self.users.follow_zookeeper(zk) + (authz.follow_zookeeper(zk) if authz is not None else 0)
        if local:
            log.warning("cluster mode: the %d users and ACLs in %s are not used; the cluster's are in ZooKeeper "
                        "(create users with groupcoord users add --zookeeper)", local, self.config["data.dir"])
        self.security_sync = SecuritySync(self.cluster.zk, self.users.apply,
                                          authz.apply if authz is not None else lambda _p, _e: None)
        try:
            await zk.ensure_paths()
            await self.security_sync.load()
        except ZkError as e:
            raise StartupError(f"cannot read the users and ACLs from ZooKeeper ({self.cluster.connect_string}): "
                               f"{e}") from None

    def _open_listener_security(self) -> None:
        """A ``ListenerSecurity`` for every TLS or SASL listener (ValueError: a startup error)."""
        users = self.users
        assert users is not None
        if all(spec.protocol == "PLAINTEXT" for spec in self.listener_specs):
            return
        from coordinator.core.security.mechanisms import parse_enabled_mechanisms, start

        for spec in self.listener_specs:
            if spec.protocol == "PLAINTEXT":
                continue
            map_principal: Callable[[str], str | None] = _no_principal  # SASL: the principal is SASL's
            if spec.protocol == "SSL":  # the client certificate's subject is the principal
                from coordinator.core.security.principal_mapping import (
                    PrincipalMappingError,
                    SslPrincipalMapper,
                )

                rules = str(setting(self.config, spec.name, "ssl.principal.mapping.rules", "DEFAULT"))
                try:
                    mapper = SslPrincipalMapper.from_rules(rules)
                except ValueError as e:
                    raise ValueError(f"ssl.principal.mapping.rules on listener {spec.name}: {e}") from None

                def map_principal(dn: str, mapper: SslPrincipalMapper = mapper) -> str | None:
                    try:
                        return mapper.name(dn)
                    except PrincipalMappingError:
                        return None
            if spec.sasl:
                enabled = parse_enabled_mechanisms(str(setting(self.config, spec.name, "sasl.enabled.mechanisms",
                                                               "")))
                if not enabled:
                    raise ValueError(f"listener {spec.name} ({spec.protocol}) has no sasl.enabled.mechanisms")
            self.listener_security[spec.name] = ListenerSecurity(
                spec, self.config, self.tls,
                lambda mech, reauth: start(mech, users.lookup, reauthentication=reauth), map_principal)

    def reload_tls(self) -> None:
        """SIGHUP: read every TLS listener's certificate files again (open connections keep theirs)."""
        if self.tls is None or not self.tls.specs:
            return
        error = self.tls.reload()
        if error is None:
            log.info("TLS certificates reloaded for listeners %s", ", ".join(s.name for s in self.tls.specs))
        else:
            log.error("TLS certificates not reloaded (the previous ones stay in use): %s", error)

    def _start_replication(self, cluster_topics: ClusterTopics) -> None:
        """Cluster mode: leaders, followers and acknowledgements that wait for the ISR (replication.py)."""
        from coordinator.runtime.replication import Replication

        assert self.cluster is not None and self.groups is not None and self.topic_service is not None
        groups, logs, ts = self.groups, self.logs, self.topic_service
        assert logs is not None

        txn = self.transactions
        assert txn is not None

        def open_log(topic: str, partition: int) -> PartitionLog | None:
            if topic == TXN_TOPIC:
                return txn.txn_log(partition)
            return groups.offsets_log(partition) if topic == OFFSETS_TOPIC else logs.get(topic, partition)

        def min_isr_of(topic: str) -> int:
            if topic in (OFFSETS_TOPIC, TXN_TOPIC):
                return self.config["min.insync.replicas"]
            return ts.effective(topic)["min.insync.replicas"] if ts.partition_count(topic) is not None else \
                self.config["min.insync.replicas"]

        self.replication = Replication(self.config, self.cluster, open_log, ts._wake_fetchers, min_isr_of,
                                       on_lead=ts.forget_producer_states, commit=self.commit, peer=self.peer_login)
        cluster_topics.replication = self.replication
        groups.use_replication(self.replication, self.config["offsets.commit.timeout.ms"] / 1000)
        txn.use_cluster(self.cluster, self.replication, self.config["offsets.commit.timeout.ms"] / 1000)
        self.handlers[23] = self.replication.handle_offset_for_leader_epoch
        self.metrics.cluster.source = self.replication.cluster_stats  # cluster metrics exist only here

    def _fsync_child(self) -> FsyncProcess | None:
        """The journal's fsync child process (None: journal off, disabled, or it could not be spawned)."""
        if self.journal is None or not self.config["log.journal.fsync.process"]:
            return None
        try:
            return FsyncProcess.start()
        except OSError as e:
            log.warning("fsync child process not started (%s); the journal is fsynced in worker threads", e)
            return None

    @asynccontextmanager
    async def running(self, nursery: trio.Nursery) -> AsyncIterator[None]:
        """Background tasks (group commit, loading, timers, retention) live while the server accepts."""
        self.nursery = nursery
        assert self.groups is not None and self.topic_service is not None
        async with trio.open_nursery() as background:
            background.start_soon(self.commit.run)
            if self.cluster is None:
                background.start_soon(self.groups.load_all)
            else:  # cluster mode: serve the offsets partitions this node leads, as leadership moves
                self.cluster.on_leadership = self.groups.follow_leadership
                if self.replication is not None:
                    background.start_soon(self.replication.run)
                background.start_soon(self.groups.leadership_loop)
                if self.security_sync is not None:
                    background.start_soon(self.security_sync.run)
                background.start_soon(self.cluster.run, [(s.name, *self.endpoints[s.name]) for s in self.listener_specs],
                                      {s.name: s.protocol for s in self.listener_specs})
            background.start_soon(self.groups.timer_loop)
            if self.transactions is not None:
                background.start_soon(self.transactions.run, background)
            if self.cluster_pids is not None:
                background.start_soon(self.cluster_pids.run)
            lag = LagSampler(self.groups.core, self.topic_service, self.config)  # issue #37's lag gauges
            self.metrics.lag.source = lambda: lag.latest
            self.metrics.group_commits.max_groups = self.config["metrics.lag.max.groups"]
            stuck = StuckGroups(self.groups.core, self.config)  # issue #37: groups waiting too long
            self.metrics.groups.stuck = lambda: stuck.stuck
            background.start_soon(stuck.run)
            background.start_soon(lag.run)
            if self.consumer_groups is not None:
                background.start_soon(self.consumer_groups.timer_loop)
                background.start_soon(self.consumer_groups.assignments.run)
            background.start_soon(self.topic_service.retention_loop,
                                self.config["log.retention.check.interval.ms"] / 1000)
            background.start_soon(self._checkpoint_loop)
            background.start_soon(self._compaction_loop)
            background.start_soon(user_compaction_loop, self.topic_service)
            background.start_soon(self._idle_loop)
            if self.audit is not None:
                background.start_soon(self.audit.run)
            try:
                yield
            finally:
                background.cancel_scope.cancel()

    async def _checkpoint_loop(self, interval_s: float = 60.0) -> None:
        """Persist every log's recovery point now and then, so a crash re-validates less data."""
        assert self.logs is not None
        logs = self.logs
        while True:
            await trio.sleep(interval_s)

            def checkpoint_all() -> None:
                for topic, part in logs.partitions():
                    plog = logs.get(topic, part)
                    if plog is not None and not plog.offline:
                        try:
                            plog.checkpoint()
                        except (StorageError, OSError) as e:
                            log.error("checkpoint of %s-%s failed: %s", topic, part, e)

            await trio.to_thread.run_sync(checkpoint_all)

    async def _compaction_loop(self, interval_s: float = 60.0) -> None:
        """Compact the offsets and transaction state partitions' closed segments (latest record per key; old
        tombstones go)."""
        assert self.logs is not None
        logs = self.logs
        while True:
            await trio.sleep(interval_s)
            for topic, part in logs.partitions():
                plog = logs.get(topic, part)
                if topic not in (OFFSETS_TOPIC, TXN_TOPIC) or plog is None or plog.offline:
                    continue
                try:
                    await trio.to_thread.run_sync(compact, plog, int(time.time() * 1000))
                except (StorageError, OSError) as e:
                    log.error("compaction of %s-%s failed: %s", topic, part, e)

    async def leave_cluster(self) -> None:
        """Controlled shutdown (cluster mode): give up every leadership here and close the ZooKeeper session,
        so the controller elects other in-sync replicas at once; bounded by the session close."""
        if self.cluster is not None:
            with trio.move_on_after(self.config["zookeeper.session.timeout.ms"] / 1000):
                await self.cluster.close()

    async def stop(self) -> None:
        """Flush and close storage; called once, shielded, at shutdown."""
        if self.cluster is not None:  # leave the cluster first: the controller moves leaderships at once
            await self.cluster.close()
        if self.logs is not None:
            await self.commit.flush_now()
            self.commit.close()
            if self.audit is not None:
                await self.audit.flush()
                await trio.to_thread.run_sync(self.audit.close)
            if self.users is not None:  # before the data dir's lock goes with the logs
                await trio.to_thread.run_sync(self.users.store.close)
            await trio.to_thread.run_sync(self.logs.close)
            if self.journal is not None:
                journal, self.journal = self.journal, None
                if not self.commit.journal_needed():  # every journaled log flushed and closed cleanly
                    await trio.to_thread.run_sync(journal.discard)
                journal.close()

    async def wait_idle(self) -> None:
        while any(c.slots for c in self.connections):
            await trio.sleep(0.01)

    # ---------------------------------------------------------------- plumbing
    def set_bound_ports(self, ports: dict[str, int]) -> None:
        """The bound port of each listener: a listener advertised with port 0 advertises it."""
        for spec in self.listener_specs:
            if not spec.advertised_port:
                self.endpoints[spec.name] = (spec.advertised_host, ports[spec.name])
        self.advertised_host, self.advertised_port = self.endpoints[self.inter_broker_listener]

    def handle(self, request: Request, slot: Slot) -> None:
        handler = self.handlers.get(request.api_key)
        self.metrics.request_started(request.api_key)
        if handler is None:  # declared but not served: clients only send what ApiVersions advertised
            slot.complete(None)
            raise ProtocolError(f"api {request.api_key} is declared but not served")
        authorization = self.authorization
        try:
            if authorization is not None and not authorization.admit(request, slot):
                return
            if request.api_key in AUDITED and self.audit is not None:
                self.audit.admin(request, slot)
            handler(request, slot)
        except Exception as e:
            # A bug (handlers change no state before their last step that can fail). The client gets
            # UNKNOWN_SERVER_ERROR where the answer has a top-level error code; otherwise it would wait
            # forever for this correlation id, so its connection is closed. One line; the trace at DEBUG.
            self.metrics.protocol_error("handler_bug")
            self.connection_log.error("handler for api %s v%s failed: %s: %s", request.api_key, request.version,
                                      type(e).__name__, e)
            log.debug("handler failure", exc_info=True)
            if not slot.done and _has_top_level_error(request.api_key, request.version):
                try:
                    slot.complete({"error_code": ErrorCode.UNKNOWN_SERVER_ERROR, "throttle_time_ms": 0})
                    return
                except Exception:  # the error answer itself cannot be encoded: close
                    pass
            slot.complete(None)
            raise ProtocolError(f"internal error serving api {request.api_key}") from None

    async def _idle_loop(self) -> None:
        """Close connections idle past ``connections.max.idle.ms`` (see connection_limits)."""
        while True:
            await trio.sleep(self.limits.check_interval_s)
            self.limits.reap_idle(list(self.connections), trio.current_time())

    def connection_opened(self, conn: Connection) -> None:
        self.connections.add(conn)
        self.limits.opened(conn.host)
        self.metrics.connections.set(len(self.connections))
        self.metrics.listener_connections.labels(conn.listener).inc()

    def connection_closed(self, conn: ClientConnection) -> None:
        if self.groups is not None:
            self.groups.connection_closed(conn)
        if self.commit is not None:
            self.commit.forget(conn.key)
        if conn in self.connections:
            self.connections.discard(conn)
            self.limits.closed(conn.host)
            self.metrics.listener_connections.labels(conn.listener).dec()
        self.metrics.connections.set(len(self.connections))

    # ---------------------------------------------------------------- ApiVersions
    def api_versions_body(self, error: int = 0) -> dict[str, Any]:
        keys = [
            {"api_key": k, "min_version": ALL[k].min_version, "max_version": ALL[k].max_version}
            for k in sorted(self.handlers)
            if k in ALL
        ]
        return {"error_code": error, "api_keys": keys, "throttle_time_ms": 0}

    def handle_api_versions(self, request: Request, slot: Slot) -> None:
        slot.complete(self.api_versions_body())

    # ---------------------------------------------------------------- Metadata
    def broker_entry(self, listener: str = "") -> dict[str, Any]:
        """This node as a client on ``listener`` must reach it (Kafka answers per listener); default: the
        inter-broker listener's."""
        host, port = self.endpoints.get(listener) or (self.advertised_host, self.advertised_port)
        return {"node_id": self.node_id, "host": host, "port": port, "rack": None}

    # ---------------------------------------------------------------- ACLs
    def _topic_name(self, tid: Any) -> str | None:
        """A topic id's name, from the topic service's id cache (topic_ids.py); None when no topic has it."""
        ts = self.topic_service
        return ts.topic_ids.name_of(tid) if ts is not None else None

    def _topic_exists(self, name: str) -> bool:
        ts = self.topic_service
        return name == OFFSETS_TOPIC or (ts is not None and ts.partition_count(name) is not None)

    def handle_describe_acls(self, request: Request, slot: Slot) -> None:
        a = self.authorization
        slot.complete(disabled_describe() if a is None else a.describe(request.body))

    def handle_create_acls(self, request: Request, slot: Slot) -> None:
        a = self.authorization
        if a is None:
            slot.complete(disabled_create(request.body))
            return

        self._answer_later(slot, request, lambda: a.create(request.body))

    def handle_delete_acls(self, request: Request, slot: Slot) -> None:
        a = self.authorization
        if a is None:
            slot.complete(disabled_delete(request.body))
            return

        self._answer_later(slot, request, lambda: a.delete(request.body))

    # ---------------------------------------------------------------- SASL after authentication, SCRAM users
    def handle_sasl_handshake(self, request: Request, slot: Slot) -> None:
        """Reached only when no SASL exchange may start: on a listener without SASL, or on an authenticated
        connection (KafkaApis.handleSaslHandshakeRequest): ILLEGAL_SASL_STATE, the connection stays open."""
        slot.complete({"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []})

    def handle_sasl_authenticate(self, request: Request, slot: Slot) -> None:
        slot.complete({"error_code": ErrorCode.ILLEGAL_SASL_STATE, "auth_bytes": b"", "session_lifetime_ms": 0,
                       "error_message": "SaslAuthenticate request received after successful authentication"})

    def handle_describe_user_scram_credentials(self, request: Request, slot: Slot) -> None:
        assert self.users is not None
        users = request.body.get("users")
        slot.complete(self.users.describe(None if users is None else [u["name"] for u in users]))

    def handle_alter_user_scram_credentials(self, request: Request, slot: Slot) -> None:
        users = self.users
        assert users is not None
        body = request.body
        self._answer_later(slot, request,
                           lambda: users.alter(body.get("deletions") or [], body.get("upsertions") or []))

    def _answer_later(self, slot: Slot, request: Request,
                      answer: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        """Answer ``slot`` once ``answer()`` (a durable write) is done, in the server's nursery. A bug in it
        ends that client's connection with one line, never the server (the nursery would die with it)."""
        async def run() -> None:
            try:
                body = await answer()
            except Exception as e:
                self.metrics.protocol_error("handler_bug")
                self.connection_log.error("handler for api %s v%s failed: %s: %s", request.api_key,
                                          request.version, type(e).__name__, e)
                slot.complete(None)
                slot.conn.abort()
                return
            slot.complete(body)

        self.nursery.start_soon(run)

    def topic_metadata(self, name: str, count: int | None) -> dict[str, Any]:
        if count is None:
            error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if valid_topic_name(name) else ErrorCode.INVALID_TOPIC_EXCEPTION
            return {"error_code": error, "name": name, "topic_id": ZERO_UUID, "is_internal": False, "partitions": []}
        parts = [
            {"error_code": 0, "partition_index": p, "leader_id": self.node_id, "leader_epoch": 0,
             "replica_nodes": [self.node_id], "isr_nodes": [self.node_id], "offline_replicas": []}
            for p in range(count)
        ]
        return {"error_code": 0, "name": name, "topic_id": topic_id(name),
                "is_internal": name in (OFFSETS_TOPIC, TXN_TOPIC), "partitions": parts}

    @staticmethod
    def created_topic_metadata(name: str) -> dict[str, Any]:
        """The entry for a topic this very request auto-created (Kafka: the creation is not yet in the
        metadata cache, so the answer has no partitions and no topic id)."""
        return {"error_code": ErrorCode.LEADER_NOT_AVAILABLE, "name": name, "topic_id": ZERO_UUID,
                "is_internal": False, "partitions": []}

    def handle_metadata(self, request: Request, slot: Slot) -> None:
        """Single node: the topics asked for (null, or v0's empty list: all), once each, in asked order.

        A missing topic asked for by name is answered as Kafka's KafkaApis.getTopicMetadata and
        AutoTopicCreationManager (ZooKeeper mode) answer it: an illegal name INVALID_TOPIC_EXCEPTION; when
        auto-creation is allowed (``auto.create.topics.enable`` and the request's
        ``allow_auto_topic_creation``, true before v4) the topic is created now and this answer names it
        with LEADER_NOT_AVAILABLE, no partitions and the zero topic id (the next Metadata lists it, as the
        cluster mode does); otherwise UNKNOWN_TOPIC_OR_PARTITION (also for a ``__`` name, never
        auto-created here)."""
        if self.cluster is not None:
            self._cluster_metadata(request, slot)
            return
        wanted = request.body.get("topics")
        ts = self.topic_service
        topics = ts.topics() if ts is not None else {}
        topics[OFFSETS_TOPIC] = self.config["offsets.topic.num.partitions"]  # listed as internal, as Kafka
        created: set[str] = set()
        unknown_ids: list[dict[str, Any]] = []
        if wanted is None or (request.version == 0 and not wanted):
            names = sorted(topics)  # null (or v0 empty) means all topics
        else:
            asked = [t["name"] for t in wanted if t.get("name") is not None]
            by_id = self._topics_by_id(wanted, request.version)
            names = list(dict.fromkeys(asked))
            if TXN_TOPIC in names and self.transactions is not None:  # answered when asked for by name (tools)
                topics[TXN_TOPIC] = self.config["transaction.state.log.num.partitions"]
            allow = request.body.get("allow_auto_topic_creation", True) and not by_id  # Kafka: never by id
            for n in names:
                if n not in topics and allow and ts is not None and ts.auto_create(n):
                    created.add(n)
            names += [n for n in dict.fromkeys(n for n in by_id.values() if n is not None) if n not in names]
            unknown_ids = _unknown_topic_ids(by_id)
        slot.complete({
            "throttle_time_ms": 0,
            "brokers": [self.broker_entry(slot.conn.listener)],
            "cluster_id": self.config["cluster.id"],
            "controller_id": self.node_id,
            "topics": [self.created_topic_metadata(n) if n in created else self.topic_metadata(n, topics.get(n))
                       for n in names] + unknown_ids,
        })

    def _topics_by_id(self, wanted: list[dict[str, Any]], version: int) -> dict[Any, str | None]:
        """Metadata v12+ topics asked by id (a null name; KafkaApis.handleTopicMetadataRequest): id -> its
        name, None for an id no topic has (answered UNKNOWN_TOPIC_ID with a null name)."""
        if version < 12:
            return {}
        out: dict[Any, str | None] = {}
        for t in wanted:
            tid = t.get("topic_id")
            if t.get("name") is None and tid is not None and tid != ZERO_UUID:
                out[tid] = self._topic_name(tid)
        return out

    def _cluster_metadata(self, request: Request, slot: Slot) -> None:
        """Cluster mode: live brokers, controller, and every topic's leader/replicas/ISR/leader epoch from
        ZooKeeper, the same on every node (user topics: ``ClusterTopics.metadata_entry``). Topics asked by
        id (v12+) as on a single node: a known id is answered as its name (after the names asked, never
        auto-created), an unknown one UNKNOWN_TOPIC_ID with a null name, last."""
        from coordinator.cluster.metadata import broker_entries, topic_entry

        assert self.cluster is not None
        view = self.cluster.view
        wanted = request.body.get("topics")
        ct = self.cluster_topics
        allow = request.body.get("allow_auto_topic_creation", True)
        unknown_ids: list[dict[str, Any]] = []
        if wanted is None or (request.version == 0 and not wanted):
            names = sorted(view.assignments)
        else:
            names = [t["name"] for t in wanted if t.get("name") is not None]
            by_id = self._topics_by_id(wanted, request.version)
            allow = allow and not by_id  # Kafka: never auto-created by id
            names += [n for n in dict.fromkeys(n for n in by_id.values() if n is not None) if n not in names]
            unknown_ids = _unknown_topic_ids(by_id)
            if OFFSETS_TOPIC in names and allow:
                self.cluster.request_offsets_topic()
        entries = []
        listener, v = slot.conn.listener, request.version
        for n in sorted(set(names), key=names.index):
            if n == OFFSETS_TOPIC or (n == TXN_TOPIC and n in view.assignments):
                entries.append(topic_entry(view, n, topic_id, True, listener, v))
            elif ct is not None:
                entries.append(ct.metadata_entry(view, n, allow, listener, v))
        slot.complete({
            "throttle_time_ms": 0,
            "brokers": broker_entries(view, listener),
            "cluster_id": self.config["cluster.id"],
            "controller_id": view.controller_id,
            "topics": entries + unknown_ids,
        })


def _unknown_topic_ids(by_id: dict[Any, str | None]) -> list[dict[str, Any]]:
    """Metadata entries for topic ids no topic has (Kafka: UNKNOWN_TOPIC_ID, a null name, no partitions)."""
    return [{"error_code": ErrorCode.UNKNOWN_TOPIC_ID, "name": None, "topic_id": tid, "is_internal": False,
             "partitions": []} for tid, name in by_id.items() if name is None]
