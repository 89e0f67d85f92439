"""Fast failover on a crash (issue #35 item 4), in a real 3-node cluster (real `groupcoord serve` processes, a real
ZooKeeper granting the DEFAULT 18 s session):

- SIGKILL of the coordinator of a kafka-python group and a confluent-kafka group (the controller too): both
  commit through the new coordinator within seconds (far below the session timeout the controller waited for
  before), every offset acknowledged before the kill is read back and every acks=all record produced
  meanwhile is there.
- SIGSTOP of a leader for 3 s: not taken for crashed (its connects still complete, its connections stay
  open): it keeps its registration, its session and its leaderships, and loses nothing acknowledged.
- SIGSTOP of a leader for 3 s while its inter-broker port looks crashed to its peers (a proxy in front of it
  resets its connections and refuses connects, so fast failover fires on a live process): other leaders are
  elected at once; the stopped node acknowledges nothing it is sent meanwhile, and after SIGCONT it gives up,
  registers again, follows and catches up; nothing acknowledged is lost.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_nodes import (
    DEFAULT_SESSION_TIMEOUT_MS,
    SESSION_TIMEOUT_MS,
    LongSessionZooKeeper,
    commit_offset,
    find_coordinator,
    logs,
    metadata,
    offsets_partitions,
    start_nodes,
    stop_nodes,
    wait_for,
)
from kafka import KafkaConsumer
from kafka import TopicPartition as KTP
from server_process import ServerProcess
from test_cluster_membership import formed
from test_cluster_replication import below, fetch_committed, produce, stored_batches
from test_cluster_user_topics import agreed_topic, create_topic, topic_parts
from zookeeper_process import free_port

from coordinator.core.sharding import partition_for

TOPIC = "fast-failover"
PRODUCE, OFFSET_COMMIT = 0, 8
OFFSETS = "__consumer_offsets"
DEFAULT_SESSION = ("--zookeeper-session-timeout-ms", str(DEFAULT_SESSION_TIMEOUT_MS))
FAILOVER_LIMIT_S = 8.0  # far below the 18 s session the controller waited for before; generous on 2 loaded cores
LOAD_DEADLINE_S = 120
CRASH_LINE = " crashed: "  # a survivor's fast-failover WARNING ("node N (host:port) crashed: ...")
REMOVED_LINE = "was removed while its ZooKeeper session"  # the stopped node's line when it sees it


@pytest.fixture(scope="module")
def zookeeper18(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LongSessionZooKeeper]:
    zk = LongSessionZooKeeper(tmp_path_factory.mktemp("zookeeper18")).start()
    try:
        yield zk
    finally:
        zk.stop()


@pytest.fixture
def connect18(zookeeper18: LongSessionZooKeeper) -> str:
    return f"{zookeeper18.connect}/ff-{uuid.uuid4().hex[:12]}"


def group_led_by(md: dict[str, Any], node: int, prefix: str) -> str:
    """A group name whose offsets partition ``node`` leads in ``md``."""
    lead = {p: e["leader_id"] for p, e in offsets_partitions(md).items()}
    return next(g for i in range(10_000) if lead[partition_for(g := f"{prefix}-{i}", 50)] == node)


def registration_owner(connect: str, node: int) -> int | None:
    """The ZooKeeper session owning ``/brokers/ids/<node>`` now (None: not registered)."""
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError

    client = KazooClient(hosts=connect, timeout=10)
    client.start(15)
    try:
        return client.get(f"/brokers/ids/{node}")[1].ephemeralOwner
    except NoNodeError:
        return None
    finally:
        client.stop()
        client.close()


class Sender(threading.Thread):
    """One acks=all Produce and one OffsetCommit sent to a node on a connection opened (and negotiated) now,
    before the node is stopped; ``answers`` gets their error codes once it answers (-1: no answer in time,
    which is no acknowledgement either)."""

    def __init__(self, node: ServerProcess, group: str, value: bytes, offset: int) -> None:
        super().__init__(name="sender", daemon=True)
        from client.connection import BrokerConnection

        self.conn = BrokerConnection("127.0.0.1", node.port, request_timeout_ms=40000,
                                     connect_timeout_ms=5000).connect()
        self.group, self.value, self.offset = group, value, offset
        self.answers: dict[str, int] = {}

    def run(self) -> None:
        from protocol.record_batch import build_batch

        batch = build_batch([(b"k", self.value, [], 0)])
        try:
            produced = self.conn.send_async(PRODUCE, lambda v: {
                "transactional_id": None, "acks": -1, "timeout_ms": 20000,
                "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}]})
            committed = self.conn.send_async(OFFSET_COMMIT, lambda v: {
                "group_id": self.group, "generation_id_or_member_epoch": -1, "member_id": "",
                "group_instance_id": None, "retention_time_ms": -1,
                "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": self.offset,
                                                           "committed_leader_epoch": -1,
                                                           "committed_metadata": ""}]}]})
            self.answers["produce"] = -1
            self.answers["produce"] = produced.result(40)["responses"][0]["partition_responses"][0]["error_code"]
            self.answers["commit"] = -1
            self.answers["commit"] = committed.result(40)["topics"][0]["partitions"][0]["error_code"]
        except Exception:  # no answer: not acknowledged
            pass
        finally:
            self.conn.close()


def write_acked(node: ServerProcess, value: bytes, acked: set[bytes]) -> None:
    """An acks=all record to TOPIC-0 through ``node``, sent again (bounded) until acknowledged (a node that has
    not seen its new leadership yet refuses it); then it counts as acknowledged."""
    wait_for(f"{value!r} acknowledged", lambda: produce(node, TOPIC, 0, value, -1)["error_code"] == 0, timeout=30)
    acked.add(value)


def read_all(node: ServerProcess, partitions: int, want: set[bytes]) -> set[bytes]:
    """Every value of TOPIC readable through ``node``'s cluster (bounded)."""
    kc = KafkaConsumer(bootstrap_servers=node.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                       consumer_timeout_ms=1000)
    try:
        kc.assign([KTP(TOPIC, p) for p in range(partitions)])
        kc.seek_to_beginning()
        seen: set[bytes] = set()
        for _ in range(60):
            seen |= {m.value for m in kc}
            if want <= seen:
                break
        return seen
    finally:
        kc.close()


