"""Preferred-leader rebalance in a real 3-node cluster (real ZooKeeper, real `groupcoord serve` processes, the
controller checking the leader imbalance every second, every imbalance counting): node 2 is SIGKILLed (or SIGTERMed) and loses every
leadership; once it is back and in sync, the controller moves its preferred offsets partitions back to it, each
node leads 14-20 of the 50 again, the moves are counted as leader elections, and groups committing all along
(simple-group commits, each retried at the current coordinator until acknowledged) keep every acknowledged
commit through both moves. With ``auto.leader.rebalance.enable=false`` node 2 stays without leaderships."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from cluster_nodes import (
    commit_offset,
    find_coordinator,
    logs,
    metadata,
    offsets_partitions,
    start_nodes,
    stop_nodes,
    wait_for,
)
from server_process import ServerProcess
from test_cluster_membership import formed, leaders
from test_cluster_replication import fetch_committed

from client.errors import KafkaError
from coordinator.config import ConfigError, load
from coordinator.core.sharding import partition_for

# every imbalance triggers (percentage 0): with Kafka's default 10 %, a check that runs while one of node 2's 17
# partitions has not taken it back into its ISR yet moves the other 16, and the last one (1/17 < 10 %) then stays
# where it is, as Kafka would leave it (seen in a CI run on a loaded machine)
CHECK_EVERY = ("--leader-imbalance-check-interval-seconds", "1", "--leader-imbalance-per-broker-percentage", "0")
VICTIM = 2
DEADLINE_S = 120


class Committer(threading.Thread):
    """Commits offset 1, 2, 3, ... for each group, each one retried at the group's current coordinator until
    acknowledged (bounded by DEADLINE_S); ``acked[g]`` is the last acknowledged offset and ``acks`` counts them
    with the coordinator that took each."""

    def __init__(self, nodes: dict[int, ServerProcess], groups: list[str]) -> None:
        super().__init__(name="committer", daemon=True)
        self.nodes = nodes
        self.groups = groups
        self.acked: dict[str, int] = {}
        self.acks: list[tuple[float, str, int]] = []  # when, group, coordinator node
        self.stopping = threading.Event()
        self.stop_at = time.monotonic() + DEADLINE_S
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            offset = 0
            while not self.stopping.is_set() and time.monotonic() < self.stop_at:
                offset += 1
                for g in self.groups:
                    while not self._commit(g, offset):
                        if self.stopping.is_set() or time.monotonic() >= self.stop_at:
                            return
                        time.sleep(0.05)
        except BaseException as e:  # reported by the test
            self.error = e

    def _commit(self, group: str, offset: int) -> bool:
        for node in list(self.nodes.values()):
            if not node.alive():
                continue
            try:
                error, coordinator = find_coordinator(node, group)
                target = self.nodes.get(coordinator)
                if error or target is None or not target.alive():
                    return False
                if commit_offset(target, group, offset=offset) == 0:
                    self.acked[group] = offset
                    self.acks.append((time.monotonic(), group, coordinator))
                    return True
                return False
            except (KafkaError, OSError):
                continue
        return False

    def acks_after(self, since: float, coordinator: int | None = None) -> int:
        return sum(1 for when, _, c in self.acks if when > since and (coordinator is None or c == coordinator))


def leader_counts(md: dict[str, Any]) -> Counter[int]:
    return Counter(leaders(md).values())


def elections(nodes: dict[int, ServerProcess]) -> float:
    return sum(n.metric("groupcoord_leader_elections_total") for n in nodes.values() if n.alive())


def lose_node(nodes: dict[int, ServerProcess], signal: str) -> dict[int, ServerProcess]:
    """Stop the victim; wait until the survivors' Metadata no longer lists it, it leads nothing and is in no
    ISR. Returns the survivors."""
    if signal == "SIGKILL":
        nodes[VICTIM].kill()
    else:
        assert nodes[VICTIM].stop() == 0
    survivors = {i: n for i, n in nodes.items() if i != VICTIM}

    def gone() -> bool:
        for n in survivors.values():
            md = metadata(n)
            parts = offsets_partitions(md)
            if VICTIM in {b["node_id"] for b in md["brokers"]} or len(parts) != 50:
                return False
            if any(p["leader_id"] == VICTIM or p["leader_id"] not in survivors or VICTIM in p["isr_nodes"]
                   for p in parts.values()):
                return False
        return True

    wait_for(f"node {VICTIM} to lead nothing", gone, describe=lambda: logs(survivors))
    return survivors


def back_in_sync(nodes: dict[int, ServerProcess]) -> dict[str, Any]:
    """Wait until every node lists three brokers and node 2 is in the ISR of every offsets partition."""
    def synced() -> dict[str, Any] | None:
        mds = [metadata(n) for n in nodes.values()]
        for md in mds:
            parts = offsets_partitions(md)
            if len(md["brokers"]) != 3 or len(parts) != 50 or any(VICTIM not in p["isr_nodes"]
                                                                  for p in parts.values()):
                return None
        return mds[0]

    return wait_for(f"node {VICTIM} back in every ISR", synced, timeout=60, describe=lambda: logs(nodes))


def test_the_rebalance_keys_have_kafkas_names_defaults_and_bounds() -> None:
    defaults = load(None, {}, {})
    assert (defaults["auto.leader.rebalance.enable"], defaults["leader.imbalance.per.broker.percentage"],
            defaults["leader.imbalance.check.interval.seconds"]) == (True, 10, 300)
    set_ = load(None, {"GROUPCOORD_LEADER_IMBALANCE_CHECK_INTERVAL_SECONDS": "1"},
                {"auto.leader.rebalance.enable": "false", "leader.imbalance.per.broker.percentage": "0"})
    assert (set_["auto.leader.rebalance.enable"], set_["leader.imbalance.per.broker.percentage"],
            set_["leader.imbalance.check.interval.seconds"]) == (False, 0, 1)
    for key, bad in [("leader.imbalance.check.interval.seconds", "0"), ("leader.imbalance.per.broker.percentage",
                     "101"), ("leader.imbalance.per.broker.percentage", "-1"), ("auto.leader.rebalance.enable", "2")]:
        with pytest.raises(ConfigError, match=key):
            load(None, {}, {key: bad})


@pytest.mark.parametrize("signal", ["SIGKILL", "SIGTERM"])
def test_a_returning_node_leads_its_preferred_partitions_again(tmp_path: Path, zk_connect: str,
                                                              signal: str) -> None:
    nodes = start_nodes(tmp_path, zk_connect, [1, 2, 3], *CHECK_EVERY)
    committer: Committer | None = None
    try:
        parts = offsets_partitions(formed(nodes)[1])
        preferred = {p: e["replica_nodes"][0] for p, e in parts.items()}
        mine = {p for p, r in preferred.items() if r == VICTIM}
        assert 16 <= len(mine) <= 17, preferred
        # groups coordinated by node 2 by preference: they move away with its loss and back with the rebalance
        groups = [g for g in (f"pref-group-{i}" for i in range(500)) if partition_for(g, 50) in mine][:4]
        assert len(groups) == 4
        committer = Committer(nodes, groups)
        committer.start()
        started = time.monotonic()
        wait_for("commits acknowledged by node 2", lambda: committer.acks_after(started, VICTIM) >= 8,
                 describe=lambda: logs(nodes))

        lost_at = time.monotonic()
        survivors = lose_node(nodes, signal)
        wait_for("commits acknowledged by the new coordinators", lambda: committer.acks_after(lost_at) > 0
                 and all(c != VICTIM for _, _, c in committer.acks[-4:]), describe=lambda: logs(survivors))
        counted = elections(survivors)

        nodes[VICTIM].start()  # the same data directory: it catches up and rejoins the ISRs

        def rebalanced() -> dict[str, Any] | None:
            mds = [metadata(n) for n in nodes.values()]
            views = [leaders(md) for md in mds]
            if any(len(v) != 50 or v != views[0] for v in views):
                return None
            if any(views[0][p] != VICTIM for p in mine):
                return None
            return mds[0]

        after = wait_for(f"node {VICTIM}'s preferred leaderships back", rebalanced, timeout=60,
                         describe=lambda: logs(nodes))
        per_node = leader_counts(after)
        assert set(per_node) == {1, 2, 3} and all(14 <= c <= 20 for c in per_node.values()), per_node
        for p, entry in offsets_partitions(after).items():
            assert entry["leader_id"] == preferred[p]  # every node leads its own preferred partitions again
            if p in mine:  # moved back by a preferred election: a new leader epoch, still fully in sync
                assert entry["leader_epoch"] >= parts[p]["leader_epoch"] + 2
                assert sorted(entry["isr_nodes"]) == [1, 2, 3]
        # the survivors' controller counted the moves back as leader elections
        wait_for("the moves counted", lambda: elections(survivors) - counted >= len(mine),
                 describe=lambda: f"{elections(survivors)} vs {counted}")

        rebalanced_at = time.monotonic()
        wait_for("commits acknowledged by node 2 again", lambda: committer.acks_after(rebalanced_at, VICTIM) >= 4,
                 describe=lambda: logs(nodes))
        committer.stopping.set()
        committer.join(30)
        assert not committer.is_alive() and committer.error is None, committer.error
        for g in groups:  # every acknowledged commit is there, read from the group's coordinator
            assert find_coordinator(nodes[1], g) == (0, VICTIM)
            assert fetch_committed(nodes[VICTIM], g) == (0, committer.acked[g]), g
    finally:
        if committer is not None:
            committer.stopping.set()
            committer.join(30)
        stop_nodes(nodes)


def test_without_auto_rebalance_a_returning_node_stays_without_leaderships(tmp_path: Path,
                                                                           zk_connect: str) -> None:
    nodes = start_nodes(tmp_path, zk_connect, [1, 2, 3], *CHECK_EVERY, "--auto-leader-rebalance-enable", "false")
    try:
        formed(nodes)
        lose_node(nodes, "SIGKILL")
        nodes[VICTIM].start()
        back_in_sync(nodes)
        time.sleep(6)  # a few check intervals (the first check is 5 s after a controller's election, then 1 s)
        for n in nodes.values():
            md = metadata(n)
            assert VICTIM not in leaders(md).values(), leader_counts(md)
            assert all(VICTIM in p["isr_nodes"] for p in offsets_partitions(md).values())
    finally:
        stop_nodes(nodes)
