"""Test only (tests/integration/test_handler_faults.py, test_consumer_group_faults.py): with TEST_FAULT_DIR set,
the server's record encoders raise once each time a file named after them appears in that directory (the
file is removed as the fault fires), as an encoding bug or an unencodable value would; a file named
"consumer_group_write" fails the next KIP-848 group write as a failed append would. Loaded by Python at start-up when this
folder is on PYTHONPATH; nothing of it is in the server's own code."""

import os

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
