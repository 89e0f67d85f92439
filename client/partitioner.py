"""Kafka's default partitioner: murmur2 for keyed records, a sticky partition for keyless ones.

Rules and invariants:
- ``murmur2(data)`` is Java's ``org.apache.kafka.common.utils.Utils.murmur2`` bit for bit: seed 0x9747b28c,
  little-endian 4-byte blocks, the tail bytes in Java's fall-through order, the result a *signed* 32-bit
  int (Java's ``int``). ``to_positive(n)`` is ``n & 0x7fffffff`` (not ``abs``: abs(MIN_VALUE) overflows).
- A keyed record goes to ``to_positive(murmur2(key)) % num_partitions``, whatever partitions are available,
  so a key always lands where Java's and kafka-python's producers put it.
- A keyless record goes to the topic's sticky partition (Kafka 2.4+, KIP-480): chosen at random among the
  available partitions (all partitions when none is known to be available), kept until the producer opens a
  new batch for it, then changed by ``on_new_batch`` to a different partition when there is more than one.
- Not thread-safe on its own: the producer calls it under its accumulator lock.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Sequence

SEED = 0x9747B28C
M = 0x5BD1E995
R = 24
MASK32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Java's ``Utils.murmur2(byte[])``: a signed 32-bit hash of ``data``."""
    length = len(data)
    h = (SEED ^ length) & MASK32
    nblocks = length // 4
    if nblocks:
        for k in struct.unpack_from(f"<{nblocks}I", data):
            k = (k * M) & MASK32
            k ^= k >> R
            k = (k * M) & MASK32
            h = ((h * M) & MASK32) ^ k
    tail = length & ~3
    extra = length & 3
    if extra == 3:
        h ^= data[tail + 2] << 16
    if extra >= 2:
        h ^= data[tail + 1] << 8
    if extra >= 1:
        h ^= data[tail]
        h = (h * M) & MASK32
    h ^= h >> 13
    h = (h * M) & MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Java's ``Utils.toPositive``: clears the sign bit of a 32-bit int."""
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a keyed record."""
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    return to_positive(murmur2(key)) % num_partitions


class DefaultPartitioner:
    """Keyed: murmur2. Keyless: one sticky partition per topic, changed when a new batch is opened."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._sticky: dict[str, int] = {}

    def partition(self, topic: str, key: bytes | None, num_partitions: int,
                  available: Sequence[int] | None = None) -> int:
        if key is not None:
            return partition_for_key(key, num_partitions)
        current = self._sticky.get(topic)
        if current is None or current >= num_partitions:
            current = self._choose(num_partitions, available, exclude=None)
            self._sticky[topic] = current
        return current

    def on_new_batch(self, topic: str, num_partitions: int, previous: int,
                     available: Sequence[int] | None = None) -> None:
        """A keyless record would open a new batch on ``previous``: move the topic's sticky partition."""
        if self._sticky.get(topic, previous) == previous:
            self._sticky[topic] = self._choose(num_partitions, available, exclude=previous)

    def _choose(self, num_partitions: int, available: Sequence[int] | None, exclude: int | None) -> int:
        pool = [p for p in (available or range(num_partitions)) if 0 <= p < num_partitions]
        if not pool:
            pool = list(range(num_partitions))
        if exclude is not None and len(pool) > 1:
            pool = [p for p in pool if p != exclude]
        return self._rng.choice(pool)
