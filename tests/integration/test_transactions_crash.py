"""Transactions through a SIGKILL of the server at every step (#38; research note sections 2.3, 6, 7.1, 7.3).

Rules:
- The kill points are test-only hooks of tests/integration/faults/sitecustomize.py (flag files
  ``txn_kill_<point>`` in TEST_FAULT_DIR; the server prints one "groupcoord test fault: SIGKILL at <point>" line
  and SIGKILLs itself): before the Prepare* write, after the Prepare* is durable and before any marker, after
  exactly one of the markers is durable (the group's, or one of the user partitions'), and after a
  TxnOffsetCommit's batch is durable and before its marker. Each test checks the line and the exit status
  (-SIGKILL), so a hook that did not fire fails the test.
- The transactions of the kill-point tests are driven with raw requests (InitProducerId, AddPartitionsToTxn,
  transactional Produce, AddOffsetsToTxn, TxnOffsetCommit, EndTxn), as a client would hide the step it is at;
  one transaction touches two user partitions and a group's offsets. The server is then restarted on the same
  data dir (a new port) and the outcome is checked there: all of the transaction or none of it, in every
  place. Committed when the Prepare was durable with commit (its markers re-driven at load) or when the
  producer retries EndTxn after the restart; aborted when the Prepare was durable with abort, or when the
  transaction was still Ongoing and its timeout ran out after the restart. The server before the kill never
  sweeps for timed-out transactions (its interval is an hour), the restarted one every 200 ms, and the
  transaction timeout is 1 s unless the producer acts after the restart: so no transaction can time out before
  the kill, however slow the machine, and a prepared one is completed although its timeout has passed.
- "Every place agrees": DescribeTransactions ends in CompleteCommit/CompleteAbort; in both user partitions
  the LSO reached the high watermark (no transaction left open) and the high watermark is the 3 records plus
  one marker, two in the partition whose marker was durable before the kill (the re-drive appends a second,
  empty one, as Kafka's appendEndTxnMarker does): this also shows where the kill fell; a read_committed
  consumer (confluent-kafka, read to partition EOF) sees all of the transaction's records or none; the group's
  offsets, by OffsetFetch with require_stable and by confluent's ``committed()`` on a read_committed consumer
  (which sends require_stable), are the transaction's, or those of the plain commit made before it.
- The loop test: a consume-transform-produce copy of 200 records (confluent-kafka, assigned partitions,
  transactions of up to 10 records with their offsets) through three SIGKILLs of the server, each restarted
  on the same port: by the test after a transaction's records and offsets are sent and before its commit
  (then the copier starts over as a supervisor would: a fresh producer with the same transactional id, a
  fresh consumer from the group's committed offsets), and by the server itself inside commit_transaction,
  before the PrepareCommit is written and once it is durable (the clients go on through the restart if they
  can, else start over the same way). The output, read back read_committed, holds every input record
  exactly once.
- Every wait is bounded; servers listen on 127.0.0.1 free ports; only the servers started here are killed,
  by PID (ServerProcess).
"""

from __future__ import annotations

import signal
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from server_process import ServerProcess, free_port, read_frame  # type: ignore[import-not-found]

from coordinator.core.sharding import partition_for
from protocol import codec
from protocol.record_batch import build_batch

FAULTS = Path(__file__).parent / "faults"
SWEEP_FLAG = "--transaction-abort-timed-out-transaction-cleanup-interval-ms"
NO_SWEEP_MS = 3_600_000  # the server before the kill: no transaction times out there, however slow the machine
RETRIABLE = {14, 15, 51}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, CONCURRENT_TRANSACTIONS
SRC, DST, GROUP, TXN_ID = "crash-in", "crash-out", "crash-group", "crash-txn"
RECORDS = 3  # per user partition, in the transaction
PLAIN = {0: 1, 1: 2}  # the group's offsets committed before the transaction (plain OffsetCommit)
TXN = {0: 5, 1: 7}  # the transaction's offsets
GROUP_SHARD = f"__consumer_offsets-{partition_for(GROUP, 50)}"  # the group's offsets partition (50 by default)
SHORT_MS, LONG_MS = 1000, 120000  # transaction timeouts: aborted soon after the restart / never within a test


# --------------------------------------------------------------------------------------------- raw requests
class Dead(Exception):
    """The server closed the connection without an answer (it was killed)."""


