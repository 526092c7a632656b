"""The manager's HTTP endpoint for agents (the agent protocol of :mod:`nnix.agent.protocol` on the wire).

Routes (JSON bodies, ``Authorization: Bearer <token of the environment>`` on every request):

* ``POST /agent/v1/<env>/hello`` — a ``hello`` envelope. Opens a session; answers
  ``{"acked": n, "commands_after": m, "heartbeat": s, "poll_wait": w}``: the highest message seq of this
  agent instance already applied (the agent drops those from its buffer and re-sends the rest) and the
  command seq it has confirmed (a new agent instance does not get the commands handed to its
  predecessor). A version mismatch is answered 409 with the reason, which the
  environment's handler also receives (``on_refused``): the refusal is reported on both sides.
* ``POST /agent/v1/<env>/messages`` — ``{"instance": id, "messages": [envelope, ...]}``, in seq order.
  Messages with a seq already applied for this instance are skipped (a batch re-sent after a lost answer
  is applied once). Answers ``{"acked": highest seq applied}`` once what they reported is recorded (the
  handler's optional ``async committed()``, :class:`Commits`: the manager's group commit), so an acknowledged
  metric survives a kill -9 of the manager; 503 when it cannot be recorded (nothing of the batch is acknowledged).
* ``GET /agent/v1/<env>/commands?after=N&wait=S&instance=id`` — long poll: the commands with seq > N,
  at once if there are any, else as soon as one is queued or after ``S`` seconds (capped). ``after``
  confirms the commands up to N; they are then forgotten.

Errors: 401 wrong token, 404 unknown environment, 409 incompatible version, 410 environment retired
(the agent stops its trials and exits), 428 no session for this instance (the agent says hello again),
400 malformed request. Every authenticated request counts as contact (see :attr:`Endpoint.last_contact`).

Why a small asyncio HTTP/1.1 server and not starlette+uvicorn (both are dependencies of nnix): three
routes with JSON bodies and long polls need about 150 lines; uvicorn's ``Server`` installs signal
handlers and lifespan machinery into the manager's loop, and costs more per request. Bound to
127.0.0.1 by default: SSH hosts reach it through a reverse port forward of their SSH connection, so
the manager listens on no public address. Tokens are required even on loopback (other users of a
worker can reach the forwarded port on that worker).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import random
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import parse_qs, unquote, urlsplit

from nnix.agent.protocol import Hello, Message, ProtocolError, decode, encode, versions_compatible
from nnix.errors import ServiceError
from nnix.version import __version__

__all__ = ["PREFIX", "AgentServer", "Commits", "Endpoint", "EnvironmentHandler"]

PREFIX = "/agent/v1/"
MAX_BODY = 32 * 1024 * 1024
IDLE_TIMEOUT = 120.0
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
            409: "Conflict", 410: "Gone", 413: "Payload Too Large", 428: "Precondition Required",
            500: "Internal Server Error", 503: "Service Unavailable"}

log = logging.getLogger("nnix.services.agents")


class EnvironmentHandler(Protocol):
    """What a service implements to hear from the agents of its environments."""

    def on_hello(self, environment_id: str, hello: Hello) -> None: ...

    def on_message(self, environment_id: str, message: Message) -> None: ...

    def on_refused(self, environment_id: str, reason: str) -> None: ...


@runtime_checkable
class Commits(Protocol):
    """The optional ability of an :class:`EnvironmentHandler` to say when what it was handed is recorded:
    ``committed`` returns once it is (the server acknowledges messages only then)."""

    async def committed(self) -> None: ...


@dataclass
class Endpoint:
    """One environment as the server sees it. A service keeps it to send commands and check liveness."""

    environment_id: str
    token: str
    handler: EnvironmentHandler
    retired: str | None = None
    last_contact: float | None = None  # clock() of the last authenticated request; None: never
    hello: Hello | None = None
    instance: str = ""
    inbound_seq: int = 0  # highest message seq applied for ``instance``
    commands: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    next_command: int = 1
    acked_command: int = 0
    delivered_command: int = 0  # highest command seq handed to the current instance
    _wake: asyncio.Event = field(default_factory=asyncio.Event)

    def send(self, message: Message) -> int:
        """Queue a command for the agent; returns its seq. Delivered on the agent's next poll."""
        seq = self.next_command
        self.next_command += 1
        self.commands.append((seq, encode(message, seq)))
        self._wake.set()
        return seq

    @property
    def pending(self) -> int:
        """Commands queued and not yet confirmed by the agent."""
        return len(self.commands)


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


