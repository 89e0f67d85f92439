"""Transaction markers: the control batches that end a transaction in a partition (Kafka's
``EndTransactionMarker``, ``ControlRecordType`` and ``MemoryRecords.withEndTransactionMarker``).

Rules:
- A marker is a v2 batch with attributes control|transactional (no codec, create time), the producer's id and
  epoch, baseSequence -1, base offset 0 (the log rewrites it), lastOffsetDelta 0, base and max timestamp the
  marker's timestamp, and exactly one record (timestamp delta 0, offset delta 0, no headers) whose
  key is int16 version 0 + int16 type (0 ABORT, 1 COMMIT) and value is int16 version 0 + int32 coordinator epoch.
- Parsing follows Kafka's readers: the key needs at least 4 bytes and a version >= 0, the value at least 6 bytes
  and a version >= 0; a higher version is read as version 0 (extra bytes are ignored).
- ``parse_marker`` returns None for a control batch that carries no marker: no records (compaction can empty a
  control batch) or a control type that is not ABORT/COMMIT (KRaft's leader-change and snapshot records). Bad
  bytes, a batch that is not a control batch, or a marker key without a valid value raise ``CorruptBatchError``.
Sans-IO: pure functions on bytes; the timestamp is always given by the caller.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from protocol.record_batch import (
    CONTROL_MASK,
    TRANSACTIONAL_MASK,
    CorruptBatchError,
    _seal,
    decode_batch,
    encode_record,
)

ABORT = 0
COMMIT = 1
CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0
NO_SEQUENCE = -1
MARKER_ATTRIBUTES = CONTROL_MASK | TRANSACTIONAL_MASK

_KEY = struct.Struct(">hh")  # version, type
_VALUE = struct.Struct(">hi")  # version, coordinator epoch


class Marker(NamedTuple):
    """What an end-transaction marker says."""

    commit: bool
    coordinator_epoch: int


def marker_key(commit: bool) -> bytes:
    """The control record key of a COMMIT or ABORT marker."""
    return _KEY.pack(CONTROL_KEY_VERSION, COMMIT if commit else ABORT)


def marker_value(coordinator_epoch: int) -> bytes:
    """The value of an end-transaction marker record."""
    return _VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)


def build_marker_batch(
    producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, timestamp_ms: int,
    partition_leader_epoch: int = -1,
) -> bytes:
    """The marker batch Kafka's ``MemoryRecords.withEndTransactionMarker`` writes, byte for byte (base offset 0)."""
    record = encode_record(0, 0, marker_key(commit), marker_value(coordinator_epoch))
    return _seal(record, 0, partition_leader_epoch, MARKER_ATTRIBUTES, 0, timestamp_ms, timestamp_ms,
                 producer_id, producer_epoch, NO_SEQUENCE, 1)


def control_type(key: bytes | None) -> int:
    """The control type id of a control record's key (Kafka's ``ControlRecordType.parseTypeId``)."""
    if key is None or len(key) < _KEY.size:
        raise CorruptBatchError(f"control record key needs {_KEY.size} bytes, got {0 if key is None else len(key)}")
    version, type_id = _KEY.unpack_from(key)
    if version < 0:
        raise CorruptBatchError(f"invalid control record key version {version}")
    return type_id


def parse_marker_value(value: bytes | None) -> int:
    """The coordinator epoch in an end-transaction marker's value (``EndTransactionMarker.deserializeValue``)."""
    if value is None or len(value) < _VALUE.size:
        raise CorruptBatchError(
            f"end transaction marker value needs {_VALUE.size} bytes, got {0 if value is None else len(value)}")
    version, coordinator_epoch = _VALUE.unpack_from(value)
    if version < 0:
        raise CorruptBatchError(f"invalid end transaction marker version {version}")
    return coordinator_epoch


def parse_marker(batch: bytes | bytearray | memoryview, *, verify_crc: bool = True) -> Marker | None:
    """The marker in one whole control batch, or None when the batch carries no marker (see the rules)."""
    header, records = decode_batch(batch, verify_crc=verify_crc)
    if not header.is_control:
        raise CorruptBatchError("not a control batch")
    if not records:
        return None
    record = records[0]
    type_id = control_type(record.key)
    if type_id not in (ABORT, COMMIT):
        return None
    return Marker(type_id == COMMIT, parse_marker_value(record.value))
