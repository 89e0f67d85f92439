"""Reading an offsets partition's records for replay (the load, and followers catching up).

Rules:
- ``read_offsets_from(plog, start, problems, to_log_end=)`` returns every (key, value) stored from ``start``
  (a batch holding ``start`` contributes its records from ``start`` on) up to the log's durable end when it
  was called (its high watermark: the recovery point, or past it what a journal fsync made durable), or up
  to its log end with ``to_log_end`` (a node about to lead: its whole log is the truth, including a
  follower append whose journal fsync is still under way), in offset order, and the offset the read
  reached (where the next read starts). It runs in a worker thread. Records without a key are dropped
  (they mean nothing to the core).
- Every batch's CRC is checked: storage re-validates only what lies past its recovery point, so after a
  clean shutdown a damaged byte would otherwise be replayed (or crash the load). A batch that fails is
  skipped (later batches still apply: the log is last-write-wins per key); framing that cannot be followed
  ends the read. Either way one problem line is appended to ``problems`` per occurrence; never fatal.
- The reading is two halves: ``read_chunks`` (the IO: the stored bytes, walking batch headers only) and
  ``decode_chunks`` (pure: CRCs, records, problems), so a load can decode one partition in another process
  while it replays the previous one (``parallel_load``); together they are ``read_offsets_from``.
- Transactions: a transactional batch's records and a control batch (a COMMIT/ABORT marker) are not plain
  records: they come out as ``OffsetRecords.txn``, a list of (index, event) in log order, an event standing
  after ``records[:index]`` and before ``records[index:]``: ``TxnBatch(producer_id, records)`` or
  ``TxnMarker(producer_id, commit)``. A control batch without a marker (emptied by compaction, another
  control type) is nothing; one that does not parse is a skipped batch (a problem line). The common path
  (a plain, uncompressed batch) is decoded in place as before: its test excludes transactional and control
  batches with the codec bits, in one mask.
- ``replay_steps(core, shard, records, skipped)`` replays a read (records and events, in log order) into the
  core (``replay_many``, ``replay_txn_batch``, ``replay_marker``) and yields after each ``REPLAY_CHUNK``
  records' worth of work, so a caller can checkpoint between chunks (the trio thread stays responsive).
- ``log_skipped_record``: a stored record the core cannot decode is logged and skipped, never fatal.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

import crc32c

from protocol.control_batch import parse_marker
from protocol.record_batch import (
    CODEC_MASK,
    CONTROL_MASK,
    CRC_START,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MIN_BATCH_LENGTH,
    TRANSACTIONAL_MASK,
    CorruptBatchError,
    decode_batch_key_values,
    decode_key_values,
    parse_header,
    split_batches,
)

if TYPE_CHECKING:
    from coordinator.core.coordinator import Coordinator

log = logging.getLogger("groupcoord.groups")

_HEAD = struct.Struct(">qi11xi")  # a batch's base offset, length, (epoch, magic, crc, attributes), last offset delta
READ_CHUNK = 4 * 1024 * 1024
unpack_header, crc_of = HEADER.unpack_from, crc32c.crc32c
REPLAY_CHUNK = 50_000  # records replayed between two trio checkpoints while loading or catching up

Records = list[tuple[bytes, bytes | None]]
_NOT_PLAIN = CODEC_MASK | TRANSACTIONAL_MASK | CONTROL_MASK  # attribute bits that leave the in-place path


class TxnBatch(NamedTuple):
    """A stored transactional batch: its records are ``producer_id``'s pending offsets."""

    producer_id: int
    records: Records


class TxnMarker(NamedTuple):
    """A stored COMMIT (``commit``) or ABORT marker of ``producer_id``."""

    producer_id: int
    commit: bool


TxnEvent = tuple[int, "TxnBatch | TxnMarker"]


