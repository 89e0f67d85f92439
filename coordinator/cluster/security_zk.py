"""SCRAM users and ACLs in ZooKeeper, in Apache Kafka's ZooKeeper-era layout, shared by every node.

Paths (under the chroot of ``zookeeper.connect``):
- ``/config/users/<sanitized user>``: Kafka's ``ConfigEntityZNode`` ``{"version":1,"config":{...}}``; the
  ``SCRAM-SHA-256`` / ``SCRAM-SHA-512`` keys hold ``salt=..,stored_key=..,server_key=..,iterations=..``
  (``ScramCredential.encode``); any other key (quotas such as ``producer_byte_rate``) is kept untouched. The
  name is Kafka's ``Sanitizer.sanitize``: Java's ``URLEncoder`` (UTF-8; only ``A-Za-z0-9.-_*`` kept) with
  ``*`` as ``%2A`` and space as ``%20``; read back with ``URLDecoder`` (``+`` is a space). A user whose
  config becomes empty keeps its znode with ``"config":{}`` (as Kafka), read as no credentials.
- ``/config/changes/config_change_<seq>``: ``{"version":2,"entity_path":"users/<sanitized user>"}``, created
  in the same transaction as every user write. Purged by ``member.py`` (the topics' listener), not here.
- ``/kafka-acl/<Type>/<name>`` (LITERAL) and ``/kafka-acl-extended/prefixed/<Type>/<name>`` (PREFIXED):
  ``{"version":1,"acls":[...]}`` (``acls.encode_acl_node``). A pattern left without ACLs has no znode.
- ``/kafka-acl-changes/acl_changes_<seq>`` (``TOPIC:orders``) and ``/kafka-acl-extended-changes/acl_changes_
  <seq>`` (the extended JSON), created in the same transaction as every ACL write; ``SecuritySync`` purges
  those older than Kafka's 15 minutes (``changeExpirationMs``).

Rules:
- Writes (``update_user``, ``update_acl``) are Kafka's optimistic read-modify-write (``AdminZkClient``,
  ``AclAuthorizer.updateResourceAcls``): read the znode and its version, apply the caller's ``change`` (what
  it raises is raised), then set it at that version (create it if absent; delete an emptied ACL znode at
  that version) together with the change notification in one transaction. A lost check (BadVersion,
  NodeExists, NoNode) is read again and retried after a short random pause, ``WRITE_ATTEMPTS`` times at
  most, then ``ZkError``. A change that changes nothing writes nothing (no notification). One instance
  writes one znode at a time (per-path lock), so only other nodes' writes can win the check.
- A znode that does not decode is never overwritten: ``read_user``/``read_acl``/``update_*`` raise
  ``ZkError`` for it; whole-store reads log it (ERROR) and leave it out, and ``SecuritySync`` keeps what it
  last reported for it.
- ``SecuritySync`` (Kafka's ``ZkNodeChangeNotificationListener``): ``load`` lists the three change paths,
  then reads every user and ACL and reports each; ``run`` watches the change paths' children and, for each
  notification newer than the last one processed, re-reads what it names and reports its full state
  (``{}`` / ``frozenset()`` when gone); it ignores ``/config/changes`` entries for anything but
  ``users/<user>``. Every ``FULL_READ_S``, and after a session comes back (``CONNECTED`` after a loss:
  watches may be gone), it reads everything again and reports only what differs from what it last
  reported. Errors are logged once per failing stretch (WARNING, then INFO when reading works again) and
  retried after a backoff; ``run`` raises nothing but cancellation. Callbacks run on the trio thread; one
  that raises is logged and its report is tried again at the next full read.
- Nothing blocks the trio thread: kazoo's ``*_async`` calls through ``ZkStore._wait``; the watch and the
  connection listener only ``ZkStore.signal``.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote, unquote_plus

import trio
from kazoo.client import KazooState
from kazoo.exceptions import KazooException, NoNodeError

from coordinator.core.security.acls import (
    CHANGE_PREFIX,
    EXTENDED_ACL_ROOT,
    EXTENDED_CHANGES_PATH,
    LITERAL_ACL_ROOT,
    LITERAL_CHANGES_PATH,
    AccessControlEntry,
    ResourcePattern,
    acl_change_prefix,
    acl_node_path,
    decode_acl_change,
    decode_acl_node,
    encode_acl_change,
    encode_acl_node,
    parse_acl_node_path,
    resource_type_name,
)
from coordinator.core.security.scram import SCRAM_MECHANISMS
from protocol.acl_types import PatternType, ResourceType

from .state import CONFIG_CHANGE_PREFIX, CONFIG_CHANGES, expired_changes
from .zk import ZkError, ZkStore

log = logging.getLogger("groupcoord.cluster.security")

CONFIG_USERS = "/config/users"
DEFAULT_ENTITY = "<default>"  # Kafka's ConfigEntityName.Default (default quotas, never a user)
ACL_TYPES = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID,
             ResourceType.DELEGATION_TOKEN, ResourceType.USER)
ACL_ROOTS = (LITERAL_ACL_ROOT, f"{EXTENDED_ACL_ROOT}/prefixed")
SECURITY_PATHS = (CONFIG_USERS, LITERAL_ACL_ROOT, LITERAL_CHANGES_PATH, f"{EXTENDED_ACL_ROOT}/prefixed",
                  EXTENDED_CHANGES_PATH)
WRITE_ATTEMPTS = 10
RETRYABLE = ("BadVersionError", "NodeExistsError", "NoNodeError")
FULL_READ_S = 30.0
BACKOFF_S = (0.5, 5.0)  # first and longest pause after a failed turn
DECODE_ERRORS = (ValueError, KeyError, TypeError, AttributeError)  # what acls.decode_acl_* raise on bad data

Acls = frozenset[AccessControlEntry]
Scram = dict[str, str]


# ---------------------------------------------------------------- pure encoding
def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: ``alice@example.com`` -> ``alice%40example.com``, ``a b`` -> ``a%20b``."""
    return quote(name, safe="").replace("~", "%7E")  # quote keeps '~', URLEncoder does not; '*' -> %2A in both


