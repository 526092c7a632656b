"""The agent (``nnix.agent.client``) against the real agent endpoint, through a TCP proxy that can cut
the connection and lose answers: buffering and exactly-once delivery, token and version refusal,
kill, shutdown without killing, attach by a second agent, retirement, non-reuse exit."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from nnix.agent.client import EXIT_OK, EXIT_TOKEN, EXIT_VERSION, AgentClient, ConnectSettings
from nnix.agent.protocol import Attach, Hello, Kill, Message, Run, Shutdown
from nnix.agent.runner import _group_alive
from nnix.model.runs import Exited, Metrics, Started, TrialSpec
from nnix.services.agent_server import AgentServer
from nnix.testing import wait_until_async

CUT_SECONDS = 3.0  # the 30 s cut, shortened: what matters is that requests fail and get re-sent


class Recorder:
    def __init__(self) -> None:
        self.hellos: list[Hello] = []
        self.messages: list[Message] = []
        self.refusals: list[str] = []

    def on_hello(self, environment_id: str, hello: Hello) -> None:
        self.hellos.append(hello)

    def on_message(self, environment_id: str, message: Message) -> None:
        self.messages.append(message)

    def on_refused(self, environment_id: str, reason: str) -> None:
        self.refusals.append(reason)

    def of(self, cls: type[Any], trial_id: str) -> list[Any]:
        return [m for m in self.messages if isinstance(m, cls) and m.trial_id == trial_id]

    def indices(self, trial_id: str) -> list[int]:
        return [i for m in self.of(Metrics, trial_id) for i, _ in m.items]

    async def wait_for(self, cls: type[Any], trial_id: str, timeout: float = 60.0) -> Any:
        found = await wait_until_async(lambda: self.of(cls, trial_id), timeout, f"a {cls.__name__} for {trial_id}",
                                       show=lambda: self.messages)
        return found[0]


class Proxy:
    """A TCP relay in front of the endpoint. ``cut(s)`` drops every connection and refuses new ones for
    ``s`` seconds; ``lose_next_ack`` swallows the answer to the next message batch (after the endpoint
    applied it), so the agent must re-send a batch the manager already has."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.lose_next_ack = False
        self.lost_acks = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self, seconds: float) -> None:
        assert self._server is not None
        self._server.close()
        for w in list(self._writers):
            w.transport.abort()
        await asyncio.sleep(seconds)
        await self.start()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.transport.abort()

    async def _relay(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        try:
            sr, sw = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            cw.transport.abort()
            return
        self._writers |= {cw, sw}
        drop = {"next": False}

        async def up() -> None:
            while data := await cr.read(65536):
                if self.lose_next_ack and data.startswith(b"POST") and b"/messages" in data:
                    self.lose_next_ack, drop["next"] = False, True
                sw.write(data)
                await sw.drain()

        async def down() -> None:
            while data := await sr.read(65536):
                if drop["next"]:
                    self.lost_acks += 1
                    cw.transport.abort()
                    sw.transport.abort()
                    return
                cw.write(data)
                await cw.drain()

        with contextlib.suppress(Exception):
            await asyncio.gather(up(), down())
        for w in (cw, sw):
            w.transport.abort()
            self._writers.discard(w)


async def _gone(pgid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while _group_alive(pgid):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def _spec(tmp_path: Path, trial_id: str, body: str) -> TrialSpec:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / f"{trial_id}.py").write_text("import nni, time, sys\np = nni.get_next_parameter()\n" + body)
    record = {"parameter_id": 0, "parameter_source": "algorithm", "parameters": {"x": 1}, "parameter_index": 0}
    return TrialSpec(trial_id, f"{sys.executable} {trial_id}.py", code, tmp_path / "trials" / trial_id, record, {})


async def _serve(**kw: Any) -> tuple[AgentServer, Recorder, str]:
    server = AgentServer(heartbeat=0.5, **kw)
    await server.start()
    rec = Recorder()
    ep = server.register("env-1", rec)
    return server, rec, ep.token


def _client(url: str, token: str, **kw: Any) -> AgentClient:
    kw.setdefault("poll_interval", 0.05)
    kw.setdefault("backoff_max", 0.3)
    return AgentClient(lambda: ConnectSettings(url, "env-1", token), resources=lambda: {"cpus": 1, "gpus": []}, **kw)


def test_metrics_reported_during_a_cut_arrive_exactly_once(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "T1", "for i in range(30):\n    nni.report_intermediate_result(i)\n    time.sleep(0.1)\n"
                                 "nni.report_final_result(99)\n")

    async def main() -> None:
        server, rec, token = await _serve()
        proxy = Proxy(server.port)
        await proxy.start()
        client = _client(f"http://127.0.0.1:{proxy.port}", token, request_timeout=1.0)
        task = asyncio.create_task(client.run())
        try:
            ep = server.endpoint("env-1")
            assert ep is not None
            await wait_until_async(lambda: rec.hellos, 60, "the agent's hello")
            ep.send(Run(spec))
            await rec.wait_for(Started, "T1")
            deadline = time.monotonic() + 60
            while len(rec.indices("T1")) < 3:  # metrics flow before the cut
                assert time.monotonic() < deadline, "no metrics arrived"
                await asyncio.sleep(0.01)
            proxy.lose_next_ack = True  # the manager applies a batch but its answer never arrives
            await wait_until_async(lambda: proxy.lost_acks > 0, 60, "a lost answer")
            await proxy.cut(CUT_SECONDS)  # trial keeps reporting meanwhile
            exited = await rec.wait_for(Exited, "T1", timeout=30)
            assert exited.exit_code == 0
            assert proxy.lost_acks == 1
            counts = Counter(rec.indices("T1"))
            assert sorted(counts) == list(range(31)), sorted(counts)  # every metric ...
            assert set(counts.values()) == {1}  # ... exactly once
            assert len(rec.of(Started, "T1")) == 1 and len(rec.of(Exited, "T1")) == 1
            assert len(rec.hellos) >= 2  # it said hello again after the cut
            ep.send(Shutdown("done"))
            assert await asyncio.wait_for(task, 10) == EXIT_OK
        finally:
            task.cancel()
            await proxy.close()
            await server.close()

    asyncio.run(main())


def test_wrong_token_is_refused(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> int:
        server, rec, _ = await _serve()
        try:
            return await asyncio.wait_for(_client(server.url, "forged-token").run(), 10)
        finally:
            assert rec.hellos == []
            await server.close()

    with caplog.at_level(logging.INFO):
        assert asyncio.run(main()) == EXIT_TOKEN
    assert "refused this agent's token" in caplog.text


def test_version_mismatch_is_refused_on_both_sides(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> tuple[int, list[str]]:
        server, rec, token = await _serve()
        try:
            code = await asyncio.wait_for(_client(server.url, token, version="0.10.0").run(), 10)
            return code, rec.refusals
        finally:
            await server.close()

    with caplog.at_level(logging.INFO):
        code, refusals = asyncio.run(main())
    assert code == EXIT_VERSION
    assert len(refusals) == 1 and "0.10.0" in refusals[0]
    assert "the manager refused this agent" in caplog.text and "0.10.0" in caplog.text


def test_an_agent_no_manager_knows_any_more_kills_its_trials_and_exits(tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    """Its manager went away without retiring it (its host was cut off until the experiment ended); what answers
    at its address now (the connect file names another port) is a manager that does not know its environment:
    404. It tries again for ``unknown_after`` seconds, then kills its trial and exits, well before its 24 h
    give-up time. A manager that knows it again before that keeps it (the first 404s are retried)."""
    long_trial = _spec(tmp_path, "L", "time.sleep(600)\n")

    async def main() -> int:
        first, rec, token = await _serve()
        other = AgentServer(heartbeat=0.5)  # another experiment's manager: it has no env-1
        await other.start()
        url = {"now": first.url}
        client = AgentClient(lambda: ConnectSettings(url["now"], "env-1", token), poll_interval=0.05,
                             backoff_max=0.1, unknown_after=1.0, resources=lambda: {"cpus": 1, "gpus": []})
        task = asyncio.create_task(client.run())
        try:
            ep = first.endpoint("env-1")
            assert ep is not None
            await wait_until_async(lambda: rec.hellos, 60, "the agent's hello")
            ep.send(Run(long_trial))
            started = await rec.wait_for(Started, "L")
            await first.close()  # gone without a word
            url["now"] = other.url
            code = await asyncio.wait_for(task, 60)
            assert await _gone(started.pid)  # its trial is killed with it
            return code
        finally:
            task.cancel()
            await first.close()
            await other.close()

    with caplog.at_level(logging.INFO):
        assert asyncio.run(main()) == EXIT_TOKEN
    assert "no manager knows this environment" in caplog.text


def test_kill_shutdown_without_kill_then_attach_by_another_agent(tmp_path: Path) -> None:
    long_trial = _spec(tmp_path, "L", "for i in range(30):\n    nni.report_intermediate_result(i)\n"
                                      "    time.sleep(0.1)\nsys.exit(3)\n")
    victim = _spec(tmp_path, "V", "import subprocess\nsubprocess.Popen(['sleep', '60'])\ntime.sleep(60)\n")

    async def main() -> None:
        server, rec, token = await _serve()
        ep = server.endpoint("env-1")
        assert ep is not None
        first = asyncio.create_task(_client(server.url, token).run())
        try:
            await wait_until_async(lambda: rec.hellos, 60, "the agent's hello")
            ep.send(Run(victim))
            ep.send(Run(long_trial))
            started_v = await rec.wait_for(Started, "V")
            started = await rec.wait_for(Started, "L")
            ep.send(Kill("V"))
            killed = await rec.wait_for(Exited, "V")
            assert killed.exit_code is None and killed.signal is not None
            assert await _gone(started_v.pid)  # the whole tree (the trial and its `sleep`)
            await wait_until_async(lambda: not (len(rec.indices("L")) < 5), 60, "five metrics of trial L")
            ep.send(Shutdown("manager going away", kill_trials=False))
            assert await asyncio.wait_for(first, 10) == EXIT_OK
            os.killpg(started.pid, 0)  # the trial outlived its agent
            seen = max(rec.indices("L"))
            # a second agent (a new instance) is told to watch it
            server.register("env-1", rec, token)
            second = asyncio.create_task(_client(server.url, token, single=True).run())
            ep2 = server.endpoint("env-1")
            assert ep2 is not None
            ep2.send(Attach("L", started.output_dir, started.pid, started.pid_start, seen))
            exited = await rec.wait_for(Exited, "L", timeout=20)
            assert exited.exit_code == 3
            counts = Counter(rec.indices("L"))
            assert sorted(counts) == list(range(30)) and set(counts.values()) == {1}
            assert await asyncio.wait_for(second, 10) == EXIT_OK  # non-reuse: exits once its trial is reported
        finally:
            first.cancel()
            await server.close()

    asyncio.run(main())


def test_retired_environment_kills_its_trials_and_exits(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "R", "time.sleep(60)\n")

    async def main() -> None:
        server, rec, token = await _serve()
        ep = server.endpoint("env-1")
        assert ep is not None
        task = asyncio.create_task(_client(server.url, token, kill_grace=1.0).run())
        try:
            await wait_until_async(lambda: rec.hellos, 60, "the agent's hello")
            ep.send(Run(spec))
            started = await rec.wait_for(Started, "R")
            server.retire("env-1", "host lost")
            assert await asyncio.wait_for(task, 10) == EXIT_OK
            assert await _gone(started.pid)
        finally:
            task.cancel()
            await server.close()

    asyncio.run(main())


def test_the_runner_waits_while_the_outbox_is_full() -> None:
    """The agent's runner reads a trial's metrics no faster than the manager acknowledges them: while more than
    OUTBOX_PACE messages wait (a flood, or the manager unreachable), its pace waits; an acknowledgement frees it."""
    from nnix.agent.client import OUTBOX_PACE

    async def main() -> None:
        agent = AgentClient(lambda: ConnectSettings("http://127.0.0.1:9", "env-1", "t"),
                            resources=lambda: {"cpus": 1, "gpus": []})
        pace = agent._runner.pace
        assert pace is not None
        await asyncio.wait_for(pace(), 5)  # room: at once
        for i in range(OUTBOX_PACE + 10):
            agent._on_event(Metrics("t1", [(i, {"type": "PERIODICAL", "sequence": i, "value": 1})]))
        waiting = asyncio.ensure_future(pace())
        await asyncio.sleep(0.05)
        assert not waiting.done()  # the trial's lines wait in its file
        agent._acked(20)  # the manager took the first 20 in
        await asyncio.wait_for(waiting, 5)

    asyncio.run(main())