# ---------------------------------------------------------------- SIGKILL: groups commit within seconds
class Committer(threading.Thread):
    """A group's client committing a rising offset of partition 0 every 50 ms; each acknowledged commit is kept
    with the times it was sent and acknowledged. confluent-kafka is a subscribed member (its membership moves to
    the new coordinator too); kafka-python assigns itself the partitions and commits for its group id (the
    same FindCoordinator and OffsetCommit path): as a subscribed member, kafka-python 3.0.12 was seen (before any
    kill) to stay in a second rebalance for over a minute, "not part of an active group", now and then."""

    def __init__(self, kind: str, group: str, bootstrap: str) -> None:
        super().__init__(name=f"committer-{kind}", daemon=True)
        self.kind, self.group, self.bootstrap = kind, group, bootstrap
        self.acked: list[tuple[float, float, int]] = []  # (sent at, acknowledged at, offset)
        self.attempted = 0
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # reported by the test
            self.error = e

    def _run(self) -> None:
        stop_at = time.monotonic() + LOAD_DEADLINE_S
        if self.kind == "kp":
            from kafka.structs import OffsetAndMetadata

            kc = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group, enable_auto_commit=False,
                               auto_offset_reset="earliest", request_timeout_ms=15000, retry_backoff_ms=100)
            kc.assign([KTP(TOPIC, p) for p in range(3)])

            def poll() -> bool:
                kc.poll(timeout_ms=50, max_records=10)
                return bool(kc.assignment())

            def commit(offset: int) -> None:
                kc.commit({KTP(TOPIC, 0): OffsetAndMetadata(offset, "", -1)}, timeout_ms=5000)
            close: Callable[[], None] = kc.close
        else:
            from confluent_kafka import Consumer as CKConsumer
            from confluent_kafka import TopicPartition as CTP

            ck = CKConsumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                             "auto.offset.reset": "earliest", "enable.auto.commit": False,
                             "session.timeout.ms": 10000, "heartbeat.interval.ms": 500})
            ck.subscribe([TOPIC])

            def poll() -> bool:
                ck.consume(10, 0.05)
                return bool(ck.assignment())

            def commit(offset: int) -> None:
                ck.commit(offsets=[CTP(TOPIC, 0, offset)], asynchronous=False)
            close = ck.close
        try:
            while not self.stopping.is_set() and time.monotonic() < stop_at:
                if not poll():
                    continue
                self.attempted += 1
                sent = time.monotonic()
                try:
                    commit(self.attempted)
                    self.acked.append((sent, time.monotonic(), self.attempted))
                except Exception:  # refused or timed out during the move: not acknowledged, tried again
                    pass
                time.sleep(0.05)
        finally:
            close()


