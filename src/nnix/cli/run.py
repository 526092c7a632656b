"""Running a manager: in this process (foreground, with live progress) or as a daemon."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import importlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from nnix.cli.control import rest_get
from nnix.core.manager import ExperimentManager
from nnix.core.state import ExperimentState
from nnix.core.status import ExperimentStatus, TrialStatus
from nnix.errors import ManagerUnreachableError, NnixError
from nnix.experiment import build_manager
from nnix.home import Registry, read_state


def bind(port: int, host: str = "127.0.0.1") -> socket.socket:
    # proto IPPROTO_TCP, so that asyncio sets TCP_NODELAY on accepted connections: without it every
    # keep-alive response waits ~40 ms (Nagle + delayed ACK) between its headers and its body
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise NnixError(f"port {port} is not idle", "choose another one with --port, or --port 0 for any") from e
        raise NnixError(f"cannot listen on {host}:{port}: {e}") from e
    sock.listen(128)
    return sock


def _setup_logging(exp_dir: Path, level: str) -> None:
    (exp_dir / "log").mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(exp_dir / "log" / "manager.log")
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("nnix")
    root.handlers[:] = [handler]
    root.setLevel({"trace": "DEBUG", "fatal": "CRITICAL"}.get(level, level.upper()))
    root.propagate = False


def summary_line(state: ExperimentState, now: float) -> str:
    done = state.count(TrialStatus.SUCCEEDED)
    failed = state.count(TrialStatus.FAILED)
    running = state.count(TrialStatus.RUNNING)
    waiting = state.count(TrialStatus.WAITING)
    stopped = state.count(TrialStatus.EARLY_STOPPED, TrialStatus.USER_CANCELED, TrialStatus.SYS_CANCELED)
    best = state.best_trial()
    best_txt = f"{best.final_value:.6g} (trial {best.trial_id})" if best and best.final_value is not None else "-"
    max_n = state.limits.get("max_trial_number")
    total = f"{len(state.trials)}/{max_n}" if max_n else str(len(state.trials))
    elapsed = int(state.elapsed(now))
    return (
        f"{state.status.value:<13} trials {total}: {done} succeeded, {running} running, {waiting} waiting, "
        f"{failed} failed, {stopped} stopped | best {best_txt} | elapsed {elapsed // 60}m{elapsed % 60:02d}s"
    )


class Progress:
    """Live progress in the terminal; plain throttled lines when stdout is not a terminal."""

    def __init__(self, manager: ExperimentManager, live: bool) -> None:
        self.manager = manager
        self.enabled = live
        self._last = ""
        self._last_t = 0.0
        self._live: Any = None

    def start(self) -> None:
        if not self.enabled:
            return
        if sys.stdout.isatty():
            from rich.live import Live

            self._live = Live(self._render(), refresh_per_second=4, transient=False)
            self._live.start()

    def _render(self) -> Any:
        from rich.text import Text

        return Text(summary_line(self.manager.state, time.time()))

    def tick(self) -> None:
        if not self.enabled:
            return
        if self._live is not None:
            self._live.update(self._render())
            return
        line = summary_line(self.manager.state, time.time())
        key = line.rsplit("|", 1)[0]
        now = time.monotonic()
        if key != self._last and now - self._last_t >= 1.0:
            print(line, flush=True)
            self._last, self._last_t = key, now

    def stop(self) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.stop()
        elif self.enabled:
            print(summary_line(self.manager.state, time.time()), flush=True)


async def _serve(
    manager: ExperimentManager, sock: socket.socket, read_only: bool, token: str | None = None, host: str = "127.0.0.1",
) -> Any:
    # importing the web stack takes ~0.1 s: do it in a thread so the first trials start meanwhile
    await asyncio.to_thread(importlib.import_module, "uvicorn")
    import uvicorn

    from nnix.api.app import create_app

    class _Server(uvicorn.Server):
        """The manager owns SIGTERM/SIGINT (they mean: stop the experiment), not uvicorn."""

        def capture_signals(self) -> Any:
            return contextlib.nullcontext()

    app = create_app(manager, read_only=read_only, token=token, bind_host=host)
    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    server = _Server(config)
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    return server, task


def run_manager(
    exp_id: str,
    action: str,
    *,
    port: int = 8080,
    live: bool = True,
    exit_when_done: bool = True,
    host: str = "127.0.0.1",
    **service_options: Any,
) -> ExperimentStatus:
    """Run an experiment's manager in this process until it finishes or is stopped."""
    entry = Registry().get(exp_id)
    exp_dir = Path(entry.dir)
    from nnix.api.auth import token_for_bind

    token = token_for_bind(exp_dir, host)  # a non-loopback bind requires the experiment's token
    sock = bind(port, host)
    actual_port = sock.getsockname()[1]
    manager = build_manager(exp_dir, exit_when_done=exit_when_done, **service_options)
    _setup_logging(exp_dir, str(manager.config.get("log_level", "info")))
    Registry().update(entry.id, pid=os.getpid(), port=actual_port)
    progress = Progress(manager, live)

    async def main() -> ExperimentStatus:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, manager.request_stop)
        manager.subscribe(progress.tick)
        progress.start()
        if action == "view":
            run = asyncio.ensure_future(manager.view(actual_port, host))
        else:
            run = asyncio.ensure_future(manager.run(action, actual_port, host))
        server, serving = await _serve(manager, sock, action == "view", token, host)
        try:
            while not run.done():
                await asyncio.wait({run}, timeout=0.5)
                progress.tick()
            return run.result()
        finally:
            server.should_exit = True
            serving.cancel()  # the manager is done: no graceful HTTP shutdown to wait for
            with contextlib.suppress(BaseException):
                await serving
            progress.stop()
            logging.getLogger("nnix.manager").info("REST server closed")

    try:
        return asyncio.run(main())
    finally:
        manager.store.close()
        sock.close()
        logging.getLogger("nnix.manager").info("manager exits")


