"""SCRAM users and ACLs in ZooKeeper against a real ZooKeeper: Kafka's znodes and notifications, version-checked
writes that lose nothing under concurrency, ``SecuritySync`` following another node within 2 s, and
``groupcoord users --zookeeper``."""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from kazoo.client import KazooState
from zookeeper_process import free_port  # type: ignore[import-not-found]

from coordinator.cluster import security_zk
from coordinator.cluster.security_zk import SecuritySync, ZkSecurity, desanitize, sanitize
from coordinator.cluster.zk import ZkError, ZkStore
from coordinator.core.security.acls import AccessControlEntry, ResourcePattern
from coordinator.core.security.scram import ScramCredential
from protocol.acl_types import AclOperation, AclPermissionType, PatternType, ResourceType

OP_TIMEOUT_S = 10.0
REACH_S = 2.0  # another node's change reaches the callbacks within this
REPO = Path(__file__).resolve().parents[2]

ORDERS = ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL)
APPS = ResourcePattern(ResourceType.GROUP, "app-", PatternType.PREFIXED)


def entry(principal: str = "User:alice", op: AclOperation = AclOperation.READ,
          perm: AclPermissionType = AclPermissionType.ALLOW) -> AccessControlEntry:
    return AccessControlEntry(principal, "*", op, perm)


def cred(mechanism: str = "SCRAM-SHA-512", password: str = "pw") -> str:
    return ScramCredential.from_password(mechanism, password, iterations=4096).encode()


@asynccontextmanager
async def connected(zk_connect: str) -> AsyncIterator[ZkStore]:
    zk = ZkStore(zk_connect, 3000, OP_TIMEOUT_S)
    await zk.connect(15.0, lambda _state: None)
    try:
        yield zk
    finally:
        with trio.CancelScope(shield=True):
            await zk.close()


async def raw(zk: ZkStore, path: str) -> bytes | None:
    node = await ZkSecurity(zk)._get(path)
    return None if node is None else node[0]


async def children(zk: ZkStore, path: str) -> list[str]:
    return sorted(await ZkSecurity(zk)._children(path))


async def notifications(zk: ZkStore, path: str) -> list[bytes]:
    names = await children(zk, path)
    assert all(re.fullmatch(r"(config_change_|acl_changes_)\d{10}", n) for n in names), names
    return [await raw(zk, f"{path}/{n}") or b"" for n in names]


async def wait_for(done: Callable[[], bool], timeout: float = REACH_S) -> None:
    with trio.fail_after(timeout):
        while not done():
            await trio.sleep(0.01)


def test_sanitize_is_kafkas_url_encoding() -> None:
    cases = {"alice": "alice", "alice@example.com": "alice%40example.com", "a b": "a%20b", "a*b": "a%2Ab",
             "a~b": "a%7Eb", "a.b-c_d": "a.b-c_d", "CN=x,OU=y": "CN%3Dx%2COU%3Dy", "ü/é": "%C3%BC%2F%C3%A9"}
    for name, sanitized in cases.items():
        assert sanitize(name) == sanitized
        assert desanitize(sanitized) == name
    assert desanitize("a+b") == "a b"  # URLDecoder


