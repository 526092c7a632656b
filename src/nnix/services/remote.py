"""The remote training service (``platform: remote``): trials on SSH workers, each running the nnix agent.

For each machine of ``machineList`` the service

1. connects over SSH (asyncssh). The host key is checked against ``knownHostsFile`` (default
   ``~/.ssh/known_hosts``); ``trustUnknownHosts: true`` accepts hosts that file does not list, with a
   warning, but a host whose listed key changed is always refused. Password, or key file + passphrase;
2. finds Python (``pythonPath`` first on ``PATH``; 3.10 or newer) and installs the manager's own nnix
   into a venv from wheels it uploads (``pip install --no-index --no-deps``: a worker never
   downloads anything; the agent needs only the standard library and nnix itself);
3. uploads the trial code once, as a tar archive honouring ``.nniignore`` (limits: 2,000 files, 300 MB);
4. opens a reverse port forward on the SSH connection: the agent reaches the manager's loopback agent
   endpoint through the connection itself, so the manager listens on no public address and workers
   need no route or firewall rule towards it;
5. starts ``python -m nnix.agent`` (reuse mode: one per machine, for every trial it gets; non-reuse: one
   per trial, which exits after reporting it).

Remote layout: ``<remoteWorkDir>/venvs/nnix-<version>-<build digest>-...`` is the agent's venv (one per
nnix build and interpreter, shared by the experiments using that build);
``<remoteWorkDir>/<experiment id>/<host>_<port>/`` holds ``wheels/``, ``code-<hash>/`` (trials run there),
``envs/<environment id>/`` (the agent's ``agent.json`` connect file, mode 0600, ``agent.pid`` and
``agent.log``) and ``trials/<trial id>/`` (the trial's outputs, kept). A trial's ``output_dir`` as the
manager records it is ``<host>:<path>`` (``<host>:<port>:<path>`` when the port is not 22).

Scheduling: a trial goes to the ready machine with the fewest trials of this experiment whose GPU rules
(``gpuIndices``, ``maxTrialNumberPerGpu``, ``useActiveGpu``, as in local mode, on the GPUs the agent
reports) admit it.

Failures:

* a host unreachable at start: an error naming it is logged, the other hosts are used, and the service
  keeps trying to reach it in the background (with backoff). Bad credentials, a refused host key, a
  missing or too old Python are permanent: that host is not retried. If no host can be used at all,
  ``start`` raises :class:`~nnix.errors.ServiceError`;
* a lost host (no sign of life from its agents for ``lostHostTimeout`` seconds, and SSH does not answer):
  per ``lostHostPolicy``, its trials end FAILED with a message naming the host (``fail``, the default) or
  go back to the queue to run again elsewhere (``requeue``); the experiment continues on the others. If
  the host comes back, its old agents are retired (they kill the written-off trials and exit) and the
  host is used again;
* a trial whose agent does not start it within the start timeout (a slow host), or whose host goes away before it
  starts, goes back to the queue with the reason (a Requeued event), whatever ``lostHostPolicy`` says, and the
  machine backs off; the experiment stops (ERROR, each machine named) only when no machine could run anything for
  ``lostHostTimeout`` (at least the start timeout). One policy for this and the cluster engines:
  :mod:`nnix.services.health`;
* the agent killed (``kill -9``) mid-trial: its trials are process groups of their own and keep running;
  the service sees the agent's SSH channel end (or its silence), starts a new agent and has it *attach*
  to them (metrics after the last recorded line, then the real exit status);
* the manager killed and resumed: agents keep running and buffer what they cannot send; the resumed
  service finds the live agents of the experiment on each host, gives them a new token and port (their
  connect file is rewritten, they are woken with SIGUSR1) and takes over the trials they report; trials
  whose agent died are attached by a new agent. Metrics are neither lost nor duplicated (line indices).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import json
import logging
import re
import secrets
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal, cast

import asyncssh

from nnix.agent.protocol import Attach, Heartbeat, Hello, Kill
from nnix.agent.runner import Exited, RunnerEvent, Started, TrialSpec
from nnix.errors import GpuUnavailableError, ServiceError
from nnix.services.agent_server import AgentServer
from nnix.services.base import ServiceContext
from nnix.services.fleet import AgentOptions, Fleet, FleetEnv, FleetTrial, StartFailed
from nnix.services.gpu import GpuInfo, GpuScheduler
from nnix.services.mirror import OutputMirror
from nnix.services.packing import CodeArchive, build_wheels, pack_code
from nnix.version import __version__

if TYPE_CHECKING:
    from typing import Unpack  # Python 3.11: in annotations only (nnix runs on 3.10)

    from nnix.config import ExperimentConfig, RemoteConfig, RemoteMachineConfig

__all__ = ["HostError", "RemoteService"]

log = logging.getLogger("nnix.services.remote")

MIN_PYTHON = (3, 10)
_PROBE = (
    "import sys, os, json; print(json.dumps({'exe': sys.executable, 'version': list(sys.version_info[:3]), "
    "'home': os.path.expanduser('~')}))"
)


class HostError(ServiceError):
    """A machine could not be used. ``permanent``: retrying cannot help (credentials, host key, Python)."""

    def __init__(self, message: str, hint: str | None = None, *, permanent: bool = False) -> None:
        super().__init__(message, hint)
        self.permanent = permanent


class _ReportedInventory:
    """A machine's GPUs as its agent last reported them."""

    def __init__(self) -> None:
        self.gpus: list[GpuInfo] = []

    def update(self, resources: dict[str, Any]) -> None:
        gpus = []
        for g in resources.get("gpus") or []:
            with contextlib.suppress(KeyError, TypeError, ValueError):
                gpus.append(GpuInfo(int(g["index"]), float(g.get("util", 0)), float(g.get("mem_util", 0)),
                                    int(g.get("processes", 0)), str(g.get("name", "")),
                                    int(g.get("memory_total_mb", 0))))
        self.gpus = gpus

    def snapshot(self) -> list[GpuInfo]:
        return list(self.gpus)


@dataclass(eq=False, kw_only=True)
class _Env(FleetEnv):
    machine: _Machine
    dir: str
    started_at: float
    process: asyncssh.SSHClientProcess[Any] | None = None  # None: adopted from an earlier manager
    pid: int | None = None
    draining: bool = False  # takes no new trial
    dead: bool = False
    refused: str | None = None
    hello: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(eq=False, kw_only=True)
