"""Zero-copy consume against the real daemon (coordinator/runtime/zero_copy.py): Fetch answers on plaintext
connections send stored batches from the segment files by sendfile.

Stories:
- confluent-kafka, kafka-python and kcat read large records (300 KiB) and many small ones (1 KiB, in
  1 MB batches) over PLAINTEXT and get every record byte-identical (checksums of every value, in offset
  order); ``groupcoord_fetch_sendfile_bytes_total`` shows the bytes went by sendfile (the path is taken).
- A TLS listener still serves the same records (the copying path: the sendfile count does not move while
  it does), beside PLAINTEXT and SASL_PLAINTEXT (no wrapping once authenticated: sendfile too).
- Retention deletes, and the cleaner rewrites, the very segments whose ranges answers still wait to send
  (a client that is slow to read): every such answer arrives whole and holds the bytes that were produced.
- A bounded run of producing, deleting segments by retention.bytes and reading with confluent-kafka and
  kafka-python at once: every record a consumer gets is intact (CRCs checked, values match their offsets),
  offsets only grow, the consumers reach the end, and no connection was ended by a shrunk range.
"""

from __future__ import annotations

import hashlib
import os
import random
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from server_process import ServerProcess

from protocol import codec
from protocol.errors import ErrorCode
from protocol.record_batch import iter_records

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "security"))

SENDFILE = "groupcoord_fetch_sendfile_bytes_total"
BIG, MANY = "zc-big", "zc-many"
BIG_RECORDS, BIG_SIZE = 24, 300 * 1024
MANY_RECORDS, MANY_SIZE = 6000, 1024


def value(topic: str, partition: int, i: int, size: int) -> bytes:
    """The i-th record of a partition: printable (kcat prints values), distinct, deterministic."""
    seed = hashlib.sha256(f"{topic}/{partition}/{i}".encode()).digest()
    rnd = random.Random(seed)
    head = f"{topic}-{partition}-{i:08d}:".encode()
    return head + bytes(rnd.choices(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", k=size - len(head)))


def digest(values: list[bytes]) -> str:
    h = hashlib.sha256()
    for v in values:
        h.update(len(v).to_bytes(4, "big"))
        h.update(v)
    return h.hexdigest()


def wait_for(cond: Callable[[], bool], timeout: float = 30.0, step: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return cond()


def create(bootstrap: str, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(topic, partitions, 1, config=configs or {})], operation_timeout=10)
    fut[topic].result(20)


def alter(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.alter_configs([ConfigResource("topic", topic, set_config=configs)])
    for f in fut.values():
        f.result(20)


def produce(bootstrap: str, topic: str, partitions: int, count: int, size: int, extra: dict | None = None,
            keys: int = 50) -> dict[int, list[bytes]]:
    """``count`` records per partition, in big batches; returns the values per partition in offset order."""
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 50, "batch.size": 1_000_000,
                         "enable.idempotence": False, "compression.type": "none",
                         "queue.buffering.max.kbytes": 1_048_576, **(extra or {})})
    out: dict[int, list[bytes]] = {}
    for p in range(partitions):
        out[p] = [value(topic, p, i, size) for i in range(count)]
        for i, v in enumerate(out[p]):
            while True:
                try:
                    producer.produce(topic, v, key=b"k%d" % (i % keys), partition=p,
                                     on_delivery=lambda err, _m: err and errors.append(str(err)))
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
    assert producer.flush(60) == 0 and not errors, errors[:3]
    return out


def consume_confluent(bootstrap: str, topic: str, partitions: int, count: int, extra: dict | None = None
                      ) -> dict[int, list[bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"zc-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "check.crcs": True, "fetch.max.bytes": 52_428_800,
                         "max.partition.fetch.bytes": 1_048_576, **(extra or {})})
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + 60
        while sum(map(len, got.values())) < count * partitions and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                assert not msg.error(), msg.error()
                assert msg.offset() == len(got[msg.partition()])
                got[msg.partition()].append(msg.value())
    finally:
        consumer.close()
    return got


def consume_kafka_python(bootstrap: str, topic: str, partitions: int, count: int) -> dict[int, list[bytes]]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", check_crcs=True, max_partition_fetch_bytes=1_048_576,
                             fetch_max_bytes=52_428_800, consumer_timeout_ms=60_000)
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    try:
        consumer.assign([KTP(topic, p) for p in range(partitions)])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + 60
        while sum(map(len, got.values())) < count * partitions and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500, max_records=5000).values():
                for r in records:
                    assert r.offset == len(got[r.partition])
                    got[r.partition].append(r.value)
    finally:
        consumer.close()
    return got


def consume_kcat(bootstrap: str, topic: str, partitions: int) -> dict[int, list[bytes]]:
    out = subprocess.run(["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q", "-X",
                          "check.crcs=true", "-f", "%p %o %s\\n"], capture_output=True, timeout=120, check=True)
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    for line in out.stdout.splitlines():
        p, o, v = line.split(b" ", 2)
        assert int(o) == len(got[int(p)])
        got[int(p)].append(v)
    return got


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path / "data", "--log-retention-check-interval-ms", "200", "--log-cleaner-backoff-ms",
                        "200", "--socket-max-pending-response-bytes", str(64 << 20)).start()
    try:
        yield srv
    finally:
        srv.stop()
        print(srv.log()[-20000:])  # shown only when the test failed


