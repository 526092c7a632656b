"""The agent: runs in an environment, connects back to the manager, runs the trials it is given.

Transport: HTTP/1.1 long polling with the standard library's ``http.client``. Why not a websocket: a
long poll is plain HTTP, so it works unchanged through an SSH reverse port forward, a plain TCP
connection or any HTTP proxy, and it needs nothing on the worker beyond the standard library (the
agent must run from an nnix installed with ``--no-deps``: it imports only the standard library and
nnix's own pure-Python modules). Two keep-alive connections are used: one holds the command poll,
the other posts messages, so a trial's exit never waits behind a poll.

Reliability: every message the agent sends gets a seq (per agent process) and stays in an in-memory
buffer until the manager acknowledges it. When a request fails the agent says ``hello`` again, with
exponential backoff (re-reading its connect file each time, so a restarted manager or a re-established
SSH forward is picked up), learns which messages were applied, and re-sends the rest. The manager
skips seqs it has applied, so a metric reported during a network cut arrives once. Trials run as their
own process groups: they outlive the agent, and a later agent can ``attach`` to them.

An agent whose environment no manager knows any more ends too: once a manager has answered that it does not
know the environment (404: the experiment ended while the agent could not reach its manager, and whatever
listens at its address now is another manager, or one that dropped it) and none that knows it has answered
for ``unknown_after`` seconds since, it kills its trials and exits (a resumed manager registers the
environments it takes over before it answers, so only one that will never know it keeps saying 404).

Exit codes: 0 done (shut down, retired, or the single trial of a non-reuse environment reported),
2 token refused, or the environment unknown to the manager answering for ``unknown_after`` seconds,
3 version or protocol refused, 4 gave up after ``give_up_after`` seconds without contact (its trials keep
running), 1 anything else.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import http.client
import json
import logging
import os
import secrets
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from nnix.agent.commands import TrialCommands
from nnix.agent.protocol import (
    Attach,
    Heartbeat,
    Hello,
    Kill,
    Message,
    ProtocolError,
    Run,
    Shutdown,
    decode,
    encode,
)
from nnix.agent.runner import TrialRunner
from nnix.errors import ServiceError
from nnix.model.runs import Exited, Requeued, RunnerEvent
from nnix.version import __version__

__all__ = ["AgentClient", "ConnectSettings", "host_resources", "load_settings"]

log = logging.getLogger("nnix.agent")

EXIT_OK, EXIT_ERROR, EXIT_TOKEN, EXIT_VERSION, EXIT_GAVE_UP = 0, 1, 2, 3, 4
MAX_BATCH = 500
OUTBOX_PACE = 2 * MAX_BATCH  # messages waiting for the manager beyond which the runner reads no more metrics
# Metrics and exits a manager acknowledged in the last RECENT_S seconds before the connection was lost are
# sent again on reconnect (at most RECENT_MAX of them): a manager killed right after acknowledging them may
# not have written them yet. A manager that did write them skips them (same seq, or the same channel line).
RECENT_S = 10.0
RECENT_MAX = 5000


@dataclass(frozen=True)
class ConnectSettings:
    url: str
    environment_id: str
    token: str


def load_settings(path: Path) -> ConnectSettings:
    """Read a connect file: ``{"url", "environment_id", "token"}`` (written by the service, mode 0600)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return ConnectSettings(str(data["url"]), str(data["environment_id"]), str(data["token"]))


def gpu_inventory() -> Any:
    """The host's GPUs via NVML (``pynvml`` from nvidia-ml-py; without it, or without a driver: none)."""
    from nnix.gpu import NvmlInventory

    return NvmlInventory(cache_seconds=5.0)


def host_resources(inventory: Any = None) -> dict[str, Any]:
    """What this environment offers: CPUs, GPUs with utilisation (via NVML when present), hostname."""
    gpus: list[dict[str, Any]] = []
    try:
        for g in (inventory or gpu_inventory()).snapshot():
            gpus.append({"index": g.index, "util": g.util, "mem_util": g.mem_util, "processes": g.processes,
                         "name": g.name, "memory_total_mb": g.memory_total_mb})
    except Exception as e:  # GPU discovery must never stop the agent
        log.debug("GPU discovery failed: %s", e)
    return {"cpus": os.cpu_count() or 1, "gpus": gpus, "hostname": socket.gethostname()}


class TransportError(Exception):
    """The manager could not be reached (or the answer was lost)."""


class Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class _Http:
    """One keep-alive connection, used from one worker thread at a time."""

    def __init__(self) -> None:
        self._conn: http.client.HTTPConnection | None = None
        self._key: tuple[str, str, int] | None = None

    def request(self, settings: ConnectSettings, method: str, path: str, body: Any, timeout: float) -> Any:
        url = urlsplit(settings.url)
        key = (url.scheme or "http", url.hostname or "127.0.0.1", url.port or (443 if url.scheme == "https" else 80))
        if self._conn is None or self._key != key:
            self.close()
            cls = http.client.HTTPSConnection if key[0] == "https" else http.client.HTTPConnection
            self._conn, self._key = cls(key[1], key[2], timeout=timeout), key
        conn = self._conn
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        data = json.dumps(body, separators=(",", ":")).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {settings.token}", "Content-Type": "application/json"}
        try:
            conn.request(method, url.path.rstrip("/") + path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise TransportError(f"{type(e).__name__}: {e}" if str(e) else type(e).__name__) from e
        try:
            payload = json.loads(raw or b"{}")
        except ValueError as e:
            self.close()
            raise TransportError(f"answer is not JSON (HTTP {resp.status})") from e
        if resp.status != 200:
            message = payload.get("error", "") if isinstance(payload, dict) else ""
            raise Refused(resp.status, str(message))
        return payload

    def abort(self) -> None:
        """Interrupt a request blocked in another thread."""
        conn = self._conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None


class _Reconnect(Exception):
    pass


class AgentClient:
    """The agent's main loop. ``settings`` is called before every hello (it re-reads the connect file)."""

    def __init__(
        self,
        settings: Callable[[], ConnectSettings],
        *,
        single: bool = False,
        version: str = __version__,
        request_timeout: float = 10.0,
        backoff_min: float = 0.1,
        backoff_max: float = 2.0,
        give_up_after: float | None = 24 * 3600.0,
        unknown_after: float | None = 300.0,
        resources: Callable[[], dict[str, Any]] | None = None,
        poll_interval: float = 0.25,
        kill_grace: float = 5.0,
        stream_output: bool = True,
        pid_file: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._single = single
        self._version = version
        self._timeout = request_timeout
        self._backoff = (backoff_min, backoff_max)
        self._give_up = give_up_after
        self._unknown_after = unknown_after
        self._unknown_since: float | None = None  # when a manager first said it does not know this environment
        if resources is None:
            inventory = gpu_inventory()  # one, so that NVML answers are cached between heartbeats

            def resources() -> dict[str, Any]:
                return host_resources(inventory)

        self._resources = resources
        self._pid_file = pid_file
        self._clock = clock
        self._runner = TrialRunner(self._on_event, poll_interval=poll_interval, kill_grace=kill_grace,
                                   stream_output=stream_output, pace=self._outbox_room)
        self._kill_grace = kill_grace
        self._kills: set[asyncio.Task[Any]] = set()
        self._instance = secrets.token_hex(8)
        self._seq = 0
        self._outbox: list[dict[str, Any]] = []
        self._recent: collections.deque[tuple[float, dict[str, Any]]] = collections.deque(maxlen=RECENT_MAX)
        self._unreported: set[str] = set()  # trials whose Exited is not yet acknowledged
        self._commands = TrialCommands(self._runner)
        self._seen = self._commands.seen
        self._cmd_after = 0
        self._heartbeat = 5.0
        self._poll_wait = 20.0
        self._environment_id = ""
        self._wake_send = asyncio.Event()
        self._room = asyncio.Event()  # set when the manager acknowledged messages (see _outbox_room)
        self._wake_connect = asyncio.Event()
        self._done = asyncio.Event()
        self._exit_code = EXIT_OK
        self._kill_on_exit = False
        self._flush_before_exit = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._http: list[_Http] = []

    # --- events from the runner ----------------------------------------------------------------
    def _on_event(self, event: RunnerEvent) -> None:
        if isinstance(event, Requeued):
            return
        if isinstance(event, Exited):
            self._unreported.add(event.trial_id)
        self._enqueue(event)
        self._check_single_done()

    async def _outbox_room(self) -> None:
        """What the runner awaits before it reads more of a trial's metrics: a trial writing faster than the
        manager takes its lines in (or while it cannot be reached) waits in its channel file, not in this
        process's memory."""
        while len(self._outbox) > OUTBOX_PACE:
            self._room.clear()
            await self._room.wait()

    def _enqueue(self, message: Message) -> None:
        self._seq += 1
        self._outbox.append(encode(message, self._seq))
        self._wake_send.set()

    def _acked(self, acked: int) -> None:
        keep = []
        now = time.monotonic()
        while self._recent and self._recent[0][0] < now - RECENT_S:  # the manager is alive: written by now
            self._recent.popleft()
        for env in self._outbox:
            if env["seq"] > acked:
                keep.append(env)
                continue
            if env["type"] == "exited":
                self._unreported.discard(env["body"]["trial_id"])
            if env["type"] in ("metrics", "exited"):
                self._recent.append((now, env))
        self._outbox = keep
        self._room.set()
        self._check_single_done()

    def _send_recent_again(self) -> None:
        """On reconnect: what was acknowledged just before the connection was lost goes out again."""
        if not self._recent:
            return
        again = [env for _, env in self._recent]
        self._recent.clear()
        seqs = {env["seq"] for env in self._outbox}
        self._outbox = sorted([env for env in again if env["seq"] not in seqs] + self._outbox, key=lambda e: e["seq"])

    def _check_single_done(self) -> None:
        if self._single and self._seen and not self._runner.running and not self._outbox:
            self._finish(EXIT_OK, "its trial is over and reported")

    def _finish(self, code: int, why: str, *, kill: bool = False, flush: bool = False) -> None:
        if not self._done.is_set():
            log.info("agent exits: %s", why)
            self._exit_code, self._kill_on_exit, self._flush_before_exit = code, kill, flush
            self._done.set()

    # --- main ----------------------------------------------------------------------------------
    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig, fn in ((signal.SIGTERM, self._on_term), (signal.SIGINT, self._on_term),
                        (signal.SIGUSR1, self._wake_connect.set)):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, fn)
        with contextlib.suppress(OSError, ValueError):
            signal.signal(signal.SIGHUP, signal.SIG_IGN)  # an SSH session going away is no reason to stop
        if self._pid_file is not None:
            self._pid_file.write_text(f"{os.getpid()}\n")
        main = asyncio.create_task(self._connect_loop())
        await self._done.wait()
        if self._kills:  # a kill under way finishes (SIGKILL after the grace period) before the agent goes
            await asyncio.wait(set(self._kills), timeout=self._kill_grace + 1.0)
        if self._flush_before_exit:
            await self._flush(3.0)
        main.cancel()
        for t in list(self._tasks):
            t.cancel()
        for h in self._http:
            h.abort()
        await asyncio.gather(main, *self._tasks, return_exceptions=True)
        await self._runner.close(kill=self._kill_on_exit)
        if self._pid_file is not None:
            with contextlib.suppress(OSError):
                self._pid_file.unlink()
        return self._exit_code

    def _on_term(self) -> None:
        self._finish(EXIT_OK, "terminated by a signal; its trials keep running")

    async def _flush(self, timeout: float) -> None:
        deadline = self._clock() + timeout
        while self._outbox and self._clock() < deadline:
            await asyncio.sleep(0.02)

    async def _connect_loop(self) -> None:
        backoff = self._backoff[0]
        last_contact = self._clock()
        failures = 0
        while not self._done.is_set():
            try:
                settings = self._settings()
                self._environment_id = settings.environment_id
                await self._hello(settings)
            except (OSError, ValueError, KeyError) as e:
                problem = f"cannot read the connect settings: {e}"
            except TransportError as e:
                problem = f"manager unreachable: {e}"
            except Refused as e:
                if self._refused(e):
                    return
                problem = f"refused ({e.status}): {e.message}"
            else:
                backoff, failures = self._backoff[0], 0
                last_contact = self._clock()
                self._unknown_since = None
                problem = await self._session(settings)
                last_contact = self._clock()
                if self._done.is_set():
                    return
            failures += 1
            if failures in (1, 10) or failures % 100 == 0:
                log.warning("%s; retrying (attempt %d)", problem, failures)
            if self._give_up is not None and self._clock() - last_contact > self._give_up:
                self._finish(EXIT_GAVE_UP,
                             f"no contact with the manager for {self._give_up:.0f} s; trials keep running")
                return
            self._wake_connect.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake_connect.wait(), backoff)
            backoff = min(backoff * 2, self._backoff[1])

    def _refused(self, e: Refused) -> bool:
        """Handle a refusal; True when the agent must stop."""
        if e.status == 401:
            self._finish(EXIT_TOKEN, f"the manager refused this agent's token: {e.message}")
        elif e.status == 409:
            self._finish(EXIT_VERSION, f"the manager refused this agent: {e.message}")
        elif e.status == 410:
            self._finish(EXIT_OK, f"environment retired by the manager ({e.message}); stopping its trials", kill=True)
        elif e.status == 404 and self._unknown_after is not None:
            now = self._clock()
            if self._unknown_since is None:
                self._unknown_since = now
            if now - self._unknown_since < self._unknown_after:
                return False  # a manager that does not know us yet: try again
            self._finish(EXIT_TOKEN, f"no manager knows this environment ({e.message}, for "
                         f"{now - self._unknown_since:.0f} s): its experiment is over; stopping its trials", kill=True)
        else:
            return False  # 404 (a manager that does not know us yet), 428, 5xx: try again
        return True

    async def _call(self, http: _Http, settings: ConnectSettings, method: str, path: str, body: Any,
                    timeout: float) -> Any:
        env = quote(settings.environment_id, safe="")
        return await asyncio.to_thread(http.request, settings, method, f"/agent/v1/{env}{path}", body, timeout)

    async def _hello(self, settings: ConnectSettings) -> None:
        res = await asyncio.to_thread(self._resources)
        running = sorted(set(self._runner.running) | self._unreported)
        hello = Hello(settings.environment_id, self._version, res, running, self._instance)
        self._send_recent_again()
        http = _Http()
        try:
            answer = await self._call(http, settings, "POST", "/hello", encode(hello, 0), self._timeout)
        finally:
            http.close()
        self._acked(int(answer.get("acked", 0)))
        self._cmd_after = int(answer.get("commands_after", 0))
        self._heartbeat = float(answer.get("heartbeat", self._heartbeat))
        self._poll_wait = float(answer.get("poll_wait", self._poll_wait))
        log.info("connected to %s as environment %s", settings.url, settings.environment_id)

    async def _session(self, settings: ConnectSettings) -> str:
        """Run the sender and the poller until one fails; returns why."""
        send_http, poll_http = _Http(), _Http()
        self._http = [send_http, poll_http]
        sender = asyncio.create_task(self._sender(send_http, settings))
        poller = asyncio.create_task(self._poller(poll_http, settings))
        done_wait = asyncio.create_task(self._done.wait())
        try:
            finished, _ = await asyncio.wait({sender, poller, done_wait}, return_when=asyncio.FIRST_COMPLETED)
            if self._flush_before_exit and done_wait in finished:
                await self._flush(3.0)
        finally:
            for t in (sender, poller, done_wait):
                t.cancel()
            send_http.abort()
            poll_http.abort()
            results = await asyncio.gather(sender, poller, return_exceptions=True)
            send_http.close()
            poll_http.close()
        for r in results:
            if isinstance(r, Refused):
                if self._refused(r):
                    return str(r)
                return f"refused ({r.status}): {r.message}"
            if isinstance(r, (TransportError, _Reconnect)):
                return f"connection lost: {r}"
        return "session ended"

    async def _sender(self, http: _Http, settings: ConnectSettings) -> None:
        while True:
            if not self._outbox:
                self._wake_send.clear()
                try:
                    await asyncio.wait_for(self._wake_send.wait(), self._heartbeat)
                except TimeoutError:
                    res = await asyncio.to_thread(self._resources)
                    self._enqueue(Heartbeat(res))
            batch = self._outbox[:MAX_BATCH]
            try:
                answer = await self._call(
                    http, settings, "POST", "/messages", {"instance": self._instance, "messages": batch}, self._timeout
                )
            except Refused as e:
                if e.status == 428:
                    raise _Reconnect("the manager asks for a new hello") from e
                raise
            acked = int(answer.get("acked", 0))
            self._acked(acked)
            if acked < batch[-1]["seq"]:
                await asyncio.sleep(0.05)  # should not happen; do not spin

    async def _poller(self, http: _Http, settings: ConnectSettings) -> None:
        while True:
            path = f"/commands?after={self._cmd_after}&wait={self._poll_wait:g}&instance={self._instance}"
            try:
                answer = await self._call(http, settings, "GET", path, None, self._poll_wait + self._timeout)
            except Refused as e:
                if e.status == 428:
                    raise _Reconnect("the manager asks for a new hello") from e
                raise
            for envelope in answer.get("commands", []):
                try:
                    seq, message = decode(envelope)
                except ProtocolError as e:
                    log.error("bad command from the manager, skipped: %s", e)
                    continue
                if seq <= self._cmd_after:
                    continue
                self._cmd_after = seq
                await self._handle(message)

    # --- commands ------------------------------------------------------------------------------
    async def _handle(self, message: Message) -> None:
        if isinstance(message, Run):
            await self._run(message)
        elif isinstance(message, Attach):
            await self._commands.apply(message)
        elif isinstance(message, Kill):
            task = asyncio.ensure_future(self._commands.apply(message))
            self._kills.add(task)
            task.add_done_callback(self._kills.discard)
        elif isinstance(message, Shutdown):
            log.info("shutdown requested%s", f": {message.reason}" if message.reason else "")
            if message.kill_trials:
                self._spawn(self._shutdown_killing())
            else:
                self._finish(EXIT_OK, "shut down by the manager; its trials (if any) keep running")
        else:
            log.warning("unexpected command %s ignored", type(message).__name__)

    async def _shutdown_killing(self) -> None:
        await asyncio.gather(*(self._runner.kill(t) for t in self._runner.running))
        deadline = self._clock() + 2.0
        while self._runner.running and self._clock() < deadline:
            await asyncio.sleep(0.02)
        self._finish(EXIT_OK, "shut down by the manager, trials killed", kill=True, flush=True)

    async def _run(self, run: Run) -> None:
        spec = run.spec
        try:
            started = await self._commands.apply(run)
        except (ServiceError, OSError) as e:
            text = e.message if isinstance(e, ServiceError) else str(e)
            self._on_event(Exited(spec.trial_id, None, None, "", f"cannot start the trial: {text}"))
            return
        if started is not None:
            self._enqueue(replace(started, environment_id=self._environment_id))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _probe() -> dict[str, Any]:
    return {"version": __version__, "python": sys.executable,
            "python_version": ".".join(map(str, sys.version_info[:3])), "resources": host_resources()}


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m nnix.agent", description="The nnix agent (started by a service).")
    p.add_argument("--connect-file", type=Path, help="JSON {url, environment_id, token}; re-read on reconnect")
    p.add_argument("--url", default=os.environ.get("NNIX_AGENT_URL"), help="manager URL (or $NNIX_AGENT_URL)")
    p.add_argument("--environment", default=os.environ.get("NNIX_AGENT_ENVIRONMENT"),
                   help="environment id (or $NNIX_AGENT_ENVIRONMENT)")
    p.add_argument("--token-env", default="NNIX_AGENT_TOKEN",
                   help="name of the variable holding the token (never pass a token as an argument: `ps` shows it)")
    p.add_argument("--single", action="store_true", help="non-reuse: exit once its one trial is reported")
    p.add_argument("--request-timeout", type=float, default=10.0)
    p.add_argument("--backoff-max", type=float, default=2.0)
    p.add_argument("--give-up-after", type=float, default=24 * 3600.0)
    p.add_argument("--unknown-after", type=float, default=300.0,
                   help="exit (killing its trials) once managers have answered for this long that they do not know "
                        "its environment (0: never)")
    p.add_argument("--poll-interval", type=float, default=0.25)
    p.add_argument("--kill-grace", type=float, default=5.0)
    p.add_argument("--no-output-stream", action="store_true",
                   help="do not stream trials' stdout/stderr to the manager (it reads the files itself)")
    p.add_argument("--probe", action="store_true", help="print version and resources as JSON, then exit")
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)
    if args.probe:
        print(json.dumps(_probe()))
        return EXIT_OK
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    connect_file: Path | None = args.connect_file
    if connect_file is not None:
        path = connect_file

        def settings() -> ConnectSettings:
            return load_settings(path)

        pid_file: Path | None = path.with_name("agent.pid")
    else:
        token = os.environ.get(args.token_env, "")
        if not (args.url and args.environment and token):
            p.error(f"give --connect-file, or --url, --environment and ${args.token_env}")
        fixed = ConnectSettings(args.url, args.environment, token)

        def settings() -> ConnectSettings:
            return fixed

        pid_file = None
    client = AgentClient(
        settings,
        single=args.single,
        request_timeout=args.request_timeout,
        backoff_max=args.backoff_max,
        give_up_after=args.give_up_after or None,
        unknown_after=args.unknown_after or None,
        poll_interval=args.poll_interval,
        kill_grace=args.kill_grace,
        stream_output=not args.no_output_stream,
        pid_file=pid_file,
    )
    try:
        return asyncio.run(client.run())
    except Exception:
        log.exception("agent crashed")
        return EXIT_ERROR
