"""The Ray training service (``platform: ray``): each environment is one Ray actor running the nnix agent.

The actor asks Ray for the resources of one trial (``numCpus``, ``numGpus``, custom ``resources``), so Ray's
scheduler decides where and when trials run: an environment stays *pending* ("waiting for resources:
{'CPU': 1}") until a node has room. Once placed, the actor starts the agent (``<pythonExecutable> -m
nnix.agent --connect-file ...``); the agent connects back to the manager and runs trials
(one after another in reuse mode, one in non-reuse mode). When the agent exits, the actor reports its exit
status and is released, which frees its resources for the next environment. Everything else (trials,
metrics, kill) is the shared part in :mod:`nnix.services.cluster`.

Which cluster (``address``):

* absent: a private single-node Ray head is started for this experiment, pinned to 127.0.0.1 (Ray would
  otherwise pick this machine's first network address and listen on every interface), with a token of its own.
  It runs in a session of its own and outlives a killed manager (see :mod:`nnix.services.rayhead`): a
  resumed manager takes it over, with its actors, as on a shared cluster. It is stopped when the manager
  closes with nothing left running (the experiment ended or was stopped), when no environment has needed it
  for ``head_idle`` seconds (a new one starts when needed), and by ``nnix stop`` / ``nnix experiment delete``;
* ``host:port`` of a running head (``ray start --head``): the manager's machine must be a node of that
  cluster (Ray drivers talk to a local raylet); ``auto``: the cluster this machine belongs to;
  ``ray://host:10001``: Ray Client, from any machine (``pip install 'ray[client]'``).

The actors are *detached* and named after their environment in the namespace ``nnix-<experiment id>``:
they outlive a killed manager, so the agents reconnect to a resumed one, which finds the actors by name (see
:class:`~nnix.services.cluster.ClusterService`). An actor ends itself when its agent has exited, or when its
manager died before telling it what to run; an agent whose manager never comes back gives up after its own
timeout.

Processes on the node: the actor starts a small stdlib-only *guardian* process (double-forked, so Ray's
clean-up of a dead worker's children does not kill it first) which starts the agent. The guardian is a
child subreaper: trials the agent started in sessions of their own come back to it when the agent dies.
When the agent exits, or the actor asks, or the actor's worker process dies for any reason (``ray.kill``,
its node lost, the driver gone), the guardian terminates the agent and every trial left (SIGTERM, then
SIGKILL after the grace period), so nothing keeps using resources Ray believes free. Agent and guardian
output go to ``<workingDirectory>/envs/<environment id>/agent.log`` on the node.

Storage: trials run in ``trialCodeDirectory`` and write to ``<workingDirectory>/trials/<trial id>``
(default ``<experiment dir>/ray``), at the same paths on every node. On a single machine that just works;
on a multi-node cluster both must be shared storage (NFS and the like) mounted at the same path.
The token reaches the actor as an argument of one actor call (never in the actor's creation arguments or
its runtime environment, which Ray keeps in its control store); the actor writes it with the manager's address to
the agent's connect file ``envs/<environment id>/agent.json`` (mode 0600, on the node), which the agent reads again
at each reconnection. A resumed manager calls ``start`` again with its own address: when the port of the earlier
manager was taken meanwhile (Ray gives each worker and driver a random port in 10002-19999, any process may hold
one) it listens elsewhere, and the actor points the running agent there.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib
import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from nnix.errors import ServiceError
from nnix.model.runs import TrialSpec
from nnix.services import rayguardian, rayhead
from nnix.services.base import Emit, ServiceContext
from nnix.services.cluster import ClusterService, EnvRequest, EnvStatus

if TYPE_CHECKING:
    from nnix.config import ExperimentConfig, RayConfig

__all__ = ["RayLauncher", "RayService"]

log = logging.getLogger("nnix.services.ray")

INSTALL_HINT = "install Ray where the manager runs: pip install 'nnix[ray]'"
_CLUSTER_VAR = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
_AUTH_VAR = "RAY_AUTH_MODE"
_PRIVATE_OBJECT_STORE = 200 * 1024 * 1024  # environments pass no data through Ray's object store
_KV_NAMESPACE = "nnix"

# The guardian (nnix.services.rayguardian), shipped as its source text: the actor's worker runs it as
# ``python -c _GUARDIAN <ctl fd> <status fd> <grace> <argv...>`` (its Python need not have nnix).
_GUARDIAN = Path(rayguardian.__file__).read_text(encoding="utf-8")


def _actor_class() -> type:
    """The actor, built here so that Ray ships it by value: workers need only Ray, not nnix.

    Its methods may use the standard library and ``_GUARDIAN`` only."""

    class NnixEnvironment:
        def __init__(self, detached: bool) -> None:
            import threading

            self._detached = detached
            self._lock = threading.Lock()
            self._done = threading.Event()
            self._started = threading.Event()
            self._ctl: int | None = None
            self._status: int | None = None
            self._info: dict[str, Any] = {}
            self._result: dict[str, Any] | None = None
            self._log = ""
            self._reading = False
            if detached:  # its creator died before telling it what to run: nobody will, free its resources
                def orphaned() -> None:
                    import os

                    if not self._started.wait(120.0):
                        os._exit(0)

                threading.Thread(target=orphaned, daemon=True).start()

        def _point(self, connect: dict[str, str] | None) -> bool:
            """Write the agent's connect file (``connect``: its ``path`` and ``url``, ``environment_id``, ``token``;
            mode 0600, replaced whole); False when it already said that."""
            import json
            import os

            if not connect:
                return False
            path = connect["path"]
            data = json.dumps({k: v for k, v in connect.items() if k != "path"}, sort_keys=True)
            try:
                with open(path, encoding="utf-8") as f:
                    if f.read() == data:
                        return False
            except OSError:
                pass
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(data)
            os.replace(tmp, path)
            return True

        def start(self, argv: list[str], env: dict[str, str], log_path: str, grace: float,
                  connect: dict[str, str] | None = None) -> dict[str, Any]:
            """Start the agent (``argv``) once; called again (a resumed manager), it only points the running agent
            at ``connect``'s address (a manager whose earlier port was taken listens elsewhere)."""
            import json
            import os
            import socket
            import subprocess
            import sys

            with self._lock:
                if self._started.is_set():
                    if not self._done.is_set():  # the agent reads it again at its next try
                        try:
                            self._point(connect)
                        except OSError:
                            pass
                    return self._info
                try:
                    os.makedirs(os.path.dirname(log_path), exist_ok=True)
                    self._log = log_path
                    self._point(connect)
                    ctl_r, ctl_w = os.pipe()
                    st_r, st_w = os.pipe()
                    full = dict(os.environ)
                    full.update(env)
                    with open(log_path, "ab") as logf:
                        proc = subprocess.Popen(
                            [sys.executable, "-c", _GUARDIAN, str(ctl_r), str(st_w), str(grace), *argv],
                            stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, env=full,
                            pass_fds=(ctl_r, st_w), start_new_session=True,
                        )
                    os.close(ctl_r)
                    os.close(st_w)
                    proc.wait()  # the first process forks the guardian and exits at once
                    self._ctl, self._status = ctl_w, st_r
                    line = b""
                    while not line.endswith(b"\n"):
                        chunk = os.read(st_r, 1)
                        if not chunk:
                            break
                        line += chunk
                    first = json.loads(line) if line.strip() else {"error": "the guardian process died at start"}
                    if "error" in first:
                        self._result = {"status": None, "error": first["error"], "tail": self._tail()}
                        self._done.set()
                        raise RuntimeError(first["error"])
                    self._info = {"pid": first.get("agent"), "guardian": first.get("pid"),
                                  "hostname": socket.gethostname()}
                    return self._info
                except Exception as e:
                    if self._result is None:  # e.g. the working directory cannot be written on this node
                        self._result = {"status": None, "error": f"{type(e).__name__}: {e}", "tail": ""}
                        self._done.set()
                    raise
                finally:
                    self._started.set()

        def info(self) -> dict[str, Any]:
            return self._info

        def wait(self) -> dict[str, Any]:
            import contextlib
            import json
            import os
            import threading

            self._started.wait()
            with self._lock:
                if self._result is None and self._status is None:
                    self._result = {"status": None, "error": "the agent was never started", "tail": ""}
                    self._done.set()
                reader = not self._done.is_set() and not self._reading
                self._reading = True
            if reader and self._status is not None:
                data = b""
                while True:
                    chunk = os.read(self._status, 4096)
                    if not chunk:
                        break
                    data += chunk
                last: dict[str, Any] = {}
                for line in data.splitlines():
                    with contextlib.suppress(ValueError):
                        said = json.loads(line)
                        if isinstance(said, dict) and "status" in said:
                            last = said
                with self._lock:
                    if self._result is None:
                        code = last.get("status")
                        self._result = {"status": code, "why": last.get("why", ""),
                                        "tail": self._tail() if code != 0 else "", "vanished": not last}
                    self._done.set()
            self._done.wait()
            if self._detached:  # nobody may be left to release it: free its resources after a while
                def leave() -> None:
                    import time

                    time.sleep(30.0)
                    os._exit(0)

                threading.Thread(target=leave, daemon=True).start()
            assert self._result is not None
            return self._result

        def terminate(self, timeout: float) -> bool:
            import os

            if self._ctl is not None:
                with self._lock:
                    try:
                        os.write(self._ctl, b"stop")
                    except OSError:
                        pass
            return self._done.wait(timeout)

        def _tail(self) -> str:
            try:
                with open(self._log, "rb") as f:
                    f.seek(0, 2)
                    f.seek(max(0, f.tell() - 2000))
                    return f.read().decode("utf-8", "replace")
            except OSError:
                return ""

    NnixEnvironment.__qualname__ = NnixEnvironment.__name__
    return NnixEnvironment


# --------------------------------------------------------------------------------------------------
# Manager side


def _import_ray() -> Any:
    try:
        return importlib.import_module("ray")
    except ImportError as e:
        raise ServiceError(f"platform ray needs the ray package, which cannot be imported here: {e}",
                           INSTALL_HINT) from e


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _route_to(host: str, port: int) -> str | None:
    """This machine's address on the route to ``host`` (no packet is sent)."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, port))
        return str(s.getsockname()[0])
    return None


def _advertise_for(address: str | None) -> str | None:
    """The manager's address as the cluster's nodes reach it: loopback for a private or loopback cluster,
    else this machine's address on the route to the head (known without Ray: the cluster service asks
    before :meth:`RayLauncher.prepare`). None for ``auto`` (found once connected)."""
    if address is None:
        return "127.0.0.1"
    if address == "auto":
        return None
    try:
        host, port = _host_port(address)
    except ServiceError:
        return None
    if _is_loopback(host):
        return "127.0.0.1"
    return _route_to(host, port)


def _host_port(address: str) -> tuple[str, int]:
    """The head of ``host:port`` (port 6379 by default) or of ``ray://host:port`` (10001)."""
    client = address.startswith("ray://")
    url = urlsplit(address if client else f"//{address}")
    try:
        host, port = url.hostname or "", url.port or (10001 if client else 6379)
    except ValueError:
        host, port = "", 0
    if not host or "/" in url.path.strip("/") or (url.path and not client):
        raise ServiceError(f"trainingService.address {address!r} is not a Ray cluster address",
                           "use host:port of the head (e.g. 10.0.0.5:6379), auto, or ray://host:10001")
    return host, port


