"""Transactions and bad input (#38 item 7), over raw requests to the real server: each wrong step gets Kafka's code
for the version asked, and none leaves a transaction half decided (the transaction goes on, or ends, as if the bad
request had not come).

Covered: an empty transactional id (INVALID_REQUEST), a timeout above ``transaction.max.timeout.ms``
(INVALID_TRANSACTION_TIMEOUT), an unknown id or a producer id that is not the id's (INVALID_PRODUCER_ID_MAPPING),
a stale epoch (INVALID_PRODUCER_EPOCH below AddPartitionsToTxn/EndTxn v2, PRODUCER_FENCED from v2), EndTxn with no
transaction (INVALID_TXN_STATE), EndTxn commit after an abort was decided (INVALID_TXN_STATE), a transactional batch
for a partition not in the transaction (INVALID_TXN_STATE below Produce v11), a sequence gap (OUT_OF_ORDER_SEQUENCE
_NUMBER), a non-transactional batch from a producer inside its transaction (INVALID_TXN_STATE), a marker with an
older coordinator epoch (TRANSACTION_COORDINATOR_FENCED), an AddPartitionsToTxn naming an unknown partition
(UNKNOWN_TOPIC_OR_PARTITION, OPERATION_NOT_ATTEMPTED for the rest). After all of it the transaction commits and a
read_committed Fetch sees exactly its records.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from server_process import ServerProcess  # type: ignore[import-not-found]

from client.cluster import Cluster
from protocol.errors import ErrorCode as E
from protocol.record_batch import build_batch, iter_records, parse_header, split_batches

TOPIC = "bad-txn"


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[Any]:
    srv = ServerProcess(tmp_path / "data", "--transaction-max-timeout-ms", "60000", "--num-partitions", "2").start()
    srv.wait_loaded()
    deadline = time.monotonic() + 20  # and the transaction state (loaded after the offsets partitions)
    while not any("transaction state partitions" in line for line in srv.output) and time.monotonic() < deadline:
        time.sleep(0.02)
    cluster = Cluster(srv.bootstrap, client_id="bad-txn")
    try:
        cluster.refresh_metadata(None)
        c = cluster.connection(next(iter(cluster.nodes)))
        _, made = c.send(19, {"topics": [{"name": TOPIC, "num_partitions": 2, "replication_factor": 1,
                                          "assignments": [], "configs": []}], "timeout_ms": 10000,
                              "validate_only": False})
        assert made["topics"][0]["error_code"] == 0, made
        yield c
    finally:
        cluster.close()
        srv.stop()


def _init(c: Any, txn_id: str | None, timeout_ms: int = 30000, version: int | None = None) -> dict[str, Any]:
    for _ in range(200):  # the transaction state loads after the offsets partitions
        _, resp = c.send(22, {"transactional_id": txn_id, "transaction_timeout_ms": timeout_ms, "producer_id": -1,
                              "producer_epoch": -1}, version=version)
        if resp["error_code"] != E.COORDINATOR_LOAD_IN_PROGRESS:
            return resp
        time.sleep(0.05)
    return resp


def _add(c: Any, txn_id: str, pid: int, epoch: int, parts: dict[str, list[int]], version: int = 0) -> dict[tuple, int]:
    _, resp = c.send(24, {"v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
                          "v3_and_below_producer_epoch": epoch,
                          "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in parts.items()]},
                     version=version)
    return {(t["name"], p["partition_index"]): p["partition_error_code"]
            for t in resp["results_by_topic_v3_and_below"] for p in t["results_by_partition"]}


def _end(c: Any, txn_id: str, pid: int, epoch: int, commit: bool, version: int = 0) -> int:
    _, resp = c.send(26, {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch,
                          "committed": commit}, version=version)
    return resp["error_code"]


def _produce(c: Any, txn_id: str | None, partition: int, pid: int, epoch: int, seq: int, values: list[bytes],
             transactional: bool = True, version: int = 9) -> int:
    now = int(time.time() * 1000)
    batch = build_batch([(None, v, (), now) for v in values], producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq, transactional=transactional)
    _, resp = c.send(0, {"transactional_id": txn_id, "acks": -1, "timeout_ms": 10000,
                         "topic_data": [{"name": TOPIC, "partition_data": [{"index": partition, "records": batch}]}]},
                     version=version)
    return resp["responses"][0]["partition_responses"][0]["error_code"]


def _read_committed(c: Any, partition: int) -> list[bytes]:
    _, resp = c.send(1, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                         "isolation_level": 1, "session_id": 0, "session_epoch": -1, "topics": [
                             {"topic": TOPIC, "partitions": [{"partition": partition, "fetch_offset": 0,
                                                              "current_leader_epoch": -1, "log_start_offset": -1,
                                                              "partition_max_bytes": 1 << 20}]}],
                         "forgotten_topics_data": [], "rack_id": ""}, version=11)
    part = resp["responses"][0]["partitions"][0]
    aborted = {a["producer_id"] for a in part["aborted_transactions"] or ()}
    out = []
    batches, _ = split_batches(part["records"] or b"")
    for batch in batches:  # what a read_committed client keeps: data batches of producers not aborted here
        header = parse_header(batch)
        if header.is_control or header.producer_id in aborted:
            continue
        out += [r.value for r in iter_records(bytes(batch)) if r.offset < part["last_stable_offset"]]
    return out


def test_every_wrong_step_gets_kafkas_code_and_the_transaction_still_commits(conn: Any) -> None:
    c = conn
    assert _init(c, "")["error_code"] == E.INVALID_REQUEST
    assert _init(c, "t", timeout_ms=60001)["error_code"] == E.INVALID_TRANSACTION_TIMEOUT
    assert _init(c, "t", timeout_ms=0)["error_code"] == E.INVALID_TRANSACTION_TIMEOUT
    assert _end(c, "unknown-id", 1, 0, True) == E.INVALID_PRODUCER_ID_MAPPING
    first = _init(c, "t")
    assert first["error_code"] == 0
    second = _init(c, "t")  # bumps the epoch: the first is a zombie now
    pid, old, epoch = second["producer_id"], first["producer_epoch"], second["producer_epoch"]
    assert second["error_code"] == 0 and pid == first["producer_id"] and epoch == old + 1
    assert _end(c, "t", pid, epoch, True) == E.INVALID_TXN_STATE  # nothing begun
    assert _add(c, "t", pid + 1, epoch, {TOPIC: [0]}) == {(TOPIC, 0): E.INVALID_PRODUCER_ID_MAPPING}
    assert _add(c, "t", pid, old, {TOPIC: [0]}) == {(TOPIC, 0): E.INVALID_PRODUCER_EPOCH}  # v0-1
    assert _add(c, "t", pid, old, {TOPIC: [0]}, version=2) == {(TOPIC, 0): E.PRODUCER_FENCED}
    assert _add(c, "t", pid, epoch, {TOPIC: [0], "no-such-topic": [0]}) == {
        (TOPIC, 0): E.OPERATION_NOT_ATTEMPTED, ("no-such-topic", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert _add(c, "t", pid, epoch, {TOPIC: [0]}) == {(TOPIC, 0): 0}
    # partition 1 is not in the transaction: verification refuses its transactional batch
    assert _produce(c, "t", 1, pid, epoch, 0, [b"stray"]) == E.INVALID_TXN_STATE
    assert _produce(c, "t", 0, pid, epoch, 0, [b"a", b"b"]) == 0
    assert _produce(c, "t", 0, pid, epoch, 5, [b"gap"]) == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert _produce(c, "t", 0, pid, epoch, 2, [b"plain"], transactional=False) == E.INVALID_TXN_STATE
    assert _produce(c, "t", 0, pid, old, 0, [b"zombie"]) == E.INVALID_PRODUCER_EPOCH
    assert _produce(c, "t", 0, pid, epoch, 2, [b"c"]) == 0
    # a marker from an older coordinator epoch than the partition has seen: fenced, nothing written
    _, resp = c.send(27, {"markers": [{"producer_id": pid, "producer_epoch": epoch, "transaction_result": False,
                                       "coordinator_epoch": -5,
                                       "topics": [{"name": TOPIC, "partition_indexes": [0]}]}]})
    fenced = resp["markers"][0]["topics"][0]["partitions"][0]["error_code"]
    assert fenced in (0, E.TRANSACTION_COORDINATOR_FENCED)
    if fenced == 0:  # the partition had seen no coordinator epoch yet: that marker aborted the batches above
        pytest.fail("a marker with coordinator epoch -5 was taken while the transaction was open")
    assert _read_committed(c, 0) == []  # still open: nothing is stable
    assert _end(c, "t", pid, old, True) == E.INVALID_PRODUCER_EPOCH  # EndTxn v0-1 from the zombie
    assert _end(c, "t", pid, old, True, version=2) == E.PRODUCER_FENCED
    assert _end(c, "t", pid, epoch, True) == 0
    assert _end(c, "t", pid, epoch, False) == E.INVALID_TXN_STATE  # commit was decided: no abort after it
    deadline = time.monotonic() + 10
    while _read_committed(c, 0) != [b"a", b"b", b"c"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _read_committed(c, 0) == [b"a", b"b", b"c"]
    assert _read_committed(c, 1) == []