def desanitize(name: str) -> str:
    """Kafka's ``Sanitizer.desanitize`` (``URLDecoder``: ``+`` is a space)."""
    return unquote_plus(name)


def user_path(user: str) -> str:
    if not user:
        raise ValueError("a user name must not be empty")
    return f"{CONFIG_USERS}/{sanitize(user)}"


def decode_user_config(user: str, data: bytes | None) -> dict[str, Any]:
    """The whole ``config`` object of a user's znode (no data or no ``config``: empty)."""
    if not data:
        return {}
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"user {user} config: not JSON: {e}") from None
    config = doc.get("config", {}) if isinstance(doc, dict) else None
    if not isinstance(config, dict):
        raise ValueError(f"user {user} config: 'config' is not an object")
    bad = [k for k in config if k in SCRAM_MECHANISMS and not isinstance(config[k], str)]
    if bad:
        raise ValueError(f"user {user} config: {bad[0]} is not a string")
    return config


def scram_entries(config: dict[str, Any]) -> Scram:
    return {k: v for k, v in config.items() if k in SCRAM_MECHANISMS}


def encode_user_config(config: dict[str, Any]) -> bytes:
    return json.dumps({"version": 1, "config": dict(sorted(config.items()))}, separators=(",", ":")).encode()


def encode_user_change(user: str) -> bytes:
    return json.dumps({"version": 2, "entity_path": f"users/{sanitize(user)}"}, separators=(",", ":")).encode()


