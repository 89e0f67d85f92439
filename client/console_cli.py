"""`groupcoord produce` and `groupcoord consume`: console producer and consumer.

Rules:
- produce: one record per stdin line (without its newline); with `--key-separator S` the text before the
  first S is the key. Every record is acknowledged before the command exits (flush); a failed record is
  reported on stderr and makes the exit status 1.
- consume: prints one line per record (value, or `key<TAB>value` with --print-key, prefixed by
  `partition:offset<TAB>` with --print-offset). With `--group` it joins that consumer group and commits what
  it printed; without, it reads every partition on its own (no group, nothing committed). It stops after
  `--max-messages`, or when no record arrived for `--timeout-ms`, or on Ctrl-C.
- Both take `--command-config FILE` (Kafka's client properties: security.protocol, sasl.*, ssl.*; see
  ``client.security``); so does `groupcoord cluster describe`, which this module's ``run`` runs too.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from client.cluster import Cluster
from client.consumer import Consumer
from client.consumer_protocol import TopicPartition
from client.errors import KafkaError, SecurityConfigError
from client.fetcher import Fetcher
from client.producer import Producer
from client.security import add_command_config_argument, security_from_args


def _text(b: bytes | None) -> str:
    return "" if b is None else b.decode("utf-8", errors="replace")


def produce(args: argparse.Namespace) -> int:
    acks: Any = "all" if args.acks in ("all", "-1") else int(args.acks)
    failures = 0
    with Producer(args.bootstrap_server, acks=acks, compression_type=args.compression,
                  linger_ms=args.linger_ms, security=security_from_args(args)) as producer:
        futures = []
        for line in sys.stdin:
            line = line.rstrip("\n")
            key = None
            if args.key_separator and args.key_separator in line:
                k, line = line.split(args.key_separator, 1)
                key = k.encode()
            futures.append(producer.send(args.topic, line.encode(), key=key, partition=args.partition))
        producer.flush()
        for fut in futures:
            try:
                fut.get(30)
            except Exception as e:  # noqa: BLE001 - reported per record
                failures += 1
                print(f"groupcoord: record not produced: {e}", file=sys.stderr)
    print(f"produced {len(futures) - failures} records to {args.topic}", file=sys.stderr)
    return 1 if failures else 0


def _print(tp: TopicPartition, rec: Any, args: argparse.Namespace) -> None:
    parts = []
    if args.print_offset:
        parts.append(f"{tp.partition}:{rec.offset}")
    if args.print_key:
        parts.append(_text(rec.key))
    parts.append(_text(rec.value))
    print("\t".join(parts), flush=True)


def consume(args: argparse.Namespace) -> int:
    reset = "earliest" if args.from_beginning else "latest"
    security = security_from_args(args)
    count = 0
    last_record = time.monotonic()
    if args.group:
        source: Any = Consumer(bootstrap_servers=args.bootstrap_server, group_id=args.group,
                               auto_offset_reset=reset, enable_auto_commit=False, security=security)
        source.subscribe([args.topic])
    else:
        cluster = Cluster(args.bootstrap_server, security=security)
        counts = cluster.refresh_metadata([args.topic])
        if args.topic not in cluster.topics:
            err = counts.get(args.topic)
            print(f"groupcoord: unknown topic {args.topic} ({err.error_code if err else 'no metadata'})",
                  file=sys.stderr)
            cluster.close()
            return 1
        source = Fetcher(cluster, auto_offset_reset=reset)
        source.assign([TopicPartition(args.topic, p.partition) for p in cluster.topics[args.topic].partitions])
    try:
        while args.max_messages is None or count < args.max_messages:
            batch = source.poll(timeout_ms=200)
            if batch:
                last_record = time.monotonic()
            printed: dict[TopicPartition, int] = {}
            for tp, records in batch.items():
                for rec in records:
                    if args.max_messages is not None and count >= args.max_messages:
                        break
                    _print(tp, rec, args)
                    printed[tp] = rec.offset + 1
                    count += 1
            if args.group and printed:
                source.commit(printed)
            if time.monotonic() - last_record > args.timeout_ms / 1000:
                break
    except KeyboardInterrupt:
        pass
    finally:
        if args.group:
            source.close()
        else:
            source.close()
            cluster.close()
    print(f"consumed {count} records", file=sys.stderr)
    return 0


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("produce", help="console producer: one record per stdin line")
    p.add_argument("topic")
    p.add_argument("--bootstrap-server", "-b", default="127.0.0.1:9092")
    p.add_argument("--key-separator", default=None, help="split each line into key and value at this string")
    p.add_argument("--partition", type=int, default=None)
    p.add_argument("--acks", default="all", choices=["0", "1", "all", "-1"])
    p.add_argument("--compression", default=None, choices=["gzip", "snappy", "lz4", "zstd"])
    p.add_argument("--linger-ms", type=int, default=5)
    add_command_config_argument(p)
    p.set_defaults(run=produce)
    p = sub.add_parser("consume", help="console consumer")
    p.add_argument("topic")
    p.add_argument("--bootstrap-server", "-b", default="127.0.0.1:9092")
    p.add_argument("--group", default=None, help="join this consumer group and commit what is printed")
    p.add_argument("--from-beginning", action="store_true", help="start at the earliest offset when none is "
                                                                 "committed")
    p.add_argument("--max-messages", type=int, default=None)
    p.add_argument("--timeout-ms", type=int, default=10000, help="stop after this long without a record")
    p.add_argument("--print-key", action="store_true")
    p.add_argument("--print-offset", action="store_true")
    add_command_config_argument(p)
    p.set_defaults(run=consume)


def run(args: argparse.Namespace) -> int:
    try:
        return int(args.run(args))
    except SecurityConfigError as e:
        print(f"groupcoord: {e}", file=sys.stderr)
        return 2
    except KafkaError as e:
        print(f"groupcoord: {e}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as e:
        print(f"groupcoord: cannot reach {args.bootstrap_server}: {e}", file=sys.stderr)
        return 1
