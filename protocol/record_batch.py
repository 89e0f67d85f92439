"""Kafka record batch v2 (magic 2): header, validation, base-offset rewrite, splitting, records.

Sans-IO: pure functions on bytes, no clock (record timestamps are always given by the caller).

Layout of a batch (big-endian), offsets in bytes::

    0  baseOffset int64         } outside the CRC: the broker rewrites these
    8  batchLength int32        } (batchLength counts the bytes after this field)
    12 partitionLeaderEpoch int32 }
    16 magic int8 (= 2)
    17 crc uint32 (CRC-32C of bytes 21..end)
    21 attributes int16  (bits 0-2 codec, 3 timestamp type, 4 transactional, 5 control)
    23 lastOffsetDelta int32, 27 baseTimestamp int64, 35 maxTimestamp int64,
    43 producerId int64, 51 producerEpoch int16, 53 baseSequence int32, 57 recordCount int32
    61 records (possibly compressed as one block)

Each record: length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
key (varint length, -1 = null), value (same), header count varint, headers (key: varint length + UTF-8,
value: varint length, -1 = null).

Rules:
- Bad input raises `CorruptBatchError` (a ValueError); nothing is allocated beyond what the input bytes
  justify: a declared length larger than what is left is an error, decompression output is capped.
- `split_batches` is framing only (length, magic) and stops cleanly at a partial tail, reporting where;
  `validate_batch` checks one whole batch (magic, length, CRC).
- Replay (a coordinator loads ~1M records at startup) uses `decode_batch_key_values`/`decode_key_values`:
  the same checks and errors as `decode_batch`/`decode_records`, but (key, value) pairs instead of Records.
- Codecs: all five of Kafka's (none, gzip, snappy, lz4, zstd) are encoded and decoded through
  `protocol.compression`; a codec number Kafka does not define raises `UnsupportedCompressionError` (a
  `CorruptBatchError`) when records must be decoded or encoded.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import crc32c

from protocol import compression

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: batch size = batchLength + 12
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49
CRC_START = 21
MAGIC_OFFSET = 16
MAGIC = 2
DEFAULT_MAX_DECOMPRESSED = compression.DEFAULT_MAX_DECOMPRESSED

CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40  # KIP-534: the base timestamp is the delete horizon of the batch's tombstones

_BASE_OFFSET = struct.Struct(">q")
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_CRC = struct.Struct(">I")


class CorruptBatchError(ValueError):
    """Input bytes are not a valid v2 record batch (or record)."""


class UnsupportedCompressionError(CorruptBatchError):
    """The batch names a codec number that Kafka does not define (5-7)."""


class Compression(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)


class Record(NamedTuple):
    """One decoded record; `offset` and `timestamp` are absolute."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


Header = tuple[str, "bytes | None"]
RecordInput = tuple[bytes | None, bytes | None, Sequence[Header], int]  # key, value, headers, timestamp


# --------------------------------------------------------------------------- header and framing


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte header at `pos` and check magic and the length bounds (not the CRC)."""
    if pos < 0 or len(buf) - pos < HEADER_SIZE:
        raise CorruptBatchError(f"batch header needs {HEADER_SIZE} bytes, {max(0, len(buf) - pos)} left")
    header = BatchHeader(*HEADER.unpack_from(buf, pos))
    if header.magic != MAGIC:
        raise CorruptBatchError(f"unsupported magic {header.magic} (only v2 record batches)")
    if header.batch_length < MIN_BATCH_LENGTH:
        raise CorruptBatchError(f"batch length {header.batch_length} below minimum {MIN_BATCH_LENGTH}")
    if header.last_offset_delta < 0 or header.record_count < 0:
        raise CorruptBatchError(
            f"negative lastOffsetDelta {header.last_offset_delta} or recordCount {header.record_count}"
        )
    return header


def compute_crc(batch: bytes | bytearray | memoryview) -> int:
    """CRC-32C of a whole batch's CRC'd region (attributes .. end)."""
    return crc32c.crc32c(memoryview(batch)[CRC_START:])


def validate_batch(batch: bytes | bytearray | memoryview) -> BatchHeader:
    """Check that `batch` is exactly one well-formed v2 batch with a correct CRC; return its header."""
    header = parse_header(batch)
    if header.size != len(batch):
        raise CorruptBatchError(f"batch declares {header.size} bytes, {len(batch)} given")
    actual = compute_crc(batch)
    if actual != header.crc:
        raise CorruptBatchError(f"CRC mismatch: header {header.crc:#010x}, computed {actual:#010x}")
    return header


def set_base_offset(buf: bytearray | memoryview, base_offset: int, pos: int = 0) -> None:
    """Rewrite the base offset in place (bytes 0-7 are outside the CRC, so the CRC stays valid)."""
    _BASE_OFFSET.pack_into(buf, pos, base_offset)


def base_offset_prefix(base_offset: int) -> bytes:
    """The 8 bytes that replace a batch's first 8: write `prefix + memoryview(batch)[8:]` without copying."""
    return _BASE_OFFSET.pack(base_offset)


def with_base_offset(batch: bytes | bytearray | memoryview, base_offset: int) -> bytes:
    """A copy of `batch` with a new base offset (one copy; use `set_base_offset` to avoid even that)."""
    return _BASE_OFFSET.pack(base_offset) + bytes(memoryview(batch)[8:])


def split_batches(buf: bytes | bytearray | memoryview) -> tuple[list[memoryview], int]:
    """Split a concatenation of batches into zero-copy views.

    Returns (batches, end): `end` is where the last complete batch ends; `end < len(buf)` means a partial
    tail (fewer than 12 bytes, or fewer than the declared size) starts there. A complete batch with a bad
    length or magic raises `CorruptBatchError`. CRCs are not checked here.
    """
    view = memoryview(buf)
    total = len(view)
    pos = 0
    out: list[memoryview] = []
    while total - pos >= LOG_OVERHEAD:
        _, length = _OFFSET_AND_LENGTH.unpack_from(view, pos)
        if length < MIN_BATCH_LENGTH:
            raise CorruptBatchError(f"batch at byte {pos}: length {length} below minimum {MIN_BATCH_LENGTH}")
        end = pos + LOG_OVERHEAD + length
        if end > total:
            break
        if view[pos + MAGIC_OFFSET] != MAGIC:
            raise CorruptBatchError(f"batch at byte {pos}: unsupported magic {view[pos + MAGIC_OFFSET]}")
        out.append(view[pos:end])
        pos = end
    return out, pos


# --------------------------------------------------------------------------- varints


