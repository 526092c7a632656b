"""Live updates: the event hub's messages, and a real event stream from a real server and manager."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from nnix.api.app import ApiApp
from nnix.api.sse import EventHub, _Client
from nnix.core.events import MetricReported, StatusChanged, TrialCreated, TrialEnded, TrialStarted
from nnix.core.status import ExperimentStatus, MetricType, TrialStatus


def _parse(frame: bytes) -> tuple[str, dict[str, Any]]:
    event, data = "", b""
    for line in frame.split(b"\n"):
        if line.startswith(b"event: "):
            event = line[7:].decode()
        elif line.startswith(b"data: "):
            data = line[6:]
    return event, json.loads(data)


def test_hub_messages_follow_recorded_events(finished: Path, h: Any) -> None:
    manager, app = h.viewer(finished, read_only=False)
    hub: EventHub = app.ctx.hub
    assert hub.collect() is None  # nothing new
    manager.record(TrialCreated("fffff", 5, 5, {"x": 0.5, "opt": "a"}), TrialStarted("fffff", "local-env", "/nowhere"))
    manager.record(MetricReported("fffff", MetricType.PERIODICAL, 0, 0.25, 0, 5))
    event, msg = _parse(hub.collect() or b"")
    assert event == "update" and msg["seq"] == manager.state.last_seq
    (t,) = msg["trials"]
    assert t["id"] == "fffff" and t["status"] == "RUNNING" and t["latest"] == 0.25 and t["nInter"] == 1
    assert msg["metrics"] == [{"trial": "fffff", "type": "PERIODICAL", "sequence": 0, "value": 0.25, "index": 0,
                               "ts": msg["metrics"][0]["ts"]}]
    assert msg["experiment"]["counts"]["RUNNING"] == 1 and msg["experiment"]["total"] == 6
    manager.record(TrialEnded("fffff", TrialStatus.SUCCEEDED, 0), StatusChanged(ExperimentStatus.DONE))
    _, msg = _parse(hub.collect() or b"")
    assert [t["status"] for t in msg["trials"]] == ["SUCCEEDED"] and msg["metrics"] == []
    assert msg["experiment"]["recordedStatus"] == "DONE"
    assert hub.collect() is None


def test_a_slow_client_is_told_to_resync() -> None:
    async def go() -> None:
        c = _Client()
        for i in range(600):
            c.put(f"m{i}".encode())
        assert c.lagging and c.queue.qsize() == 1
        item = c.queue.get_nowait()
        assert item is not None and b"resync" in item

    asyncio.run(go())


@contextlib.asynccontextmanager
async def serve(app: ApiApp) -> AsyncIterator[int]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        yield sock.getsockname()[1]
    finally:
        app.ctx.hub.close()
        server.should_exit = True
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        sock.close()


def test_event_stream_from_a_running_experiment(sleeper: Any, h: Any) -> None:
    exp_dir = sleeper(maxTrialNumber=2, trialConcurrency=1)

    async def go() -> None:
        async with h.running(exp_dir) as m:
            await h.until(lambda: m.state.count(TrialStatus.RUNNING) == 1)
            app = h.create_app(m)
            app.ctx.hub.interval = 0.05
            async with serve(app) as port, httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
                statuses: list[str] = []
                metrics: list[dict[str, Any]] = []
                events: list[str] = []
                new: str | None = None
                async with c.stream("GET", "/api/nnix/v1/events") as r:
                    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
                    buf = b""
                    async for chunk in r.aiter_bytes():
                        buf += chunk
                        while b"\n\n" in buf:
                            frame, buf = buf.split(b"\n\n", 1)
                            if b"data: " not in frame:
                                continue
                            event, msg = _parse(frame)
                            events.append(event)
                            if event == "hello":  # connected: now make something happen
                                assert msg["experiment"]["id"] == m.experiment_id
                                m.update_limit("trial_concurrency", 2)
                            for t in msg.get("trials", []):
                                if t["seq"] == 1:
                                    new = t["id"]
                                    statuses.append(t["status"])
                            metrics += [x for x in msg.get("metrics", []) if x["trial"] == new]
                            if len(metrics) >= 3 and new and m.state.trials[new].cancel_reason is None:
                                m.cancel_trial(new)
                        if "USER_CANCELED" in statuses:
                            break
                assert events[0] == "hello" and "update" in events
                assert statuses[0] in ("WAITING", "RUNNING") and "RUNNING" in statuses
                assert statuses[-1] == "USER_CANCELED"
                assert [x["sequence"] for x in metrics[:3]] == [0, 1, 2]
                await h.until(lambda: app.ctx.hub.clients == 0, 5)  # the disconnect is noticed at once

    h.run(asyncio.wait_for(go(), 60))
