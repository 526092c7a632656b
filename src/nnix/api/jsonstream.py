"""Large JSON responses built a slice at a time on the manager's loop and streamed.

A route that may answer with hundreds of thousands of records (NNI's ``metric-data``: every metric of
every trial) takes a snapshot of what it will send (references only: cheap), then encodes records in
slices of about 5 ms, sending each slice (at most ~256 KiB) and letting the loop run other
requests in between. The manager is never blocked for more than one slice, and the response never
holds more than one slice in memory beyond the snapshot. Why on the loop and not in a thread: the
encoding is pure Python, and a thread would hold the GIL for 5 ms at a time against the loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Mapping

from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from nnix.query import Parts

SLICE_SECONDS = 0.005  # encode at most this long before letting the loop run (1 ms: a 10k-trial export took 2x as long)
SLICE_BYTES = 256 * 1024  # send when this much is encoded
LIST_STEP = 512  # parts of a list given whole joined at once (NNI's TrialJobInfo: ~600 bytes each, ~300 KiB)


async def json_array(parts: Iterable[bytes | None], *, head: bytes = b"[", tail: bytes = b"]") -> AsyncIterator[bytes]:
    """``head``, the encoded ``parts`` joined by commas, ``tail``; yields slices. A ``None`` part
    sends nothing but is a point where the loop may run (for producers that scan much to emit little). Parts given
    as :class:`Parts` (all there: a kept list) are joined LIST_STEP parts at a time."""
    if isinstance(parts, Parts):
        step = LIST_STEP
        for i in range(0, len(parts), step):
            yield (head if i == 0 else b",") + b",".join(parts[i:i + step])
            await asyncio.sleep(0)
        yield tail if parts else head + tail
        return
    buf: list[bytes] = [head]
    size = len(head)
    first = True
    clock = time.perf_counter
    deadline = clock() + SLICE_SECONDS
    for n, part in enumerate(parts, 1):
        if part is not None:
            if not first:
                buf.append(b",")
            first = False
            buf.append(part)
            size += len(part) + 1
        if size >= SLICE_BYTES or (n & 63 == 0 and clock() >= deadline):
            if size:
                yield b"".join(buf)
                buf, size = [], 0
            await asyncio.sleep(0)
            deadline = clock() + SLICE_SECONDS
    buf.append(tail)
    yield b"".join(buf)


class JSONStream(StreamingResponse):
    """A streamed JSON response (see :func:`json_array`). One that fits in its first slice is sent whole, as any
    other response (with its length; a client that half-closes its side after the request still gets it)."""

    media_type = "application/json"

    def __init__(self, parts: Iterable[bytes | None], *, head: bytes = b"[", tail: bytes = b"]",
                 status_code: int = 200, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(json_array(parts, head=head, tail=tail), status_code=status_code, headers=headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = self.body_iterator
        first: list[bytes | str | memoryview] = []
        async for chunk in body:
            first.append(chunk)
            if len(first) == 2:
                break
        else:  # the whole answer in one slice
            content = b"".join(c.encode() if isinstance(c, str) else bytes(c) for c in first)
            whole = Response(content, status_code=self.status_code)
            whole.raw_headers = [*self.raw_headers, (b"content-length", str(len(content)).encode())]
            await whole(scope, receive, send)
            return

        async def rest() -> AsyncIterator[bytes | str | memoryview]:
            for chunk in first:
                yield chunk
            async for chunk in body:
                yield chunk

        self.body_iterator = rest()
        await super().__call__(scope, receive, send)
