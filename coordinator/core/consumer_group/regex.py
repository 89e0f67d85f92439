"""Regular-expression subscriptions (ConsumerGroupHeartbeat v1 SubscribedTopicRegex), resolved by the
coordinator against its own view of the topics, as Kafka 4.0 does (research note kip848.md section 2.7).

Rules:
- A regex is compiled with RE2 (``google-re2``; Kafka uses RE2J) and matches a topic only as a FULL match
  of its name (RE2J ``matcher(topic).matches()``): ``^orders-.*`` matches ``orders-eu``, ``^topic*`` does
  not match ``topic-1``. One that does not compile is INVALID_REGULAR_EXPRESSION with Kafka's message.
- ``resolve`` gives the sorted names of the snapshot's topics that match, never an internal topic (a name
  starting "__") nor one the member may not DESCRIBE (``may_describe``, all allowed by default).
- ``snapshot_version`` stands for Kafka's metadata image version (the Version of record 16): groupcoord
  has no metadata log, so it is a deterministic int64 fingerprint of the snapshot's topic names (one join
  and one hash: cheap enough for every heartbeat of a regex group); the coordinator compares it only for
  equality ("a topic was created or deleted since this regex was resolved"). A topic re-created under the
  same name keeps the regex's names; its new id reaches the group through the subscription metadata.
- The refresh policy (``ConsumerGroups``, heartbeat.py) is Kafka's batched one made synchronous: a regex no
  member of the group used before is resolved in the heartbeat that brings it; the group's regexes are
  re-resolved at most once per ``REGEX_REFRESH_MS`` (Kafka's REGEX_BATCH_REFRESH_INTERVAL_MS, 10 s) since
  the latest resolution (the greatest Timestamp of its records), and only when the snapshot's version
  differs from a stored one. Compiled patterns are cached (bounded).
Pure: no I/O, no clock (``now_ms`` is given), no runtime import.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Any

import re2

from coordinator.core.consumer_group.model import Err, Reject

REGEX_REFRESH_MS = 10_000
INTERNAL_PREFIX = "__"

TopicFilter = Callable[[str], bool]


def allow_all(topic: str) -> bool:
    return True


_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # RE2 would print every bad pattern to stderr
# a client's pattern must not cost the server much memory: RE2 refuses (a compile error, answered
# INVALID_REGULAR_EXPRESSION) a pattern whose program needs more than this, and the cache keeps few of them
_OPTIONS.max_mem = 1 << 20


@lru_cache(maxsize=256)
def _compile(regex: str) -> Any:
    return re2.compile(regex, options=_OPTIONS)


def compile_regex(regex: str) -> Any:
    """The compiled pattern, or Reject(INVALID_REGULAR_EXPRESSION) (Kafka's throwIfRegularExpressionIsInvalid)."""
    try:
        return _compile(regex)
    except re2.error as e:
        detail = e.args[0] if e.args else ""
        if isinstance(detail, bytes):
            detail = detail.decode(errors="replace")
        raise Reject(Err.INVALID_REGULAR_EXPRESSION,
                     f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {detail}.") from None


def resolve(regex: str, topics: Iterable[str], may_describe: TopicFilter = allow_all) -> tuple[str, ...]:
    pattern = compile_regex(regex)
    return tuple(sorted(t for t in topics
                        if not t.startswith(INTERNAL_PREFIX) and pattern.fullmatch(t) and may_describe(t)))


def snapshot_version(topics: Iterable[str]) -> int:
    """A signed int64 that changes when a topic is created or deleted."""
    digest = hashlib.blake2b("\x00".join(sorted(topics)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)
