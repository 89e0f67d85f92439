"""Test only (tests/integration/test_offsets_topic_durability.py): with TEST_FSYNC_GATE set to a file path,
the journal's fsync (``Journal.sync``, run in a worker thread when ``log.journal.fsync.process`` is false)
waits while that file exists (bounded: 60 s), as a slow disk would. Loaded by Python at start-up when this
folder is on PYTHONPATH; nothing of it is in the server's own code."""

import os

_gate = os.environ.get("TEST_FSYNC_GATE")
if _gate:
    import time

    from coordinator.storage import journal as _journal

    _real_sync = _journal.Journal.sync

    def _gated_sync(self):  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + 60
        while os.path.exists(_gate) and time.monotonic() < deadline:
            time.sleep(0.01)
        return _real_sync(self)

    _journal.Journal.sync = _gated_sync