class Writer(threading.Thread):
    """confluent-kafka acks=all records to TOPIC (about 200 a second) until told to stop; the values whose
    delivery succeeded."""

    def __init__(self, bootstrap: str, partitions: int) -> None:
        super().__init__(name="writer", daemon=True)
        self.bootstrap, self.partitions = bootstrap, partitions
        self.acked: set[bytes] = set()
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            from confluent_kafka import Producer as CKProducer

            p = CKProducer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 5,
                            "message.timeout.ms": 20000})

            def delivered(err: Any, msg: Any) -> None:
                if err is None:
                    self.acked.add(msg.value())
            i = 0
            stop_at = time.monotonic() + LOAD_DEADLINE_S
            while not self.stopping.is_set() and time.monotonic() < stop_at:
                for _ in range(10):
                    p.produce(TOPIC, value=b"w-%d" % i, partition=i % self.partitions, on_delivery=delivered)
                    i += 1
                p.poll(0)
                time.sleep(0.05)
            p.flush(30)
        except BaseException as e:  # reported by the test
            self.error = e


def test_sigkill_the_groups_commit_through_the_new_coordinator_within_seconds(tmp_path: Path,
                                                                              connect18: str) -> None:
    nodes = start_nodes(tmp_path, connect18, [1, 2, 3], *DEFAULT_SESSION)
    threads: list[Any] = []
    try:
        md = formed(nodes)[1]
        made = create_topic(nodes[1], TOPIC, 3, 3)
        assert made["error_code"] == 0, made
        agreed_topic(nodes, TOPIC)
        victim = md["controller_id"]  # the coordinator of both groups is the controller too: /controller goes
        assert victim in nodes, md["controller_id"]
        groups = {"kp": group_led_by(md, victim, "ff-kp"), "ck": group_led_by(md, victim, "ff-ck")}
        bootstrap = ",".join(n.bootstrap for n in nodes.values())
        committers = {kind: Committer(kind, g, bootstrap) for kind, g in groups.items()}
        writer = Writer(bootstrap, 3)
        threads = [*committers.values(), writer]
        for t in threads:
            t.start()

        def load() -> str:
            return (f"commits acknowledged {[len(c.acked) for c in committers.values()]}, records {len(writer.acked)}, "
                    f"errors {[t.error for t in threads]}\n")
        wait_for(f"both groups committing through node {victim}", lambda: all(
            len(c.acked) >= 10 for c in committers.values()) and len(writer.acked) >= 100, timeout=60,
            describe=lambda: load() + logs(nodes))
        assert all(find_coordinator(nodes[victim], g) == (0, victim) for g in groups.values())

        killed_at = time.monotonic()
        nodes[victim].kill()
        survivors = {i: n for i, n in nodes.items() if i != victim}

        def first_after(c: Committer) -> float | None:  # a commit sent after the kill went to a live node
            return next((acked for sent, acked, _ in c.acked if sent > killed_at), None)
        wait_for("a commit of each group through the new coordinator", lambda: all(
            first_after(c) is not None for c in committers.values()), timeout=60,
            describe=lambda: load() + logs(survivors))
        took = {kind: (first_after(c) or 0.0) - killed_at for kind, c in committers.items()}
        print(f"first commit through the new coordinator after SIGKILL: {took}")
        written = len(writer.acked)
        wait_for("acks=all records acknowledged after the kill", lambda: len(writer.acked) > written + 50,
                 timeout=30, describe=lambda: logs(survivors))
        for t in threads:
            t.stopping.set()
        for t in threads:
            t.join(60)
            assert not t.is_alive() and t.error is None, (t.name, t.error)

        assert all(t < FAILOVER_LIMIT_S for t in took.values()), \
            f"first commit through the new coordinator after SIGKILL: {took} s (session 18 s)\n" + logs(survivors)
        assert any(CRASH_LINE in n.log() for n in survivors.values()), logs(survivors)  # fast failover did it
        for kind, g in groups.items():
            c = committers[kind]

            def committed(g: str = g) -> int | None:
                err, node = find_coordinator(next(iter(survivors.values())), g)
                if err or node not in survivors:
                    return None
                got = fetch_committed(survivors[node], g, TOPIC)
                return got[1] if got[0] == 0 else None
            value = wait_for(f"{g}'s committed offset", committed, describe=lambda: logs(survivors))
            assert c.acked[-1][2] <= value <= c.attempted, (kind, c.acked[-1], value, c.attempted)
        missing = writer.acked - read_all(next(iter(survivors.values())), 3, writer.acked)
        assert not missing, f"{len(missing)} acknowledged records missing, e.g. {sorted(missing)[:5]}"
    finally:
        for t in threads:
            t.stopping.set()
        for t in threads:
            t.join(30)
        stop_nodes(nodes)


