"""Topic ids (KIP-516) in Fetch v13+, which names topics by id instead of by name.

Rules:
- A topic's id is ``topics.topic_id(name)``: a name-based UUID, the same on every node and after a restart,
  as Metadata v10+ and CreateTopics v7+ answer it. An id resolves against the topics that exist now
  (``names()``: the hosted topics and ``__consumer_offsets``; in cluster mode every topic of the view).
- The id -> name map is a cache refreshed only when an id is missing from it (ids are computed for new names
  only): its size follows the topics that exist, never what clients send. An id no topic has resolves to
  None.
- ``resolve_fetch`` (v13+, before the handler reads the request): each topic entry gains its ``topic`` name;
  an unknown id gets the name "" (no topic can have it), so the read answers it as an unknown partition,
  and ``stamp_fetch`` turns that into UNKNOWN_TOPIC_ID (Kafka's answer for an id it does not know). v15+:
  ``replica_id`` is copied out of ``replica_state`` (-1 when absent), so handlers read one field at every
  version.
- ``stamp_fetch`` (v13+, on every response built): topics are answered in request order, one for one; each
  carries the id its request named.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any

from protocol.errors import ErrorCode

_UNKNOWN = ""  # the name an unknown id reads as: never a topic's (names have 1-249 characters)


class TopicIds:
    def __init__(self, names: Callable[[], Iterable[str]], id_of: Callable[[str], uuid.UUID]) -> None:
        self._names = names
        self._id_of = id_of
        self._by_id: dict[uuid.UUID, str] = {}

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        name = self._by_id.get(topic_id)
        if name is None:  # refresh: ids are computed only for names not seen before (a miss stays cheap)
            now = set(self._names())
            known = {n: i for i, n in self._by_id.items() if n in now}
            self._by_id = {known.get(n) or self._id_of(n): n for n in now}
            name = self._by_id.get(topic_id)
        return name

    def resolve_fetch(self, body: dict[str, Any], version: int) -> None:
        for t in body["topics"]:
            t["topic"] = self.name_of(t["topic_id"]) or _UNKNOWN
        if version >= 15:
            state = body.get("replica_state")
            body["replica_id"] = state["replica_id"] if state else -1


def stamp_fetch(body: dict[str, Any], responses: list[dict[str, Any]]) -> None:
    for asked, answer in zip(body["topics"], responses, strict=True):
        answer["topic_id"] = asked["topic_id"]
        if asked["topic"] == _UNKNOWN:
            for p in answer["partitions"]:
                p["error_code"] = ErrorCode.UNKNOWN_TOPIC_ID