def test_three_clients_read_large_and_many_records_byte_identical_by_sendfile(server: ServerProcess) -> None:
    create(server.bootstrap, BIG, 1)
    create(server.bootstrap, MANY, 2)
    want = {BIG: produce(server.bootstrap, BIG, 1, BIG_RECORDS, BIG_SIZE),
            MANY: produce(server.bootstrap, MANY, 2, MANY_RECORDS, MANY_SIZE)}
    sizes = {BIG: (1, BIG_RECORDS), MANY: (2, MANY_RECORDS)}
    total = sum(len(v) for parts in want.values() for vs in parts.values() for v in vs)
    readers: dict[str, Callable[[str, str, int, int], dict[int, list[bytes]]]] = {
        "confluent-kafka": consume_confluent, "kafka-python": consume_kafka_python,
        "kcat": lambda b, t, n, _c: consume_kcat(b, t, n)}
    for name, read in readers.items():
        before = server.metric(SENDFILE)
        for topic, (partitions, count) in sizes.items():
            got = read(server.bootstrap, topic, partitions, count)
            for p in range(partitions):
                assert len(got[p]) == count, (name, topic, p, len(got[p]))
                assert digest(got[p]) == digest(want[topic][p]), (name, topic, p)
        sent = server.metric(SENDFILE) - before
        assert sent >= total, f"{name}: {sent:,.0f} bytes by sendfile for {total:,} bytes of values"
    assert "Traceback" not in server.log()


def test_a_tls_listener_copies_and_plaintext_listeners_send_files(tmp_path: Path) -> None:
    from security_support import USERS, bootstrap, start_secured

    srv, pki = start_secured(tmp_path, listeners=("PLAINTEXT", "SSL", "SASL_PLAINTEXT"))
    try:
        create(srv.bootstrap, BIG, 1)
        want = produce(srv.bootstrap, BIG, 1, BIG_RECORDS, BIG_SIZE)[0]
        tls = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca),
               "ssl.certificate.location": str(pki.client_cert), "ssl.key.location": str(pki.client_key)}
        sasl = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
                "sasl.password": USERS["alice"]}
        before = srv.metric(SENDFILE)
        got = consume_confluent(bootstrap(srv, "SSL"), BIG, 1, BIG_RECORDS, tls)[0]
        assert digest(got) == digest(want)
        assert srv.metric(SENDFILE) == before  # TLS: the copying path
        for where, extra in ((bootstrap(srv, "PLAINTEXT"), None), (bootstrap(srv, "SASL_PLAINTEXT"), sasl)):
            before = srv.metric(SENDFILE)
            got = consume_confluent(where, BIG, 1, BIG_RECORDS, extra)[0]
            assert digest(got) == digest(want)
            assert srv.metric(SENDFILE) - before >= BIG_RECORDS * BIG_SIZE, where
    finally:
        srv.stop()


# ------------------------------------------------------------------------------ segments going under answers
def fetch_frame(corr: int, topic: str, offset: int) -> bytes:
    return codec.encode_request(1, 12, corr, "zc", {
        "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 64 << 20, "isolation_level": 0, "session_id": 0,
        "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 4 << 20}]}],
        "forgotten_topics_data": [], "rack_id": ""})


