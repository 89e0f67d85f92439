"""Test only (tests/integration/test_handler_faults.py): with TEST_FAULT_DIR set, the server's record
encoders raise once each time a file named after them appears in that directory (the file is removed as the
fault fires), as an encoding bug or an unencodable value would. Loaded by Python at start-up when this
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
