"""Test only (tests/integration/test_handler_faults.py, test_consumer_group_faults.py, test_transactions_crash.py):
with TEST_FAULT_DIR set, the server's record encoders raise once each time a file named after them appears in
that directory (the file is removed as the fault fires), as an encoding bug or an unencodable value would; a file
named "consumer_group_write" fails the next KIP-848 group write as a failed append would; a file named
"txn_kill_<point>" makes the server SIGKILL itself once at that step of a transaction (see TXN_KILL_POINTS), after
printing one "groupcoord test fault: SIGKILL at <point> (...)" line. TEST_SYNC_HERE_MAX_S sets
group_commit.SYNC_HERE_MAX_S (-1: followers' appends always wait for the group commit's rounds). Loaded by Python at start-up when this folder
is on PYTHONPATH; nothing of it is in the server's own code (the runtime's methods are wrapped from outside)."""

import os

# a follower's appends always through the group commit's rounds (TEST_SYNC_HERE_MAX_S=-1), never fsynced on the
# event loop however fast the journal is (tests/cluster/test_cluster_replication.py runs both ways)
_sync_here_max = os.environ.get("TEST_SYNC_HERE_MAX_S")
if _sync_here_max is not None:
    from coordinator.runtime import group_commit as _group_commit

    _group_commit.SYNC_HERE_MAX_S = float(_sync_here_max)

