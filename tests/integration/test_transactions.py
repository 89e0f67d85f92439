"""Transactions end to end (#38) with confluent-kafka (librdkafka) against the real server over TCP.

The stories: a consume-transform-produce loop that sends its offsets to each transaction, committing some and
aborting others, read back by a read_committed consumer (every input record exactly once in the output, no
aborted record, and the group's offsets moved only with the committed transactions); a zombie producer
fenced by a second one with the same transactional id (its later writes never become visible); a producer
killed mid-transaction whose transaction is aborted at its timeout so the LSO moves on; and the same loop
through a SIGKILL of the server (no duplicate, no loss). Every wait is bounded.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from server_process import ServerProcess  # type: ignore[import-not-found]

TIMEOUT_FLAGS = ("--transaction-abort-timed-out-transaction-cleanup-interval-ms", "200")


def _create(bootstrap: str, *topics: tuple[str, int]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, n, 1) for t, n in topics]).values():
        future.result(15)


def _produce_plain(bootstrap: str, topic: str, values: list[bytes], partitions: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, v in enumerate(values):
        p.produce(topic, v, partition=i % partitions)
    assert p.flush(30) == 0


def _read_committed(bootstrap: str, topic: str, expected: int, group: str, timeout_s: float = 30.0,
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


def _txn_producer(bootstrap: str, txn_id: str, **extra: Any) -> Any:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, **extra})
    p.init_transactions(30)
    return p


def _copy_loop(bootstrap: str, src: str, dst: str, group: str, txn_id: str, total: int, abort_every: int,
               deadline_s: float = 60.0) -> tuple[int, int]:
    """Consume ``src`` and produce each value upper-cased to ``dst`` in transactions of up to 10 records with
    their offsets; every ``abort_every``-th transaction is aborted (and its records consumed again). Returns
    (commits, aborts)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.subscribe([src])
    producer = _txn_producer(bootstrap, txn_id)
    commits = aborts = copied = 0
    deadline = time.monotonic() + deadline_s
    try:
        while copied < total and time.monotonic() < deadline:
            batch = consumer.consume(10, 0.5)
            batch = [m for m in batch if m.error() is None]
            if not batch:
                continue
            producer.begin_transaction()
            for m in batch:
                producer.produce(dst, m.value().upper(), partition=m.partition())
            assert producer.flush(30) == 0  # in the log before the decision: an abort must hide written data
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
            if (commits + aborts + 1) % abort_every == 0:
                producer.abort_transaction(30)
                aborts += 1
                committed = consumer.committed(consumer.assignment(), 30)
                for tp in committed:  # rewind to what the group committed: these records go again
                    consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))
            else:
                producer.commit_transaction(30)
                commits += 1
                copied += len(batch)
    finally:
        consumer.close()
    return commits, aborts


def test_consume_transform_produce_with_commits_and_aborts(tmp_path: Path) -> None:
    from confluent_kafka import Consumer, TopicPartition

    srv = ServerProcess(tmp_path / "data").start().wait_loaded()
    try:
        _create(srv.bootstrap, ("txn-in", 2), ("txn-out", 2))
        values = [f"rec-{i:04d}".encode() for i in range(120)]
        _produce_plain(srv.bootstrap, "txn-in", values, 2)
        commits, aborts = _copy_loop(srv.bootstrap, "txn-in", "txn-out", "copier", "copier-txn", len(values), 3)
        assert commits >= 5 and aborts >= 2, (commits, aborts)
        assert srv.metric('groupcoord_transactions_total{result="commit"}') == commits
        assert srv.metric('groupcoord_transactions_total{result="abort"}') == aborts
        assert srv.metric("groupcoord_transactions_ongoing") == 0
        out = _read_committed(srv.bootstrap, "txn-out", len(values), "reader")
        assert sorted(out) == sorted(v.upper() for v in values)  # each exactly once, none from an abort
        check = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "copier", "enable.auto.commit": False})
        committed = check.committed([TopicPartition("txn-in", 0), TopicPartition("txn-in", 1)], 15)
        check.close()
        assert sum(tp.offset for tp in committed) == len(values)
        # read_uncommitted sees the aborted copies too: the aborts really wrote data
        raw = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "raw", "auto.offset.reset": "earliest",
                 "isolation.level": "read_uncommitted", "enable.auto.commit": False})
        raw.subscribe(["txn-out"])
        seen: list[bytes] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(seen) <= len(values):
            m = raw.poll(0.2)
            if m is not None and m.error() is None:
                seen.append(m.value())
        raw.close()
        assert len(seen) > len(values)
    finally:
        srv.stop()


