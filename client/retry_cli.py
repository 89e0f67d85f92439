"""`groupcoord retry status TOPIC` and `groupcoord retry replay TOPIC-failed`: retry topics (seed 001) at a glance.

Rules:
- Same conventions as ``client.admin_cli``, whose ``run`` runs them (`args.run(admin, args)`; the
  ``groupcoord`` CLI registers these parsers beside admin_cli's, so admin_cli never imports this module): `--bootstrap-server`, `--command-config` (the replay's producer uses the admin client's security
  settings too), column-aligned tables on stdout, one-line errors on stderr, exit 1 for a Kafka error.
- Retry topics are found by name: those of ``--policy`` when given, else every existing topic named by the
  pattern (`--retry-pattern`, default `{topic}-retry-{delay}`). Waiting = log end minus the group's
  committed offset (`--group`), or minus the log start without a group. NEXT-DUE is the earliest
  `retry_timestamp` among the first waiting record of each partition (records behind it are due later).
- `replay` is a dry run unless `--execute`: it lists the failed records and, with `--execute`, re-publishes
  each (key, value, timestamp and user headers; every `retry_*` header removed) to `--to` (default: the
  record's `retry_original_topic`) with acks=all. The failed topic itself is left as it is.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from client import admin_cli
from client.admin import AdminClient
from client.admin_cli import EARLIEST, LATEST, list_offsets, table
from client.consumer_protocol import TopicPartition
from client.fetcher import ConsumerRecord, Fetcher
from client.producer import Producer
from client.retry_policy import (
    RETRY_EXCEPTION,
    RETRY_NUMBER,
    RETRY_ORIGINAL_TOPIC,
    RETRY_TIMESTAMP,
    RetryPolicy,
    header_int,
    header_value,
    parse_delay,
    strip_retry_headers,
)
from client.security import add_command_config_argument


def _fmt_ms(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _partitions(admin: AdminClient, topic: str) -> list[TopicPartition]:
    admin.cluster.refresh_metadata([topic])
    return [TopicPartition(topic, p) for p in range(admin.cluster.partition_counts([topic]).get(topic, 0))]


def read_records(admin: AdminClient, starts: dict[TopicPartition, int], ends: dict[TopicPartition, int],
                 limit_per_partition: int | None = None, timeout_s: float = 15.0) -> list[ConsumerRecord]:
    """Records from ``starts`` up to (not including) ``ends``, per partition in offset order."""
    todo = {tp: o for tp, o in starts.items() if o < ends[tp]}
    if limit_per_partition is not None:
        ends = {tp: min(ends[tp], starts[tp] + limit_per_partition) for tp in ends}
    out: list[ConsumerRecord] = []
    if not todo:
        return out
    fetcher = Fetcher(admin.cluster, fetch_max_wait_ms=100, auto_offset_reset="earliest")
    fetcher.assign(todo)
    deadline = time.monotonic() + timeout_s
    try:
        while fetcher.assignment() and time.monotonic() < deadline:
            for tp, recs in fetcher.poll(timeout_ms=200).items():
                out += [r for r in recs if r.offset < ends[tp]]
                if fetcher.positions.position(tp) is not None and fetcher.positions.position(tp) >= ends[tp]:
                    fetcher.assign({t: fetcher.positions.position(t) for t in fetcher.assignment() if t != tp})
    finally:
        fetcher.close()
    return sorted(out, key=lambda r: (r.topic, r.partition, r.offset))


# ---------------------------------------------------------------------------- status
def retry_topics_of(admin: AdminClient, topic: str, policy: RetryPolicy | None, pattern: str) -> list[tuple[str, str]]:
    """(retry topic, delay label) pairs, by increasing delay."""
    if policy is not None:
        return [(policy.retry_topic(topic, label), label) for label in policy.labels()]
    regex = re.compile("^" + re.escape(pattern).replace(re.escape("{topic}"), re.escape(topic))
                       .replace(re.escape("{delay}"), r"(?P<delay>\d+(?:ms|s|m|h|d))") + "$")
    found = []
    for name in admin.list_topics():
        m = regex.match(name)
        if m:
            found.append((parse_delay(m.group("delay")), name, m.group("delay")))
    return [(name, label) for _, name, label in sorted(found)]


def retry_status(admin: AdminClient, args: argparse.Namespace) -> int:
    policy = RetryPolicy.parse(args.policy, retry_topic_pattern=args.retry_pattern) if args.policy else None
    topics = retry_topics_of(admin, args.topic, policy, args.retry_pattern)
    existing = admin.list_topics()
    committed = admin.list_group_offsets(args.group) if args.group else {}
    rows = []
    for name, label in topics:
        if name not in existing:
            rows.append((name, label, 0, 0, None))
            continue
        tps = _partitions(admin, name)
        start, end = list_offsets(admin.cluster, tps, EARLIEST), list_offsets(admin.cluster, tps, LATEST)
        pos = {tp: max(start[tp], committed[tp].offset if tp in committed and committed[tp].offset >= 0
                       else start[tp]) for tp in tps}
        waiting = sum(end[tp] - pos[tp] for tp in tps)
        heads = read_records(admin, pos, end, limit_per_partition=1)
        dues = [d for r in heads if (d := header_int(r.headers, RETRY_TIMESTAMP)) is not None]
        rows.append((name, label, len(tps), waiting, _fmt_ms(min(dues)) if dues else None))
    print(f"RETRY TOPICS OF {args.topic}" + (f"  GROUP {args.group}" if args.group else "  (no group: all records)"))
    table(["TOPIC", "DELAY", "PARTITIONS", "WAITING", "NEXT-DUE"], rows)
    failed = args.failed_pattern.format(topic=args.topic)
    count = 0
    if failed in existing:
        tps = _partitions(admin, failed)
        start, end = list_offsets(admin.cluster, tps, EARLIEST), list_offsets(admin.cluster, tps, LATEST)
        count = sum(end[tp] - start[tp] for tp in tps)
    print(f"FAILED {failed}: {count} records")
    return 0


# ---------------------------------------------------------------------------- replay
def retry_replay(admin: AdminClient, args: argparse.Namespace) -> int:
    tps = _partitions(admin, args.failed_topic)
    if not tps:
        print(f"groupcoord: unknown topic {args.failed_topic}", file=sys.stderr)
        return 1
    start, end = list_offsets(admin.cluster, tps, EARLIEST), list_offsets(admin.cluster, tps, LATEST)
    records = read_records(admin, start, end)
    default_to = args.failed_topic[:-len("-failed")] if args.failed_topic.endswith("-failed") else None
    plan = []
    for r in records:
        origin = header_value(r.headers, RETRY_ORIGINAL_TOPIC)
        target = args.to or (origin.decode() if origin else default_to)
        plan.append((r, target))
    rows = [(r.partition, r.offset, _short(r.key), header_int(r.headers, RETRY_NUMBER),
             _short(header_value(r.headers, RETRY_EXCEPTION), 40), target or "?") for r, target in plan]
    table(["PARTITION", "OFFSET", "KEY", "RETRIES", "EXCEPTION", "TO"], rows)
    missing = [r for r, target in plan if target is None]
    if missing:
        print(f"groupcoord: {len(missing)} records have no retry_original_topic header; give --to", file=sys.stderr)
        return 1
    if not args.execute:
        print(f"(dry run: {len(plan)} records would be replayed; add --execute to re-publish them)")
        return 0
    with Producer(args.bootstrap_server, acks="all", security=admin.cluster.security) as producer:
        futures = [producer.send(target, r.value, r.key, strip_retry_headers(r.headers), timestamp_ms=r.timestamp)
                   for r, target in plan if target is not None]
        for fut in futures:
            fut.get(30)
    counts: dict[str, int] = {}
    for _, target in plan:
        assert target is not None
        counts[target] = counts.get(target, 0) + 1
    print(f"replayed {len(plan)} records: " + ", ".join(f"{n} to {t}" for t, n in sorted(counts.items())))
    return 0


def _short(value: bytes | None, width: int = 24) -> str | None:
    if value is None:
        return None
    text = value.decode("utf-8", "replace")
    return text if len(text) <= width else text[:width - 1] + "…"


# ---------------------------------------------------------------------------- wiring
def add_parsers(sub: Any) -> None:
    retry = sub.add_parser("retry", help="retry topics (status, replay of failed records)")
    rsub = retry.add_subparsers(dest="action", required=True)
    p = rsub.add_parser("status", help="records waiting per retry topic, next due time, failed count")
    p.add_argument("topic", help="the main topic")
    p.add_argument("--group", help="the retrying consumer's group (waiting = end - committed)")
    p.add_argument("--policy", help="the retry sequence, e.g. 5m,5m,30m,30m,30m,1h (default: find topics by name)")
    p.add_argument("--retry-pattern", default="{topic}-retry-{delay}")
    p.add_argument("--failed-pattern", default="{topic}-failed")
    p.set_defaults(run=retry_status)
    p = rsub.add_parser("replay", help="re-inject failed records into their main topic (dry run by default)")
    p.add_argument("failed_topic", metavar="TOPIC-failed")
    p.add_argument("--to", help="target topic (default: each record's retry_original_topic)")
    p.add_argument("--execute", action="store_true", help="re-publish (default: dry run)")
    p.set_defaults(run=retry_replay)
    for parser in rsub.choices.values():
        parser.add_argument("--bootstrap-server", "-b", default="127.0.0.1:9092")
        add_command_config_argument(parser)


def main(argv: Iterable[str] | None = None) -> int:
    """Run as `python -m client.retry_cli status TOPIC ...` (the same as `groupcoord retry ...`)."""
    parser = argparse.ArgumentParser(prog="groupcoord")
    add_parsers(parser.add_subparsers(dest="command", required=True))
    return admin_cli.run(parser.parse_args(["retry", *(argv if argv is not None else sys.argv[1:])]))


if __name__ == "__main__":
    sys.exit(main())
