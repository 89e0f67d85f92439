"""``groupcoord transactions ...``: transactional state of a running server, shaped like ``kafka-transactions.sh``.

Rules:
- Subcommands and options are Kafka 3.9's (``TransactionsCommand``): ``list [--duration-filter MS]`` (ours also
  ``--state`` and ``--producer-id``, filters ListTransactions has), ``describe --transactional-id ID``,
  ``describe-producers --topic T --partition P [--broker-id N]``, ``abort --topic T --partition P``
  with ``--start-offset O`` or with ``--producer-id --producer-epoch --coordinator-epoch``, and
  ``find-hanging`` with ``--topic [--partition]`` or ``--broker-id``, and ``--max-transaction-timeout MINUTES``
  (default 15). The calls are ``client.transactions_admin``'s.
- Output: plain tables as the other admin commands (``admin_cli.table``), Kafka's columns in our header style
  (upper case, dashes); "-" for what is unknown (Kafka prints None, or -1 for a coordinator epoch). ``abort``
  prints the marker it wrote; ``find-hanging`` exits 0 whatever it finds, as Kafka's.
- As every admin command: ``--bootstrap-server`` (default 127.0.0.1:9092) and ``--command-config``; errors are
  one line on stderr, exit 1 for a Kafka error (an unknown transactional id, a refused marker, no open
  transaction at the start offset), 2 for bad usage (options Kafka's tool refuses together or misses).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from client.admin_cli import table
from client.consumer_protocol import TopicPartition
from client.security import add_command_config_argument
from client.transactions_admin import AbortSpec, TransactionsAdmin


class UsageError(Exception):
    """Options that cannot go together (exit 2)."""


def _now_ms() -> int:
    return int(time.time() * 1000)


def _tp(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def txn_list(txns: TransactionsAdmin, args: argparse.Namespace) -> int:
    by_node = txns.list_transactions(states=args.state or (), producer_ids=args.producer_id or (),
                                     duration_filter_ms=args.duration_filter)
    table(["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "STATE"],
          [(t.transactional_id, node, t.producer_id, t.state)
           for node, listings in sorted(by_node.items()) for t in sorted(listings, key=lambda t: t.transactional_id)])
    return 0


def txn_describe(txns: TransactionsAdmin, args: argparse.Namespace) -> int:
    [d] = txns.describe_transactions([args.transactional_id])
    if d.error_code:
        print(f"groupcoord: failed to describe transactional id {d.transactional_id!r}: {d.error}", file=sys.stderr)
        return 1
    duration = None if d.start_time_ms is None else _now_ms() - d.start_time_ms
    table(["COORDINATOR-ID", "TRANSACTIONAL-ID", "PRODUCER-ID", "PRODUCER-EPOCH", "STATE", "TIMEOUT-MS",
           "START-TIME-MS", "DURATION-MS", "PARTITIONS"],
          [(d.coordinator_id, d.transactional_id, d.producer_id, d.producer_epoch, d.state, d.timeout_ms,
            d.start_time_ms, duration, ",".join(_tp(tp) for tp in d.partitions) or None)])
    return 0


def txn_describe_producers(txns: TransactionsAdmin, args: argparse.Namespace) -> int:
    tp = TopicPartition(args.topic, args.partition)
    result = txns.describe_producers([tp], broker_id=args.broker_id)[tp]
    if result.error_code:
        where = "leader" if args.broker_id is None else f"broker {args.broker_id}"
        print(f"groupcoord: failed to describe producers for partition {_tp(tp)} on {where}: {result.error}",
              file=sys.stderr)
        return 1
    table(["PRODUCER-ID", "PRODUCER-EPOCH", "COORDINATOR-EPOCH", "LAST-SEQUENCE", "LAST-TIMESTAMP",
           "TXN-START-OFFSET"],
          [(p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence, p.last_timestamp,
            p.txn_start_offset) for p in result.producers])
    return 0


def txn_abort(txns: TransactionsAdmin, args: argparse.Namespace) -> int:
    tp = TopicPartition(args.topic, args.partition)
    if args.start_offset is not None:
        spec = txns.abort_spec(tp, args.start_offset)
    else:
        spec = AbortSpec(tp, args.producer_id, args.producer_epoch, max(0, args.coordinator_epoch))
    txns.abort_transaction(spec)
    table(["TOPIC", "PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH", "COORDINATOR-EPOCH", "RESULT"],
          [(tp.topic, tp.partition, spec.producer_id, spec.producer_epoch, max(0, spec.coordinator_epoch),
            "aborted")])
    return 0


def txn_find_hanging(txns: TransactionsAdmin, args: argparse.Namespace) -> int:
    partitions = txns.partitions_to_search(args.topic, args.partition, args.broker_id)
    now = _now_ms()
    hanging = txns.find_hanging(partitions, broker_id=args.broker_id,
                                max_timeout_ms=args.max_transaction_timeout * 60_000, now_ms=now)
    table(["TOPIC", "PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH", "COORDINATOR-EPOCH", "START-OFFSET",
           "LAST-TIMESTAMP", "DURATION-MIN"],
          [(h.partition.topic, h.partition.partition, h.producer.producer_id, h.producer.producer_epoch,
            h.producer.coordinator_epoch, h.producer.txn_start_offset, h.producer.last_timestamp,
            (now - h.producer.last_timestamp) // 60_000) for h in hanging])
    return 0


def check_usage(args: argparse.Namespace) -> None:
    """Kafka's checks that argparse cannot express; UsageError names the problem."""
    if args.action == "abort":
        if args.start_offset is None and args.producer_id is None:
            raise UsageError("the transaction to abort must be identified either with --start-offset or with "
                             "--producer-id, --producer-epoch and --coordinator-epoch")
        if args.start_offset is None:
            for name in ("producer_epoch", "coordinator_epoch"):
                if getattr(args, name) is None:
                    raise UsageError(f"missing required argument --{name.replace('_', '-')}")
        elif args.producer_id is not None:
            raise UsageError("give either --start-offset or --producer-id, not both")
    if args.action == "find-hanging":
        if args.topic is None and args.broker_id is None:
            raise UsageError("find-hanging needs --topic or --broker-id to limit the scope of the search")
        if args.partition is not None and args.topic is None:
            raise UsageError("--partition needs --topic")
        if args.max_transaction_timeout < 0:
            raise UsageError("--max-transaction-timeout must not be negative")