def call(port: int, api: int, version: int, body: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(codec.encode_request(api, version, 1, "txn-crash", body))
        payload = read_frame(s)
    if payload is None:
        raise Dead(f"no answer to api {api}")
    return codec.decode_response(api, version, payload)[1]


def retrying(port: int, api: int, version: int, body: dict[str, Any], error_of: Any = None,
             timeout_s: float = 30.0) -> dict[str, Any]:
    """``call`` until the answer's error (``error_of``, default its error_code) is not a retriable one."""
    error_of = error_of or (lambda r: r["error_code"])
    deadline = time.monotonic() + timeout_s
    while True:
        answer = call(port, api, version, body)
        if error_of(answer) not in RETRIABLE or time.monotonic() > deadline:
            return answer
        time.sleep(0.05)


def create_topics(port: int, *topics: tuple[str, int]) -> None:
    answer = call(port, 19, 5, {"topics": [{"name": t, "num_partitions": n, "replication_factor": 1,
                                            "assignments": [], "configs": []} for t, n in topics],
                                "timeout_ms": 15000, "validate_only": False})
    assert all(t["error_code"] == 0 for t in answer["topics"]), answer


def commit_plain(port: int, offsets: dict[int, int]) -> None:
    """A simple consumer's OffsetCommit (no member) of ``offsets`` of SRC for GROUP."""
    answer = retrying(port, 8, 8, {
        "group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": SRC, "partitions": [{"partition_index": p, "committed_offset": o,
                                                  "committed_leader_epoch": -1, "committed_metadata": ""}
                                                 for p, o in offsets.items()]}]},
        error_of=lambda r: max(p["error_code"] for t in r["topics"] for p in t["partitions"]))
    assert all(p["error_code"] == 0 for t in answer["topics"] for p in t["partitions"]), answer


@dataclass
class Txn:
    port: int
    producer_id: int = -1
    epoch: int = -1

    def init(self, timeout_ms: int) -> None:
        answer = retrying(self.port, 22, 4, {"transactional_id": TXN_ID, "transaction_timeout_ms": timeout_ms,
                                             "producer_id": -1, "producer_epoch": -1})
        assert answer["error_code"] == 0, answer
        self.producer_id, self.epoch = answer["producer_id"], answer["producer_epoch"]

    def ids(self) -> dict[str, Any]:
        return {"transactional_id": TXN_ID, "producer_id": self.producer_id, "producer_epoch": self.epoch}

    def add_partitions(self) -> None:
        answer = retrying(self.port, 24, 3, {
            "v3_and_below_transactional_id": TXN_ID, "v3_and_below_producer_id": self.producer_id,
            "v3_and_below_producer_epoch": self.epoch, "v3_and_below_topics": [{"name": DST, "partitions": [0, 1]}]},
            error_of=lambda r: max(p["partition_error_code"] for t in r["results_by_topic_v3_and_below"]
                                   for p in t["results_by_partition"]))
        codes = [p["partition_error_code"] for t in answer["results_by_topic_v3_and_below"]
                 for p in t["results_by_partition"]]
        assert codes == [0, 0], answer

    def produce(self) -> None:
        now = int(time.time() * 1000)
        data = [{"index": p, "records": build_batch(
            [(None, f"p{p}-r{i}".encode(), (), now) for i in range(RECORDS)], producer_id=self.producer_id,
            producer_epoch=self.epoch, base_sequence=0, transactional=True)} for p in (0, 1)]
        answer = call(self.port, 0, 9, {"transactional_id": TXN_ID, "acks": -1, "timeout_ms": 10000,
                                        "topic_data": [{"name": DST, "partition_data": data}]})
        codes = [p["error_code"] for t in answer["responses"] for p in t["partition_responses"]]
        assert codes == [0, 0], answer

    def add_offsets(self) -> None:
        answer = retrying(self.port, 25, 3, {**self.ids(), "group_id": GROUP})
        assert answer["error_code"] == 0, answer

    def commit_offsets(self) -> dict[str, Any]:
        return call(self.port, 28, 3, {
            **self.ids(), "group_id": GROUP, "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": SRC, "partitions": [{"partition_index": p, "committed_offset": o,
                                                     "committed_leader_epoch": -1, "committed_metadata": ""}
                                                    for p, o in TXN.items()]}]})

    def end(self, commit: bool) -> dict[str, Any]:
        return retrying(self.port, 26, 3, {**self.ids(), "committed": commit})


def describe(port: int) -> dict[str, Any]:
    return retrying(port, 65, 0, {"transactional_ids": [TXN_ID]},
                    error_of=lambda r: r["transaction_states"][0]["error_code"])["transaction_states"][0]


