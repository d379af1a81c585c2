"""A session's captured tool outputs in every store: read as byte ranges (a large one
kept in chunks, a read fetching only the chunks of its range), and gone with their
session."""

from __future__ import annotations

import os

from phaseflow.stores.base import CAPTURE_CHUNK, capture_owner
from tests.support.store_backends import Backend


def test_a_capture_is_read_in_ranges_and_goes_with_its_session(store: Backend) -> None:
    small = b"0123456789" * 10
    large = os.urandom(3 * CAPTURE_CHUNK + 1234)
    spots = [(0, 10), (CAPTURE_CHUNK - 5, 10), (CAPTURE_CHUNK, 2 * CAPTURE_CHUNK + 7),
             (len(large) - 3, 100), (len(large), 5), (5, 2**62)]

    async def body() -> None:
        s = await store.open()
        one = await s.put_capture(small, session_id="a")
        assert one.startswith(capture_owner("a") + "-")
        assert await s.read_capture(one, 3, 4) == (small[3:7], len(small))
        assert await s.read_capture(one, 500, 4) == (b"", len(small))
        big = await s.put_capture(large, session_id="a")
        for offset, limit in spots:
            assert await s.read_capture(big, offset, limit) == (
                large[offset:offset + limit], len(large)), (offset, limit)
        assert await s.get_capture(big) == large
        other = await s.put_capture(small, session_id="b")
        assert other != one  # each session's own
        await s.delete("a")
        assert await s.read_capture(one, 0, 1) is None
        assert await s.read_capture(big, 0, 1) is None
        assert await s.get_capture(big) is None
        assert await s.read_capture(other, 0, 3) == (small[:3], len(small))
        assert await s.read_capture("no-such-capture", 0, 1) is None
    store.run(body)
