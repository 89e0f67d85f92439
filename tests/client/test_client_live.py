"""Connection, cluster metadata and describe_cluster against our daemon (ApiVersions and Metadata exist today)."""

from __future__ import annotations

import pytest
from server_process import ServerProcess  # type: ignore[import-not-found]

from client.admin import AdminClient
from client.cluster import Cluster
from client.connection import BrokerConnection
from client.errors import KafkaConnectionError
from protocol.messages import ALL


def test_connect_negotiates_the_highest_common_version_of_every_api(server: ServerProcess) -> None:
    conn = BrokerConnection("127.0.0.1", server.port).connect()
    try:
        # the daemon advertises (a subset of) our own declarations, ApiVersions and Metadata in full
        assert conn.api_ranges[18] == (0, 4) and conn.api_ranges[3] == (0, 13)
        assert all(ALL[k].min_version <= lo <= hi <= ALL[k].max_version for k, (lo, hi) in conn.api_ranges.items())
        assert conn.version_for(3) == 13 and conn.version_for(3, max_version=4) == 4
        version, body = conn.send(3, {"topics": []})
        assert version == 13 and body["brokers"][0]["port"] == server.port
    finally:
        conn.close()


def test_concurrent_requests_on_one_connection_are_matched_by_correlation_id(server: ServerProcess) -> None:
    conn = BrokerConnection("127.0.0.1", server.port).connect()
    try:
        futures = [conn.send_async(3, {"topics": []}, max_version=v) for v in (1, 5, 9, 13, 2, 12)]
        assert [f.version for f in futures] == [1, 5, 9, 13, 2, 12]
        bodies = [f.result(5) for f in futures]
        assert all(b["brokers"][0]["node_id"] == 0 for b in bodies)
        assert [("cluster_id" in b) for b in bodies] == [False, True, True, True, True, True]
        assert conn.in_flight == 0
    finally:
        conn.close()


def test_a_stopped_server_fails_pending_and_later_requests_clearly(server: ServerProcess) -> None:
    conn = BrokerConnection("127.0.0.1", server.port, request_timeout_ms=5000).connect()
    server.kill()
    with pytest.raises(KafkaConnectionError):
        conn.send(3, {"topics": []})
    assert not conn.connected
    with pytest.raises(KafkaConnectionError, match="not connected"):
        conn.send_async(3, {"topics": []})
    with pytest.raises(KafkaConnectionError, match="cannot connect"):
        BrokerConnection("127.0.0.1", server.port, connect_timeout_ms=1000).connect()


def test_cluster_learns_nodes_from_bootstrap_and_prefers_the_least_loaded(server: ServerProcess) -> None:
    cluster = Cluster(f"nowhere.invalid:1,{server.bootstrap}", connect_timeout_ms=1000)
    try:
        cluster.refresh_metadata([])
        assert list(cluster.nodes) == [0] and cluster.nodes[0].port == server.port
        first = cluster.least_loaded_connection()
        assert first.connected and cluster.least_loaded_connection() is first
    finally:
        cluster.close()


def test_admin_describe_cluster(server: ServerProcess) -> None:
    with AdminClient(server.bootstrap) as admin:
        info = admin.describe_cluster()
    assert [(n.node_id, n.host, n.port) for n in info.brokers] == [(0, "127.0.0.1", server.port)]
    assert info.controller_id == 0
