"""Read-only figures for metrics and the CLI: rebalances by reason, last rebalance duration.

Reasons are short fixed keys (see REASONS) so they can be metric labels. A rebalance starts when a group
enters PreparingRebalance and ends when it reaches Stable (leader's assignment stored) or Empty.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

REASONS = (
    "member-joined",          # a new member joined
    "member-updated",         # a member rejoined with changed protocols/metadata
    "leader-rejoined",        # the leader rejoined a Stable group (e.g. topic metadata changed)
    "static-member-changed",  # a static member restarted with protocols that change the group protocol
    "member-left",            # LeaveGroup
    "session-expired",        # heartbeat/session expiry
    "sync-expired",           # members did not send SyncGroup within the rebalance timeout
    "write-failed",           # storing the leader's assignment failed
)


@dataclass(slots=True)
class Stats:
    rebalances: Counter[str] = field(default_factory=Counter)
    completed_rebalances: int = 0
    last_rebalance_ms: int | None = None
    # durations not yet taken by the runtime's metrics (bounded: a slow scraper loses old ones, never memory)
    unreported_durations_ms: deque[int] = field(default_factory=lambda: deque(maxlen=4096))

    offsets_refused: int = 0  # commits refused by offsets.max.committed (the runtime logs them, rate-limited)

    events: int = 0  # rebalances started + finished: lets a reader skip work when nothing changed

    def rebalance_started(self, reason: str) -> None:
        self.rebalances[reason] += 1
        self.events += 1

    def rebalance_finished(self, duration_ms: int) -> None:
        self.completed_rebalances += 1
        self.events += 1
        self.last_rebalance_ms = duration_ms
        self.unreported_durations_ms.append(duration_ms)