def _amount(x: float) -> float | int:
    return int(x) if float(x).is_integer() else x


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("nnix guardian")]
    return lines[-1][:300] if lines else ""


def describe_ray_error(e: BaseException) -> str:
    """A Ray exception about an actor as a short reason for the user (``actor died: ...``, ``node died: ...``)."""
    name = type(e).__name__
    text = str(e)
    if name == "RuntimeEnvSetupError":
        return "Ray could not set up the runtime environment (runtimeEnv): " + " ".join(text.split())[:400]
    lines = text.splitlines()
    if "RayTaskError" in name:  # an exception in an actor call: its traceback ends with what was raised
        lines = [ln for ln in lines if ln.strip()][-1:]
    if lines and lines[0].startswith("The actor died unexpectedly"):
        lines = lines[1:]
    cause = " ".join(ln.strip() for ln in lines if ln.strip() and not ln.startswith("\t"))[:400]
    cause = cause or " ".join(text.split())[:400]
    low = cause.lower()
    if "node" in low and ("died" in low or "dead" in low or "drain" in low or "preempt" in low):
        return f"node died: {cause}"
    if name in ("ActorDiedError", "RayActorError", "ActorUnschedulableError"):
        return f"actor died: {cause}"
    if name == "RayTaskError" or "RayTaskError" in name:
        return f"the agent could not start: {cause}"
    return f"{name}: {cause}"


def describe_exit(result: dict[str, Any]) -> str:
    """The end of an agent as the actor reported it."""
    if result.get("error"):
        return f"the agent could not start: {result['error']}"
    code = result.get("status")
    tail = _last_line(str(result.get("tail") or ""))
    if code is None:
        return "the agent's guardian process vanished" + (f" ({tail})" if tail else "")
    if code < 0:
        try:
            sig = signal.Signals(-code).name
        except ValueError:
            sig = str(-code)
        what = f"agent killed by {sig}"
    else:
        what = f"agent exited with status {code}"
    why = str(result.get("why") or "")
    if why:
        what += f" ({why})"
    return f"{what}: {tail}" if tail and code != 0 else what


def _reload_ray_auth() -> None:
    """Make this process's Ray read its authentication settings (``RAY_AUTH_MODE``, ``RAY_AUTH_TOKEN``) again:
    it caches them. Nothing to do for a Ray without token authentication."""
    with contextlib.suppress(Exception):
        raylet: Any = importlib.import_module("ray._raylet")
        raylet.Config.initialize("")  # first: the mode, then the token it needs
        raylet.AuthenticationTokenLoader.instance().reset_cache()


def _reinstall_signal_handlers() -> None:
    """Ray's shutdown resets the signals its crash handler took (SIGTERM among them) to their default action,
    behind Python's back: a manager that goes on (its private head stopped while idle) would die of the next
    ``nnix stop``. Python's own handlers are installed again (main thread only, as Python requires)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        with contextlib.suppress(OSError, ValueError, TypeError):
            handler = signal.getsignal(sig)
            if callable(handler):
                signal.signal(sig, handler)


class _NotMainThreadFilter(logging.Filter):
    """Ray warns that it installs no SIGTERM handler when initialised off the main thread: as intended here
    (the manager handles its own signals)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "not the main thread" not in record.getMessage()


