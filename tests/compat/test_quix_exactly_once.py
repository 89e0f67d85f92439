"""Quix Streams 3.28.1 with ``processing_guarantee="exactly-once"`` counts a keyed stream through a SIGKILL of its
worker, and no key is counted twice or missed (stream_apps/quix_count.py, in its own venv: stream_support.py).

The story: 420 keyed records on a 4-partition input topic; worker 1 (a child process with the quix venv's python)
counts them per key into a RocksDB store backed by a changelog topic and writes one output record per input
record, each checkpoint one transaction. At its 8th checkpoint (or the first after it that follows a committed one
of every input partition: a loaded machine may feed a partition late) it stops right before commit_transaction, with the
outputs, changelog records and TxnOffsetCommit of that transaction on the server: the test checks that the
server holds records of it uncommitted (read_uncommitted readers see more than read_committed ones, in the output
and in the changelog), then SIGKILLs it. Worker 2 (a new random transactional.id, same group, a fresh state dir,
so that its state comes back through the changelog, read read_committed, on every partition) waits for the group
to drop worker 1 and for the coordinator to abort worker 1's transaction at its timeout, then catches up.
The output topic read read_committed then holds exactly one record per input record, and each key's counts run
1, 2, ..., its true count in output order. Aborted records shown to read_committed readers, pending offsets
committed without their transaction, or a lost commit each break that (the same check on read_uncommitted
output fails: worker 1's aborted records are there twice). Quix itself also drops changelog records whose
source offsets are not committed when it restores, so the restored state does not depend on read_committed alone.
The server's side: a transaction timed out, none is left open, no protocol error, no traceback or ERROR in its
log; and in its segment files (stream_support.assert_transactions_sound), the output and changelog records a
read_committed reader saw are exactly those of committed transactions, and no fenced producer's write landed.

Takes about 20 s (worker 2 waits out the 6 s session timeout and the 5 s transaction timeout of worker 1); the
first run builds the quix venv (~25 s).
"""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from server_process import ServerProcess  # type: ignore[import-not-found]

sys.path.insert(0, str(Path(__file__).parent))
import stream_support
from stream_support import Worker, assert_transactions_sound, read_to_end, wait_group_done

APP = Path(__file__).with_name("stream_apps") / "quix_count.py"
INPUT, OUTPUT, GROUP = "qx-words", "qx-counts", "qx-counter"
CHANGELOG = f"changelog__{GROUP}--{INPUT}--default"  # Quix's name for the default store's changelog
PARTITIONS = 4
RECORDS = 420
KEYS = [f"key-{i}" for i in range(9)]


@pytest.fixture
def txn_server(tmp_path: Path) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path / "data", "--group-min-session-timeout-ms", "1000",
                        "--group-initial-rebalance-delay-ms", "0",
                        "--transaction-abort-timed-out-transaction-cleanup-interval-ms", "200").start()
    try:
        yield srv.wait_loaded()
    finally:
        srv.stop()


