"""Hosting a manager: running it in this process (foreground, with live progress; the REST server beside it)
or as a detached daemon process (:mod:`nnix.host.daemon`) that :func:`spawn_daemon` starts and waits for."""

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

from nnix.core.manager import ExperimentManager
from nnix.core.manager_error import prepare_manager_error, read_manager_error, write_manager_error
from nnix.errors import ManagerUnreachableError, NnixError, StoreFullError
from nnix.home import (
    Entry,
    ManagerLock,
    Registry,
    busy_error,
    port_holder,
    read_lock_holder,
    read_state,
    tighten_permissions,
    ui_url,
)
from nnix.host.build import build_manager
from nnix.host.collector import release as release_collector
from nnix.host.interrupts import sigint_held
from nnix.host.progress import Progress, RunOutcome
from nnix.model.status import ExperimentStatus, TrialStatus


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
            holder = port_holder(port)
            raise NnixError(
                f"port {port} is not idle" + (f": it is held by {holder}" if holder else ""),
                "choose another one with --port, or --port 0 for any free port",
            ) from e
        raise NnixError(f"cannot listen on {host}:{port}: {e}") from e
    sock.listen(128)
    return sock


def _setup_logging(exp_dir: Path, level: str) -> None:
    from nnix.host.logs import setup_manager_logging

    setup_manager_logging(exp_dir, level)


FIRST_TRIAL_WAIT = 2.0  # seconds a foreground run waits for its first trial before it serves REST and the web UI


async def _first_trial_started(manager: ExperimentManager, run: asyncio.Future[Any], timeout: float) -> None:
    """Return when a trial has started (or the run ended, or ``timeout`` passed): the web stack's import then
    competes with nothing on the way to the first trial (the GIL is shared with the thread that imports it)."""
    started = asyncio.Event()

    def check() -> None:  # stays subscribed: O(1) once set
        st = manager.state  # (a trial not waiting: an ended one, or a live one that is not waiting; no trial built)
        if not started.is_set() and (len(st.trials) > len(st.live)
                                     or any(t.status is not TrialStatus.WAITING for t in st.live.values())):
            started.set()

    manager.subscribe(check)
    check()
    waiter = asyncio.ensure_future(started.wait())
    try:
        await asyncio.wait({waiter, run}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()


async def _serve(
    manager: ExperimentManager, sock: socket.socket, read_only: bool, token: str | None = None, host: str = "127.0.0.1",
) -> Any:
    # importing the web stack takes ~0.1 s: do it in a thread so that the event loop keeps running trials
    await asyncio.to_thread(importlib.import_module, "uvicorn")
    await asyncio.to_thread(importlib.import_module, "nnix.api.app")
    import uvicorn

    from nnix.api.app import create_app

    class _Server(uvicorn.Server):
        """The manager owns SIGTERM/SIGINT (they mean: stop the experiment), not uvicorn."""

        def capture_signals(self) -> Any:
            return contextlib.nullcontext()

    app = create_app(manager, read_only=read_only, token=token, bind_host=host)
    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    server = _Server(config)
    server.nnix_app = app  # type: ignore[attr-defined]
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
) -> RunOutcome:
    """Run an experiment's manager in this process until it finishes or is stopped. ``live``: the
    foreground output (first line, progress, failure reasons, summary) on stdout."""
    entry = Registry().get(exp_id)
    exp_dir = Path(entry.dir)
    # one manager per experiment: taken before anything is written, held until this process ends
    lock = ManagerLock.acquire(exp_dir, entry.id, action)
    try:
        return _run_locked(entry, exp_dir, lock, action, port, live, exit_when_done, host, service_options)
    finally:
        lock.release()


