"""Cluster mode: producer ids unique across the cluster, in blocks claimed in ZooKeeper (Kafka's ZooKeeper-era
``ZkProducerIdManager``: ``/latest_producer_id_block``).

Rules:
- Ids are handed out from the block this node holds; when it is half used the next block is claimed in the
  background (``run``), so a request rarely waits. A block is claimed by a version-checked write, so two
  nodes never get the same one; ids of a block a node did not use before it stopped are never handed out.
- No id at hand (the first block not claimed yet, or ZooKeeper unreachable): ``NoProducerIds``, which the
  transaction service answers COORDINATOR_LOAD_IN_PROGRESS (retriable), as Kafka answers while its manager
  waits for a block. A failed claim is retried every ``RETRY_S``.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

import trio

from coordinator.cluster.zk import ZkError
from coordinator.storage.errors import StorageError

log = logging.getLogger("groupcoord.transactions")

BLOCK = 1000
RETRY_S = 1.0


class NoProducerIds(StorageError):
    """No producer id can be handed out right now (no block claimed yet)."""


class ClusterProducerIds:
    def __init__(self, member: Any, node_id: int) -> None:
        self.member = member
        self.node_id = node_id
        self._blocks: deque[tuple[int, int]] = deque()
        self._next = 0
        self._end = -1  # last id of the current block
        self._want = trio.Event()
        self._want.set()  # claim the first block at start

    def __call__(self) -> int:
        if self._next > self._end:
            if not self._blocks:
                self._want.set()
                raise NoProducerIds("no producer id block claimed yet")
            self._next, self._end = self._blocks.popleft()
        pid = self._next
        self._next += 1
        if not self._blocks and self._end - self._next < BLOCK // 2:
            self._want.set()
        return pid

    async def run(self) -> None:
        while True:
            await self._want.wait()
            self._want = trio.Event()
            while not self._blocks:
                try:
                    self._blocks.append(await self.member.zk.reserve_producer_ids(self.node_id, BLOCK))
                except ZkError as e:
                    log.warning("claiming producer ids failed: %s; retrying in %.0f s", e, RETRY_S)
                    await trio.sleep(RETRY_S)
