"""Codecs: every compression Kafka has (none, gzip, snappy, lz4, zstd) for the client's record batches.

Rules and invariants:
- ``protocol.record_batch`` encodes and decodes none and gzip and is shared with the server, whose paths
  (compaction, recovery) rely on snappy/lz4/zstd staying opaque there. The client needs all five, so this
  module adds the other three on top of the protocol's public pieces (``encode_record``, ``decode_records``,
  ``HEADER``) without changing it: none and gzip are passed through to the protocol functions unchanged.
- The codecs themselves come from cramjam (maintained, Rust-backed); only Kafka's framing choices live
  here: snappy is written in the xerial block framing that the Java client writes (every client reads it)
  and read in both the xerial framing and raw snappy (librdkafka writes raw); lz4 is the LZ4 frame format
  with independent blocks (KIP-57); zstd is a standard zstd frame.
- Decompressed payloads are capped (``max_decompressed``): xerial blocks and zstd/lz4 frames that declare
  their size are checked before allocating, and every result is checked after; an over-long payload raises
  ``CorruptBatchError`` like a corrupt one.
- Same errors as the protocol module: bad input raises ``CorruptBatchError``; an unknown codec number
  raises ``UnsupportedCompressionError``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import cramjam
import crc32c

from protocol.record_batch import (
    CODEC_MASK,
    CRC_START,
    DEFAULT_MAX_DECOMPRESSED,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    Compression,
    CorruptBatchError,
    Record,
    RecordInput,
    UnsupportedCompressionError,
    decode_records,
    encode_record,
    parse_header,
    validate_batch,
)
from protocol.record_batch import build_batch as _protocol_build_batch
from protocol.record_batch import decode_batch as _protocol_decode_batch

NAMES = {"none": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
         "lz4": Compression.LZ4, "zstd": Compression.ZSTD}
_CRC = struct.Struct(">I")
_INT32 = struct.Struct(">i")
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # version 1, minimum compatible version 1
XERIAL_BLOCK = 32 * 1024  # the xerial library's default block size
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def codec_for(name: str | None) -> int:
    """The codec number for a ``compression_type`` name (None = none)."""
    try:
        return NAMES[(name or "none").lower()]
    except KeyError:
        raise ValueError(f"compression_type must be one of {sorted(NAMES)} (got {name!r})") from None


# --------------------------------------------------------------------------- payloads


def compress(codec: int, data: bytes) -> bytes:
    if codec == Compression.SNAPPY:
        out = bytearray(XERIAL_HEADER)
        for i in range(0, len(data), XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(data[i:i + XERIAL_BLOCK]))
            out += _INT32.pack(len(block))
            out += block
        return bytes(out)
    if codec == Compression.LZ4:
        c = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)  # as Kafka's Java client
        c.compress(data)
        return bytes(c.finish())
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise UnsupportedCompressionError(f"no compressor for codec #{codec}")


def decompress(codec: int, data: bytes, max_bytes: int = DEFAULT_MAX_DECOMPRESSED) -> bytes:
    try:
        if codec == Compression.SNAPPY:
            out = _snappy_decode(data, max_bytes)
        elif codec == Compression.LZ4:
            out = bytes(cramjam.lz4.decompress(data))
        elif codec == Compression.ZSTD:
            _check_zstd_size(data, max_bytes)
            out = bytes(cramjam.zstd.decompress(data))
        else:
            raise UnsupportedCompressionError(f"no decompressor for codec #{codec}")
    except cramjam.DecompressionError as exc:
        raise CorruptBatchError(f"{Compression(codec).name.lower()}: {exc}") from None
    if len(out) > max_bytes:
        raise CorruptBatchError(f"payload decompresses to {len(out)} bytes, more than {max_bytes}")
    return out


def _snappy_decode(data: bytes, max_bytes: int) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        _check_size(cramjam.snappy.decompress_raw_len(data), max_bytes)
        return bytes(cramjam.snappy.decompress_raw(data))
    pos, total = len(XERIAL_HEADER), len(data)
    if total < pos:
        raise CorruptBatchError("snappy: truncated xerial header")
    parts: list[bytes] = []
    size = 0
    while pos < total:
        if total - pos < 4:
            raise CorruptBatchError("snappy: truncated xerial block length")
        (n,) = _INT32.unpack_from(data, pos)
        pos += 4
        if n < 0 or n > total - pos:
            raise CorruptBatchError(f"snappy: xerial block of {n} bytes with {total - pos} left")
        block = data[pos:pos + n]
        pos += n
        size += cramjam.snappy.decompress_raw_len(block)
        _check_size(size, max_bytes)
        parts.append(bytes(cramjam.snappy.decompress_raw(block)))
    return b"".join(parts)


def _check_zstd_size(data: bytes, max_bytes: int) -> None:
    """Refuse a zstd frame whose header declares more than ``max_bytes`` before decompressing it."""
    if len(data) < 6 or data[:4] != _ZSTD_MAGIC:
        return  # let the decompressor report the error
    desc = data[4]
    fcs_flag, single = desc >> 6, (desc >> 5) & 1
    did_size = (0, 1, 2, 4)[desc & 3]
    pos = 5 + (0 if single else 1) + did_size
    width = (1 if single else 0, 2, 4, 8)[fcs_flag]
    if width == 0 or len(data) < pos + width:
        return
    size = int.from_bytes(data[pos:pos + width], "little") + (256 if width == 2 else 0)
    _check_size(size, max_bytes)


def _check_size(size: int, max_bytes: int) -> None:
    if size > max_bytes:
        raise CorruptBatchError(f"payload declares {size} decompressed bytes, more than {max_bytes}")


# --------------------------------------------------------------------------- whole batches


def decode_batch(batch: bytes | bytearray | memoryview, *, verify_crc: bool = True,
                 max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> tuple[BatchHeader, list[Record]]:
    """``protocol.record_batch.decode_batch`` for every codec."""
    attrs = batch[22] if len(batch) > 22 else 0
    codec = attrs & CODEC_MASK
    if codec in (Compression.NONE, Compression.GZIP):
        return _protocol_decode_batch(batch, verify_crc=verify_crc, max_decompressed=max_decompressed)
    if verify_crc:
        header = validate_batch(batch)
    else:
        header = parse_header(batch)
        if header.size != len(batch):
            raise CorruptBatchError(f"batch declares {header.size} bytes, {len(batch)} given")
    payload = decompress(codec, bytes(memoryview(batch)[HEADER_SIZE:]), max_decompressed)
    append_time = header.max_timestamp if header.log_append_time else None
    return header, decode_records(payload, header.record_count, header.base_offset, header.base_timestamp,
                                  append_time)


def build_batch(records: Sequence[RecordInput], *, compression: int = Compression.NONE,
                base_offset: int = 0) -> bytes:
    """``protocol.record_batch.build_batch`` (no producer id) for every codec."""
    if compression in (Compression.NONE, Compression.GZIP):
        return _protocol_build_batch(records, base_offset=base_offset, compression=compression)
    if not records:
        raise ValueError("a record batch needs at least one record")
    base_ts = records[0][3]
    max_ts = max(r[3] for r in records)
    body = b"".join(encode_record(i, ts - base_ts, k, v, h) for i, (k, v, h, ts) in enumerate(records))
    payload = compress(compression, body)
    out = bytearray(HEADER_SIZE)
    out += payload
    HEADER.pack_into(out, 0, base_offset, len(out) - LOG_OVERHEAD, -1, MAGIC, 0, compression & CODEC_MASK,
                     len(records) - 1, base_ts, max_ts, -1, -1, -1, len(records))
    _CRC.pack_into(out, 17, crc32c.crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)
