"""The ``groupcoord`` command: ``serve`` runs the daemon; other subcommands are admin tools.

Rules:
- Every config key is also a flag with dashes (``--group-initial-rebalance-delay-ms 0``); ``--config FILE``
  (or env GROUPCOORD_CONFIG) names a TOML file. A bad config prints one clear line and exits with status 2.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from coordinator import config as C


def _add_config_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=os.environ.get("GROUPCOORD_CONFIG"), help="TOML config file")
    for key in C.KEYS:
        flag = "--" + key.name.replace(".", "-")
        p.add_argument(flag, dest="cfg:" + key.name, default=None, metavar=key.type.__name__.upper(),
                       help=f"{key.doc} (default: {key.default})")
    p.add_argument("--log-level", default="INFO")


def _load(args: argparse.Namespace) -> C.Config:
    flags = {k[4:]: v for k, v in vars(args).items() if k.startswith("cfg:") and v is not None}
    return C.load(args.config, os.environ, flags)


def _find(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _find(inner, kind)
            if found is not None:
                return found
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="groupcoord", description="Kafka-protocol consumer group coordinator")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the coordinator daemon")
    _add_config_flags(serve)
    if (sys.argv[1:] if argv is None else argv)[:1] == ["serve"]:
        return _serve(parser.parse_args(argv))  # the daemon does not import the admin tools
    # clients of a running server:
    from client import acls_cli, admin_cli, cluster_cli, console_cli, retry_cli, transactions_cli
    from coordinator import audit_cli, users_cli  # read a server's data dir (users: or ask a running one)

    admin_cli.add_parsers(sub)
    retry_cli.add_parsers(sub)  # run by admin_cli.run, as groups and topics
    console_cli.add_parsers(sub)
    cluster_cli.add_parsers(sub)
    users_cli.add_parsers(sub)
    audit_cli.add_parsers(sub)
    acls_cli.add_parsers(sub)
    transactions_cli.add_parsers(sub)
    args = parser.parse_args(argv)
    if args.command == "users":
        return users_cli.run(args)
    if args.command == "audit":
        return audit_cli.run(args)
    if args.command == "acls":
        return acls_cli.run(args)
    if args.command == "transactions":
        return transactions_cli.run(args)
    if args.command in ("groups", "topics", "retry"):
        return admin_cli.run(args)
    if args.command in ("produce", "consume", "cluster"):  # commands that open their own connections
        return console_cli.run(args)
    return 1


def _serve(args: argparse.Namespace) -> int:
    """Run the daemon (``groupcoord serve``): 2 on a config or start-up error."""
    try:
        cfg = _load(args)
    except C.ConfigError as e:
        print(f"groupcoord: config error: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import trio

    from coordinator.runtime.server import run
    from coordinator.storage_errors import StartupError

    try:
        trio.run(run, cfg)
    except KeyboardInterrupt:
        return 130
    except BaseException as e:  # trio wraps errors from nurseries in exception groups
        startup = _find(e, StartupError)
        if startup is None:
            raise
        print(f"groupcoord: {startup}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
