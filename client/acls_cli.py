"""``groupcoord acls add/list/remove``: ACL bindings over the wire, shaped like Kafka's ``kafka-acls.sh``.

Rules:
- ``--bootstrap-server`` (default 127.0.0.1:9092) and ``--command-config FILE`` (Kafka's client properties);
  one request per command: CreateAcls (30), DescribeAcls (29) or DeleteAcls (31), version 3.
- Resources: ``--topic T``, ``--group G``, ``--transactional-id X`` (each repeatable) and ``--cluster``
  (the CLUSTER resource ``kafka-cluster``); ``--resource-pattern-type`` literal (default) or prefixed, and
  for list/remove also any or match.
- ``add`` needs a resource, a principal (``--allow-principal``/``--deny-principal``, ``Type:name``) and an
  ``--operation`` (Kafka's names, case-insensitive: Read, Write, ..., All; no implicit All). It creates every
  combination resource x principal x host x operation, as kafka-acls does; hosts default to ``*``
  (``--allow-host`` for the allow principals, ``--deny-host`` for the deny ones).
- ``list`` prints RESOURCE-TYPE, NAME, PATTERN, PRINCIPAL, HOST, OPERATION, PERMISSION (Kafka's enum names).
  No resource option lists every ACL (any pattern type); ``--principal P`` narrows it.
- ``remove`` takes add's options as a filter: what is not given matches anything (no principal: every
  principal and permission; no host: every host; no operation: every operation). ``--topic T`` alone removes
  every ACL of the literal topic T. It prints what was removed. Unlike kafka-acls it asks for no
  confirmation: it is meant for scripts.
- Errors are one line on stderr: exit 1 for a refusal (Kafka's error name and message; any failed binding
  fails the command), 2 for bad usage. SECURITY_DISABLED says the server has no authorizer
  (``authorizer.class.name``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from protocol.acl_types import (
    CLUSTER_RESOURCE_NAME,
    WILDCARD_HOST,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
VERSION = 3
HEADERS = ("RESOURCE-TYPE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION")
OPERATIONS = {op.name.replace("_", "").lower(): op for op in AclOperation
              if op not in (AclOperation.UNKNOWN, AclOperation.ANY)}
NO_AUTHORIZER = ("SECURITY_DISABLED: the server has no authorizer "
                 "(set authorizer.class.name, e.g. kafka.security.authorizer.AclAuthorizer)")


def operation(text: str) -> AclOperation:
    op = OPERATIONS.get(text.replace("_", "").replace("-", "").lower())
    if op is None:
        raise argparse.ArgumentTypeError(
            f"unknown operation {text!r} (one of Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
            "DescribeConfigs, AlterConfigs, IdempotentWrite, All)")
    return op


def principal(text: str) -> str:
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise argparse.ArgumentTypeError(f"a principal is Type:name (User:alice), not {text!r}")
    return text


def add_parsers(sub: Any) -> None:
    from client.security import add_command_config_argument

    acls = sub.add_parser("acls", help="ACL bindings (like kafka-acls)")
    asub = acls.add_subparsers(dest="action", required=True)

    def common(p: argparse.ArgumentParser, patterns: list[str]) -> argparse.ArgumentParser:
        p.add_argument("--bootstrap-server", "-b", default="127.0.0.1:9092")
        p.add_argument("--topic", action="append", default=[])
        p.add_argument("--group", action="append", default=[])
        p.add_argument("--transactional-id", action="append", default=[])
        p.add_argument("--cluster", action="store_true", help=f"the cluster resource ({CLUSTER_RESOURCE_NAME})")
        p.add_argument("--resource-pattern-type", type=str.lower, choices=patterns, default=None,
                       help="default: literal (list without a resource: any)")
        return add_command_config_argument(p)

    def bindings(p: argparse.ArgumentParser) -> None:
        p.add_argument("--allow-principal", type=principal, action="append", default=[])
        p.add_argument("--deny-principal", type=principal, action="append", default=[])
        p.add_argument("--allow-host", action="append", default=[])
        p.add_argument("--deny-host", action="append", default=[])
        p.add_argument("--operation", type=operation, action="append", default=[])

    bindings(common(asub.add_parser("add", help="add ACL bindings"), ["literal", "prefixed"]))
    filters = ["any", "match", "literal", "prefixed"]
    bindings(common(asub.add_parser("remove", help="remove the ACL bindings matching the options"), filters))
    p = common(asub.add_parser("list", help="list ACL bindings"), filters)
    p.add_argument("--principal", type=principal)


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    return ([(ResourceType.TOPIC, t) for t in args.topic] + [(ResourceType.GROUP, g) for g in args.group]
            + [(ResourceType.TRANSACTIONAL_ID, x) for x in args.transactional_id]
            + ([(ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME)] if args.cluster else []))


def _principals(args: argparse.Namespace) -> list[tuple[str, list[Any], AclPermissionType]]:
    """(principal, hosts, permission) for add/remove; hosts are ``*`` for add, any (None) for remove."""
    default: list[Any] = [WILDCARD_HOST] if args.action == "add" else [None]
    return ([(p, args.allow_host or default, AclPermissionType.ALLOW) for p in args.allow_principal]
            + [(p, args.deny_host or default, AclPermissionType.DENY) for p in args.deny_principal])


def _row(resource_type: int, name: str, pattern: int, acl: dict[str, Any]) -> tuple[str, ...]:
    def label(enum: Any, code: int) -> str:
        try:
            return str(enum(code).name)
        except ValueError:
            return str(code)

    return (label(ResourceType, resource_type), name, label(PatternType, pattern), acl["principal"], acl["host"],
            label(AclOperation, acl["operation"]), label(AclPermissionType, acl["permission_type"]))


def _error(code: int, message: str | None, what: str = "") -> str:
    from protocol.errors import ErrorCode, error_name

    if code == ErrorCode.SECURITY_DISABLED:
        return f"groupcoord acls: {what}{NO_AUTHORIZER}"
    return f"groupcoord acls: {what}{error_name(code)}: {message or ''}".rstrip(": ")


def run(args: argparse.Namespace) -> int:
    resources = _resources(args)
    if args.action == "add":
        if not resources:
            print("groupcoord acls: add needs --topic, --group, --transactional-id or --cluster", file=sys.stderr)
            return 2
        if not (args.allow_principal or args.deny_principal) or not args.operation:
            print("groupcoord acls: add needs --allow-principal or --deny-principal and --operation",
                  file=sys.stderr)
            return 2
    if args.action != "list" and ((args.allow_host and not args.allow_principal)
                                  or (args.deny_host and not args.deny_principal)):
        print("groupcoord acls: --allow-host/--deny-host need --allow-principal/--deny-principal", file=sys.stderr)
        return 2
    if args.action == "remove" and not resources:
        print("groupcoord acls: remove needs --topic, --group, --transactional-id or --cluster", file=sys.stderr)
        return 2
    from client.cluster import Cluster
    from client.errors import KafkaError, SecurityConfigError
    from client.security import security_from_args

    try:
        cluster = Cluster(args.bootstrap_server, client_id="groupcoord-acls", security=security_from_args(args))
        try:
            conn = cluster.least_loaded_connection()
            return {"add": _add, "list": _list, "remove": _remove}[args.action](conn, args, resources)
        finally:
            cluster.close()
    except SecurityConfigError as e:
        print(f"groupcoord acls: {e}", file=sys.stderr)
        return 2
    except (KafkaError, OSError) as e:
        print(f"groupcoord acls: {e}", file=sys.stderr)
        return 1


def _pattern(args: argparse.Namespace, resources: list[Any]) -> PatternType:
    if args.resource_pattern_type:
        return PatternType[args.resource_pattern_type.upper()]
    return PatternType.LITERAL if resources else PatternType.ANY


def _add(conn: Any, args: argparse.Namespace, resources: list[tuple[ResourceType, str]]) -> int:
    from client.admin_cli import table

    pattern = _pattern(args, resources)
    creations = [{"resource_type": kind, "resource_name": name, "resource_pattern_type": pattern,
                  "principal": who, "host": host, "operation": op, "permission_type": perm}
                 for kind, name in resources for who, hosts, perm in _principals(args)
                 for host in hosts for op in dict.fromkeys(args.operation)]
    _, resp = conn.send(CREATE_ACLS, {"creations": creations}, version=VERSION)
    added, failed = [], 0
    for c, r in zip(creations, resp["results"]):
        row = _row(c["resource_type"], c["resource_name"], pattern, c)
        if r["error_code"]:
            failed += 1
            print(_error(r["error_code"], r["error_message"], " ".join(row) + ": "), file=sys.stderr)
        else:
            added.append(row)
    if added:
        table(HEADERS, added)
    return 1 if failed else 0


def _list(conn: Any, args: argparse.Namespace, resources: list[tuple[ResourceType, str]]) -> int:
    from client.admin_cli import table

    pattern = _pattern(args, resources)
    targets: list[tuple[ResourceType, str | None]] = list(resources) or [(ResourceType.ANY, None)]
    rows: list[tuple[str, ...]] = []
    for kind, name in targets:
        _, resp = conn.send(DESCRIBE_ACLS, {
            "resource_type_filter": kind, "resource_name_filter": name, "pattern_type_filter": pattern,
            "principal_filter": args.principal, "host_filter": None, "operation": AclOperation.ANY,
            "permission_type": AclPermissionType.ANY}, version=VERSION)
        if resp["error_code"]:
            print(_error(resp["error_code"], resp["error_message"]), file=sys.stderr)
            return 1
        rows += [_row(r["resource_type"], r["resource_name"], r["pattern_type"], a)
                 for r in resp["resources"] for a in r["acls"]]
    table(HEADERS, sorted(set(rows)))
    return 0


def _remove(conn: Any, args: argparse.Namespace, resources: list[tuple[ResourceType, str]]) -> int:
    from client.admin_cli import table

    pattern = _pattern(args, resources)
    who: list[tuple[str | None, list[Any], AclPermissionType]] = list(_principals(args)) or [
        (None, [None], AclPermissionType.ANY)]
    ops = list(dict.fromkeys(args.operation)) or [AclOperation.ANY]
    filters = [{"resource_type_filter": kind, "resource_name_filter": name, "pattern_type_filter": pattern,
                "principal_filter": p, "host_filter": host, "operation": op, "permission_type": perm}
               for kind, name in resources for p, hosts, perm in who for host in hosts for op in ops]
    _, resp = conn.send(DELETE_ACLS, {"filters": filters}, version=VERSION)
    removed, failed = [], 0
    for result in resp["filter_results"]:
        if result["error_code"]:
            print(_error(result["error_code"], result["error_message"]), file=sys.stderr)
            return 1
        for m in result["matching_acls"]:
            row = _row(m["resource_type"], m["resource_name"], m["pattern_type"], m)
            if m["error_code"]:
                failed += 1
                print(_error(m["error_code"], m["error_message"], " ".join(row) + ": "), file=sys.stderr)
            else:
                removed.append(row)
    table(HEADERS, removed)
    return 1 if failed else 0
