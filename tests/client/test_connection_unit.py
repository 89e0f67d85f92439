"""Version negotiation and bootstrap parsing (pure functions)."""

from __future__ import annotations

import pytest

from client.cluster import parse_bootstrap
from client.connection import BrokerConnection, negotiate_ranges
from client.errors import UnsupportedVersionError


def test_negotiated_range_is_the_overlap_of_node_and_our_declarations() -> None:
    node = [{"api_key": 3, "min_version": 0, "max_version": 20},     # newer node: capped at our 13
            {"api_key": 1, "min_version": 0, "max_version": 8},      # Fetch: ours start at 4
            {"api_key": 999, "min_version": 0, "max_version": 1}]    # unknown to us
    assert negotiate_ranges(node) == {3: (0, 13), 1: (4, 8)}
    old_fetch = [{"api_key": 1, "min_version": 0, "max_version": 3}]  # Fetch: ours are 4-12, no overlap
    assert negotiate_ranges(old_fetch) == {}


def test_version_for_picks_the_highest_usable_version_or_says_why_not() -> None:
    conn = BrokerConnection("127.0.0.1", 1)
    conn.api_ranges = {3: (0, 13), 8: (2, 5)}
    assert conn.version_for(3) == 13 and conn.version_for(3, max_version=9) == 9
    assert conn.version_for(8, min_version=4) == 5
    with pytest.raises(UnsupportedVersionError):
        conn.version_for(8, max_version=1)
    with pytest.raises(UnsupportedVersionError):
        conn.version_for(1)


def test_bootstrap_servers_parse_from_a_string_or_a_list() -> None:
    assert parse_bootstrap("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap(["[::1]:9092"]) == [("::1", 9092)]
    with pytest.raises(ValueError):
        parse_bootstrap("no-port")
