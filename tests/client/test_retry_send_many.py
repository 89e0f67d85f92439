"""The producer paths the retry consumer (and the Spark sink) send copies through: ``Producer.send_many`` and
``encode_batch`` (aiokafka's Cython builder for uncompressed batches, ours otherwise).

- ``encode_batch`` gives the very bytes of ``protocol.record_batch.build_batch`` for every shape of record a
  copy can have (null keys and values, headers with null values, non-ASCII header keys, timestamps going
  backwards, large values, and a bytearray header value the Cython builder refuses).
- ``send_many`` against the real daemon: records land in order in the partition asked for, with their keys,
  values, headers and timestamps (read back with kafka-python); a record over ``max_request_size`` fails
  the call's future and nothing of the call is stored; a partition that does not exist is refused; calls
  fill the open batch within ``batch_size`` and open new ones in order.
"""

from __future__ import annotations

import random
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition

from client.admin import AdminClient, NewTopic
from client.consumer_protocol import TopicPartition
from client.errors import BrokerResponseError
from client.producer import BATCH_HEADER, Producer, c_builder, encode_batch, record_size
from protocol.record_batch import Compression, build_batch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from server_process import ServerProcess


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(tmp_path_factory.mktemp("send-many") / "data", "--num-partitions", "2").start()
    try:
        yield server
    finally:
        server.stop()


def random_records(rnd: random.Random, count: int) -> list[tuple[Any, Any, Any, int]]:
    def blob() -> bytes | None:
        return None if rnd.random() < 0.1 else rnd.randbytes(rnd.choice([0, 1, 63, 64, 300, 20_000]))

    base = rnd.choice([0, 1_700_000_000_000])
    return [(blob(), blob(), tuple((f"h{j}é" * rnd.choice([1, 70]), blob()) for j in range(rnd.choice([0, 1, 6]))),
             base + rnd.randint(-1000, 100_000)) for _ in range(count)]


def test_encode_batch_is_build_batch_byte_for_byte() -> None:
    assert c_builder() is not None  # aiokafka is a dependency: the Cython builder is what is compared here
    rnd = random.Random(19)
    for _ in range(150):
        records = random_records(rnd, rnd.choice([1, 2, 50, 200]))
        assert encode_batch(records, Compression.NONE) == build_batch(records)
    odd = [(b"k", b"v", (("a", bytearray(b"x")),), 5), (None, None, (("b", None),), 3)]
    assert encode_batch(odd, Compression.NONE) == build_batch(odd)  # the builder refuses it: ours encodes it
    assert encode_batch(odd, Compression.GZIP) == build_batch(odd, compression=Compression.GZIP)


def read_partition(bootstrap: str, topic: str, partition: int, expected: int) -> list[Any]:
    kc = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        tp = KafkaTopicPartition(topic, partition)
        kc.assign([tp])
        kc.seek_to_beginning(tp)
        out: list[Any] = []
        deadline = time.monotonic() + 10
        while len(out) < expected and time.monotonic() < deadline:
            for recs in kc.poll(timeout_ms=200).values():
                out += recs
        return out
    finally:
        kc.close()


def test_send_many_stores_records_in_order_in_the_partition_asked_for(srv: ServerProcess) -> None:
    topic = f"many-{uuid.uuid4().hex[:6]}"
    records = [(b"k%d" % i if i % 4 else None, b"v%d" % i, (("n", b"%d" % i), ("z", None)) if i % 2 else (),
                1_700_000_000_000 + i) for i in range(500)]
    with Producer(srv.bootstrap, acks="all", batch_size=4096) as producer:  # several batches for one call
        fut = producer.send_many(topic, 1, records[:300])
        fut2 = producer.send_many(topic, 1, records[300:])
        assert fut.wait(10) and fut2.wait(10)
        assert fut.succeeded() and fut2.succeeded() and fut.exception() is None
    got = read_partition(srv.bootstrap, topic, 1, len(records))
    assert [(m.key, m.value, tuple(m.headers), m.timestamp) for m in got] == [
        (k, v, tuple(h), ts) for k, v, h, ts in records]
    assert [m.offset for m in got] == list(range(500))
    kc = KafkaConsumer(bootstrap_servers=srv.bootstrap, group_id=None)
    try:
        assert kc.end_offsets([KafkaTopicPartition(topic, 0)]) == {KafkaTopicPartition(topic, 0): 0}
    finally:
        kc.close()


