"""Producer ids that are never handed out twice, across restarts (Kafka's ProducerIdManager, on one node).

Rules:
- Ids come in blocks of ``BLOCK`` (1,000, Kafka's ProducerIdsBlock size). Before the first id of a block is
  handed out, the end of that block is written to ``<data.dir>/producer_id_block`` (write to a temporary
  file, fsync, rename, fsync the directory), so after any crash the next start begins past every id that
  may have been handed out. One small synchronous write per 1,000 ids.
- A missing file (a new data dir, or one written by a version that derived ids from the clock) starts at
  ``clock_ms() << 8``, which the old scheme's ids stayed below as long as the clock did not go back.
- A file that cannot be read as one non-negative integer stops the start (``StartupError``): guessing could
  hand out an id that is in use. A failed write raises ``StorageError`` to the caller (the request that
  needed an id answers an error; no id of the unwritten block is handed out).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from coordinator.storage.errors import StorageError
from coordinator.storage_errors import StartupError

BLOCK = 1000
FILE = "producer_id_block"
_MAX = 2**63 - 1


class ProducerIds:
    def __init__(self, data_dir: str, clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self._path = os.path.join(data_dir, FILE)
        self._dir = data_dir
        start = self._read()
        if start is None:
            start = clock_ms() << 8
        self._next = start
        self._end = start  # no block reserved yet: the first id reserves one

    def _read(self) -> int | None:
        try:
            with open(self._path, encoding="ascii") as f:
                text = f.read().strip()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as e:
            raise StartupError(f"cannot read {self._path}: {e}") from None
        if not text.isdigit() or int(text) > _MAX:
            raise StartupError(f"{self._path} does not hold a producer id ({text[:40]!r}); repair or delete it "
                               f"only if no producer of this server is alive")
        return int(text)

    def _reserve(self, end: int) -> None:
        tmp = self._path + ".tmp"
        try:
            with open(tmp, "w", encoding="ascii") as f:
                f.write(f"{end}\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._path)
            fd = os.open(self._dir, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            raise StorageError(f"cannot reserve producer ids in {self._path}: {e}") from e

    def __call__(self) -> int:
        """The next producer id (reserving a new block durably first when the current one is used up)."""
        if self._next >= self._end:
            end = self._next + BLOCK
            self._reserve(end)
            self._end = end
        pid = self._next
        self._next += 1
        return pid
