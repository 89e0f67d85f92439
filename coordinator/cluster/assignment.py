"""Replica sets for a new topic: Apache Kafka's rack-unaware ``AdminUtils.assignReplicasToBrokers``.

Rules:
- The replication factor is capped at the number of live brokers (``offsets.topic.replication.factor`` of 3
  on a 2-node cluster gives 2 replicas); at least one broker is required.
- Brokers are taken in id order. Partition p's first replica (its preferred leader) is broker
  ``(p + start_index) % n``, so preferred leaders spread evenly (50 partitions on 3 brokers: 17/17/16).
  The other replicas follow at a shift that grows by one every n partitions, so followers spread too.
- Each replica set holds distinct brokers. ``start_index`` (Kafka picks it at random) is a parameter, so
  the result is a pure function of its arguments.
- Racks are registered and reported, but not yet used to place replicas (Kafka's rack-aware variant is a
  later slice).
"""

from __future__ import annotations

from collections.abc import Iterable


def replication_factor(wanted: int, live: int) -> int:
    if live < 1:
        raise ValueError("no live brokers to assign replicas to")
    if wanted < 1:
        raise ValueError(f"replication factor must be at least 1, got {wanted}")
    return min(wanted, live)


def assign_replicas(brokers: Iterable[int], partitions: int, wanted_rf: int, start_index: int = 0,
                    first_partition: int = 0) -> dict[int, tuple[int, ...]]:
    """partition -> replicas (the first is the preferred leader) for ``partitions`` new partitions numbered
    from ``first_partition``."""
    ids = sorted(set(brokers))
    n = len(ids)
    rf = replication_factor(wanted_rf, n)
    start = start_index % n
    shift = start
    out: dict[int, tuple[int, ...]] = {}
    for p in range(first_partition, first_partition + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [ids[first]]
        for j in range(rf - 1):
            replicas.append(ids[(first + 1 + (shift + j) % (n - 1)) % n])
        out[p] = tuple(replicas)
    return out
