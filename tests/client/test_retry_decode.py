"""The fetcher's decoding of the batches a retry consumer reads (copies with their ``retry_*`` headers, and any
other): ``fetcher.consumer_records`` reads an uncompressed batch straight into ``ConsumerRecord``s through the C
reader, and must give exactly what ``protocol.record_reader.records`` (then ``decode_batch``) gives, for every
shape of batch, every fetch offset inside or before it, and every codec; a corrupt batch is refused the same
way, and read when CRCs are not checked.
"""

from __future__ import annotations

import random
import struct

import crc32c
import pytest

from client.fetcher import ConsumerRecord, consumer_records
from client.retry_policy import Origin, copy_headers
from protocol.record_batch import CRC_START, TIMESTAMP_TYPE_MASK, Compression, CorruptBatchError, build_batch
from protocol.record_reader import c_reader
from protocol.record_reader import records as records_of


def reference(batch: bytes, topic: str, partition: int, first: int, check_crcs: bool) -> list[ConsumerRecord]:
    attrs = struct.unpack_from(">h", batch, 21)[0]
    ts_type = 1 if attrs & TIMESTAMP_TYPE_MASK else 0
    _, records = records_of(batch, verify_crc=check_crcs)
    return [ConsumerRecord(topic, partition, r[0], r[1], ts_type, r[2], r[3], r[4]) for r in records if r[0] >= first]


def attributes(batch: bytes) -> int:
    return struct.unpack_from(">h", batch, 21)[0]


def log_append_time(batch: bytes) -> bytes:
    """``batch`` marked LogAppendTime (as a broker with message.timestamp.type=LogAppendTime returns it)."""
    raw = bytearray(batch)
    struct.pack_into(">h", raw, 21, attributes(batch) | TIMESTAMP_TYPE_MASK)
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[CRC_START:])))
    return bytes(raw)


def random_records(rnd: random.Random, count: int) -> list[tuple[bytes | None, bytes | None, tuple, int]]:
    exc = RuntimeError("dependency down é")

    def blob() -> bytes | None:
        return None if rnd.random() < 0.1 else rnd.randbytes(rnd.choice([0, 1, 90, 3000]))

    out = []
    for i in range(count):
        shape = rnd.random()
        if shape < 0.4:  # a copy, as the retrying consumer sends it
            user = (("trace", blob()),) if rnd.random() < 0.5 else ()
            headers = copy_headers(user, rnd.randint(1, 6), 1_700_000_000_000 + i, Origin("main", 3, i), exc)
        elif shape < 0.7:
            headers = tuple((f"h{j}é", blob()) for j in range(rnd.choice([1, 3])))
        else:
            headers = ()
        out.append((blob(), blob(), headers, 1_700_000_000_000 + rnd.randint(-1000, 1000)))
    return out


def test_consumer_records_are_what_records_of_reads_for_every_batch_and_fetch_offset() -> None:
    assert c_reader() is not None  # aiokafka is a dependency: its C reader is the path compared here
    rnd = random.Random(35)
    for round_ in range(120):
        records = random_records(rnd, rnd.choice([1, 2, 7, 60]))
        base = rnd.choice([0, 5, 1_000_000])
        codec = Compression.NONE if round_ % 3 else rnd.choice([Compression.GZIP, Compression.NONE])
        batch = build_batch(records, base_offset=base, compression=codec)
        if round_ % 5 == 0:
            batch = log_append_time(batch)
        for first in sorted({0, base, base + 1, base + len(records) // 2, base + len(records) - 1}):
            for check in (True, False):
                got = consumer_records(batch, attributes(batch), "t", 3, first, check)
                assert got == reference(batch, "t", 3, first, check)
                assert all(type(r) is ConsumerRecord for r in got)


def test_a_corrupt_batch_is_refused_as_records_of_refuses_it_and_read_without_crc_checks() -> None:
    records = random_records(random.Random(5), 10)
    batch = bytearray(build_batch(records, base_offset=40))
    batch[-1] ^= 0xFF  # the last byte of the last record's last header or value: the CRC no longer matches
    bad = bytes(batch)
    with pytest.raises(CorruptBatchError) as theirs:
        records_of(bad, verify_crc=True)
    with pytest.raises(CorruptBatchError) as ours:
        consumer_records(bad, attributes(bad), "t", 0, 40, True)
    assert str(ours.value) == str(theirs.value)
    assert consumer_records(bad, attributes(bad), "t", 0, 40, False) == reference(bad, "t", 0, 40, False)
