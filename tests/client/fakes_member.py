"""Fakes for unit tests of the group member: a manual clock, a scripted coordinator, recording hooks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from client.cluster import Node
from client.errors import KafkaError
from client.member import Generation, JoinedMember

COORD = Node(7, "127.0.0.1", 9)


class ManualClock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> float:
        return self.ms / 1000

    def advance(self, ms: int) -> None:
        self.ms += ms


class Done:
    """An already-completed response (or failure)."""

    def __init__(self, version: int, body: dict[str, Any] | None, error: KafkaError | None = None) -> None:
        self.version, self._body, self._error = version, body, error

    def done(self) -> bool:
        return True

    def wait(self, timeout_s: float | None = None) -> bool:
        return True

    def result(self, timeout_s: float | None = None) -> dict[str, Any]:
        if self._error is not None:
            raise self._error
        assert self._body is not None
        return self._body


class Never:
    """A response that has not arrived (yet); ``arrive`` completes it."""

    version = 9

    def __init__(self) -> None:
        self.body: dict[str, Any] | None = None

    def arrive(self, body: dict[str, Any]) -> None:
        self.body = body

    def done(self) -> bool:
        return self.body is not None

    def wait(self, timeout_s: float | None = None) -> bool:
        return self.body is not None

    def result(self, timeout_s: float | None = None) -> dict[str, Any]:
        assert self.body is not None
        return self.body


class FakeTransport:
    """Answers each api key from a queue of scripted replies (dicts, KafkaErrors or futures)."""

    def __init__(self) -> None:
        self.replies: dict[int, list[Any]] = {}
        self.sent: list[tuple[int, dict[str, Any]]] = []
        self.dropped: list[Node] = []
        self.find_replies: list[Node | KafkaError] = []

    def script(self, api_key: int, *replies: Any) -> None:
        self.replies.setdefault(api_key, []).extend(replies)

    def bodies(self, api_key: int) -> list[dict[str, Any]]:
        return [b for k, b in self.sent if k == api_key]

    def find_coordinator(self, group_id: str) -> Node:
        reply = self.find_replies.pop(0) if self.find_replies else COORD
        if isinstance(reply, KafkaError):
            raise reply
        return reply

    def send_async(self, node: Node, api_key: int, body: Any) -> Any:
        version = 9 if api_key == 11 else 5 if api_key in (13, 14) else 4
        payload = body(version) if callable(body) else body
        self.sent.append((api_key, payload))
        queue = self.replies.get(api_key)
        if not queue:
            raise AssertionError(f"unscripted request {api_key}: {payload}")
        reply = queue.pop(0)
        if isinstance(reply, KafkaError):
            return Done(version, None, reply)
        if isinstance(reply, dict):
            return Done(version, reply)
        return reply

    def drop(self, node: Node) -> None:
        self.dropped.append(node)


class RecordingHooks:
    def __init__(self, assignment: bytes = b"A") -> None:
        self.calls: list[tuple[str, Any]] = []
        self.assignment = assignment

    def join_protocols(self) -> list[tuple[str, bytes]]:
        return [("range", b"sub")]

    def on_join_prepare(self, generation: Generation, lost: bool) -> None:
        self.calls.append(("prepare", (generation.generation_id, lost)))

    def perform_assignment(self, leader_id: str, protocol: str, members: list[JoinedMember],
                           skip_assignment: bool) -> dict[str, bytes]:
        self.calls.append(("assign", [m.member_id for m in members]))
        return {} if skip_assignment else {m.member_id: self.assignment for m in members}

    def on_join_complete(self, generation: Generation, assignment: bytes) -> None:
        self.calls.append(("complete", (generation.generation_id, assignment)))


def join_ok(generation: int, member_id: str, leader: str, members: list[str] | None = None) -> dict[str, Any]:
    return {"error_code": 0, "generation_id": generation, "member_id": member_id, "leader": leader,
            "protocol_name": "range", "skip_assignment": False,
            "members": [{"member_id": m, "group_instance_id": None, "metadata": b"sub"} for m in members or []]}


def sync_ok(assignment: bytes = b"A") -> dict[str, Any]:
    return {"error_code": 0, "assignment": assignment}


def error(code: int, **extra: Any) -> dict[str, Any]:
    return {"error_code": code, "generation_id": -1, "member_id": "", "leader": "", "protocol_name": None,
            "members": [], "assignment": b"", **extra}


def noop(*_: Any) -> Callable[..., None]:
    return lambda *a: None