# ---------------------------------------------------------------- users
async def test_user_znodes_and_notifications_are_kafkas(zk_connect: str) -> None:
    async with connected(zk_connect) as zk:
        sec = ZkSecurity(zk)
        await sec.ensure_paths()
        c512, c256 = cred("SCRAM-SHA-512"), cred("SCRAM-SHA-256")
        assert await sec.update_user("alice", lambda cur: cur | {"SCRAM-SHA-512": c512}) == {"SCRAM-SHA-512": c512}
        assert json.loads(await raw(zk, "/config/users/alice") or b"") == {"version": 1,
                                                                         "config": {"SCRAM-SHA-512": c512}}
        assert [json.loads(n) for n in await notifications(zk, "/config/changes")] == [
            {"version": 2, "entity_path": "users/alice"}]

        # a second mechanism is merged
        await sec.update_user("alice", lambda cur: cur | {"SCRAM-SHA-256": c256})
        assert await sec.read_user("alice") == {"SCRAM-SHA-512": c512, "SCRAM-SHA-256": c256}

        # another key (a quota, as Kafka keeps in the same znode) survives SCRAM changes
        doc = {"version": 1, "config": {"SCRAM-SHA-512": c512, "SCRAM-SHA-256": c256, "producer_byte_rate": "1024"}}
        await zk._try(zk.client.set_async(zk._p("/config/users/alice"), json.dumps(doc).encode()))
        assert await sec.read_user("alice") == {"SCRAM-SHA-512": c512, "SCRAM-SHA-256": c256}
        await sec.update_user("alice", lambda cur: {k: v for k, v in cur.items() if k != "SCRAM-SHA-256"})
        assert json.loads(await raw(zk, "/config/users/alice") or b"")["config"] == {
            "SCRAM-SHA-512": c512, "producer_byte_rate": "1024"}
        await sec.update_user("alice", lambda cur: {})
        assert json.loads(await raw(zk, "/config/users/alice") or b"")["config"] == {"producer_byte_rate": "1024"}
        assert await sec.read_user("alice") == {} and "alice" not in await sec.read_users()
        assert len(await notifications(zk, "/config/changes")) == 4

        # a change that changes nothing writes nothing
        await sec.update_user("alice", lambda cur: cur)
        await sec.update_user("nobody", lambda cur: {})
        assert len(await notifications(zk, "/config/changes")) == 4
        assert await raw(zk, "/config/users/nobody") is None and await sec.read_user("nobody") == {}

        # a user whose config is empty (Kafka's "{}") has no credentials; one without config at all neither
        await zk._try(zk.client.create_async(zk._p("/config/users/bob"), b"{}"))
        await zk._try(zk.client.create_async(zk._p("/config/users/carl"), b'{"version":1,"config":{}}'))
        assert await sec.read_user("bob") == {} and await sec.read_user("carl") == {}
        assert await sec.read_users() == {}

        # names that need sanitizing round-trip
        for name, node in (("alice@example.com", "alice%40example.com"), ("a b", "a%20b")):
            await sec.update_user(name, lambda cur: cur | {"SCRAM-SHA-512": c512})
            assert json.loads(await raw(zk, f"/config/users/{node}") or b"")["config"] == {"SCRAM-SHA-512": c512}
            assert json.loads((await notifications(zk, "/config/changes"))[-1]) == {
                "version": 2, "entity_path": f"users/{node}"}
            assert await sec.read_user(name) == {"SCRAM-SHA-512": c512}
        assert await sec.read_users() == {"alice@example.com": {"SCRAM-SHA-512": c512},
                                          "a b": {"SCRAM-SHA-512": c512}}

        # what change raises is raised, and nothing is written; a non-SCRAM key is refused
        with pytest.raises(KeyError):
            await sec.update_user("alice", lambda cur: {}[1])
        with pytest.raises(ValueError):
            await sec.update_user("alice", lambda cur: {"producer_byte_rate": "1"})
        assert len(await notifications(zk, "/config/changes")) == 6


