"""``groupcoord users add/list/delete``: SCRAM users, shaped like ``kafka-configs --entity-type users``.

Rules:
- ``--data-dir DIR``: the server's data dir, with the server stopped (its lock is taken: a running server
  refuses this with one line, exit 1). This is how the first admin is made before any client can log in,
  as ``kafka-storage format --add-scram`` does.
- Otherwise ``--bootstrap-server`` (default 127.0.0.1:9092; ``--command-config FILE``: Kafka's client
  properties for TLS and SASL): DescribeUserScramCredentials and
  AlterUserScramCredentials against a running server; the password never travels, only the salted
  password the client computes (KIP-554).
- ``add NAME --password P`` (or ``--password-file F``, its first line) sets a credential for each
  ``--mechanism`` (default SCRAM-SHA-256 and SCRAM-SHA-512) with ``--iterations`` (default 8192;
  4096..16384); ``delete NAME`` removes them; ``list`` prints USER, MECHANISM, ITERATIONS.
- ``--zookeeper HOST:PORT[/chroot]``: a cluster's ZooKeeper, in Kafka's layout (``/config/users/<user>``
  and a ``/config/changes`` notification; ``coordinator.cluster.security_zk``), as ``kafka-configs
  --zookeeper ... --entity-type users``: how a cluster's first admin is made before its nodes start. Running
  nodes apply the change within seconds. ZooKeeper not answering within ``ZK_TIMEOUT_S`` is one line, exit 1.
  At most one of ``--bootstrap-server``, ``--data-dir`` and ``--zookeeper``.
- Errors are one line on stderr: exit 1 for a refusal (with Kafka's error name), 2 for bad usage.
"""

from __future__ import annotations

import argparse
import secrets
import sys
from typing import Any

from coordinator.core.security.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_MECHANISMS,
    ScramCredential,
    salted_password,
)

DESCRIBE, ALTER = 50, 51
DEFAULT_ITERATIONS = 8192
ZK_TIMEOUT_S = 10.0  # connecting to ZooKeeper, and each request
ZK_SESSION_TIMEOUT_MS = 18000  # Kafka's zookeeper.session.timeout.ms


def add_parsers(sub: Any) -> None:
    from client.security import add_command_config_argument

    users = sub.add_parser("users", help="SCRAM users (like kafka-configs --entity-type users)")
    usub = users.add_subparsers(dest="action", required=True)

    def common(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        where = p.add_mutually_exclusive_group()
        where.add_argument("--bootstrap-server", "-b", default="127.0.0.1:9092")
        where.add_argument("--data-dir", help="change a stopped server's data dir directly")
        where.add_argument("--zookeeper", metavar="HOST:PORT[/chroot]",
                           help="change a cluster's users in its ZooKeeper directly (zookeeper.connect)")
        return add_command_config_argument(p)

    p = common(usub.add_parser("add", help="add or change a user's SCRAM credentials"))
    p.add_argument("name")
    pw = p.add_mutually_exclusive_group(required=True)
    pw.add_argument("--password")
    pw.add_argument("--password-file")
    p.add_argument("--mechanism", action="append", choices=sorted(SCRAM_MECHANISMS))
    p.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS)
    p = common(usub.add_parser("delete", help="remove a user's SCRAM credentials"))
    p.add_argument("name")
    p.add_argument("--mechanism", action="append", choices=sorted(SCRAM_MECHANISMS))
    common(usub.add_parser("list", help="users and their mechanisms"))


def run(args: argparse.Namespace) -> int:
    mechanisms = sorted(getattr(args, "mechanism", None) or SCRAM_MECHANISMS)
    if args.action == "add":
        if not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
            print(f"groupcoord users: --iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}", file=sys.stderr)
            return 2
        if not args.name:
            print("groupcoord users: the user name must not be empty", file=sys.stderr)
            return 2
        password = args.password
        if args.password_file:
            try:
                with open(args.password_file, encoding="utf-8") as f:
                    password = f.readline().rstrip("\r\n")
            except OSError as e:
                print(f"groupcoord users: cannot read {args.password_file}: {e.strerror}", file=sys.stderr)
                return 2
        if not password:
            print("groupcoord users: the password must not be empty", file=sys.stderr)
            return 2
    from client.errors import KafkaError, SecurityConfigError

    try:
        if args.data_dir:
            return _offline(args, mechanisms, password if args.action == "add" else "")
        if args.zookeeper:
            return _zookeeper(args, mechanisms, password if args.action == "add" else "")
        return _online(args, mechanisms, password if args.action == "add" else "")
    except SecurityConfigError as e:
        print(f"groupcoord users: {e}", file=sys.stderr)
        return 2
    except (KafkaError, OSError) as e:
        print(f"groupcoord users: {e}", file=sys.stderr)
        return 1


