"""What the runtime's services are given instead of their peers, so the imports flow one way.

Rules:
- A service (``groups``, ``topics``, ``configs``, ``cluster_topics``, ``replication``, ``replica_fetcher``) never
  imports ``broker.py`` (the composition root that builds and wires them) nor ``connection.py`` (it gets a
  ``dispatch.Slot``): it names here the few members it reads of what it is given. ``broker.Broker`` is a
  ``ServerContext``; ``cluster_topics.ClusterTopics`` is ``ReplicatedTopics``; ``replication.Replication``
  is ``FollowerReplication``. Structural types: nothing here is called, and nothing checks them at run time.
- ``ServerContext``: exactly what the services read of the server: ``config``, ``metrics``, ``node_id``,
  ``cluster`` (cluster mode, else None), ``nursery`` (the connections' nursery, for a request that waits in
  a task of its own: a long-poll fetch, a topic creation), ``broker_entry()`` (this node in FindCoordinator)
  and ``topic_service`` (the topics hosted, which OffsetDelete checks its partitions against).
- ``ReplicatedTopics``: what ``TopicService`` (and ``ConfigService`` through it) hands to the cluster layer in
  cluster mode: leadership checks, the replicated high watermark, acks=all answers, follower fetches, the
  topic admin APIs and the topics' config overrides (ZooKeeper's).
- ``FollowerReplication``: what a follower's fetcher reads and tells of its node's replication: the
  followed logs, the high watermark its leader announced, the node's group commit (its journal), the
  hooks run once fetched batches are durable or after a log was cut back, and ``peer_trouble`` (its
  connection to the leader broke: fast failover probes the leader).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    import trio

    from coordinator.cluster.member import ClusterMember
    from coordinator.cluster.state import TopicPartition
    from coordinator.config import Config
    from coordinator.metrics import Metrics
    from coordinator.runtime.dispatch import Slot
    from coordinator.runtime.group_commit import GroupCommit
    from coordinator.storage.log import PartitionLog
    from protocol.codec import Request


class HostedTopics(Protocol):
    def topics(self) -> dict[str, int]: ...  # user topic -> partition count


class ServerContext(Protocol):
    config: Config
    metrics: Metrics
    node_id: int
    cluster: ClusterMember | None  # cluster mode (zookeeper.connect set), else None
    nursery: trio.Nursery  # set while the server runs

    @property
    def topic_service(self) -> HostedTopics | None: ...

    def broker_entry(self, listener: str = "") -> dict[str, Any]: ...


class ReplicatedTopics(Protocol):
    def lead_error(self, topic: str, partition: int, fetch: dict[str, Any] | None = None, acks: int = 1) -> int: ...

    def high_watermark(self, topic: str, partition: int) -> int: ...

    def complete_produce(self, slot: Slot, body: dict[str, Any], pending: list[tuple[PartitionLog, int]], acks: int,
                         timeout_ms: int) -> None: ...

    def appended_unanswered(self, pending: list[tuple[PartitionLog, int]]) -> None: ...

    def handle_follower_fetch(self, req: Request, slot: Slot) -> None: ...

    def handle_create_topics(self, req: Request, slot: Slot) -> None: ...

    def handle_delete_topics(self, req: Request, slot: Slot) -> None: ...

    def handle_create_partitions(self, req: Request, slot: Slot) -> None: ...

    def configs_of(self, name: str) -> dict[str, str] | None: ...  # a topic's overrides (ZooKeeper's)

    async def alter_configs(self, name: str, change: Callable[[dict[str, str]], dict[str, str]]
                            ) -> tuple[int, str | None]: ...


class PeerConnector(Protocol):
    """How this node reaches a peer's inter-broker listener (security/peer_login.py)."""

    listener: str  # the inter-broker listener's name: the peer's endpoint on it is used
    who: str  # how this node logs in, for log lines

    async def open(self, host: str, port: int) -> trio.abc.Stream: ...

    async def login(self, call: Callable[[int, int, dict[str, Any]], Awaitable[dict[str, Any]]]) -> None: ...


class FollowerReplication(Protocol):
    node_id: int
    peer: PeerConnector  # the inter-broker listener, with its TLS and SASL
    logs: dict[TopicPartition, PartitionLog]  # led or followed partitions' logs
    follower_hw: dict[TopicPartition, int]  # high watermark a leader told this follower
    commit: GroupCommit | None  # the node's group commit (a follower's small appends go through its journal)
    on_follower_append: Callable[[PartitionLog, list[memoryview]], None]  # the fetched batches are durable here
    on_follower_truncate: Callable[[PartitionLog], None]  # the log was cut back

    def peer_trouble(self, node_id: int, what: str, broken: bool = True) -> None: ...  # maybe crashed: probe it
