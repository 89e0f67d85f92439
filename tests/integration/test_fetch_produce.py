"""Produce and Fetch over TCP against the real daemon, with raw requests built by our own codec.

Stories: a Fetch waiting on an empty partition is answered as soon as a record is produced (long-poll), and
an idle one after max_wait_ms; a corrupted batch is CORRUPT_MESSAGE and appends nothing; a batch over
message.max.bytes is MESSAGE_TOO_LARGE; acks=0 gets no response; SIGKILL while producing with acks=all
loses no acknowledged record.
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import threading
import time
from pathlib import Path

from server_process import ServerProcess  # type: ignore[import-not-found]

from protocol import codec
from protocol.errors import ErrorCode
from protocol.record_batch import build_batch, iter_records

TOPIC = "fp-topic"


class Wire:
    """One client connection speaking raw frames; requests may be pipelined."""

    def __init__(self, port: int, timeout: float = 15.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self._corr = itertools.count(1)

    def send(self, api_key: int, version: int, body: dict) -> int:
        corr = next(self._corr)
        self.sock.sendall(codec.encode_request(api_key, version, corr, "fp-test", body))
        return corr

    def recv(self, api_key: int, version: int) -> tuple[int, dict]:
        (size,) = struct.unpack(">i", self._exact(4))
        return codec.decode_response(api_key, version, self._exact(size))

    def call(self, api_key: int, version: int, body: dict) -> dict:
        corr = self.send(api_key, version, body)
        got, resp = self.recv(api_key, version)
        assert got == corr
        return resp

    def _exact(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed by server")
            out += chunk
        return out

    def close(self) -> None:
        self.sock.close()


def create_topic(w: Wire, name: str = TOPIC, partitions: int = 1) -> None:
    body = w.call(19, 4, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                                      "assignments": [], "configs": []}], "timeout_ms": 5000,
                          "validate_only": False})
    assert body["topics"][0]["error_code"] == 0, body


def produce_body(records: bytes, acks: int = -1, partition: int = 0) -> dict:
    return {"transactional_id": None, "acks": acks, "timeout_ms": 5000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": partition, "records": records}]}]}


def produce(w: Wire, records: bytes, acks: int = -1) -> dict:
    return w.call(0, 7, produce_body(records, acks))["responses"][0]["partition_responses"][0]


def batch(*keys: str, value: bytes = b"v") -> bytes:
    now = int(time.time() * 1000)
    return build_batch([(k.encode(), value, (), now) for k in keys])


def latest_offset(w: Wire, partition: int = 0) -> int:
    body = w.call(2, 1, {"replica_id": -1, "topics": [{"name": TOPIC, "partitions": [
        {"partition_index": partition, "timestamp": -1}]}]})
    part = body["topics"][0]["partitions"][0]
    assert part["error_code"] == 0
    return part["offset"]


def fetch_body(offset: int, max_wait_ms: int, min_bytes: int = 1, partition: int = 0) -> dict:
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": 1 << 20,
            "isolation_level": 1, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [],
            "rack_id": "", "topics": [{"topic": TOPIC, "partitions": [
                {"partition": partition, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]}]}


def fetched(body: dict) -> tuple[int, list[tuple[int, str]]]:
    part = body["responses"][0]["partitions"][0]
    assert part["error_code"] == 0, part
    return part["high_watermark"], [(r.offset, r.key.decode()) for r in iter_records(part["records"] or b"")]


# ---------------------------------------------------------------------------------------------- long-poll
# A long poll's max_wait far beyond anything a loaded machine adds: answering well before it can only mean
# the fetch was woken (by data, or because data was there), so no bound below is a speed threshold.
LONG_WAIT_MS = 40_000


def assert_woken_by_data(elapsed: float) -> None:
    assert 0.9 <= elapsed < 0.5 * LONG_WAIT_MS / 1000, (
        f"answered after {elapsed:.2f} s; the record arrived after 1 s, max_wait_ms was {LONG_WAIT_MS}")


def test_fetch_on_an_empty_partition_returns_the_record_produced_a_second_later(server: ServerProcess) -> None:
    w, producer = Wire(server.port), Wire(server.port)
    create_topic(w)

    def produce_later() -> None:
        time.sleep(1.0)
        assert produce(producer, batch("late"))["error_code"] == 0

    t = threading.Thread(target=produce_later)
    start = time.monotonic()
    t.start()
    body = w.call(1, 12, fetch_body(0, max_wait_ms=LONG_WAIT_MS))
    elapsed = time.monotonic() - start
    t.join()
    assert fetched(body) == (1, [(0, "late")])
    assert_woken_by_data(elapsed)
    w.close()
    producer.close()


def test_an_acks_0_record_also_wakes_a_waiting_fetch(server: ServerProcess) -> None:
    w, producer = Wire(server.port), Wire(server.port)
    create_topic(w)

    def produce_later() -> None:
        time.sleep(1.0)
        producer.send(0, 7, produce_body(batch("fire-and-forget"), acks=0))

    t = threading.Thread(target=produce_later)
    start = time.monotonic()
    t.start()
    body = w.call(1, 4, fetch_body(0, max_wait_ms=LONG_WAIT_MS))
    elapsed = time.monotonic() - start
    t.join()
    assert fetched(body) == (1, [(0, "fire-and-forget")])
    assert_woken_by_data(elapsed)
    w.close()
    producer.close()


def test_a_consumer_reset_during_a_long_poll_does_not_take_the_server_down(server: ServerProcess) -> None:
    # A consumer killed with -9 while its Fetch waits: the kernel answers with RST (SO_LINGER 0 forces it),
    # the server's read fails with ECONNRESET inside the connection's nursery.
    w = Wire(server.port)
    create_topic(w)
    for _ in range(3):
        doomed = Wire(server.port)
        doomed.send(1, 12, fetch_body(0, max_wait_ms=5000))
        time.sleep(0.2)
        doomed.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        doomed.sock.close()
    time.sleep(0.3)
    assert produce(w, batch("after-reset"))["error_code"] == 0   # wakes the orphaned fetches
    body = w.call(1, 4, fetch_body(0, max_wait_ms=0))
    assert fetched(body) == (1, [(0, "after-reset")])
    assert server.alive()
    w.close()


def test_idle_fetch_returns_empty_after_max_wait(server: ServerProcess) -> None:
    w = Wire(server.port)
    create_topic(w)
    assert produce(w, batch("a", "b"))["error_code"] == 0
    start = time.monotonic()
    body = w.call(1, 4, fetch_body(2, max_wait_ms=1000))   # at the end of the log: nothing to return
    elapsed = time.monotonic() - start
    assert fetched(body) == (2, [])
    # Not before max_wait_ms; the upper bound only tells "answered at the deadline" from "hung".
    assert 0.95 <= elapsed < 0.5 * LONG_WAIT_MS / 1000, f"answered after {elapsed:.2f} s, max_wait_ms was 1000"
    w.close()


def test_fetch_with_data_available_answers_at_once(server: ServerProcess) -> None:
    w = Wire(server.port)
    create_topic(w)
    assert produce(w, batch("a", "b"))["error_code"] == 0
    start = time.monotonic()
    body = w.call(1, 4, fetch_body(0, max_wait_ms=LONG_WAIT_MS))
    elapsed = time.monotonic() - start
    assert fetched(body) == (2, [(0, "a"), (1, "b")])
    assert elapsed < 0.5 * LONG_WAIT_MS / 1000, f"waited {elapsed:.2f} s: the long poll ran to its deadline"
    w.close()


# ---------------------------------------------------------------------------------------------- refusals
def test_corrupted_crc_is_refused_and_nothing_is_appended(server: ServerProcess) -> None:
    w = Wire(server.port)
    create_topic(w)
    assert produce(w, batch("first"))["base_offset"] == 0
    good = batch("good")
    bad = bytearray(batch("bad"))
    bad[-1] ^= 0xFF                                          # a record byte covered by the CRC
    # alone: CORRUPT_MESSAGE; after a valid batch in one request: INVALID_RECORD, as Kafka refuses more than
    # one batch per partition before it looks at CRCs (ProduceRequest.validateRecords)
    for records, code in ((bytes(bad), ErrorCode.CORRUPT_MESSAGE), (good + bytes(bad), ErrorCode.INVALID_RECORD)):
        res = produce(w, records)
        assert res["error_code"] == code
        assert res["base_offset"] == -1
        assert latest_offset(w) == 1
    assert fetched(w.call(1, 4, fetch_body(0, max_wait_ms=0))) == (1, [(0, "first")])
    w.close()


def test_batch_over_message_max_bytes_is_refused(server: ServerProcess) -> None:
    w = Wire(server.port)
    create_topic(w)
    big = batch("big", value=os.urandom(1_100_000))           # default message.max.bytes is 1,048,588
    assert len(big) > 1_048_588
    res = produce(w, big)
    assert res["error_code"] == ErrorCode.MESSAGE_TOO_LARGE
    assert latest_offset(w) == 0
    fits = batch("fits", value=os.urandom(1_000_000))
    assert produce(w, fits)["error_code"] == 0
    assert latest_offset(w) == 1
    w.close()


def test_acks_0_gets_no_response_but_is_appended(server: ServerProcess) -> None:
    w = Wire(server.port)
    create_topic(w)
    w.send(0, 7, produce_body(batch("quiet"), acks=0))
    corr = w.send(2, 1, {"replica_id": -1, "topics": [{"name": TOPIC, "partitions": [
        {"partition_index": 0, "timestamp": -2}]}]})
    got, _ = w.recv(2, 1)
    assert got == corr, "the first response on the connection must be ListOffsets': Produce acks=0 has none"
    deadline = time.monotonic() + 5
    while latest_offset(w) != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fetched(w.call(1, 4, fetch_body(0, max_wait_ms=0))) == (1, [(0, "quiet")])
    w.close()


def test_deleting_a_topic_right_after_a_produce_keeps_the_server_up(server: ServerProcess) -> None:
    # Produce and DeleteTopics in one segment: the delete closes the log before the group-commit fsync.
    w = Wire(server.port)
    for acks in (0, 1):
        create_topic(w)
        w.sock.sendall(codec.encode_request(0, 7, 900 + acks, "fp-test", produce_body(batch("x"), acks=acks))
                       + codec.encode_request(20, 4, 910 + acks, "fp-test",
                                              {"topic_names": [TOPIC], "timeout_ms": 5000}))
        if acks:
            corr, body = w.recv(0, 7)
            assert corr == 901
            assert body["responses"][0]["partition_responses"][0]["error_code"] in (
                0, ErrorCode.KAFKA_STORAGE_ERROR)
        corr, body = w.recv(20, 4)
        assert corr == 910 + acks and body["responses"][0]["error_code"] == 0
        time.sleep(0.2)                                      # let the flusher meet the closed log
    meta = Wire(server.port).call(3, 4, {"topics": None, "allow_auto_topic_creation": False})
    assert [t["name"] for t in meta["topics"] if not t["is_internal"]] == []
    assert server.alive()
    w.close()


# ---------------------------------------------------------------------------------------------- durability
def test_sigkill_during_acks_all_produce_loses_no_acknowledged_record(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data", "--num-partitions", "1").start()
    w = Wire(srv.port)
    create_topic(w)
    acked: dict[int, str] = {}
    stop = threading.Event()

    def producer() -> None:
        # pipelined: up to 8 requests in flight, so the kill lands while appends and fsyncs are pending
        p = Wire(srv.port)
        inflight: list[tuple[int, list[str]]] = []
        try:
            for n in itertools.count():
                if stop.is_set() and not inflight:
                    return
                if not stop.is_set() and len(inflight) < 8:
                    ks = [f"k{n:05d}-{i}" for i in range(5)]
                    inflight.append((p.send(0, 9, produce_body(batch(*ks), acks=-1)), ks))
                    continue
                corr, body = p.recv(0, 9)
                sent_corr, ks = inflight.pop(0)
                assert corr == sent_corr
                part = body["responses"][0]["partition_responses"][0]
                if part["error_code"] == 0:
                    for i, k in enumerate(ks):
                        acked[part["base_offset"] + i] = k
        except (ConnectionError, OSError):
            return                                          # the server died under us

    t = threading.Thread(target=producer)
    t.start()
    deadline = time.monotonic() + 10
    while len(acked) < 500 and time.monotonic() < deadline:
        time.sleep(0.01)
    srv.kill()
    stop.set()
    t.join(10)
    w.close()
    assert len(acked) >= 500

    srv = ServerProcess(tmp_path / "data", "--num-partitions", "1").start()
    try:
        w = Wire(srv.port)
        end = latest_offset(w)
        assert end >= max(acked) + 1
        stored: dict[int, str] = {}
        offset = 0
        while offset < end:
            _, recs = fetched(w.call(1, 4, fetch_body(offset, max_wait_ms=0)))
            assert recs, f"no records at offset {offset} below the high watermark {end}"
            stored.update(recs)
            offset = recs[-1][0] + 1
        w.close()
    finally:
        srv.stop()
    assert {o: stored.get(o) for o in acked} == acked
