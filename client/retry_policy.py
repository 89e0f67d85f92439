"""Retry policy (seed 001): the retry sequence, its topics, and the headers a retried copy carries.

Rules and invariants:
- A policy is a sequence of delays, written as in the seed: ``"5m,5m,30m,30m,30m,1h"`` (units ms, s, m,
  h, d; whitespace ignored). Its length is the maximum number of retries; retry ``n`` (1-based) waits
  ``delays[n-1]`` and is published to the retry topic of that delay.
- One retry topic per distinct delay: ``retry_topic_pattern`` (default ``"{topic}-retry-{delay}"``) with
  the delay written canonically in the largest unit that divides it (``300000`` ms -> ``5m``, ``90s``
  stays ``90s``); one failed (dead-letter) topic per main topic, ``failed_topic_pattern`` (default
  ``"{topic}-failed"``). A record in a retry topic always has a due time that grows along the partition,
  because every copy in that topic was given the same delay (the seed's point: never mix delays in a topic).
- ``not_retryable`` exception classes (and their subclasses) go straight to the failed topic.
- Headers (values ASCII): ``retry_number`` (1..len(delays); in the failed topic, the retries done),
  ``retry_timestamp`` (due time, epoch ms; in the failed topic, when it failed), ``retry_original_topic``,
  ``retry_original_partition``, ``retry_original_offset`` (where the record was first consumed) and
  ``retry_exception`` (``Class: message``, at most 1 KiB of UTF-8). ``copy_headers`` replaces earlier
  ``retry_*`` headers and keeps the user's headers in order.
- Pure: no clock and no I/O; callers pass ``now_ms``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
RETRY_NUMBER = "retry_number"
RETRY_TIMESTAMP = "retry_timestamp"
RETRY_ORIGINAL_TOPIC = "retry_original_topic"
RETRY_ORIGINAL_PARTITION = "retry_original_partition"
RETRY_ORIGINAL_OFFSET = "retry_original_offset"
RETRY_EXCEPTION = "retry_exception"
RETRY_HEADERS = (RETRY_NUMBER, RETRY_TIMESTAMP, RETRY_ORIGINAL_TOPIC, RETRY_ORIGINAL_PARTITION,
                 RETRY_ORIGINAL_OFFSET, RETRY_EXCEPTION)
MAX_EXCEPTION_BYTES = 1024
_DELAY = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")

Headers = tuple[tuple[str, bytes | None], ...]


def parse_delay(text: str) -> int:
    """``"5m"`` -> 300000 (ms). Raises ValueError for anything else, zero included."""
    m = _DELAY.match(text)
    if m is None:
        raise ValueError(f"bad delay {text!r}: want a number and a unit among {', '.join(UNITS_MS)} (e.g. 5m)")
    ms = int(m.group(1)) * UNITS_MS[m.group(2)]
    if ms <= 0:
        raise ValueError(f"bad delay {text!r}: must be positive")
    return ms


def format_delay(ms: int) -> str:
    """The canonical label: the largest unit that divides ``ms`` (300000 -> "5m", 1500 -> "1500ms")."""
    for unit in ("d", "h", "m", "s"):
        if ms % UNITS_MS[unit] == 0:
            return f"{ms // UNITS_MS[unit]}{unit}"
    return f"{ms}ms"


def exception_text(exc: BaseException) -> bytes:
    """``Class: message`` in UTF-8, cut to ``MAX_EXCEPTION_BYTES`` without splitting a character."""
    text = f"{type(exc).__qualname__}: {exc}".encode()
    if len(text) <= MAX_EXCEPTION_BYTES:
        return text
    return text[:MAX_EXCEPTION_BYTES].decode("utf-8", "ignore").encode()


def header_value(headers: Iterable[tuple[str, bytes | None]], name: str) -> bytes | None:
    """The last value of header ``name`` (None when absent)."""
    found = None
    for k, v in headers:
        if k == name:
            found = v
    return found


def header_int(headers: Iterable[tuple[str, bytes | None]], name: str) -> int | None:
    return ascii_int(header_value(headers, name))


def ascii_int(value: bytes | None) -> int | None:
    """An ASCII decimal header value as an int (None when absent or not a number)."""
    if value is None:
        return None
    try:
        return int(value.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None


def strip_retry_headers(headers: Iterable[tuple[str, bytes | None]]) -> Headers:
    """The user's headers only (what a replay re-injects)."""
    return tuple((k, v) for k, v in headers if k not in RETRY_HEADERS)


