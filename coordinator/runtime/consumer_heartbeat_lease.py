"""The hot path of steady ConsumerGroupHeartbeats (API 68): a leased heartbeat's bytes are answered at once.

Rules:
- ``hot(conn, payload)`` is the connection's hot handler for API 68 (bound to its connection: the answer
  depends on the client's host). A request whose bytes after the correlation id, version and client host are
  those of a leased heartbeat (core/consumer_group/lease.py) is answered with that heartbeat's answer under
  its own correlation id, and the member's session deadline is pushed back (later only: its heap entry stays,
  as a generic heartbeat's does; the timer task need not wake) when all of these hold:
  - the group's shard is ACTIVE (else the generic path answers NOT_COORDINATOR /
    COORDINATOR_LOAD_IN_PROGRESS);
  - no operation of the group is queued or in flight (a renewal never overtakes one: the generic path queues
    behind it and computes from the state it leaves);
  - the member's session deadline is armed and the new one is not earlier;
  - ``lease.renew`` holds (no write to the group since, same topic catalogue, same group configs, no regex
    refresh due).
  Otherwise the lease is dropped and None returned: the generic path (codec, dispatch, the group's queue, the
  core) serves the request. Such a request is noted (``passed``) and, if the core's answer to it is steady,
  ``granted`` leases it for its bytes (``handle_heartbeat`` asks ``taken(slot)`` whether its request is it).
- Same bytes: the memoised answer is the generic encoder's frame of the core's response, split around the
  correlation id (tests/integration/test_consumer_heartbeat_hot_path.py compares hot and generic answers).
- Bounded: only requests of at most MEMO_MAX_FRAME bytes; at most MEMO_ENTRIES leases (cleared when full, as
  the classic heartbeat memo).
- Served only without an authorizer (broker.py registers it so, as the classic hot Heartbeat): with ACLs every
  request meets the checks on the generic path. Request metrics: the connection counts hot answers per read
  like any hot API's. ConsumerGroupHeartbeat has no quota here (throttle 0, as the generic answer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from coordinator.core.consumer_group import Deadline, HeartbeatOutcome
from coordinator.core.consumer_group.lease import Lease, grant, renew
from coordinator.core.shard import ShardStatus
from protocol import codec
from protocol.hotpath import MEMO_ENTRIES, MEMO_MAX_FRAME

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from coordinator.core.consumer_group import TopicInfo
    from coordinator.core.coordinator import Coordinator
    from coordinator.runtime.dispatch import ClientConnection, Slot

CONSUMER_GROUP_HEARTBEAT = 68
ACTIVE = ShardStatus.ACTIVE

# the request the hot path last passed on: (connection, correlation id, key bytes, version)
Passed = tuple[Any, int, bytes, int]
# a lease as held: (request version, client host, shard, lease, the answer's frame around the correlation id)
Held = tuple[int, str, int, Lease, tuple[bytes, bytes]]


class Service(Protocol):
    """What this reads of its ConsumerGroupService (consumer_groups.py, which imports this module)."""

    core: Coordinator
    _queues: dict[str, Any]  # group id -> its queued operations (present: one is in flight)
    _deadlines: dict[tuple[str, str, str], Deadline]  # the timers' key -> Deadline

    def catalogue(self) -> object: ...


class HotConsumerHeartbeats:
    __slots__ = ("_core", "_deadlines", "_leases", "_passed", "_queues", "_service", "_shards", "now_ms")

    def __init__(self, service: Service, now_ms: Callable[[], int]) -> None:
        self._service = service
        self._core = service.core
        self._queues = service._queues  # group id -> its queued operations (present: one is in flight)
        self._deadlines = service._deadlines  # the timers' key -> Deadline
        self._shards = service.core.shard_states()  # fixed for the core's life (a shard changes, never is replaced)
        self.now_ms = now_ms
        self._leases: dict[bytes, Held] = {}  # request bytes after the correlation id -> its lease, as held
        self._passed: Passed | None = None

    def hot(self, conn: ClientConnection, payload: bytes) -> bytes | None:
        if len(payload) > MEMO_MAX_FRAME:
            self._passed = None
            return None
        key = payload[8:]
        version = payload[2] << 8 | payload[3]
        held = self._leases.get(key)
        if held is not None:
            if held[0] == version and held[1] == conn.host and self._renew(held[2], held[3]):
                return payload[4:8].join(held[4])
            del self._leases[key]
        self._passed = (conn, int.from_bytes(payload[4:8], "big", signed=True), key, version)
        return None

    def _renew(self, shard: int, lease: Lease) -> bool:
        if lease.group_id in self._queues:
            return False
        state = self._shards[shard]  # read only: its status and its consumer groups, as core.shard_status says
        if state.status is not ACTIVE:
            return False
        at = renew(state.consumer, lease, self.now_ms(), self._service.catalogue())
        if at is None:
            return False
        deadlines = self._deadlines
        key = lease.session_key
        old = deadlines.get(key)
        if old is None or old.at_ms is None or at < old.at_ms:
            return False
        deadlines[key] = Deadline("session", lease.group_id, lease.member_id, at)
        return True

    def taken(self, slot: Slot) -> Passed | None:
        """The request the hot path passed on, if it is ``slot``'s (then forgotten)."""
        passed = self._passed
        if passed is None:
            return None
        self._passed = None
        if passed[0] is not slot.conn or passed[1] != slot.correlation_id or passed[3] != slot.version:
            return None
        return passed

    def granted(self, passed: Passed, shard: int, request: Mapping[str, Any], outcome: HeartbeatOutcome,
                now_ms: int, topics: Mapping[str, TopicInfo], catalogue: object) -> None:
        """The core just answered ``passed``'s request with ``outcome`` (nothing replayed since): lease it if
        it was steady."""
        svc = self._service
        lease = grant(svc.core.consumer_groups(shard), request, outcome, now_ms, topics, catalogue)
        if lease is None:
            return
        conn, _, key, version = passed
        frame = codec.encode_response(CONSUMER_GROUP_HEARTBEAT, version, 0, lease.response)
        leases = self._leases
        if len(leases) >= MEMO_ENTRIES:
            leases.clear()
        leases[key] = (version, conn.host, shard, lease, (bytes(frame[:4]), bytes(frame[8:])))

    def forget(self) -> None:
        """Drop every lease (they would fail their checks anyway; this frees them)."""
        self._leases.clear()
