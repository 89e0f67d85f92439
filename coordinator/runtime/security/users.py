"""The user store: SCRAM credentials, one per user and mechanism, that SCRAM and PLAIN logins check.

Rules:
- Single node: records in the server's own security log (``storage/keyed_store.py``), key
  ``scram/<mechanism>/<user>``, value Kafka's credential string (``salt=..,stored_key=..,server_key=..,
  iterations=n``); replayed at start; a change is answered only once durable. Never a password.
- ``lookup(user, mechanism)`` is a dict read (the SASL exchange's credential lookup, on the event loop).
- DescribeUserScramCredentials (50) and AlterUserScramCredentials (51) as Kafka 3.9's ZkAdminManager
  answers them:
  - describe: users null or empty = every user with a credential; a user named twice gets DUPLICATE_RESOURCE, one
    without credentials RESOURCE_NOT_FOUND ("Attempt to describe nonexistent user"); per user its
    mechanisms and iterations (never salts or keys).
  - alter: per user one result. A user named more than once across deletions and upsertions (for the same
    mechanism) is DUPLICATE_RESOURCE; an empty name UNACCEPTABLE_CREDENTIAL ("Username must not be empty");
    an unknown mechanism UNSUPPORTED_SASL_MECHANISM; iterations outside 4096..16384
    UNACCEPTABLE_CREDENTIAL ("Too few/many iterations"); deleting a credential that does not exist
    RESOURCE_NOT_FOUND. A user's changes are all-or-nothing; the changes of every valid user are written
    in one durable write.
- Cluster mode (``follow_zookeeper``): the credentials are ZooKeeper's ``/config/users/<user>`` (Kafka's
  layout, shared by every node, ``cluster/security_zk.py``), not the local log. A change is written there, per
  user as a version-checked read-modify-write with Kafka's change notification, answered once ZooKeeper has
  it (a user whose write fails gets KAFKA_STORAGE_ERROR with the reason; the others keep theirs), and applied
  here at once; other nodes' changes arrive through ``apply``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from coordinator.core.security.scram import (
    SCRAM_MECHANISMS,
    ScramCredential,
    ScramMechanism,
    iterations_problem,
    mechanism_for_code,
)
from coordinator.storage.errors import StorageError
from coordinator.storage.keyed_store import KeyedStore
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from coordinator.cluster.security_zk import ZkSecurity

log = logging.getLogger("groupcoord.security")
PREFIX = b"scram/"


def key_of(mechanism: str, user: str) -> bytes:
    return PREFIX + mechanism.encode() + b"/" + user.encode()


def parse_key(key: bytes) -> tuple[str, str] | None:
    if not key.startswith(PREFIX):
        return None
    mech, sep, user = key[len(PREFIX):].partition(b"/")
    return (mech.decode(), user.decode()) if sep else None


class UserStore:
    def __init__(self, store: KeyedStore) -> None:
        self.store = store
        self._creds: dict[tuple[str, str], ScramCredential] = {}  # (user, mechanism name) -> credential
        for key, value in store.items().items():
            parsed = parse_key(key)
            if parsed is not None and parsed[0] in SCRAM_MECHANISMS:
                self._creds[(parsed[1], parsed[0])] = ScramCredential.parse(value.decode())
        self.version = 0
        self.zk: ZkSecurity | None = None  # cluster mode: ZooKeeper holds the users

    def follow_zookeeper(self, zk: ZkSecurity) -> int:
        """Cluster mode: forget the local log's users (ZooKeeper's arrive through ``apply``); how many there were."""
        local = len(self._creds)
        self._creds.clear()
        self.zk = zk
        self.version += 1
        return local

    def apply(self, user: str, creds: dict[str, str]) -> None:
        """A user's credentials as ZooKeeper holds them now (mechanism -> Kafka's credential text; {}: none)."""
        for key in [k for k in self._creds if k[0] == user]:
            del self._creds[key]
        for mech, text in creds.items():
            if mech not in SCRAM_MECHANISMS:
                continue
            try:
                self._creds[(user, mech)] = ScramCredential.parse(text)
            except ValueError as e:
                log.warning("user %s: the %s credential in ZooKeeper is not usable (%s); ignored", user, mech, e)
        self.version += 1

    def lookup(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        return self._creds.get((user, mechanism.name))

    def users(self) -> dict[str, dict[str, int]]:
        """user -> {mechanism: iterations}."""
        out: dict[str, dict[str, int]] = {}
        for (user, mech), cred in sorted(self._creds.items()):
            out.setdefault(user, {})[mech] = cred.iterations
        return out

    # ---------------------------------------------------------------- DescribeUserScramCredentials (50)
    def describe(self, users: list[str] | None) -> dict[str, Any]:
        known = self.users()
        names = users if users else sorted(known)  # null or empty: every user (Kafka's describingAllUsers)
        results = []
        seen: dict[str, int] = {}
        for name in names:
            seen[name] = seen.get(name, 0) + 1
        for name in dict.fromkeys(names):
            if seen[name] > 1:
                results.append({"user": name, "error_code": ErrorCode.DUPLICATE_RESOURCE,
                                "error_message": f"Cannot describe SCRAM credentials for the same user twice in a "
                                                 f"single request: {name}", "credential_infos": []})
            elif name not in known:
                results.append({"user": name, "error_code": ErrorCode.RESOURCE_NOT_FOUND,
                                "error_message": f"Attempt to describe nonexistent user: {name}",
                                "credential_infos": []})
            else:
                results.append({"user": name, "error_code": 0, "error_message": None, "credential_infos": [
                    {"mechanism": SCRAM_MECHANISMS[m].code, "iterations": i} for m, i in known[name].items()]})
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "results": results}

    # ---------------------------------------------------------------- AlterUserScramCredentials (51)
    async def alter(self, deletions: list[dict[str, Any]], upsertions: list[dict[str, Any]]) -> dict[str, Any]:
        errors: dict[str, tuple[int, str]] = {}
        order: list[str] = []
        per_user: dict[str, list[tuple[str, ScramCredential | None]]] = {}
        counts: dict[tuple[str, int], int] = {}
        for d in deletions:
            counts[(d["name"], d["mechanism"])] = counts.get((d["name"], d["mechanism"]), 0) + 1
        for u in upsertions:
            counts[(u["name"], u["mechanism"])] = counts.get((u["name"], u["mechanism"]), 0) + 1
        for item, deleting in [(d, True) for d in deletions] + [(u, False) for u in upsertions]:
            name = item["name"]
            if name not in order:
                order.append(name)
            if name in errors:
                continue
            mech = mechanism_for_code(item["mechanism"])
            problem: tuple[int, str] | None = None
            if not name:
                problem = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
            elif counts[(name, item["mechanism"])] > 1:
                problem = (ErrorCode.DUPLICATE_RESOURCE, f"A user credential cannot be altered twice in the same "
                                                         f"request: {name}")
            elif mech is None:
                problem = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism: {item['mechanism']}")
            elif deleting:
                if (name, mech.name) not in self._creds:
                    problem = (ErrorCode.RESOURCE_NOT_FOUND, f"Attempt to delete a user credential that does not "
                                                            f"exist: {name}")
                else:
                    per_user.setdefault(name, []).append((mech.name, None))
            else:
                why = iterations_problem(item["iterations"])
                if why is not None:
                    problem = (ErrorCode.UNACCEPTABLE_CREDENTIAL, why)
                elif not item["salt"] or not item["salted_password"]:
                    problem = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty")
                else:
                    cred = ScramCredential.from_salted_password(mech, bytes(item["salted_password"]),
                                                                bytes(item["salt"]), item["iterations"])
                    per_user.setdefault(name, []).append((mech.name, cred))
            if problem is not None:
                errors[name] = problem
                per_user.pop(name, None)
        write_errors = await self._write(per_user) if per_user else {}
        results = []
        for name in order:
            if name in errors:
                code, message = errors[name]
                results.append({"user": name, "error_code": code, "error_message": message})
            elif write_errors.get(name) is not None:
                results.append({"user": name, "error_code": ErrorCode.KAFKA_STORAGE_ERROR,
                                "error_message": write_errors[name]})
            else:
                results.append({"user": name, "error_code": 0, "error_message": None})
        return {"throttle_time_ms": 0, "results": results}

    async def _write(self, per_user: dict[str, list[tuple[str, ScramCredential | None]]]) -> dict[str, str | None]:
        """Make the changes durable (the local log, or ZooKeeper), then live; user -> the error, if any."""
        if self.zk is not None:
            from coordinator.cluster.zk import ZkError  # cluster mode only: kazoo is there

            out: dict[str, str | None] = {}
            for user, items in per_user.items():
                def change(current: dict[str, str], items: list[tuple[str, ScramCredential | None]] = items
                           ) -> dict[str, str]:
                    new = dict(current)
                    for mech, cred in items:
                        if cred is None:
                            new.pop(mech, None)
                        else:
                            new[mech] = cred.encode()
                    return new
                try:
                    self.apply(user, await self.zk.update_user(user, change))
                    out[user] = None
                except ZkError as e:  # answered as a storage error, never a crash
                    out[user] = f"ZooKeeper: {e}"
            return out
        changes = [(key_of(mech, user), None if cred is None else cred.encode().encode())
                   for user, items in per_user.items() for mech, cred in items]
        try:
            await trio.to_thread.run_sync(self.store.write, changes)
        except (StorageError, OSError) as e:  # answered as a storage error, never a crash
            return dict.fromkeys(per_user, str(e))
        for user, items in per_user.items():
            for mech, cred in items:
                if cred is None:
                    self._creds.pop((user, mech), None)
                else:
                    self._creds[(user, mech)] = cred
        self.version += 1
        return dict.fromkeys(per_user)

    def put_offline(self, changes: list[tuple[str, str, ScramCredential | None]]) -> None:
        """``groupcoord users add/delete --data-dir`` with the server stopped: (user, mechanism, credential or
        None to delete), written durably now."""
        self.store.write([(key_of(mech, user), None if cred is None else cred.encode().encode())
                          for user, mech, cred in changes])
        for user, mech, cred in changes:
            if cred is None:
                self._creds.pop((user, mech), None)
            else:
                self._creds[(user, mech)] = cred
