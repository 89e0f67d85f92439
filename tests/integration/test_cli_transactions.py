"""`groupcoord transactions list/describe/describe-producers/abort/find-hanging` against the real server.

The stories: a confluent-kafka transaction left open (begun, produced, flushed, not committed) is listed Ongoing,
described with its partition and shown by describe-producers; find-hanging does not report it (its coordinator
shows it Ongoing with that partition) even with no age limit; aborting it by its start offset lets a
read_committed consumer past it. Then a real hanging transaction: a producer's transaction at a partition that
its coordinator has completed without the partition's marker ever landing. It is made with raw requests:
InitProducerId + AddPartitionsToTxn + a transactional batch; an ABORT marker from a newer coordinator epoch (7,
as a moved coordinator would write; here `abort --producer-id/--producer-epoch/--coordinator-epoch`); a second
transactional batch (the partition is still in the coordinator's ongoing transaction, so it verifies); EndTxn.
The coordinator's own marker carries epoch 0, the partition refuses it as TRANSACTION_COORDINATOR_FENCED, which
the coordinator counts as done: the transaction is CompleteCommit there and open at the partition, holding the
LSO. Its batches carry a timestamp an hour old, so find-hanging's default 15 minutes applies. Every wait is
bounded.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from server_process import REPO, ServerProcess  # type: ignore[import-not-found]

from client.cluster import Cluster
from protocol.record_batch import build_batch

PRODUCE, LIST_OFFSETS, INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, END_TXN = 0, 2, 22, 24, 26
HOUR_MS = 3_600_000
FAST_GROUPS = ("--group-initial-rebalance-delay-ms", "0")  # the read_committed consumer joins at once


def gc(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coordinator.cli", *args, "-b", server.bootstrap],
                          capture_output=True, text=True, timeout=60, cwd=REPO)


def rows(out: str) -> list[list[str]]:
    """The table's data rows (the header line dropped), split on whitespace."""
    return [line.split() for line in out.splitlines()[1:] if line.strip()]


def table_of(r: subprocess.CompletedProcess[str]) -> list[dict[str, str]]:
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    lines = [line for line in r.stdout.splitlines() if line.strip()]
    headers = lines[0].split()
    return [dict(zip(headers, line.split(), strict=True)) for line in lines[1:]]


