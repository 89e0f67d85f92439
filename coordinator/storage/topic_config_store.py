"""Where a topic's config overrides live: ``TopicConfigStore`` (the seam; cluster mode will keep them with the
rest of the topic metadata) and ``FileTopicConfigStore`` (single node: one file per topic).

Rules:
- Layout: ``<data dir>/topic-configs/<topic>.json`` holds ``{"version": 1, "configs": {key: value}}``; a
  topic without a file has no overrides (topics created before configs existed keep working).
- Writes are atomic: write ``<file>.tmp``, fsync it, rename over the file, fsync the directory. A topic's
  file is written before its partitions are created and removed after they are deleted; a file whose topic
  has no partitions (a crash in between) is removed at start by the caller (``remove``).
- A file that cannot be read or parsed at start is a ``StorageError`` naming the file: the server refuses to
  start rather than treat a compacted topic as a deleting one (that would lose data). The fix is to repair
  or delete the named file.
- The store checks nothing about keys or values (``coordinator.core.topic_configs`` does that).
"""

from __future__ import annotations

import json
import os
from typing import Protocol

from .errors import StorageError
from .fs import FileSystem

CONFIG_DIR = "topic-configs"
_SUFFIX = ".json"


class TopicConfigStore(Protocol):
    def load_all(self) -> dict[str, dict[str, str]]: ...

    def save(self, topic: str, configs: dict[str, str]) -> None: ...

    def remove(self, topic: str) -> None: ...


class FileTopicConfigStore:
    def __init__(self, data_dir: str, fs: FileSystem | None = None) -> None:
        self.directory = os.path.join(os.path.abspath(data_dir), CONFIG_DIR)
        self.fs = fs or FileSystem()

    def path(self, topic: str) -> str:
        return os.path.join(self.directory, topic + _SUFFIX)

    def load_all(self) -> dict[str, dict[str, str]]:
        if not os.path.isdir(self.directory):
            return {}
        out: dict[str, dict[str, str]] = {}
        for name in sorted(os.listdir(self.directory)):
            path = os.path.join(self.directory, name)
            if name.endswith(_SUFFIX + ".tmp"):  # an interrupted write: the rename never happened
                os.unlink(path)
                continue
            if not name.endswith(_SUFFIX):
                continue
            out[name[: -len(_SUFFIX)]] = self._read(path)
        return out

    def _read(self, path: str) -> dict[str, str]:
        try:
            data = self.fs.read_file(path)
            doc = json.loads((data or b"").decode("utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise StorageError(f"topic config file {path} is unreadable ({e}); repair or delete it") from None
        configs = doc.get("configs") if isinstance(doc, dict) and doc.get("version") == 1 else None
        if not isinstance(configs, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                    for k, v in configs.items()):
            raise StorageError(f"topic config file {path} is not a version 1 topic config document; repair or "
                               "delete it")
        return dict(configs)

    def save(self, topic: str, configs: dict[str, str]) -> None:
        data = json.dumps({"version": 1, "configs": dict(sorted(configs.items()))}, indent=1).encode()
        try:
            if not os.path.isdir(self.directory):
                self.fs.makedirs(self.directory)
                self.fs.fsync_dir(os.path.dirname(self.directory))
            self.fs.write_atomic(self.path(topic), data)
        except OSError as e:
            raise StorageError(f"cannot write topic config file {self.path(topic)}: {e}") from e

    def remove(self, topic: str) -> None:
        try:
            self.fs.unlink(self.path(topic))
            self.fs.fsync_dir(self.directory)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise StorageError(f"cannot remove topic config file {self.path(topic)}: {e}") from e