def _write_varint(out: bytearray, n: int) -> None:
    v = (n << 1) ^ (n >> 63)
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Zigzag varint/varlong at `pos` -> (value, next pos). At most 10 bytes."""
    try:
        b = buf[pos]
    except IndexError:
        raise CorruptBatchError("truncated varint") from None
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        try:
            b = buf[pos]
        except IndexError:
            raise CorruptBatchError("truncated varint") from None
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptBatchError("varint longer than 10 bytes")


def encode_varint(n: int) -> bytes:
    out = bytearray()
    _write_varint(out, n)
    return bytes(out)


def decode_varint(buf: bytes, pos: int = 0) -> tuple[int, int]:
    return _read_varint(buf, pos)


# --------------------------------------------------------------------------- records


def _write_nullable(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out.append(1)  # zigzag(-1)
    else:
        _write_varint(out, len(data))
        out += data


def encode_record(
    offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
    headers: Sequence[Header] = (),
) -> bytes:
    """One record, length prefix included."""
    body = bytearray(b"\x00")  # attributes: unused, always 0
    _write_varint(body, timestamp_delta)
    _write_varint(body, offset_delta)
    _write_nullable(body, key)
    _write_nullable(body, value)
    _write_varint(body, len(headers))
    for hkey, hvalue in headers:
        encoded = hkey.encode("utf-8")
        _write_varint(body, len(encoded))
        body += encoded
        _write_nullable(body, hvalue)
    out = bytearray()
    _write_varint(out, len(body))
    out += body
    return bytes(out)


def _read_nullable(buf: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    n, pos = _read_varint(buf, pos)
    if n < 0:
        if n != -1:
            raise CorruptBatchError(f"negative length {n}")
        return None, pos
    if n > end - pos:
        raise CorruptBatchError(f"length {n} exceeds the {end - pos} bytes left in the record")
    return buf[pos:pos + n], pos + n


def decode_records(
    data: bytes, count: int, base_offset: int, base_timestamp: int, append_time: int | None = None,
    start: int = 0, stop: int | None = None,
) -> list[Record]:
    """Decode `count` records from uncompressed `data[start:stop]`; the bytes must be consumed exactly.

    This is the replay hot path (a coordinator loads ~1M records at startup), so one-byte varints and
    lengths are decoded inline; anything longer goes through `_read_varint`/`_read_nullable`.
    """
    out: list[Record] = []
    append = out.append
    pos = start
    total = len(data) if stop is None else stop
    read_varint = _read_varint
    read_nullable = _read_nullable
    new_tuple = tuple.__new__  # skips NamedTuple's Python-level __new__
    try:
        for _ in range(count):
            b = data[pos]
            if b < 0x80:
                length, pos = (b >> 1) ^ -(b & 1), pos + 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | (data[pos + 1] << 7)
                length, pos = (b >> 1) ^ -(b & 1), pos + 2
            else:
                length, pos = read_varint(data, pos)
            end = pos + length
            if length < 6 or end > total:
                raise CorruptBatchError(f"record length {length} invalid with {total - pos} bytes left")
            b = data[pos + 1]  # skip attributes
            if b < 0x80:
                ts_delta, p = (b >> 1) ^ -(b & 1), pos + 2
            else:
                ts_delta, p = read_varint(data, pos + 1)
            b = data[p]
            if b < 0x80:
                off_delta, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                off_delta, p = read_varint(data, p)
            b = data[p]
            if b < 0x80 and not b & 1 and p + 1 + (b >> 1) <= end:
                key, p = data[p + 1:p + 1 + (b >> 1)], p + 1 + (b >> 1)
            else:
                key, p = read_nullable(data, p, end)
            b = data[p]
            if b < 0x80 and not b & 1 and p + 1 + (b >> 1) <= end:
                value, p = data[p + 1:p + 1 + (b >> 1)], p + 1 + (b >> 1)
            else:
                value, p = read_nullable(data, p, end)
            if data[p] == 0:
                headers: tuple[Header, ...] = ()
                p += 1
            else:
                headers, p = _read_headers(data, p, end)
            if p != end:
                raise CorruptBatchError(f"record declares {length} bytes but uses {p - pos}")
            timestamp = append_time if append_time is not None else base_timestamp + ts_delta
            append(new_tuple(Record, (base_offset + off_delta, timestamp, key, value, headers)))
            pos = end
    except IndexError:
        raise CorruptBatchError("record runs past the end of the batch") from None
    if pos != total:
        raise CorruptBatchError(f"{total - pos} bytes left after {count} records")
    return out


def decode_key_values(
    data: bytes, count: int, start: int = 0, stop: int | None = None,
) -> list[tuple[bytes | None, bytes | None]]:
    """`decode_records` reduced to what a replay needs: each record's (key, value), in order.

    Same input, same checks, same errors as `decode_records` (offsets, timestamps and headers are still
    parsed, so a record either side would reject is rejected here too); only the Record objects are not
    built, and two-byte varints are decoded inline as well (the offset delta of record 64+ in a batch).
    """
    out: list[tuple[bytes | None, bytes | None]] = []
    append = out.append
    pos = start
    total = len(data) if stop is None else stop
    read_varint = _read_varint
    read_nullable = _read_nullable
    try:
        for _ in range(count):
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | (data[pos + 1] << 7)
                length = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                length, pos = read_varint(data, pos)
            end = pos + length
            if length < 6 or end > total:
                raise CorruptBatchError(f"record length {length} invalid with {total - pos} bytes left")
            # skip attributes, then the timestamp and offset deltas (their values are not needed)
            p = pos + 2 if data[pos + 1] < 0x80 else read_varint(data, pos + 1)[1]
            p = p + 1 if data[p] < 0x80 else (p + 2 if data[p + 1] < 0x80 else read_varint(data, p)[1])
            b = data[p]
            q = p + 1 + (b >> 1)
            if b < 0x80 and not b & 1 and q <= end:
                key = data[p + 1:q]
            else:
                key, q = read_nullable(data, p, end)
            b = data[q]
            p = q + 1 + (b >> 1)
            if b < 0x80 and not b & 1 and p <= end:
                value = data[q + 1:p]
            else:
                value, p = read_nullable(data, q, end)
            if data[p] == 0:
                p += 1
            else:
                p = _read_headers(data, p, end)[1]
            if p != end:
                raise CorruptBatchError(f"record declares {length} bytes but uses {p - pos}")
            append((key, value))
            pos = end
    except IndexError:
        raise CorruptBatchError("record runs past the end of the batch") from None
    if pos != total:
        raise CorruptBatchError(f"{total - pos} bytes left after {count} records")
    return out


def _single_record(data: bytes, p: int, end: int, base_offset: int, base_ts: int) -> Record | None:
    """The common replay case decoded inline: one uncompressed record, no headers, every varint one
    byte (the length up to two). None means "not that simple": the caller uses `decode_records`."""
    b = data[p]
    if b < 0x80:
        length, p = b >> 1, p + 1
    else:
        b2 = data[p + 1]
        if b & 1 or b2 >= 0x80:
            return None
        length, p = ((b & 0x7F) | (b2 << 7)) >> 1, p + 2
    if p + length != end or length < 6:
        return None
    ts, off, klen = data[p + 1], data[p + 2], data[p + 3]
    if (ts | off | klen) >= 0x80 or klen & 1:
        return None
    p += 4
    key = data[p:p + (klen >> 1)]
    p += klen >> 1
    if p >= end:
        return None
    vlen = data[p]
    if vlen >= 0x80 or vlen & 1 or p + 1 + (vlen >> 1) != end - 1 or data[end - 1]:
        return None
    value = data[p + 1:end - 1]
    return tuple.__new__(Record, (base_offset + ((off >> 1) ^ -(off & 1)), base_ts + ((ts >> 1) ^ -(ts & 1)),
                                  key, value, ()))


def _read_headers(data: bytes, p: int, end: int) -> tuple[tuple[Header, ...], int]:
    nheaders, p = _read_varint(data, p)
    if nheaders < 0 or nheaders > end - p:
        raise CorruptBatchError(f"header count {nheaders} invalid")
    items = []
    for _ in range(nheaders):
        hkey, p = _read_nullable(data, p, end)
        if hkey is None:
            raise CorruptBatchError("null header key")
        hvalue, p = _read_nullable(data, p, end)
        try:
            items.append((hkey.decode("utf-8"), hvalue))
        except UnicodeDecodeError:
            raise CorruptBatchError("header key is not UTF-8") from None
    return tuple(items), p


# --------------------------------------------------------------------------- compression


def _compress(codec: int, data: bytes) -> bytes:
    try:
        return compression.compress(codec, data)
    except compression.UnknownCodecError as exc:
        raise UnsupportedCompressionError(str(exc)) from None


def _decompress(codec: int, data: bytes, max_bytes: int) -> bytes:
    try:
        return compression.decompress(codec, data, max_bytes)
    except compression.UnknownCodecError as exc:
        raise UnsupportedCompressionError(str(exc)) from None
    except compression.CompressionError as exc:
        raise CorruptBatchError(str(exc)) from None


def _codec_name(codec: int) -> str:
    try:
        return Compression(codec).name.lower()
    except ValueError:
        return f"#{codec}"


# --------------------------------------------------------------------------- whole batches


def decode_batch(
    batch: bytes | bytearray | memoryview, *, verify_crc: bool = True,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
) -> tuple[BatchHeader, list[Record]]:
    """Validate one whole batch and decode its records (decompressing gzip)."""
    header, data, start = _checked_records(batch, verify_crc, max_decompressed)
    append_time = header.max_timestamp if header.log_append_time else None
    return header, decode_records(data, header.record_count, header.base_offset, header.base_timestamp,
                                  append_time, start)


def decode_batch_key_values(
    batch: bytes | bytearray | memoryview, *, min_offset: int | None = None, verify_crc: bool = True,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
) -> tuple[BatchHeader, list[tuple[bytes | None, bytes | None]]]:
    """`decode_batch` for replay: the header and the (key, value) of each record at an offset >= `min_offset`
    (all when None), in order; same validation and errors. Uncompressed batches are decoded in place."""
    if min_offset is not None and len(batch) >= 8 and min_offset > _BASE_OFFSET.unpack_from(batch)[0]:
        # rare: a read that starts inside this batch
        header, records = decode_batch(batch, verify_crc=verify_crc, max_decompressed=max_decompressed)
        return header, [(r.key, r.value) for r in records if r.offset >= min_offset]
    header, data, start = _checked_records(batch, verify_crc, max_decompressed)
    return header, decode_key_values(data, header.record_count, start)


def _checked_records(batch: bytes | bytearray | memoryview, verify_crc: bool, max_decompressed: int
                     ) -> tuple[BatchHeader, bytes, int]:
    """A whole batch checked (length, magic, CRC if asked): its header, then its records as (data, start)."""
    if verify_crc:
        header = validate_batch(batch)
    else:
        header = parse_header(batch)
        if header.size != len(batch):
            raise CorruptBatchError(f"batch declares {header.size} bytes, {len(batch)} given")
    data = batch if isinstance(batch, bytes) else bytes(batch)
    if header.compression == Compression.NONE:
        return header, data, HEADER_SIZE
    return header, _decompress(header.compression, data[HEADER_SIZE:], max_decompressed), 0


def iter_records(buf: bytes | bytearray | memoryview, *, verify_crc: bool = True) -> Iterator[Record]:
    """All records of a concatenation of whole batches (a partial tail is ignored, as in Fetch).

    The replay fast path: no header objects, records decoded straight from `buf` when uncompressed.
    """
    data = buf if isinstance(buf, bytes) else bytes(buf)
    view = memoryview(data)
    unpack_from = HEADER.unpack_from
    crc_of = crc32c.crc32c
    total = len(data)
    pos = 0
    while total - pos >= HEADER_SIZE:
        base, length, _, magic, crc, attrs, _, base_ts, max_ts, _, _, _, count = unpack_from(data, pos)
        end = pos + LOG_OVERHEAD + length
        if end > total:
            return
        if magic != MAGIC or length < MIN_BATCH_LENGTH or count < 0:
            parse_header(data, pos)  # raises the precise error
        if verify_crc and crc_of(view[pos + CRC_START:end]) != crc:
            raise CorruptBatchError(f"CRC mismatch in the batch at byte {pos} (offset {base})")
        append_time = max_ts if attrs & TIMESTAMP_TYPE_MASK else None
        if count == 1 and not attrs & (CODEC_MASK | TIMESTAMP_TYPE_MASK):
            rec = _single_record(data, pos + HEADER_SIZE, end, base, base_ts)
            if rec is not None:
                yield rec
                pos = end
                continue
        if attrs & CODEC_MASK:
            payload = _decompress(attrs & CODEC_MASK, data[pos + HEADER_SIZE:end], DEFAULT_MAX_DECOMPRESSED)
            yield from decode_records(payload, count, base, base_ts, append_time)
        else:
            yield from decode_records(data, count, base, base_ts, append_time, pos + HEADER_SIZE, end)
        pos = end


def build_batch(
    records: Sequence[RecordInput],
    *,
    base_offset: int = 0,
    compression: int = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    transactional: bool = False,
) -> bytes:
    """A whole batch (correct CRC) of (key, value, headers, timestamp) records at consecutive offsets."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    return _assemble(
        [(i, r[3], r[0], r[1], r[2]) for i, r in enumerate(records)],
        base_offset=base_offset, attributes=(compression & CODEC_MASK) | (TRANSACTIONAL_MASK if transactional
                                                                         else 0),
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
        partition_leader_epoch=partition_leader_epoch,
    )


