"""Log lines for events that can repeat thousands of times a second (a dead disk under load, a hostile
producer, a connection flood) without letting them fill the disk.

Rules: the first event logs at once; later ones within ``interval_s`` are counted, not logged; the next line
after the interval says how many it stands for. Metrics, not this, count every event. The clock is a
parameter, so tests need no sleeps.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class RateLimitedLog:
    """At most one line every ``interval_s`` seconds, each saying how many were not logged meanwhile."""

    def __init__(self, logger: logging.Logger, interval_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger, self.interval_s, self.clock = logger, interval_s, clock
        self.next_at = float("-inf")
        self.suppressed = 0

    def log(self, level: int, msg: str, *args: object) -> bool:
        """Log (True) or count (False) one event."""
        now = self.clock()
        if now < self.next_at:
            self.suppressed += 1
            return False
        if self.suppressed:
            msg += " (%d more since the last such line)"
            args += (self.suppressed,)
        self.suppressed = 0
        self.next_at = now + self.interval_s
        self.logger.log(level, msg, *args)
        return True

    def error(self, msg: str, *args: object) -> bool:
        return self.log(logging.ERROR, msg, *args)

    def warning(self, msg: str, *args: object) -> bool:
        return self.log(logging.WARNING, msg, *args)

    def info(self, msg: str, *args: object) -> bool:
        return self.log(logging.INFO, msg, *args)