def list_offsets(port: int, isolation: int, topic: str = DST) -> dict[int, int]:
    """Latest offset of each of the topic's two partitions: the high watermark (isolation 0) or the LSO (1)."""
    answer = call(port, 2, 5, {"replica_id": -1, "isolation_level": isolation, "topics": [
        {"name": topic, "partitions": [{"partition_index": p, "current_leader_epoch": -1, "timestamp": -1}
                                     for p in (0, 1)]}]})
    parts = answer["topics"][0]["partitions"]
    assert all(p["error_code"] == 0 for p in parts), answer
    return {p["partition_index"]: p["offset"] for p in parts}


def offset_fetch(port: int, stable: bool = True) -> dict[str, Any]:
    return call(port, 9, 7, {"group_id": GROUP, "topics": [{"name": SRC, "partition_indexes": [0, 1]}],
                             "require_stable": stable})


def fetched(answer: dict[str, Any]) -> dict[int, tuple[int, int]]:
    """(offset, error code) by partition of an OffsetFetch answer."""
    assert answer["error_code"] == 0, answer
    return {p["partition_index"]: (p["committed_offset"], p["error_code"]) for p in answer["topics"][0]["partitions"]}


# --------------------------------------------------------------------------------------------- servers
def faulty_server(data: Path, flags: Path, *extra: str, sweep_ms: int = 200) -> ServerProcess:
    """A server with the fault hooks; ``sweep_ms``: how often it aborts transactions past their timeout."""
    env = {"PYTHONPATH": str(FAULTS), "TEST_FAULT_DIR": str(flags)}
    return ServerProcess(data, SWEEP_FLAG, str(sweep_ms), *extra, env=env, listeners=bool(extra)).start().wait_loaded()


def wait_killed(srv: ServerProcess, point: str, timeout_s: float = 20.0) -> None:
    """The server SIGKILLed itself at ``point`` (the hook's line is in its log)."""
    assert srv.proc is not None
    try:
        srv.proc.wait(timeout_s)
    except Exception:
        srv.kill()
        raise AssertionError(f"the server did not kill itself at {point}:\n{srv.log()[-3000:]}") from None
    for _ in range(100):  # the drain thread reads the last lines after the exit
        if f"SIGKILL at {point} " in srv.log():
            break
        time.sleep(0.02)
    assert srv.proc.returncode == -signal.SIGKILL, srv.log()[-3000:]
    assert f"groupcoord test fault: SIGKILL at {point} " in srv.log(), srv.log()[-3000:]