def _produce_input(bootstrap: str) -> dict[str, int]:
    """RECORDS keyed JSON records (uneven counts per key); returns the true count of each key."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(INPUT, PARTITIONS, 1)]).values():
        future.result(15)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "batch.num.messages": 10})
    truth: Counter[str] = Counter()
    for i in range(RECORDS):
        key = KEYS[(i * i + i // 7) % len(KEYS)]
        truth[key] += 1
        producer.produce(INPUT, json.dumps({"key": key, "i": i}).encode(), key=key.encode())
    assert producer.flush(30) == 0
    return dict(truth)


@pytest.mark.compat
@pytest.mark.serial  # session and transaction timeouts of child processes: a busy machine breaks the app
def test_quix_exactly_once_count_survives_sigkill(txn_server: ServerProcess, tmp_path: Path) -> None:
    python = str(stream_support.ensure("quix"))
    bootstrap = txn_server.bootstrap
    truth = _produce_input(bootstrap)

    def worker(name: str, stall_at: int) -> Worker:
        state = tmp_path / f"state-{name}"  # a fresh state dir each: worker 2 restores from the changelog
        return Worker(name, [python, str(APP), bootstrap, INPUT, OUTPUT, GROUP, str(state), str(stall_at),
                             str(PARTITIONS)],
                      cwd=tmp_path)

    first = worker("worker-1", stall_at=8)
    second: Worker | None = None
    try:
        first.wait_for(lambda line: line.strip() == "stalled", "'stalled'", timeout_s=60)
        # the demanding case is really there: worker 1's open transaction holds records on the server
        uncommitted = read_to_end(bootstrap, OUTPUT, "read_uncommitted")
        committed = read_to_end(bootstrap, OUTPUT, "read_committed")
        assert 0 < len(committed) < len(uncommitted) < RECORDS, (len(committed), len(uncommitted))
        uncommitted = read_to_end(bootstrap, CHANGELOG, "read_uncommitted")
        committed = read_to_end(bootstrap, CHANGELOG, "read_committed")
        assert len(committed) < len(uncommitted), (len(committed), len(uncommitted))
        assert {p for p, _, _, _ in committed} == set(range(PARTITIONS)), "a changelog partition has nothing committed"
        first.kill()

        second = worker("worker-2", stall_at=0)
        wait_group_done(bootstrap, GROUP, INPUT, PARTITIONS, [second], timeout_s=60)
        assert second.stop() == 0, second.log()
        restored = {p for p in range(PARTITIONS) if f'Recovery successful for <RecoveryPartition "{CHANGELOG}[{p}]">'
                    in second.log()}
        assert restored == set(range(PARTITIONS)), f"worker 2 restored only {restored} from the changelog"

        output_read = read_to_end(bootstrap, OUTPUT, "read_committed")
        outputs = [{**json.loads(value), "out_partition": p, "out_offset": offset}
                   for p, offset, _, value in output_read]
        # one output per input record: no input processed twice into committed output, none missed
        places = Counter((o["partition"], o["offset"]) for o in outputs)
        repeated = {place: n for place, n in places.items() if n > 1}
        assert not repeated, f"input records with more than one committed output: {repeated}"
        assert len(places) == RECORDS, f"{RECORDS - len(places)} input records have no committed output"
        # each key's counts, in output order: 1, 2, ..., its true count (the state restored exactly)
        by_key: dict[str, list[int]] = defaultdict(list)
        for o in sorted(outputs, key=lambda o: (o["out_partition"], o["out_offset"])):
            by_key[o["key"]].append(o["count"])
        for key, n in truth.items():
            assert by_key[key] == list(range(1, n + 1)), f"{key}: counts {by_key[key]} (true count {n})"
        assert set(by_key) == set(truth)
        # worker 1's transaction ended at its timeout, aborted by the coordinator
        assert txn_server.metric("groupcoord_transactions_timed_out_total") >= 1
        assert txn_server.metric('groupcoord_transactions_total{result="commit"}') >= RECORDS // 25
        assert "Traceback" not in second.log(), second.log()
        assert txn_server.metric("groupcoord_transactions_ongoing") == 0
        assert txn_server.metric("groupcoord_protocol_errors_total") == 0
        changelog_read = read_to_end(bootstrap, CHANGELOG, "read_committed")
        txn_server.stop()  # its segment files are read next
        assert_transactions_sound(txn_server.data_dir, OUTPUT, output_read)
        assert_transactions_sound(txn_server.data_dir, CHANGELOG, changelog_read)
    finally:
        first.kill()
        if second is not None:
            second.kill()
        log = txn_server.log()
        print(f"--- worker 1 ---\n{first.log()}\n--- worker 2 ---\n{second.log() if second else ''}\n"
              f"--- server ---\n{log[-100000:]}")
    assert "Traceback" not in log and " ERROR " not in log, log[-5000:]