def offsets(cluster: Cluster, topic: str, partition: int) -> tuple[int, int]:
    """(last stable offset, log end offset) by ListOffsets latest, read_committed then read_uncommitted."""
    found = []
    for isolation in (1, 0):
        body = {"replica_id": -1, "isolation_level": isolation, "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}]}
        _, resp = cluster.least_loaded_connection().send(LIST_OFFSETS, body)
        [p] = resp["topics"][0]["partitions"]
        assert p["error_code"] == 0, p
        found.append(p["offset"])
    return found[0], found[1]


def read_committed(bootstrap: str, topic: str, expected: int, group: str, timeout_s: float = 20.0,
                   settle_s: float = 1.0) -> list[bytes]:
    """Every value a read_committed consumer sees from the start, waiting for ``expected`` of them (then
    ``settle_s`` more, so that extra records would show)."""
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    c.subscribe([topic])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    settle_until = None
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                out.append(m.value())
            if len(out) >= expected and settle_until is None:
                settle_until = time.monotonic() + settle_s
            if settle_until is not None and time.monotonic() >= settle_until:
                break
    finally:
        c.close()
    return out


def produce_plain(bootstrap: str, topic: str, value: bytes) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    p.produce(topic, value, partition=0)
    assert p.flush(30) == 0


def test_an_open_transaction_is_listed_described_not_hanging_and_can_be_aborted(tmp_path: Path) -> None:
    from confluent_kafka import Producer

    srv = ServerProcess(tmp_path / "data", *FAST_GROUPS).start().wait_loaded()
    cluster = Cluster(srv.bootstrap)
    try:
        assert gc(srv, "topics", "create", "open-out").returncode == 0
        producer = Producer({"bootstrap.servers": srv.bootstrap, "transactional.id": "open-txn"})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("open-out", b"never-committed", partition=0)
        assert producer.flush(15) == 0

        [desc] = table_of(gc(srv, "transactions", "describe", "--transactional-id", "open-txn"))
        assert desc["STATE"] == "Ongoing" and desc["PARTITIONS"] == "open-out-0", desc
        pid = desc["PRODUCER-ID"]
        listed = table_of(gc(srv, "transactions", "list"))
        assert {"TRANSACTIONAL-ID": "open-txn", "COORDINATOR": desc["COORDINATOR-ID"], "PRODUCER-ID": pid,
                "STATE": "Ongoing"} in listed
        assert table_of(gc(srv, "transactions", "list", "--state", "CompleteCommit")) == []
        assert table_of(gc(srv, "transactions", "list", "--duration-filter", str(HOUR_MS))) == []  # not that old
        [producers] = table_of(gc(srv, "transactions", "describe-producers", "--topic", "open-out",
                                  "--partition", "0"))
        assert producers["PRODUCER-ID"] == pid and producers["PRODUCER-EPOCH"] == desc["PRODUCER-EPOCH"]
        assert producers["TXN-START-OFFSET"] == "0"
        unknown = gc(srv, "transactions", "describe", "--transactional-id", "no-such-txn")
        assert unknown.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in unknown.stderr

        # open for longer than 0 minutes, but its coordinator shows it Ongoing with this partition: not hanging
        assert table_of(gc(srv, "transactions", "find-hanging", "--topic", "open-out",
                           "--max-transaction-timeout", "0")) == []

        produce_plain(srv.bootstrap, "open-out", b"after-the-open-one")
        assert offsets(cluster, "open-out", 0) == (0, 2)  # the open transaction holds the LSO at its start
        missing = gc(srv, "transactions", "abort", "--topic", "open-out", "--partition", "0", "--start-offset", "1")
        assert missing.returncode == 1 and "offset 1" in missing.stderr
        [aborted] = table_of(gc(srv, "transactions", "abort", "--topic", "open-out", "--partition", "0",
                                "--start-offset", "0"))
        assert aborted["PRODUCER-ID"] == pid and aborted["RESULT"] == "aborted"
        assert offsets(cluster, "open-out", 0) == (3, 3)  # the marker went at 2: nothing is unstable now
        assert read_committed(srv.bootstrap, "open-out", 1, "open-reader") == [b"after-the-open-one"]
        after = table_of(gc(srv, "transactions", "describe-producers", "--topic", "open-out", "--partition", "0"))
        assert after and all(p["TXN-START-OFFSET"] == "-" for p in after), after
    finally:
        cluster.close()
        srv.stop()


def _retrying(conn: Any, api_key: int, body: dict[str, Any], error_of: Any, attempts: int = 50) -> dict[str, Any]:
    """Send until the answer's error is not a retriable coordinator one (bounded)."""
    retriable = {14, 15, 51}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, CONCURRENT_TRANSACTIONS
    for _ in range(attempts):
        _, resp = conn.send(api_key, body)
        if error_of(resp) not in retriable:
            return resp
        time.sleep(0.1)
    raise AssertionError(f"api {api_key} kept answering a retriable error: {resp}")


def _produce_txn(conn: Any, txn_id: str, topic: str, pid: int, epoch: int, seq: int, value: bytes) -> int:
    """One transactional batch an hour old; its base offset."""
    batch = build_batch([(None, value, (), int(time.time() * 1000) - HOUR_MS)], producer_id=pid,
                        producer_epoch=epoch, base_sequence=seq, transactional=True)
    body = {"transactional_id": txn_id, "acks": -1, "timeout_ms": 10000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}
    _, resp = conn.send(PRODUCE, body)
    [p] = resp["responses"][0]["partition_responses"]
    assert p["error_code"] == 0, p
    return int(p["base_offset"])


def test_find_hanging_reports_a_transaction_its_coordinator_completed_and_abort_clears_it(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data", *FAST_GROUPS).start().wait_loaded()
    cluster = Cluster(srv.bootstrap)
    try:
        assert gc(srv, "topics", "create", "hang-out").returncode == 0
        assert gc(srv, "topics", "create", "quiet-out").returncode == 0
        node = cluster.find_coordinator("hang-txn", 1)
        coord = cluster.coordinator_connection(node)
        init = _retrying(coord, INIT_PRODUCER_ID, {"transactional_id": "hang-txn", "transaction_timeout_ms": 60000},
                         lambda r: r["error_code"])
        assert init["error_code"] == 0, init
        pid, epoch = init["producer_id"], init["producer_epoch"]
        added = _retrying(coord, ADD_PARTITIONS_TO_TXN, {
            "v3_and_below_transactional_id": "hang-txn", "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": "hang-out", "partitions": [0]}]},
            lambda r: r["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"])
        assert added["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"] == 0
        cluster.refresh_metadata(["hang-out"])
        leader = cluster.connection(cluster.leader_for("hang-out", 0))  # type: ignore[arg-type]
        assert _produce_txn(leader, "hang-txn", "hang-out", pid, epoch, 0, b"hanging-1") == 0
        # a marker from a newer coordinator epoch closes it at the partition and raises the epoch kept there
        newer = gc(srv, "transactions", "abort", "--topic", "hang-out", "--partition", "0", "--producer-id",
                   str(pid), "--producer-epoch", str(epoch), "--coordinator-epoch", "7")
        assert table_of(newer)[0]["COORDINATOR-EPOCH"] == "7"
        assert _produce_txn(leader, "hang-txn", "hang-out", pid, epoch, 1, b"hanging-2") == 2
        ended = _retrying(coord, END_TXN, {"transactional_id": "hang-txn", "producer_id": pid,
                                           "producer_epoch": epoch, "committed": True}, lambda r: r["error_code"])
        assert ended["error_code"] == 0, ended
        state = None
        for _ in range(100):  # the coordinator's marker (epoch 0) is fenced at the partition: counted done
            [desc] = table_of(gc(srv, "transactions", "describe", "--transactional-id", "hang-txn"))
            state = desc["STATE"]
            if state == "CompleteCommit":
                break
            time.sleep(0.1)
        assert state == "CompleteCommit" and desc["PARTITIONS"] == "-", desc
        produce_plain(srv.bootstrap, "hang-out", b"after-the-hanging-one")
        assert offsets(cluster, "hang-out", 0) == (2, 4)  # held at the hanging transaction's start

        producers = table_of(gc(srv, "transactions", "describe-producers", "--topic", "hang-out", "--partition", "0"))
        assert len(producers) == 2  # the hanging one and the idempotent producer of the plain record
        [producer] = [p for p in producers if p["PRODUCER-ID"] == str(pid)]
        assert (producer["PRODUCER-ID"], producer["COORDINATOR-EPOCH"], producer["TXN-START-OFFSET"]) == (
            str(pid), "7", "2")
        expected = {"TOPIC": "hang-out", "PARTITION": "0", "PRODUCER-ID": str(pid), "PRODUCER-EPOCH": str(epoch),
                    "COORDINATOR-EPOCH": "7", "START-OFFSET": "2"}
        [hanging] = table_of(gc(srv, "transactions", "find-hanging", "--topic", "hang-out"))  # default 15 min
        assert {k: hanging[k] for k in expected} == expected and int(hanging["DURATION-MIN"]) >= 60, hanging
        by_broker = table_of(gc(srv, "transactions", "find-hanging", "--broker-id", str(node.node_id)))
        assert [{k: h[k] for k in expected} for h in by_broker] == [expected]  # every topic it leads, one found
        assert table_of(gc(srv, "transactions", "find-hanging", "--topic", "hang-out", "--partition", "0",
                           "--max-transaction-timeout", "120")) == []  # an hour old is younger than 120 minutes

        [aborted] = table_of(gc(srv, "transactions", "abort", "--topic", "hang-out", "--partition", "0",
                                "--start-offset", "2"))
        assert (aborted["PRODUCER-ID"], aborted["COORDINATOR-EPOCH"]) == (str(pid), "7")
        assert table_of(gc(srv, "transactions", "find-hanging", "--topic", "hang-out")) == []
        assert offsets(cluster, "hang-out", 0) == (5, 5)
        assert read_committed(srv.bootstrap, "hang-out", 1, "hang-reader") == [b"after-the-hanging-one"]
    finally:
        cluster.close()
        srv.stop()


def test_bad_usage_exits_2_before_connecting() -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "coordinator.cli", "transactions", *args, "-b", "127.0.0.1:1"],
                              capture_output=True, text=True, timeout=60, cwd=REPO)

    for args, says in ((("abort", "--topic", "t", "--partition", "0"), "--start-offset"),
                       (("abort", "--topic", "t", "--partition", "0", "--producer-id", "5"), "--producer-epoch"),
                       (("find-hanging",), "--topic or --broker-id"),
                       (("find-hanging", "--partition", "0", "--broker-id", "0"), "--partition needs --topic")):
        r = run(*args)
        assert r.returncode == 2 and says in r.stderr, (args, r.returncode, r.stderr)
    unreachable = run("list")
    assert unreachable.returncode == 1 and "127.0.0.1:1" in unreachable.stderr