# ---------------------------------------------------------------- SIGSTOP: not a crash
def leader_epoch(node: ServerProcess, topic: str, partition: int) -> tuple[int, int] | None:
    parts = topic_parts(metadata(node, [topic]), topic) if topic != OFFSETS else offsets_partitions(metadata(node))
    entry = (parts or {}).get(partition)
    return None if entry is None else (entry["leader_id"], entry["leader_epoch"])


def test_a_sigstopped_leader_is_not_taken_for_crashed(tmp_path: Path, connect18: str) -> None:
    nodes = start_nodes(tmp_path, connect18, [1, 2, 3], *DEFAULT_SESSION, "--auto-leader-rebalance-enable", "false")
    stopped_pid = None
    try:
        md = formed(nodes)[1]
        assert create_topic(nodes[1], TOPIC, 1, 3)["error_code"] == 0
        victim = agreed_topic(nodes, TOPIC)[0]["leader_id"]
        group = group_led_by(md, victim, "ff-stop")
        shard = partition_for(group, 50)
        acked: set[bytes] = set()
        for i in range(5):
            write_acked(nodes[victim], b"before-%d" % i, acked)
        wait_for("a first commit", lambda: commit_offset(nodes[victim], group, TOPIC, offset=10) == 0,
                 describe=lambda: logs(nodes))
        owner = registration_owner(connect18, victim)
        epochs = {(TOPIC, 0): leader_epoch(nodes[victim], TOPIC, 0), (OFFSETS, shard): leader_epoch(
            nodes[victim], OFFSETS, shard)}
        assert owner is not None and all(e is not None and e[0] == victim for e in epochs.values()), epochs

        sender = Sender(nodes[victim], group, b"during", 11)  # answered once it runs again
        assert nodes[victim].proc is not None
        stopped_pid = nodes[victim].proc.pid
        os.kill(stopped_pid, signal.SIGSTOP)
        sender.start()
        others = {i: n for i, n in nodes.items() if i != victim}
        time.sleep(3.0)
        # meanwhile no node took it for crashed: still registered by the same session, still the leader
        assert registration_owner(connect18, victim) == owner
        assert leader_epoch(next(iter(others.values())), TOPIC, 0) == epochs[(TOPIC, 0)]
        os.kill(stopped_pid, signal.SIGCONT)
        stopped_pid = None
        sender.join(60)
        assert not sender.is_alive()
        if sender.answers.get("produce") == 0:
            acked.add(b"during")
        wait_for("commits through it again", lambda: commit_offset(nodes[victim], group, TOPIC, offset=11) == 0,
                 describe=lambda: logs(nodes))
        write_acked(nodes[victim], b"after", acked)

        assert registration_owner(connect18, victim) == owner
        for (topic, p), epoch in epochs.items():
            assert all(leader_epoch(n, topic, p) == epoch for n in nodes.values()), (topic, p, epoch)
        assert not any(CRASH_LINE in n.log() or "looks crashed" in n.log() for n in nodes.values()), logs(nodes)
        assert REMOVED_LINE not in nodes[victim].log()
        assert fetch_committed(nodes[victim], group, TOPIC) == (0, 11)
        missing = acked - read_all(nodes[victim], 1, acked)
        assert not missing, missing
    finally:
        if stopped_pid is not None:
            os.kill(stopped_pid, signal.SIGCONT)
        stop_nodes(nodes)


