"""JoinGroup (11), as Kafka's classic GroupCoordinator handles it.

Order of checks: group id non-empty (INVALID_GROUP_ID) -> shard loading/not owned -> session timeout
within [group.min.session.timeout.ms, group.max.session.timeout.ms] (INVALID_SESSION_TIMEOUT) -> a known
member id for an unknown group (UNKNOWN_MEMBER_ID) -> group.max.size (GROUP_MAX_SIZE_REACHED; counts
members awaiting join while PreparingRebalance, all members otherwise) -> protocol type/protocols
compatible with the group (INCONSISTENT_GROUP_PROTOCOL).
New members (empty member id) get the id "<client_id>-<uuid>" ("<group_instance_id>-<uuid>" for static
members; the prefix cut to 1,024 characters, so the id fits every string field that carries it); from v4 a dynamic new member is only registered as pending and answered MEMBER_ID_REQUIRED
(KIP-394) and must rejoin with that id before its session timeout. A static member that rejoins with an
empty member id replaces its old id (the old id's parked requests get FENCED_INSTANCE_ID); in a Stable
group whose selected protocol would not change this needs no rebalance: the new id is written to the log
and the member gets the current generation. A known member rejoining a Stable group triggers a rebalance
only if it is the leader or its metadata changed; otherwise it gets the current generation back.
"""

from __future__ import annotations

from .env import Env
from .errors import Err
from .group import COMPLETING, EMPTY, PREPARING, STABLE, Group
from .member import Member
from .outcome import Effects
from .rebalance import (
    evict,
    fence_parked,
    group_record,
    leader_members,
    maybe_prepare_rebalance,
    member_key,
    member_trigger,
    park_join,
    prepare_rebalance,
    schedule_session,
    try_complete_join,
)
from .responses import join_response

MEMBER_ID_PREFIX_CHARS = 1024  # a 32767-byte client id must not make an id that no string field can carry


def handle_join(env: Env, fx: Effects, version: int, req: dict, token: object,
                client_id: str, client_host: str) -> None:
    group_id = req["group_id"]
    member_id = req.get("member_id") or ""
    session = req["session_timeout_ms"]
    error = Err.INVALID_GROUP_ID if not group_id else env.status_error(group_id)
    if error is None and not (env.cfg.group_min_session_timeout_ms <= session
                              <= env.cfg.group_max_session_timeout_ms):
        error = Err.INVALID_SESSION_TIMEOUT
    if error is not None:
        fx.complete(token, join_response(version, error, member_id))
        return
    shard = env.shard_of(group_id)
    group = shard.groups.get(group_id)
    created = False
    if group is None:
        if member_id:
            fx.complete(token, join_response(version, Err.UNKNOWN_MEMBER_ID, member_id))
            return
        group = shard.groups[group_id] = Group(group_id, EMPTY, fx.now_ms)
        created = True
    _JoinCall(env, fx, version, req, token, client_id, client_host, group, member_id).run()
    if group.state is PREPARING:
        try_complete_join(env, fx, group)
    if created and group.state is EMPTY and not group.members and not group.pending_members:
        del shard.groups[group_id]


