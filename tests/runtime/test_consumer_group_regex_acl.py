"""The runtime's DESCRIBE predicate for regex resolution (consumer_groups.ConsumerGroupService._may_describe):
without an authorizer every topic may be resolved; with one, a topic is kept only if the member's principal
(from its connection) may DESCRIBE it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from coordinator.runtime.consumer_groups import ConsumerGroupService
from protocol.acl_types import AclOperation, ResourceType


class FakeAuthorizer:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def authorize(self, principal: str, host: str, operation: int, resource_type: int, name: str) -> bool:
        self.calls.append((principal, host, operation, resource_type, name))
        return principal == "User:alice" and name.startswith("orders-")


def predicate(authorization: Any, principal: str) -> Any:
    service = SimpleNamespace(broker=SimpleNamespace(authorization=authorization))
    slot = SimpleNamespace(conn=SimpleNamespace(principal=principal, host="10.0.0.1"))
    return ConsumerGroupService._may_describe(service, slot)  # type: ignore[arg-type]


def test_without_an_authorizer_every_topic_may_be_described() -> None:
    may = predicate(None, "User:bob")
    assert may("orders-a") and may("anything")


def test_with_an_authorizer_the_members_principal_decides() -> None:
    authorizer = FakeAuthorizer()
    alice = predicate(SimpleNamespace(authorizer=authorizer), "User:alice")
    bob = predicate(SimpleNamespace(authorizer=authorizer), "User:bob")
    assert alice("orders-a") and not alice("payments") and not bob("orders-a")
    assert authorizer.calls[0] == ("User:alice", "10.0.0.1", AclOperation.DESCRIBE, ResourceType.TOPIC, "orders-a")