def test_a_zombie_is_fenced_and_its_writes_never_become_visible(tmp_path: Path) -> None:
    from confluent_kafka import KafkaException

    srv = ServerProcess(tmp_path / "data").start().wait_loaded()
    try:
        _create(srv.bootstrap, ("zombie-out", 1))
        old = _txn_producer(srv.bootstrap, "shared-id")
        old.begin_transaction()
        old.produce("zombie-out", b"from-zombie-1")
        assert old.flush(15) == 0
        new = _txn_producer(srv.bootstrap, "shared-id")  # bumps the epoch: the old one's transaction aborts
        new.begin_transaction()
        new.produce("zombie-out", b"from-new")
        new.commit_transaction(30)
        with pytest.raises(KafkaException) as raised:
            old.produce("zombie-out", b"from-zombie-2")
            old.commit_transaction(15)
        err = raised.value.args[0]
        assert err.fatal() or "fenced" in str(err).lower() or "epoch" in str(err).lower(), err
        out = _read_committed(srv.bootstrap, "zombie-out", 1, "zombie-reader", settle_s=2.0)
        assert out == [b"from-new"]
    finally:
        srv.stop()


STALLED_CHILD = textwrap.dedent("""
    import sys, time
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": "stalled", "transaction.timeout.ms": 2000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(sys.argv[2], b"never-committed")
    p.flush(15)
    print("PRODUCED", flush=True)
    time.sleep(120)
""")


