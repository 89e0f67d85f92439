"""Compression codecs of Kafka record batches: none, gzip, snappy, lz4 and zstd, for the server and the client.

Rules:
- The codecs come from zlib (gzip) and cramjam (snappy, lz4, zstd; maintained, Rust-backed); only Kafka's
  framing choices live here. gzip is written with a gzip header, as Kafka writes it, and read with a gzip
  or zlib header. snappy is written in the xerial block framing that the Java client writes (every client
  reads it) and read in both the xerial framing and raw snappy (librdkafka writes raw). lz4 is the LZ4 frame
  format with independent blocks (KIP-57). zstd is a standard zstd frame.
- Decompression never allocates more than ``max_bytes`` beyond what the input justifies: gzip decompresses
  into a bounded buffer; xerial blocks and zstd frames that declare their size are checked before
  decompressing; every result is checked after. Over-long or corrupt payloads raise ``CompressionError``.
- A codec number Kafka does not define raises ``UnknownCodecError`` (a ``CompressionError``).
- Pure functions on bytes; ``protocol.record_batch`` maps these errors onto its own.
"""

from __future__ import annotations

import struct
import zlib

import cramjam

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4


class CompressionError(ValueError):
    """A payload that does not decompress (corrupt, truncated, or larger than allowed)."""


class UnknownCodecError(CompressionError):
    """A codec number that Kafka does not define."""


NAMES = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
DEFAULT_MAX_DECOMPRESSED = 128 * 1024 * 1024
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


def name_of(codec: int) -> str:
    for name, number in NAMES.items():
        if number == codec:
            return name
    return f"#{codec}"


def compress(codec: int, data: bytes) -> bytes:
    if codec == NONE:
        return data
    if codec == GZIP:
        c = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: gzip container, as Kafka writes
        return c.compress(data) + c.flush()
    if codec == SNAPPY:
        out = bytearray(XERIAL_HEADER)
        for i in range(0, len(data), XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(data[i:i + XERIAL_BLOCK]))
            out += _INT32.pack(len(block))
            out += block
        return bytes(out)
    if codec == LZ4:
        c = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)  # as Kafka's Java client
        c.compress(data)
        return bytes(c.finish())
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise UnknownCodecError(f"no compressor for codec #{codec}")


def decompress(codec: int, data: bytes, max_bytes: int = DEFAULT_MAX_DECOMPRESSED) -> bytes:
    if codec == NONE:
        return data
    if codec == GZIP:
        return _gunzip(data, max_bytes)
    try:
        if codec == SNAPPY:
            out = _snappy_decode(data, max_bytes)
        elif codec == LZ4:
            out = bytes(cramjam.lz4.decompress(data))
        elif codec == ZSTD:
            _check_zstd_size(data, max_bytes)
            out = bytes(cramjam.zstd.decompress(data))
        else:
            raise UnknownCodecError(f"no decompressor for codec #{codec}")
    except cramjam.DecompressionError as exc:
        raise CompressionError(f"{name_of(codec)}: {exc}") from None
    if len(out) > max_bytes:
        raise CompressionError(f"payload decompresses to {len(out)} bytes, more than {max_bytes}")
    return out


def _gunzip(data: bytes, max_bytes: int) -> bytes:
    d = zlib.decompressobj(47)  # 32 + 15: gzip or zlib header, detected
    try:
        out = d.decompress(data, max_bytes)
    except zlib.error as exc:
        raise CompressionError(f"gzip: {exc}") from None
    if d.unconsumed_tail:
        raise CompressionError(f"gzip payload decompresses to more than {max_bytes} bytes")
    if not d.eof:
        raise CompressionError("gzip payload is truncated")
    return out


def _snappy_decode(data: bytes, max_bytes: int) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        _check_size(cramjam.snappy.decompress_raw_len(data), max_bytes)
        return bytes(cramjam.snappy.decompress_raw(data))
    pos, total = len(XERIAL_HEADER), len(data)
    if total < pos:
        raise CompressionError("snappy: truncated xerial header")
    parts: list[bytes] = []
    size = 0
    while pos < total:
        if total - pos < 4:
            raise CompressionError("snappy: truncated xerial block length")
        (n,) = _INT32.unpack_from(data, pos)
        pos += 4
        if n < 0 or n > total - pos:
            raise CompressionError(f"snappy: xerial block of {n} bytes with {total - pos} left")
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
        raise CompressionError(f"payload declares {size} decompressed bytes, more than {max_bytes}")