@dataclass(eq=False)
class _Actor:
    handle: str
    actor: Any
    started: concurrent.futures.Future[Any]
    done: concurrent.futures.Future[Any]
    stopped: bool = False
    released: bool = False

    @property
    def over(self) -> bool:
        """Ended, or being ended by this manager."""
        return self.stopped or self.released or self.done.done()

    def status(self) -> EnvStatus:
        if self.stopped and (self.released or self.done.done()):
            return EnvStatus("ended", "stopped")
        if self.done.done():
            err = self.done.exception()
            if err is not None:
                if self.started.done() and self.started.exception() is not None:
                    err = self.started.exception() or err
                return EnvStatus("ended", describe_ray_error(err))
            return EnvStatus("ended", describe_exit(cast("dict[str, Any]", self.done.result())))
        if self.started.done():
            if self.started.exception() is None:
                return EnvStatus("running")
            return EnvStatus("ended", describe_ray_error(cast(BaseException, self.started.exception())))
        return EnvStatus("pending")


class RayLauncher:
    """Environments as Ray actors (see the module docstring)."""

    kind = "ray"

    def __init__(
        self,
        *,
        experiment_id: str,
        working_dir: Path | None,
        address: str | None = None,
        num_cpus: float = 1.0,
        num_gpus: float = 0.0,
        resources: dict[str, float] | None = None,
        runtime_env: dict[str, Any] | None = None,
        python: str | None = None,
        connect_timeout: float = 60.0,
        kill_grace: float = 5.0,
        local_num_cpus: int | None = None,
        state_dir: Path | None = None,
        head_idle: float = 30.0,
    ) -> None:
        self.advertise_host: str | None = _advertise_for(address)
        self._experiment_id = experiment_id
        self._namespace = f"nnix-{experiment_id}"
        self._working_dir = working_dir
        self._address = address
        self._num_cpus = float(num_cpus)
        self._num_gpus = float(num_gpus)
        self._resources = dict(resources or {})
        self._runtime_env = runtime_env
        self._python = python or sys.executable
        self._connect_timeout = float(connect_timeout)
        self._kill_grace = float(kill_grace)
        self._local_num_cpus = local_num_cpus
        self._state_dir = state_dir
        self._head_idle = float(head_idle)
        self._ray: Any = None
        self._cls: Any = None
        self._owns = False
        self._private = address is None
        self._head: rayhead.Head | None = None
        self._head_lock: asyncio.Lock | None = None
        self._head_task: asyncio.Task[None] | None = None
        self._launching = 0
        self._pinned: tuple[str | None, Any] | None = None
        self._saved_env: dict[str, str | None] | None = None
        self._actors: dict[str, _Actor] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    @classmethod
    def from_config(cls, config: ExperimentConfig, context: ServiceContext | None) -> RayLauncher:
        ts = cast("RayConfig", config.training_service)
        working_dir = ts.working_directory
        if working_dir is None and context is not None:
            working_dir = context.experiment_dir / "ray"
        gpus = ts.num_gpus if ts.num_gpus is not None else float(config.trial_gpu_number or 0)
        return cls(
            experiment_id=context.experiment_id if context is not None else "standalone",
            working_dir=working_dir,
            address=ts.address,
            num_cpus=ts.num_cpus,
            num_gpus=gpus,
            resources=dict(ts.resources),
            runtime_env=ts.runtime_env,
            python=ts.python_executable,
            connect_timeout=float(ts.connect_timeout),
            state_dir=context.experiment_dir if context is not None else None,
        )

    # --- views -----------------------------------------------------------------------------------
    @property
    def demand(self) -> dict[str, float | int]:
        """What one environment asks Ray for, as Ray names it."""
        out: dict[str, float | int] = {}
        if self._num_cpus:
            out["CPU"] = _amount(self._num_cpus)
        if self._num_gpus:
            out["GPU"] = _amount(self._num_gpus)
        out.update({k: _amount(v) for k, v in self._resources.items()})
        return out

    @property
    def namespace(self) -> str:
        """The Ray namespace of this experiment's actors (each named by its environment id)."""
        return self._namespace

    @property
    def working_dir(self) -> Path:
        if self._working_dir is None:
            raise ServiceError("the ray service needs a working directory (workingDirectory, or an experiment)")
        return self._working_dir

    def log_path(self, handle: str) -> Path:
        """Where the agent of environment ``handle`` writes its log (on its node)."""
        return self.working_dir / "envs" / handle / "agent.log"

    # --- the Launcher protocol -------------------------------------------------------------------
    async def prepare(self) -> None:
        ray = _import_ray()
        self._ray = ray
        self._loop = asyncio.get_running_loop()
        self._head_lock = asyncio.Lock()
        try:
            await asyncio.to_thread(self.working_dir.mkdir, parents=True, exist_ok=True)
        except OSError as e:
            if self._address is None:
                raise ServiceError(f"cannot create the working directory {self.working_dir}: {e}",
                                   "set trainingService.workingDirectory to a writable path") from e
            log.warning("the working directory %s cannot be created here (%s): trial outputs will not be readable "
                        "by the manager unless the nodes share it", self.working_dir, e)
        if ray.is_initialized():
            log.warning("this process is already connected to Ray: nnix uses that connection (trainingService."
                        "address is not used) and leaves it open")
            self._private = False
        elif self._private:
            await self._open_private(adopt=True)
            self._head_task = asyncio.create_task(self._watch_head())
        else:
            await self._connect(ray, self._address)
        if self.advertise_host is None:
            self.advertise_host = await asyncio.to_thread(self._guess_advertise)
        self._cls = ray.remote(_actor_class())

    # --- the private head (see nnix.services.rayhead) ----------------------------------------------
    @property
    def _head_dir(self) -> Path:
        return self._state_dir or self.working_dir

    async def _open_private(self, adopt: bool) -> None:
        """Connect to this experiment's private head: the one recorded by an earlier manager when it is still
        there and verified, else a new one."""
        state = self._head_dir
        head = await asyncio.to_thread(rayhead.read, state) if adopt else None
        if head is not None:
            why = await asyncio.to_thread(rayhead.check, head, self._experiment_id)
            if why is None:
                try:
                    await self._use_head(head, new=False)
                except ServiceError as e:
                    why = e.message
                else:
                    log.info("took over the private Ray head of the earlier manager at %s (keeper pid %d)",
                             head.address, head.keeper_pid)
                    return
            log.warning("the private Ray head recorded for this experiment cannot be used (%s): starting a new one",
                        why)
            await asyncio.to_thread(rayhead.stop, state, head)
        try:
            head = await asyncio.to_thread(
                rayhead.start, state, self._experiment_id, num_cpus=self._local_num_cpus,
                object_store_memory=_PRIVATE_OBJECT_STORE, timeout=self._connect_timeout, owner_pid=os.getpid())
        except (OSError, RuntimeError) as e:
            raise ServiceError(f"cannot start a private Ray on 127.0.0.1: {e}",
                               "check that Ray runs on this machine (`ray start --head`), or raise "
                               "trainingService.connectTimeout") from None
        try:
            await self._use_head(head, new=True)
        except BaseException:
            await asyncio.to_thread(rayhead.stop, state, head)
            raise
        log.info("private Ray head started at %s (keeper pid %d, %s); it outlives this manager while trials run",
                 head.address, head.keeper_pid, head.temp_dir)

    async def _use_head(self, head: rayhead.Head, new: bool) -> None:
        """Connect to ``head`` with its own token, and check (or, for a new one, set) whose head it is."""
        # first: its keeper stops a head whose manager is dead once no agent is left
        head = await asyncio.to_thread(rayhead.set_owner, self._head_dir, head, os.getpid())
        self._set_env({_AUTH_VAR: "token", "RAY_AUTH_TOKEN": head.token, "RAY_AUTH_TOKEN_PATH": None})
        try:
            await self._connect(self._ray, head.address)
            mark = f"{self._experiment_id}/{head.head_id}".encode()
            found = await asyncio.to_thread(self._head_mark, None if not new else mark)
            if found is not None and found != mark:
                raise ServiceError(f"the Ray head at {head.address} belongs to {found.decode(errors='replace')}")
        except BaseException:
            await self._disconnect()
            raise
        self._head = head

    def _head_mark(self, put: bytes | None) -> bytes | None:
        """The head's owner as its KV store says (``<experiment>/<head id>``); ``put``: record it first.
        None when this Ray has no such API."""
        try:
            kv: Any = importlib.import_module("ray.experimental.internal_kv")
        except ImportError:
            return None
        if put is not None:
            kv._internal_kv_put(b"nnix-head", put, overwrite=True, namespace=_KV_NAMESPACE)
        value = kv._internal_kv_get(b"nnix-head", namespace=_KV_NAMESPACE)
        return bytes(value) if value is not None else b"(nobody)"

    async def _watch_head(self) -> None:
        """Stops the private head once no environment has needed it for ``head_idle`` seconds (the experiment is
        over, while its manager keeps serving); the next environment starts a new one."""
        assert self._loop is not None
        idle_since = self._loop.time()
        while not self._closed:
            await asyncio.sleep(max(0.05, min(1.0, self._head_idle / 4)))
            now = self._loop.time()
            if self._head is None or self._launching or any(not a.over for a in self._actors.values()):
                idle_since = now
                continue
            if now - idle_since < self._head_idle:
                continue
            assert self._head_lock is not None
            async with self._head_lock:
                if self._closed or self._head is None or self._launching:
                    continue
                if await asyncio.to_thread(self._left_running):
                    idle_since = now  # actors of an earlier manager, not taken over (yet)
                    continue
                log.info("no ray environment for %.0f s: stopping the private Ray head (a new one starts when "
                         "needed)", now - idle_since)
                await self._close_head()

    def _left_running(self) -> list[str]:
        """Live actors of this experiment that this manager did not end (left for a resume)."""
        over = {h for h, a in self._actors.items() if a.over}
        try:
            names = self._ray.util.list_named_actors()
        except Exception:
            return [h for h, a in self._actors.items() if not a.over]
        return [str(n) for n in names if n not in over]

    async def _close_head(self) -> None:
        head, self._head = self._head, None
        self._actors.clear()
        await self._disconnect()
        if head is not None:
            await asyncio.to_thread(rayhead.stop, self._head_dir, head)
            log.info("private Ray head at %s stopped", head.address)

    async def _disconnect(self) -> None:
        if self._owns and self._ray is not None:
            self._owns = False
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self._ray.shutdown)
            _reinstall_signal_handlers()
        self._unpin()

    def _set_env(self, values: dict[str, str | None]) -> None:
        """Set (or, None, unset) environment variables until :meth:`_unpin`, and make Ray read them again."""
        if self._saved_env is None:
            self._saved_env = {}
        for k, v in values.items():
            self._saved_env.setdefault(k, os.environ.get(k))
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        _reload_ray_auth()

    async def _connect(self, ray: Any, address: str | None) -> None:
        where = address or "a private Ray on 127.0.0.1"
        kwargs: dict[str, Any] = {"namespace": self._namespace, "log_to_driver": False,
                                  "logging_level": logging.WARNING, "address": address}
        host: str | None = None
        port = 0
        if address is not None and address != "auto":
            host, port = _host_port(address)
            if _is_loopback(host):
                self._pin_loopback(ray)
        if host:
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5.0)
                writer.close()
            except (OSError, TimeoutError) as e:
                self._unpin()
                raise ServiceError(f"cannot reach the Ray cluster at {address}: {e or 'timed out'}",
                                   "check trainingService.address (a head started with `ray start --head` "
                                   "listens on port 6379, its Ray Client server on 10001)") from None
        quiet = _NotMainThreadFilter()
        worker_log = logging.getLogger("ray._private.worker")
        worker_log.addFilter(quiet)
        try:
            await asyncio.wait_for(asyncio.to_thread(ray.init, **kwargs), self._connect_timeout)
        except TimeoutError:
            self._unpin()
            raise ServiceError(f"{where} did not answer within {self._connect_timeout:g} s",
                               "check that the cluster is up (`ray status`), or raise trainingService."
                               "connectTimeout") from None
        except Exception as e:
            self._unpin()
            if isinstance(e, ImportError):
                hint = "pip install 'ray[client]' for ray:// addresses"
            elif "auth" in f"{type(e).__name__} {e} {e.__cause__}".lower():
                hint = (f"the cluster uses token authentication: set {_AUTH_VAR}=token and RAY_AUTH_TOKEN (or "
                        "RAY_AUTH_TOKEN_PATH) in the manager's environment, as for any Ray driver")
            else:
                hint = "the manager's machine must be a node of the cluster (or use a ray:// address)"
            raise ServiceError(f"cannot connect to {where}: {' '.join(str(e).split())[:500]}", hint) from e
        finally:
            worker_log.removeFilter(quiet)
        self._owns = True

    def _pin_loopback(self, ray: Any) -> None:
        """Ray replaces 127.0.0.1 with this machine's first network address unless told it runs no
        multi-machine cluster; both the variable (read by Ray's child processes) and the constant (read
        by this already imported Ray) say so, until :meth:`close`."""
        if self._pinned is not None:
            return
        consts: Any = None
        with contextlib.suppress(ImportError):
            consts = importlib.import_module("ray._private.ray_constants")
        saved_const = getattr(consts, "ENABLE_RAY_CLUSTER", None) if consts is not None else None
        self._pinned = (os.environ.get(_CLUSTER_VAR), saved_const)
        os.environ[_CLUSTER_VAR] = "0"
        if consts is not None and saved_const is not None:
            consts.ENABLE_RAY_CLUSTER = False

    def _unpin(self) -> None:
        if self._saved_env is not None:
            for k, v in self._saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            self._saved_env = None
            _reload_ray_auth()
        if self._pinned is None:
            return
        env, const = self._pinned
        self._pinned = None
        if env is None:
            os.environ.pop(_CLUSTER_VAR, None)
        else:
            os.environ[_CLUSTER_VAR] = env
        if const is not None:
            with contextlib.suppress(ImportError):
                consts: Any = importlib.import_module("ray._private.ray_constants")
                consts.ENABLE_RAY_CLUSTER = const

    def _guess_advertise(self) -> str | None:
        address = self._address or ""
        if address.startswith("ray://"):
            url = urlsplit(address)
            return _route_to(url.hostname or "", url.port or 10001)
        with contextlib.suppress(Exception):
            return str(self._ray.util.get_node_ip_address())
        return None

    def _agent(self, request: EnvRequest) -> tuple[list[str], dict[str, str]]:
        """The agent's command line and what its actor writes to its connect file (the manager's address and the
        token: a resumed manager listening elsewhere has the actor write its new address there)."""
        connect = {"path": str(self.log_path(request.env_id).with_name("agent.json")), "url": request.url,
                   "environment_id": request.env_id, "token": request.token}
        argv = [self._python, "-m", "nnix.agent", "--connect-file", connect["path"],
                *(["--single"] if request.single else []), *request.agent_options]
        return argv, connect

    async def launch(self, request: EnvRequest) -> str:
        if self._cls is None or self._loop is None or self._head_lock is None:
            raise ServiceError("the ray launcher was not prepared")
        self._launching += 1
        try:
            if self._private and self._head is None:
                async with self._head_lock:
                    if self._head is None and not self._closed:
                        await self._open_private(adopt=False)
                        self._cls = self._ray.remote(_actor_class())
            return await self._launch(request)
        finally:
            self._launching -= 1

    async def _launch(self, request: EnvRequest) -> str:
        assert self._cls is not None
        handle = request.env_id
        log_path = str(self.log_path(handle))
        argv, connect = self._agent(request)

        def submit() -> _Actor:
            # every manager that takes the actor over keeps one `wait` call running in it for the agent's life (a
            # killed manager's keeps its thread too): room for many resumes, each call a thread, not a CPU
            opts: dict[str, Any] = {
                "name": handle, "namespace": self._namespace, "num_cpus": self._num_cpus,
                "num_gpus": self._num_gpus, "max_concurrency": 16, "max_restarts": 0,
            }
            if self._resources:
                opts["resources"] = dict(self._resources)
            if self._runtime_env:
                opts["runtime_env"] = self._runtime_env
            opts["lifetime"] = "detached"  # it outlives a killed manager: a resumed one takes it over
            actor = self._cls.options(**opts).remote(True)
            started = actor.start.remote(argv, {}, log_path, self._kill_grace, connect)
            done = actor.wait.remote()
            return _Actor(handle, actor, started.future(), done.future())

        try:
            rec = await asyncio.to_thread(submit)
        except (ValueError, TypeError) as e:
            raise ServiceError(f"Ray refused the environment: {e}",
                               "check numCpus, numGpus, resources and runtimeEnv of trainingService") from e
        self._actors[handle] = rec
        self._watch(rec)
        return handle

    def _watch(self, rec: _Actor) -> None:
        loop = self._loop
        assert loop is not None

        def finished(_: concurrent.futures.Future[Any]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the manager is gone
                loop.call_soon_threadsafe(self._spawn_release, rec)

        rec.done.add_done_callback(finished)

    def _spawn_release(self, rec: _Actor) -> None:
        if rec.released or self._closed:
            return
        task = asyncio.ensure_future(asyncio.to_thread(self._kill_actor, rec))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _kill_actor(self, rec: _Actor) -> None:
        """Frees the actor's resources at once (its agent is gone, or it is being stopped)."""
        if rec.released:
            return
        rec.released = True
        with contextlib.suppress(Exception):
            self._ray.kill(rec.actor, no_restart=True)

    async def poll(self, handles: Sequence[str]) -> dict[str, EnvStatus]:
        out: dict[str, EnvStatus] = {}
        for h in handles:
            rec = self._actors.get(h) or await self._adopt(h)
            out[h] = rec.status() if rec is not None else EnvStatus("ended", "gone")
        if any(st.state == "pending" for st in out.values()):
            reason = await self._pending_reason()
            out = {h: replace(st, reason=reason) if st.state == "pending" else st for h, st in out.items()}
        return out

    async def _adopt(self, handle: str) -> _Actor | None:
        """An actor of an earlier manager of this experiment, found by its name."""
        if self._ray is None or self._loop is None or (self._private and self._head is None):
            return None
        ray = self._ray

        def find() -> _Actor | None:
            try:
                actor = ray.get_actor(handle, namespace=self._namespace)
            except ValueError:
                return None
            return _Actor(handle, actor, actor.info.remote().future(), actor.wait.remote().future())

        rec = await asyncio.to_thread(find)
        if rec is not None:
            self._actors[handle] = rec
            self._watch(rec)
        return rec

    # --- environments no live manager knows (nnix.services.launcher.Reclaiming) -------------------------
    async def adopt(self, request: EnvRequest, handle: str | None) -> str | None:
        """The actor of an earlier manager's environment, found by its name, its agent started now if that manager
        died before the actor's ``start`` ran (it is idempotent: an agent already started is left as it is, and
        reconnects by itself); None when the cluster has no such actor."""
        if self._ray is None or self._loop is None or (self._private and self._head is None):
            return None
        ray = self._ray
        log_path = str(self.log_path(request.env_id))
        argv, connect = self._agent(request)

        def find() -> _Actor | None:
            try:
                actor = ray.get_actor(request.env_id, namespace=self._namespace)
            except ValueError:
                return None
            started = actor.start.remote(argv, {}, log_path, self._kill_grace, connect)
            return _Actor(request.env_id, actor, started.future(), actor.wait.remote().future())

        rec = await asyncio.to_thread(find)
        if rec is None:
            return None
        old = self._actors.get(rec.handle)
        if old is None or old.over:
            self._actors[rec.handle] = rec
            self._watch(rec)
        return rec.handle

    async def open_engine(self) -> None:
        """Connect to the configured cluster, nothing more (a private head is ended as a whole by
        :func:`nnix.services.rayhead.stop_recorded`: nothing to do here)."""
        if self._private:
            return
        ray = _import_ray()
        self._ray = ray
        self._loop = asyncio.get_running_loop()
        self._head_lock = asyncio.Lock()
        if not ray.is_initialized():
            await self._connect(ray, self._address)

    async def environments(self) -> dict[str, str]:
        """``{environment id: actor name}`` of the live actors of this experiment (its namespace)."""
        if self._ray is None or (self._private and self._head is None):
            return {}
        ray = self._ray
        namespace = self._namespace

        def names() -> list[str]:
            listed = ray.util.list_named_actors(all_namespaces=True)
            return [str(a["name"]) for a in listed if isinstance(a, dict) and a.get("namespace") == namespace]

        return {n: n for n in await asyncio.to_thread(names)}

    async def _pending_reason(self) -> str:
        demand = self.demand
        text = f"waiting for resources: {demand}"
        try:
            total = await asyncio.to_thread(self._ray.cluster_resources)
        except Exception:
            return text
        short = {k: _amount(float(total.get(k, 0))) for k, v in demand.items() if float(total.get(k, 0)) < v}
        if short:
            text += f" (the whole cluster has {short}: it cannot start until a node with more joins)"
        return text

    async def stop(self, handle: str) -> None:
        rec = self._actors.get(handle) or await self._adopt(handle)
        if rec is None or rec.stopped:
            return
        rec.stopped = True
        if rec.started.done() and rec.started.exception() is None and not rec.done.done():
            with contextlib.suppress(Exception):
                ref = rec.actor.terminate.remote(self._kill_grace + 5.0)
                await asyncio.wait_for(asyncio.wrap_future(ref.future()), self._kill_grace + 10.0)
        await asyncio.to_thread(self._kill_actor, rec)

    def place(self, spec: TrialSpec) -> TrialSpec:
        return replace(spec, output_dir=self.working_dir / "trials" / spec.trial_id)

    def output_location(self, spec: TrialSpec) -> str:
        return str(self.working_dir / "trials" / spec.trial_id)

    async def close(self) -> None:
        self._closed = True
        if self._head_task is not None:
            self._head_task.cancel()
            await asyncio.gather(self._head_task, return_exceptions=True)
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        head = self._head if self._private else None
        left = await asyncio.to_thread(self._left_running) if head is not None else []
        if head is not None and left:
            self._head = None
            self._actors.clear()
            await self._disconnect()
            log.info("the private Ray head at %s (keeper pid %d) keeps running for %d environment(s) left running: "
                     "`nnix resume` takes them over, `nnix stop` ends them", head.address, head.keeper_pid, len(left))
            return
        if head is not None:
            await self._close_head()
            return
        self._actors.clear()
        await self._disconnect()


class RayService(ClusterService):
    """``platform: ray``: the shared cluster service over :class:`RayLauncher`."""

    platform = "ray"
    engine_poll_interval = 1.0  # polling reads local futures: cheap

    @classmethod
    def make_launcher(cls, config: ExperimentConfig, context: ServiceContext | None) -> RayLauncher:
        return RayLauncher.from_config(config, context)

    @classmethod
    def _options_from_config(cls, config: ExperimentConfig, emit: Emit, context: ServiceContext | None,
                             options: dict[str, Any]) -> dict[str, Any]:
        head_idle = options.pop("head_idle", None)  # tests: how long a private head outlives its last actor
        kwargs = super()._options_from_config(config, emit, context, options)
        if head_idle is not None and isinstance(kwargs["launcher"], RayLauncher):
            kwargs["launcher"]._head_idle = float(head_idle)
        return kwargs