def spawn_daemon(
    exp_id: str, action: str, port: int, host: str = "127.0.0.1", timeout: float = 20.0, fork: bool = False
) -> int:
    """Start a detached manager process and wait until it answers. Returns its pid.

    ``fork=True`` (the CLI) forks this process, which has already imported and validated
    everything, instead of starting a fresh interpreter: the experiment starts ~0.3 s sooner.
    Only safe in a single-threaded process, so the Python API does not use it."""
    entry = Registry().get(exp_id)
    log_dir = Path(entry.dir) / "log"
    log_dir.mkdir(parents=True, exist_ok=True)
    bind(port, host).close()  # fail fast, here, if the port is taken
    out = open(log_dir / "nnictl_stdout.log", "ab")
    err = open(log_dir / "nnictl_stderr.log", "ab")
    header = f"{'-' * 40}\nExperiment {exp_id} {action}: {time.ctime()}\n{'-' * 40}\n".encode()
    out.write(header)
    err.write(header)
    out.flush()
    err.flush()
    if fork:
        return _await_daemon(_ForkedDaemon(exp_id, action, port, host, out, err), exp_id, log_dir, host, timeout)
    proc = subprocess.Popen(
        [sys.executable, "-m", "nnix.cli.daemon", exp_id, action, str(port), host],
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=err,
        start_new_session=True,
    )
    out.close()
    err.close()
    return _await_daemon(proc, exp_id, log_dir, host, timeout)


def _await_daemon(proc: Any, exp_id: str, log_dir: Path, host: str, timeout: float) -> int:
    entry = Registry().get(exp_id)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = (log_dir / "nnictl_stderr.log").read_text(errors="replace").strip().splitlines()[-5:]
            raise NnixError(f"the experiment manager exited at start (code {proc.returncode})", " | ".join(tail))
        state = read_state(Path(entry.dir), summary=True)
        if state.manager_pid == proc.pid and state.manager_port:
            from nnix.api.auth import connect_host, read_token

            try:
                rest_get(state.manager_port, "/check-status", host=connect_host(host), timeout=0.5,
                         token=read_token(Path(entry.dir)))
                return int(proc.pid)
            except ManagerUnreachableError:
                pass
        time.sleep(0.05)
    raise NnixError(f"the experiment manager did not answer within {timeout:.0f} s", f"see {log_dir}")


class _ForkedDaemon:
    """A manager daemon forked from this process; quacks like ``subprocess.Popen`` for waiting."""

    def __init__(self, exp_id: str, action: str, port: int, host: str, out: Any, err: Any) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the daemon
            code = 1
            try:
                os.setsid()
                devnull = os.open(os.devnull, os.O_RDONLY)
                os.dup2(devnull, 0)
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                from nnix.cli.daemon import main as daemon_main

                code = daemon_main([exp_id, action, str(port), host])
            finally:
                logging.shutdown()
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        self.pid = pid
        self.returncode: int | None = None
        out.close()
        err.close()

    def poll(self) -> int | None:
        if self.returncode is None:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode
