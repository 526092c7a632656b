"""TensorBoard for chosen trials (NNI's ``/tensorboard`` routes, ``nnictl tensorboard``, the web UI's button).

A task runs one ``tensorboard`` process on the trials' log directories: each trial's
``$NNI_OUTPUT_DIR/tensorboard`` when the trial wrote one, else its output directory itself. TensorBoard
is an optional extra (``pip install 'nnix[tensorboard]'``): the ``tensorboard`` program on ``PATH`` is
used, else ``python -m tensorboard.main`` when the module is importable; without either, a clear error.

The process listens on 127.0.0.1 only (whatever the manager's bind), in a session of its own; it is
stopped by ``DELETE`` and whenever the manager exits (:meth:`Tensorboards.close`), and on Linux it also
gets SIGTERM if the manager dies (``setpriv --pdeathsig``, when util-linux provides it).

Routes (``/api/v1/nni``), NNI's shapes: ``POST /tensorboard`` ``{"trials": "id1,id2"}`` (nnix also takes a
list, and an optional ``port``) → task info ``{id, status, trialJobIdList, trialLogDirectoryList, pid,
port}`` plus ``url`` and, on ERROR, ``message``; ``GET /tensorboard/{id}``, ``PUT /tensorboard/{id}``
(restart), ``DELETE /tensorboard/{id}``; ``GET /tensorboard-tasks``, ``DELETE /tensorboard-tasks``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from nnix.api.common import JSON, ApiContext, ApiError, RouteTable, read_json
from nnix.home import trial_files_dir
from nnix.query import Query

log = logging.getLogger("nnix.api.tensorboard")

MAX_TRIALS = 100
START_TIMEOUT = 60.0  # seconds for TensorBoard to listen (the real one imports a lot)
INSTALL_HINT = "install it: pip install 'nnix[tensorboard]' (or pip install tensorboard) in the manager's Python"


def tensorboard_command() -> list[str] | None:
    """How to run TensorBoard here, or None when it is not installed."""
    exe = shutil.which("tensorboard")
    if exe:
        return [exe]
    if importlib.util.find_spec("tensorboard") is not None:
        return [sys.executable, "-m", "tensorboard.main"]
    return None


@functools.cache
def _pdeathsig_wrapper() -> list[str]:
    """``setpriv --pdeathsig TERM --`` where util-linux's setpriv knows the option (2.33 and later)."""
    setpriv = shutil.which("setpriv")
    if not setpriv or not sys.platform.startswith("linux"):
        return []
    try:
        help_text = subprocess.run([setpriv, "--help"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [setpriv, "--pdeathsig", "TERM", "--"] if "--pdeathsig" in help_text else []


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Task:
    id: str
    trial_ids: list[str]
    log_dirs: list[str]
    port: int
    proc: subprocess.Popen[bytes] | None = None
    status: str = "DOWNLOADING_DATA"  # NNI's word for "starting"
    message: str = ""
    out_file: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def refresh(self) -> None:
        if self.proc is not None and self.status in ("RUNNING", "DOWNLOADING_DATA") and self.proc.poll() is not None:
            self.status = "ERROR"
            self.message = f"TensorBoard exited (code {self.proc.returncode}): {self.output_tail()}"

    def output_tail(self) -> str:
        try:
            text = self.out_file.read_text(errors="replace") if self.out_file else ""
        except OSError:
            text = ""
        return " | ".join(line for line in text.strip().splitlines()[-5:]) or "no output"

    def info(self) -> dict[str, Any]:
        self.refresh()
        out: dict[str, Any] = {
            "id": self.id, "status": self.status, "trialJobIdList": self.trial_ids,
            "trialLogDirectoryList": self.log_dirs, "pid": self.proc.pid if self.proc else None,
            "port": str(self.port), "url": f"http://127.0.0.1:{self.port}/",
        }
        if self.message:
            out["message"] = self.message
        return out


class Tensorboards:
    """The TensorBoard tasks of one manager."""

    def __init__(self, exp_dir: Path) -> None:
        self.exp_dir = exp_dir
        self.tasks: dict[str, Task] = {}

    def log_dirs(self, trials: list[tuple[str, str | None]]) -> list[str]:
        dirs = []
        for tid, output_dir in trials:
            folder = trial_files_dir(self.exp_dir, tid, output_dir)
            if folder is None:
                raise ApiError(400, f"trial {tid} has not started: it has no output yet")
            tb = folder / "tensorboard"
            chosen = tb if tb.is_dir() and not tb.is_symlink() else folder
            if "," in str(chosen):
                raise ApiError(400, f"trial {tid}'s directory {chosen} has a ',' (TensorBoard cannot take it)")
            dirs.append(str(chosen))
        return dirs

    async def start(self, trials: list[tuple[str, str | None]], port: int | None = None) -> Task:
        command = tensorboard_command()
        if command is None:
            raise ApiError(400, f"TensorBoard is not installed: {INSTALL_HINT}")
        dirs = self.log_dirs(trials)
        task = Task(secrets.token_hex(4), [t for t, _ in trials], dirs, port or free_port())
        await self._spawn(task, command)
        self.tasks[task.id] = task
        return task

    async def _spawn(self, task: Task, command: list[str]) -> None:
        if len(task.trial_ids) == 1:
            spec = ["--logdir", task.log_dirs[0]]
        else:
            spec = ["--logdir_spec", ",".join(f"{t}:{d}" for t, d in zip(task.trial_ids, task.log_dirs, strict=True))]
        argv = [*command, *spec, "--host", "127.0.0.1", "--port", str(task.port)]
        argv = [*_pdeathsig_wrapper(), *argv]
        out_dir = self.exp_dir / "log"
        out_dir.mkdir(parents=True, exist_ok=True)
        task.out_file = out_dir / f"tensorboard-{task.id}.log"
        with open(task.out_file, "ab") as out:
            try:
                task.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                             start_new_session=True, cwd=str(self.exp_dir))
            except OSError as e:
                raise ApiError(400, f"cannot start TensorBoard ({argv[0]}): {e}") from e
        log.info("TensorBoard %s (pid %d) for trials %s on 127.0.0.1:%d", task.id, task.proc.pid,
                 ",".join(task.trial_ids), task.port)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_TIMEOUT
        while loop.time() < deadline:
            if task.proc.poll() is not None:
                task.status = "ERROR"
                task.message = f"TensorBoard exited at start (code {task.proc.returncode}): {task.output_tail()}"
                raise ApiError(400, task.message)
            if await asyncio.to_thread(_listening, task.port):
                task.status = "RUNNING"
                return
            await asyncio.sleep(0.1)
        log.warning("TensorBoard %s does not listen on port %d after %.0f s", task.id, task.port, START_TIMEOUT)

    def get(self, task_id: str) -> Task:
        task = self.tasks.get(task_id)
        if task is None:
            raise ApiError(404, f"no TensorBoard task {task_id}")
        return task

    async def stop(self, task: Task) -> None:
        proc = task.proc
        if proc is not None and proc.poll() is None:
            task.status = "STOPPING"
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
            for _ in range(50):
                if proc.poll() is not None:
                    break
                await asyncio.sleep(0.1)
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await asyncio.to_thread(proc.wait)
        task.status = "STOPPED"
        task.message = ""

    async def restart(self, task: Task) -> Task:
        await self.stop(task)
        command = tensorboard_command()
        if command is None:
            raise ApiError(400, f"TensorBoard is not installed: {INSTALL_HINT}")
        await self._spawn(task, command)
        return task

    async def close(self) -> None:
        """Stop every task (the manager exits)."""
        for task in list(self.tasks.values()):
            await self.stop(task)


def _trial_ids(body: Any) -> tuple[list[str], int | None]:
    if not isinstance(body, dict) or "trials" not in body:
        raise ApiError(400, 'the body must be {"trials": "id1,id2"}')
    raw = body["trials"]
    ids = [s.strip() for s in raw.split(",")] if isinstance(raw, str) else raw
    if not isinstance(ids, list) or not all(isinstance(i, str) and i for i in ids) or not ids:
        raise ApiError(400, "trials must be a comma-separated string (or a list) of trial ids")
    if len(ids) > MAX_TRIALS:
        raise ApiError(400, f"at most {MAX_TRIALS} trials per TensorBoard")
    port = body.get("port")
    if port is not None and (not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535):
        raise ApiError(400, "port must be an integer 1..65535")
    return list(dict.fromkeys(ids)), port


def routes(ctx: ApiContext, prefix: str) -> list[Route]:
    boards = Tensorboards(ctx.manager.exp_dir)
    ctx.extra["tensorboards"] = boards
    route = RouteTable(prefix)

    @route.post("/tensorboard")
    async def start(request: Request) -> Response:
        ids, port = _trial_ids(await read_json(request))
        q = Query(ctx.manager.state)
        missing = [i for i in ids if i not in q]
        if missing:
            raise ApiError(404, f"no trial {', '.join(missing)}")
        task = await boards.start([(i, t.output_dir) for i in ids if (t := q.trial(i)) is not None], port)
        return JSON(task.info())

    @route.get("/tensorboard/{id}")
    async def get(request: Request) -> Response:
        return JSON(boards.get(request.path_params["id"]).info())

    @route.put("/tensorboard/{id}")
    async def put(request: Request) -> Response:
        return JSON((await boards.restart(boards.get(request.path_params["id"]))).info())

    @route.delete("/tensorboard/{id}")
    async def delete(request: Request) -> Response:
        task = boards.get(request.path_params["id"])
        await boards.stop(task)
        return JSON(task.info())

    @route.get("/tensorboard-tasks")
    async def list_tasks(_: Request) -> Response:
        return JSON([t.info() for t in boards.tasks.values()])

    @route.delete("/tensorboard-tasks")
    async def stop_all(_: Request) -> Response:
        await boards.close()
        return JSON([t.info() for t in boards.tasks.values()])

    return route.routes
