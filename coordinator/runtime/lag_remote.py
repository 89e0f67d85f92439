"""The lag gauges' questions to other nodes (cluster mode, issue #37): ends and record timestamps of the
partitions this node does not host, asked of their leaders.

Rules:
- One connection per leader and call, on the inter-broker listener with its TLS and login
  (``replication.peer``), each bounded by ``REMOTE_TIMEOUT_S``; a leader that fails is skipped this time
  (one rate-limited WARNING a minute). Partitions with no live leader, or led here, are not asked.
- Ends: one ListOffsets (latest: the leader's replicated high watermark) per leader. Timestamps: Fetch of at
  most ``READ_BYTES`` per partition from the committed offset, at most ``REMOTE_FETCH_ROUNDS`` Fetches per
  leader (one offset per partition each).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import trio

from coordinator.cluster.state import NO_LEADER
from coordinator.core.lag import READ_BYTES, first_timestamp
from coordinator.runtime.rate_limited_log import RateLimitedLog
from coordinator.runtime.replica_fetcher import PeerConnection
from coordinator.runtime.security.peer_login import PeerAuthenticationError
from protocol.errors import ProtocolError

log = logging.getLogger("groupcoord.lag")

REMOTE_TIMEOUT_S = 5.0
REMOTE_FETCH_ROUNDS = 4
LIST_OFFSETS_VERSION = 5
FETCH_VERSION = 11


class RemoteLeaders:
    """Cluster mode: ends and record timestamps of partitions this node does not host, asked of their leaders
    on the inter-broker listener (``replication.peer``: its TLS and SASL login), one connection per leader and
    call, each bounded by ``REMOTE_TIMEOUT_S``; a leader that fails is skipped this time (rate-limited WARNING)."""

    def __init__(self, replication: Any) -> None:
        self.replication = replication
        self._problems = RateLimitedLog(log, 60.0)

    def _by_leader(self, tps: Iterable[tuple[str, int]]) -> dict[int, list[tuple[str, int]]]:
        view = self.replication.member.view
        out: dict[int, list[tuple[str, int]]] = {}
        for tp in tps:
            leader = view.leader(*tp)
            if leader != NO_LEADER and leader != self.replication.node_id:
                out.setdefault(leader, []).append(tp)
        return out

    async def ends(self, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        out: dict[tuple[str, int], int] = {}
        for node, parts in self._by_leader(tps).items():
            topics: dict[str, list[dict[str, Any]]] = {}
            for topic, p in parts:
                topics.setdefault(topic, []).append({"partition_index": p, "current_leader_epoch": -1,
                                                     "timestamp": -1})
            body = {"replica_id": -1, "isolation_level": 0,
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
            answer = await self._call(node, 2, LIST_OFFSETS_VERSION, body)
            for t in (answer or {}).get("topics", ()):
                for p in t["partitions"]:
                    if not p["error_code"] and p["offset"] >= 0:
                        out[(t["name"], p["partition_index"])] = p["offset"]
        return out

    async def timestamps(self, wanted: list[tuple[str, int, int]]) -> dict[tuple[str, int, int], int | None]:
        out: dict[tuple[str, int, int], int | None] = {}
        offsets: dict[tuple[str, int], list[int]] = {}
        for topic, p, offset in wanted:
            offsets.setdefault((topic, p), []).append(offset)
        for node, parts in self._by_leader(offsets).items():
            for round_ in range(REMOTE_FETCH_ROUNDS):  # one offset per partition per Fetch
                asked = [(tp, offsets[tp][round_]) for tp in parts if round_ < len(offsets[tp])]
                if not asked:
                    break
                topics: dict[str, list[dict[str, Any]]] = {}
                for (topic, p), offset in asked:
                    topics.setdefault(topic, []).append({"partition": p, "current_leader_epoch": -1,
                                                         "fetch_offset": offset, "log_start_offset": -1,
                                                         "partition_max_bytes": READ_BYTES})
                body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 4 * READ_BYTES,
                        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                        "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
                        "forgotten_topics_data": [], "rack_id": ""}
                answer = await self._call(node, 1, FETCH_VERSION, body)
                if answer is None:
                    break
                at = dict(asked)
                for t in answer.get("responses", ()):
                    for p in t["partitions"]:
                        tp = (t["topic"], p["partition_index"])
                        if tp in at and not p["error_code"] and p["records"]:
                            out[(tp[0], tp[1], at[tp])] = first_timestamp(p["records"], at[tp])
        return out

    async def _call(self, node: int, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any] | None:
        peer = self.replication.peer
        info = self.replication.member.view.brokers.get(node)
        at = info.endpoint(peer.listener) if info is not None else None
        if at is None:
            return None
        try:
            with trio.fail_after(REMOTE_TIMEOUT_S):
                stream = await peer.open(*at)
                async with stream:
                    conn = PeerConnection(stream, f"lag-{self.replication.node_id}")
                    await peer.login(lambda k, v, b: conn.call(k, v, b, REMOTE_TIMEOUT_S))
                    return await conn.call(api_key, version, body, REMOTE_TIMEOUT_S)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, ProtocolError,
                PeerAuthenticationError) as e:
            self._problems.warning("lag gauges: asking node %s (%s:%s) failed: %r", node, at[0], at[1], e)
            return None
