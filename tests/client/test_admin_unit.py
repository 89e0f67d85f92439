"""AdminClient.list_groups against a stub cluster: a node still loading a shard is asked again, bounded."""

from __future__ import annotations

from typing import Any

import pytest

from client.admin import AdminClient
from client.errors import BrokerResponseError

LOADING, NOT_AVAILABLE = 14, 15


class StubConnection:
    def __init__(self, answers: list[int]) -> None:
        self.answers, self.sent = answers, 0

    def send(self, api_key: int, body: Any) -> tuple[int, dict[str, Any]]:
        assert api_key == 16
        code = self.answers[min(self.sent, len(self.answers) - 1)]
        self.sent += 1
        groups = [] if code else [{"group_id": "g", "protocol_type": "consumer", "group_state": "Stable",
                                   "group_type": "classic"}]
        return 5, {"error_code": code, "groups": groups}


class StubCluster:
    def __init__(self, conns: dict[int, StubConnection]) -> None:
        self.nodes, self.conns = dict.fromkeys(conns), conns

    def refresh_metadata(self, topics: Any) -> None:
        pass

    def connection(self, node_id: int) -> StubConnection:
        return self.conns[node_id]

    def close(self) -> None:
        pass


def admin_with(conns: dict[int, StubConnection], timeout_ms: int = 2000) -> AdminClient:
    admin = AdminClient("127.0.0.1:1", request_timeout_ms=timeout_ms, retry_backoff_ms=1)
    admin.cluster.close()
    admin.cluster = StubCluster(conns)  # type: ignore[assignment]
    return admin


def test_a_loading_node_is_asked_again_until_it_answers() -> None:
    loading = StubConnection([LOADING, NOT_AVAILABLE, 0])
    ready = StubConnection([0])
    listed = admin_with({0: loading, 1: ready}).list_groups()
    assert [g.group_id for g in listed] == ["g"]
    assert (loading.sent, ready.sent) == (3, 1)


def test_a_node_loading_past_the_request_timeout_raises_its_error() -> None:
    stuck = StubConnection([LOADING])
    with pytest.raises(BrokerResponseError, match="COORDINATOR_LOAD_IN_PROGRESS"):
        admin_with({0: stuck}, timeout_ms=50).list_groups()
    assert stuck.sent >= 2


def test_other_errors_raise_at_once() -> None:
    denied = StubConnection([31])  # CLUSTER_AUTHORIZATION_FAILED is not retried
    with pytest.raises(BrokerResponseError):
        admin_with({0: denied}).list_groups()
    assert denied.sent == 1
