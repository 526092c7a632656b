"""Drive an ASGI app as a slow client would: a response whose reader pauses after the first piece of
the body, to see how much the server sent at once and whether it serves others meanwhile."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any


@dataclass
class PausedResponse:
    """A GET in flight on an ASGI app. ``first`` is set when the first body piece arrived; the app then
    waits until :meth:`resume`. ``pieces`` are the body pieces so far, ``done`` the end of the body."""

    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    pieces: list[bytes] = field(default_factory=list)
    first: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    _go: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    def resume(self) -> None:
        self._go.set()

    @property
    def body(self) -> bytes:
        return b"".join(self.pieces)


def paused_get(app: Any, path: str, headers: dict[str, str] | None = None, query: str = "") -> PausedResponse:
    """Start ``GET path`` on ``app`` (in the running loop) as a client that stops reading after the first
    piece of the body until :meth:`PausedResponse.resume`."""
    out = PausedResponse()
    raw = [(b"host", b"127.0.0.1")] + [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    scope = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
        "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
        "query_string": query.encode(), "headers": raw, "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }
    sent_request = False
    never = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal sent_request
        if not sent_request:
            sent_request = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await never.wait()  # the client never hangs up
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            out.status = message["status"]
            out.headers = {k.decode().lower(): v.decode() for k, v in message.get("headers", [])}
            return
        if message["type"] != "http.response.body":
            return
        body = message.get("body", b"")
        if body:
            out.pieces.append(bytes(body))
        if not message.get("more_body", False):
            out.done.set()
            out.first.set()
            return
        if body and not out.first.is_set():
            out.first.set()
            await out._go.wait()

    async def run() -> None:
        await app(scope, receive, send)
        out.done.set()
        out.first.set()

    out.task = asyncio.ensure_future(run())
    return out