def test_send_many_refuses_what_send_refuses_and_stores_nothing_of_that_call(srv: ServerProcess) -> None:
    topic = f"many-bad-{uuid.uuid4().hex[:6]}"
    with AdminClient(srv.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 1)])
    with Producer(srv.bootstrap, acks="all", max_request_size=10_000) as producer:
        fut = producer.send_many(topic, 0, [(None, b"small", (), 1), (None, b"x" * 20_000, (), 2)])
        assert fut.done() and not fut.succeeded()
        assert isinstance(fut.exception(), BrokerResponseError) and "MESSAGE_TOO_LARGE" in str(fut.exception())
        with pytest.raises(ValueError, match="partition 3 does not exist"):
            producer.send_many(topic, 3, [(None, b"v", (), 1)])
        with pytest.raises(TypeError):
            producer.send_many(topic, 0, [(None, "not bytes", (), 1)])
        ok = producer.send_many(topic, 0, [(None, b"last", (), 3)])
        assert ok.wait(10) and ok.succeeded()
    assert [m.value for m in read_partition(srv.bootstrap, topic, 0, 1)] == [b"last"]


def test_send_many_fills_the_open_batch_then_opens_new_ones_within_batch_size(srv: ServerProcess) -> None:
    """Calls whose records all fit the partition's open batch join it at once; the others are split record by
    record: every batch keeps within ``batch_size`` (a record alone excepted) with the sizes of ``record_size``,
    and the records are stored in call order. An empty call is done at once and stores nothing."""
    topic = f"many-fill-{uuid.uuid4().hex[:6]}"
    with AdminClient(srv.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 1)])
    rnd = random.Random(7)
    calls = [random_records(rnd, n) for n in (3, 2, 40, 1, 25)]
    calls.insert(3, [(None, b"y" * 3000, (), 5)])  # bigger than batch_size: a batch of its own
    tp = TopicPartition(topic, 0)
    with Producer(srv.bootstrap, acks="all", batch_size=4000, linger_ms=60_000) as producer:  # only full ones go
        # a full batch may be taken by the sender thread at once (a loaded machine shows it): record what it takes
        taken: list[tuple[list, int]] = []
        real_drain = producer._drain

        def recording_drain(now: float) -> Any:
            by_node, unknown = real_drain(now)
            for sent in by_node.values():
                taken.extend((list(b.records), b.size) for b in sent if b.tp == tp)
            return by_node, unknown

        producer._drain = recording_drain  # type: ignore[method-assign]
        futures = [producer.send_many(topic, 0, records) for records in calls]
        empty = producer.send_many(topic, 0, [])
        assert empty.done() and empty.succeeded()
        with producer._cond:
            batches = taken + [(list(b.records), b.size) for b in producer._batches.get(tp, ())]
        assert [r for records, _ in batches for r in records] == [r for records in calls for r in records]
        for records, size in batches:
            assert size == BATCH_HEADER + sum(record_size(k, v, h) for k, v, h, _ in records)
            assert size <= 4000 or len(records) == 1
        assert len(batches) > 2
        producer.flush(20)
        assert all(f.succeeded() for f in futures)
    expected = [r for records in calls for r in records]
    got = read_partition(srv.bootstrap, topic, 0, len(expected))
    assert [(m.key, m.value, tuple(m.headers), m.timestamp) for m in got] == [
        (k, v, tuple(h), ts) for k, v, h, ts in expected]
