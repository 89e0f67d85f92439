"""`groupcoord cluster describe`: the cluster as one node's Metadata tells it.

Rules:
- Over the wire only (a Metadata request for all topics to `--bootstrap-server`); nothing reads ZooKeeper
  or the server's files, so the client package never imports the coordinator.
- Prints the cluster id, controller, node count and the counts of under-replicated and offline
  partitions, then one row per live node (host, port, rack, how many offsets partitions and other
  partitions it leads, how many replicas it holds), then, only if there are any, one row per unhealthy
  partition: OFFLINE (no leader: leader -1, LEADER_NOT_AVAILABLE) or UNDER-REPLICATED (a leader, but an ISR
  smaller than the replica set), as Kafka's ``kafka-topics --describe --unavailable-partitions`` /
  ``--under-replicated-partitions`` tell them. Exit 0; 1 when the node cannot be reached or answers an error.
- `--command-config FILE`: Kafka's client properties file for a secured listener (``client.security``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from client.admin_cli import table
from client.cluster import Cluster
from client.security import add_command_config_argument, security_from_args

METADATA = 3
OFFSETS_TOPIC = "__consumer_offsets"


def describe(metadata: dict[str, Any], out: Any = None) -> None:
    out = out or sys.stdout
    brokers = sorted(metadata["brokers"], key=lambda b: b["node_id"])
    leads_offsets: dict[int, int] = {}
    leads_other: dict[int, int] = {}
    replicas: dict[int, int] = {}
    unhealthy: list[tuple[str, int, str, int, str, str]] = []  # (topic, partition, status, leader, replicas, isr)
    for t in metadata["topics"]:
        for p in t["partitions"]:
            leader = p["leader_id"]
            reps, isr = list(p.get("replica_nodes") or ()), list(p.get("isr_nodes") or ())
            status = "OFFLINE" if leader < 0 else "UNDER-REPLICATED" if len(isr) < len(reps) else ""
            if status:
                unhealthy.append((t["name"], p["partition_index"], status, leader, ",".join(map(str, reps)),
                                  ",".join(map(str, isr))))
            if leader >= 0:
                counts = leads_offsets if t["name"] == OFFSETS_TOPIC else leads_other
                counts[leader] = counts.get(leader, 0) + 1
            for r in p.get("replica_nodes") or ():
                replicas[r] = replicas.get(r, 0) + 1
    controller = metadata.get("controller_id", -1)
    offline = sum(1 for u in unhealthy if u[2] == "OFFLINE")
    print(f"CLUSTER {metadata.get('cluster_id')}  CONTROLLER {controller}  NODES {len(brokers)}  "
          f"UNDER-REPLICATED {len(unhealthy) - offline}  OFFLINE {offline}", file=out)
    table(["NODE", "HOST", "PORT", "RACK", "CONTROLLER", "OFFSETS-LEADER", "OTHER-LEADER", "REPLICAS"],
          [(b["node_id"], b["host"], b["port"], b.get("rack"), "yes" if b["node_id"] == controller else "",
            leads_offsets.get(b["node_id"], 0), leads_other.get(b["node_id"], 0), replicas.get(b["node_id"], 0))
           for b in brokers], out)
    if unhealthy:
        print(file=out)
        table(["TOPIC", "PARTITION", "STATUS", "LEADER", "REPLICAS", "ISR"], sorted(unhealthy), out)


def cluster_describe(args: argparse.Namespace) -> int:
    cluster = Cluster(args.bootstrap_server, client_id="groupcoord-cluster", request_timeout_ms=15000,
                      security=security_from_args(args))
    try:
        _, resp = cluster.request_any(METADATA, lambda v: {"topics": None if v >= 1 else [],
                                                          "allow_auto_topic_creation": False})
    finally:
        cluster.close()
    describe(resp)
    return 0


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("cluster", help="cluster membership and leadership")
    csub = p.add_subparsers(dest="action", required=True)
    d = csub.add_parser("describe", help="nodes, controller, leaders per node, under-replicated and offline "
                                          "partitions (from Metadata)")
    d.add_argument("--bootstrap-server", "-b", default="127.0.0.1:9092")
    add_command_config_argument(d)
    d.set_defaults(run=cluster_describe)