class OffsetRecords(list):
    """The plain (key, value) records of a read, in log order (a list: equal to one with the same records),
    and ``txn``: its transactional events as (index into the records, event), in log order."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.txn: list[TxnEvent] = []


def read_offsets_partition(plog: Any, problems: list[str] | None = None) -> OffsetRecords:
    """Every (key, value) stored in an offsets partition, in offset order (see ``read_offsets_from``)."""
    return read_offsets_from(plog, plog.log_start_offset, problems)[0]


def read_offsets_from(plog: Any, start: int, problems: list[str] | None = None, *,
                      to_log_end: bool = False) -> tuple[OffsetRecords, int]:
    return decode_chunks(read_chunks(plog, start, to_log_end=to_log_end), start, problems)


def read_chunks(plog: Any, start: int, *, to_log_end: bool = False) -> list[tuple[int, bytes]]:
    """The stored bytes ``read_offsets_from`` decodes, as (offset read at, bytes) in order: the IO half. Each
    read starts where the batches before it end (each header's base offset and last offset delta, as
    ``decode_chunks`` advances); framing it cannot follow ends the reading (``decode_chunks`` reports it)."""
    out: list[tuple[int, bytes]] = []
    offset = start
    end = plog.log_end_offset if to_log_end else plog.high_watermark
    head, total_overhead = _HEAD.unpack_from, LOG_OVERHEAD
    while offset < end:
        data = plog.read(offset, READ_CHUNK, upper_bound=end)
        if not data:
            break
        out.append((offset, data))
        before, pos, size = offset, 0, len(data)
        while size - pos >= _HEAD.size:
            base, length, lod = head(data, pos)
            if length < MIN_BATCH_LENGTH:
                return out
            pos += total_overhead + length
            if pos > size:  # a partial tail: not a batch of this read
                break
            offset = max(offset, base + lod + 1)
        if offset == before:
            break
    return out


def decode_chunks(chunks: list[tuple[int, bytes]], start: int,
                  problems: list[str] | None = None) -> tuple[OffsetRecords, int]:
    """Every (key, value) of ``read_chunks``' bytes (and its transactional events) and the offset the read
    reached (see the module rules): pure, so a load may run it in another process (``parallel_load``)."""
    out = OffsetRecords()
    events = out.txn
    if problems is None:
        problems = []
    offset = start
    for at, data in chunks:
        if at != offset:  # reading stopped being what this decode follows (framing read_chunks could not parse)
            break
        before = offset
        try:
            batches, _ = split_batches(data)
        except CorruptBatchError as e:
            problems.append(f"unreadable batch framing at offset {offset} ({e}); later records ignored")
            break
        view = memoryview(data)
        pos = 0
        for batch in batches:
            at, pos = pos, pos + len(batch)
            # the common batch (v2, uncompressed, at or past the offset reached, CRC right) is decoded in place:
            # what decode_batch_key_values does, without its header objects and copy; anything else goes there
            base, length, _, magic, crc, attrs, lod, _, _, _, _, _, count = unpack_header(data, at)
            if (magic == MAGIC and count >= 0 and length >= MIN_BATCH_LENGTH and not attrs & _NOT_PLAIN
                    and base >= offset and crc_of(view[at + CRC_START:pos]) == crc):
                try:
                    pairs = decode_key_values(data, count, at + HEADER_SIZE, pos)
                except CorruptBatchError:  # decoded again on its own, for the same reason in the problem line
                    try:
                        _, pairs = decode_batch_key_values(batch, min_offset=offset)
                    except CorruptBatchError as e:
                        problems.append(f"batch at offsets {base}-{base + lod} skipped: {e}")
                        pairs = []
                out += [kv for kv in pairs if kv[0] is not None]
                offset = max(offset, base + lod + 1)
                continue
            try:
                header = parse_header(batch)
            except CorruptBatchError as e:
                problems.append(f"unreadable batch header after offset {offset} ({e}); later records ignored")
                return out, offset
            try:
                if header.is_control:
                    if header.base_offset >= offset:
                        marker = parse_marker(batch)  # CRC checked
                        if marker is not None:
                            events.append((len(out), TxnMarker(header.producer_id, marker.commit)))
                    pairs = []
                else:
                    _, pairs = decode_batch_key_values(batch, min_offset=offset)  # CRC checked
            except CorruptBatchError as e:
                problems.append(f"batch at offsets {header.base_offset}-{header.last_offset} skipped: {e}")
                pairs = []
            if header.is_transactional and not header.is_control:
                kept = [kv for kv in pairs if kv[0] is not None]
                if kept:
                    events.append((len(out), TxnBatch(header.producer_id, kept)))
            else:
                out += [kv for kv in pairs if kv[0] is not None]
            offset = max(offset, header.next_offset)
        if offset == before:
            problems.append(f"no progress reading at offset {offset}; later records ignored")
            break
    return out, offset


def replay_steps(core: Coordinator, shard: int, records: Records,
                 skipped: Callable[[bytes, ValueError], None], chunk: int = REPLAY_CHUNK) -> Iterator[None]:
    """Replay a read into the core's shard in log order: plain records through ``replay_many`` (at most
    ``chunk`` per call), the transactional events of an ``OffsetRecords`` between them; yields after about
    ``chunk`` records of work each time (see the module rules)."""
    events: list[TxnEvent] = getattr(records, "txn", [])
    pos = work = 0
    for index, event in (*events, (len(records), None)):
        while pos < index:
            end = min(index, pos + chunk - work)
            core.replay_many(shard, records[pos:end], skipped)
            work += end - pos
            pos = end
            if work >= chunk:
                work = 0
                yield
        if type(event) is TxnBatch:
            core.replay_txn_batch(shard, event.producer_id, event.records, skipped)
            work += len(event.records)
        elif type(event) is TxnMarker:
            core.replay_marker(shard, event.producer_id, event.commit)
            work += 1
        if work >= chunk:
            work = 0
            yield
    if work:
        yield


def log_skipped_record(shard: int, key: bytes, e: ValueError) -> None:
    """A stored record the load cannot decode (RecordError, bad UTF-8): logged and skipped, never fatal."""
    log.error("offsets partition %d: skipping undecodable record (key %s): %s", shard, key[:64].hex(), e)
