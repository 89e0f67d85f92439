"""`groupcoord groups ...`, `groupcoord topics ...` (and `retry ...`, from retry_cli): admin commands printing tables.

Rules:
- In the manner of kafka-consumer-groups / kafka-topics: one command per action, a `--bootstrap-server`
  (default 127.0.0.1:9092), plain column-aligned tables on stdout, errors as one line on stderr with a
  non-zero exit status (1 for a Kafka error, 2 for bad usage).
- Reset-offsets is a dry run unless `--execute` is given, and only applies to a group with no members
  (Kafka refuses to move a live group's offsets). Its commits go out with the client id
  `groupcoord-reset-offsets/<OS user>`, so the offset history records who reset.
- `groups offsets GROUP --history` prints the group's last commits per partition instead (groupcoord's
  DescribeGroups extension, `offsets.history.size`; newest first, times in UTC, with generation, member, client id
  and host). `reset-offsets GROUP --to-commit-time ISO-TIME` sets each partition (of the `--topic`s given, else of
  every partition in the history) to what the group had committed at that time: the newest kept commit at or
  before it; a partition whose kept commits all came later keeps its offset and is shown as such.
- Everything goes over the wire through the client package; nothing reads the server's files.
- Every command takes `--command-config FILE`, Kafka's client properties file (security.protocol,
  sasl.mechanism, sasl.jaas.config, ssl.truststore.location...; ``client.security``): every connection of
  the command uses it. A bad file is bad usage (exit 2); a refused login is a Kafka error (exit 1).
- `groups history GROUP` prints the group's recorded rebalances newest first (groupcoord's DescribeGroups
  extension; times in UTC); `--json` prints the same data as one JSON object.
- `groups config GROUP` prints the group's configs (value and source: DYNAMIC_GROUP_CONFIG when set for the
  group, DEFAULT_CONFIG the server's); `--set k=v` / `--delete k` (repeatable) change them first
  (IncrementalAlterConfigs, at the group's coordinator).
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from client.admin import AdminClient, NewTopic
from client.cluster import Cluster
from client.consumer_protocol import TopicPartition
from client.errors import KafkaError, SecurityConfigError, UnsupportedVersionError
from client.security import add_command_config_argument, security_from_args
from protocol.errors import ErrorCode, error_name

LIST_OFFSETS, OFFSET_COMMIT = 2, 8
EARLIEST, LATEST = -2, -1


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], out: Any = None) -> None:
    out = out or sys.stdout
    rows = [["-" if v is None else str(v) for v in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip(), file=out)
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip(), file=out)


def list_offsets(cluster: Cluster, tps: Iterable[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
    """Offsets at `timestamp` (-2 earliest, -1 latest, else the first offset at or after that time)."""
    by_leader: dict[int, list[TopicPartition]] = {}
    tps = list(tps)
    cluster.refresh_metadata(sorted({tp.topic for tp in tps}))
    for tp in tps:
        leader = cluster.leader_for(tp.topic, tp.partition)
        if leader is None:
            raise KafkaError(f"no leader for {tp.topic}-{tp.partition}")
        by_leader.setdefault(leader, []).append(tp)
    out: dict[TopicPartition, int] = {}
    for leader, parts in by_leader.items():
        topics: dict[str, list[int]] = {}
        for tp in parts:
            topics.setdefault(tp.topic, []).append(tp.partition)
        body = {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": t, "partitions": [{"partition_index": p, "timestamp": timestamp} for p in ps]}
            for t, ps in topics.items()]}
        _, resp = cluster.connection(leader).send(LIST_OFFSETS, body)
        for t in resp["topics"]:
            for p in t["partitions"]:
                if p["error_code"]:
                    raise KafkaError(f"ListOffsets {t['name']}-{p['partition_index']}: "
                                     f"{error_name(p['error_code'])}")
                out[TopicPartition(t["name"], p["partition_index"])] = p["offset"]
    return out


# ---------------------------------------------------------------------------- groups
def groups_list(admin: AdminClient, args: argparse.Namespace) -> int:
    listings = sorted(admin.list_groups(states=args.state or None), key=lambda g: g.group_id)
    typed = any(g.group_type is not None for g in listings)  # ListGroups v5+: classic / consumer
    table(["GROUP", "STATE", "PROTOCOL-TYPE"] + (["TYPE"] if typed else []),
          [(g.group_id, g.state, g.protocol_type or "-") + ((g.group_type,) if typed else ()) for g in listings])
    return 0


def _coordinator_text(node: Any) -> str:
    return f"{node.host}:{node.port} (id {node.node_id})" if node else "-"


def _consumer_group_types(admin: AdminClient) -> dict[str, str | None]:
    """group id -> type from ListGroups (empty if the listing fails: describe then finds out by itself)."""
    try:
        return {g.group_id: g.group_type for g in admin.list_groups()}
    except KafkaError:
        return {}


def groups_describe(admin: AdminClient, args: argparse.Namespace) -> int:
    """A classic group with DescribeGroups; a KIP-848 one (ListGroups type "consumer", or a group
    DescribeGroups answers Dead / GROUP_ID_NOT_FOUND for, that ConsumerGroupDescribe knows) with
    ConsumerGroupDescribe."""
    rc = 0
    types = _consumer_group_types(admin)
    for gid in args.group:
        if types.get(gid) == "consumer" and _print_consumer_group(admin, gid):
            continue
        d = admin.describe_groups([gid])[0]
        not_classic = d.error_code == ErrorCode.GROUP_ID_NOT_FOUND or (not d.error_code and d.state == "Dead")
        if not_classic and types.get(gid) != "consumer" and _print_consumer_group(admin, gid):
            continue
        if d.error_code:
            print(f"group {d.group_id}: {d.error}", file=sys.stderr)
            rc = 1
            continue
        print(f"GROUP {d.group_id}  STATE {d.state}  PROTOCOL {d.protocol or '-'}  "
              f"COORDINATOR {_coordinator_text(d.coordinator)}  MEMBERS {len(d.members)}")
        table(["CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"],
              [(m.member_id, m.group_instance_id, m.client_host, m.client_id, len(m.assignment),
                ",".join(f"{tp.topic}-{tp.partition}" for tp in m.assignment)) for m in d.members])
        if d.waiting_for:  # groupcoord's extension: who this rebalance waits for
            since = "" if d.waiting_since_ms is None else \
                f" {max(0.0, datetime.now(UTC).timestamp() - d.waiting_since_ms / 1000):.1f} s"
            print(f"WAITING{since} FOR {len(d.waiting_for)} MEMBER(S)")
            table(["CONSUMER-ID", "HOST", "CLIENT-ID", "WAITING-FOR"],
                  [(w.member_id, w.client_host, w.client_id, w.reason) for w in d.waiting_for])
        print()
    return rc


def _print_consumer_group(admin: AdminClient, gid: str) -> bool:
    """Print the group as ConsumerGroupDescribe sees it; False (nothing printed) if the node does not serve
    API 69 or does not know the group as a consumer group."""
    try:
        [d] = admin.describe_consumer_groups([gid])
    except UnsupportedVersionError:
        return False
    if d.error_code:
        return False
    print(f"GROUP {d.group_id}  TYPE consumer  STATE {d.state}  GROUP-EPOCH {d.group_epoch}  "
          f"ASSIGNMENT-EPOCH {d.assignment_epoch}  ASSIGNOR {d.assignor or '-'}  "
          f"COORDINATOR {_coordinator_text(d.coordinator)}  MEMBERS {len(d.members)}")
    table(["CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "MEMBER-EPOCH", "#PARTITIONS", "ASSIGNMENT"],
          [(m.member_id, m.instance_id, m.client_host, m.client_id, m.member_epoch, len(m.assignment),
            ",".join(f"{tp.topic}-{tp.partition}" for tp in m.assignment)) for m in d.members])
    print()
    return True


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _ids(ids: Sequence[str]) -> str:
    if not ids:
        return "-"
    return ",".join(ids)


def groups_history(admin: AdminClient, args: argparse.Namespace) -> int:
    """The group's last rebalances (group.history.size), newest first."""
    gid = args.group[0]
    h = admin.group_history(gid)
    if h.error_code:
        print(f"groupcoord: group {gid}: {h.error}", file=sys.stderr)
        return 1
    if args.json:
        out = {"group_id": h.group_id, "state": h.state, "rebalances": [
            {"generation": e.generation, "start_ms": e.start_ms, "end_ms": e.end_ms if e.end_ms >= 0 else None,
             "duration_ms": e.duration_ms,
             "trigger": e.trigger, "member_id": e.member_id, "client_id": e.client_id, "client_host": e.client_host,
             "reason": e.reason, "members_before": e.members_before, "members_after": e.members_after,
             "joined": list(e.joined), "left": list(e.left), "protocol_type": e.protocol_type,
             "protocol": e.protocol, "leader": e.leader, "seq": e.seq} for e in h.entries]}
        print(json.dumps(out, indent=2))
        return 0
    print(f"GROUP {h.group_id}  STATE {h.state}  COORDINATOR {_coordinator_text(h.coordinator)}  "
          f"REBALANCES {len(h.entries)} (newest first)")
    table(["GENERATION", "STARTED", "DURATION-MS", "TRIGGER", "MEMBER", "CLIENT-ID", "HOST", "REASON", "MEMBERS",
           "JOINED", "LEFT", "PROTOCOL"],
          [(e.generation, _utc(e.start_ms), "reconciling" if e.duration_ms is None else e.duration_ms, e.trigger,
            e.member_id, e.client_id, e.client_host, e.reason, f"{e.members_before}->{e.members_after}", _ids(e.joined), _ids(e.left), e.protocol)
           for e in h.entries])
    if not h.entries and h.described_version < 5:
        print("(this coordinator sends no rebalance history: DescribeGroups below v5)")
    return 0