# ---------------------------------------------------------------- ACLs
async def test_acl_znodes_and_notifications_are_kafkas(zk_connect: str) -> None:
    async with connected(zk_connect) as zk:
        sec = ZkSecurity(zk)
        await sec.ensure_paths()
        for path in ("/kafka-acl/Topic", "/kafka-acl/TransactionalId", "/kafka-acl-extended/prefixed/Group",
                     "/kafka-acl-changes", "/kafka-acl-extended-changes", "/config/users"):
            assert await raw(zk, path) is not None, path

        read, deny = entry(), entry("User:*", AclOperation.WRITE, AclPermissionType.DENY)
        assert await sec.update_acl(ORDERS, lambda cur: cur | {read}) == frozenset({read})
        assert json.loads(await raw(zk, "/kafka-acl/Topic/orders") or b"") == {"version": 1, "acls": [
            {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}]}
        assert await notifications(zk, "/kafka-acl-changes") == [b"TOPIC:orders"]
        await sec.update_acl(ORDERS, lambda cur: cur | {deny})
        assert await sec.read_acl(ORDERS) == {read, deny}

        assert await sec.update_acl(APPS, lambda cur: cur | {read}) == {read}
        assert json.loads(await raw(zk, "/kafka-acl-extended/prefixed/Group/app-") or b"")["acls"] == [
            {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}]
        assert [json.loads(n) for n in await notifications(zk, "/kafka-acl-extended-changes")] == [
            {"version": 1, "resourceType": "GROUP", "name": "app-", "patternType": "PREFIXED"}]
        assert await sec.read_acls() == {ORDERS: {read, deny}, APPS: {read}}

        # unchanged: nothing written; emptied: the znode is deleted, with a notification
        await sec.update_acl(ORDERS, lambda cur: cur | {read})
        assert len(await notifications(zk, "/kafka-acl-changes")) == 2
        assert await sec.update_acl(ORDERS, lambda cur: frozenset()) == frozenset()
        assert await raw(zk, "/kafka-acl/Topic/orders") is None
        assert await notifications(zk, "/kafka-acl-changes") == [b"TOPIC:orders"] * 3
        assert await sec.read_acl(ORDERS) == frozenset() and await sec.read_acls() == {APPS: {read}}
        await sec.update_acl(APPS, lambda cur: cur - {read})
        assert await raw(zk, "/kafka-acl-extended/prefixed/Group/app-") is None
        assert len(await notifications(zk, "/kafka-acl-extended-changes")) == 2
        await sec.update_acl(ORDERS, lambda cur: frozenset())  # absent and empty: nothing to do
        assert len(await notifications(zk, "/kafka-acl-changes")) == 3

        # a znode that does not decode is reported, left out of whole reads, and never overwritten
        for bad in (b"not json", b'{"version":1,"acls":[{"principal":"User:a","operation":3}]}'):
            await zk._try(zk.client.create_async(zk._p("/kafka-acl/Group/broken"), bad))
            broken = ResourcePattern(ResourceType.GROUP, "broken", PatternType.LITERAL)
            with pytest.raises(ZkError):
                await sec.read_acl(broken)
            with pytest.raises(ZkError):
                await sec.update_acl(broken, lambda cur: cur | {read})
            assert await sec.read_acls() == {} and await raw(zk, "/kafka-acl/Group/broken") == bad
            await zk._try(zk.client.delete_async(zk._p("/kafka-acl/Group/broken")))


async def test_concurrent_acl_updates_from_two_nodes_lose_nothing(zk_connect: str) -> None:
    async with connected(zk_connect) as a, connected(zk_connect) as b:
        stores = [ZkSecurity(a), ZkSecurity(b)]
        await stores[0].ensure_paths()
        wanted = {entry(f"User:u{i}") for i in range(20)}

        async def add(sec: ZkSecurity, e: AccessControlEntry) -> None:
            await sec.update_acl(ORDERS, lambda cur: cur | {e})

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                for i, e in enumerate(sorted(wanted, key=lambda e: e.principal)):
                    nursery.start_soon(add, stores[i % 2], e)
        assert await stores[0].read_acl(ORDERS) == wanted
        assert len(await notifications(a, "/kafka-acl-changes")) == 20


# ---------------------------------------------------------------- following
class Recorder:
    def __init__(self) -> None:
        self.users: list[tuple[str, dict[str, str]]] = []
        self.acls: list[tuple[ResourcePattern, frozenset[AccessControlEntry]]] = []

    def on_user(self, user: str, scram: dict[str, str]) -> None:
        self.users.append((user, scram))

    def on_acl(self, pattern: ResourcePattern, entries: frozenset[AccessControlEntry]) -> None:
        self.acls.append((pattern, entries))


