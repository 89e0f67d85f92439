"""The filesystem operations the log uses, as one injectable object.

Rules:
- Every write-side operation of the storage engine (open, write, fsync, rename, truncate, unlink,
  directory fsync) goes through a `FileSystem`; tests subclass it to inject EIO on write or fsync.
- Reads use `pread` on file descriptors; they go through the same object, and so does `dup`, which a file
  range (file_range.py) takes of a segment's descriptor to keep its bytes readable after the segment goes.
- `write_atomic` is the one way to create a small file whose content must be all-or-nothing:
  write to `<path>.tmp`, fsync it, rename over `path`, fsync the directory.
"""

from __future__ import annotations

import os


class FileSystem:
    """Real implementation on top of `os`; every method may raise OSError."""

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        return os.open(path, flags, mode)

    def close(self, fd: int) -> None:
        os.close(fd)

    def write(self, fd: int, data: bytes | bytearray | memoryview) -> int:
        return os.write(fd, data)

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> int:
        return os.pwrite(fd, data, offset)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        return os.pread(fd, size, offset)

    def dup(self, fd: int) -> int:
        """A new descriptor of the same open file (not inherited by child processes)."""
        return os.dup(fd)

    def fsync(self, fd: int) -> None:
        # fdatasync: the data and the metadata needed to read it back (the size); timestamps may lag.
        # New files and renames are made durable by fsync_dir on their directory.
        os.fdatasync(fd)

    def ftruncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def file_size(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def write_all(self, fd: int, data: bytes | bytearray | memoryview) -> None:
        """Loop over short writes."""
        view = memoryview(data)
        while view:
            n = self.write(fd, view)
            view = view[n:]

    def pwrite_all(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
        """Loop over short positional writes."""
        view = memoryview(data)
        while view:
            n = self.pwrite(fd, view, offset)
            view = view[n:]
            offset += n

    def write_atomic(self, path: str, data: bytes) -> None:
        """write tmp, fsync tmp, rename over `path`, fsync the directory."""
        tmp = path + ".tmp"
        fd = self.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            self.write_all(fd, data)
            self.fsync(fd)
        finally:
            self.close(fd)
        self.rename(tmp, path)
        self.fsync_dir(os.path.dirname(path) or ".")

    def read_file(self, path: str) -> bytes | None:
        """Whole small file, or None if it does not exist."""
        try:
            fd = self.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            chunks = []
            offset = 0
            while chunk := self.pread(fd, 1 << 20, offset):
                chunks.append(chunk)
                offset += len(chunk)
            return b"".join(chunks)
        finally:
            self.close(fd)