STABLE_FROM = 20000
"""Stable ports start here: Ray gives each of its workers and drivers a random port in 10002-19999 (its
default ``--min/max-worker-port``; its client server is on 10001), so a port below this could be a worker's
while a killed manager is away (the resumed manager's own Ray driver takes one before it listens again)."""


def _stable_candidates(tries: int = 32) -> list[int]:
    """Ports to try for :attr:`AgentServer.stable_port`: random ones below the kernel's ephemeral range (Linux:
    ``ip_local_port_range``, 32768-60999 by default), from :data:`STABLE_FROM` up (from 10000 where that range
    starts below 21000); none where it leaves no room."""
    low = 32768
    with contextlib.suppress(OSError, ValueError, IndexError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    start = STABLE_FROM if low > STABLE_FROM + 1000 else 10000
    if low <= start + 1000:
        return []
    rng = random.Random()
    return [rng.randrange(start, low) for _ in range(tries)]


@dataclass(eq=False, repr=False, kw_only=True)
class AgentServer:
    host: str = "127.0.0.1"
    port: int = 0  # 0: a free port, chosen by start() (this is then the port listened on)
    version: str = __version__
    heartbeat: float = 5.0
    poll_wait: float = 20.0
    clock: Callable[[], float] = time.monotonic
    stable_port: bool = False
    """With ``port`` 0: a free port outside the kernel's ephemeral range, so that while no manager listens (it
    crashed, it is being resumed) no outgoing connection of this machine can take it before the resumed
    manager listens on it again (cluster environments reconnect to that same port)."""
    _server: asyncio.Server | None = field(default=None, init=False)
    _envs: dict[str, Endpoint] = field(default_factory=dict, init=False)
    _writers: set[asyncio.StreamWriter] = field(default_factory=set, init=False)
    _closing: bool = field(default=False, init=False)

    # --- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        if self.port == 0 and self.stable_port:
            for candidate in _stable_candidates():
                with contextlib.suppress(OSError):
                    self._server = await asyncio.start_server(self._serve, self.host, candidate, limit=1 << 20)
                    break
        try:
            if self._server is None:
                self._server = await asyncio.start_server(self._serve, self.host, self.port, limit=1 << 20)
        except OSError as e:
            raise ServiceError(
                f"cannot open the agent endpoint on {self.host}:{self.port}: {e}", "pick another port"
            ) from e
        self.port = self._server.sockets[0].getsockname()[1]
        log.debug("agent endpoint on %s", self.url)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def close(self) -> None:
        self._closing = True
        for ep in self._envs.values():
            ep._wake.set()
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.close()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None

    # --- environments --------------------------------------------------------------------------
    def register(self, environment_id: str, handler: EnvironmentHandler, token: str | None = None) -> Endpoint:
        """Accept agents of ``environment_id`` authenticated with ``token`` (generated when None)."""
        ep = Endpoint(environment_id, token or secrets.token_urlsafe(32), handler)
        old = self._envs.get(environment_id)
        if old is not None:  # re-registered (new token): keep queued commands and the session
            ep.commands, ep.next_command, ep.acked_command = old.commands, old.next_command, old.acked_command
            ep.delivered_command = old.delivered_command
            ep.instance, ep.inbound_seq, ep.hello, ep.last_contact = old.instance, old.inbound_seq, old.hello, None
        self._envs[environment_id] = ep
        return ep

    def endpoint(self, environment_id: str) -> Endpoint | None:
        return self._envs.get(environment_id)

    def retire(self, environment_id: str, reason: str) -> None:
        """From now on the environment's agent is answered 410 (it stops its trials and exits)."""
        ep = self._envs.get(environment_id)
        if ep is not None:
            ep.retired = reason
            ep._wake.set()

    def forget(self, environment_id: str) -> None:
        ep = self._envs.pop(environment_id, None)
        if ep is not None:
            ep._wake.set()

    # --- HTTP ----------------------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while not self._closing:
                try:
                    line = await asyncio.wait_for(reader.readline(), IDLE_TIMEOUT)
                except TimeoutError:
                    break
                if not line:
                    break
                parts = line.decode("latin-1").split()
                if len(parts) != 3:
                    await self._respond(writer, 400, {"error": "bad request line"}, close=True)
                    break
                method, target, _ = parts
                headers: dict[str, str] = {}
                while True:
                    h = await reader.readline()
                    if h in (b"\r\n", b"\n", b""):
                        break
                    if len(headers) >= 64:
                        raise ValueError("too many headers")
                    name, _, value = h.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                try:
                    length = int(headers.get("content-length", "0"))
                except ValueError:
                    length = -1
                if length < 0 or length > MAX_BODY:
                    await self._respond(writer, 413 if length > 0 else 400, {"error": "bad body length"}, close=True)
                    break
                body = await reader.readexactly(length) if length else b""
                try:
                    status, payload = 200, await self._dispatch(method, target, headers, body)
                except _HttpError as e:
                    status, payload = e.status, {"error": e.message}
                except Exception as e:  # a bug must not take the endpoint down
                    log.exception("agent endpoint: %s %s failed", method, target)
                    status, payload = 500, {"error": f"{type(e).__name__}: {e}"}
                close = headers.get("connection", "").lower() == "close"
                await self._respond(writer, status, payload, close=close)
                if close:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _respond(self, writer: asyncio.StreamWriter, status: int, payload: Any, close: bool) -> None:
        data = json.dumps(payload, separators=(",", ":")).encode()
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n" + ("Connection: close\r\n" if close else "") + "\r\n"
        )
        writer.write(head.encode("latin-1") + data)
        with contextlib.suppress(ConnectionError):
            await writer.drain()

    async def _dispatch(self, method: str, target: str, headers: dict[str, str], body: bytes) -> Any:
        url = urlsplit(target)
        if not url.path.startswith(PREFIX):
            raise _HttpError(404, f"no such route {url.path}")
        env_id, _, action = unquote(url.path[len(PREFIX):]).rpartition("/")
        ep = self._envs.get(env_id)
        if ep is None:
            raise _HttpError(404, f"unknown environment {env_id!r}")
        auth = headers.get("authorization", "")
        if not hmac.compare_digest(auth.encode(), f"Bearer {ep.token}".encode()):
            log.warning("agent endpoint: wrong or missing token for environment %s", env_id)
            raise _HttpError(401, f"wrong or missing token for environment {env_id!r}")
        if ep.retired is not None:
            raise _HttpError(410, ep.retired)
        ep.last_contact = self.clock()
        query = parse_qs(url.query)
        if action == "hello" and method == "POST":
            return self._hello(ep, _json(body))
        if action == "messages" and method == "POST":
            return await self._messages(ep, _json(body))
        if action == "commands" and method == "GET":
            return await self._commands(ep, query)
        raise _HttpError(405, f"no route {method} {action}")

    def _hello(self, ep: Endpoint, envelope: Any) -> Any:
        try:
            _, hello = decode(envelope)
        except ProtocolError as e:
            reason = f"agent of environment {ep.environment_id} speaks another protocol: {e}"
            ep.handler.on_refused(ep.environment_id, reason)
            raise _HttpError(409, reason) from e
        if not isinstance(hello, Hello):
            raise _HttpError(400, "expected a hello message")
        if not versions_compatible(self.version, hello.version):
            reason = (
                f"agent of environment {ep.environment_id} runs nnix {hello.version}, the manager runs nnix "
                f"{self.version}: they must agree on major.minor; install nnix {self.version} on the worker"
            )
            log.error("%s", reason)
            ep.handler.on_refused(ep.environment_id, reason)
            raise _HttpError(409, reason)
        if hello.instance != ep.instance:
            if ep.instance:  # a new agent process: what its predecessor was handed is not for it
                ep.acked_command = max(ep.acked_command, ep.delivered_command)
                ep.commands = [(s, c) for s, c in ep.commands if s > ep.acked_command]
            ep.instance, ep.inbound_seq = hello.instance, 0
        ep.hello = hello
        ep.handler.on_hello(ep.environment_id, hello)
        return {
            "acked": ep.inbound_seq,
            "commands_after": ep.acked_command,
            "heartbeat": self.heartbeat,
            "poll_wait": self.poll_wait,
        }

    def _session(self, ep: Endpoint, instance: Any) -> None:
        if not ep.instance or instance != ep.instance:
            raise _HttpError(428, "no session for this agent instance: say hello first")

    async def _messages(self, ep: Endpoint, body: Any) -> Any:
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            raise _HttpError(400, "expected {instance, messages: [...]}")
        self._session(ep, body.get("instance"))
        before = ep.inbound_seq
        for envelope in body["messages"]:
            seq = envelope.get("seq") if isinstance(envelope, dict) else None
            if isinstance(seq, int) and seq <= ep.inbound_seq:
                continue  # re-sent after a lost answer: applied already
            try:
                seq, message = decode(envelope)
            except ProtocolError as e:
                log.warning("environment %s sent a bad message, skipped: %s", ep.environment_id, e)
                if isinstance(seq, int):
                    ep.inbound_seq = seq
                continue
            ep.inbound_seq = seq
            try:
                ep.handler.on_message(ep.environment_id, message)
            except Exception:
                log.exception("handling %s from environment %s failed", type(message).__name__, ep.environment_id)
        # acknowledged only once recorded: the handler's ``committed`` (when it has one) returns when what these
        # messages reported is in the store, so an acknowledged metric survives a kill -9 of the manager
        if isinstance(ep.handler, Commits) and ep.inbound_seq > before:
            try:
                await ep.handler.committed()
            except Exception as e:
                ep.inbound_seq = min(ep.inbound_seq, before)  # not acknowledged: applied again when re-sent
                raise _HttpError(503, f"the manager could not record these messages: {e}") from e
        return {"acked": ep.inbound_seq}

    async def _commands(self, ep: Endpoint, query: dict[str, list[str]]) -> Any:
        self._session(ep, (query.get("instance") or [""])[0])
        try:
            after = int((query.get("after") or ["0"])[0])
            wait = min(float((query.get("wait") or ["0"])[0]), self.poll_wait)
        except ValueError as e:
            raise _HttpError(400, f"bad query: {e}") from e
        if after > ep.acked_command:
            ep.acked_command = after
            ep.commands = [(s, c) for s, c in ep.commands if s > after]
        deadline = self.clock() + max(0.0, wait)
        while True:
            ready = [c for s, c in ep.commands if s > after]
            if ready or self._closing or ep.retired is not None:
                break
            left = deadline - self.clock()
            if left <= 0:
                break
            ep._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ep._wake.wait(), left)
        if ep.retired is not None:
            raise _HttpError(410, ep.retired)
        if ready:
            ep.delivered_command = max(ep.delivered_command, max(s for s, _ in ep.commands if s > after))
        return {"commands": ready}


def _json(body: bytes) -> Any:
    try:
        return json.loads(body or b"null")
    except ValueError as e:
        raise _HttpError(400, f"body is not JSON: {e}") from e
