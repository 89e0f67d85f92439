"""parallel_load.DecodedPartitions: partitions decoded by a second process come back exactly as read in-process.

Rules checked (coordinator/runtime/parallel_load.py):
- With the worker, every partition's records and problem lines equal ``read_offsets_partition``'s for the same
  log (damaged batches, null keys, reads starting inside a batch, many chunks included), in shard order.
- A partition whose log cannot be read is yielded with its error and the others still load.
- A worker that dies mid-load is reported once and the rest is decoded in-process, with the same results.
(The real server through it: tests/integration/test_parallel_load_server.py.)
"""

from __future__ import annotations

import os
import signal

import pytest

from coordinator.runtime import offsets_reader, parallel_load
from coordinator.runtime.groups import read_offsets_partition
from coordinator.storage.errors import StorageError
from protocol.record_batch import build_batch, parse_header


class StoredBatches:
    """A stand-in for PartitionLog.read: whole batches from the one holding `offset`, up to the watermark."""

    def __init__(self, batches: list[bytes], log_start_offset: int = 0) -> None:
        self.batches = batches
        self.log_start_offset = log_start_offset
        self.high_watermark = self.log_end_offset = parse_header(batches[-1]).next_offset
        self.heads = [parse_header(b) for b in batches]

    def read(self, offset: int, max_bytes: int, *, upper_bound: int | None = None) -> bytes:
        upper = self.high_watermark if upper_bound is None else upper_bound
        out, size = [], 0
        for b, h in zip(self.batches, self.heads, strict=True):
            if h.next_offset > offset and h.base_offset < upper:
                if out and size + len(b) > max_bytes:
                    break
                out.append(b)
                size += len(b)
        return b"".join(out)


def batch(base: int, items: list[tuple[bytes | None, bytes | None]]) -> bytes:
    return build_batch([(k, v, [], 1_000) for k, v in items], base_offset=base)


def partition(seed: int) -> StoredBatches:
    batches, base = [], 0
    for b in range(40 + seed):
        items = [(b"g%d-key-%d" % (seed, base + i), b"v" * (i % 7)) for i in range(1 + (b * 7 + seed) % 9)]
        if b % 5 == 0:
            items.append((None, b"no key"))
        data = batch(base, items)
        if b == 11 + seed:
            damaged = bytearray(data)
            damaged[-2] ^= 0x10
            data = bytes(damaged)
        batches.append(data)
        base = parse_header(data).next_offset
    return StoredBatches(batches, log_start_offset=3 + seed)


class Broken:
    log_start_offset = 0

    @property
    def high_watermark(self) -> int:
        raise StorageError("disk gone")


async def collect(logs: dict[int, object], parallel: bool, monkeypatch: pytest.MonkeyPatch,
                  kill_after: int | None = None) -> tuple[list, bool]:
    monkeypatch.setattr(offsets_reader, "READ_CHUNK", 2048)  # many chunks per partition (read here, in-process)
    loader = parallel_load.DecodedPartitions(range(len(logs)), lambda s: logs[s], parallel)
    was_parallel = loader.parallel
    out = []
    async for shard, _plog, records, problems, error in loader:
        out.append((shard, records, problems, None if error is None else str(error)))
        if kill_after is not None and shard == kill_after and loader._pool is not None:
            for pid in list(loader._pool._processes):  # the decoding process dies mid-load
                os.kill(pid, signal.SIGKILL)
    return out, was_parallel


def expected(logs: dict[int, object]) -> list:
    out = []
    for shard, plog in logs.items():
        problems: list[str] = []
        try:
            records = read_offsets_partition(plog, problems)
        except StorageError as e:
            out.append((shard, None, [], str(e)))
            continue
        out.append((shard, records, problems, None))
    return out


async def test_the_worker_decodes_exactly_as_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    logs: dict[int, object] = {s: partition(s) for s in range(5)}
    logs[5] = Broken()
    logs[6] = partition(9)
    monkeypatch.setattr(offsets_reader, "READ_CHUNK", 2048)
    want = expected(logs)
    assert sum(len(p) for _, _, p, _ in want) >= 5 and any(e for *_, e in want)  # damaged batches, a broken log
    got, was_parallel = await collect(logs, True, monkeypatch)
    assert was_parallel and got == want
    serial, was_parallel = await collect(logs, False, monkeypatch)
    assert not was_parallel and serial == want


async def test_a_worker_that_dies_leaves_the_rest_to_this_process(monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    logs: dict[int, object] = {s: partition(s) for s in range(6)}
    monkeypatch.setattr(offsets_reader, "READ_CHUNK", 2048)
    want = expected(logs)
    got, _ = await collect(logs, True, monkeypatch, kill_after=1)
    assert got == want
    assert len([r for r in caplog.records if "decoding process failed" in r.getMessage()]) == 1