def build_kv_batch(records: Sequence[tuple[bytes | None, bytes | None]], timestamp: int) -> bytes:
    """``build_batch([(key, value, (), timestamp) for ...])`` byte for byte (base offset 0, no producer, no
    compression), for the group commit's own records: one timestamp, no headers; varints of small numbers
    come from a table."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    small = _SMALL_VARINT
    limit = len(small)
    parts = []
    append = parts.append
    for delta, (key, value) in enumerate(records):
        if key is None:
            k = b"\x01"  # zigzag(-1): null
        else:
            n = len(key)
            k = (small[n] if n < limit else encode_varint(n)) + key
        if value is None:
            v = b"\x01"
        else:
            n = len(value)
            v = (small[n] if n < limit else encode_varint(n)) + value
        # attributes 0, timestamp delta 0, offset delta, key, value, header count 0
        body = b"".join((b"\x00\x00", small[delta] if delta < limit else encode_varint(delta), k, v, b"\x00"))
        n = len(body)
        append(small[n] if n < limit else encode_varint(n))
        append(body)
    n = len(records)
    return _seal(b"".join(parts), 0, -1, 0, n - 1, timestamp, timestamp, -1, -1, -1, n)


_SMALL_VARINT = [encode_varint(n) for n in range(1024)]  # zigzag varints of 0..1023 (one or two bytes)


def rebuild_batch(header: BatchHeader, records: Sequence[Record], *, delete_horizon_ms: int | None = None
                  ) -> bytes:
    """A batch holding a subset of `header`'s records, keeping their offsets, timestamps and the
    header's producer fields, codec and attributes (used by compaction and recompression). With
    ``delete_horizon_ms`` (KIP-534) the batch's base timestamp holds that horizon and attribute bit 6 says so;
    records keep their absolute timestamps (their deltas are relative to the horizon)."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    base = records[0].offset
    attributes = header.attributes & ~TIMESTAMP_TYPE_MASK
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
    return _assemble(
        [(r.offset - base, r.timestamp, r.key, r.value, r.headers) for r in records],
        base_offset=base, attributes=attributes,
        producer_id=header.producer_id, producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence, partition_leader_epoch=header.partition_leader_epoch,
        base_ts=delete_horizon_ms,
    )