# ---------------------------------------------------------------- SIGSTOP taken for a crash: fenced
class CrashableProxy:
    """A TCP forwarder in front of a node's inter-broker listener that the test can make look crashed while the
    node lives: ``crash`` ends its connections and closes its port (connects are refused, as to a dead
    process), ``restore`` listens on the same port again. Every thread is a daemon bounded by its sockets."""

    def __init__(self) -> None:
        self.port = free_port()
        self.target = 0  # the node's real inter-broker port, once it is known
        self._up = False
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._acceptor: threading.Thread | None = None
        self.restore()

    def restore(self) -> None:
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(64)
        ls.settimeout(0.05)
        self._up = True
        self._acceptor = threading.Thread(target=self._accept, args=(ls,), daemon=True)
        self._acceptor.start()

    def crash(self) -> None:
        self._up = False
        if self._acceptor is not None:
            self._acceptor.join(5)  # it closes the listening socket as it leaves
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for s in pair:
                try:
                    s.shutdown(socket.SHUT_RDWR)  # wakes the pumps; the peer sees its connection end
                except OSError:
                    pass

    def _accept(self, ls: socket.socket) -> None:
        try:
            while self._up:
                try:
                    c, _ = ls.accept()
                except TimeoutError:
                    continue
                except OSError:
                    return
                c.settimeout(None)
                threading.Thread(target=self._serve, args=(c,), daemon=True).start()
        finally:
            ls.close()

    def _serve(self, c: socket.socket) -> None:
        deadline = time.monotonic() + 20
        while not self.target and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            u = socket.create_connection(("127.0.0.1", self.target), timeout=5)
        except OSError:
            c.close()
            return
        u.settimeout(None)
        with self._lock:
            if not self._up:
                c.close()
                u.close()
                return
            self._pairs.append((c, u))
        back = threading.Thread(target=self._pump, args=(u, c), daemon=True)
        back.start()
        self._pump(c, u)
        back.join(10)
        c.close()
        u.close()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def start_proxied(data_root: Path, connect: str, ids: list[int], *extra: str
                  ) -> tuple[dict[int, ServerProcess], dict[int, CrashableProxy]]:
    """Nodes whose inter-broker listener (REPLICATION) peers reach through a CrashableProxy each; clients use
    their PLAINTEXT listener directly."""
    nodes: dict[int, ServerProcess] = {}
    proxies: dict[int, CrashableProxy] = {}
    try:
        for i in ids:
            proxies[i] = proxy = CrashableProxy()
            nodes[i] = ServerProcess(
                data_root / f"node{i}", "--listeners", "PLAINTEXT://127.0.0.1:0,REPLICATION://127.0.0.1:0",
                "--advertised-listeners", f"REPLICATION://127.0.0.1:{proxy.port}",
                "--listener-security-protocol-map", "PLAINTEXT:PLAINTEXT,REPLICATION:PLAINTEXT",
                "--inter-broker-listener-name", "REPLICATION", "--zookeeper-connect", connect, "--node-id", str(i),
                "--zookeeper-session-timeout-ms", str(SESSION_TIMEOUT_MS), "--group-min-session-timeout-ms",
                "1000", "--group-initial-rebalance-delay-ms", "0", "--shutdown-grace-ms", "1000", *extra,
                listeners=True).start()
            proxy.target = nodes[i].ports["REPLICATION"]
    except BaseException:
        stop_nodes(nodes)
        for p in proxies.values():
            p.crash()
        raise
    return nodes, proxies