async def test_security_sync_follows_another_node(zk_connect: str) -> None:
    async with connected(zk_connect) as a, connected(zk_connect) as b:
        other = ZkSecurity(b)
        await other.ensure_paths()
        c512 = cred()
        await other.update_user("pre", lambda cur: {"SCRAM-SHA-512": c512})
        await other.update_acl(APPS, lambda cur: {entry()})
        seen = Recorder()
        sync = SecuritySync(a, seen.on_user, seen.on_acl)
        await sync.load()
        assert seen.users == [("pre", {"SCRAM-SHA-512": c512})] and seen.acls == [(APPS, {entry()})]

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sync.run)
            await trio.sleep(0.2)
            assert seen.users == [("pre", {"SCRAM-SHA-512": c512})]  # nothing reported twice

            await other.update_acl(ORDERS, lambda cur: cur | {entry()})
            await wait_for(lambda: (ORDERS, {entry()}) in seen.acls)
            await other.update_user("alice@example.com", lambda cur: {"SCRAM-SHA-512": c512})
            await wait_for(lambda: ("alice@example.com", {"SCRAM-SHA-512": c512}) in seen.users)
            await other.update_acl(ORDERS, lambda cur: frozenset())
            await wait_for(lambda: seen.acls[-1] == (ORDERS, frozenset()))
            await other.update_acl(APPS, lambda cur: cur | {entry("User:bob")})
            await wait_for(lambda: seen.acls[-1] == (APPS, {entry(), entry("User:bob")}))
            await other.update_user("pre", lambda cur: {})
            await wait_for(lambda: seen.users[-1] == ("pre", {}))

            # a topic's config change is not a user's; nor is a client quota of a user
            users_before = len(seen.users)
            for path in ("topics/orders", "users/pre/clients/c1", "clients/c1"):
                data = json.dumps({"version": 2, "entity_path": path}).encode()
                await b._try(b.client.create_async(b._p("/config/changes/config_change_"), data, sequence=True))
            # Kafka versions before 2.0 wrote PascalCase types in literal notifications
            acl = b'{"version":1,"acls":[{"principal":"User:x","permissionType":"Deny","operation":"All","host":"*"}]}'
            await b._try(b.client.create_async(b._p("/kafka-acl/TransactionalId/tx"), acl))
            await b._try(b.client.create_async(b._p("/kafka-acl-changes/acl_changes_"), b"TransactionalId:tx",
                                               sequence=True))
            tx = ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx", PatternType.LITERAL)
            await wait_for(lambda: seen.acls[-1] == (tx, {entry("User:x", AclOperation.ALL,
                                                                AclPermissionType.DENY)}))
            assert len(seen.users) == users_before

            # this node's own write is followed too (its notification; wake() makes it at once)
            mine = ZkSecurity(a)
            await mine.update_user("me", lambda cur: {"SCRAM-SHA-512": c512})
            sync.wake()
            await wait_for(lambda: seen.users[-1] == ("me", {"SCRAM-SHA-512": c512}))

            # a session that comes back (watches maybe lost) reads everything again: a change made without
            # a notification is found at once
            await b._try(b.client.delete_async(b._p("/kafka-acl-extended/prefixed/Group/app-")))
            sync._on_state(KazooState.CONNECTED)
            await wait_for(lambda: seen.acls[-1] == (APPS, frozenset()))
            nursery.cancel_scope.cancel()


async def test_security_sync_survives_errors_and_logs_once(zk_connect: str, monkeypatch: pytest.MonkeyPatch,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    async with connected(zk_connect) as a, connected(zk_connect) as b:
        other = ZkSecurity(b)
        await other.ensure_paths()
        seen = Recorder()
        sync = SecuritySync(a, seen.on_user, seen.on_acl)
        await sync.load()
        monkeypatch.setattr(security_zk, "BACKOFF_S", (0.05, 0.1))
        real = sync.store._children
        failures = [0]

        async def failing(path: str, watch: Any = None) -> list[str]:
            if failures[0] < 8:
                failures[0] += 1
                raise ZkError("ConnectionLoss: simulated")
            return await real(path, watch)

        monkeypatch.setattr(sync.store, "_children", failing)
        with caplog.at_level(logging.INFO, logger="groupcoord.cluster.security"):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sync.run)
                await other.update_acl(ORDERS, lambda cur: {entry()})
                await wait_for(lambda: (ORDERS, {entry()}) in seen.acls, timeout=5)
                await wait_for(lambda: any("again" in r.getMessage() for r in caplog.records
                                           if r.levelno == logging.INFO))  # logged when the turn completes
                nursery.cancel_scope.cancel()
        assert failures[0] == 8
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "simulated" in warnings[0].getMessage()


