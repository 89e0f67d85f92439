"""FrameReader gives back exactly the frames that were sent, as bytes, however the stream is cut into
reads (bytes or bytearray chunks, frames split anywhere, several frames in one read), and its buffer never
holds more than one maximal frame plus one read."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.framing import FrameReader, frame


@settings(max_examples=200, deadline=None)
@given(payloads=st.lists(st.binary(max_size=300), max_size=12), cuts=st.lists(st.integers(0, 4000), max_size=12),
       as_bytearray=st.lists(st.booleans(), min_size=13, max_size=13))
def test_frames_survive_any_cut(payloads: list[bytes], cuts: list[int], as_bytearray: list[bool]) -> None:
    stream = b"".join(frame(p) for p in payloads)
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    reader = FrameReader(max_frame_bytes=300)
    got: list[bytes] = []
    for i, (a, b) in enumerate(itertools.pairwise(points)):
        chunk = stream[a:b]
        reader.feed(bytearray(chunk) if as_bytearray[i % 13] else chunk)
        assert reader.buffered <= 304 + len(chunk)
        while (f := reader.next_frame()) is not None:
            assert type(f) is bytes
            got.append(f)
    assert got == payloads
    assert reader.buffered == 0


def test_a_fed_bytearray_is_never_changed_by_later_reads() -> None:
    reader = FrameReader()
    first = bytearray(frame(b"abc")[:5])  # a partial frame, kept in the reader's buffer
    reader.feed(first)
    reader.feed(frame(b"abc")[5:] + frame(b"zz"))
    assert [reader.next_frame(), reader.next_frame(), reader.next_frame()] == [b"abc", b"zz", None]
    assert first == bytearray(frame(b"abc")[:5])
