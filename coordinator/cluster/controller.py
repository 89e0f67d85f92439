"""The elected controller: turns what ZooKeeper says into the partition states it owes, and writes them.

Rules:
- A node is controller only while it holds ``/controller`` with its current session AND the epoch in
  ``/controller_epoch`` is the one it wrote when it won; otherwise ``Controller.holds`` is false and it
  writes nothing (a new session, or a newer controller, ends the term).
- ``step`` is a reconciliation, not an event log: from one snapshot (live brokers, assignments, states) it
  computes ``election.reconcile`` and writes the result, each write fenced by the controller epoch's znode
  version (``ZkStore.write_states``). Running it twice on the same snapshot writes nothing the second
  time; a write refused because a state moved is retried from the next snapshot.
- A write refused on the epoch check means a newer controller exists: the term ends at once.
- Topic deletion (``/admin/delete_topics/<t>``, written by whichever node got DeleteTopics) comes first: the
  controller deletes the topic's znodes, config and request in one fenced transaction (no StopReplica
  round: each node deletes its local logs when the topic leaves its view). Topics awaiting deletion get no
  leader elections.
- ``rebalance`` is Kafka's auto leader rebalance (``auto.leader.rebalance.enable``): it writes
  ``election.preferred_elections`` for one snapshot, fenced like every other write. The member runs it when
  ``next_rebalance`` (a time on the member's clock; first ``FIRST_REBALANCE_DELAY_S`` after the election, as
  Kafka, then every ``leader.imbalance.check.interval.seconds``) has passed, and only after a ``step`` that
  had nothing to write: a node that left is first failed over, and as it is no longer registered (not live)
  it is never handed a leadership back; a returning node gets its preferred leaderships only once it is back
  in their ISR. Topics awaiting deletion are left alone. A write refused on a moved state is not retried
  before the next check (as Kafka).
- ``leader_elections`` counts the partition states written whose leader differs from the one before
  (a first leader, a failover, a move at controlled shutdown, a preferred-leader move), never an ISR-only
  change (metrics: ``groupcoord_leader_elections_total``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from .election import preferred_elections, reconcile
from .state import PartitionState, TopicPartition
from .zk import Snapshot, ZkStore

log = logging.getLogger("groupcoord.cluster.controller")

FIRST_REBALANCE_DELAY_S = 5.0  # Kafka's first auto-leader-rebalance check after a controller is elected


@dataclass(slots=True)
class Controller:
    node_id: int
    epoch: int
    epoch_version: int  # /controller_epoch's znode version right after this controller's election
    fenced: bool = False
    leader_elections: int = 0
    next_rebalance: float = 0.0  # when the next imbalance check is due (the member's clock)

    def holds(self, snap: Snapshot, session_id: int | None) -> bool:
        return (not self.fenced and session_id is not None and snap.controller_owner == session_id
                and snap.view.controller_id == self.node_id and snap.view.controller_epoch == self.epoch
                and snap.controller_epoch_version == self.epoch_version)

    async def step(self, zk: ZkStore, snap: Snapshot, unclean: bool) -> int:
        """Write the partition states this snapshot calls for; returns how many were written."""
        view = snap.view
        deleted = 0
        for topic in sorted(snap.deleting):
            done, fenced = await zk.delete_topic(topic, self.epoch_version)
            if fenced:
                self.fenced = True
                log.warning("controller %s (epoch %s) was fenced by a newer controller", self.node_id, self.epoch)
                return deleted
            if done:
                deleted += 1
                log.info("controller epoch %s deleted topic %s", self.epoch, topic)
        if deleted:
            return deleted  # the next snapshot no longer holds them
        assignments = {t: parts for t, parts in view.assignments.items() if t not in snap.deleting}
        writes = reconcile(assignments, view.states, set(view.brokers), self.epoch, unclean)
        return await self._write(zk, snap, writes, "partition states")

    async def rebalance(self, zk: ZkStore, snap: Snapshot, imbalance_pct: int) -> int:
        """Move leaderships back to preferred replicas where a broker's imbalance exceeds ``imbalance_pct``;
        returns how many states were written."""
        view = snap.view
        writes = preferred_elections(view.assignments, view.states, set(view.brokers), self.epoch, imbalance_pct,
                                     excluded=snap.deleting)
        return await self._write(zk, snap, writes, "preferred-leader states")

    async def _write(self, zk: ZkStore, snap: Snapshot, writes: dict[TopicPartition, PartitionState],
                     what: str) -> int:
        """Write ``writes`` fenced by this controller's epoch (and each state's version), count the leaders
        it elected, and end the term when a newer controller fenced it."""
        if not writes:
            return 0
        view = snap.view
        done: set[TopicPartition] = set()
        written, fenced = await zk.write_states(writes, snap.state_versions, self.epoch_version, done)
        for tp in done:
            before = view.states.get(tp)
            if writes[tp].leader >= 0 and (before is None or before.leader != writes[tp].leader):
                self.leader_elections += 1
        if fenced:
            self.fenced = True
            log.warning("controller %s (epoch %s) was fenced by a newer controller", self.node_id, self.epoch)
        moved = sorted(f"{t}-{p}->{st.leader}" for (t, p), st in writes.items())
        log.info("controller epoch %s wrote %d/%d %s (live brokers %s): %s", self.epoch, written, len(writes), what,
                 sorted(view.brokers), ", ".join(moved[:20]) + (" ..." if len(moved) > 20 else ""))
        return written
