"""What a handler produces: records to append, responses to release, and write hooks.

Rules:
- ``Outcome.records`` are (shard_id, key, value|None) to append durably, in order.
- ``Outcome.completions`` are (token, response dict). When ``records`` is non-empty they may be released
  only once the records are durable; the runtime then calls ``Coordinator.on_appended(write_id)``, or
  ``Coordinator.on_append_failed(write_id, now_ms)`` whose Outcome *replaces* these completions.
- ``Outcome.producer`` (pid, epoch), when set, says the records are ONE transactional batch of that producer
  (a TxnOffsetCommit: they all go to one shard, and the outcome holds nothing else); the runtime appends
  them as such a batch, and ``on_appended`` puts them in the shard's pending transactional offsets.
- A completion to the DROPPED token (a parked request whose connection closed) is never emitted.
``Effects`` is the builder one handler call writes into; hooks registered with ``on_done``/``on_fail``
run when the write is durable / failed: both get a fresh Effects (fail hooks also the error code), whose
completions ``on_appended`` / ``on_append_failed`` return as a new Outcome. A handler sets ``producer`` on the
Effects only together with its transactional records.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .member import DROPPED

Record = tuple[int, bytes, bytes | None]
Completion = tuple[object, dict]


@dataclass(slots=True)
class Outcome:
    records: list[Record] = field(default_factory=list)
    completions: list[Completion] = field(default_factory=list)
    write_id: int | None = None
    producer: tuple[int, int] | None = None  # (producer id, epoch): the records are one transactional batch

    def response_for(self, token: object) -> dict | None:
        for t, response in self.completions:
            if t == token:
                return response
        return None


class Effects:
    __slots__ = ("completions", "done_hooks", "fail_hooks", "now_ms", "producer", "records")

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms
        self.records: list[Record] = []
        self.completions: list[Completion] = []
        self.done_hooks: list[Callable[[Effects], None]] = []
        self.fail_hooks: list[Callable[[Effects, int], None]] = []
        self.producer: tuple[int, int] | None = None

    def complete(self, token: object, response: dict) -> None:
        if token is not DROPPED:
            self.completions.append((token, response))

    def write(self, shard_id: int, key: bytes, value: bytes | None) -> None:
        self.records.append((shard_id, key, value))

    def on_done(self, hook: Callable[[Effects], None]) -> None:
        self.done_hooks.append(hook)

    def on_fail(self, hook: Callable[[Effects, int], None]) -> None:
        self.fail_hooks.append(hook)
