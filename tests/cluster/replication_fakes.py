"""What ``Replication`` (coordinator/runtime/replication.py) reads of a ClusterMember, for the tests that drive it
without a cluster (test_replication_acks, test_replication_rounds, test_retention_bound)."""

from __future__ import annotations

from typing import Any

from coordinator.cluster.state import ClusterView


class Member:
    """No view yet, no callbacks; ``tp``'s state version 0."""

    def __init__(self, tp: tuple[str, int] = ("t", 0)) -> None:
        self.on_replicas: Any = None
        self.on_suspended: Any = None
        self.state_versions: dict[tuple[str, int], int] = {tp: 0}
        self.view = ClusterView()