class _Trial(FleetTrial[_Env]):
    machine: _Machine


@dataclass(eq=False)
class _Machine:
    index: int
    cfg: RemoteMachineConfig
    gpus: GpuScheduler
    inventory: _ReportedInventory
    state: Literal["connecting", "ready", "down", "lost", "failed"] = "connecting"
    problem: str = ""
    down_since: float | None = None
    conn: asyncssh.SSHClientConnection | None = None
    sftp: asyncssh.SFTPClient | None = None
    listener: asyncssh.SSHListener | None = None
    remote_port: int = 0
    python: str = ""
    root: str = ""
    venv: str = ""
    code_dir: str = ""
    reuse_env: _Env | None = None
    spares: list[_Env] = field(default_factory=list)  # non-reuse: an agent started ahead, for the next trial
    replenishing: bool = False
    envs: dict[str, _Env] = field(default_factory=dict)
    generation: int = 0
    first_attempt: asyncio.Event = field(default_factory=asyncio.Event)
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    task: asyncio.Task[None] | None = None
    checking: bool = False

    @property
    def label(self) -> str:
        return f"{self.cfg.user}@{self.cfg.host}:{self.cfg.port}"

    @property
    def key(self) -> str:
        return self.cfg.host if self.cfg.port == 22 else f"{self.cfg.host}:{self.cfg.port}"

    @property
    def dir_name(self) -> str:
        return re.sub(r"[^A-Za-z0-9._-]", "_", f"{self.cfg.host}_{self.cfg.port}")

    def live_envs(self) -> list[_Env]:
        return [e for e in self.envs.values() if not e.dead]


def _q(s: str) -> str:
    return shlex.quote(s)


