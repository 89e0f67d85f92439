"""Follower fetch sessions (KIP-227), the leader's side: a follower lists only what changed. Pure.

Why: a follower fetches every partition it follows from this leader (tens of them) once per replication
cycle, and a commit touches one. Without sessions every cycle encodes, sends and decodes every partition
twice (request and answer); with one, a request lists the partitions whose fetch position moved and an
answer the partitions with news.

Rules (Kafka's ``FetchManager``/``FetchSession``; the request's ``session_id`` and ``session_epoch``):
- (0, -1): sessionless; the request's partitions are the whole fetch, every one answered. (S, -1): the same,
  and session S is closed.
- (0, 0) or (S, 0): a full request opening a new session (S, if any, is closed): its partitions are the
  session's, and the answer carries the new session's id (epoch 1 expected next). No session is opened, and
  the answer carries id 0 (the follower goes on with full requests), when the request names a partition
  ``known`` refuses: a session only ever holds partitions this node hosts.
- (S, N > 0): incremental. S unknown: FETCH_SESSION_ID_NOT_FOUND; S expecting another epoch (or fetched
  for another replica): INVALID_FETCH_SESSION_EPOCH; either way the follower starts a new session. Listed
  partitions are added or updated (fetch offset, leader epoch, max bytes), ``forgotten`` ones removed; a
  listed partition ``known`` refuses is fetched this once but not kept. The fetch covers every partition of
  the session.
- An answer in a session lists only the partitions with records, an error, or a high watermark or log start
  offset other than the last this session was answered (Kafka's ``maybeUpdateResponseData``: after an error
  the cached high watermark is -1, so the partition is sent again when the error ends). ``answered`` records
  what was sent; a fetch that waits and is served again records only what it finally answers.
- Bounded memory: at most ``MAX_SESSIONS`` sessions (the least recently used is closed to make room), one per
  replica id (a new one closes that replica's older one), each holding only partitions ``known`` accepts.
- Session ids are never 0, and not reused while their session lives.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from protocol.errors import ErrorCode

TopicPartition = tuple[str, int]
MAX_SESSIONS = 64
FINAL_EPOCH = -1
INITIAL_EPOCH = 0


@dataclass(slots=True)
class SessionPartition:
    fetch_offset: int
    leader_epoch: int
    max_bytes: int
    sent_hw: int = -1  # what this session was last answered (-1: never, or an error since)
    sent_log_start: int = -1
    # the session's latest fetch passed over it: nothing had moved since its progress was noted, and the
    # follower was caught up then (the leader's ``_serve_fetch`` sets and settles it)
    skipped: bool = False


@dataclass(slots=True)
class Session:
    session_id: int
    replica: int
    epoch: int  # the epoch the next incremental request must carry
    parts: dict[TopicPartition, SessionPartition] = field(default_factory=dict)
    fetched_ms: int = 0  # when its latest fetch arrived (wall clock; the leader's ``_serve_fetch`` sets it)


@dataclass(slots=True)
class FetchContext:
    """One follower fetch: the partitions to serve, and the session it belongs to (None: sessionless)."""

    parts: dict[TopicPartition, SessionPartition]
    session: Session | None = None
    error: int = 0  # a whole-request error (the answer lists no partition)

    @property
    def session_id(self) -> int:
        return self.session.session_id if self.session is not None else 0

    def must_answer(self, part: SessionPartition, has_records: bool, error: int, hw: int, log_start: int) -> bool:
        """Whether a partition belongs in the answer."""
        return self.session is None or has_records or error != 0 or hw != part.sent_hw or \
            log_start != part.sent_log_start

    def answered(self, part: SessionPartition, error: int, hw: int, log_start: int) -> None:
        """A partition was sent in the answer with these values."""
        part.sent_hw = -1 if error else hw
        part.sent_log_start = log_start


Listed = Iterable[tuple[TopicPartition, int, int, int]]  # (tp, fetch offset, current leader epoch, max bytes)


class FetchSessions:
    def __init__(self, max_sessions: int = MAX_SESSIONS, first_id: int = 1) -> None:
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[int, Session] = OrderedDict()  # least recently used first
        self._by_replica: dict[int, int] = {}
        self._next_id = first_id if 0 < first_id < 2**31 else 1

    def __len__(self) -> int:
        return len(self._sessions)

    def of_replica(self, replica: int) -> Session | None:
        """The session a replica fetches in now, if any."""
        sid = self._by_replica.get(replica)
        return self._sessions.get(sid) if sid is not None else None

    def context(self, replica: int, session_id: int, epoch: int, listed: Listed, forgotten: Iterable[TopicPartition],
                known: Callable[[TopicPartition], bool]) -> FetchContext:
        """The fetch a request asks for (see the rules); sessions are opened, updated or closed here."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id:
                self._close(session_id)
            parts = {tp: SessionPartition(offset, leader_epoch, max_bytes)
                     for tp, offset, leader_epoch, max_bytes in listed}
            if epoch == FINAL_EPOCH or not all(known(tp) for tp in parts):
                return FetchContext(parts)
            return FetchContext(parts, self._open(replica, parts))
        session = self._sessions.get(session_id)
        if session is None:
            return FetchContext({}, error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch or session.replica != replica:
            return FetchContext({}, error=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        session.epoch = _next_epoch(epoch)
        self._sessions.move_to_end(session_id)
        parts = session.parts
        for tp in forgotten:
            parts.pop(tp, None)
        extra: dict[TopicPartition, SessionPartition] = {}
        for tp, offset, leader_epoch, max_bytes in listed:
            cur = parts.get(tp)
            if cur is not None:
                cur.fetch_offset, cur.leader_epoch, cur.max_bytes = offset, leader_epoch, max_bytes
            elif known(tp):
                parts[tp] = SessionPartition(offset, leader_epoch, max_bytes)
            else:  # fetched this once (it answers its error), never kept
                extra[tp] = SessionPartition(offset, leader_epoch, max_bytes)
        return FetchContext({**parts, **extra} if extra else parts, session)

    def _open(self, replica: int, parts: dict[TopicPartition, SessionPartition]) -> Session:
        old = self._by_replica.get(replica)
        if old is not None:
            self._close(old)
        while len(self._sessions) >= self.max_sessions:
            self._close(next(iter(self._sessions)))
        sid = self._next_id
        while sid in self._sessions:
            sid = sid % (2**31 - 1) + 1
        self._next_id = sid % (2**31 - 1) + 1
        session = Session(sid, replica, 1, parts)
        self._sessions[sid] = session
        self._by_replica[replica] = sid
        return session

    def _close(self, session_id: int) -> None:
        session = self._sessions.pop(session_id, None)
        if session is not None and self._by_replica.get(session.replica) == session_id:
            del self._by_replica[session.replica]


def _next_epoch(epoch: int) -> int:
    return 1 if epoch >= 2**31 - 1 else epoch + 1
