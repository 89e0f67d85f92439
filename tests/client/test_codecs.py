"""protocol.compression: snappy, lz4 and zstd record batches, checked against kafka-python's codec and its batch
builder/reader (an independent implementation), without a server."""

from __future__ import annotations

import cramjam
import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from protocol.compression import XERIAL_MAGIC, CompressionError, codec_for, compress, decompress
from protocol.record_batch import (
    Compression,
    CorruptBatchError,
    UnsupportedCompressionError,
    build_batch,
    decode_batch,
)

RECORDS = [(b"k%d" % i, b"value-%d " % i * (i % 7 + 1), (("h", b"%d" % i),), 1_700_000_000_000 + i)
           for i in range(300)]
CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_round_trips_keys_values_headers_and_timestamps(codec: int) -> None:
    batch = build_batch(RECORDS, compression=codec, base_offset=17)
    header, records = decode_batch(batch)
    assert header.compression == codec and header.record_count == len(RECORDS) and header.base_offset == 17
    assert [(r.key, r.value, r.headers, r.timestamp) for r in records] == [
        (k, v, tuple(h), ts) for k, v, h, ts in RECORDS]
    assert [r.offset for r in records] == list(range(17, 17 + len(RECORDS)))


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_codec_numbers_kafka_does_not_define_are_refused(codec: int) -> None:
    batch = bytearray(build_batch(RECORDS[:2]))
    batch[22] |= codec
    with pytest.raises(UnsupportedCompressionError):
        decode_batch(batch, verify_crc=False)


@pytest.mark.parametrize(("name", "codec"), [("lz4", Compression.LZ4), ("zstd", Compression.ZSTD),
                                              ("gzip", Compression.GZIP)])
def test_batches_built_by_kafka_python_are_decoded(name: str, codec: int) -> None:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                       producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(50):
        builder.append(i, timestamp=5000 + i, key=b"k", value=b"v%d" % i, headers=[("a", b"b")])
    header, records = decode_batch(bytes(builder.build()))
    assert header.compression == codec
    assert [(r.value, r.timestamp, r.headers) for r in records] == [
        (b"v%d" % i, 5000 + i, (("a", b"b"),)) for i in range(50)]


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.ZSTD])
def test_kafka_python_reads_our_batches(codec: int) -> None:
    batch = DefaultRecordBatch(build_batch(RECORDS, compression=codec))
    assert batch.compression_type == codec
    assert [(r.key, r.value, r.timestamp) for r in batch] == [(k, v, ts) for k, v, _, ts in RECORDS]


def test_lz4_frames_use_independent_blocks_as_kafka_requires() -> None:
    frame = compress(Compression.LZ4, b"x" * 200_000)
    assert frame[:4] == b"\x04\x22\x4d\x18"
    assert frame[4] & 0x20, "FLG.BlockIndependence must be set (Kafka's Java reader refuses linked blocks)"


def test_snappy_is_written_xerial_framed_and_read_framed_or_raw() -> None:
    data = bytes(range(256)) * 500  # 128000 bytes: four 32 KiB xerial blocks
    framed = compress(Compression.SNAPPY, data)
    assert framed.startswith(XERIAL_MAGIC)
    assert decompress(Compression.SNAPPY, framed) == data
    raw = bytes(cramjam.snappy.compress_raw(data))  # librdkafka writes raw snappy
    assert decompress(Compression.SNAPPY, raw) == data


@pytest.mark.parametrize("codec", [Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_output_over_the_cap_and_garbage_are_corrupt_batches(codec: int) -> None:
    payload = compress(codec, b"\x00" * 100_000)
    with pytest.raises(CompressionError):
        decompress(codec, payload, max_bytes=50_000)
    with pytest.raises(CompressionError):
        decompress(codec, b"\x00\x01garbage" * 3)
    with pytest.raises(CorruptBatchError):  # inside a batch, the batch codec's error
        batch = bytearray(build_batch(RECORDS[:5], compression=codec))
        decode_batch(bytes(batch), max_decompressed=64)


def test_a_flipped_byte_in_a_compressed_batch_fails_the_crc() -> None:
    batch = bytearray(build_batch(RECORDS[:5], compression=Compression.ZSTD))
    batch[-3] ^= 0xFF
    with pytest.raises(CorruptBatchError):
        decode_batch(bytes(batch))


def test_codec_names() -> None:
    assert [codec_for(n) for n in (None, "none", "gzip", "snappy", "LZ4", "zstd")] == [0, 0, 1, 2, 3, 4]
    with pytest.raises(ValueError):
        codec_for("brotli")