class RemoteService(Fleet[_Env, _Trial]):
    platform = "remote"

    def __init__(
        self,
        emit: Callable[[RunnerEvent], None],
        *,
        machines: list[RemoteMachineConfig],
        context: ServiceContext | None,
        code_dir: Path,
        reuse: bool = True,
        trial_gpu_number: int | None = None,
        trust_unknown_hosts: bool = False,
        known_hosts_file: Path | None = None,
        remote_work_dir: str = "~/nnix-experiments",
        lost_host_policy: Literal["fail", "requeue"] = "fail",
        lost_host_timeout: float = 60.0,
        connect_timeout: float = 10.0,
        adopt_wait: float = 3.0,
        **agent: Unpack[AgentOptions],
    ) -> None:
        if not machines:
            raise ServiceError("machineList is empty", "list at least one SSH machine")
        self._context = context
        self._code_dir = Path(code_dir)
        self._reuse = reuse
        self._trust = trust_unknown_hosts
        self._known_hosts = known_hosts_file or Path.home() / ".ssh" / "known_hosts"
        self._work_dir = remote_work_dir
        self._policy = lost_host_policy
        self._connect_timeout = connect_timeout
        self._adopt_wait = adopt_wait
        self._machines: list[_Machine] = []
        for i, m in enumerate(machines):
            inv = _ReportedInventory()
            sched = GpuScheduler(inv, trial_gpu_number=trial_gpu_number, gpu_indices=m.gpu_indices,
                                 max_trial_number_per_gpu=m.max_trial_number_per_gpu,
                                 use_active_gpu=m.use_active_gpu)
            self._machines.append(_Machine(i, m, sched, inv))
        self._by_key = {m.key: m for m in self._machines}
        # one policy for failed starts and lost hosts (nnix.services.health); giving up needs every machine
        # failing for lostHostTimeout, and never less than one agent start timeout
        self._init_fleet(emit, OutputMirror(context.experiment_dir) if context is not None else None,
                         hosts=[m.label for m in self._machines], lost_after=lost_host_timeout, **agent)
        self._rr = 0
        self._server: AgentServer | None = None
        self._wheels: list[Path] = []
        self._wheel_digest = ""
        self._archive: CodeArchive | None = None
        self._monitor: asyncio.Task[None] | None = None
        self._settle_timer: asyncio.TimerHandle | None = None

    @classmethod
    def from_config(
        cls,
        config: ExperimentConfig,
        emit: Callable[[RunnerEvent], None],
        context: ServiceContext | None = None,
        **options: Any,
    ) -> RemoteService:
        ts = cast("RemoteConfig", config.training_service)
        return cls(
            emit,
            machines=list(ts.machine_list),
            context=context,
            code_dir=config.trial_code_directory,
            reuse=ts.reuse_mode,
            trial_gpu_number=config.trial_gpu_number,
            trust_unknown_hosts=ts.trust_unknown_hosts,
            known_hosts_file=ts.known_hosts_file,
            remote_work_dir=ts.remote_work_dir,
            lost_host_policy=ts.lost_host_policy,
            lost_host_timeout=float(ts.lost_host_timeout),
            **options,
        )

    # --- `nnix platform clean` --------------------------------------------------------------------
    # under remoteWorkDir nnix leaves venvs/ (agent venvs) and <experiment id>/<host>_<port>/{envs,trials,...}:
    # only those are listed (a directory is an experiment's when one of its folders has envs/ or trials/)
    _LEFTOVERS = (
        'w={work}; [ -d "$w" ] || exit 0; cd "$w" || exit 3; '
        '[ -d venvs ] && ls -d venvs/nnix-* >/dev/null 2>&1 && echo "$w/venvs"; '
        'for d in */; do d=${{d%/}}; [ "$d" = venvs ] && continue; '
        'for h in "$d"/*/; do if [ -d "$h/envs" ] || [ -d "$h/trials" ]; then echo "$w/$d"; break; fi; done; '
        'done; exit 0'
    )

    async def leftovers(self, remove: bool = False) -> list[tuple[str, list[str], str]]:
        """For each machine: ``(label, directories nnix left under remoteWorkDir, problem)``; with ``remove``
        they are deleted (and remoteWorkDir itself when that leaves it empty). Connects, runs, disconnects."""

        async def one(m: _Machine) -> tuple[str, list[str], str]:
            try:
                m.conn = await self._connect(m)
                work = self._work_dir
                if work == "~" or work.startswith("~/"):
                    home = self._text((await self._run(m, 'printf %s "$HOME"')).stdout).strip()
                    work = home + work[1:]
                found = await self._run(m, self._LEFTOVERS.format(work=_q(work)))
                if found.exit_status not in (0, None):
                    return m.label, [], f"cannot list {work}: {self._text(found.stderr).strip()}"
                paths = [p for p in self._text(found.stdout).splitlines() if p.startswith(work + "/")]
                if remove and paths:
                    r = await self._run(m, "rm -rf -- " + " ".join(_q(p) for p in paths)
                                        + f"; rmdir {_q(work)} 2>/dev/null; true")
                    if r.exit_status not in (0, None):
                        return m.label, paths, f"rm failed: {self._text(r.stderr).strip()}"
                return m.label, paths, ""
            except ServiceError as e:
                return m.label, [], e.message
            finally:
                self._drop_connection(m)

        return list(await asyncio.gather(*(one(m) for m in self._machines)))

    # --- views (tests, CLI) ----------------------------------------------------------------------
    def machines(self) -> list[tuple[str, str, str]]:
        """``(label, state, problem)`` of each machine."""
        return [(m.label, m.state, m.problem) for m in self._machines]

    # --- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._context is None:
            raise ServiceError("the remote service needs its experiment's id and directory (a ServiceContext)")
        ssh_log = logging.getLogger("asyncssh")
        if ssh_log.level == logging.NOTSET:  # asyncssh logs every channel at INFO: keep its warnings only
            ssh_log.setLevel(logging.WARNING)
        self._server = AgentServer(heartbeat=self._heartbeat_every, poll_wait=20.0, clock=self._clock)
        await self._server.start()
        try:
            await self._start_machines()
        except BaseException:
            await self.close(kill_trials=False)
            raise
        self._monitor = asyncio.create_task(self._watch_liveness())
        self._settle_timer = asyncio.get_running_loop().call_later(max(1.0, self._adopt_wait), self._settle)

    async def _start_machines(self) -> None:
        assert self._context is not None
        stage = self._context.experiment_dir / "remote"
        self._wheels, self._wheel_digest = await asyncio.to_thread(build_wheels, stage / "wheels")
        self._archive = await asyncio.to_thread(pack_code, self._code_dir, stage / "code.tar.gz")
        if self._trust:
            log.warning("trustUnknownHosts is true: hosts missing from %s are accepted without verifying their key",
                        self._known_hosts)
        for m in self._machines:
            m.task = asyncio.create_task(self._keep_connected(m))
        await asyncio.gather(*(m.first_attempt.wait() for m in self._machines))
        if not any(m.state == "ready" for m in self._machines):
            problems = "; ".join(m.problem for m in self._machines)
            raise ServiceError(f"no remote machine can be used: {problems}",
                               "check machineList (host, port, user, credentials) and that the hosts are up")
        for m in self._machines:
            if m.state != "ready":
                log.error("machine %s is not used for now: %s", m.label, m.problem)

    async def close(self, kill_trials: bool) -> None:
        self._closing = True
        if self._settle_timer is not None:
            self._settle_timer.cancel()
        waits = []
        for env in list(self._envs.values()):
            if env.dead or env.machine.state != "ready":
                continue
            if (kill_trials or not env.trials) and (not env.stopping or kill_trials):
                self._shutdown(env, "the experiment's manager is closing", kill_trials=kill_trials)
            if env.stopping:
                waits.append(self._wait_gone(env, self._kill_grace + 3.0 if kill_trials else 3.0))
        await asyncio.gather(*waits, return_exceptions=True)
        if self._monitor is not None:
            self._monitor.cancel()
        tasks = [m.task for m in self._machines if m.task is not None] + list(self._tasks)
        for t in tasks:
            t.cancel()
        # bounded: a task whose cancellation got lost (an SSH or SFTP call that swallows it) must not hold the
        # manager forever; dropping the connections ends whatever still waits on one
        pending = (await asyncio.wait(tasks, timeout=5.0))[1] if tasks else set()
        for m in self._machines:
            self._drop_connection(m)
            m.disconnected.set()
        if pending:
            for t in pending:
                t.cancel()
            pending = (await asyncio.wait(pending, timeout=5.0))[1]
            if pending:
                log.warning("closing: %d task(s) did not end: %s", len(pending),
                            ", ".join(sorted(str(t.get_coro()) for t in pending))[:500])
        if self._server is not None:
            await self._server.close()

    async def _wait_gone(self, env: _Env, timeout: float) -> None:
        """Until the agent exited (its SSH channel ended) or, for an agent taken over from an earlier
        manager (no channel), until it was handed its shutdown."""
        deadline = self._clock() + timeout
        while self._clock() < deadline:
            if env.process is not None:
                if env.process.exit_status is not None or env.process.exit_signal is not None or env.dead:
                    return
            elif env.shutdown_delivered():
                return
            await asyncio.sleep(0.02)

    # --- connection management -------------------------------------------------------------------
    async def _keep_connected(self, m: _Machine) -> None:
        backoff = 1.0
        while not self._closing:
            try:
                await self._bring_up(m)
            except HostError as e:
                self._drop_connection(m)
                m.problem = e.message
                if m.state not in ("lost",):
                    m.state = "failed" if e.permanent else "down"
                if m.down_since is None:
                    m.down_since = self._clock()
                self._health.down(m.label, e.message)
                if not m.first_attempt.is_set() or e.permanent:
                    log.error("%s%s", e.message, f" (hint: {e.hint})" if e.hint else "")
                m.first_attempt.set()
                if e.permanent:
                    return
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)
                continue
            m.first_attempt.set()
            backoff = 1.0
            if self._closing:
                return
            await m.disconnected.wait()
            m.disconnected.clear()
            self._drop_connection(m)
            if m.state == "ready":
                m.state, m.problem, m.down_since = "down", f"SSH connection to {m.label} lost", self._clock()
                self._health.down(m.label, m.problem)
                log.warning("SSH connection to %s lost; reconnecting", m.label)

    def _drop_connection(self, m: _Machine) -> None:
        if m.listener is not None:
            m.listener.close()
        if m.sftp is not None:
            m.sftp.exit()
        if m.conn is not None:
            m.conn.abort()
        m.conn, m.sftp, m.listener = None, None, None

    def _known_hosts_for(self, m: _Machine) -> Any:
        kh = self._known_hosts
        if not self._trust:
            if not kh.is_file():
                raise HostError(
                    f"cannot verify the host key of {m.label}: {kh} does not exist",
                    f"add the host's key (ssh-keyscan -p {m.cfg.port} {m.cfg.host} >> {kh}, then check its "
                    "fingerprint), or set knownHostsFile, or trustUnknownHosts: true (not verified)",
                    permanent=True,
                )
            return str(kh)
        if kh.is_file():
            try:
                db = asyncssh.read_known_hosts(str(kh))
                try:
                    ipaddress.ip_address(m.cfg.host)
                    addr = m.cfg.host
                except ValueError:
                    addr = ""
                if db.match(m.cfg.host, addr, m.cfg.port)[0]:
                    return db  # listed: verified, so a changed key is refused even with trustUnknownHosts
            except (OSError, ValueError, asyncssh.Error) as e:
                log.warning("cannot read %s: %s", kh, e)
        log.warning("host key of %s is not verified (trustUnknownHosts)", m.label)
        return None

    async def _connect(self, m: _Machine) -> asyncssh.SSHClientConnection:
        cfg = m.cfg
        options: dict[str, Any] = {
            "port": cfg.port,
            "username": cfg.user,
            "known_hosts": self._known_hosts_for(m),
            "connect_timeout": self._connect_timeout,
            "keepalive_interval": max(1.0, self._lost_after / 4),
            "keepalive_count_max": 3,
            "agent_path": None,
            # AES-GCM first: hardware-accelerated on both ends, and cheaper per packet in asyncssh than
            # chacha20-poly1305 (its default); the agent channel sends many small packets
            "encryption_algs": ["aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com",
                                "aes256-ctr", "aes192-ctr", "aes128-ctr"],
        }
        key: Path | None = None
        if cfg.password is not None:
            options.update(password=cfg.password.get_secret_value(), client_keys=None,
                           preferred_auth="password,keyboard-interactive")
        else:
            key = cfg.ssh_key_file or Path.home() / ".ssh" / "id_rsa"
            if not key.is_file():
                raise HostError(f"SSH key file {key} for {m.label} does not exist",
                                "set sshKeyFile (or password) for this machine", permanent=True)
            options["client_keys"] = [str(key)]
            if cfg.ssh_passphrase is not None:
                options["passphrase"] = cfg.ssh_passphrase.get_secret_value()
        try:
            return await asyncssh.connect(cfg.host, **options)
        except asyncssh.PermissionDenied as e:
            how = "password" if cfg.password is not None else f"key {key}"
            raise HostError(f"{m.label} refused the login of user {cfg.user!r} with {how}: {e.reason}",
                            "check user, sshKeyFile/sshPassphrase or password for this machine",
                            permanent=True) from e
        except asyncssh.HostKeyNotVerifiable as e:
            raise HostError(
                f"host key of {m.label} is not trusted: it is not listed in {self._known_hosts} or differs from "
                f"the listed key; refusing to connect ({e.reason})",
                f"if the host is new, add its key (ssh-keyscan -p {cfg.port} {cfg.host} >> {self._known_hosts}) "
                f"after checking the fingerprint; if its key changed on purpose, remove the old one "
                f"(ssh-keygen -R {cfg.host})",
                permanent=True,
            ) from e
        except (asyncssh.KeyImportError, asyncssh.KeyEncryptionError) as e:
            raise HostError(f"cannot load SSH key {key} for {m.label}: {e}",
                            "check sshKeyFile and sshPassphrase", permanent=True) from e
        except (OSError, TimeoutError, asyncssh.Error) as e:
            text = getattr(e, "reason", "") or str(e) or type(e).__name__
            if isinstance(e, TimeoutError):
                text = f"no answer in {self._connect_timeout:g} s"
            raise HostError(f"cannot reach {m.label}: {text}",
                            "check host and port, that sshd runs there, and the network") from e

    async def _run(self, m: _Machine, command: str, timeout: float = 120.0) -> asyncssh.SSHCompletedProcess:
        if m.conn is None:
            raise HostError(f"no SSH connection to {m.label}")
        try:
            return await asyncio.wait_for(m.conn.run(command, check=False), timeout)
        except (OSError, TimeoutError, asyncssh.Error) as e:
            raise HostError(f"command on {m.label} failed: {getattr(e, 'reason', '') or e or type(e).__name__}") from e

    @staticmethod
    def _text(value: Any) -> str:
        return value.decode(errors="replace") if isinstance(value, bytes) else str(value or "")

    def _path_prefix(self, m: _Machine) -> str:
        return f"export PATH={_q(m.cfg.python_path)}:\"$PATH\"; " if m.cfg.python_path else ""

    async def _bring_up(self, m: _Machine) -> None:
        assert self._server is not None and self._context is not None and self._archive is not None
        m.state = "connecting" if m.state != "lost" else "lost"
        m.conn = await self._connect(m)
        conn = m.conn
        m.disconnected.clear()
        self._spawn(self._notice_close(m, conn))
        # Python
        r = await self._run(m, self._path_prefix(m) + "for p in python3 python; do command -v \"$p\" >/dev/null 2>&1 "
                            f"&& exec \"$p\" -c {_q(_PROBE)}; done; echo \"no python3 or python on PATH ($PATH)\" >&2; "
                            "exit 127")
        try:
            info = json.loads(self._text(r.stdout).strip().splitlines()[-1])
            version = tuple(int(x) for x in info["version"])
        except (ValueError, IndexError, KeyError, TypeError):
            raise HostError(f"no usable Python on {m.label}: {self._text(r.stderr).strip() or self._text(r.stdout)}",
                            "install Python >= 3.10 there or set pythonPath for this machine", permanent=True) from None
        if version < MIN_PYTHON:
            raise HostError(
                f"{m.label} has Python {'.'.join(map(str, version))} ({info['exe']}); nnix needs Python >= "
                f"{MIN_PYTHON[0]}.{MIN_PYTHON[1]} on workers",
                "set pythonPath for this machine to a directory holding a newer python3", permanent=True)
        m.python = str(info["exe"])
        work = self._work_dir
        if work == "~" or work.startswith("~/"):
            work = str(info["home"]) + work[1:]
        m.root = str(PurePosixPath(work) / self._context.experiment_id / m.dir_name)
        interpreter = hashlib.sha256(m.python.encode()).hexdigest()[:8]
        m.venv = str(PurePosixPath(work) / "venvs" /
                     f"nnix-{__version__}-{self._wheel_digest}-py{version[0]}{version[1]}-{interpreter}")
        try:
            m.sftp = await conn.start_sftp_client()
        except (OSError, asyncssh.Error) as e:
            raise HostError(f"cannot open SFTP on {m.label}: {e}") from e
        await self._install(m)
        # the reverse forward: the agent's 127.0.0.1:<remote_port> on the worker is our agent endpoint
        try:
            m.listener = await conn.forward_remote_port("127.0.0.1", 0, "127.0.0.1", self._server.port)
        except (OSError, asyncssh.Error) as e:
            raise HostError(f"{m.label} refused the reverse port forward: {e}",
                            "allow TCP forwarding in the worker's sshd (AllowTcpForwarding yes)",
                            permanent=True) from e
        m.remote_port = m.listener.get_port()
        if not self._reuse:  # the GPUs, before any trial asks (in reuse mode the agent's hello tells)
            probe = await self._run(m, self._path_prefix(m) + f"{_q(self._venv_python(m))} -m nnix.agent --probe")
            try:
                m.inventory.update(json.loads(self._text(probe.stdout).strip().splitlines()[-1])["resources"])
            except (ValueError, IndexError, KeyError, TypeError):
                raise HostError(f"the nnix agent does not run on {m.label}: "
                                f"{self._text(probe.stderr).strip()[-500:]}", permanent=True) from None
        await self._adopt(m)
        m.state, m.problem, m.down_since = "ready", "", None
        self._health.ok(m.label)
        await self._reconcile(m, raise_errors=True)
        log.info("machine %s ready (%s, work dir %s)", m.label, m.python, m.root)

    async def _notice_close(self, m: _Machine, conn: asyncssh.SSHClientConnection) -> None:
        await conn.wait_closed()
        if m.conn is conn:
            m.disconnected.set()

    def _venv_python(self, m: _Machine) -> str:
        return f"{m.venv}/bin/python"

    async def _install(self, m: _Machine) -> None:
        """The agent's venv and the trial code on the host, each uploaded only when missing.

        The venv is content-addressed (``<remoteWorkDir>/venvs/nnix-<version>-<digest of the code>-py<X.Y>-
        <hash of the interpreter path>``): it holds nothing but this exact nnix build, so experiments using
        the same build share it, and a changed build gets a new one. It is built in a temporary directory
        and renamed into place, so hosts sharing a home directory (NFS) can race safely.
        """
        assert self._archive is not None and m.sftp is not None and self._context is not None
        archive = self._archive
        m.code_dir = f"{m.root}/code-{archive.sha256[:12]}"
        marker = f"{m.venv}/.nnix-installed"
        check = await self._run(
            m, f"mkdir -p {_q(m.root)}/envs {_q(m.root)}/trials || exit 3; cat {_q(marker)} 2>/dev/null; echo; "
               f"if test -d {_q(m.code_dir)}; then echo code-ok; fi")
        if check.exit_status != 0:
            raise HostError(f"cannot create {m.root} on {m.label}: {self._text(check.stderr).strip()}",
                            "check that remoteWorkDir is writable by this user on the worker", permanent=True)
        lines = self._text(check.stdout).split()
        need_venv, need_code = self._wheel_digest not in lines, "code-ok" not in lines
        try:
            if need_venv:
                await m.sftp.makedirs(f"{m.root}/wheels", exist_ok=True)
                await m.sftp.put([str(w) for w in self._wheels], f"{m.root}/wheels")
            if need_code:
                await m.sftp.put(str(archive.path), f"{m.root}/code.tar.gz")
        except (OSError, asyncssh.Error) as e:
            raise HostError(f"cannot upload to {m.label}:{m.root}: {e}",
                            "check that remoteWorkDir is writable by this user on the worker") from e
        if need_venv:
            py, tmp = _q(m.python), _q(f"{m.venv}.tmp-{secrets.token_hex(4)}")
            names = " ".join(_q(w.name) for w in self._wheels)
            # isolated from the worker's pip configuration; never an index: only the uploaded wheels
            pip = f"install -q --isolated --no-index --no-deps --find-links . {names}"
            # the host's own pip installs into the venv's site-packages (--target: one Python start, not
            # two as with --python); without a host pip, the venv gets its own through ensurepip
            script = (
                f"set -e; export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1; "
                f"mkdir -p {_q(str(PurePosixPath(m.venv).parent))}; {py} -m venv --without-pip {tmp}; "
                f"sp=$({tmp}/bin/python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])'); "
                f"cd {_q(m.root)}/wheels; if {py} -m pip --version >/dev/null 2>&1; then "
                f"{py} -m pip {pip} --target \"$sp\"; "
                f"else {tmp}/bin/python -m ensurepip -q >/dev/null 2>&1 || "
                "{ echo 'no pip: the host python has no pip and ensurepip does not work' >&2; exit 3; }; "
                f"{tmp}/bin/python -m pip {pip}; fi; "
                f"{tmp}/bin/python -c 'import nnix; print(nnix.__version__)'; "
                f"echo {_q(self._wheel_digest)} > {tmp}/.nnix-installed; "
                f"{py} -c 'import os, shutil, sys\ntry: os.rename(sys.argv[1], sys.argv[2])\n"
                f"except OSError: shutil.rmtree(sys.argv[1])' {tmp} {_q(m.venv)}"
            )
            r = await self._run(m, script, timeout=600)
            out = self._text(r.stdout).strip().splitlines()
            if r.exit_status != 0 or __version__ not in out:
                err = self._text(r.stderr).strip()[-800:]
                raise HostError(f"installing nnix {__version__} on {m.label} failed: {err or out}",
                                "the worker needs the venv module (Debian: python3-venv) and pip (python3-pip) "
                                "or ensurepip", permanent=True)
        if need_code:
            r = await self._run(m, f"set -e; cd {_q(m.root)}; t=code.tmp-$$; rm -rf $t; mkdir $t; "
                                   f"tar -xzf code.tar.gz -C $t; mv $t {_q(m.code_dir)}; rm -f code.tar.gz")
            if r.exit_status != 0:
                raise HostError(f"cannot unpack the trial code on {m.label}: {self._text(r.stderr).strip()}")

    async def _write_connect(self, m: _Machine, env_dir: str, env_id: str, token: str) -> None:
        assert m.sftp is not None
        data = json.dumps({"url": f"http://127.0.0.1:{m.remote_port}", "environment_id": env_id, "token": token})
        tmp = f"{env_dir}/.agent.json.{secrets.token_hex(4)}"
        try:
            await m.sftp.makedirs(env_dir, exist_ok=True)
            async with m.sftp.open(tmp, "w", asyncssh.SFTPAttrs(permissions=0o600)) as f:
                await f.write(data)
            await m.sftp.posix_rename(tmp, f"{env_dir}/agent.json")
        except (OSError, asyncssh.Error) as e:
            raise HostError(f"cannot write the agent's connect file on {m.label}: {e}") from e

    async def _adopt(self, m: _Machine) -> None:
        """Point every live agent of this experiment on the host at the current forward (and token)."""
        assert self._server is not None
        r = await self._run(
            m, f"for d in {_q(m.root)}/envs/*/; do [ -f \"$d/agent.pid\" ] || continue; p=$(cat \"$d/agent.pid\"); "
               "kill -0 \"$p\" 2>/dev/null && { [ ! -r /proc/$p/cmdline ] || grep -qa nnix.agent /proc/$p/cmdline; } "
               "&& echo \"$(basename \"$d\") $p\"; done; true")
        found: list[tuple[str, int]] = []
        for line in self._text(r.stdout).splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit():
                found.append((parts[0], int(parts[1])))
        adopted: list[_Env] = []
        for env_id, pid in found:
            env = self._envs.get(env_id)
            endpoint = self._server.endpoint(env_id)
            if env is not None and not env.dead:
                token = env.endpoint.token
            elif endpoint is not None and endpoint.retired is not None:
                token = endpoint.token  # a written-off agent: it will hear 410 and stop its trials
            else:
                ep = self._server.register(env_id, self)
                env = _Env(env_id, ep, single=False, machine=m, dir=f"{m.root}/envs/{env_id}", started_at=self._clock(),
                           pid=pid, adopted=True, draining=True)
                self._envs[env_id] = env
                m.envs[env_id] = env
                token = ep.token
                adopted.append(env)
                log.info("found agent %s (pid %d) of this experiment on %s: taking it over", env_id, pid, m.label)
            await self._write_connect(m, f"{m.root}/envs/{env_id}", env_id, token)
        if found:
            await self._run(m, "kill -USR1 " + " ".join(str(p) for _, p in found) + " 2>/dev/null; true")
        if adopted:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*(e.hello.wait() for e in adopted)), self._adopt_wait)

    async def _start_env(self, m: _Machine, single: bool, attach: list[Attach] | None = None) -> _Env:
        assert self._server is not None
        if m.conn is None:
            raise HostError(f"no SSH connection to {m.label}")
        m.generation += 1
        env_id = f"m{m.index}-{'t' if single else 'r'}{m.generation}-{secrets.token_hex(3)}"
        ep = self._server.register(env_id, self)
        env = _Env(env_id, ep, single=single, machine=m, dir=f"{m.root}/envs/{env_id}", started_at=self._clock())
        self._envs[env_id] = env
        m.envs[env_id] = env
        for a in attach or []:
            ep.send(a)
        await self._write_connect(m, env.dir, env_id, ep.token)
        args = [
            self._venv_python(m), "-m", "nnix.agent", "--connect-file", f"{env.dir}/agent.json",
            *self._agent_options, *(["--single"] if single else []),
        ]
        command = (f"cd {_q(m.code_dir)} && {self._path_prefix(m)}exec {' '.join(_q(a) for a in args)} "
                   f">> {_q(env.dir + '/agent.log')} 2>&1 < /dev/null")
        try:
            env.process = await m.conn.create_process(command)
        except (OSError, asyncssh.Error) as e:
            self._forget_env(env)
            raise HostError(f"cannot start the agent on {m.label}: {e}") from e
        proc = env.process
        exited = asyncio.ensure_future(proc.wait())
        hello = asyncio.ensure_future(env.hello.wait())
        try:
            done, _ = await asyncio.wait({exited, hello}, timeout=self._start_timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            hello.cancel()
        if hello not in done or not env.hello.is_set():
            exited.cancel()
            tail = await self._log_tail(m, env)
            self._forget_env(env)
            if env.refused:
                raise HostError(f"the agent on {m.label} was refused: {env.refused}", permanent=True)
            what = "exited" if exited in done else f"did not connect back within {self._start_timeout:g} s"
            raise HostError(f"the nnix agent on {m.label} {what}: {tail or 'no log'}",
                            f"see {env.dir}/agent.log on the worker")
        self._spawn(self._watch_agent(env, exited))
        return env

    async def _log_tail(self, m: _Machine, env: _Env) -> str:
        with contextlib.suppress(HostError):
            r = await self._run(m, f"tail -n 5 {_q(env.dir + '/agent.log')} 2>/dev/null", timeout=10)
            return " | ".join(self._text(r.stdout).strip().splitlines())[-600:]
        return ""

    def _forget_env(self, env: _Env) -> None:
        env.dead = True
        if self._server is not None:
            self._server.retire(env.env_id, "this environment was replaced")
        env.machine.envs.pop(env.env_id, None)
        if env.machine.reuse_env is env:
            env.machine.reuse_env = None
        if env in env.machine.spares:
            env.machine.spares.remove(env)

    async def _watch_agent(self, env: _Env, exited: asyncio.Future[Any]) -> None:
        result = await exited
        m = env.machine
        if self._closing or env.dead:
            return
        if m.conn is None or m.conn.is_closed() or m.disconnected.is_set():
            return  # the connection went away, not the agent: it keeps running; we reconnect
        status, sig = getattr(result, "exit_status", None), getattr(result, "exit_signal", None)
        if status is None and sig is None:
            return  # channel closed without status: treat like a connection problem
        if status == 0 and not env.trials:
            self._forget_env(env)
            return
        how = f"signal {sig[0]}" if sig else f"exit status {status}"
        log.warning("the agent %s on %s ended (%s) holding trials %s; starting a new one to take them over",
                    env.env_id, m.label, how, sorted(env.trials) or "none")
        self._replace_env(env)

    def _replace_env(self, env: _Env) -> None:
        for tid in list(env.trials):
            t = self._trials.get(tid)
            if t is not None and t.env is env:
                if t.started is not None and not t.started.done():
                    # handed to this agent but not started: it goes back to the queue (see submit)
                    t.unstarted = f"its agent {env.env_id} on {env.machine.label} was replaced before it started"
                    t.started.set_result(None)
                t.env = None
        env.trials.clear()
        self._forget_env(env)
        self._spawn(self._reconcile(env.machine))

    async def _reconcile(self, m: _Machine, raise_errors: bool = False) -> None:
        """Give the machine a reuse agent if it needs one, and an agent to every trial of it that has none."""
        async with m.lock:
            if m.state != "ready" or self._closing:
                return
            try:
                if self._reuse and (m.reuse_env is None or m.reuse_env.dead):
                    m.reuse_env = await self._start_env(m, single=False)
                for t in [t for t in self._trials.values() if t.machine is m and t.env is None and t.started is None]:
                    attach = Attach(t.trial_id, t.location, t.pid, t.pid_start, t.last_index)
                    if self._reuse:
                        env = m.reuse_env
                        assert env is not None
                        env.endpoint.send(attach)
                    else:
                        env = await self._start_env(m, single=True, attach=[attach])
                    t.env = env
                    env.trials.add(t.trial_id)
                    log.info("trial %s on %s is now watched by agent %s", t.trial_id, m.label, env.env_id)
                if not self._reuse:
                    self._spawn(self._replenish(m))
            except HostError as e:
                if raise_errors:
                    raise
                log.error("%s", e)
                m.problem = e.message
                if m.conn is not None:
                    m.conn.abort()  # reconnect and try again

    async def _take_single(self, m: _Machine) -> _Env:
        """Non-reuse: a fresh agent for one trial. One is kept started ahead on each machine, so a trial
        does not wait for an SSH exec and a Python start."""
        env: _Env | None = None
        while m.spares and env is None:
            spare = m.spares.pop(0)
            if not spare.dead and not spare.stopping:
                env = spare
        if env is None:
            env = await self._start_env(m, single=True)
        self._spawn(self._replenish(m))
        return env

    async def _replenish(self, m: _Machine) -> None:
        if m.replenishing or m.spares or self._closing or m.state != "ready":
            return
        m.replenishing = True
        try:
            env = await self._start_env(m, single=True)
            if self._closing or m.state != "ready":
                self._shutdown(env, "not needed")
            else:
                m.spares.append(env)
        except HostError as e:
            log.warning("could not start a spare agent on %s: %s", m.label, e.message)
        finally:
            m.replenishing = False

    # --- liveness --------------------------------------------------------------------------------
    async def _watch_liveness(self) -> None:
        while not self._closing:
            await asyncio.sleep(min(1.0, self._lost_after / 8))
            now = self._clock()
            for m in self._machines:
                if m.state == "lost" or m.checking:
                    continue
                owned = any(t.machine is m for t in self._trials.values())
                if m.state in ("down", "failed", "connecting"):
                    if owned and m.down_since is not None and now - m.down_since > self._lost_after:
                        self._declare_lost(m, f"unreachable for {now - m.down_since:.0f} s ({m.problem})")
                    continue
                for env in m.live_envs():
                    if env.stopping:
                        continue
                    if env.endpoint.last_contact is None and not env.adopted and (
                            now - env.started_at < self._start_timeout):
                        continue  # still starting (a slow Python start on a loaded host): _start_env times it
                    seen = env.endpoint.last_contact or env.started_at
                    if now - seen > self._lost_after:
                        m.checking = True
                        self._spawn(self._check_host(m, env, now - seen))
                        break

    async def _check_host(self, m: _Machine, env: _Env, silent: float) -> None:
        """An agent has been silent too long: is its host gone (SSH does not answer either), or only the
        agent (dead, or alive but stuck: then it is killed)? One SSH round trip, with a short timeout."""
        pid_file = _q(env.dir + "/agent.pid")
        probe = (f"p={env.pid or ''}; [ -n \"$p\" ] || p=$(cat {pid_file} 2>/dev/null); "
                 "if [ -n \"$p\" ] && kill -0 \"$p\" 2>/dev/null; then echo \"alive $p\"; else echo dead; fi")
        pid: int | None = None
        try:
            r = await self._run(m, probe, timeout=min(5.0, max(1.0, self._lost_after / 2)))
            words = self._text(r.stdout).split()
            alive = len(words) == 2 and words[0] == "alive" and words[1].isdigit()
            pid = int(words[1]) if alive else None
        except HostError as e:
            self._declare_lost(m, f"no sign of life for {silent:.0f} s and SSH does not answer ({e.message})")
            return
        finally:
            m.checking = False
        if env.dead:
            return
        if alive and pid:
            log.warning("agent %s on %s is alive but silent for %.0f s: killing and replacing it",
                        env.env_id, m.label, silent)
            with contextlib.suppress(HostError):
                await self._run(m, f"kill -9 {pid} 2>/dev/null; true", timeout=5)
        else:
            log.warning("agent %s on %s is gone; replacing it", env.env_id, m.label)
        self._replace_env(env)

    def _declare_lost(self, m: _Machine, why: str) -> None:
        if m.state == "lost" or self._closing:
            return
        m.state, m.problem = "lost", f"host {m.label} lost: {why}"
        if m.down_since is None:
            m.down_since = self._clock()
        self._health.down(m.label, m.problem)
        trials = [t for t in self._trials.values() if t.machine is m]
        log.error("%s; lostHostPolicy %s applies to its trials %s", m.problem, self._policy,
                  sorted(t.trial_id for t in trials) or "(none)")
        for t in trials:  # one still starting goes back to the queue, for another machine (submit)
            self._write_off(t, m.problem, self._policy)
        for env in list(m.envs.values()):
            env.trials.clear()
            self._forget_env(env)
            if self._server is not None:
                self._server.retire(env.env_id, f"{m.problem}: this environment's trials were written off")
        m.reuse_env = None
        m.spares.clear()
        if m.conn is not None:
            m.conn.abort()

    # --- fleet hooks (nnix.services.fleet) -----------------------------------------------------------
    def _env_gone(self, env: _Env) -> bool:
        return env.dead

    def _may_host(self, t: _Trial, env: _Env) -> bool:
        return t.machine is env.machine

    def _greeted(self, env: _Env, hello: Hello) -> None:
        env.machine.inventory.update(hello.resources)
        env.hello.set()

    def _heartbeat(self, env: _Env, beat: Heartbeat) -> None:
        env.machine.inventory.update(beat.resources)

    def _released(self, t: _Trial) -> None:
        t.machine.gpus.release(t.trial_id)

    def _trial_left(self, t: _Trial, env: _Env) -> None:
        if env.draining and not env.trials and not env.stopping:
            self._shutdown(env, "no more trials for this agent")

    def _retire_idle(self, env: _Env) -> None:
        self._shutdown(env, "taken over; nothing left to watch")

    def _refused(self, env: _Env, reason: str) -> None:
        env.refused = reason
        env.machine.problem = reason

    # --- the TrainingService protocol ------------------------------------------------------------
    async def submit(self, spec: TrialSpec) -> Started | None:
        ready = [m for m in self._machines if m.state == "ready" and (not self._reuse or m.reuse_env is not None)
                 and self._health.usable(m.label)]
        if not ready:
            self._give_up_if_hopeless("check the machines named (network, sshd, load, agent.log under remoteWorkDir); "
                                      "`nnix resume` runs the waiting trials once one is usable")
            self._reason = "no remote machine is available now: " + "; ".join(
                self._health.describe(m.label) if self._health.failing(m.label) else
                f"{m.label} {m.state}" + (f" ({m.problem})" if m.problem else "") for m in self._machines)
            return None
        n = len(self._machines)
        load = {m.index: 0 for m in self._machines}
        for t in self._trials.values():
            load[t.machine.index] += 1
        ready.sort(key=lambda m: (load[m.index], (m.index - self._rr) % n))
        chosen, alloc, reasons, never = None, None, [], []
        for m in ready:
            try:
                a = m.gpus.allocate(spec.trial_id)
            except GpuUnavailableError as e:
                never.append(f"{m.label}: {e.message}")
                continue
            if a is None:
                reasons.append(f"{m.label}: {m.gpus.waiting_reason()}")
                continue
            chosen, alloc = m, a
            break
        if chosen is None or alloc is None:
            if never and not reasons and len(never) == len(self._machines):
                raise GpuUnavailableError("no machine can ever run this trial: " + "; ".join(never),
                                          "lower trialGpuNumber, or fix gpuIndices of the machines")
            self._reason = "; ".join(reasons + never)
            return None
        m = chosen
        self._rr = m.index + 1
        self._reason = ""
        out = f"{m.root}/trials/{spec.trial_id}"
        env_vars = {**spec.env, **m.gpus.env(alloc)}
        remote = replace(spec, code_dir=Path(m.code_dir), output_dir=Path(out), env=env_vars)
        loop = asyncio.get_running_loop()
        t = _Trial(spec.trial_id, None, out, machine=m, started=loop.create_future())
        assert t.started is not None
        self._trials[spec.trial_id] = t
        try:
            if self._reuse:
                if m.reuse_env is None or m.reuse_env.dead:
                    raise HostError(f"the agent of {m.label} is being replaced")
                env = m.reuse_env
            else:
                # a fresh agent for this trial; stop waiting for it at once if its host is declared lost
                # meanwhile (``_declare_lost`` resolves ``t.started`` with None): starting an agent on a
                # host whose link is gone can hang for the whole start timeout, and the manager waits here
                take = asyncio.ensure_future(self._take_single(m))
                waits: set[asyncio.Future[Any]] = {take, t.started}
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if not take.done():
                    take.cancel()
                    with contextlib.suppress(BaseException):
                        await take
                    return self._requeue_unstarted(t, t.unstarted or f"{m.label} went away")
                env = take.result()
            started = await self._handshake(t, env, remote)
        except HostError as e:
            return self._requeue_unstarted(t, f"cannot start it on {m.label}: {e.message}")
        except TimeoutError:
            if t.env is not None and not t.env.dead:
                t.env.endpoint.send(Kill(spec.trial_id))  # in case it starts after all
            where = f" (see {t.env.dir}/agent.log on the worker)" if t.env is not None else ""
            return self._requeue_unstarted(
                t, f"the agent on {m.label} did not start it within {self._start_timeout:g} s{where}")
        except StartFailed as e:
            raise ServiceError(f"trial {spec.trial_id} could not start on {m.label}: {e}",
                               "check trialCommand and that the code directory is usable on the worker") from None
        if started is None:  # its host was lost, or its agent replaced, meanwhile
            return self._requeue_unstarted(t, t.unstarted or f"{m.label} went away")
        t.started = None
        self._health.ok(m.label)
        return replace(started, output_dir=f"{m.key}:{out}", environment_id=t.env.env_id if t.env else "",
                       gpus=alloc.indices or None)

    def _requeue_unstarted(self, t: _Trial, why: str) -> Started | None:
        """A trial that did not start on its machine goes back to the queue (counted: a Requeued event with the
        reason), whatever lostHostPolicy says; the machine backs off if it is still there (nnix.services.health).
        Returns None (what submit returns: not started).
        Never an experiment error: that is for when no machine can run anything (see submit)."""
        self._forget_trial(t)
        m = t.machine
        note = ""
        if m.state == "ready" and not self._closing:
            note = f"; {m.label} gets no trial for {self._health.failed(m.label, why):g} s"
        self._requeue(t.trial_id, why, note)
        return None

    async def reattach(
        self,
        trial_id: str,
        output_dir: Path,
        pid: int | None,
        pid_start: str | None,
        after_index: int,
        gpus: tuple[int, ...] | None,
    ) -> None:
        text = str(output_dir)
        key, sep, rest = text.partition(":/")
        m = self._by_key.get(key) if sep else None
        if m is None:
            self._emit(Exited(trial_id, None, None, "",
                              f"the trial ran at {text}, which is not a machine of machineList any more"))
            return
        t = _Trial(trial_id, None, "/" + rest, pid, pid_start, after_index, machine=m)
        if gpus:
            m.gpus.restore(trial_id, gpus)
        self._adopt_trial(t)
        if t.env is None and trial_id in self._trials and m.state == "ready":
            self._spawn(self._reconcile(m))