def read_frame(sock: socket.socket) -> bytes:
    def exact(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
            buf += chunk
        return buf

    return exact(struct.unpack(">i", exact(4))[0])


def segment_bases(server: ServerProcess, topic: str) -> list[int]:
    return sorted(int(n[:20]) for n in os.listdir(server.data_dir / f"{topic}-0") if n.endswith(".log"))


def pending_answers_survive(server: ServerProcess, topic: str, want: list[bytes], change: Callable[[], None],
                            changed: Callable[[], bool]) -> None:
    """Fetch every segment's first offset on one connection that does not read, make ``change`` happen to
    those segments while the answers wait, then read them: each whole, holding the produced values."""
    bases = segment_bases(server, topic)[:-1]
    assert len(bases) >= 4, bases
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the answers wait in the server
    sock.connect(("127.0.0.1", server.port))
    sock.settimeout(30)
    try:
        sock.sendall(b"".join(fetch_frame(i + 1, topic, base) for i, base in enumerate(bases)))
        time.sleep(0.5)  # served at once (the budget is 64 MiB): their ranges are made
        change()
        assert wait_for(changed), "the segments were not deleted or rewritten"
        for i, base in enumerate(bases):
            corr, body = codec.decode_response(1, 12, read_frame(sock))
            assert corr == i + 1
            part = body["responses"][0]["partitions"][0]
            assert part["error_code"] == ErrorCode.NONE, part["error_code"]
            records = list(iter_records(part["records"]))
            assert records and records[0].offset == base
            for r in records:
                assert r.value == want[r.offset], r.offset
    finally:
        sock.close()


def test_retention_deletes_segments_whose_ranges_answers_still_send(server: ServerProcess) -> None:
    topic = "zc-retention"
    create(server.bootstrap, topic, 1, {"segment.bytes": str(1 << 20)})
    want = produce(server.bootstrap, topic, 1, 60, 100 * 1024, {"batch.size": 300_000})[0]
    first = segment_bases(server, topic)
    pending_answers_survive(server, topic, want,
                            lambda: alter(server.bootstrap, topic, {"segment.bytes": str(1 << 20), "retention.ms": "1"}),
                            lambda: not set(segment_bases(server, topic)) & set(first[:-1]))
    assert "Traceback" not in server.log()


def test_the_cleaner_rewrites_segments_whose_ranges_answers_still_send(server: ServerProcess) -> None:
    topic = "zc-compact"
    create(server.bootstrap, topic, 1, {"segment.bytes": str(1 << 20), "cleanup.policy": "compact",
                                        "min.cleanable.dirty.ratio": "0.5", "min.compaction.lag.ms": "3600000"})
    want = produce(server.bootstrap, topic, 1, 60, 100 * 1024, {"batch.size": 300_000}, keys=3)[0]
    bases = segment_bases(server, topic)
    inodes = {b: os.stat(server.data_dir / f"{topic}-0" / f"{b:020d}.log").st_ino for b in bases[:-1]}

    def rewritten() -> bool:
        now = {}
        for b in inodes:
            try:
                now[b] = os.stat(server.data_dir / f"{topic}-0" / f"{b:020d}.log").st_ino
            except FileNotFoundError:
                now[b] = -1
        # a pass rewrote segments the answers read from (renamed over them; each later pass too)
        return (server.data_dir / f"{topic}-0" / "cleaner-checkpoint").exists() and \
            sum(now[b] != inodes[b] for b in inodes) >= 2

    pending_answers_survive(server, topic, want,
                            lambda: alter(server.bootstrap, topic, {  # AlterConfigs replaces them all
                                "segment.bytes": str(1 << 20), "cleanup.policy": "compact",
                                "min.compaction.lag.ms": "0", "min.cleanable.dirty.ratio": "0.01"}),
                            rewritten)
    assert "Traceback" not in server.log()


def test_reading_while_retention_deletes_segments_never_corrupts(server: ServerProcess) -> None:
    topic = "zc-churn"
    size = 20 * 1024
    create(server.bootstrap, topic, 1, {"segment.bytes": str(512 * 1024), "retention.bytes": str(2 << 20)})
    stop = threading.Event()
    produced = [0]
    errors: list[str] = []

    def producer() -> None:
        p = Producer({"bootstrap.servers": server.bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 200_000,
                      "enable.idempotence": False})
        i = 0
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            p.produce(topic, value(topic, 0, i, size), partition=0)
            i += 1
            if i % 200 == 0:
                p.flush(30)
                produced[0] = i
        p.flush(30)
        produced[0] = i
        stop.set()

    def reader(name: str, poll: Callable[[], list[tuple[int, bytes]]], close: Callable[[], None],
               seen: list[int]) -> None:
        try:
            last = -1
            while not (stop.is_set() and last + 1 >= produced[0]):
                for offset, v in poll():
                    assert offset > last, (name, offset, last)
                    assert v == value(topic, 0, offset, size), (name, offset)
                    last = offset
                    seen.append(offset)
        except Exception as e:  # noqa: BLE001
            errors.append(f"{name}: {e!r}")
        finally:
            close()

    c1 = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "zc-churn-1", "enable.auto.commit": False,
                   "auto.offset.reset": "earliest", "check.crcs": True, "max.partition.fetch.bytes": 1_048_576})
    c1.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])

    def poll_confluent() -> list[tuple[int, bytes]]:
        out = []
        for m in c1.consume(500, 0.2):
            if m.error():
                raise AssertionError(str(m.error()))
            out.append((m.offset(), m.value()))
        return out

    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    c2 = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=None, enable_auto_commit=False,
                       auto_offset_reset="earliest", check_crcs=True, max_partition_fetch_bytes=1_048_576)
    c2.assign([KTP(topic, 0)])

    def poll_kafka_python() -> list[tuple[int, bytes]]:
        return [(r.offset, r.value) for rs in c2.poll(timeout_ms=200).values() for r in rs]

    seen1: list[int] = []
    seen2: list[int] = []
    threads = [threading.Thread(target=producer),
               threading.Thread(target=reader, args=("confluent", poll_confluent, c1.close, seen1)),
               threading.Thread(target=reader, args=("kafka-python", poll_kafka_python, c2.close, seen2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not any(t.is_alive() for t in threads), "a reader did not reach the end"
    assert not errors, errors
    assert segment_bases(server, topic)[0] > 0  # retention deleted segments meanwhile
    for seen in (seen1, seen2):
        assert seen and seen[-1] == produced[0] - 1  # each reached the end
    assert server.metric(SENDFILE) > 0
    log = server.log()
    assert "pending Fetch answer" not in log and "Traceback" not in log