def test_a_producer_killed_mid_transaction_is_aborted_at_its_timeout(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data", *TIMEOUT_FLAGS).start().wait_loaded()
    child = None
    try:
        _create(srv.bootstrap, ("stall-out", 1))
        child = subprocess.Popen([sys.executable, "-c", STALLED_CHILD, srv.bootstrap, "stall-out"],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "PRODUCED"
        assert srv.metric("groupcoord_transactions_ongoing") == 1
        assert srv.metric('groupcoord_partition_lso_lag_records{partition="0",topic="stall-out"}') == 1
        child.kill()
        child.wait(10)
        later = _txn_producer(srv.bootstrap, "after-stall")
        later.begin_transaction()
        later.produce("stall-out", b"committed-later")
        later.commit_transaction(30)
        # the stalled transaction holds the LSO below the committed record until its 2 s timeout aborts it
        out = _read_committed(srv.bootstrap, "stall-out", 1, "stall-reader", timeout_s=30, settle_s=1.0)
        assert out == [b"committed-later"]
        assert srv.metric("groupcoord_transactions_timed_out_total") == 1
        assert srv.metric("groupcoord_transactions_ongoing") == 0
    finally:
        if child is not None and child.poll() is None:
            child.kill()
        srv.stop()


def test_the_next_transaction_waits_for_the_markers_instead_of_being_refused(tmp_path: Path) -> None:
    """EndTxn and the next transaction's AddPartitionsToTxn pipelined on one connection: the second arrives while
    the first one's markers are being written. Kafka answers CONCURRENT_TRANSACTIONS (the client retries after
    ~20 ms); we hold it until the transaction completed and answer it then."""
    from client.cluster import Cluster

    srv = ServerProcess(tmp_path / "data").start().wait_loaded()
    cluster = Cluster(srv.bootstrap, client_id="pipelined")
    try:
        _create(srv.bootstrap, ("pipe-out", 2))
        cluster.refresh_metadata(None)
        conn = cluster.connection(next(iter(cluster.nodes)))
        for _ in range(200):  # the transaction state loads after the offsets partitions: retry as clients do
            _, init = conn.send(22, {"transactional_id": "pipe", "transaction_timeout_ms": 60000,
                                     "producer_id": -1, "producer_epoch": -1})
            if init["error_code"] != 14:
                break
            time.sleep(0.05)
        assert init["error_code"] == 0, init
        pid, epoch = init["producer_id"], init["producer_epoch"]

        def add(partition: int) -> Any:
            return conn.send_async(24, {"v3_and_below_transactional_id": "pipe", "v3_and_below_producer_id": pid,
                                        "v3_and_below_producer_epoch": epoch,
                                        "v3_and_below_topics": [{"name": "pipe-out", "partitions": [partition]}]})

        def codes(resp: dict[str, Any]) -> set[int]:
            return {p["partition_error_code"] for t in resp["results_by_topic_v3_and_below"]
                    for p in t["results_by_partition"]}

        for round_ in range(5):
            assert codes(add(round_ % 2).result(15)) == {0}
            end = conn.send_async(26, {"transactional_id": "pipe", "producer_id": pid, "producer_epoch": epoch,
                                       "committed": True})
            nxt = add((round_ + 1) % 2)
            assert end.result(15)["error_code"] == 0
            assert codes(nxt.result(15)) == {0}  # not 51: it waited for the markers and CompleteCommit
            end = conn.send_async(26, {"transactional_id": "pipe", "producer_id": pid, "producer_epoch": epoch,
                                       "committed": False})
            assert end.result(15)["error_code"] == 0
    finally:
        cluster.close()
        srv.stop()


def test_the_transaction_state_topic_is_readable_in_kafkas_layout(tmp_path: Path) -> None:
    """As kafka-console-consumer with Kafka's TransactionLogMessageFormatter reads it: Metadata names
    __transaction_state (internal) when asked, and a Fetch of the id's partition returns its records, whose
    keys and values decode with Kafka's TransactionLogKey/Value layouts to the transaction's life."""
    from client.cluster import Cluster
    from coordinator.core.sharding import partition_for
    from coordinator.core.transactions.records import decode_key, decode_value
    from protocol.record_batch import iter_records

    srv = ServerProcess(tmp_path / "data").start().wait_loaded()
    cluster = Cluster(srv.bootstrap, client_id="txn-log-reader")
    try:
        _create(srv.bootstrap, ("log-out", 1))
        p = _txn_producer(srv.bootstrap, "readable-id")
        p.begin_transaction()
        p.produce("log-out", b"x")
        p.commit_transaction(30)
        cluster.refresh_metadata(None)
        conn = cluster.connection(next(iter(cluster.nodes)))
        _, md = conn.send(3, {"topics": [{"name": "__transaction_state"}], "allow_auto_topic_creation": False})
        entry = md["topics"][0]
        assert entry["error_code"] == 0 and entry["is_internal"] and len(entry["partitions"]) == 50
        partition = partition_for("readable-id", 50)
        states: list[int] = []
        deadline = time.monotonic() + 10
        while (not states or states[-1] != 4) and time.monotonic() < deadline:  # CompleteCommit
            _, resp = conn.send(1, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                    "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                                        {"topic": "__transaction_state", "partitions": [
                                            {"partition": partition, "fetch_offset": 0, "current_leader_epoch": -1,
                                             "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
                                    "forgotten_topics_data": [], "rack_id": ""}, version=11)
            part = resp["responses"][0]["partitions"][0]
            assert part["error_code"] == 0, part
            states = [decode_value(r.value).state for r in iter_records(part["records"] or b"")
                      if r.key is not None and decode_key(r.key) == "readable-id" and r.value is not None]
            time.sleep(0.05)
        assert states[0] == 0 and states[-3:] == [1, 2, 4], states  # Empty, Ongoing, PrepareCommit, CompleteCommit
    finally:
        cluster.close()
        srv.stop()