def groups_offsets(admin: AdminClient, args: argparse.Namespace) -> int:
    if args.history:
        return max(_offset_history(admin, gid) for gid in args.group)
    from client.range_reader import RangeReader

    rc = 0
    # LAG-SECONDS reads the record at each lagging committed offset
    reader = RangeReader(args.bootstrap_server, security=security_from_args(args), request_timeout_ms=15000,
                         max_partition_fetch_bytes=65536, retries=1)
    try:
        for gid in args.group:
            _group_offsets(admin, reader, gid)
    finally:
        reader.close()
    return rc


def _offset_history(admin: AdminClient, gid: str) -> int:
    h = admin.offset_history(gid)
    if h.error_code:
        print(f"groupcoord: group {gid}: {h.error}", file=sys.stderr)
        return 1
    print(f"GROUP {gid}  STATE {h.state}  COORDINATOR {_coordinator_text(h.coordinator)}  "
          f"PARTITIONS {len(h.partitions)}  (commits newest first)")
    table(["TOPIC", "PARTITION", "SEQ", "OFFSET", "COMMITTED", "GENERATION", "MEMBER", "CLIENT-ID", "HOST"],
          [(tp.topic, tp.partition, e.seq, e.offset, _utc(e.commit_ms), e.generation, e.member_id or "-",
            e.client_id or "-", e.client_host or "-") for tp, entries in sorted(h.partitions.items()) for e in entries])
    if not h.partitions and h.described_version < 5:
        print("(this coordinator sends no offset history: DescribeGroups below v5)")
    print()
    return 0


