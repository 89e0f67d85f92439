"""One bad producer must never poison a partition (issue #23). Each lie below is a batch built by
kafka-python's own record builder, then edited, its CRC recomputed so only the lie is wrong, and sent in
kafka-python's own ProduceRequest over a socket to the real server. Each is refused with Kafka's error code,
nothing is appended (the log end does not move), and a kafka-python consumer then reads every valid record.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable, Iterator
from typing import Any

import crc32c
import pytest
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatchBuilder
from server_process import ServerProcess  # type: ignore[import-not-found]

CORRUPT_MESSAGE, INVALID_RECORD, INVALID_TIMESTAMP = 2, 87, 32
TOPIC = "validated"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(tmp_path_factory.mktemp("pv") / "data", "--num-partitions", "1").start()
    try:
        yield s
    finally:
        s.stop()


def batch(n: int = 3, *, compression: int = 0, start_ts: int = 1_700_000_000_000) -> bytearray:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(n):
        b.append(i, timestamp=start_ts + i, key=b"key-%d" % i, value=b"value-%d" % i, headers=[])
    return bytearray(b.build())


def reseal(b: bytearray) -> bytes:
    b[17:21] = struct.pack(">I", crc32c.crc32c(bytes(b[21:])))
    return bytes(b)


def with_field(offset: int, fmt: str, value: int) -> Callable[[bytearray], bytes]:
    def lie(b: bytearray) -> bytes:
        struct.pack_into(fmt, b, offset, value)
        return reseal(b)
    return lie


def with_attributes(bits: int) -> Callable[[bytearray], bytes]:
    def lie(b: bytearray) -> bytes:
        struct.pack_into(">h", b, 21, struct.unpack_from(">h", b, 21)[0] | bits)
        return reseal(b)
    return lie


def count_and_delta(count: int) -> Callable[[bytearray], bytes]:
    def lie(b: bytearray) -> bytes:  # a consistent header whose count the records do not back
        struct.pack_into(">i", b, 23, count - 1)
        struct.pack_into(">i", b, 57, count)
        return reseal(b)
    return lie


def record_byte(pos: int, value: int) -> Callable[[bytearray], bytes]:
    def lie(b: bytearray) -> bytes:
        b[61 + pos] = value
        return reseal(b)
    return lie


def two_batches(b: bytearray) -> bytes:
    return bytes(b) + bytes(batch(2))


LIES: dict[str, tuple[Callable[[bytearray], bytes], int]] = {
    "record count 0": (with_field(57, ">i", 0), INVALID_RECORD),
    "record count 2": (with_field(57, ">i", 2), INVALID_RECORD),
    "record count 1000": (with_field(57, ">i", 1000), INVALID_RECORD),
    "record count 2^31-1": (with_field(57, ">i", 2**31 - 1), INVALID_RECORD),
    "count 2 and delta 1": (count_and_delta(2), INVALID_RECORD),
    "count 1000 and delta 999": (count_and_delta(1000), INVALID_RECORD),
    "count 2^31-1 and its delta": (count_and_delta(2**31 - 1), INVALID_RECORD),
    "lastOffsetDelta 7": (with_field(23, ">i", 7), INVALID_RECORD),
    "control batch": (with_attributes(0x20), INVALID_RECORD),
    "codec 7": (with_attributes(0x07), CORRUPT_MESSAGE),
    "gzip flag on plain records": (with_attributes(0x01), CORRUPT_MESSAGE),
    "record length past the batch": (record_byte(0, 0x7E), INVALID_RECORD),
    "second record's offset delta 5": (lambda b: record_byte(b[61] // 2 + 1 + 3, 10)(b), INVALID_RECORD),
    "key length past the record": (record_byte(4, 0x40), INVALID_RECORD),
    "two batches": (two_batches, INVALID_RECORD),
    "base offset 5": (lambda b: with_field(0, ">q", 5)(b), INVALID_RECORD),
    "bad CRC": (lambda b: bytes(b[:-1]) + bytes([b[-1] ^ 0xFF]), CORRUPT_MESSAGE),
    "batch length past the bytes": (lambda b: bytes(b[:-3]), CORRUPT_MESSAGE),
}


def produce(port: int, records: bytes, version: int = 9) -> Any:
    req = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=TOPIC, partition_data=[ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=records)])])
    req.API_VERSION = version
    req.with_header(correlation_id=1, client_id="liar")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(bytes(req.encode(header=True, framed=True)))
        size = struct.unpack(">i", _recv(s, 4))[0]
        resp = ProduceResponse.decode(_recv(s, size), version=version, header=True)
    return resp.responses[0].partition_responses[0]


def _recv(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        assert chunk, "server closed the connection"
        out += chunk
    return out


def log_end(srv: ServerProcess) -> int:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=srv.bootstrap)
    try:
        tp = TopicPartition(TOPIC, 0)
        return c.end_offsets([tp])[tp]
    finally:
        c.close()


@pytest.fixture(scope="module")
def topic(srv: ServerProcess) -> str:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=srv.bootstrap)
    try:
        admin.create_topics([NewTopic(TOPIC, 1, 1)])
    finally:
        admin.close()
    part = produce(srv.port, bytes(batch(3)))
    assert (part.error_code, part.base_offset) == (0, 0)
    return TOPIC


@pytest.mark.parametrize("name", list(LIES))
def test_a_lie_is_refused_and_nothing_is_appended(srv: ServerProcess, topic: str, name: str) -> None:
    lie, expected = LIES[name]
    before = log_end(srv)
    part = produce(srv.port, lie(batch(3)))
    assert part.error_code == expected, (name, part)
    assert part.base_offset == -1
    assert part.error_message, "v8+ answers say why"
    assert log_end(srv) == before, "nothing of a refused batch is appended"


def test_a_bad_record_is_named_in_record_errors(srv: ServerProcess, topic: str) -> None:
    part = produce(srv.port, record_byte(0, 0x7E)(batch(3)))
    assert part.error_code == INVALID_RECORD
    assert [e.batch_index for e in part.record_errors] == [0], part


def test_older_produce_versions_are_validated_too(srv: ServerProcess, topic: str) -> None:
    for version in (3, 7):
        before = log_end(srv)
        part = produce(srv.port, with_field(57, ">i", 2)(batch(3)), version=version)
        assert part.error_code == INVALID_RECORD, version
        assert log_end(srv) == before


def test_every_valid_record_reads_back_after_the_lies(srv: ServerProcess, topic: str) -> None:
    """Runs after the lies (file order): the partition holds only valid batches, and a kafka-python
    consumer reads every one of their records with no error."""
    from kafka import KafkaConsumer, TopicPartition

    good = [produce(srv.port, bytes(batch(3, compression=c))) for c in (0, 1)]  # none, gzip
    assert [p.error_code for p in good] == [0, 0]
    end = log_end(srv)
    c = KafkaConsumer(bootstrap_servers=srv.bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                      consumer_timeout_ms=3000)
    try:
        tp = TopicPartition(TOPIC, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        got = [(m.offset, m.key, m.value) for m in c]
    finally:
        c.close()
    assert [o for o, _, _ in got] == list(range(end))
    assert [k for _, k, _ in got] == [b"key-%d" % (i % 3) for i in range(end)]
