"""The remote training service (``platform: remote``): trials on SSH workers, each running the nnix agent.

What is SSH (steps 1 to 5 below, probes, ``nnix platform clean``) is :class:`~nnix.services.ssh.SshLauncher`;
this module is the fleet over it: machine states, agents per machine, scheduling, lost hosts, resume.
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
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import asyncssh

from nnix.agent.protocol import Attach, Heartbeat, Hello, Kill
from nnix.agent.runner import Exited, RunnerEvent, Started, TrialSpec
from nnix.errors import GpuUnavailableError, ServiceError
from nnix.services.agent_server import AgentServer
from nnix.services.base import Configured, Emit, ServiceContext
from nnix.services.cluster import EnvRequest
from nnix.services.fleet import AgentOptions, Fleet, FleetEnv, FleetTrial, StartFailed
from nnix.services.gpu import GpuInfo, GpuScheduler
from nnix.services.mirror import OutputMirror
from nnix.services.ssh import HostError, SshHost, SshLauncher

if TYPE_CHECKING:
    from typing import Unpack  # Python 3.11: in annotations only (nnix runs on 3.10)

    from nnix.config import ExperimentConfig, RemoteConfig, RemoteMachineConfig

__all__ = ["HostError", "RemoteService"]  # HostError: nnix.services.ssh

log = logging.getLogger("nnix.services.remote")

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


@dataclass(eq=False, kw_only=True)
class _Machine(SshHost):
    """A machine: what SSH knows of it (:class:`~nnix.services.ssh.SshHost`), and its agents, trials and state."""

    gpus: GpuScheduler
    inventory: _ReportedInventory
    state: Literal["connecting", "ready", "down", "lost", "failed"] = "connecting"
    problem: str = ""
    down_since: float | None = None
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

    def live_envs(self) -> list[_Env]:
        return [e for e in self.envs.values() if not e.dead]


class RemoteService(Configured, Fleet[_Env, _Trial]):
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
        self._reuse = reuse
        self._policy = lost_host_policy
        self._adopt_wait = adopt_wait
        self._machines: list[_Machine] = []
        for i, m in enumerate(machines):
            inv = _ReportedInventory()
            sched = GpuScheduler(inv, trial_gpu_number=trial_gpu_number, gpu_indices=m.gpu_indices,
                                 max_trial_number_per_gpu=m.max_trial_number_per_gpu,
                                 use_active_gpu=m.use_active_gpu)
            self._machines.append(_Machine(index=i, cfg=m, gpus=sched, inventory=inv))
        self._by_key = {m.key: m for m in self._machines}
        # one policy for failed starts and lost hosts (nnix.services.health); giving up needs every machine
        # failing for lostHostTimeout, and never less than one agent start timeout
        self._init_fleet(emit, OutputMirror(context.experiment_dir) if context is not None else None,
                         hosts=[m.label for m in self._machines], lost_after=lost_host_timeout, **agent)
        self.launcher = SshLauncher(
            self._machines, experiment_id=context.experiment_id if context is not None else "",
            stage_dir=context.experiment_dir / "remote" if context is not None else None, code_dir=code_dir,
            reuse=reuse, trust_unknown_hosts=trust_unknown_hosts, known_hosts_file=known_hosts_file,
            remote_work_dir=remote_work_dir, connect_timeout=connect_timeout,
            keepalive_interval=max(1.0, self._lost_after / 4))
        self._rr = 0
        self._server: AgentServer | None = None
        self._monitor: asyncio.Task[None] | None = None
        self._settle_timer: asyncio.TimerHandle | None = None

    @classmethod
    def _options_from_config(cls, config: ExperimentConfig, emit: Emit, context: ServiceContext | None,
                             options: dict[str, Any]) -> dict[str, Any]:
        ts = cast("RemoteConfig", config.training_service)
        return {"machines": list(ts.machine_list), "context": context, "code_dir": config.trial_code_directory,
                "reuse": ts.reuse_mode, "trial_gpu_number": config.trial_gpu_number,
                "trust_unknown_hosts": ts.trust_unknown_hosts, "known_hosts_file": ts.known_hosts_file,
                "remote_work_dir": ts.remote_work_dir, "lost_host_policy": ts.lost_host_policy,
                "lost_host_timeout": float(ts.lost_host_timeout), **options}

    # --- `nnix platform clean` --------------------------------------------------------------------
    async def leftovers(self, remove: bool = False) -> list[tuple[str, list[str], str]]:
        """For each machine: ``(label, directories nnix left under remoteWorkDir, problem)``; with ``remove``
        they are deleted (see :meth:`nnix.services.ssh.SshLauncher.leftovers`)."""
        return await self.launcher.leftovers(remove)

    # --- views (tests, CLI) ----------------------------------------------------------------------
    def machines(self) -> list[tuple[str, str, str]]:
        """``(label, state, problem)`` of each machine."""
        return [(m.label, m.state, m.problem) for m in self._machines]

    # --- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._context is None:
            raise ServiceError("the remote service needs its experiment's id and directory (a ServiceContext)")
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
        await self.launcher.prepare()  # wheels and the code archive, staged once for every machine
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
            self.launcher.drop(m)
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
                if env.dead or (await self.launcher.poll([env.env_id]))[env.env_id].state == "ended":
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
                self.launcher.drop(m)
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
            self.launcher.drop(m)
            if m.state == "ready":
                m.state, m.problem, m.down_since = "down", f"SSH connection to {m.label} lost", self._clock()
                self._health.down(m.label, m.problem)
                log.warning("SSH connection to %s lost; reconnecting", m.label)

    async def _bring_up(self, m: _Machine) -> None:
        assert self._server is not None
        m.state = "connecting" if m.state != "lost" else "lost"
        m.conn = await self.launcher.connect(m)
        conn = m.conn
        m.disconnected.clear()
        self._spawn(self._notice_close(m, conn))
        resources = await self.launcher.setup(m, self._server.port)
        if resources is not None:  # non-reuse: the GPUs, before any trial asks (in reuse mode the agent's hello tells)
            m.inventory.update(resources)
        await self._adopt(m)
        m.state, m.problem, m.down_since = "ready", "", None
        self._health.ok(m.label)
        await self._reconcile(m, raise_errors=True)
        log.info("machine %s ready (%s, work dir %s)", m.label, m.python, m.root)

    async def _notice_close(self, m: _Machine, conn: asyncssh.SSHClientConnection) -> None:
        await conn.wait_closed()
        if m.conn is conn:
            m.disconnected.set()

    async def _adopt(self, m: _Machine) -> None:
        """Point every live agent of this experiment on the host at the current forward (and token)."""
        assert self._server is not None
        found = await self.launcher.find_agents(m)
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
                env = _Env(env_id, ep, single=False, machine=m, dir=m.env_dir(env_id), started_at=self._clock(),
                           pid=pid, adopted=True, draining=True)
                self._envs[env_id] = env
                m.envs[env_id] = env
                token = ep.token
                adopted.append(env)
                log.info("found agent %s (pid %d) of this experiment on %s: taking it over", env_id, pid, m.label)
            await self.launcher.write_connect(m, m.env_dir(env_id), env_id, token)
        await self.launcher.wake(m, [p for _, p in found])
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
        env = _Env(env_id, ep, single=single, machine=m, dir=m.env_dir(env_id), started_at=self._clock())
        self._envs[env_id] = env
        m.envs[env_id] = env
        for a in attach or []:
            ep.send(a)
        request = EnvRequest(env_id, single, f"http://127.0.0.1:{m.remote_port}", ep.token, self._agent_options,
                             host=m.index)
        try:
            proc = env.process = self.launcher.process(await self.launcher.launch(request))
        except HostError:
            self._forget_env(env)
            raise
        assert proc is not None
        exited = asyncio.ensure_future(proc.wait())
        hello = asyncio.ensure_future(env.hello.wait())
        try:
            done, _ = await asyncio.wait({exited, hello}, timeout=self._start_timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            hello.cancel()
        if hello not in done or not env.hello.is_set():
            exited.cancel()
            tail = await self.launcher.log_tail(m, env_id)
            self._forget_env(env)
            if env.refused:
                raise HostError(f"the agent on {m.label} was refused: {env.refused}", permanent=True)
            what = "exited" if exited in done else f"did not connect back within {self._start_timeout:g} s"
            raise HostError(f"the nnix agent on {m.label} {what}: {tail or 'no log'}",
                            f"see {env.dir}/agent.log on the worker")
        self._spawn(self._watch_agent(env, exited))
        return env

    def _forget_env(self, env: _Env) -> None:
        env.dead = True
        self.launcher.forget(env.env_id)
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
        try:
            pid = await self.launcher.probe(m, env.env_id, env.pid, timeout=min(5.0, max(1.0, self._lost_after / 2)))
        except HostError as e:
            self._declare_lost(m, f"no sign of life for {silent:.0f} s and SSH does not answer ({e.message})")
            return
        finally:
            m.checking = False
        if env.dead:
            return
        if pid:
            log.warning("agent %s on %s is alive but silent for %.0f s: killing and replacing it",
                        env.env_id, m.label, silent)
            await self.launcher.kill(m, pid)
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
        remote = self.launcher.place(spec, m)
        remote = replace(remote, env={**remote.env, **m.gpus.env(alloc)})
        out = str(remote.output_dir)
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
        return replace(started, output_dir=self.launcher.output_location(spec, m),
                       environment_id=t.env.env_id if t.env else "", gpus=alloc.indices or None)

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
        self, trial_id: str, output_dir: Path, pid: int | None, pid_start: str | None, after_index: int,
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