_dir = os.environ.get("TEST_FAULT_DIR")
if _dir:
    import importlib

    TARGETS = {
        "encode_offset_value": ("coordinator.core.offsets",),
        "encode_group_value": ("coordinator.core.rebalance",),
        "encode_offset_key": ("coordinator.core.admin", "coordinator.core.offsets"),
    }

    def _wrap(real, name):  # type: ignore[no-untyped-def]
        def faulty(*args, **kwargs):  # type: ignore[no-untyped-def]
            flag = os.path.join(_dir, name)
            if os.path.exists(flag):
                os.unlink(flag)
                raise RuntimeError(f"injected fault in {name}")
            return real(*args, **kwargs)
        return faulty

    for _name, _modules in TARGETS.items():
        for _module in _modules:
            mod = importlib.import_module(_module)
            setattr(mod, _name, _wrap(getattr(mod, _name), _name))

    # a KIP-848 group write that fails as a failed append would (flag "consumer_group_write"): the service's
    # settled callback gets the storage error, nothing is replayed (tests/integration/test_consumer_group_faults.py)
    from coordinator.runtime import consumer_groups as _cg
    from coordinator.storage.errors import StorageError as _StorageError

    _real_write = _cg.ConsumerGroupService._write

    def _faulty_write(self, shard, group_id, prefix, outcome, settled):  # type: ignore[no-untyped-def]
        flag = os.path.join(_dir, "consumer_group_write")
        if os.path.exists(flag):
            os.unlink(flag)
            try:
                settled(_StorageError("injected fault in a consumer group write"))
            finally:
                self._settled(group_id)
            return False
        return _real_write(self, shard, group_id, prefix, outcome, settled)

    _cg.ConsumerGroupService._write = _faulty_write

    # ... and a batched one (flag "consumer_group_batch_write": runtime/consumer_batch.py): the batch's write fails
    _real_stage_batch = _cg.ConsumerGroupService._stage_batch

    def _faulty_stage_batch(self, plog, batch, done):  # type: ignore[no-untyped-def]
        flag = os.path.join(_dir, "consumer_group_batch_write")
        if os.path.exists(flag):
            os.unlink(flag)
            done(_StorageError("injected fault in a batched consumer group write"))
            return
        _real_stage_batch(self, plog, batch, done)

    _cg.ConsumerGroupService._stage_batch = _faulty_stage_batch

    # --- KIP-848 target assignments on a worker thread (tests/integration/test_consumer_assignment_worker.py) ------
    # a flag "assignment_offload_all" present at start: every target goes to the worker thread (min weight 0);
    # a flag "assignor_gate" holding a group id: that group's next assignor run writes "assignor_started" and
    # waits (at most 15 s) until the gate file is removed, on whatever thread runs it
    import time as _time

    from coordinator.core.consumer_group import heartbeat as _heartbeat
    from coordinator.runtime import consumer_assignment as _assignment

    if os.path.exists(os.path.join(_dir, "assignment_offload_all")):
        _assignment.MIN_WEIGHT = 0
        _real_worker_init = _assignment.AssignmentWorker.__init__

        def _worker_init(self, min_weight=0):  # type: ignore[no-untyped-def]
            _real_worker_init(self, 0)

        _assignment.AssignmentWorker.__init__ = _worker_init

    _real_job_run = _heartbeat.TargetJob.run

    def _gated_run(self):  # type: ignore[no-untyped-def]
        gate = os.path.join(_dir, "assignor_gate")
        try:
            with open(gate) as f:
                gated = f.read().strip() == self.group_id
        except OSError:
            gated = False
        if gated:
            with open(os.path.join(_dir, "assignor_started"), "w") as f:
                f.write(self.group_id)
            deadline = _time.monotonic() + 15
            while os.path.exists(gate) and _time.monotonic() < deadline:
                _time.sleep(0.01)
        return _real_job_run(self)

    _heartbeat.TargetJob.run = _gated_run

    # --- SIGKILL at a step of a transaction (tests/integration/test_transactions_crash.py) ---------------------
    # Each flag fires once (removed before the kill, so the restarted server, on the same TEST_FAULT_DIR, runs
    # on). What is durable at each point:
    #   txn_kill_before_prepare        a Prepare* record is about to be staged: nothing of EndTxn (or of the
    #                                  timeout's abort) is written; the transaction is Ongoing in the log.
    #   txn_kill_after_prepare         the Prepare* record is durable (the core handed over the markers), no
    #                                  marker is appended yet.
    #   txn_kill_among_markers         of a transaction with two or more marker partitions exactly one marker is
    #                                  appended and durable, the others never appended. The flag's content
    #                                  ("<topic>-<partition>") names the one; empty: the first in the order
    #                                  the runtime sends them.
    #   txn_kill_after_txn_offsets     a TxnOffsetCommit's transactional batch is durable in __consumer_offsets,
    #                                  not answered, and no marker for it is written.
    import signal as _signal

    from coordinator.core.transactions import records as _txn_records
    from coordinator.core.transactions.state import TxnState as _TxnState
    from coordinator.runtime import group_commit as _gc
    from coordinator.runtime import groups as _groups
    from coordinator.runtime import transactions as _txn
    from coordinator.runtime import txn_partitions as _txn_parts

    TXN_KILL_POINTS = ("before_prepare", "after_prepare", "among_markers", "after_txn_offsets")

    def _take_flag(point):  # type: ignore[no-untyped-def]
        """The flag's content when ``txn_kill_<point>`` exists (it is removed), else None."""
        flag = os.path.join(_dir, f"txn_kill_{point}")
        try:
            with open(flag) as f:
                content = f.read().strip()
            os.unlink(flag)
        except FileNotFoundError:
            return None
        return content

    def _die(point, detail):  # type: ignore[no-untyped-def]
        print(f"groupcoord test fault: SIGKILL at {point} ({detail})", flush=True)
        os.kill(os.getpid(), _signal.SIGKILL)

    # before_prepare: TransactionService._write of a record whose state is PrepareCommit/PrepareAbort
    _real_txn_write = _txn.TransactionService._write

    def _txn_write(self, write):  # type: ignore[no-untyped-def]
        states = [_txn_records.decode_value(v).state for _, v in write.records if v is not None]
        prepares = [s.kafka_name for s in states if s in (_TxnState.PREPARE_COMMIT, _TxnState.PREPARE_ABORT)]
        if prepares and _take_flag("before_prepare") is not None:
            _die("before_prepare", f"{prepares[0]} not written")
        return _real_txn_write(self, write)

    _txn.TransactionService._write = _txn_write

    # after_prepare and among_markers: TransactionService._send_markers (called once the Prepare* is durable)
    _real_send_markers = _txn.TransactionService._send_markers
    _among: dict = {"armed": False, "which": "", "sent": None}

    def _send_markers(self, task):  # type: ignore[no-untyped-def]
        if _take_flag("after_prepare") is not None:
            _die("after_prepare", f"{'commit' if task.commit else 'abort'} of {task.txn_id!r} prepared, "
                                  f"no marker of {len(task.partitions)} written")
        if len(task.partitions) >= 2:
            which = _take_flag("among_markers")
            if which is not None:
                _among.update(armed=True, which=which, sent=None)
                try:
                    return _real_send_markers(self, task)
                finally:
                    _among["armed"] = False
        return _real_send_markers(self, task)

    _txn.TransactionService._send_markers = _send_markers

    def _marker_gate(topic, partition, callback):  # type: ignore[no-untyped-def]
        """While armed: the callback to use for the marker let through, or None to hold this one back."""
        if _among["sent"] is not None or (_among["which"] and _among["which"] != f"{topic}-{partition}"):
            return None
        _among["sent"] = f"{topic}-{partition}"

        def then(error):  # type: ignore[no-untyped-def]
            if error is None:
                _die("among_markers", f"marker on {topic}-{partition} durable, the others not appended")
            callback(error)
        return then

    _real_group_marker = _groups.GroupService.write_marker

    def _group_marker(self, shard, producer_id, producer_epoch, commit, coordinator_epoch, callback):  # type: ignore[no-untyped-def]
        if _among["armed"]:
            callback = _marker_gate(_txn.OFFSETS_TOPIC, shard, callback)
            if callback is None:
                return None
        return _real_group_marker(self, shard, producer_id, producer_epoch, commit, coordinator_epoch, callback)

    _groups.GroupService.write_marker = _group_marker

    _real_topic_marker = _txn_parts.TxnPartitions.write_marker

    def _topic_marker(self, topic, partition, producer_id, producer_epoch, commit, coordinator_epoch,  # type: ignore[no-untyped-def]
                      callback):
        if _among["armed"]:
            callback = _marker_gate(topic, partition, callback)
            if callback is None:
                return None
        return _real_topic_marker(self, topic, partition, producer_id, producer_epoch, commit, coordinator_epoch,
                                  callback)

    _txn_parts.TxnPartitions.write_marker = _topic_marker

    # after_txn_offsets: the durability callback of GroupService._append_transactional's append
    _real_append_txn = _groups.GroupService._append_transactional
    _real_when_durable = _gc.GroupCommit.when_durable
    _offsets_armed = [False]

    def _append_transactional(self, outcome):  # type: ignore[no-untyped-def]
        if _take_flag("after_txn_offsets") is None:
            return _real_append_txn(self, outcome)
        _offsets_armed[0] = True
        try:
            return _real_append_txn(self, outcome)
        finally:
            _offsets_armed[0] = False

    _groups.GroupService._append_transactional = _append_transactional

    def _when_durable(self, plog, last_offset, callback):  # type: ignore[no-untyped-def]
        if _offsets_armed[0]:
            _offsets_armed[0] = False
            real_callback = callback

            def callback(error):  # type: ignore[no-untyped-def]
                if error is None:
                    _die("after_txn_offsets", f"transactional offsets durable up to offset {last_offset} of "
                                              f"{os.path.basename(str(plog.directory))}, not answered, no marker")
                real_callback(error)
        return _real_when_durable(self, plog, last_offset, callback)

    _gc.GroupCommit.when_durable = _when_durable