async def test_security_sync_full_read_reports_only_differences(zk_connect: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A change made without a notification (a lost watch) is found by the full read, and only it is
    reported."""
    monkeypatch.setattr(security_zk, "FULL_READ_S", 0.3)
    async with connected(zk_connect) as a, connected(zk_connect) as b:
        other = ZkSecurity(b)
        await other.ensure_paths()
        await other.update_acl(ORDERS, lambda cur: {entry()})
        await other.update_user("u", lambda cur: {"SCRAM-SHA-512": cred()})
        seen = Recorder()
        sync = SecuritySync(a, seen.on_user, seen.on_acl)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sync.run)  # without load(): its first full read reports everything
            await wait_for(lambda: len(seen.acls) == 1 and len(seen.users) == 1)
            await b._try(b.client.delete_async(b._p("/kafka-acl/Topic/orders")))  # no notification
            await wait_for(lambda: len(seen.acls) == 2)
            await trio.sleep(0.8)  # more full reads: nothing else differs
            assert seen.acls == [(ORDERS, {entry()}), (ORDERS, frozenset())] and len(seen.users) == 1
            nursery.cancel_scope.cancel()


async def test_security_sync_purges_expired_acl_notifications_only(zk_connect: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    async with connected(zk_connect) as a, connected(zk_connect) as b:
        other = ZkSecurity(b)
        await other.ensure_paths()
        await other.update_acl(ORDERS, lambda cur: {entry()})
        await other.update_acl(APPS, lambda cur: {entry()})
        await other.update_user("u", lambda cur: {"SCRAM-SHA-512": cred()})
        seen = Recorder()
        sync = SecuritySync(a, seen.on_user, seen.on_acl)
        await sync.load()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sync.run)
            await trio.sleep(0.3)
            assert len(await children(a, "/kafka-acl-changes")) == 1  # young: kept
            monkeypatch.setattr(security_zk, "_now_ms", lambda: int(time.time() * 1000) + 16 * 60 * 1000)
            sync.wake()
            with trio.fail_after(REACH_S):
                while await children(a, "/kafka-acl-changes") or await children(a, "/kafka-acl-extended-changes"):
                    await trio.sleep(0.05)
            assert len(await children(a, "/config/changes")) == 1  # member.py purges those
            nursery.cancel_scope.cancel()


# ---------------------------------------------------------------- groupcoord users --zookeeper
async def cli(*args: str) -> tuple[int, str, str, float]:
    start = time.monotonic()
    done = await trio.run_process([sys.executable, "-m", "coordinator.cli", "users", *args], cwd=REPO,
                                  capture_stdout=True, capture_stderr=True, check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode(), time.monotonic() - start


async def test_users_cli_against_zookeeper(zk_connect: str) -> None:
    with trio.fail_after(60):
        rc, out, err, _ = await cli("add", "admin", "--password", "admin-secret", "--iterations", "4096",
                                    "--zookeeper", zk_connect)
        assert rc == 0, err
        rc, out, err, _ = await cli("list", "--zookeeper", zk_connect)
        assert rc == 0, err
        rows = [line.split() for line in out.splitlines()]
        assert ["admin", "SCRAM-SHA-256", "4096"] in rows and ["admin", "SCRAM-SHA-512", "4096"] in rows, out
    async with connected(zk_connect) as zk:
        stored = await ZkSecurity(zk).read_user("admin")
        assert sorted(stored) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
        for mechanism, text in stored.items():
            c = ScramCredential.parse(text)
            again = ScramCredential.from_password(mechanism, "admin-secret", salt=c.salt, iterations=c.iterations)
            assert again.stored_key == c.stored_key and again.server_key == c.server_key
        assert [json.loads(n) for n in await notifications(zk, "/config/changes")] == [
            {"version": 2, "entity_path": "users/admin"}]
    with trio.fail_after(60):
        rc, _, err, _ = await cli("delete", "admin", "--mechanism", "SCRAM-SHA-256", "--zookeeper", zk_connect)
        assert rc == 0, err
        rc, _, err, _ = await cli("delete", "admin", "--mechanism", "SCRAM-SHA-256", "--zookeeper", zk_connect)
        assert rc == 1 and "RESOURCE_NOT_FOUND" in err and len(err.strip().splitlines()) == 1, err
    async with connected(zk_connect) as zk:
        assert sorted(await ZkSecurity(zk).read_user("admin")) == ["SCRAM-SHA-512"]


async def test_users_cli_unreachable_zookeeper_and_bad_usage(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there (this worker's port block: no other worker binds it)
    with trio.fail_after(60):
        rc, _, err, took = await cli("list", "--zookeeper", f"127.0.0.1:{port}/x")
    assert rc == 1 and took < 15, (rc, took, err)
    assert len(err.strip().splitlines()) == 1 and "cannot connect to ZooKeeper" in err, err
    with trio.fail_after(60):
        for where in (["--data-dir", str(tmp_path), "--zookeeper", "127.0.0.1:1"],
                      ["--bootstrap-server", "127.0.0.1:1", "--zookeeper", "127.0.0.1:1"]):
            rc, _, err, _ = await cli("add", "x", "--password", "p", *where)
            assert rc == 2 and "not allowed with argument" in err, err
