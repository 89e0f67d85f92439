"""Kafka-shaped ``__transaction_state`` records: the only way durable transaction state changes.

Layouts (big-endian; Kafka 3.9 ``TransactionLogKey.json`` / ``TransactionLogValue.json``):
- Key: int16 version 0 + TransactionalId (int16 length + UTF-8). Other key versions decode to None (Kafka
  logs and skips them at load).
- Value v0 (what we write): int16 version 0, ProducerId int64, ProducerEpoch int16, TransactionTimeoutMs
  int32, TransactionStatus int8, TransactionPartitions nullable array (int32 count, -1 = null) of
  {Topic string, PartitionIds int32 array}, TransactionLastUpdateTimestampMs int64,
  TransactionStartTimestampMs int64.
- Value v1 (read only; Kafka writes it once transaction.version >= 1): the same fields in the flexible
  encoding (compact strings and arrays: unsigned varint length + 1, 0 = null) with a tagged-field section
  after every struct. Tags are skipped whatever their number (3.9 defines none; later versions add
  PreviousProducerId, NextProducerId, ClientTransactionVersion).
- A None value is a tombstone: the id expired.
Partitions are written grouped by topic, topics and partition ids ascending (Kafka groups an unordered set;
any order decodes the same). Decoding returns what is stored; the loader ignores an Empty record's
partitions, as Kafka does.
Truncated input, trailing bytes, unknown value versions, unknown states and null strings raise RecordError.
"""

from __future__ import annotations

import struct
from itertools import groupby
from typing import NamedTuple

from .state import TxnState

KEY_VERSION = 0
VALUE_VERSION = 0  # written; 1 is read as well

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_HEAD = struct.Struct(">qhib")  # producer id, epoch, timeout, status
_TAIL = struct.Struct(">qq")  # last update, start


class RecordError(ValueError):
    """A stored transaction record does not decode: the log is corrupt or written by something else."""


class TxnLogValue(NamedTuple):
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: tuple[tuple[str, int], ...] | None  # None = a null array (Kafka writes null for Empty)
    last_update_ms: int
    start_ms: int


# ---------------------------------------------------------------- encoding


def _str(s: str) -> bytes:
    b = s.encode()
    if len(b) > 0x7FFF:
        raise RecordError(f"string of {len(b)} bytes does not fit an int16 length")
    return _H.pack(len(b)) + b


def encode_key(txn_id: str) -> bytes:
    return _H.pack(KEY_VERSION) + _str(txn_id)


def encode_value(v: TxnLogValue) -> bytes:
    out = [_H.pack(VALUE_VERSION), _HEAD.pack(v.producer_id, v.producer_epoch, v.timeout_ms, int(v.state))]
    if v.partitions is None:
        out.append(_I.pack(-1))
    else:
        by_topic = [(topic, sorted({p for _, p in group}))
                    for topic, group in groupby(sorted(set(v.partitions)), key=lambda tp: tp[0])]
        out.append(_I.pack(len(by_topic)))
        for topic, ids in by_topic:
            out.append(_str(topic))
            out.append(_I.pack(len(ids)))
            out.append(struct.pack(f">{len(ids)}i", *ids))
    out.append(_TAIL.pack(v.last_update_ms, v.start_ms))
    return b"".join(out)


# ---------------------------------------------------------------- decoding


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.data):
            raise RecordError("truncated transaction record")
        chunk = self.data[self.pos:end]
        self.pos = end
        return chunk

    def unpack(self, st: struct.Struct) -> tuple:
        return st.unpack(self.take(st.size))

    def int16(self) -> int:
        return self.unpack(_H)[0]

    def int32(self) -> int:
        return self.unpack(_I)[0]

    def uvarint(self) -> int:
        value = 0
        for shift in range(0, 35, 7):
            b = self.take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
        raise RecordError("unsigned varint longer than 5 bytes")

    def string(self) -> str:
        n = self.int16()
        if n < 0:
            raise RecordError("null string in a non-nullable field")
        return self._utf8(self.take(n))

    def compact_string(self) -> str:
        n = self.uvarint()
        if n == 0:
            raise RecordError("null compact string in a non-nullable field")
        return self._utf8(self.take(n - 1))

    def tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag: none is known to 3.9, so all are skipped
            self.take(self.uvarint())

    def end(self) -> None:
        if self.pos != len(self.data):
            raise RecordError(f"{len(self.data) - self.pos} trailing bytes in transaction record")

    @staticmethod
    def _utf8(b: bytes) -> str:
        try:
            return b.decode()
        except UnicodeDecodeError as e:
            raise RecordError(f"string is not UTF-8: {e}") from None


def decode_key(data: bytes) -> str | None:
    """The transactional id of a key, or None for a key version we do not know (skipped at load)."""
    r = _Reader(data)
    if r.int16() != KEY_VERSION:
        return None
    txn_id = r.string()
    r.end()
    return txn_id


def decode_value(data: bytes) -> TxnLogValue:
    r = _Reader(data)
    version = r.int16()
    if version not in (0, 1):
        raise RecordError(f"unknown transaction value version {version}")
    flexible = version == 1
    producer_id, epoch, timeout_ms, status = r.unpack(_HEAD)
    try:
        state = TxnState(status)
    except ValueError:
        raise RecordError(f"unknown transaction status {status}") from None
    partitions: list[tuple[str, int]] | None
    count = r.uvarint() - 1 if flexible else r.int32()
    if count < 0:
        partitions = None
    else:
        partitions = []
        for _ in range(count):
            topic = r.compact_string() if flexible else r.string()
            n = r.uvarint() - 1 if flexible else r.int32()
            if n < 0:
                raise RecordError("null PartitionIds array")
            ids = struct.unpack(f">{n}i", r.take(4 * n))
            partitions.extend((topic, p) for p in ids)
            if flexible:
                r.tagged_fields()
    last_update_ms, start_ms = r.unpack(_TAIL)
    if flexible:
        r.tagged_fields()
    r.end()
    parts = None if partitions is None else tuple(sorted(set(partitions)))
    return TxnLogValue(producer_id, epoch, timeout_ms, state, parts, last_update_ms, start_ms)
