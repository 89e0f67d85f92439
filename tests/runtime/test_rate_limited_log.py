"""RateLimitedLog: a write failure is logged at once, then at most one line per interval, and that line says
how many failures were not logged meanwhile (a dead disk under load must not flood the log)."""

from __future__ import annotations

import logging

import pytest

from coordinator.runtime.rate_limited_log import RateLimitedLog


def test_a_flood_of_failures_becomes_one_line_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    limited = RateLimitedLog(logging.getLogger("test.ratelimit"), interval_s=1.0, clock=lambda: now[0])
    with caplog.at_level(logging.ERROR, logger="test.ratelimit"):
        for i in range(5000):  # 5,000 failures within one second
            limited.error("offset commit of %s failed: %s", f"g{i}", "EIO")
            now[0] += 0.0001
        assert [r.getMessage() for r in caplog.records] == ["offset commit of g0 failed: EIO"]
        now[0] += 1.0
        limited.error("offsets write %s failed: %s", 7, "EIO")
        limited.error("offsets write %s failed: %s", 8, "EIO")
    assert len(caplog.records) == 2
    assert caplog.records[1].getMessage() == (
        "offsets write 7 failed: EIO (4999 more since the last such line)")
    assert limited.suppressed == 1