def _offline(args: argparse.Namespace, mechanisms: list[str], password: str) -> int:
    from coordinator.runtime.security.users import UserStore
    from coordinator.storage.errors import StorageError
    from coordinator.storage.keyed_store import KeyedStore
    from coordinator.storage.manager import LogManager

    try:
        logs = LogManager(args.data_dir)  # takes the data dir's lock: never beside a running server
    except StorageError as e:
        print(f"groupcoord users: {e}", file=sys.stderr)
        return 1
    try:
        store = KeyedStore.open(args.data_dir)
        try:
            users = UserStore(store)
            if args.action == "list":
                _print(users.users())
                return 0
            if args.action == "add":
                users.put_offline([(args.name, m, ScramCredential.from_password(m, password,
                                                                                iterations=args.iterations))
                                   for m in mechanisms])
                return 0
            known = users.users().get(args.name, {})
            gone = [m for m in mechanisms if m in known]
            if not gone:
                print(f"groupcoord users: RESOURCE_NOT_FOUND: no SCRAM credential for {args.name}", file=sys.stderr)
                return 1
            users.put_offline([(args.name, m, None) for m in gone])
            return 0
        finally:
            store.close()
    finally:
        logs.close()


class _NotFound(Exception):
    pass


def _zookeeper(args: argparse.Namespace, mechanisms: list[str], password: str) -> int:
    import logging

    import trio

    from coordinator.cluster.security_zk import ZkSecurity
    from coordinator.cluster.zk import ZkError, ZkStore

    logging.getLogger("kazoo").addHandler(logging.NullHandler())  # its connection retries are not ours to print
    credentials = {m: ScramCredential.from_password(m, password, iterations=args.iterations).encode()
                   for m in mechanisms} if args.action == "add" else {}

    def drop(current: dict[str, str]) -> dict[str, str]:
        if not any(m in current for m in mechanisms):
            raise _NotFound
        return {m: c for m, c in current.items() if m not in mechanisms}

    async def main() -> int:
        try:
            zk = ZkStore(args.zookeeper, ZK_SESSION_TIMEOUT_MS, ZK_TIMEOUT_S)
        except ValueError as e:
            print(f"groupcoord users: --zookeeper: {e}", file=sys.stderr)
            return 2
        try:
            await zk.connect(ZK_TIMEOUT_S, lambda _state: None)
            store = ZkSecurity(zk)
            await store.ensure_paths()
            if args.action == "list":
                _print({user: {m: _iterations(c) for m, c in scram.items()}
                        for user, scram in (await store.read_users()).items()})
            elif args.action == "add":
                await store.update_user(args.name, lambda current: current | credentials)
            else:
                await store.update_user(args.name, drop)
            return 0
        except _NotFound:
            print(f"groupcoord users: RESOURCE_NOT_FOUND: no SCRAM credential for {args.name}", file=sys.stderr)
            return 1
        except ZkError as e:
            print(f"groupcoord users: ZooKeeper {args.zookeeper}: {e}", file=sys.stderr)
            return 1
        except ValueError as e:
            print(f"groupcoord users: {e}", file=sys.stderr)
            return 2
        finally:
            with trio.CancelScope(shield=True):
                await zk.close()

    return trio.run(main)


def _iterations(credential: str) -> int | str:
    try:
        return ScramCredential.parse(credential).iterations
    except ValueError:
        return "invalid"


def _online(args: argparse.Namespace, mechanisms: list[str], password: str) -> int:
    from client.cluster import Cluster
    from client.security import security_from_args
    from protocol.errors import error_name

    cluster = Cluster(args.bootstrap_server, client_id="groupcoord-users", security=security_from_args(args))
    try:
        conn = cluster.least_loaded_connection()
        if args.action == "list":
            _, resp = conn.send(DESCRIBE, {"users": None})
            if resp["error_code"]:
                print(f"groupcoord users: {error_name(resp['error_code'])}: {resp['error_message']}", file=sys.stderr)
                return 1
            codes = {m.code: name for name, m in SCRAM_MECHANISMS.items()}
            _print({r["user"]: {codes.get(c["mechanism"], str(c["mechanism"])): c["iterations"]
                                for c in r["credential_infos"]} for r in resp["results"] if not r["error_code"]})
            return 0
        if args.action == "add":
            upsertions = []
            for m in mechanisms:
                salt = secrets.token_bytes(32)
                upsertions.append({"name": args.name, "mechanism": SCRAM_MECHANISMS[m].code,
                                   "iterations": args.iterations, "salt": salt,
                                   "salted_password": salted_password(m, password, salt, args.iterations)})
            body = {"deletions": [], "upsertions": upsertions}
        else:
            codes = [SCRAM_MECHANISMS[m].code for m in mechanisms]
            if not args.mechanism:  # every mechanism the user has (deleting one it lacks is refused)
                _, found = conn.send(DESCRIBE, {"users": [{"name": args.name}]})
                result = found["results"][0] if found["results"] else {"credential_infos": []}
                codes = [c["mechanism"] for c in result.get("credential_infos") or []] or codes
            body = {"deletions": [{"name": args.name, "mechanism": c} for c in codes], "upsertions": []}
        _, resp = conn.send(ALTER, body)
        failed = [r for r in resp["results"] if r["error_code"]]
        for r in failed:
            print(f"groupcoord users: {r['user']}: {error_name(r['error_code'])}: {r['error_message']}",
                  file=sys.stderr)
        return 1 if failed else 0
    finally:
        cluster.close()


def _print(users: dict[str, dict[str, int | str]]) -> None:
    from client.admin_cli import table

    table(("USER", "MECHANISM", "ITERATIONS"),
          [(u, m, i) for u, mechs in sorted(users.items()) for m, i in sorted(mechs.items())])
