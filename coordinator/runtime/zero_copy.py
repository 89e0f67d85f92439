"""Zero-copy Fetch answers: stored batches go from the segment files to a plaintext socket by ``sendfile``,
never through Python objects (issue #35; Kafka's ``FileRecords.writeTo`` -> ``transferTo``, PLAINTEXT only).

Rules:
- Who: a Fetch on a connection whose ``zero_copy`` is true (a socket without TLS: PLAINTEXT and
  SASL_PLAINTEXT, whose frames are never wrapped once authenticated) reads each partition with
  ``PartitionLog.read_range(..., min_range=MIN_RANGE)``: a range of at least ``MIN_RANGE`` bytes comes as a
  ``FileRange`` (coordinator/storage/file_range.py), a smaller one as bytes (for small answers the copying
  path is cheaper: see MIN_RANGE). TLS connections, in-memory test streams and closed connections keep the
  copying path (``read``), byte for byte as before.
- An answer holding ranges is an ``Answer``: its frame as parts, bytes and ranges in wire order
  (``codec.encode_response_parts``), ``len()`` its whole frame's length, so every byte budget of a
  connection (held answers, pending response bytes) counts a range by its length. One without ranges is
  plain bytes, as before. ``encode_answer`` makes either.
- Sending (``send_items``): the connection's output list holds bytes, memoryviews (a partial write's rest)
  and ranges, in order; consecutive bytes go out in one ``write``, a range by ``sendfile`` from its own
  descriptor. Non-blocking: what the kernel does not take is returned (a range advanced by what was sent)
  and sent first next time; ranges already sent are closed at once.
- Safety: a range is checked (``valid()``) before each ``sendfile``; a ``sendfile`` that sends nothing while
  the range has bytes left means its file got shorter. Either raises ``RangeShrunk``: the frame's length
  went out already, so the connection must end (never padded; the client fetches again). A file system
  that cannot ``sendfile`` (EINVAL, ENOSYS, EOPNOTSUPP) gets that range read and written instead.
- Ownership: whoever holds a range closes it. An answer that is not sent (its slot was done already, its
  connection ended, a delayed fetch's look that did not answer) is released (``release``); the connection
  releases its output list and its slots' answers when it ends. A range never closed is closed when
  collected (file_range.py), a safety net only.
- ``STATS`` counts for tests and benchmarks: bytes sent by sendfile, answers made with ranges, connections
  ended by a shrunk range. The metric ``groupcoord_fetch_sendfile_bytes_total`` counts the same bytes.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from typing import Any

from coordinator.storage.file_range import FileRange, RangeShrunk
from protocol import codec

# Ranges below this many bytes are read into memory instead (the copying path). A range costs a fixed 8-15 us
# more per answer (dup, close, the parts encoding, one more write, the sendfile call), which not copying
# saves back from 32-128 KiB on: ``python -m tests.bench.bench_consume --micro`` on the 2-core dev machine,
# us of CPU per one-partition answer, copy vs sendfile, two runs: 20 vs 28 and 16 vs 19 at 32 KiB, 30 vs 34
# and 32 vs 27 at 64 KiB, 70 vs 53 and 62 vs 48 at 256 KiB, 873 vs 170 and 1055 vs 192 at 1 MiB. In the
# server a copied answer is copied again on its way (the encoding's buffer, a partial write's rest), so the
# line is drawn at 64 KiB.
MIN_RANGE = 64 * 1024

_NO_SENDFILE = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP)

__all__ = ["MIN_RANGE", "STATS", "Answer", "FileRange", "RangeShrunk", "encode_answer", "release",
           "release_body", "send_items"]


@dataclass(slots=True)
class Stats:
    sendfile_bytes: int = 0  # bytes sent by sendfile
    answers: int = 0  # answers made with at least one range
    shrunk: int = 0  # sends that met a range whose file got shorter or was truncated (connection ended)


STATS = Stats()


class Answer:
    """A response frame whose records are (partly) file ranges: its parts in wire order."""

    __slots__ = ("length", "parts")

    def __init__(self, parts: list[Any]) -> None:
        self.parts = parts
        self.length = sum(map(len, parts))

    def __len__(self) -> int:
        return self.length

    def materialize(self) -> bytes:
        """The whole frame in memory (the copying path for a connection that cannot take ranges); releases
        the ranges."""
        try:
            return b"".join(p.read() if type(p) is FileRange else p for p in self.parts)
        finally:
            self.release()

    def release(self) -> None:
        release(self.parts)


def encode_answer(api_key: int, version: int, correlation_id: int, body: Any) -> bytes | Answer:
    """The response frame: bytes when no ``records`` field holds a range, else an ``Answer``."""
    parts = codec.encode_response_parts(api_key, version, correlation_id, body)
    if len(parts) == 1 and type(parts[0]) is bytes:
        return parts[0]
    STATS.answers += 1
    return Answer(parts)


def release(items: Any) -> None:
    """Close every range among ``items`` (an output list, an answer's parts); anything else is left alone."""
    for item in items:
        if type(item) is FileRange:
            item.close()
        elif type(item) is Answer:
            item.release()


def release_body(body: dict[str, Any]) -> None:
    """Close the ranges of a Fetch response body that will not be sent."""
    for topic in body.get("responses", ()):
        for part in topic["partitions"]:
            records = part.get("records")
            if type(records) is FileRange:
                records.close()


def send_items(fd: int, items: list[Any]) -> tuple[list[Any], int]:
    """Send ``items`` (bytes, memoryviews, ranges) in order to the non-blocking socket ``fd``, as far as the
    kernel takes them now: (what is left, first item possibly partly sent; bytes sent by sendfile). Raises
    OSError from the socket, or RangeShrunk (see the rules); the items left are the caller's to release."""
    i, n = 0, len(items)
    by_sendfile = 0
    while i < n:
        item = items[i]
        if type(item) is FileRange:
            if not item.valid():
                STATS.shrunk += 1
                raise RangeShrunk(f"a segment was truncated under a pending Fetch answer ({item})")
            try:
                sent = os.sendfile(fd, item.fd, item.offset, item.length)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno not in _NO_SENDFILE:
                    raise
                items[i] = item.read()  # this file system cannot sendfile: the copying path for this range
                item.close()
                continue
            if sent == 0:
                STATS.shrunk += 1
                raise RangeShrunk(f"a segment file ended inside a pending Fetch answer ({item})")
            by_sendfile += sent
            if sent < item.length:
                item.advance(sent)
                break
            item.close()
            i += 1
            continue
        j = i + 1
        while j < n and type(items[j]) is not FileRange:
            j += 1
        data = item if j == i + 1 else b"".join(items[i:j])
        try:
            sent = os.write(fd, data)
        except BlockingIOError:
            if j > i + 1:
                items[j - 1] = data  # joined once: not again next time
                i = j - 1
            break
        if sent < len(data):
            items[j - 1] = memoryview(data)[sent:]
            i = j - 1
            break
        i = j
    STATS.sendfile_bytes += by_sendfile
    return (items[i:] if i else items) if i < n else [], by_sendfile