# ---------------------------------------------------------------------------- wiring
def add_parsers(sub: Any) -> None:
    def common(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--bootstrap-server", "-b", default="127.0.0.1:9092")
        return add_command_config_argument(p)

    top = sub.add_parser("transactions", help="transactional state; find and abort hanging transactions "
                                              "(like kafka-transactions)")
    tsub = top.add_subparsers(dest="action", required=True)
    p = common(tsub.add_parser("list", help="list transactions"))
    p.add_argument("--duration-filter", type=int, metavar="MS",
                   help="only transactions running longer than MS milliseconds")
    p.add_argument("--state", action="append", help="only transactions in this state, e.g. Ongoing (repeatable)")
    p.add_argument("--producer-id", type=int, action="append", help="only this producer id (repeatable)")
    p.set_defaults(run=txn_list)
    p = common(tsub.add_parser("describe", help="describe the state of a transactional id"))
    p.add_argument("--transactional-id", required=True)
    p.set_defaults(run=txn_describe)
    p = common(tsub.add_parser("describe-producers", help="the active producers of a partition"))
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, required=True)
    p.add_argument("--broker-id", type=int, help="ask this broker instead of the partition's leader")
    p.set_defaults(run=txn_describe_producers)
    p = common(tsub.add_parser("abort", help="abort a hanging transaction at one partition (writes an ABORT "
                                             "marker)"))
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, required=True)
    p.add_argument("--start-offset", type=int, help="start offset of the transaction to abort")
    p.add_argument("--producer-id", type=int, help="or: its producer id ...")
    p.add_argument("--producer-epoch", type=int, help="... producer epoch ...")
    p.add_argument("--coordinator-epoch", type=int, help="... and coordinator epoch")
    p.set_defaults(run=txn_abort)
    p = common(tsub.add_parser("find-hanging", help="find open transactions their coordinator no longer knows"))
    p.add_argument("--broker-id", type=int, help="search the partitions this broker leads")
    p.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                   help="only transactions older than this (default 15)")
    p.add_argument("--topic", help="search this topic only (needed for --partition)")
    p.add_argument("--partition", type=int)
    p.set_defaults(run=txn_find_hanging)


def run(args: argparse.Namespace) -> int:
    try:
        check_usage(args)
    except UsageError as e:
        print(f"groupcoord transactions {args.action}: {e}", file=sys.stderr)
        return 2
    from client import admin_cli  # its run holds the shared error handling (exit 1 / 2)

    command = args.run

    def on_admin(admin: Any, parsed: argparse.Namespace) -> int:
        return int(command(TransactionsAdmin(admin), parsed))

    args.run = on_admin
    return admin_cli.run(args)


__all__ = ["add_parsers", "run"]