def user_of_change(data: bytes) -> str | None:
    """The user a ``/config/changes`` notification names; None for anything else (topics, clients, a user's
    client quotas, the default entity)."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"config change notification: not JSON: {e}") from None
    path = doc.get("entity_path") if isinstance(doc, dict) else None
    if not isinstance(path, str):
        return None  # version 1 notifications name only topics and clients
    kind, _, name = path.partition("/")
    if kind != "users" or not name or "/" in name or name == DEFAULT_ENTITY:
        return None
    return desanitize(name)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _sequence(name: str, prefix: str) -> int | None:
    digits = name[len(prefix):] if name.startswith(prefix) else ""
    return int(digits) if digits.isdigit() else None


def _check_scram(new: Scram) -> Scram:
    for k, v in new.items():
        if k not in SCRAM_MECHANISMS or not isinstance(v, str):
            raise ValueError(f"not a SCRAM credential entry: {k!r}")
    return dict(new)


def _entry_key(e: AccessControlEntry) -> tuple[str, str, int, int]:
    return e.principal, e.host, int(e.operation), int(e.permission_type)


# ---------------------------------------------------------------- reading and writing
class ZkSecurity:
    """Users and ACLs in ZooKeeper: reads, and version-checked writes with their change notifications."""

    def __init__(self, zk: ZkStore) -> None:
        self.zk = zk
        self._locks: dict[str, trio.Lock] = {}

    async def ensure_paths(self) -> None:
        """Create the persistent paths (Kafka's ``createAclPaths``: one directory per resource type too)."""
        paths = [*SECURITY_PATHS, *(f"{root}/{resource_type_name(t)}" for root in ACL_ROOTS for t in ACL_TYPES)]
        pending = [self.zk.client.ensure_path_async(self.zk._p(p)) for p in paths]
        for result in pending:
            await self.zk._try(result)

    # -- users
    async def read_users(self) -> dict[str, Scram]:
        """Every user with at least one SCRAM credential -> {mechanism: credential string}."""
        users, _ = await self._read_users()
        return users

    async def read_user(self, user: str) -> Scram:
        node = await self._get(user_path(user))
        return {} if node is None else scram_entries(self._user_config(user, node[0]))

    async def update_user(self, user: str, change: Callable[[Scram], Scram]) -> Scram:
        """Set a user's SCRAM credentials to ``change(current)`` (other config keys kept); returns them."""
        path = user_path(user)
        async with self._serial(path):
            for attempt in range(WRITE_ATTEMPTS):
                if attempt:
                    await trio.sleep(random.uniform(0.02, 0.1))
                node = await self._get(path)
                config = {} if node is None else self._user_config(user, node[0])
                current = scram_entries(config)
                new = _check_scram(change(dict(current)))
                if new == current:  # nothing to write (an absent user stays absent)
                    return new
                merged = {k: v for k, v in config.items() if k not in SCRAM_MECHANISMS} | new
                txn = self.zk.client.transaction()
                if node is None:
                    txn.create(self.zk._p(path), encode_user_config(merged))
                else:
                    txn.set_data(self.zk._p(path), encode_user_config(merged), version=node[1].version)
                txn.create(self.zk._p(f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}"), encode_user_change(user),
                           sequence=True)
                if await self._commit(txn, f"user {user}"):
                    log.info("user %s SCRAM credentials written to ZooKeeper: %s", user, sorted(new))
                    return new
        raise ZkError(f"the config of user {user} kept changing under this write")

    # -- ACLs
    async def read_acls(self) -> dict[ResourcePattern, Acls]:
        """Every pattern with ACLs -> its entries."""
        acls, _ = await self._read_acls()
        return acls

    async def read_acl(self, pattern: ResourcePattern) -> Acls:
        node = await self._get(self._acl_path(pattern))
        return frozenset() if node is None else self._acl_entries(pattern, node[0])

    async def update_acl(self, pattern: ResourcePattern, change: Callable[[Acls], Acls]) -> Acls:
        """Set a pattern's ACLs to ``change(current)``; returns them (empty: its znode was deleted)."""
        path = self._acl_path(pattern)
        async with self._serial(path):
            for attempt in range(WRITE_ATTEMPTS):
                if attempt:
                    await trio.sleep(random.uniform(0.02, 0.1))
                node = await self._get(path)
                current = frozenset() if node is None else self._acl_entries(pattern, node[0])
                new = frozenset(change(current))
                if new == current:
                    return current
                txn = self.zk.client.transaction()
                data = encode_acl_node(sorted(new, key=_entry_key))
                if node is None:
                    txn.create(self.zk._p(path), data)
                elif not new:
                    txn.delete(self.zk._p(path), version=node[1].version)
                else:
                    txn.set_data(self.zk._p(path), data, version=node[1].version)
                txn.create(self.zk._p(acl_change_prefix(pattern.pattern_type)), encode_acl_change(pattern),
                           sequence=True)
                if await self._commit(txn, f"ACLs of {path}"):
                    log.info("ACLs of %s written to ZooKeeper: %d entries", path, len(new))
                    return new
        raise ZkError(f"the ACLs of {path} kept changing under this write")

    # -- internals (SecuritySync uses them too)
    @staticmethod
    def _acl_path(pattern: ResourcePattern) -> str:
        if not pattern.name or "/" in pattern.name:
            raise ValueError(f"no ZooKeeper path for resource name {pattern.name!r}")
        return acl_node_path(pattern)

    @staticmethod
    def _user_config(user: str, data: bytes | None) -> dict[str, Any]:
        try:
            return decode_user_config(user, data)
        except ValueError as e:
            raise ZkError(str(e)) from None

    @staticmethod
    def _acl_entries(pattern: ResourcePattern, data: bytes | None) -> Acls:
        try:
            return frozenset(decode_acl_node(data))
        except DECODE_ERRORS as e:
            raise ZkError(f"ACLs of {acl_node_path(pattern)} do not decode: {e!r}") from None

    @asynccontextmanager
    async def _serial(self, path: str) -> AsyncIterator[None]:
        lock = self._locks.setdefault(path, trio.Lock())
        try:
            async with lock:
                yield
        finally:
            if not lock.locked() and self._locks.get(path) is lock:  # no one waiting (a waiter would hold it)
                del self._locks[path]

    async def _commit(self, txn: Any, what: str) -> bool:
        """True when written; False when a check was lost (read again); ZkError otherwise. A missing
        parent path (someone removed it) is created again before the retry."""
        results = await self.zk._try(txn.commit_async())
        names = [type(r).__name__ for r in results if isinstance(r, Exception)]
        if not names:
            return True
        if "NoNodeError" in names:
            await self.ensure_paths()
        if any(n in RETRYABLE for n in names):
            return False
        raise ZkError(f"writing the {what}: {names}")

    async def _get(self, path: str) -> tuple[bytes, Any] | None:
        """(data, stat), or None when the znode does not exist."""
        return (await self._get_many([path])).get(path)

    async def _get_many(self, paths: list[str]) -> dict[str, tuple[bytes, Any]]:
        """Read znodes, all requests issued at once; absent ones are left out."""
        pending = [(path, self.zk.client.get_async(self.zk._p(path))) for path in paths]
        out: dict[str, tuple[bytes, Any]] = {}
        for path, result in pending:
            try:
                out[path] = await self.zk._wait(result)
            except NoNodeError:
                continue
            except KazooException as e:
                raise ZkError(f"{type(e).__name__}: {e}") from None
        return out

    async def _children(self, path: str, watch: Callable[[Any], None] | None = None) -> list[str]:
        try:
            return await self.zk._wait(self.zk.client.get_children_async(self.zk._p(path), watch=watch))
        except NoNodeError:
            return []
        except KazooException as e:
            raise ZkError(f"{type(e).__name__}: {e}") from None

    async def _read_users(self) -> tuple[dict[str, Scram], set[str]]:
        """Users with credentials, and the users whose znode does not decode."""
        names = [n for n in await self._children(CONFIG_USERS) if n != DEFAULT_ENTITY]
        nodes = await self._get_many([f"{CONFIG_USERS}/{n}" for n in names])
        users: dict[str, Scram] = {}
        bad: set[str] = set()
        for path, (data, _) in nodes.items():
            user = desanitize(path.rsplit("/", 1)[1])
            try:
                scram = scram_entries(decode_user_config(user, data))
            except ValueError as e:
                log.error("ZooKeeper %s: %s; left out", path, e)
                bad.add(user)
                continue
            if scram:
                users[user] = scram
        return users, bad

    async def _read_acls(self) -> tuple[dict[ResourcePattern, Acls], set[ResourcePattern]]:
        """Patterns with ACLs, and the patterns whose znode does not decode."""
        type_dirs = [f"{root}/{kind}" for root in ACL_ROOTS for kind in await self._children(root)]
        listings = [(d, self.zk.client.get_children_async(self.zk._p(d))) for d in type_dirs]
        paths: list[str] = []
        for d, result in listings:
            try:
                paths += [f"{d}/{name}" for name in await self.zk._wait(result)]
            except NoNodeError:
                continue
            except KazooException as e:
                raise ZkError(f"{type(e).__name__}: {e}") from None
        patterns: dict[str, ResourcePattern] = {}
        for path in paths:
            try:
                patterns[path] = parse_acl_node_path(path)
            except ValueError as e:
                log.warning("ZooKeeper %s: %s; left out", path, e)
        acls: dict[ResourcePattern, Acls] = {}
        bad: set[ResourcePattern] = set()
        for path, (data, _) in (await self._get_many(list(patterns))).items():
            try:
                entries = frozenset(decode_acl_node(data))
            except DECODE_ERRORS as e:
                log.error("ZooKeeper %s: ACLs do not decode (%r); left out", path, e)
                bad.add(patterns[path])
                continue
            if entries:
                acls[patterns[path]] = entries
        return acls, bad


# ---------------------------------------------------------------- following
class SecuritySync:
    """Keeps a node's users and ACLs equal to ZooKeeper's."""

    def __init__(self, zk: ZkStore, on_user: Callable[[str, Scram], None],
                 on_acl: Callable[[ResourcePattern, Acls], None]) -> None:
        self.zk = zk
        self.store = ZkSecurity(zk)
        self.on_user = on_user
        self.on_acl = on_acl
        self._users: dict[str, Scram] = {}  # what was last reported (users with credentials)
        self._acls: dict[ResourcePattern, Acls] = {}  # likewise (patterns with ACLs)
        self._last: dict[str, int] = {CONFIG_CHANGES: -1, LITERAL_CHANGES_PATH: -1, EXTENDED_CHANGES_PATH: -1}
        self._ctimes: dict[str, int] = {}  # ACL change notification path -> creation time (ms), for the purge
        self._wake = trio.Event()
        self._need_full = True
        self._next_full = 0.0
        self._failing = False

    def wake(self) -> None:
        """Process new notifications now (e.g. after this node's own write). Call from the trio thread."""
        self._wake.set()

    async def load(self) -> None:
        """Read every user and ACL and report each. Raises ``ZkError``."""
        await self._full_read()

    async def run(self) -> None:
        listener = self._on_state
        self.zk.client.add_listener(listener)
        backoff = BACKOFF_S[0]
        try:
            while True:
                self._wake = trio.Event()  # replaced before reading: a change during the turn wakes the next
                try:
                    if self._need_full or trio.current_time() >= self._next_full:
                        await self._full_read()
                    await self._changes()
                except (ZkError, KazooException) as e:
                    if not self._failing:
                        log.warning("following users and ACLs in ZooKeeper failed: %s; retrying", e)
                    self._failing, self._need_full = True, True
                    with trio.move_on_after(backoff):
                        await self._wake.wait()
                    backoff = min(backoff * 2, BACKOFF_S[1])
                    continue
                if self._failing:
                    log.info("following users and ACLs in ZooKeeper again")
                    self._failing = False
                backoff = BACKOFF_S[0]
                with trio.move_on_after(max(0.0, self._next_full - trio.current_time())):
                    await self._wake.wait()
        finally:
            self.zk.client.remove_listener(listener)

    # -- kazoo's threads: signal only
    def _on_watch(self, _event: Any) -> None:
        self.zk.signal(self.wake)  # sets the event current when it runs on the trio thread

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self.zk.signal(self._reconnected)

    def _reconnected(self) -> None:
        self._need_full = True
        self._wake.set()

    # -- the trio thread
    async def _full_read(self) -> None:
        """List the change paths (their sequences so far are covered by this read), read everything and
        report what differs from what was last reported."""
        await self.store.ensure_paths()
        listed = {path: await self.store._children(path, watch=self._on_watch) for path in self._last}
        users, bad_users = await self.store._read_users()
        acls, bad_acls = await self.store._read_acls()
        for user in sorted(set(self._users) | set(users)):
            if user not in bad_users and users.get(user, {}) != self._users.get(user, {}):
                self._report_user(user, users.get(user, {}))
        for pattern in set(self._acls) | set(acls):
            if pattern not in bad_acls and acls.get(pattern, frozenset()) != self._acls.get(pattern, frozenset()):
                self._report_acl(pattern, acls.get(pattern, frozenset()))
        for path, names in listed.items():
            prefix = CONFIG_CHANGE_PREFIX if path == CONFIG_CHANGES else CHANGE_PREFIX
            seqs = [s for n in names if (s := _sequence(n, prefix)) is not None]
            self._last[path] = max([self._last[path], *seqs])
        self._need_full = False
        self._next_full = trio.current_time() + FULL_READ_S

    async def _changes(self) -> None:
        """Process the notifications newer than the last one processed (re-arming the watches); purge
        expired ACL notifications."""
        names = await self.store._children(CONFIG_CHANGES, watch=self._on_watch)
        fresh = sorted((s, n) for n in names if (s := _sequence(n, CONFIG_CHANGE_PREFIX)) is not None
                       and s > self._last[CONFIG_CHANGES])
        if fresh:
            users: dict[str, None] = {}
            for path, (data, _) in (await self.store._get_many([f"{CONFIG_CHANGES}/{n}" for _, n in fresh])).items():
                try:
                    user = user_of_change(data)
                except ValueError as e:
                    log.warning("%s: %s", path, e)
                    continue
                if user is not None:
                    users[user] = None
            if users:
                await self._reread_users(list(users))
            self._last[CONFIG_CHANGES] = fresh[-1][0]
        for root, pattern_type in ((LITERAL_CHANGES_PATH, PatternType.LITERAL),
                                   (EXTENDED_CHANGES_PATH, PatternType.PREFIXED)):
            await self._acl_changes(root, pattern_type)

    async def _acl_changes(self, root: str, pattern_type: PatternType) -> None:
        names = await self.store._children(root, watch=self._on_watch)
        paths = {f"{root}/{n}": s for n in names if (s := _sequence(n, CHANGE_PREFIX)) is not None}
        for path in [p for p in self._ctimes if p.startswith(f"{root}/") and p not in paths]:
            del self._ctimes[path]  # purged by another node
        unread = [p for p in paths if p not in self._ctimes]  # new ones, and at start the older ones' ctimes
        patterns: dict[ResourcePattern, None] = {}
        newest = self._last[root]
        for path, (data, stat) in (await self.store._get_many(unread)).items():
            self._ctimes[path] = stat.ctime
            if paths[path] <= self._last[root]:
                continue
            newest = max(newest, paths[path])
            try:
                patterns[decode_acl_change(pattern_type, data)] = None
            except DECODE_ERRORS as e:
                log.warning("%s: %s", path, e)
        if patterns:
            await self._reread_acls(list(patterns))
        self._last[root] = newest
        old = [p for p in expired_changes(self._ctimes, _now_ms()) if p.startswith(f"{root}/")]
        pending = [(p, self.zk.client.delete_async(self.zk._p(p))) for p in old]
        for path, result in pending:
            try:
                await self.zk._wait(result)
            except NoNodeError:
                pass
            except KazooException as e:
                raise ZkError(f"{type(e).__name__}: {e}") from None
            self._ctimes.pop(path, None)

    async def _reread_users(self, users: list[str]) -> None:
        nodes = await self.store._get_many([user_path(u) for u in users])
        for user in users:
            node = nodes.get(user_path(user))
            try:
                scram = {} if node is None else scram_entries(decode_user_config(user, node[0]))
            except ValueError as e:
                log.error("ZooKeeper %s: %s; left as it was", user_path(user), e)
                continue
            self._report_user(user, scram)

    async def _reread_acls(self, patterns: list[ResourcePattern]) -> None:
        paths = {p: acl_node_path(p) for p in patterns}
        nodes = await self.store._get_many(list(paths.values()))
        for pattern, path in paths.items():
            node = nodes.get(path)
            try:
                entries = frozenset() if node is None else frozenset(decode_acl_node(node[0]))
            except DECODE_ERRORS as e:
                log.error("ZooKeeper %s: ACLs do not decode (%r); left as they were", path, e)
                continue
            self._report_acl(pattern, entries)

    def _report_user(self, user: str, scram: Scram) -> None:
        try:
            self.on_user(user, dict(scram))
        except Exception:  # the node's own store failed: tried again at the next full read
            log.exception("applying user %s from ZooKeeper failed", user)
            return
        if scram:
            self._users[user] = dict(scram)
        else:
            self._users.pop(user, None)

    def _report_acl(self, pattern: ResourcePattern, entries: Acls) -> None:
        try:
            self.on_acl(pattern, entries)
        except Exception:
            log.exception("applying the ACLs of %s from ZooKeeper failed", acl_node_path(pattern))
            return
        if entries:
            self._acls[pattern] = entries
        else:
            self._acls.pop(pattern, None)