class Origin(NamedTuple):
    """Where a record was first consumed from (its main topic coordinates)."""

    topic: str
    partition: int
    offset: int


def copy_headers(headers: Iterable[tuple[str, bytes | None]], retry_number: int, timestamp_ms: int,
                 origin: Origin, exc: BaseException) -> Headers:
    return (*(strip_retry_headers(headers) if headers else ()),
            (RETRY_NUMBER, b"%d" % retry_number),
            (RETRY_TIMESTAMP, b"%d" % timestamp_ms),
            (RETRY_ORIGINAL_TOPIC, origin.topic.encode()),
            (RETRY_ORIGINAL_PARTITION, b"%d" % origin.partition),
            (RETRY_ORIGINAL_OFFSET, b"%d" % origin.offset),
            (RETRY_EXCEPTION, exception_text(exc)))


class Route(NamedTuple):
    """Where a failed attempt goes: ``topic``, with ``retry_number`` and ``timestamp_ms`` headers (a tuple:
    one is made per failed attempt, cheaply)."""

    topic: str
    retry_number: int
    timestamp_ms: int
    failed: bool
    delay_ms: int = 0
    label: str = ""  # the delay label ("5m") of a retry route


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    delays_ms: tuple[int, ...]
    not_retryable: tuple[type[BaseException], ...] = ()
    retry_topic_pattern: str = "{topic}-retry-{delay}"
    failed_topic_pattern: str = "{topic}-failed"
    _labels: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _names: dict[tuple[str, int], str] = field(init=False, repr=False, compare=False)  # (topic, retry) -> topic

    def __post_init__(self) -> None:
        if not self.delays_ms or any(d <= 0 for d in self.delays_ms):
            raise ValueError("a retry policy needs at least one positive delay")
        for pattern, needs in ((self.retry_topic_pattern, ("{topic}", "{delay}")),
                               (self.failed_topic_pattern, ("{topic}",))):
            if any(n not in pattern for n in needs):
                raise ValueError(f"topic pattern {pattern!r} must contain {' and '.join(needs)}")
        object.__setattr__(self, "_labels", tuple(format_delay(d) for d in self.delays_ms))
        object.__setattr__(self, "_names", {})

    @classmethod
    def parse(cls, text: str, not_retryable: Sequence[type[BaseException]] = (), **patterns: str) -> RetryPolicy:
        """``RetryPolicy.parse("5m,5m,30m,30m,30m,1h", not_retryable=[ValueError])``."""
        parts = [p for p in text.split(",") if p.strip()]
        return cls(tuple(parse_delay(p) for p in parts), tuple(not_retryable), **patterns)

    def __str__(self) -> str:
        return ",".join(self._labels)

    @property
    def max_retries(self) -> int:
        return len(self.delays_ms)

    def labels(self) -> list[str]:
        """Distinct delay labels in order of first use ("5m", "30m", "1h")."""
        return list(dict.fromkeys(self._labels))

    def retry_topic(self, topic: str, label: str) -> str:
        return self.retry_topic_pattern.format(topic=topic, delay=label)

    def retry_topics(self, topic: str) -> list[str]:
        return [self.retry_topic(topic, label) for label in self.labels()]

    def failed_topic(self, topic: str) -> str:
        return self.failed_topic_pattern.format(topic=topic)

    def is_retryable(self, exc: BaseException) -> bool:
        return not isinstance(exc, self.not_retryable)

    def route(self, topic: str, retries_done: int, exc: BaseException, now_ms: int) -> Route:
        """Where the copy of a record of main topic ``topic`` goes after attempt ``retries_done + 1`` raised."""
        n = retries_done + 1
        failed = n > len(self.delays_ms) or not self.is_retryable(exc)
        name = self._names.get((topic, 0 if failed else n))
        if name is None:  # topic names are formatted once per (topic, retry number), not per record
            name = self.failed_topic(topic) if failed else self.retry_topic(topic, self._labels[n - 1])
            if len(self._names) < 10_000:
                self._names[(topic, 0 if failed else n)] = name
        new = tuple.__new__  # Route(...) without NamedTuple's Python-level __new__: one per failed attempt
        if failed:
            return new(Route, (name, retries_done, now_ms, True, 0, ""))
        delay = self.delays_ms[n - 1]
        return new(Route, (name, n, now_ms + delay, False, delay, self._labels[n - 1]))
