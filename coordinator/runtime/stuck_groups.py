"""Stuck groups (issue #37): groups waiting for members in a rebalance for too long, counted and logged once.

Rules:
- Every ``CHECK_S`` it asks the core which groups wait for members (``Coordinator.waiting_groups``,
  ``coordinator/core/waits.py``) and counts those waiting longer than ``group.stuck.threshold.ms`` (-1: twice
  the group's largest rebalance timeout) into ``stuck`` (the ``groupcoord_groups_stuck`` gauge). Walking every
  group happens only when a rebalance started or ended since the last check (a group starts waiting only
  then); otherwise only the groups that waited at the last check are looked at again: a coordinator of a
  million groups with one stuck does not walk them all every second.
- A group that becomes stuck is logged once per wait (group, state, since), at WARNING, naming up to
  ``LOG_MEMBERS`` of the members it waits for with their client id, host and what is missing.
- Kafka's own timeouts still decide (a member that does not rejoin is removed at the rebalance timeout);
  this only makes the wait visible.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import trio

from coordinator.core.waits import Waiting, is_stuck

log = logging.getLogger("groupcoord.groups")

CHECK_S = 1.0
LOG_MEMBERS = 10


class StuckGroups:
    def __init__(self, core: Any, config: Any) -> None:
        self.core = core
        self.threshold_ms = config["group.stuck.threshold.ms"]
        self.stuck = 0
        self._events = -1
        self._waiting: list[str] = []  # the groups that waited at the last check
        self._logged: set[tuple[str, str, int | None]] = set()

    async def run(self) -> None:
        while True:
            await trio.sleep(CHECK_S)
            try:
                self.check(int(time.time() * 1000))
            except Exception:  # a gauge must never take the server down
                log.exception("checking for stuck groups failed")

    def check(self, now_ms: int) -> list[Waiting]:
        events = self.core.rebalance_events
        if events != self._events:  # a rebalance started or ended: any group may wait now
            self._events = events
            waiting = self.core.waiting_groups()
        elif self._waiting:  # nothing started since: only the groups that waited may still wait
            waiting = self.core.waiting_groups(self._waiting)
        else:
            return []
        self._waiting = [w.group_id for w in waiting]
        stuck = [w for w in waiting if is_stuck(w, now_ms, self.threshold_ms)]
        self.stuck = len(stuck)
        keys = set()
        for w in stuck:
            key = (w.group_id, w.state, w.since_ms)
            keys.add(key)
            if key not in self._logged:
                shown = ", ".join(f"{m.member_id} (client {m.client_id or '-'}, host {m.client_host or '-'}: "
                                  f"{m.reason})" for m in w.members[:LOG_MEMBERS])
                more = f" and {len(w.members) - LOG_MEMBERS} more" if len(w.members) > LOG_MEMBERS else ""
                log.warning("group %s has been %s for %.1f s waiting for %d member(s): %s%s", w.group_id, w.state,
                            (now_ms - (w.since_ms or now_ms)) / 1000, len(w.members), shown, more)
        self._logged = keys
        return stuck
