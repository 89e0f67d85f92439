"""A leader's view of one partition's replicas: follower progress, the high watermark, ISR changes. Pure.

Rules (Kafka's ``Partition``/``Replica``, with durable replication):
- A follower's fetch offset is its durable log end: it fetches from an offset only once its own fsync
  covered everything below it. ``on_fetch`` records it, with Kafka's caught-up clock: a follower is caught
  up at a fetch whose offset reaches the leader's end at that fetch, or at the previous fetch's time when it
  reaches the leader's end as it was then (``Replica.updateFetchState``); it tells whether the follower's
  durable end moved (only then can its fetch move the high watermark).
  ``note_idle_fetch`` records a fetch the leader passed over (nothing had moved: the follower's offset was
  the one noted and the leader's end): caught up at that time, as ``on_fetch`` would have said.
- The high watermark is the least durable end over the ISR, the leader's own durable end included, taken
  over the ISR and any pending expansion (Kafka's "maximal ISR", so a replica being added never lags the
  high watermark); it never moves back while this node leads.
- Shrink: an ISR follower not caught up within ``replica.lag.time.max.ms`` leaves (never the leader).
  Expand: a follower outside the ISR whose durable end reaches the high watermark and the start of the
  current leader epoch joins. ``isr_change`` proposes the new ISR (members in assignment order) or None;
  the runtime writes it to ZooKeeper (version-checked) and calls ``isr_written`` only when that succeeded.
- ``acks_ok``: an acknowledgement needs the ISR to have at least ``min_isr`` members (capped at the
  replica count, so a replication-factor-1 topic still takes writes).
- Every method takes ``now_ms``: no clock here.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class FollowerProgress:
    log_end: int = -1  # its durable log end, from its last fetch (-1: has not fetched under this leader)
    caught_up_ms: int = 0  # last time it was caught up
    last_fetch_ms: int = 0
    last_fetch_leader_end: int = -1  # the leader's end at its previous fetch


@dataclass(slots=True)
class LeaderReplicaState:
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    high_watermark: int
    epoch_start: int  # the leader's log end when this epoch began
    now_ms: int
    pending_isr: tuple[int, ...] | None = None  # proposed and being written
    followers: dict[int, FollowerProgress] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for r in self.replicas:
            if r != self.leader and r not in self.followers:
                # Kafka: an ISR member starts as caught up when leadership begins
                self.followers[r] = FollowerProgress(caught_up_ms=self.now_ms if r in self.isr else 0)

    # ---------------------------------------------------------------- followers
    def on_fetch(self, follower: int, fetch_offset: int, leader_end: int, now_ms: int) -> bool:
        """Note a follower's fetch; True when its durable end moved (only then can its fetch move the high
        watermark)."""
        f = self.followers.get(follower)
        if f is None:
            return False
        if fetch_offset >= leader_end:
            f.caught_up_ms = max(f.caught_up_ms, now_ms)
        elif fetch_offset >= f.last_fetch_leader_end >= 0:
            f.caught_up_ms = max(f.caught_up_ms, f.last_fetch_ms)
        moved = f.log_end != fetch_offset
        f.log_end = fetch_offset
        f.last_fetch_leader_end = leader_end
        f.last_fetch_ms = now_ms
        return moved

    def note_idle_fetch(self, follower: int, at_ms: int) -> None:
        """The follower fetched at ``at_ms`` with nothing new here: its fetch offset was the one last noted and
        the leader's end (the leader passed over the partition instead of calling ``on_fetch``): it was caught
        up then, at a leader end equal to its own."""
        f = self.followers.get(follower)
        if f is None or at_ms <= f.last_fetch_ms:
            return
        f.caught_up_ms = max(f.caught_up_ms, at_ms)
        f.last_fetch_ms = at_ms
        f.last_fetch_leader_end = f.log_end

    # ---------------------------------------------------------------- high watermark
    def advance(self, leader_durable_end: int) -> bool:
        """Recompute the high watermark from the leader's durable end; True when it moved forward."""
        hw = leader_durable_end  # the least over the ISR and any pending expansion (a member counted twice is harmless)
        leader, followers = self.leader, self.followers
        for members in (self.isr, self.pending_isr or ()):
            for r in members:
                if r != leader:
                    f = followers.get(r)
                    if f is not None and f.log_end < hw:
                        hw = f.log_end
        if hw > self.high_watermark:
            self.high_watermark = hw
            return True
        return False

    def acks_ok(self, min_isr: int) -> bool:
        return len(self.isr) >= min(min_isr, len(self.replicas))

    # ---------------------------------------------------------------- ISR
    def out_of_sync(self, leader_end: int, now_ms: int, lag_max_ms: int) -> list[int]:
        return [r for r in self.isr if r != self.leader and r in self.followers
                and self.followers[r].log_end != leader_end
                and now_ms - self.followers[r].caught_up_ms > lag_max_ms]

    def caught_up(self) -> list[int]:
        hw = self.high_watermark
        return [r for r, f in self.followers.items() if r not in self.isr
                and f.log_end >= 0 and f.log_end >= hw and f.log_end >= self.epoch_start]

    def isr_change(self, leader_end: int, now_ms: int, lag_max_ms: int,
                   live: set[int] | None = None) -> tuple[int, ...] | None:
        """The ISR to write, or None (no change, or a change already being written). Replicas not in
        ``live`` (when given) are never added."""
        if self.pending_isr is not None:
            return None
        drop = set(self.out_of_sync(leader_end, now_ms, lag_max_ms))
        add = {r for r in self.caught_up() if live is None or r in live}
        if not drop and not add:
            return None
        keep = (set(self.isr) - drop) | add
        return tuple(r for r in self.replicas if r in keep)

    def isr_written(self, isr: tuple[int, ...], now_ms: int) -> None:
        joined = set(isr) - set(self.isr)
        self.isr = isr
        self.pending_isr = None
        for r in joined:  # a replica that (re)joins is caught up now
            self.followers[r].caught_up_ms = now_ms
