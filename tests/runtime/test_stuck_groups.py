"""runtime/stuck_groups.py against a fake core: a full walk only after a rebalance event, otherwise only the
groups that waited are looked at again; stuck counted past the threshold, each wait logged once."""

from __future__ import annotations

import logging

import pytest

from coordinator.core.waits import LEADER_SYNC, Waited, Waiting
from coordinator.runtime.stuck_groups import StuckGroups


class FakeCore:
    def __init__(self) -> None:
        self.rebalance_events = 0
        self.waits: dict[str, Waiting] = {}
        self.calls: list[object] = []

    def waiting_groups(self, only=None):  # type: ignore[no-untyped-def]
        self.calls.append(None if only is None else sorted(only))
        return [w for g, w in self.waits.items() if only is None or g in only]


def wait(group: str, since: int) -> Waiting:
    return Waiting(group, "CompletingRebalance", since, (Waited("m1", "c1", "/h", LEADER_SYNC),), 1000)


def test_walks_all_groups_only_after_a_rebalance_event_and_logs_each_wait_once(caplog: pytest.LogCaptureFixture
                                                                               ) -> None:
    core = FakeCore()
    watch = StuckGroups(core, {"group.stuck.threshold.ms": 500})
    assert watch.check(0) == [] and core.calls == [None]  # first check: a walk (events unknown)
    core.calls.clear()
    assert watch.check(100) == [] and core.calls == []  # nothing waits, no event: no walk at all

    core.rebalance_events += 1
    core.waits["g"] = wait("g", 1000)
    with caplog.at_level(logging.WARNING, logger="groupcoord.groups"):
        assert watch.check(1200) == [] and watch.stuck == 0 and core.calls == [None]
        assert [w.group_id for w in watch.check(1600)] == ["g"] and watch.stuck == 1
        watch.check(1700)
    assert core.calls[1:] == [["g"], ["g"]]  # no event since: only the group that waited
    assert len([r for r in caplog.records if "group g has been CompletingRebalance" in r.getMessage()]) == 1

    del core.waits["g"]  # it synced: no event, and the narrow look sees it no longer waits
    watch.check(1800)
    assert watch.stuck == 0
    core.calls.clear()
    watch.check(1900)
    assert core.calls == []
