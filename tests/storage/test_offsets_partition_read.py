"""read_offsets_partition: what a load replays from an offsets partition, and what it skips (and why)."""

from __future__ import annotations

from coordinator.runtime.groups import read_offsets_partition
from protocol.record_batch import build_batch, parse_header


class StoredBatches:
    """A stand-in for PartitionLog.read: whole batches from the one holding `offset`, up to the watermark."""

    def __init__(self, batches: list[bytes], log_start_offset: int = 0) -> None:
        self.batches = batches
        self.log_start_offset = log_start_offset
        self.high_watermark = self.log_end_offset = parse_header(batches[-1]).next_offset

    def read(self, offset: int, max_bytes: int, *, upper_bound: int | None = None) -> bytes:
        upper = self.high_watermark if upper_bound is None else upper_bound
        return b"".join(b for b in self.batches
                        if parse_header(b).next_offset > offset and parse_header(b).base_offset < upper)


def kv(i: int) -> tuple[bytes, bytes]:
    return b"key-%d" % i, b"value-%d" % i


def batch(base: int, items: list[tuple[bytes | None, bytes | None]]) -> bytes:
    return build_batch([(k, v, [], 1_000) for k, v in items], base_offset=base)


def test_reads_from_inside_a_batch_skips_null_keys_and_a_batch_with_a_flipped_byte():
    first = batch(0, [kv(0), kv(1), (None, b"no key")])
    damaged = bytearray(batch(3, [kv(3), kv(4)]))
    damaged[-3] ^= 0x01  # after a clean stop storage does not re-check this batch: the load must
    last = batch(5, [kv(5), (b"key-1", None)])
    problems: list[str] = []
    got = read_offsets_partition(StoredBatches([first, bytes(damaged), last], log_start_offset=1), problems)
    assert got == [kv(1), kv(5), (b"key-1", None)]
    assert len(problems) == 1 and problems[0].startswith("batch at offsets 3-4 skipped: CRC mismatch")


def test_many_records_per_batch_come_back_in_offset_order():
    batches = [batch(b * 100, [kv(b * 100 + i) for i in range(100)]) for b in range(3)]
    assert read_offsets_partition(StoredBatches(batches)) == [kv(i) for i in range(300)]