def _run_locked(
    entry: Entry, exp_dir: Path, lock: ManagerLock, action: str, port: int, live: bool, exit_when_done: bool,
    host: str, service_options: dict[str, Any],
) -> RunOutcome:
    from nnix.api.auth import TOKEN_FILE, token_for_bind

    loosened = tighten_permissions(exp_dir)  # experiments made before nnix set 0700/0600
    prepare_manager_error(exp_dir)  # where a full disk's reason can still be written
    token = token_for_bind(exp_dir, host)  # a non-loopback bind requires the experiment's token
    sock = bind(port, host)
    actual_port = sock.getsockname()[1]
    lock.record(port=actual_port, host=host)
    try:
        manager = build_manager(exp_dir, exit_when_done=exit_when_done, **service_options)
    except BaseException:
        sock.close()
        raise
    _setup_logging(exp_dir, manager.settings.log_level)
    for change in loosened:
        logging.getLogger("nnix.manager").warning("permissions tightened (owner only): %s", change)
    Registry().update(entry.id, pid=os.getpid(), port=actual_port)
    notes = (f"Listening on {host}: every REST call needs the experiment's token (the link above carries it; "
             f"the nnix CLI reads it from {exp_dir / TOKEN_FILE}).",) if token else ()
    progress = Progress(manager, live, ui_url(host, actual_port, token), notes)

    def on_signal(signum: int) -> None:
        progress.on_signal(signum)
        manager.request_stop()

    async def main() -> ExperimentStatus:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig)
        manager.subscribe(progress.tick)
        progress.start()
        # a resume serves REST first: the tuner's history (100k trials: seconds) is read once the server is up
        up = loop.create_future() if action == "resume" else None
        manager.history_after = up
        if action == "view":
            run = asyncio.ensure_future(manager.view(actual_port, host))
        else:
            run = asyncio.ensure_future(manager.run(action, actual_port, host))
        if live and up is None and action != "view":  # in the foreground, the first trial starts before the web stack
            await _first_trial_started(manager, run, FIRST_TRIAL_WAIT)
        release_collector()  # (paused by the CLI over its start)
        try:
            server, serving = await _serve(manager, sock, action == "view", token, host)
            while up is not None and not server.started and not serving.done() and not run.done():
                await asyncio.sleep(0.005)  # (uvicorn says so by a flag only)
        finally:
            if up is not None and not up.done():
                up.set_result(None)
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
            with contextlib.suppress(Exception):  # TensorBoard processes started from the web UI or CLI
                await server.nnix_app.close()
            progress.stop()
            logging.getLogger("nnix.manager").info("REST server closed")

    try:
        asyncio.run(main())
        with sigint_held():  # the loop's SIGINT handler is gone: a Ctrl-C now waits for the summary
            outcome = RunOutcome(manager.state, progress.stop_signal)
            progress.summary(outcome)
        return outcome
    except StoreFullError as e:
        if manager.failure is None:  # not halted by the manager itself: keep the reason where readers look
            write_manager_error(exp_dir, e.message, e.hint)
        raise
    finally:
        with sigint_held():  # the store is closed whole
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
    out = open(log_dir / "nnictl_stdout.log", "ab", buffering=0)
    err = open(log_dir / "nnictl_stderr.log", "ab", buffering=0)
    header = f"{'-' * 40}\nExperiment {exp_id} {action}: {time.ctime()}\n{'-' * 40}\n".encode()
    with contextlib.suppress(OSError):  # a full disk: the manager says so in manager.error
        out.write(header)
        err.write(header)
        out.flush()
        err.flush()
    proc: subprocess.Popen[bytes] | _ForkedDaemon | None = None
    try:
        with sigint_held():  # a Ctrl-C from here on finds the daemon's pid known, to end it
            if fork:
                proc = _ForkedDaemon(exp_id, action, port, host, out, err)
            else:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "nnix.host.daemon", exp_id, action, str(port), host],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                )
        release_collector()  # (the launcher now waits for its daemon, which resumes its own where it serves)
        return _await_daemon(proc, exp_id, log_dir, host, timeout)
    except BaseException:  # Ctrl-C, no answer, an early exit: no manager goes on without its launcher
        if proc is not None:
            with sigint_held():
                end_daemon(proc)
        raise
    finally:
        out.close()
        err.close()


DAEMON_STOP_GRACE = 30.0  # seconds a given-up daemon gets to stop its experiment before SIGKILL


def end_daemon(proc: subprocess.Popen[bytes] | _ForkedDaemon, grace: float = DAEMON_STOP_GRACE) -> None:
    """End a daemon whose start was given up, and reap it. SIGTERM: a manager already running stops its
    experiment as ``nnix stop`` does (trials canceled, STOPPED recorded); one still starting exits at once.
    SIGKILL if it has not ended within ``grace`` seconds."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        while proc.poll() is None:
            time.sleep(0.02)


def _await_daemon(proc: Any, exp_id: str, log_dir: Path, host: str, timeout: float) -> int:
    entry = Registry().get(exp_id)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            holder = read_lock_holder(Path(entry.dir))
            if holder is not None and holder.pid != proc.pid:  # it lost the experiment to another manager
                raise busy_error(exp_id, holder)
            reason = read_manager_error(Path(entry.dir))
            if reason is not None and reason.get("pid") == proc.pid:
                raise NnixError(f"the experiment manager exited at start: {reason['message']}",
                                reason.get("hint") or None)
            tail = (log_dir / "nnictl_stderr.log").read_text(errors="replace").strip().splitlines()[-5:]
            raise NnixError(f"the experiment manager exited at start (code {proc.returncode})", " | ".join(tail))
        state = read_state(Path(entry.dir), summary=True)
        if state.manager_pid == proc.pid and state.manager_port:
            from nnix.api.auth import connect_host, read_token
            from nnix.client import rest_get

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
                with contextlib.suppress(ValueError):  # the parent held Ctrl-C over the fork
                    signal.signal(signal.SIGINT, signal.default_int_handler)
                devnull = os.open(os.devnull, os.O_RDONLY)
                os.dup2(devnull, 0)
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                from nnix.host.daemon import main as daemon_main

                code = daemon_main([exp_id, action, str(port), host])
            finally:
                with contextlib.suppress(BaseException):  # a full disk must not keep this child alive
                    logging.shutdown()
                    sys.stdout.flush()
                    sys.stderr.flush()
                os._exit(code)
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode
