"""A fake runtime around TxnCoordinator for tests: a durable log per ``__transaction_state`` partition,
writes settled automatically (or held, or failed on demand), markers recorded (and optionally completed).
Everything is bounded; nothing here decides a result the coordinator should decide.
"""

from __future__ import annotations

from itertools import count

from coordinator.core.transactions import MarkerTask, TxnConfig, TxnCoordinator, TxnOutcome, TxnWrite
from coordinator.core.transactions.records import decode_key, decode_value, encode_key, encode_value

T0 = 1_700_000_000_000
_MAX_STEPS = 1000


class Runtime:
    def __init__(self, num_partitions: int = 4, config: TxnConfig | None = None, coordinator_epoch: int = 7,
                 first_pid: int = 1000, load: bool = True) -> None:
        self._pids = count(first_pid)
        self.coord = TxnCoordinator(config or TxnConfig(), num_partitions=num_partitions,
                                    allocate_producer_id=lambda: next(self._pids))
        self.num_partitions = num_partitions
        self.coordinator_epoch = coordinator_epoch
        self.now = T0
        self.log: dict[int, list[tuple[bytes, bytes | None]]] = {p: [] for p in range(num_partitions)}
        self.replies: list[tuple[object, dict]] = []
        self.markers: list[MarkerTask] = []
        self.held: dict[int, TxnWrite] = {}
        self.hold_writes = False  # keep writes pending until settle()/fail()
        self.auto_markers = True  # call markers_done as soon as a MarkerTask appears
        self.writes_seen: list[TxnWrite] = []
        self._tokens = count(1)
        if load:
            for p in range(num_partitions):
                self.coord.begin_loading(p, coordinator_epoch)
                self.run(self.coord.finish_loading(p, self.now))

    # ------------------------------------------------------------ plumbing

    def run(self, out: TxnOutcome) -> TxnOutcome:
        """Process an outcome (and everything it leads to, unless writes are held)."""
        queue = [out]
        for _ in range(_MAX_STEPS):
            if not queue:
                return out
            o = queue.pop(0)
            self.replies.extend(o.replies)
            for w in o.writes:
                self.writes_seen.append(w)
                if self.hold_writes:
                    self.held[w.write_id] = w
                else:
                    self.log[w.partition].extend(w.records)
                    queue.append(self.coord.write_done(w.write_id, None, self.now))
            for m in o.markers:
                self.markers.append(m)
                if self.auto_markers:
                    queue.append(self.coord.markers_done(m.txn_id, m.producer_id, m.producer_epoch, self.now))
        raise AssertionError("outcome processing did not settle")

    def settle(self, write_id: int | None = None) -> None:
        """Make held writes durable (one, or all in order) and process what follows."""
        ids = [write_id] if write_id is not None else sorted(self.held)
        for wid in ids:
            w = self.held.pop(wid)
            self.log[w.partition].extend(w.records)
            self.run(self.coord.write_done(wid, None, self.now))

    def fail(self, write_id: int, error: int) -> TxnOutcome:
        self.held.pop(write_id)
        return self.run(self.coord.write_done(write_id, error, self.now))

    def token(self) -> int:
        return next(self._tokens)

    def reply(self, token: object) -> dict | None:
        found = [body for t, body in self.replies if t == token]
        assert len(found) <= 1, f"token {token} answered {len(found)} times"
        return found[0] if found else None

    def last_value(self, txn_id: str):
        """The last record value the log holds for txn_id (None = tombstone), or 'absent'."""
        p = self.coord.partition_for(txn_id)
        result: object = "absent"
        for key, value in self.log[p]:
            if decode_key(key) == txn_id:
                result = None if value is None else decode_value(value)
        return result

    def records_for(self, txn_id: str) -> list:
        p = self.coord.partition_for(txn_id)
        return [None if v is None else decode_value(v) for k, v in self.log[p] if decode_key(k) == txn_id]

    # ------------------------------------------------------------ requests (return the token's reply or None)

    def init(self, txn_id: str | None, timeout_ms: int = 60_000, pid: int = -1, epoch: int = -1,
             version: int = 4) -> dict | None:
        tok = self.token()
        self.run(self.coord.init_producer_id(tok, version, txn_id, timeout_ms, pid, epoch, self.now))
        return self.reply(tok)

    def add(self, txn_id: str, pid: int, epoch: int, partitions: list[tuple[str, int]],
            version: int = 3) -> dict | None:
        tok = self.token()
        self.run(self.coord.add_partitions(tok, version, txn_id, pid, epoch, partitions, self.now))
        return self.reply(tok)

    def add_offsets(self, txn_id: str, pid: int, epoch: int, partition: int = 5, version: int = 3) -> dict | None:
        tok = self.token()
        self.run(self.coord.add_offsets(tok, version, txn_id, pid, epoch, ("__consumer_offsets", partition),
                                        self.now))
        return self.reply(tok)

    def end(self, txn_id: str, pid: int, epoch: int, commit: bool, version: int = 3) -> dict | None:
        tok = self.token()
        self.run(self.coord.end_txn(tok, version, txn_id, pid, epoch, commit, self.now))
        return self.reply(tok)

    def tick(self, now: int) -> TxnOutcome:
        self.now = now
        return self.run(self.coord.tick(now))

    # ------------------------------------------------------------ shortcuts

    def producer(self, txn_id: str, timeout_ms: int = 60_000) -> tuple[int, int]:
        r = self.init(txn_id, timeout_ms)
        assert r is not None and r["error_code"] == 0, r
        return r["producer_id"], r["producer_epoch"]

    def ongoing(self, txn_id: str, partitions: list[tuple[str, int]] | None = None,
                timeout_ms: int = 60_000) -> tuple[int, int]:
        pid, epoch = self.producer(txn_id, timeout_ms)
        r = self.add(txn_id, pid, epoch, partitions or [("t", 0), ("t", 1)])
        assert partition_errors(r) == {0}, r
        return pid, epoch


def partition_errors(reply: dict | None) -> set[int]:
    """The distinct partition error codes of an AddPartitionsToTxn v0-3 reply."""
    assert reply is not None
    return {r["partition_error_code"] for t in reply["results_by_topic_v3_and_below"]
            for r in t["results_by_partition"]}


def in_state(rt: Runtime, txn_id: str, state: str) -> tuple[int, int]:
    """Drive txn_id to a state by name, through the public API. Returns (producer id, epoch)."""
    pid, epoch = rt.producer(txn_id)
    if state == "Empty":
        return pid, epoch
    rt.add(txn_id, pid, epoch, [("t", 0), ("u", 3)])
    if state == "Ongoing":
        return pid, epoch
    commit = state in ("PrepareCommit", "CompleteCommit")
    auto = rt.auto_markers
    rt.auto_markers = state.startswith("Complete")
    try:
        r = rt.end(txn_id, pid, epoch, commit)
    finally:
        rt.auto_markers = auto
    assert r == {"error_code": 0}, r
    return pid, epoch


def loaded(values: dict[str, object], num_partitions: int = 4, coordinator_epoch: int = 7,
           config: TxnConfig | None = None, first_pid: int = 1000) -> Runtime:
    """A runtime whose partitions were loaded from a log holding these TxnLogValues (None = tombstone)."""
    rt = Runtime(num_partitions, config, coordinator_epoch, first_pid, load=False)
    for txn_id, v in values.items():
        p = rt.coord.partition_for(txn_id)
        rt.log[p].append((encode_key(txn_id), None if v is None else encode_value(v)))
    for p in range(num_partitions):
        rt.coord.begin_loading(p, coordinator_epoch)
        for key, value in rt.log[p]:
            rt.coord.replay(p, key, value)
        rt.run(rt.coord.finish_loading(p, rt.now))
    return rt