# --------------------------------------------------------------------------------------------- checks
def read_committed(bootstrap: str, topic: str, partitions: int, timeout_s: float = 30.0) -> dict[int, list[bytes]]:
    """Every value a read_committed consumer reads of each partition from the start to its end (partition EOF,
    which read_committed reports at the LSO: callers check first that the LSO is the high watermark)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "crash-reader", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "enable.partition.eof": True, "fetch.wait.max.ms": 50})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error() is not None:
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                at_end.add(m.partition())
                continue
            at_end.discard(m.partition())
            out[m.partition()].append(m.value())
    finally:
        c.close()
    assert len(at_end) == partitions, (at_end, out)
    return out


def group_offsets_by_client(bootstrap: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    try:
        got = c.committed([TopicPartition(SRC, 0), TopicPartition(SRC, 1)], 20)
    finally:
        c.close()
    assert all(tp.error is None for tp in got), got
    return {tp.partition: tp.offset for tp in got}


def check_all_or_nothing(srv: ServerProcess, committed: bool, markers: dict[int, int]) -> None:
    """Every place shows the same decision (see the rules); ``markers``: markers expected per DST partition."""
    deadline = time.monotonic() + 30
    state = describe(srv.port)
    while state["transaction_state"] not in ("CompleteCommit", "CompleteAbort") and time.monotonic() < deadline:
        time.sleep(0.1)
        state = describe(srv.port)
    assert state["error_code"] == 0, state
    assert state["transaction_state"] == ("CompleteCommit" if committed else "CompleteAbort"), state

    hw, lso = list_offsets(srv.port, 0), list_offsets(srv.port, 1)
    assert lso == hw, (lso, hw)  # no transaction left open in either partition
    assert hw == {p: RECORDS + markers[p] for p in (0, 1)}, (hw, markers)

    values = read_committed(srv.bootstrap, DST, 2)
    expected = {p: [f"p{p}-r{i}".encode() for i in range(RECORDS)] if committed else [] for p in (0, 1)}
    assert values == expected

    offsets = TXN if committed else PLAIN
    assert fetched(offset_fetch(srv.port)) == {p: (o, 0) for p, o in offsets.items()}
    assert group_offsets_by_client(srv.bootstrap) == offsets


# --------------------------------------------------------------------------------------------- kill points
@dataclass(frozen=True)
class Case:
    point: str  # the hook (sitecustomize TXN_KILL_POINTS)
    which: str  # the flag's content (among_markers: the one marker let through)
    end: bool | None  # EndTxn commit/abort sent before the kill (None: the kill comes before EndTxn)
    timeout_ms: int
    retry_end: bool  # after the restart the producer sends EndTxn(commit) again with its id and epoch
    committed: bool  # the decision every place must show
    double_marked: int | None = None  # the DST partition whose marker was durable before the kill


CASES = {
    # nothing of EndTxn is durable: Ongoing after the restart, aborted by its timeout
    "before_prepare_then_timeout": Case("before_prepare", "", True, SHORT_MS, False, False),
    # ... or committed by the producer's retry of EndTxn (what a client does after a coordinator crash)
    "before_prepare_then_retry": Case("before_prepare", "", True, LONG_MS, True, True),
    # the Prepare* is durable: its markers are re-driven at load, whatever the timeout says
    "after_prepare_commit": Case("after_prepare", "", True, SHORT_MS, False, True),
    "after_prepare_abort": Case("after_prepare", "", False, SHORT_MS, False, False),
    # one marker durable, the others never written: the re-drive writes them all
    "among_markers_group_first": Case("among_markers", GROUP_SHARD, True, SHORT_MS, False, True),
    "among_markers_partition_first": Case("among_markers", f"{DST}-1", True, SHORT_MS, False, True, 1),
    "among_markers_abort": Case("among_markers", f"{DST}-0", False, SHORT_MS, False, False, 0),
    # the transactional offsets are durable, unanswered, no EndTxn: the timeout aborts (they are dropped) ...
    "after_txn_offsets_then_timeout": Case("after_txn_offsets", "", None, SHORT_MS, False, False),
    # ... or EndTxn(commit) after the restart makes them visible: they were rebuilt as pending at load
    "after_txn_offsets_then_commit": Case("after_txn_offsets", "", None, LONG_MS, True, True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_sigkill_at_each_step_recovers_to_all_or_nothing(tmp_path: Path, name: str) -> None:
    case = CASES[name]
    flags = tmp_path / "flags"
    flags.mkdir()
    srv = faulty_server(tmp_path / "data", flags, sweep_ms=NO_SWEEP_MS)
    restarted = None
    try:
        create_topics(srv.port, (SRC, 2), (DST, 2))
        commit_plain(srv.port, PLAIN)
        txn = Txn(srv.port)
        txn.init(case.timeout_ms)
        txn.add_partitions()
        txn.produce()
        txn.add_offsets()
        (flags / f"txn_kill_{case.point}").write_text(case.which)
        if case.point == "after_txn_offsets":
            with pytest.raises(Dead):
                txn.commit_offsets()
        else:
            answer = txn.commit_offsets()
            assert all(p["error_code"] == 0 for t in answer["topics"] for p in t["partitions"]), answer
            try:  # answered or not: a reply released before the kill may still leave
                answer = txn.end(bool(case.end))
                assert case.point != "before_prepare" and answer["error_code"] == 0, answer  # once prepared
            except (Dead, OSError):
                pass
        wait_killed(srv, case.point)
        assert case.point != "among_markers" or f"marker on {case.which} durable" in srv.log(), srv.log()[-2000:]
        assert not (flags / f"txn_kill_{case.point}").exists()

        restarted = faulty_server(tmp_path / "data", flags)
        if case.retry_end:
            # the transactional offsets were rebuilt as pending at load: unstable until the decision
            assert fetched(offset_fetch(restarted.port)) == {0: (-1, 88), 1: (-1, 88)}  # UNSTABLE_OFFSET_COMMIT
            assert fetched(offset_fetch(restarted.port, stable=False)) == {p: (o, 0) for p, o in PLAIN.items()}
            txn.port = restarted.port
            answer = txn.end(True)
            assert answer["error_code"] == 0, answer
        markers = {p: 2 if p == case.double_marked else 1 for p in (0, 1)}
        check_all_or_nothing(restarted, case.committed, markers)
        for server in (srv, restarted):
            assert "Traceback" not in server.log(), server.log()[-3000:]
    finally:
        srv.kill()
        if restarted is not None:
            restarted.stop()


# --------------------------------------------------------------------------------------------- the loop
class Restarted(Exception):
    """The test killed and restarted the server: the copier starts over."""


# librdkafka 2.16's default metadata.recovery.strategy (rebootstrap) once left send_offsets_to_transaction
# blocked well past its timeout after every broker had been down (AddOffsetsToTxn answered, the group
# coordinator never looked up, no TxnOffsetCommit sent): the clients here reconnect to the known broker instead.
CLIENT = {"metadata.recovery.strategy": "none"}


def test_a_copy_loop_through_server_sigkills_outputs_each_record_exactly_once(tmp_path: Path) -> None:
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    flags = tmp_path / "flags"
    flags.mkdir()
    port = free_port()
    extra = ("--port", str(port))  # every restart on the same port: the clients reconnect to it
    servers = [faulty_server(tmp_path / "data", flags, *extra)]
    bootstrap = f"127.0.0.1:{port}"
    src, dst, group, total = "loop-in", "loop-out", "loop-copier", 200
    values = [f"rec-{i:04d}".encode() for i in range(total)]
    ends = {0: total // 2, 1: total // 2}
    # transaction number (counted over every attempt) -> the kill: by the test after the records and offsets
    # are sent (the transaction is Ongoing at the restart); by the server itself inside commit_transaction,
    # before the PrepareCommit is written (the client's EndTxn goes unanswered) or once it is durable
    kills = {3: "test", 7: "before_prepare", 11: "after_prepare"}
    restarter: threading.Thread | None = None
    failures: list[BaseException] = []

    def restart() -> None:
        servers.append(faulty_server(tmp_path / "data", flags, *extra))

    def restart_when_dead(dying: ServerProcess, point: str) -> None:
        try:
            wait_killed(dying, point)
            restart()
        except BaseException as e:  # re-raised by the test's thread
            failures.append(e)

    try:
        create_topics(port, (src, 2), (dst, 2))
        plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        for i, v in enumerate(values):
            plain.produce(src, v, partition=i % 2)
        assert plain.flush(30) == 0
        del plain

        attempts = sessions = commits = 0
        done = False
        deadline = time.monotonic() + 60
        while not done and time.monotonic() < deadline:
            sessions += 1
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                                 "isolation.level": "read_committed", "auto.offset.reset": "earliest", **CLIENT})
            consumer.assign([TopicPartition(src, p) for p in (0, 1)])  # from the group's committed offsets
            producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "loop-txn",
                                 "transaction.timeout.ms": 10000, **CLIENT})
            try:
                producer.init_transactions(30)
                while time.monotonic() < deadline:
                    batch = [m for m in consumer.consume(10, 0.3) if m.error() is None]
                    if not batch:
                        positions = consumer.position([TopicPartition(src, p) for p in (0, 1)])
                        if {tp.partition: tp.offset for tp in positions} == ends:
                            done = True
                            break
                        continue
                    attempts += 1
                    kill = kills.get(attempts)
                    producer.begin_transaction()
                    for m in batch:
                        producer.produce(dst, m.value().upper(), partition=m.partition())
                    positions = consumer.position(consumer.assignment())
                    producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
                    if kill == "test":
                        assert producer.flush(30) == 0
                        servers[-1].kill()
                        restart()
                        raise Restarted
                    if kill is not None:
                        (flags / f"txn_kill_{kill}").touch()
                        restarter = threading.Thread(target=restart_when_dead, args=(servers[-1], kill))
                        restarter.start()
                    try:
                        producer.commit_transaction(30)  # through the kill: answered, retried, or failed
                        commits += 1
                    finally:
                        if restarter is not None:
                            restarter.join(40)
                            assert not restarter.is_alive() and not failures, failures
                            restarter = None
            except (KafkaException, Restarted):
                pass  # a supervisor starts the copier over: a fresh producer and consumer
            finally:
                consumer.close()
                del producer
        assert done, (sessions, attempts, commits)
        assert attempts > max(kills) and len(servers) == 1 + len(kills), (sessions, attempts, commits)

        lso, hw = list_offsets(port, 1, dst), list_offsets(port, 0, dst)
        assert lso == hw, (lso, hw)  # no transaction left open
        out = read_committed(bootstrap, dst, 2)
        assert sorted(out[0] + out[1]) == sorted(v.upper() for v in values)  # every input record exactly once
        for srv in servers:
            assert "Traceback" not in srv.log(), srv.log()[-3000:]
    finally:
        if restarter is not None:
            restarter.join(40)
        for srv in servers[:-1]:
            srv.kill()
        servers[-1].stop()