def test_a_sigstopped_leader_taken_for_crashed_is_fenced_and_loses_nothing(tmp_path: Path, connect18: str) -> None:
    # the default 18 s session: only fast failover can move its leaderships while it is stopped; no
    # preferred-leader rebalance (it would hand the stopped node its partitions back once it is in sync)
    nodes, proxies = start_proxied(tmp_path, connect18, [1, 2, 3], *DEFAULT_SESSION,
                                   "--auto-leader-rebalance-enable", "false")
    stopped_pid = None
    try:
        md = formed(nodes)[1]
        assert create_topic(nodes[1], TOPIC, 1, 3)["error_code"] == 0
        victim = agreed_topic(nodes, TOPIC)[0]["leader_id"]
        group = group_led_by(md, victim, "ff-zombie")
        shard = partition_for(group, 50)
        others = {i: n for i, n in nodes.items() if i != victim}
        acked: set[bytes] = set()
        for i in range(5):
            write_acked(nodes[victim], b"before-%d" % i, acked)
        wait_for("a first commit", lambda: commit_offset(nodes[victim], group, TOPIC, offset=10) == 0,
                 describe=lambda: logs(nodes))
        owner = registration_owner(connect18, victim)
        assert owner is not None

        zombie = Sender(nodes[victim], group, b"zombie", 666)  # sent to it while it is stopped
        assert nodes[victim].proc is not None
        stopped_pid = nodes[victim].proc.pid
        os.kill(stopped_pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        zombie.start()
        proxies[victim].crash()  # to its peers it now looks crashed: connections ended, connects refused

        def moved() -> tuple[int, int] | None:
            ask = next(iter(others.values()))
            topic, offsets = leader_epoch(ask, TOPIC, 0), leader_epoch(ask, OFFSETS, shard)
            if topic is None or offsets is None or topic[0] in (victim, -1) or offsets[0] in (victim, -1):
                return None
            return topic[0], offsets[0]
        new, coordinator = wait_for("other leaders elected while it is stopped", moved, timeout=15, interval=0.05,
                                    describe=lambda: logs(others))
        took = time.monotonic() - stopped_at
        print(f"leaders moved {took:.2f} s after the stopped node's port looked crashed")
        assert took < FAILOVER_LIMIT_S, f"leaders moved {took:.1f} s after the crash signal (session 18 s)"
        assert any(CRASH_LINE in n.log() for n in others.values()), logs(others)
        assert registration_owner(connect18, victim) is None  # removed, though its session lives
        for i in range(5):  # the new leader acknowledges with the remaining in-sync replica
            write_acked(nodes[new], b"during-%d" % i, acked)
        wait_for("a commit through the new coordinator", lambda: commit_offset(nodes[coordinator], group, TOPIC,
                                                                               offset=20) == 0,
                 describe=lambda: logs(others))

        time.sleep(max(0.0, 3.0 - (time.monotonic() - stopped_at)))
        proxies[victim].restore()
        os.kill(stopped_pid, signal.SIGCONT)
        stopped_pid = None
        zombie.join(60)
        assert not zombie.is_alive()
        # whatever it still believed when it woke, it acknowledged nothing
        assert zombie.answers.get("produce", -1) != 0 and zombie.answers.get("commit", -1) != 0, zombie.answers

        def follows() -> bool:
            topic = (topic_parts(metadata(nodes[victim], [TOPIC]), TOPIC) or {}).get(0)
            offsets = offsets_partitions(metadata(nodes[victim])).get(shard)
            return topic is not None and offsets is not None and (topic["leader_id"], offsets["leader_id"]) == (
                new, coordinator) and victim in topic["isr_nodes"] and victim in offsets["isr_nodes"]
        wait_for(f"node {victim} back in the ISRs under nodes {new} and {coordinator}", follows, timeout=60,
                 describe=lambda: logs(nodes))
        assert REMOVED_LINE in nodes[victim].log(), nodes[victim].log()[-3000:]
        owner_after = registration_owner(connect18, victim)
        assert owner_after == owner  # registered again by the same, living session
        for i in range(5):
            write_acked(nodes[new], b"after-%d" % i, acked)
        wait_for("a commit after it woke", lambda: commit_offset(nodes[coordinator], group, TOPIC, offset=30) == 0)
        assert fetch_committed(nodes[coordinator], group, TOPIC) == (0, 30)
        seen = read_all(nodes[new], 1, acked)
        assert acked <= seen, acked - seen
        assert b"zombie" not in seen
        wait_for("its log to equal the leader's below the leader's end", lambda: (
            lead := stored_batches(tmp_path, new, TOPIC, 0)) and below(
                stored_batches(tmp_path, victim, TOPIC, 0), _end(lead)) == lead, describe=lambda: logs(nodes))
    finally:
        if stopped_pid is not None:
            os.kill(stopped_pid, signal.SIGCONT)
        stop_nodes(nodes)
        for p in proxies.values():
            p.crash()


def _end(batches: list[bytes]) -> int:
    from protocol.record_batch import parse_header

    return parse_header(batches[-1]).next_offset
