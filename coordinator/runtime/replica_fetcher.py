"""A follower's fetcher for one leader node (Kafka's ``ReplicaFetcherThread`` per source broker).

Rules:
- The connection goes to the leader's endpoint on the inter-broker listener, with that listener's TLS and
  SASL (``security/peer_login.py``), logged in before the first request. A refused login is one WARNING line
  naming the node, the listener, the user and the peer's message (then at most one per 5 s), retried each
  second; a leader that advertises no such listener is reported the same way.
- One task per leader node, one connection, one request in flight: Fetch v12 with ``replica_id`` = this
  node's id, ``max_wait_ms`` ``FETCH_WAIT_MS``, at most ``FETCH_MAX_BYTES`` per response and
  ``PARTITION_MAX_BYTES`` per partition (bounded buffers). A response larger than the request allows is a
  protocol error (the connection is closed).
- The replication round is kept cheap (issue #35: it runs once per commit and follower): Fetch requests and
  answers go through the hand-written ``protocol.replica_fetch`` (the generic codec for every other call);
  a plain TCP connection is written and read on its socket directly (``os.write``/``os.read``, waiting
  with ``trio.lowlevel.wait_writable``/``wait_readable`` only when the kernel has nothing: no trio stream
  layer and its checkpoints per round), a TLS one through its stream; a socket error is a
  ``trio.BrokenResourceError`` caused by it, as the stream says it. Each request is built in one pass over
  the followed partitions.
- Each partition is fetched from its log end, which is always durable here: the batches of a response are
  appended as they are (``PartitionLog.append_as_follower``: CRC and contiguity checked, offsets and leader
  epochs kept) and made durable before the next fetch is sent. So the fetch offset the leader sees is this
  node's durable end (durable replication). A response of up to ``JOURNAL_MAX_BYTES`` (commits, small
  produces) is appended on the trio thread and into the node's journal (``GroupCommit.append_replicated``):
  one journal fdatasync covers every log of it, and a later journal replay re-appends what a crash lost.
  That fdatasync is done on the trio thread while the journal's fsyncs are fast (``GroupCommit.sync_here``,
  a moving average at most ``SYNC_HERE_MAX_S``: issue #35, a round then costs one wake-up of this node, not
  two, and none of the fsync child); slower, the group commit's next round does it (the fsync child's,
  shared with the node's own commits) and the fetcher waits for it. A larger one (catching up, bulk
  produce) is appended and its logs fsynced (``FSYNC_THREADS`` at a time) in one worker-thread call, which
  keeps the journal for small writes. Without a usable journal, every response goes the second way.
- A truncation (below) writes a truncation mark per log cut into the journal and syncs it, so a restart's
  replay never re-appends the entries cut away.
- Before a partition's first fetch under a leader epoch it is truncated by leader epoch (KIP-101):
  OffsetForLeaderEpoch for its latest cached epoch; the log is cut at the smaller of the leader's end offset
  for that epoch and its own (KIP-279); with no epoch known on either side, at the high watermark the last
  leader reported (0 when none: the whole log is fetched again). An append that does not meet the log end,
  or OFFSET_OUT_OF_RANGE, truncates again; OFFSET_OUT_OF_RANGE with the leader's log start past this log's
  end (retention moved it) empties the log and restarts it there (``PartitionLog.restart_at``).
- Fetch sessions (KIP-227, ``coordinator.cluster.fetch_sessions`` on the leader): each connection opens one
  with a full request (session epoch 0); later requests list only the partitions whose fetch offset or leader
  epoch moved, and forget those no longer fetched (truncating, refused, unfollowed); the leader answers only
  partitions with news. A leader that keeps no session (id 0) gets full requests; one that lost ours
  (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH) gets a new one. A new connection starts a new
  session.
- Fast failover (``replication.peer_trouble``): a connect that failed (OSError) and a connection reset or
  closed by the leader (``trio.BrokenResourceError``) are reported, as signs that its process may be gone
  (replication probes its listener; only refused connects count). A timeout (a slow or stopped leader), a
  protocol error or a refused login is not reported.
- Errors back off (``BACKOFF_S`` doubling to ``MAX_BACKOFF_S``); a partition the leader refuses
  (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH) waits for the next view. ``follow``
  replaces the partition set (a changed epoch marks a partition for truncation); ``stop`` ends the task.
- Log levels: a refusal that means the leader has not caught up with the view yet (UNKNOWN_TOPIC_OR_PARTITION
  while it creates the topic, NOT_LEADER_OR_FOLLOWER or UNKNOWN_LEADER_EPOCH while it takes the leadership)
  is normal in the first ``SETTLING_S`` after this node began to follow that partition at that epoch: DEBUG.
  Past that, or any other refusal, it needs an operator's attention: a rate-limited WARNING.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from coordinator.cluster.state import BrokerInfo, TopicPartition
from coordinator.runtime.rate_limited_log import RateLimitedLog
from coordinator.runtime.security.peer_login import PeerAuthenticationError
from coordinator.storage.errors import StorageError
from protocol import codec, replica_fetch
from protocol.errors import ErrorCode, ProtocolError
from protocol.record_batch import (
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_OFFSET,
    MIN_BATCH_LENGTH,
    CorruptBatchError,
    split_batches,
)

if TYPE_CHECKING:
    from coordinator.runtime.group_commit import GroupCommit
    from coordinator.runtime.services import FollowerReplication
    from coordinator.storage.journal import Journal
    from coordinator.storage.log import PartitionLog

log = logging.getLogger("groupcoord.replica_fetcher")

FETCH_VERSION = 12
EPOCH_VERSION = 4
FETCH_WAIT_MS = 500
FETCH_MAX_BYTES = 16 << 20
PARTITION_MAX_BYTES = 1 << 20
CONNECT_TIMEOUT_S = 5.0
ANSWER_SLACK_S = 10.0
BACKOFF_S = 0.05
MAX_BACKOFF_S = 1.0
FSYNC_THREADS = 8  # a response's logs are fsynced this many at a time
JOURNAL_MAX_BYTES = 512 << 10  # a response up to this size is made durable through the node's journal
REFUSED_WAIT_S = 0.2  # a partition the leader refused is asked again after this (or the next view)
_SIZE = struct.Struct(">i")
_INT32 = struct.Struct(">i")
_MAX_FRAME = FETCH_MAX_BYTES + PARTITION_MAX_BYTES + (1 << 20)


@dataclass(slots=True)
class _Followed:
    epoch: int
    since: float = 0.0  # trio time this node began to follow the partition at this epoch
    truncate: bool = True  # truncate by leader epoch before the next fetch
    refused_until: float = 0.0


# refusals of a leader that has not caught up with the view yet (a topic being created, a leadership being
# taken): expected for a moment after the view changed
_SETTLING_ERRORS = frozenset((ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                              ErrorCode.UNKNOWN_LEADER_EPOCH))
SETTLING_S = 10.0


class _Connection:
    def __init__(self, stream: trio.abc.Stream, client_id: str) -> None:
        self.stream = stream
        self.client_id = client_id
        self.correlation = 0
        self._buf = bytearray()
        # a plain TCP connection is written and read on its socket directly (-1: through the stream, TLS):
        # trio's stream layer costs a checkpoint per send and two per receive, every replication round
        self._fd = stream.socket.fileno() if isinstance(stream, trio.SocketStream) else -1
        # the fetch session on this connection (KIP-227): its id (0: none yet), the epoch of the next
        # incremental request, and the position of each partition as the leader has it
        self.session_id = 0
        self.session_epoch = 0
        self.sent: dict[TopicPartition, tuple[int, int]] = {}

    async def call(self, api_key: int, version: int, body: dict[str, Any], timeout_s: float,
                   round_codec: bool = False) -> dict[str, Any]:
        """One request, its answer; ``round_codec``: a replica fetch (Fetch v12 of ``_fetch``'s shape),
        encoded and decoded by ``protocol.replica_fetch``."""
        self.correlation += 1
        fetch = round_codec and api_key == 1 and version == replica_fetch.VERSION
        frame = replica_fetch.encode_request(self.correlation, self.client_id, body) if fetch else \
            codec.encode_request(api_key, version, self.correlation, self.client_id, body)
        # trio.fail_after, without its two generator context managers (once per replication round)
        with trio.CancelScope(deadline=trio.current_time() + timeout_s) as scope:
            await self._send(frame)
            payload = await self._answer()
        if scope.cancelled_caught:
            raise trio.TooSlowError
        corr, answer = replica_fetch.decode_response(payload) if fetch else \
            codec.decode_response(api_key, version, payload)
        if corr != self.correlation:
            raise ProtocolError(f"correlation id {corr}, expected {self.correlation}")
        return answer

    async def _send(self, frame: bytes) -> None:
        fd = self._fd
        if fd < 0:
            await self.stream.send_all(frame)
            return
        view = memoryview(frame)
        while view:
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                await trio.lowlevel.wait_writable(fd)
            except OSError as e:  # as trio's stream says it (fast failover tells a reset from the rest)
                raise trio.BrokenResourceError(f"socket connection broken: {e}") from e

    async def _answer(self) -> bytes:
        """The next answer frame's payload."""
        buf = self._buf
        while True:
            if len(buf) >= 4:
                size = _SIZE.unpack_from(buf)[0]
                if not 0 < size <= _MAX_FRAME:
                    raise ProtocolError(f"answer of {size} bytes")
                if len(buf) >= 4 + size:
                    payload = bytes(buf[4:4 + size])
                    del buf[:4 + size]
                    return payload
                want = 4 + size - len(buf)
            else:
                want = 4 - len(buf)
            chunk = await self._receive(max(65536, want))
            if not chunk:
                raise trio.BrokenResourceError("the leader closed the connection")
            buf += chunk

    async def _receive(self, n: int) -> bytes:
        fd = self._fd
        if fd < 0:
            return await self.stream.receive_some(n)
        while True:
            try:
                return os.read(fd, n)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(fd)
            except OSError as e:
                raise trio.BrokenResourceError(f"socket connection broken: {e}") from e


PeerConnection = _Connection  # one request at a time to a peer's inter-broker listener (the lag gauges' too)


class ReplicaFetcher:
    def __init__(self, replication: FollowerReplication, leader: BrokerInfo) -> None:
        self.replication = replication
        self.leader = leader
        self.node_id = replication.node_id
        self.partitions: dict[TopicPartition, _Followed] = {}
        self.stopped = False
        self._changed = trio.Event()
        self._cancel = trio.CancelScope()
        self._problems = RateLimitedLog(log, 5.0)
        self.fetches = 0

    def follow(self, parts: dict[TopicPartition, int]) -> None:
        """The partitions to fetch from this leader, with their leader epochs."""
        for tp in [tp for tp in self.partitions if tp not in parts]:
            del self.partitions[tp]
        for tp, epoch in parts.items():
            cur = self.partitions.get(tp)
            if cur is None or cur.epoch != epoch:
                self.partitions[tp] = _Followed(epoch, trio.current_time())
            else:
                cur.refused_until = 0.0
        self._changed.set()

    def stop(self) -> None:
        self.stopped = True
        self.partitions.clear()
        self._cancel.cancel()

    async def run(self) -> None:
        backoff = BACKOFF_S
        with self._cancel:
            while not self.stopped:
                if not self.partitions:
                    self._changed = trio.Event()
                    await self._changed.wait()
                    continue
                peer = self.replication.peer
                at = self.leader.endpoint(peer.listener)
                try:
                    if at is None:
                        raise PeerAuthenticationError(f"it advertises no {peer.listener} listener (the "
                                                      f"inter-broker listener)")
                    with trio.fail_after(CONNECT_TIMEOUT_S):
                        stream = await peer.open(*at)
                    async with stream:
                        conn = _Connection(stream, f"replica-{self.node_id}")
                        with trio.fail_after(CONNECT_TIMEOUT_S + ANSWER_SLACK_S):
                            await peer.login(lambda k, v, b, conn=conn: conn.call(k, v, b, ANSWER_SLACK_S))
                        while not self.stopped and self.partitions:
                            await self._truncate(conn)
                            if await self._fetch(conn):
                                backoff = BACKOFF_S
                except PeerAuthenticationError as e:  # one clear line (then one per 5 s), retried
                    self._problems.warning("cannot log in to node %s (%s) %s: %s; retrying", self.leader.node_id,
                                           f"{at[0]}:{at[1]}" if at else "?", peer.who, e)
                    await trio.sleep(MAX_BACKOFF_S)
                except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError,
                        ProtocolError) as e:
                    cause = e.__cause__ if isinstance(e, trio.BrokenResourceError) and e.__cause__ else e
                    self._problems.warning("fetching from node %s (%s) %s failed: %r", self.leader.node_id,
                                           f"{at[0]}:{at[1]}" if at else "?", peer.who, cause)
                    if isinstance(e, OSError):  # fast failover: maybe nothing listens there any more
                        self.replication.peer_trouble(self.leader.node_id, f"replica fetch connect failed ({e})")
                    elif isinstance(e, trio.BrokenResourceError):  # reset, or closed by the leader
                        how = "reset" if isinstance(cause, ConnectionResetError) else \
                            "closed by the leader" if cause is e else f"broken ({cause!r})"
                        self.replication.peer_trouble(self.leader.node_id, f"replica fetch connection {how}")
                    await trio.sleep(backoff)
                    backoff = min(backoff * 2, MAX_BACKOFF_S)

    # ---------------------------------------------------------------- truncation (KIP-101)
    async def _truncate(self, conn: _Connection) -> None:
        now = trio.current_time()
        todo = {tp: f for tp, f in self.partitions.items() if f.truncate and f.refused_until <= now}
        if not todo:
            return
        logs = {tp: self.replication.logs.get(tp) for tp in todo}
        asked: dict[str, list[dict[str, Any]]] = {}
        for (topic, p), f in todo.items():
            plog = logs[(topic, p)]
            if plog is None:
                continue
            asked.setdefault(topic, []).append({"partition": p, "current_leader_epoch": f.epoch,
                                                "leader_epoch": plog.epoch_cache().latest_epoch})
        if not asked:
            return
        body = {"replica_id": self.node_id,
                "topics": [{"topic": t, "partitions": parts} for t, parts in asked.items()]}
        answer = await conn.call(23, EPOCH_VERSION, body, CONNECT_TIMEOUT_S + ANSWER_SLACK_S)
        cuts: list[tuple[PartitionLog, int]] = []
        for t in answer["topics"]:
            for p in t["partitions"]:
                tp = (t["topic"], p["partition"])
                f = todo.get(tp)
                plog = logs.get(tp)
                if f is None or plog is None or self.partitions.get(tp) is not f:
                    continue
                if p["error_code"]:
                    self._refused(tp, f, p["error_code"])
                    continue
                epoch, end = p["leader_epoch"], p["end_offset"]
                if epoch < 0 or end < 0:
                    cut = self.replication.follower_hw.get(tp, 0)
                else:
                    mine = plog.epoch_cache().end_offset_for(epoch, plog.log_end_offset)
                    cut = min(end, mine[1]) if mine[0] == epoch else min(end, plog.log_end_offset)
                cuts.append((plog, cut))
                f.truncate = False
        if cuts:
            commit = self.replication.commit
            journal = commit.journal if commit is not None and commit.journal_usable() else None
            for plog in await trio.to_thread.run_sync(_truncate_all, cuts, journal):
                self.replication.on_follower_truncate(plog)

    def _refused(self, tp: TopicPartition, f: _Followed, error: int) -> None:
        f.refused_until = trio.current_time() + REFUSED_WAIT_S
        if error == ErrorCode.OFFSET_OUT_OF_RANGE:
            f.truncate = True
        if error in _SETTLING_ERRORS and trio.current_time() - f.since < SETTLING_S:
            log.debug("node %s refused %s-%s at epoch %d: %s (it has not caught up with the view yet)",
                      self.leader.node_id, tp[0], tp[1], f.epoch, _name(error))
            return
        self._problems.warning("node %s refused %s-%s at epoch %d: %s", self.leader.node_id, tp[0], tp[1],
                               f.epoch, _name(error))

    # ---------------------------------------------------------------- fetching
    async def _fetch(self, conn: _Connection) -> bool:
        """One Fetch round; True when the leader answered."""
        now = trio.current_time()
        logs = self.replication.logs
        full = not conn.session_id
        sent = conn.sent
        fetching: dict[TopicPartition, tuple[_Followed, PartitionLog]] = {}
        # (fetch offset, leader epoch) of each partition the request lists: all in a full request, else those
        # whose position the leader's session does not have
        listed: dict[TopicPartition, tuple[int, int]] = {}
        asked: dict[str, list[dict[str, Any]]] = {}
        for tp, f in self.partitions.items():
            if f.truncate or f.refused_until > now:
                continue
            plog = logs.get(tp)
            if plog is None:
                continue
            fetching[tp] = (f, plog)
            pos = (plog.log_end_offset, f.epoch)
            if full or sent.get(tp) != pos:
                listed[tp] = pos
                asked.setdefault(tp[0], []).append({
                    "partition": tp[1], "current_leader_epoch": pos[1], "fetch_offset": pos[0],
                    "last_fetched_epoch": -1, "log_start_offset": plog.log_start_offset,
                    "partition_max_bytes": PARTITION_MAX_BYTES})
        if not fetching:
            with trio.move_on_after(REFUSED_WAIT_S):
                self._changed = trio.Event()
                await self._changed.wait()
            return False
        forgotten = [] if full else [tp for tp in sent if tp not in fetching]
        dropped: dict[str, list[int]] = {}
        for topic, p in forgotten:
            dropped.setdefault(topic, []).append(p)
        body = {"replica_id": self.node_id, "max_wait_ms": FETCH_WAIT_MS, "min_bytes": 1,
                "max_bytes": FETCH_MAX_BYTES, "isolation_level": 0, "session_id": conn.session_id,
                "session_epoch": 0 if full else conn.session_epoch,
                "topics": [{"topic": t, "partitions": parts} for t, parts in asked.items()],
                "forgotten_topics_data": [{"topic": t, "partitions": ps} for t, ps in dropped.items()],
                "rack_id": "", "cluster_id": None}
        answer = await conn.call(1, FETCH_VERSION, body, FETCH_WAIT_MS / 1000 + ANSWER_SLACK_S, round_codec=True)
        self.fetches += 1
        if answer["error_code"] in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH):
            self._problems.warning("node %s ended our fetch session (%s); starting a new one", self.leader.node_id,
                                   _name(answer["error_code"]))
            conn.session_id, conn.sent = 0, {}
            return True
        if full:  # a new session (id 0: the leader keeps none, the next request is full again)
            conn.session_id, conn.session_epoch = answer["session_id"], 1
            conn.sent = listed if conn.session_id else {}
        else:
            conn.session_epoch = 1 if conn.session_epoch >= 2**31 - 1 else conn.session_epoch + 1
            for tp in forgotten:
                del conn.sent[tp]
            conn.sent.update(listed)
        appends: list[tuple[TopicPartition, PartitionLog, bytes, _Followed]] = []
        restarts: list[tuple[PartitionLog, int]] = []
        for t in answer["responses"]:
            for p in t["partitions"]:
                tp = (t["topic"], p["partition_index"])
                got = fetching.get(tp)
                if got is None or self.partitions.get(tp) is not got[0]:
                    continue  # not asked, or re-followed meanwhile
                if p["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE and p["log_start_offset"] > got[1].log_end_offset:
                    restarts.append((got[1], p["log_start_offset"]))  # behind the leader's log start
                    continue
                if p["error_code"]:
                    self._refused(tp, got[0], p["error_code"])
                    continue
                self.replication.follower_hw[tp] = p["high_watermark"]
                if p["records"]:
                    appends.append((tp, got[1], p["records"], got[0]))
        if restarts:
            await trio.to_thread.run_sync(_restart_all, restarts)
            for plog, _ in restarts:
                self.replication.on_follower_truncate(plog)
        if appends:
            commit = self.replication.commit
            if commit is not None and commit.journal_usable() and \
                    sum(len(a[2]) for a in appends) <= JOURNAL_MAX_BYTES and \
                    not any(_brings_new_epoch(plog, data) for _, plog, data, _ in appends):
                failed, durable = await self._append_journaled(commit, appends)
            else:
                failed, durable = await trio.to_thread.run_sync(_append_all, appends, self.partitions)
            for plog, batches in durable:
                self.replication.on_follower_append(plog, batches)
            for tp, why in failed:
                f = self.partitions.get(tp)
                if f is not None:
                    f.truncate = True
                self._problems.warning("follower append to %s-%s failed (%s); truncating by epoch again",
                                       tp[0], tp[1], why)
        return True


    async def _append_journaled(self, commit: GroupCommit,
                                appends: list[tuple[TopicPartition, PartitionLog, bytes, _Followed]]
                                ) -> tuple[list[tuple[TopicPartition, str]], list[tuple[PartitionLog, list[memoryview]]]]:
        """The appends on this thread and into the node's journal, made durable by one journal fdatasync for
        every log of the response: on this thread while the journal's fsyncs are fast (``sync_here``: the
        round needs no second wake-up), else the group commit's round (by the fsync child, shared with the
        node's own commits). Same results as ``_append_all``."""
        live = [(tp, plog, data) for tp, plog, data, f in appends if self.partitions.get(tp) is f]
        tp_of = {id(plog): tp for tp, plog, _ in live}
        here = commit.sync_here()
        written, refused, journaled = commit.append_replicated([(plog, data) for _, plog, data in live], here)
        failed = [(tp_of[id(plog)], str(e)) for plog, e in refused]
        if not written:
            return failed, []
        if journaled and here and commit.sync_replicated(written) is None:
            results: list[Exception | None] = [None] * len(written)
        elif not journaled or here:  # the journal is offline (now): the logs' own fsyncs make them durable
            results = await trio.to_thread.run_sync(lambda: [_flush(plog) for plog, _, _ in written])
        else:
            results = [None] * len(written)
            pending = [len(written)]
            done = trio.Event()

            def waiter(i: int) -> Callable[[Exception | None], None]:
                def durable(err: Exception | None) -> None:
                    results[i] = err
                    pending[0] -= 1
                    if not pending[0]:
                        done.set()
                return durable

            for i, (plog, info, _) in enumerate(written):
                commit.when_durable(plog, info.last_offset, waiter(i))
            await done.wait()
        failed += [(tp_of[id(w[0])], f"fsync of {w[0].directory}: {e}") for w, e in zip(written, results) if e]
        return failed, [(plog, batches) for (plog, _, batches), e in zip(written, results) if e is None]


def _brings_new_epoch(plog: PartitionLog, data: bytes) -> bool:
    """Whether ``data``'s last whole batch carries a leader epoch this log has not seen (its epoch file is
    then rewritten and fsynced by the append: not on the event loop). Epochs only grow along a log. Reads
    only the batches' length, magic and epoch fields (``split_batches``' walk, without the views); a
    malformed batch answers True: the append reports it, off the event loop as before."""
    total, pos, last = len(data), 0, -1
    while total - pos >= LOG_OVERHEAD:
        length = _INT32.unpack_from(data, pos + 8)[0]  # batchLength, after the 8-byte baseOffset
        if length < MIN_BATCH_LENGTH:
            return True
        end = pos + LOG_OVERHEAD + length
        if end > total:
            break
        if data[pos + MAGIC_OFFSET] != MAGIC:
            return True
        last, pos = pos, end
    # partitionLeaderEpoch follows batchLength
    return last >= 0 and _INT32.unpack_from(data, last + 12)[0] > plog.epoch_cache().latest_epoch


def _append_all(appends: list[tuple[TopicPartition, PartitionLog, bytes, _Followed]],
                followed: dict[TopicPartition, _Followed]
                ) -> tuple[list[tuple[TopicPartition, str]], list[tuple[PartitionLog, list[memoryview]]]]:
    """Worker thread: append each partition's batches as a follower, then fsync every log appended to. A
    partition no longer followed as it was when the fetch was sent (this node leads it now, or follows
    another epoch) is skipped (a dict lookup: atomic under the GIL). Returns the failures and, per log made
    durable, the batches appended to it."""
    failed: list[tuple[TopicPartition, str]] = []
    touched: list[tuple[PartitionLog, list[memoryview]]] = []
    for tp, plog, data, f in appends:
        if followed.get(tp) is not f:
            continue
        try:
            if plog.append_as_follower(data) is not None:
                touched.append((plog, split_batches(data)[0]))
        except (CorruptBatchError, StorageError, OSError) as e:
            failed.append((tp, str(e)))
    if len(touched) <= 1:
        results = [_flush(plog) for plog, _ in touched]
    else:  # the fsyncs of many logs in parallel: the file system batches them into fewer journal commits
        results = list(_pool().map(_flush, [plog for plog, _ in touched]))
    failed += [(("?", -1), f"fsync of {t[0].directory}: {e}") for t, e in zip(touched, results) if e is not None]
    return failed, [t for t, e in zip(touched, results) if e is None]


_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(FSYNC_THREADS, thread_name_prefix="follower-fsync")
    return _POOL


def _flush(plog: PartitionLog) -> Exception | None:
    try:
        plog.flush()
    except (StorageError, OSError) as e:
        return e
    return None


def _restart_all(restarts: list[tuple[PartitionLog, int]]) -> None:
    for plog, offset in restarts:
        try:
            plog.restart_at(offset)
        except (StorageError, OSError) as e:
            log.error("restarting %s at %d failed: %s", plog.directory, offset, e)


def _truncate_all(cuts: list[tuple[PartitionLog, int]], journal: Journal | None) -> list[PartitionLog]:
    """Worker thread: cut each log back (durably); returns the logs whose end moved back. With a journal, a
    truncation mark per log cut is written and synced before returning: the journal may still hold the
    entries cut away, and a restart's replay must not re-append them (it cuts at the mark)."""
    cut: list[PartitionLog] = []
    for plog, offset in cuts:
        try:
            end = plog.log_end_offset
            if plog.truncate_to(offset) < end:
                cut.append(plog)
        except (StorageError, OSError) as e:
            log.error("truncating %s to %d failed: %s", plog.directory, offset, e)
    if cut and journal is not None:
        try:
            for plog in cut:
                journal.append_truncation(plog.name, plog.log_end_offset)
            journal.sync()
        except (StorageError, OSError) as e:  # offline now: nothing journaled is acknowledged any more
            log.error("journal truncation marks failed: %s", e)
    return cut


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
