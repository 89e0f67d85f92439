"""Fast reading of record batches: aiokafka's Cython record reader when it is installed (a dependency), else
ours (``protocol.record_batch``), for the server's paths that read every record of large amounts of data
(produce validation, compaction), and for our client's consumers (``records``).

Rules:
- ``c_reader()`` is aiokafka's ``DefaultRecordBatch`` (looked up once) or None.
- ``uncompressed(batch, data)``: a batch buffer the C reader can walk: the batch itself when uncompressed;
  else its header, marked uncompressed, followed by the already decompressed ``data`` (decompression stays
  ours: capped, ``protocol.compression``).
- ``key_values(batch)``: the header and each record's (key, value), in order, CRC not checked; the C reader
  first, and on anything it refuses our decoder decides (it raises ``CorruptBatchError`` with the reason).
  Same result either way for a well-formed batch (tests compare them).
- ``records(batch, verify_crc=...)``: ``record_batch.decode_batch``'s result (header, ``Record`` list with
  absolute offsets and timestamps, headers as tuples), ~5x faster through the C reader. The batch is checked
  as ``decode_batch`` checks it (CRC when asked, declared size); anything the C reader refuses or miscounts
  goes to ``decode_batch``, which decides and explains. Same result for a well-formed batch (tests compare).
"""

from __future__ import annotations

from protocol.record_batch import (
    CODEC_MASK,
    DEFAULT_MAX_DECOMPRESSED,
    HEADER_SIZE,
    BatchHeader,
    Compression,
    CorruptBatchError,
    Record,
    _decompress,
    decode_batch,
    decode_batch_key_values,
    parse_header,
    validate_batch,
)

_C_READER: object = None  # aiokafka's Cython DefaultRecordBatch once looked up; False: not installed


def c_reader() -> type | None:
    global _C_READER
    if _C_READER is None:
        try:
            from aiokafka.record._crecords import DefaultRecordBatch
            _C_READER = DefaultRecordBatch
        except ImportError:
            _C_READER = False
    return _C_READER or None  # type: ignore[return-value]


def uncompressed(batch: bytes | memoryview, data: bytes | memoryview | None = None) -> bytearray:
    """The C reader's input: ``batch`` itself (``data`` None), or its header marked uncompressed + ``data``."""
    if data is None:
        return bytearray(batch)
    buf = bytearray(batch[:HEADER_SIZE])
    buf[22] &= ~CODEC_MASK
    buf += data
    return buf


def key_values(batch: bytes | memoryview, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED
               ) -> tuple[BatchHeader, list[tuple[bytes | None, bytes | None]]]:
    header = parse_header(batch)
    reader = c_reader()
    if reader is not None:
        try:
            if header.compression == Compression.NONE:
                buf = uncompressed(batch)
            else:
                buf = uncompressed(batch, _decompress(header.compression, bytes(batch[HEADER_SIZE:]),
                                                      max_decompressed))
            kvs = [(r.key, r.value) for r in reader(buf)]
            if len(kvs) == header.record_count:
                return header, kvs
        except Exception:  # refused, or a codec error: ours decides below and says why
            pass
    return decode_batch_key_values(batch, verify_crc=False, max_decompressed=max_decompressed)


def records(batch: bytes | bytearray | memoryview, *, verify_crc: bool = True,
            max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> tuple[BatchHeader, list[Record]]:
    reader = c_reader()
    if reader is not None:
        try:
            header = validate_batch(batch) if verify_crc else parse_header(batch)
            if header.size != len(batch):
                raise CorruptBatchError("size")  # decode_batch below says how
            if header.compression == Compression.NONE:
                buf = uncompressed(batch)
            else:
                buf = uncompressed(batch, _decompress(header.compression, bytes(batch[HEADER_SIZE:]),
                                                      max_decompressed))
            new = tuple.__new__
            out = [new(Record, (r.offset, r.timestamp, r.key, r.value, tuple(h) if (h := r.headers) else ()))
                   for r in reader(buf)]
            if len(out) == header.record_count:
                return header, out
        except Exception:  # refused, or a codec error: ours decides below and says why
            pass
    return decode_batch(batch, verify_crc=verify_crc, max_decompressed=max_decompressed)