class _JoinCall:
    """One JoinGroup request against one group (Kafka's handleJoinGroup and its do*JoinGroup helpers)."""

    __slots__ = (
        "client_host",
        "client_id",
        "env",
        "fx",
        "group",
        "instance_id",
        "member_id",
        "names",
        "protocol_type",
        "protocols",
        "reason",
        "rebalance",
        "session",
        "token",
        "version",
    )

    def __init__(self, env: Env, fx: Effects, version: int, req: dict, token: object, client_id: str,
                 client_host: str, group: Group, member_id: str) -> None:
        self.env, self.fx, self.version, self.token = env, fx, version, token
        self.client_id, self.client_host, self.group, self.member_id = client_id, client_host, group, member_id
        self.instance_id = req.get("group_instance_id") if version >= 5 else None
        self.session = req["session_timeout_ms"]
        rebalance = req.get("rebalance_timeout_ms", -1)
        self.rebalance = self.session if version == 0 or rebalance is None or rebalance < 0 else rebalance
        self.protocol_type = req.get("protocol_type") or ""
        self.protocols = [(p["name"], p["metadata"]) for p in req.get("protocols") or ()]
        self.names = frozenset(name for name, _ in self.protocols)
        self.reason = req.get("reason") if version >= 8 else None  # KIP-800: the rebalance history keeps it

    def reply(self, error: Err, member_id: str | None = None) -> None:
        self.fx.complete(self.token, join_response(self.version, error,
                                                   self.member_id if member_id is None else member_id))

    def run(self) -> None:
        group = self.group
        if not self._accept():
            member = group.members.get(self.member_id)
            if member is not None:
                evict(self.env, self.fx, group, self.member_id)
            self.reply(Err.GROUP_MAX_SIZE_REACHED, "")
        elif not group.supports_protocols(self.protocol_type, self.names):
            self.reply(Err.INCONSISTENT_GROUP_PROTOCOL)
        elif not self.member_id:
            self._new_member()
        else:
            self._known_member()

    def _accept(self) -> bool:
        group, limit = self.group, self.env.cfg.group_max_size
        if group.state is EMPTY:
            return True
        member = group.members.get(self.member_id)
        if group.state is PREPARING:
            return (member is not None and member.join is not None) or group.num_awaiting_join < limit
        return member is not None or len(group.members) < limit

    # ------------------------------------------------------------ new member (empty member id)

    def _new_member(self) -> None:
        env, group = self.env, self.group
        prefix = self.instance_id if self.instance_id is not None else self.client_id
        new_id = f"{prefix[:MEMBER_ID_PREFIX_CHARS]}-{env.new_id()}"
        if self.instance_id is not None:
            old_id = group.current_static(self.instance_id)
            if old_id is not None:
                self._replace_static(old_id, new_id)
            else:
                self._add_and_rebalance(new_id)
        elif self.version >= 4:
            group.add_pending(new_id)
            env.timers.schedule(member_key(group.group_id, new_id), self.fx.now_ms + self.session)
            self.reply(Err.MEMBER_ID_REQUIRED, new_id)
        else:
            self._add_and_rebalance(new_id)

    def _add_and_rebalance(self, member_id: str) -> None:
        env, fx, group = self.env, self.fx, self.group
        member = Member(member_id, self.instance_id, self.client_id, self.client_host, self.rebalance,
                        self.session, self.protocol_type, self.protocols, is_new=True)
        if group.state is PREPARING and group.previous_state is EMPTY:
            group.new_member_added = True
        group.add(member)
        park_join(env, fx, group, member, self.token, self.version)
        schedule_session(env, fx.now_ms, group, member, env.cfg.new_member_join_timeout_ms)
        maybe_prepare_rebalance(env, fx, group, "member-joined", member_trigger(member, self.reason))

    def _replace_static(self, old_id: str, new_id: str) -> None:
        env, fx, group = self.env, self.fx, self.group
        member = group.members[old_id]
        old_leader = group.leader_id
        saved = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        undo = (dict(group.members), old_leader, set(group.pending_sync))
        # the reversible part first; the group record (when no rebalance follows) is encoded before anything
        # that cannot be taken back (answers to the old id's parked requests, timers)
        group.replace_static(self.instance_id, old_id, new_id)
        group.update_protocols(member, self.protocols)
        member.rebalance_timeout_ms, member.session_timeout_ms = self.rebalance, self.session
        record = None
        if group.state is STABLE and group.protocol_name == group.select_protocol():
            try:
                record = group_record(env, group)
            except Exception:
                group.members.clear()
                group.members.update(undo[0])
                group.leader_id, group.pending_sync = undo[1], undo[2]
                group.static_members[self.instance_id] = old_id
                member.member_id = old_id
                group.update_protocols(member, saved[0])
                member.rebalance_timeout_ms, member.session_timeout_ms = saved[1], saved[2]
                raise
        fence_parked(env, fx, group, member, Err.FENCED_INSTANCE_ID, old_id)
        env.timers.cancel(member_key(group.group_id, old_id))
        schedule_session(env, fx.now_ms, group, member, self.session)
        park_join(env, fx, group, member, self.token, self.version)
        if group.state is STABLE:
            if record is not None:
                self._static_rejoin_without_rebalance(member, old_id, old_leader, saved, record)
            else:
                maybe_prepare_rebalance(env, fx, group, "static-member-changed", member_trigger(member, self.reason))
        elif group.state is COMPLETING:
            prepare_rebalance(env, fx, group, "static-member-changed", member_trigger(member, self.reason))

    def _static_rejoin_without_rebalance(self, member: Member, old_id: str, old_leader: str | None,
                                         saved: tuple, record: tuple[int, bytes, bytes]) -> None:
        env, fx, group, version = self.env, self.fx, self.group, self.version
        fx.write(*record)
        parked = group.take_join(member)
        assert parked is not None
        env.unpark(parked[0])
        is_leader = group.leader_id == member.member_id
        if version >= 9:
            response = join_response(version, Err.NONE, member.member_id, group.generation, group.protocol_type,
                                     group.protocol_name, group.leader_id or "",
                                     leader_members(group) if is_leader else [], skip_assignment=is_leader)
        else:
            # Pre-v9 the old leader id is returned so a restarted leader does not run a trivial assignment.
            response = join_response(version, Err.NONE, member.member_id, group.generation, group.protocol_type,
                                     group.protocol_name, old_leader or "")
        fx.complete(self.token, response)
        new_id, instance, token = member.member_id, self.instance_id, self.token

        def revert(fail_fx: Effects, error: int) -> None:
            if group.members.get(new_id) is member and group.static_members.get(instance) == new_id:
                group.update_protocols(member, saved[0])
                member.rebalance_timeout_ms, member.session_timeout_ms = saved[1], saved[2]
                group.replace_static(instance, new_id, old_id)
                env.timers.cancel(member_key(group.group_id, new_id))
                schedule_session(env, fail_fx.now_ms, group, member)
            fail_fx.complete(token, join_response(version, error, "", group.generation, group.protocol_type,
                                                  group.protocol_name, old_leader or ""))

        fx.on_fail(revert)

    # ------------------------------------------------------------ known member id

    def _known_member(self) -> None:
        group, member_id = self.group, self.member_id
        if member_id in group.pending_members:
            if self.instance_id is not None:
                self.reply(Err.UNKNOWN_MEMBER_ID)
            else:
                self._add_and_rebalance(member_id)
            return
        if group.is_static_fenced(self.instance_id, member_id):
            self.reply(Err.FENCED_INSTANCE_ID)
            return
        member = group.members.get(member_id)
        if member is None or (self.instance_id is not None and self.instance_id not in group.static_members):
            self.reply(Err.UNKNOWN_MEMBER_ID)
            return
        state = group.state
        if state is PREPARING:
            self._update_and_rebalance(member, "member-updated")
        elif state is COMPLETING:
            if member.matches(self.protocols):
                self._current_generation(member, with_members=group.is_leader(member_id))
            else:
                self._update_and_rebalance(member, "member-updated")
        elif state is STABLE:
            if group.is_leader(member_id):
                self._update_and_rebalance(member, "leader-rejoined")
            elif not member.matches(self.protocols):
                self._update_and_rebalance(member, "member-updated")
            else:
                self._current_generation(member, with_members=False)
        else:
            self.reply(Err.UNKNOWN_MEMBER_ID)

    def _update_and_rebalance(self, member: Member, reason: str) -> None:
        env, fx, group = self.env, self.fx, self.group
        group.update_protocols(member, self.protocols)
        park_join(env, fx, group, member, self.token, self.version)
        maybe_prepare_rebalance(env, fx, group, reason, member_trigger(member, self.reason))

    def _current_generation(self, member: Member, with_members: bool) -> None:
        group = self.group
        self.fx.complete(self.token, join_response(
            self.version, Err.NONE, member.member_id, group.generation, group.protocol_type, group.protocol_name,
            group.leader_id or "", leader_members(group) if with_members else []))
