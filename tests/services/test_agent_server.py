"""The manager's agent endpoint over real HTTP: tokens, version refusal, seq dedup, long polls, retirement."""

from __future__ import annotations

import asyncio
import http.client
import json
import time
from pathlib import Path
from typing import Any

from nnix.agent.protocol import Hello, Kill, Message, encode
from nnix.model.runs import Metrics
from nnix.services.agent_server import AgentServer, Endpoint
from nnix.testing import wait_until_async


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


def _request(port: int, method: str, path: str, token: str, body: Any = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Authorization": f"Bearer {token}"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


async def _call(port: int, method: str, path: str, token: str, body: Any = None) -> tuple[int, Any]:
    return await asyncio.to_thread(_request, port, method, path, token, body)


def _metric(seq: int) -> dict[str, Any]:
    return encode(Metrics("t1", [(seq, {"type": "PERIODICAL", "sequence": seq, "value": seq})]), seq)


async def _serve(handler: Recorder) -> tuple[AgentServer, Endpoint, str]:
    """A started endpoint with environment ``env-1`` heard by ``handler``, and that environment's route prefix."""
    server = AgentServer()
    await server.start()
    return server, server.register("env-1", handler), "/agent/v1/env-1"


def test_tokens_versions_dedup_and_retirement() -> None:
    async def main() -> None:
        rec = Recorder()
        server, ep, base = await _serve(rec)
        try:
            hello = encode(Hello("env-1", "0.1.3", {"cpus": 2}, [], "inst-a"), 0)
            # wrong token, unknown environment
            status, body = await _call(server.port, "POST", f"{base}/hello", "not-the-token", hello)
            assert status == 401 and "wrong or missing token" in body["error"]
            status, _ = await _call(server.port, "POST", "/agent/v1/nope/hello", ep.token, hello)
            assert status == 404
            assert rec.hellos == [] and ep.last_contact is None
            # messages before any hello: say hello first
            status, _ = await _call(server.port, "POST", f"{base}/messages", ep.token,
                                    {"instance": "inst-a", "messages": [_metric(1)]})
            assert status == 428
            # incompatible version: refused, and the handler hears why
            old = encode(Hello("env-1", "0.10.0", {}, [], "inst-a"), 0)
            status, body = await _call(server.port, "POST", f"{base}/hello", ep.token, old)
            assert status == 409 and "0.10.0" in body["error"] and server.version in body["error"]
            assert rec.refusals and "0.10.0" in rec.refusals[0]
            # a good hello
            status, body = await _call(server.port, "POST", f"{base}/hello", ep.token, hello)
            assert status == 200 and body["acked"] == 0 and body["commands_after"] == 0
            assert rec.hellos[0].resources == {"cpus": 2}
            # a batch re-sent (its answer was lost) is applied once
            status, body = await _call(server.port, "POST", f"{base}/messages", ep.token,
                                       {"instance": "inst-a", "messages": [_metric(1), _metric(2), _metric(3)]})
            assert (status, body) == (200, {"acked": 3})
            status, body = await _call(server.port, "POST", f"{base}/messages", ep.token,
                                       {"instance": "inst-a", "messages": [_metric(2), _metric(3), _metric(4)]})
            assert (status, body) == (200, {"acked": 4})
            assert [m.items[0][0] for m in rec.messages if isinstance(m, Metrics)] == [1, 2, 3, 4]
            # the same instance saying hello again learns what was applied
            status, body = await _call(server.port, "POST", f"{base}/hello", ep.token, hello)
            assert body["acked"] == 4
            # a new instance (a restarted agent) starts its numbering again
            status, body = await _call(server.port, "POST", f"{base}/hello", ep.token,
                                       encode(Hello("env-1", "0.1.0", {}, [], "inst-b"), 0))
            assert body["acked"] == 0
            # retired: 410 with the reason
            server.retire("env-1", "host lost")
            status, body = await _call(server.port, "GET", f"{base}/commands?after=0&wait=0&instance=inst-b",
                                       ep.token)
            assert (status, body["error"]) == (410, "host lost")
        finally:
            await server.close()

    asyncio.run(main())


def test_long_poll_returns_as_soon_as_a_command_is_queued() -> None:
    async def main() -> None:
        server = AgentServer(poll_wait=3600)
        await server.start()
        ep = server.register("env-1", Recorder())
        base = "/agent/v1/env-1"
        try:
            await _call(server.port, "POST", f"{base}/hello", ep.token,
                        encode(Hello("env-1", server.version, {}, [], "i"), 0))
            t0 = time.monotonic()
            status, body = await _call(server.port, "GET", f"{base}/commands?after=0&wait=0.2&instance=i", ep.token)
            assert status == 200 and body == {"commands": []} and time.monotonic() - t0 > 0.15  # it did wait
            # a poll that would wait an hour: answered once a command is queued (the guard only catches a hang)
            seen = ep.last_contact
            poll = asyncio.create_task(
                _call(server.port, "GET", f"{base}/commands?after=0&wait=3600&instance=i", ep.token))
            # the poll has reached the server and waits there
            await wait_until_async(lambda: ep.last_contact != seen, 60, "the long poll to reach the server")
            ep.send(Kill("t1"))
            status, body = await asyncio.wait_for(poll, 60)
            assert [c["type"] for c in body["commands"]] == ["kill"] and body["commands"][0]["seq"] == 1
            # not yet confirmed: delivered again; confirmed by after=1: gone
            _, body = await _call(server.port, "GET", f"{base}/commands?after=0&wait=0&instance=i", ep.token)
            assert len(body["commands"]) == 1
            _, body = await _call(server.port, "GET", f"{base}/commands?after=1&wait=0&instance=i", ep.token)
            assert body["commands"] == [] and ep.pending == 0
        finally:
            await server.close()

    asyncio.run(main())


class Committing(Recorder):
    """A handler whose store commits when the test says so (or fails)."""

    def __init__(self) -> None:
        super().__init__()
        self.stored: list[Message] = []
        self.gate = asyncio.Event()
        self.fail = False

    async def committed(self) -> None:
        await self.gate.wait()
        if self.fail:
            raise OSError("the disk is full")
        self.stored = list(self.messages)


def test_messages_are_acknowledged_only_after_the_commit_that_holds_them() -> None:
    async def main() -> None:
        rec = Committing()
        server, ep, base = await _serve(rec)
        try:
            hello = encode(Hello("env-1", server.version, {}, [], "inst-a"), 0)
            assert (await _call(server.port, "POST", f"{base}/hello", ep.token, hello))[0] == 200
            answer = asyncio.ensure_future(_call(server.port, "POST", f"{base}/messages", ep.token,
                                                 {"instance": "inst-a", "messages": [_metric(1), _metric(2)]}))
            await wait_until_async(lambda: len(rec.messages) == 2, 10, "messages handed to the handler")
            await asyncio.sleep(0.2)  # the answer must wait for the commit, however long it takes
            assert not answer.done() and rec.stored == []
            rec.gate.set()
            status, body = await answer
            assert status == 200 and body == {"acked": 2}
            assert [m.last_line for m in rec.stored if isinstance(m, Metrics)] == [1, 2]  # committed before the ack
            # a commit that fails acknowledges nothing: the agent's re-sent batch is applied again
            rec.fail = True
            status, body = await _call(server.port, "POST", f"{base}/messages", ep.token,
                                       {"instance": "inst-a", "messages": [_metric(3)]})
            assert status == 503 and "could not record" in body["error"]
            rec.fail = False
            status, body = await _call(server.port, "POST", f"{base}/hello", ep.token, hello)
            assert status == 200 and body["acked"] == 2
            status, body = await _call(server.port, "POST", f"{base}/messages", ep.token,
                                       {"instance": "inst-a", "messages": [_metric(3)]})
            assert status == 200 and body == {"acked": 3}
            assert [m.last_line for m in rec.stored if isinstance(m, Metrics)] == [1, 2, 3, 3]
        finally:
            await server.close()

    asyncio.run(main())


def test_a_stable_port_is_below_the_ephemeral_range_and_a_plain_one_is_the_kernels() -> None:
    """A cluster service's endpoint must get its port back on resume: outside the range the kernel hands out to
    outgoing connections (and to port 0), no connection of this machine can take it while no manager runs."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])

    async def ports() -> tuple[list[int], int]:
        stable = [AgentServer(stable_port=True) for _ in range(3)]
        plain = AgentServer()
        for s in [*stable, plain]:
            await s.start()
        try:
            return [s.port for s in stable], plain.port
        finally:
            for s in [*stable, plain]:
                await s.close()

    stable, plain = asyncio.run(ports())
    assert all(10000 <= p < low for p in stable), (stable, low)
    assert len(set(stable)) == 3  # each a free port of its own
    assert plain >= low


def test_stable_ports_are_none_of_rays_worker_ports() -> None:
    """Ray gives its workers and drivers random ports in 10002-19999 (and its client server 10001): a killed
    manager's port there may be a worker's when it is resumed (its own Ray driver connects first), and the agents
    cannot reach it any more. Every stable candidate is above that range and below the ephemeral one."""
    from nnix.services.agent_server import STABLE_FROM, _stable_candidates

    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    candidates = [p for _ in range(50) for p in _stable_candidates()]
    assert candidates and STABLE_FROM >= 20000
    assert all(STABLE_FROM <= p < low for p in candidates), sorted(candidates)[:5]