def _group_offsets(admin: AdminClient, reader: Any, gid: str) -> None:
    offsets = admin.list_group_offsets(gid)
    owners: dict[TopicPartition, Any] = {}
    desc = admin.describe_groups([gid])[0]
    for m in desc.members:
        for tp in m.assignment:
            owners[tp] = m
    ends = list_offsets(admin.cluster, offsets, LATEST) if offsets else {}
    print(f"GROUP {gid}  STATE {desc.state}")
    rows = []
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    for tp in sorted(set(offsets) | set(owners)):
        cur = offsets[tp].offset if tp in offsets else None
        end = ends.get(tp)
        lag = end - cur if cur is not None and end is not None and cur >= 0 else None
        age = None if lag is None else 0.0 if lag <= 0 else lag_seconds(reader, tp, cur or 0, now_ms)
        m = owners.get(tp)
        rows.append((tp.topic, tp.partition, cur, end, lag, None if age is None else f"{age:.1f}",
                     m.member_id if m else None, m.client_host if m else None, m.client_id if m else None))
    table(["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "LAG-SECONDS", "CONSUMER-ID",
           "HOST", "CLIENT-ID"], rows)
    print()


def lag_seconds(reader: Any, tp: TopicPartition, committed: int, now_ms: int) -> float | None:
    """Age of the oldest record the group has not consumed (the first at or past ``committed``), in seconds;
    None when it cannot be read (retention deleted it, or no access)."""
    try:
        start = max(committed, reader.log_bounds(tp)[0])
        for _, records in reader.read(tp, start, start + 1):
            if records:
                return max(0.0, (now_ms - records[0].timestamp) / 1000)
    except KafkaError:
        return None
    return None


