"""Server-sent events: live changes of an experiment, for the web UI and any HTTP client.

The manager calls every subscriber after each recorded batch of events. The hub only marks itself
dirty there (cheap, cannot fail); a pump task coalesces bursts (at most one message per
``interval``), reads the new events from the store, and sends every client one ``update``
message: the experiment overview, the summaries of the trials that changed, and the new metrics.
Trial summaries are whole objects, so applying a message twice is harmless. A client that falls
behind gets ``resync`` and should reload a snapshot (the UI does the same on every reconnect).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator
from typing import Any

from nnix.api.common import dumps, ms
from nnix.api.views import overview
from nnix.core.manager import ExperimentManager
from nnix.model.events import Event, ManagerHeartbeat, MetricReported
from nnix.query import Query, TrialViews

log = logging.getLogger("nnix.api")

QUEUE_SIZE = 512
KEEPALIVE = 15.0


def frame(event: str, data: bytes, event_id: int | None = None) -> bytes:
    head = f"event: {event}\n" + (f"id: {event_id}\n" if event_id is not None else "")
    return head.encode() + b"data: " + data + b"\n\n"


class _Client:
    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(QUEUE_SIZE)
        self.lagging = False

    def put(self, item: bytes | None) -> None:
        if self.lagging:
            return
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            # too slow: drop what it has not read and tell it to reload a snapshot
            self.lagging = True
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(frame("resync", b"{}"))


class EventHub:
    def __init__(self, manager: ExperimentManager, views: TrialViews, read_only: bool,
                 interval: float = 0.2, keepalive: float = KEEPALIVE) -> None:
        self.manager = manager
        self.views = views
        self.read_only = read_only
        self.interval = interval
        self.keepalive = keepalive
        self._clients: set[_Client] = set()
        self._dirty: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._last_seq = manager.state.last_seq
        self._closed = False
        manager.subscribe(self._notify)

    @property
    def clients(self) -> int:
        return len(self._clients)

    def _notify(self) -> None:
        if self._dirty is not None and self._clients:
            self._dirty.set()

    def _ensure_pump(self) -> None:
        if self._dirty is None:
            self._dirty = asyncio.Event()
        if self._task is None or self._task.done():
            self._last_seq = self.manager.state.last_seq
            self._task = asyncio.ensure_future(self._pump())

    async def _pump(self) -> None:
        assert self._dirty is not None
        while self._clients and not self._closed:
            await self._dirty.wait()
            await asyncio.sleep(self.interval)
            self._dirty.clear()
            try:
                message = self.collect()
            except Exception:  # never let a bad event end live updates for everybody
                log.exception("building a live update failed")
                continue
            if message is not None:
                for c in list(self._clients):
                    c.put(message)

    def collect(self) -> bytes | None:
        """The update message for everything recorded since the last one (None: nothing to say)."""
        state = self.manager.state
        if state.last_seq <= self._last_seq:
            return None
        stored = self.manager.store.read(since=self._last_seq)
        self._last_seq = max([self._last_seq, state.last_seq] + [s.seq for s in stored])
        changed: dict[str, None] = {}
        metrics: list[dict[str, Any]] = []
        interesting = False
        for s in stored:
            e: Event = s.event
            if isinstance(e, ManagerHeartbeat):
                continue
            interesting = True
            tid = e.trial_ref
            if tid is not None:
                changed[tid] = None
            if isinstance(e, MetricReported):
                metrics.append({"trial": e.trial_id, "type": e.type.value, "sequence": e.sequence,
                                "value": e.value, "index": e.index, "ts": ms(s.ts)})
        if not interesting and stored:
            return frame("tick", dumps({"seq": self._last_seq, "experiment": self._overview()}), self._last_seq)
        q = Query(state)
        trials = [self.views.summary(t) for tid in changed if (t := q.trial(tid)) is not None]
        body = {"seq": self._last_seq, "experiment": self._overview(), "trials": trials, "metrics": metrics}
        return frame("update", dumps(body), self._last_seq)

    def _overview(self) -> dict[str, Any]:
        return overview(self.manager, self.views, self.read_only)

    async def stream(self) -> AsyncGenerator[bytes, None]:
        client = _Client()
        self._clients.add(client)
        self._ensure_pump()
        try:
            hello = {"seq": self.manager.state.last_seq, "experiment": self._overview()}
            yield b"retry: 2000\n" + frame("hello", dumps(hello), self.manager.state.last_seq)
            while not self._closed:
                try:
                    item = await asyncio.wait_for(client.queue.get(), self.keepalive)
                except TimeoutError:
                    yield b": keepalive\n\n"
                    continue
                if item is None:
                    break
                yield item
                if client.lagging and client.queue.empty():
                    break  # it was told to resync; it reconnects
        finally:
            self._clients.discard(client)

    def close(self) -> None:
        """End every stream (the server is shutting down)."""
        self._closed = True
        for c in list(self._clients):
            with contextlib.suppress(asyncio.QueueFull):
                c.queue.put_nowait(None)
        if self._task is not None:
            self._task.cancel()


class EventStreamResponse:
    """An ASGI response streaming the hub to one client; it notices a disconnect at once (not only
    at the next write), so a closed browser tab stops costing anything immediately."""

    def __init__(self, hub: EventHub) -> None:
        self.hub = hub

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no")]})
        stream = self.hub.stream()

        async def pump() -> None:
            async for chunk in stream:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        tasks = [asyncio.ensure_future(pump()), asyncio.ensure_future(watch())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await stream.aclose()
        with contextlib.suppress(Exception):
            await send({"type": "http.response.body", "body": b"", "more_body": False})
