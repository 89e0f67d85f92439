"""The ZooKeeper side of cluster mode: the only module that imports kazoo.

Rules:
- ``zookeeper.connect`` is ``host:port[,host:port...][/chroot]``, as Kafka's. The chroot is created when
  missing (Kafka's ``createChrootIfNecessary``) and every path here is prefixed with it.
- Nothing blocks the trio thread or waits without a bound: kazoo's ``*_async`` calls are issued from the
  trio thread (they only queue a request) and their results come back through ``rawlink`` callbacks and
  ``TrioToken.run_sync_soon``; every wait has ``op_timeout_s`` (a plain ``zk.set()`` blocks forever without
  quorum). Connecting runs in a worker thread, bounded by the connection timeout.
- Watches are one-shot and re-armed by every ``read_snapshot(watch)``; the watch function and kazoo's
  connection-state listener must only signal (they run on kazoo's threads).
- Controller election is Kafka's: one transaction creates the ephemeral ``/controller`` and sets
  ``/controller_epoch`` to epoch + 1 checked against the version read, so two nodes can never both win the
  same epoch. Every partition-state write is a transaction that first checks ``/controller_epoch``'s version
  is still the one this controller wrote (Kafka's ``checkControllerAndEpoch``), and updates a state znode
  only at the version it was read at. A leader's own ISR change (``update_isr``) is checked against the state
  znode's version alone, as Kafka's leader wrote it.
- Fast failover (``remove_broker``): a crashed peer's ephemerals (``/brokers/ids/<id>``, and ``/controller``
  if it held it) are deleted by a peer that confirmed the crash, only when their ``ephemeralOwner`` is the
  session it saw registered, each at the version read, in one transaction. ZooKeeper cannot check an owner
  in a transaction: a session that expired and a new registration made in the milliseconds between the read
  and the delete would lose that fresh registration; its node then registers again (``member``) and the
  fencing that makes any false positive safe (leader epochs, version-checked ISR writes) holds.
- Topic configs (Kafka's ``AdminZkClient.changeTopicConfig``): ``write_topic_config`` sets
  ``/config/topics/<t>`` at the version it was read at, checks ``/brokers/topics/<t>`` still exists and
  creates the sequential change notification, in one transaction. A topic's growth (CreatePartitions,
  ``write_assignment``) sets ``/brokers/topics/<t>`` at the version it was read at.
- Errors reach callers as ``ZkError`` (with the kazoo error's name), never as kazoo types.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from .state import (
    BROKERS_IDS,
    BROKERS_TOPICS,
    CONFIG_CHANGE_PREFIX,
    CONFIG_CHANGES,
    CONTROLLER,
    CONTROLLER_EPOCH,
    DELETE_TOPICS,
    PERSISTENT_PATHS,
    BrokerInfo,
    ClusterView,
    PartitionState,
    TopicPartition,
    broker_path,
    decode_assignment,
    decode_broker,
    decode_config_change,
    decode_controller,
    decode_controller_epoch,
    decode_state,
    decode_topic_config,
    delete_topic_path,
    encode_assignment,
    encode_broker,
    encode_config_change,
    encode_controller,
    encode_state,
    encode_topic_config,
    partition_path,
    partitions_path,
    state_path,
    topic_config_path,
    topic_path,
)

log = logging.getLogger("groupcoord.cluster.zk")

Watch = Callable[[Any], None]


class ZkError(Exception):
    """A ZooKeeper call failed or timed out."""


def split_connect(connect: str) -> tuple[str, str]:
    """``"h1:1,h2:2/a/b"`` -> (``"h1:1,h2:2"``, ``"/a/b"``); no chroot -> ``""``."""
    hosts, slash, chroot = connect.strip().partition("/")
    if not hosts:
        raise ValueError(f"zookeeper.connect {connect!r} names no host")
    chroot = ("/" + chroot.strip("/")) if slash and chroot.strip("/") else ""
    return hosts, chroot


@dataclass(slots=True)
class Snapshot:
    """A ``ClusterView`` plus what fenced writes and ownership checks need: znode versions and the sessions
    that own the ephemerals."""

    view: ClusterView
    controller_owner: int | None = None  # session id owning /controller
    controller_epoch_version: int = -1  # znode version of /controller_epoch (-1: missing)
    broker_owners: dict[int, int] = field(default_factory=dict)  # node id -> session owning its znode
    state_versions: dict[TopicPartition, int] = field(default_factory=dict)
    deleting: set[str] = field(default_factory=set)  # topics named under /admin/delete_topics
    config_changes: list[str] = field(default_factory=list)  # children of /config/changes
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """A topic's config znode: its overrides, its version (for a checked write) and the zxid of its last
    change (newer is larger, also across a deletion and re-creation). A znode that does not decode gives no
    overrides and names the ``problem``."""

    config: dict[str, str]
    version: int
    mzxid: int
    problem: str | None = None


class ZkStore:
    def __init__(self, connect: str, session_timeout_ms: int, op_timeout_s: float | None = None) -> None:
        self.hosts, self.chroot = split_connect(connect)
        self.session_timeout_s = session_timeout_ms / 1000
        self.op_timeout_s = op_timeout_s if op_timeout_s is not None else max(2.0, self.session_timeout_s)
        self.client = KazooClient(hosts=self.hosts, timeout=self.session_timeout_s)
        self._token: trio.lowlevel.TrioToken | None = None

    def _p(self, path: str) -> str:
        return self.chroot + path

    # ---------------------------------------------------------------- lifecycle
    async def connect(self, timeout_s: float, on_state: Callable[[str], None]) -> None:
        """Connect (bounded), create the chroot and the persistent paths. ``on_state`` gets "SUSPENDED",
        "LOST" or "CONNECTED" on kazoo's thread."""
        self._token = trio.lowlevel.current_trio_token()
        try:
            await trio.to_thread.run_sync(self.client.start, timeout_s)
        except KazooTimeoutError:
            raise ZkError(f"cannot connect to ZooKeeper at {self.hosts} within {timeout_s:g} s") from None
        except (KazooException, OSError, ValueError) as e:
            raise ZkError(f"cannot connect to ZooKeeper at {self.hosts}: {e!r}") from None

        def listener(state: str) -> None:
            name = {KazooState.SUSPENDED: "SUSPENDED", KazooState.LOST: "LOST"}.get(state, "CONNECTED")
            on_state(name)

        self.client.add_listener(listener)
        for path in ((self.chroot,) if self.chroot else ()) + tuple(self._p(p) for p in PERSISTENT_PATHS):
            await self._wait(self.client.ensure_path_async(path))

    def session_id(self) -> int | None:
        cid = self.client.client_id
        return cid[0] if cid else None

    async def close(self) -> None:
        """Close the session now (its ephemerals go at once, so others react without waiting for expiry)."""
        def stop() -> None:
            try:
                self.client.stop()
                self.client.close()
            except KazooException as e:
                log.warning("closing the ZooKeeper client: %r", e)

        await trio.to_thread.run_sync(stop)

    def signal(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the trio thread soon; callable from any thread, never blocks, and does nothing once
        the trio run is over."""
        if self._token is None:
            return
        try:
            self._token.run_sync_soon(fn)
        except trio.RunFinishedError:
            pass

    async def _wait(self, result: Any) -> Any:
        done = trio.Event()
        result.rawlink(lambda _r: self.signal(done.set))
        with trio.move_on_after(self.op_timeout_s):
            await done.wait()
        if not result.ready():
            raise ZkError(f"ZooKeeper did not answer within {self.op_timeout_s:g} s")
        try:
            return result.get_nowait()
        except KazooException:
            raise
        except Exception as e:  # kazoo's connection-level errors
            raise ZkError(repr(e)) from None

    async def _try(self, result: Any) -> Any:
        """``_wait``, with kazoo errors turned into ``ZkError``."""
        try:
            return await self._wait(result)
        except KazooException as e:
            raise ZkError(f"{type(e).__name__}: {e}") from None

    # ---------------------------------------------------------------- brokers
    async def register_broker(self, info: BrokerInfo) -> None:
        """Create the ephemeral ``/brokers/ids/<id>``. Raises ``NodeExistsError`` when it exists (another
        node with this id, or this node's previous session that has not expired yet)."""
        data = encode_broker(info, int(time.time() * 1000))
        try:
            await self._wait(self.client.create_async(self._p(broker_path(info.node_id)), data, ephemeral=True))
        except NodeExistsError:
            raise
        except KazooException as e:
            raise ZkError(f"{type(e).__name__}: {e}") from None

    async def remove_broker(self, node_id: int, owner: int) -> bool | None:
        """Fast failover (``crash_detector``): delete ``/brokers/ids/<id>``, and ``/controller`` when the same
        session holds it, only while session ``owner`` owns them: what the session's expiry would delete.
        Returns whether ``/controller`` went too, or None when nothing was removed: the registration is gone
        or is another session's (the peer left, was removed by another node, or registered again)."""
        client, path = self.client, self._p(broker_path(node_id))
        stat = await self._try(client.exists_async(path))
        if stat is None or stat.ephemeralOwner != owner:
            return None
        held = await self._try(client.exists_async(self._p(CONTROLLER)))
        with_controller = held is not None and held.ephemeralOwner == owner
        txn = client.transaction()
        txn.delete(path, version=stat.version)
        if with_controller:
            txn.delete(self._p(CONTROLLER), version=held.version)
        results = await self._try(txn.commit_async())
        if any(isinstance(r, Exception) for r in results):  # gone (or changed) since it was read
            return None
        return with_controller

    # ---------------------------------------------------------------- controller
    async def elect_controller(self, node_id: int) -> tuple[int, int] | None:
        """Try to become controller: (new controller epoch, its znode version), or None when another node
        holds ``/controller`` or won the race."""
        client = self.client
        try:
            await self._wait(client.create_async(self._p(CONTROLLER_EPOCH), b"0", makepath=True))
        except NodeExistsError:
            pass
        except KazooException as e:
            raise ZkError(f"{type(e).__name__}: {e}") from None
        data, stat = await self._try(client.get_async(self._p(CONTROLLER_EPOCH)))
        epoch = decode_controller_epoch(data) + 1
        txn = client.transaction()
        txn.create(self._p(CONTROLLER), encode_controller(node_id, int(time.time() * 1000)), ephemeral=True)
        txn.set_data(self._p(CONTROLLER_EPOCH), str(epoch).encode(), version=stat.version)
        results = await self._try(txn.commit_async())
        if any(isinstance(r, Exception) for r in results):
            return None
        return epoch, stat.version + 1

    # ---------------------------------------------------------------- topics
    async def create_topic(self, topic: str, replicas: dict[int, tuple[int, ...]]) -> bool:
        """Create ``/brokers/topics/<topic>`` with its assignment; False when it already exists."""
        try:
            await self._wait(self.client.create_async(self._p(topic_path(topic)), encode_assignment(replicas)))
        except NodeExistsError:
            return False
        except KazooException as e:
            raise ZkError(f"{type(e).__name__}: {e}") from None
        return True

    async def create_user_topic(self, topic: str, replicas: dict[int, tuple[int, ...]],
                                configs: dict[str, str]) -> bool:
        """Create ``/config/topics/<topic>`` and ``/brokers/topics/<topic>`` in one transaction; False when
        the topic exists (or is being deleted: its config is still there)."""
        txn = self.client.transaction()
        txn.create(self._p(topic_config_path(topic)), encode_topic_config(configs))
        txn.create(self._p(topic_path(topic)), encode_assignment(replicas))
        results = await self._try(txn.commit_async())
        errors = [r for r in results if isinstance(r, Exception)]
        if not errors:
            return True
        if any(isinstance(e, NodeExistsError) for e in errors):
            return False
        raise ZkError(f"creating topic {topic}: {[type(e).__name__ for e in errors]}")

    async def topic_config(self, topic: str) -> dict[str, str]:
        """A topic's config overrides (empty when it has no config znode)."""
        try:
            data, _ = await self._wait(self.client.get_async(self._p(topic_config_path(topic))))
        except NoNodeError:
            return {}
        except KazooException as e:
            raise ZkError(f"{type(e).__name__}: {e}") from None
        return decode_topic_config(topic, data)

    async def read_topic_config(self, topic: str) -> TopicConfig | None:
        """A topic's config znode, or None when there is none (no such topic, or it was just deleted)."""
        try:
            data, stat = await self._wait(self.client.get_async(self._p(topic_config_path(topic))))
        except NoNodeError:
            return None
        except KazooException as e:
            raise ZkError(f"{type(e).__name__}: {e}") from None
        try:
            return TopicConfig(decode_topic_config(topic, data), stat.version, stat.mzxid)
        except ValueError as e:
            return TopicConfig({}, stat.version, stat.mzxid, str(e))

    async def write_topic_config(self, topic: str, configs: dict[str, str], version: int) -> TopicConfig | None:
        """Set a topic's overrides at ``version`` and notify every node (``/config/changes``), in one
        transaction that also checks the topic still exists; None when a check failed (the config moved on,
        or the topic is gone): read again and retry."""
        p = self._p
        txn = self.client.transaction()
        txn.check(p(topic_path(topic)), -1)
        txn.set_data(p(topic_config_path(topic)), encode_topic_config(configs), version=version)
        txn.create(p(f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}"), encode_config_change(topic), sequence=True)
        results = await self._try(txn.commit_async())
        errors = [r for r in results if isinstance(r, Exception)]
        if errors:
            names = [type(e).__name__ for e in errors]
            if any(n in ("BadVersionError", "NoNodeError") for n in names):
                return None
            raise ZkError(f"writing the config of topic {topic}: {names}")
        stat = results[1]
        return TopicConfig(dict(configs), stat.version, stat.mzxid)

    async def read_config_changes(self, names: list[str]) -> dict[str, tuple[str | None, int]]:
        """Change notifications by child name: (the topic it names, or None for another entity or an
        unreadable one; its creation time in ms). One that is gone already is left out."""
        gets = [(n, self.client.get_async(self._p(f"{CONFIG_CHANGES}/{n}"))) for n in names]
        out: dict[str, tuple[str | None, int]] = {}
        for name, result in gets:
            try:
                data, stat = await self._wait(result)
            except NoNodeError:
                continue
            except KazooException as e:
                raise ZkError(f"{type(e).__name__}: {e}") from None
            try:
                topic = decode_config_change(data)
            except ValueError as e:
                log.warning("%s: %s", name, e)
                topic = None
            out[name] = (topic, stat.ctime)
        return out

    async def delete_config_changes(self, names: list[str]) -> None:
        """Purge expired change notifications (one already purged by another node is fine)."""
        deletes = [self.client.delete_async(self._p(f"{CONFIG_CHANGES}/{n}")) for n in names]
        for result in deletes:
            try:
                await self._wait(result)
            except NoNodeError:
                pass
            except KazooException as e:
                raise ZkError(f"{type(e).__name__}: {e}") from None

    async def read_assignment(self, topic: str) -> tuple[dict[int, tuple[int, ...]], int] | None:
        """A topic's replica assignment and its znode version; None when the topic does not exist. Raises
        ``ValueError`` on an assignment that does not decode."""
        try:
            data, stat = await self._wait(self.client.get_async(self._p(topic_path(topic))))
        except NoNodeError:
            return None
        except KazooException as e:
            raise ZkError(f"{type(e).__name__}: {e}") from None
        return decode_assignment(topic, data), stat.version

    async def write_assignment(self, topic: str, replicas: dict[int, tuple[int, ...]], version: int) -> bool:
        """Set a topic's replica assignment at ``version`` (Kafka's ``writeTopicPartitionAssignment`` with
        ``isUpdate``); False when it moved on or the topic is gone."""
        try:
            await self._wait(self.client.set_async(self._p(topic_path(topic)), encode_assignment(replicas),
                                                   version=version))
        except (BadVersionError, NoNodeError):
            return False
        except KazooException as e:
            raise ZkError(f"{type(e).__name__}: {e}") from None
        return True

    async def reserve_producer_ids(self, node_id: int, size: int) -> tuple[int, int]:
        """Kafka's ZooKeeper-era ``ZkProducerIdManager``: the next block of ``size`` producer ids, [start, end],
        claimed by a version-checked write of ``/latest_producer_id_block`` (created with the first block).
        Raises ``ZkError`` when ZooKeeper fails or ``WRITE_ATTEMPTS`` writes lost to other nodes'."""
        path = self._p("/latest_producer_id_block")
        for _ in range(10):
            try:
                data, stat = await self._wait(self.client.get_async(path))
            except NoNodeError:
                data, stat = None, None
            except KazooException as e:
                raise ZkError(f"{type(e).__name__}: {e}") from None
            start = 0
            if data:
                try:
                    start = int(json.loads(data.decode())["block_end"]) + 1
                except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
                    raise ZkError(f"/latest_producer_id_block does not decode: {e}") from None
            end = start + size - 1
            block = json.dumps({"version": 1, "broker": node_id, "block_start": str(start),
                                "block_end": str(end)}).encode()
            try:
                if stat is None:
                    await self._wait(self.client.create_async(path, block, makepath=True))
                else:
                    await self._wait(self.client.set_async(path, block, version=stat.version))
            except (BadVersionError, NodeExistsError):
                continue  # another node took it: read again
            except KazooException as e:
                raise ZkError(f"{type(e).__name__}: {e}") from None
            return start, end
        raise ZkError("/latest_producer_id_block: too many concurrent writers")

    async def mark_for_deletion(self, topic: str) -> None:
        """Create ``/admin/delete_topics/<topic>`` (already there: fine)."""
        try:
            await self._wait(self.client.create_async(self._p(delete_topic_path(topic)), b""))
        except NodeExistsError:
            pass
        except KazooException as e:
            raise ZkError(f"{type(e).__name__}: {e}") from None

    async def delete_topic(self, topic: str, epoch_version: int) -> tuple[bool, bool]:
        """The controller's deletion: every znode of the topic, its config and its deletion request, in one
        transaction fenced by the controller epoch's version. Returns (deleted, fenced); not deleted and not
        fenced means the tree changed under it (retried from the next snapshot)."""
        client, p = self.client, self._p
        paths: list[str] = []
        if await self._try(client.exists_async(p(topic_path(topic)))) is not None:
            parts: list[str] = []
            try:
                parts = await self._wait(client.get_children_async(p(partitions_path(topic))))
            except NoNodeError:
                pass
            except KazooException as e:
                raise ZkError(f"{type(e).__name__}: {e}") from None
            for part in parts:
                kids = await self._try(client.get_children_async(p(partition_path(topic, int(part)))))
                paths += [f"{p(partition_path(topic, int(part)))}/{k}" for k in kids]
                paths.append(p(partition_path(topic, int(part))))
            if parts:
                paths.append(p(partitions_path(topic)))
            paths.append(p(topic_path(topic)))
        if await self._try(client.exists_async(p(topic_config_path(topic)))) is not None:
            paths.append(p(topic_config_path(topic)))
        paths.append(p(delete_topic_path(topic)))
        txn = client.transaction()
        txn.check(p(CONTROLLER_EPOCH), epoch_version)
        for path in paths:
            txn.delete(path)
        results = await self._try(txn.commit_async())
        errors = [r for r in results if isinstance(r, Exception)]
        if errors:
            log.warning("deleting topic %s refused: %s", topic, [type(e).__name__ for e in errors])
            return False, type(results[0]).__name__ == "BadVersionError"
        return True, False

    async def write_states(self, writes: dict[TopicPartition, PartitionState], versions: dict[TopicPartition, int],
                           epoch_version: int, done: set[TopicPartition] | None = None) -> tuple[int, bool]:
        """Write partition states, each fenced by the controller epoch's znode version (and the state znode's
        version for an update). Returns (how many were written, whether this controller was fenced); the
        partitions written are added to ``done`` when given."""
        client = self.client
        parents = [client.ensure_path_async(self._p(partition_path(*tp))) for tp in writes if tp not in versions]
        for result in parents:  # all issued at once, then awaited
            await self._try(result)
        pending = []
        for tp, st in writes.items():
            txn = client.transaction()
            txn.check(self._p(CONTROLLER_EPOCH), epoch_version)
            path = self._p(state_path(*tp))
            if tp in versions:
                txn.set_data(path, encode_state(st), version=versions[tp])
            else:
                txn.create(path, encode_state(st))
            pending.append((tp, txn.commit_async()))
        written, fenced = 0, False
        for tp, result in pending:
            results = await self._try(result)
            errors = [r for r in results if isinstance(r, Exception)]
            if not errors:
                written += 1
                if done is not None:
                    done.add(tp)
                continue
            first = type(errors[0]).__name__
            if first == "BadVersionError":  # the epoch check is the first op: a newer controller exists
                fenced = True
            log.warning("state write of %s-%s refused: %s", tp[0], tp[1], [type(e).__name__ for e in errors])
        return written, fenced

    async def update_isr(self, tp: TopicPartition, st: PartitionState, version: int) -> int | None:
        """The leader's ISR change (Kafka's ZooKeeper-era ``updateLeaderAndIsr`` by the leader): set the state
        znode only at ``version``; returns the new version, or None when the version check is lost (the
        controller or another leader wrote it since: the caller stops leading until it reads the new state)."""
        try:
            stat = await self._wait(self.client.set_async(self._p(state_path(*tp)), encode_state(st), version=version))
        except BadVersionError:
            return None
        except NoNodeError:
            return None
        except KazooException as e:
            raise ZkError(f"{type(e).__name__}: {e}") from None
        return stat.version

    # ---------------------------------------------------------------- reading
    async def read_snapshot(self, watch: Watch | None = None) -> Snapshot:
        """Brokers, controller, epoch, assignments and partition states, re-arming ``watch`` on each."""
        client, p = self.client, self._p
        snap = Snapshot(ClusterView())
        view = snap.view
        ids = await self._try(client.get_children_async(p(BROKERS_IDS), watch=watch))
        gets = [(i, client.get_async(p(broker_path(int(i))))) for i in ids if i.isdigit()]
        for i, result in gets:
            try:
                data, stat = await self._wait(result)
            except NoNodeError:
                continue  # gone between the listing and the read
            except KazooException as e:
                raise ZkError(f"{type(e).__name__}: {e}") from None
            try:
                view.brokers[int(i)] = decode_broker(int(i), data)
                snap.broker_owners[int(i)] = stat.ephemeralOwner
            except ValueError as e:
                snap.problems.append(str(e))
        controller_id, epoch = -1, 0
        try:
            data, stat = await self._wait(client.get_async(p(CONTROLLER), watch=watch))
            controller_id, snap.controller_owner = decode_controller(data), stat.ephemeralOwner
        except NoNodeError:
            await self._try(client.exists_async(p(CONTROLLER), watch=watch))  # a watch for its creation
        except ValueError as e:
            snap.problems.append(str(e))
        except KazooException as e:
            raise ZkError(f"{type(e).__name__}: {e}") from None
        try:
            data, stat = await self._wait(client.get_async(p(CONTROLLER_EPOCH)))
            epoch, snap.controller_epoch_version = decode_controller_epoch(data), stat.version
        except NoNodeError:
            pass
        except ValueError as e:
            snap.problems.append(str(e))
        except KazooException as e:
            raise ZkError(f"{type(e).__name__}: {e}") from None
        snap.deleting = set(await self._try(client.get_children_async(p(DELETE_TOPICS), watch=watch)))
        snap.config_changes = await self._try(client.get_children_async(p(CONFIG_CHANGES), watch=watch))
        topics = await self._try(client.get_children_async(p(BROKERS_TOPICS), watch=watch))
        assignments: dict[str, dict[int, tuple[int, ...]]] = {}
        for topic in topics:
            try:
                data, _ = await self._wait(client.get_async(p(topic_path(topic)), watch=watch))
                assignments[topic] = decode_assignment(topic, data)
            except NoNodeError:
                continue
            except ValueError as e:
                snap.problems.append(str(e))
            except KazooException as e:
                raise ZkError(f"{type(e).__name__}: {e}") from None
        state_gets = [((t, part), client.get_async(p(state_path(t, part)), watch=watch))
                      for t, parts in assignments.items() for part in parts]
        states: dict[TopicPartition, PartitionState] = {}
        missing = []
        for tp, result in state_gets:
            try:
                data, stat = await self._wait(result)
            except NoNodeError:  # not created yet: watch for its creation
                missing.append(client.exists_async(p(state_path(*tp)), watch=watch))
                continue
            except KazooException as e:
                raise ZkError(f"{type(e).__name__}: {e}") from None
            try:
                states[tp] = decode_state(tp, data)
                snap.state_versions[tp] = stat.version
            except ValueError as e:
                snap.problems.append(str(e))
        for result in missing:
            await self._try(result)
        snap.view = ClusterView(view.brokers, controller_id, epoch, assignments, states)
        return snap