def groups_copy(admin: AdminClient, args: argparse.Namespace) -> int:
    """Copy SRC's committed offsets to DST, which must hold none and have no members (issue #37); a dry run
    unless --execute, as the other commands that move offsets. Committed as a simple group (generation -1)."""
    src, dst = args.src, args.dst
    offsets = admin.list_group_offsets(src)
    if not offsets:
        print(f"groupcoord: group {src} has no committed offsets", file=sys.stderr)
        return 1
    target = admin.describe_groups([dst])[0]
    if target.members or admin.list_group_offsets(dst):
        print(f"groupcoord: group {dst} is not empty (state {target.state}, {len(target.members)} members, "
              "committed offsets): copy only into a group without offsets and members", file=sys.stderr)
        return 1
    table(["TOPIC", "PARTITION", "OFFSET"], [(tp.topic, tp.partition, o.offset) for tp, o in sorted(offsets.items())])
    if not args.execute:
        print(f"(dry run: add --execute to commit these offsets for {dst})")
        return 0
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp, o in offsets.items():
        topics.setdefault(tp.topic, []).append({"partition_index": tp.partition, "committed_offset": o.offset,
                                               "committed_leader_epoch": o.leader_epoch,
                                               "committed_metadata": o.metadata or ""})
    body = {"group_id": dst, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "retention_time_ms": -1, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
    _, resp = admin.cluster.coordinator_connection(admin.cluster.find_coordinator(dst)).send(OFFSET_COMMIT, body)
    errors = [(t["name"], p["partition_index"], p["error_code"]) for t in resp["topics"] for p in t["partitions"]
              if p["error_code"]]
    for t, p, code in errors:
        print(f"groupcoord: {t}-{p}: {error_name(code)}", file=sys.stderr)
    if not errors:
        print(f"copied {len(offsets)} offsets from {src} to {dst}")
    return 1 if errors else 0


def groups_delete(admin: AdminClient, args: argparse.Namespace) -> int:
    results = admin.delete_groups(args.group)
    table(["GROUP", "RESULT"], [(r.group_id, r.error or "deleted") for r in results])
    return 1 if any(r.error_code for r in results) else 0


def groups_config(admin: AdminClient, args: argparse.Namespace) -> int:
    """Describe a group's configs, or change them first (--set / --delete: IncrementalAlterConfigs)."""
    gid = args.group
    changes = _key_values(args.set)
    if changes or args.delete:
        admin.alter_group_configs(gid, changes, args.delete or ())
        changed = [f"{k}={v}" for k, v in changes.items()] + [f"{k} (deleted)" for k in args.delete or ()]
        table(["GROUP", "RESULT"], [(gid, "altered: " + ", ".join(changed))])
        print()
    configs = admin.describe_group_configs(gid)
    table(["CONFIG", "VALUE", "SOURCE"], [(c["name"], c["value"], _SOURCES.get(c["config_source"], "UNKNOWN"))
                                          for c in configs])
    return 0


def groups_delete_offsets(admin: AdminClient, args: argparse.Namespace) -> int:
    gid = args.group[0]
    if args.partition:
        tps = [TopicPartition(t, p) for t in args.topic for p in args.partition]
    else:
        admin.cluster.refresh_metadata(args.topic)
        counts = admin.cluster.partition_counts(args.topic)
        missing = [t for t in args.topic if not counts.get(t)]
        if missing:
            print(f"groupcoord: unknown topic(s): {', '.join(missing)}", file=sys.stderr)
            return 1
        tps = [TopicPartition(t, p) for t in args.topic for p in range(counts[t])]
    try:
        results = admin.delete_group_offsets(gid, tps)
    except KafkaError as e:
        print(f"groupcoord: group {gid}: {e}", file=sys.stderr)
        return 1
    table(["TOPIC", "PARTITION", "RESULT"],
          [(tp.topic, tp.partition, error_name(code) if code else "deleted") for tp, code in sorted(results.items())])
    return 1 if any(results.values()) else 0


def _parse_time(text: str, option: str = "--to-datetime") -> int:
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise SystemExit(f"groupcoord: {option} wants an ISO time like 2026-11-21T10:00:00, got {text!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def groups_reset_offsets(admin: AdminClient, args: argparse.Namespace) -> int:
    gid = args.group[0]
    desc = admin.describe_groups([gid])[0]
    if desc.members:
        print(f"groupcoord: group {gid} has {len(desc.members)} active members (state {desc.state}); stop them "
              "before resetting offsets", file=sys.stderr)
        return 1
    if args.to_commit_time:
        return _reset_to_commit_time(admin, args, gid)
    if not args.topic:
        print("groupcoord: reset-offsets needs --topic (but with --to-commit-time)", file=sys.stderr)
        return 2
    admin.cluster.refresh_metadata(args.topic)
    counts = admin.cluster.partition_counts(args.topic)
    tps = [TopicPartition(t, p) for t in args.topic for p in range(counts.get(t, 0))]
    missing = [t for t in args.topic if not counts.get(t)]
    if missing:
        print(f"groupcoord: unknown topic(s): {', '.join(missing)}", file=sys.stderr)
        return 1
    current = admin.list_group_offsets(gid, tps)
    earliest = list_offsets(admin.cluster, tps, EARLIEST)
    latest = list_offsets(admin.cluster, tps, LATEST)
    if args.to_earliest:
        target = earliest
    elif args.to_latest:
        target = latest
    elif args.to_datetime:
        target = list_offsets(admin.cluster, tps, _parse_time(args.to_datetime))
        target = {tp: (o if o >= 0 else latest[tp]) for tp, o in target.items()}
    else:
        base = {tp: (current[tp].offset if tp in current and current[tp].offset >= 0 else latest[tp]) for tp in tps}
        target = {tp: base[tp] + args.shift_by for tp in tps}
    target = {tp: min(max(o, earliest[tp]), latest[tp]) for tp, o in target.items()}
    rows = [(tp.topic, tp.partition, current[tp].offset if tp in current else None, target[tp]) for tp in sorted(tps)]
    table(["TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"], rows)
    if not args.execute:
        print("(dry run: add --execute to commit these offsets)")
        return 0
    return _commit_reset(admin, gid, target)


def _commit_reset(admin: AdminClient, gid: str, target: dict[TopicPartition, int]) -> int:
    node = admin.cluster.find_coordinator(gid)
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp, off in target.items():
        topics.setdefault(tp.topic, []).append({"partition_index": tp.partition, "committed_offset": off,
                                               "committed_leader_epoch": -1, "committed_metadata": ""})
    body = {"group_id": gid, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "retention_time_ms": -1, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
    _, resp = admin.cluster.coordinator_connection(node).send(OFFSET_COMMIT, body)
    errors = [(t["name"], p["partition_index"], p["error_code"]) for t in resp["topics"] for p in t["partitions"]
              if p["error_code"]]
    for t, p, code in errors:
        print(f"groupcoord: {t}-{p}: {error_name(code)}", file=sys.stderr)
    return 1 if errors else 0


def _reset_to_commit_time(admin: AdminClient, args: argparse.Namespace, gid: str) -> int:
    """Each partition back to what the group had committed at --to-commit-time (the offset history's)."""
    at_ms = _parse_time(args.to_commit_time, "--to-commit-time")
    h = admin.offset_history(gid)
    if h.error_code:
        print(f"groupcoord: group {gid}: {h.error}", file=sys.stderr)
        return 1
    if not h.partitions:
        print(f"groupcoord: group {gid} has no offset history (offsets.history.size 0, or no commits kept)",
              file=sys.stderr)
        return 1
    wanted = set(args.topic or ())
    tps = sorted(tp for tp in h.partitions if not wanted or tp.topic in wanted)
    current = admin.list_group_offsets(gid, tps) if tps else {}
    then = h.at(at_ms)
    rows = []
    for tp in tps:
        e = then.get(tp)
        rows.append((tp.topic, tp.partition, current[tp].offset if tp in current else None,
                     e.offset if e is not None else None, _utc(e.commit_ms) if e is not None else
                     "(no kept commit at or before that time: unchanged)",
                     None if e is None else f"{e.member_id or '-'} {e.client_id or '-'} {e.client_host or '-'}"))
    table(["TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET", "COMMITTED-AT", "COMMITTED-BY"], rows)
    target = {tp: then[tp].offset for tp in tps if tp in then}
    if not target:
        print(f"groupcoord: no partition of {gid} has a kept commit at or before {args.to_commit_time}",
              file=sys.stderr)
        return 1
    if not args.execute:
        print("(dry run: add --execute to commit these offsets)")
        return 0
    return _commit_reset(admin, gid, target)


# ---------------------------------------------------------------------------- topics
_SOURCES = {1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
            4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 8: "DYNAMIC_GROUP_CONFIG"}


def _key_values(pairs: Iterable[str] | None) -> dict[str, str]:
    """``k=v`` arguments (as kafka-topics --config); ValueError names a bad one."""
    out: dict[str, str] = {}
    for item in pairs or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{item!r} is not key=value")
        out[key] = value
    return out


def topics_create(admin: AdminClient, args: argparse.Namespace) -> int:
    results = admin.create_topics([NewTopic(args.topic, args.partitions, 1, _key_values(args.config))])
    table(["TOPIC", "RESULT"], [(r.name, (f"{r.error}: {r.error_message}" if r.error_message else r.error)
                                 if r.error_code else f"created ({args.partitions} partitions)") for r in results])
    return 1 if any(r.error_code for r in results) else 0


def topics_list(admin: AdminClient, args: argparse.Namespace) -> int:
    table(["TOPIC", "PARTITIONS"], [(t.name, t.partitions) for t in admin.list_topics().values() if not t.is_internal])
    return 0


def topics_describe(admin: AdminClient, args: argparse.Namespace) -> int:
    topics = admin.list_topics()
    rc = 0
    for name in args.topic:
        if name not in topics:
            print(f"groupcoord: unknown topic {name}", file=sys.stderr)
            rc = 1
            continue
        tps = [TopicPartition(name, p) for p in range(topics[name].partitions)]
        start, end = list_offsets(admin.cluster, tps, EARLIEST), list_offsets(admin.cluster, tps, LATEST)
        print(f"TOPIC {name}  PARTITIONS {len(tps)}")
        table(["PARTITION", "LEADER", "START-OFFSET", "END-OFFSET", "RECORDS"],
              [(tp.partition, admin.cluster.leader_for(name, tp.partition), start[tp], end[tp], end[tp] - start[tp])
               for tp in tps])
        print()
        configs = admin.describe_topic_configs(name)
        table(["CONFIG", "VALUE", "SOURCE"], [(c["name"], c["value"], _SOURCES.get(c["config_source"], "UNKNOWN"))
                                              for c in configs if args.all_configs or c["config_source"] == 1])
        print()
    return rc


def topics_alter(admin: AdminClient, args: argparse.Namespace) -> int:
    admin.alter_topic_configs(args.topic, _key_values(args.set), args.delete or ())
    changed = [f"{k}={v}" for k, v in _key_values(args.set).items()] + [f"{k} (deleted)" for k in args.delete or ()]
    table(["TOPIC", "RESULT"], [(args.topic, "altered: " + ", ".join(changed) if changed else "nothing to alter")])
    return 0


def topics_delete(admin: AdminClient, args: argparse.Namespace) -> int:
    results = admin.delete_topics(args.topic)
    table(["TOPIC", "RESULT"], [(r.name, r.error or "deleted") for r in results])
    return 1 if any(r.error_code for r in results) else 0


# ---------------------------------------------------------------------------- wiring
def add_parsers(sub: Any) -> None:
    def common(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--bootstrap-server", "-b", default="127.0.0.1:9092")
        return add_command_config_argument(p)

    groups = sub.add_parser("groups", help="consumer group admin (like kafka-consumer-groups)")
    gsub = groups.add_subparsers(dest="action", required=True)
    p = common(gsub.add_parser("list", help="list groups"))
    p.add_argument("--state", action="append", help="only groups in this state (repeatable)")
    p.set_defaults(run=groups_list)
    for name, fn, helptext in (("describe", groups_describe, "state and members"),
                               ("offsets", groups_offsets, "committed offsets, log end and lag"),
                               ("delete", groups_delete, "delete empty groups")):
        p = common(gsub.add_parser(name, help=helptext))
        p.add_argument("group", nargs="+")
        p.set_defaults(run=fn)
        if name == "offsets":
            p.add_argument("--history", action="store_true", help="the last commits of each partition instead, "
                           "newest first, with who committed (offsets.history.size)")
    p = common(gsub.add_parser("history", help="the group's last rebalances, newest first (group.history.size)"))
    p.add_argument("group", nargs=1)
    p.add_argument("--json", action="store_true", help="the same data as JSON")
    p.set_defaults(run=groups_history)
    p = common(gsub.add_parser("reset-offsets", help="move an inactive group's offsets (dry run by default)"))
    p.add_argument("group", nargs=1)
    p.add_argument("--topic", action="append", help="required but with --to-commit-time (default there: every "
                   "partition in the offset history)")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", action="store_true")
    how.add_argument("--to-latest", action="store_true")
    how.add_argument("--to-datetime", metavar="ISO-TIME")
    how.add_argument("--to-commit-time", metavar="ISO-TIME", help="what the group had committed at that time "
                     "(its offset history; UTC unless the time says otherwise)")
    how.add_argument("--shift-by", type=int, metavar="N")
    p.add_argument("--execute", action="store_true", help="commit the new offsets (default: dry run)")
    p.set_defaults(run=groups_reset_offsets, admin_client_id=_reset_client_id())
    p = common(gsub.add_parser("copy", help="copy a group's committed offsets to an empty group (dry run by "
                                            "default)"))
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--execute", action="store_true", help="commit the offsets for DST (default: dry run)")
    p.set_defaults(run=groups_copy)
    p = common(gsub.add_parser("config", help="a group's configs (offsets.retention.minutes, consumer.session."
                                              "timeout.ms, consumer.heartbeat.interval.ms); --set/--delete change them"))
    p.add_argument("group")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="set a config (repeatable)")
    p.add_argument("--delete", action="append", metavar="KEY", help="back to the server's value (repeatable)")
    p.set_defaults(run=groups_config)
    p = common(gsub.add_parser("delete-offsets", help="delete a group's committed offsets (KIP-496)"))
    p.add_argument("group", nargs=1)
    p.add_argument("--topic", action="append", required=True)
    p.add_argument("--partition", type=int, action="append", help="only these partitions (default: all)")
    p.set_defaults(run=groups_delete_offsets)

    topics = sub.add_parser("topics", help="topic admin (like kafka-topics)")
    tsub = topics.add_subparsers(dest="action", required=True)
    p = common(tsub.add_parser("create"))
    p.add_argument("topic")
    p.add_argument("--partitions", type=int, default=1)
    p.add_argument("--config", action="append", metavar="KEY=VALUE", help="a topic config (repeatable)")
    p.set_defaults(run=topics_create)
    common(tsub.add_parser("list")).set_defaults(run=topics_list)
    for name, fn in (("describe", topics_describe), ("delete", topics_delete)):
        p = common(tsub.add_parser(name))
        p.add_argument("topic", nargs="+")
        p.set_defaults(run=fn)
        if name == "describe":
            p.add_argument("--all-configs", action="store_true", help="also configs left at their defaults")
    p = common(tsub.add_parser("alter", help="change a topic's configs (like kafka-configs --alter)"))
    p.add_argument("topic")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="set a config (repeatable)")
    p.add_argument("--delete", action="append", metavar="KEY", help="back to the default (repeatable)")
    p.set_defaults(run=topics_alter)


def _reset_client_id() -> str:
    """reset-offsets' client id: the tool and the OS user, so the offset history says who reset."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"groupcoord-reset-offsets/{user}"


def run(args: argparse.Namespace) -> int:
    try:
        security = security_from_args(args)
        client_id = getattr(args, "admin_client_id", None) or "groupcoord-admin"
        with AdminClient(args.bootstrap_server, client_id=client_id, request_timeout_ms=15000,
                         security=security) as admin:
            return int(args.run(admin, args))
    except SecurityConfigError as e:
        print(f"groupcoord: {e}", file=sys.stderr)
        return 2
    except KafkaError as e:
        print(f"groupcoord: {e}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as e:
        print(f"groupcoord: cannot reach {args.bootstrap_server}: {e}", file=sys.stderr)
        return 1


__all__ = ["ErrorCode", "add_parsers", "list_offsets", "run", "table"]