def _assemble(
    items: list[tuple[int, int, bytes | None, bytes | None, Sequence[Header]]], *, base_offset: int,
    attributes: int, producer_id: int, producer_epoch: int, base_sequence: int, partition_leader_epoch: int,
    base_ts: int | None = None,
) -> bytes:
    if base_ts is None:
        base_ts = items[0][1]
    max_ts = max(item[1] for item in items)
    body = b"".join(encode_record(off, ts - base_ts, k, v, h) for off, ts, k, v, h in items)
    return _seal(_compress(attributes & CODEC_MASK, body), base_offset, partition_leader_epoch, attributes,
                 items[-1][0], base_ts, max_ts, producer_id, producer_epoch, base_sequence, len(items))


def _seal(payload: bytes, base_offset: int, partition_leader_epoch: int, attributes: int, last_offset_delta: int,
          base_ts: int, max_ts: int, producer_id: int, producer_epoch: int, base_sequence: int, count: int) -> bytes:
    """The whole batch: the 61-byte header (its CRC-32C over attributes .. end) in front of ``payload``."""
    out = bytearray(HEADER_SIZE)
    out += payload
    HEADER.pack_into(out, 0, base_offset, len(out) - LOG_OVERHEAD, partition_leader_epoch, MAGIC, 0, attributes,
                     last_offset_delta, base_ts, max_ts, producer_id, producer_epoch, base_sequence, count)
    _CRC.pack_into(out, 17, crc32c.crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)
