"""Machines: what :class:`~nnix.services.cluster.ClusterService` does when its launcher has a fixed list of
machines (the optional capability :class:`~nnix.services.launcher.HostLauncher`; SSH has it, no engine does).

Instead of environments started on demand, each machine of ``launcher.hosts``

1. has a connection kept up by the service (``open``/``closed``, reconnect with backoff up to 30 s) and a state
   (``connecting``, ``ready``, ``down``, ``lost``, ``failed``: a permanent error, not retried), and health of its
   own (:mod:`nnix.services.health`, keyed by the machine's label). ``start`` fails only when no machine can be
   used;
2. runs one agent for all its trials in reuse mode, the machine's GPU rules being its capacity; non-reuse: one
   agent per trial, plus one started ahead per machine for the next trial;
3. gets an agent that died (its ``ended`` with a status, or found dead or stuck by a probe) replaced *in place*:
   a new agent on the same machine re-attaches the trials of the old one (they are process groups of their own
   and keep running) with :class:`~nnix.agent.protocol.Attach` and the last line index. (An engine environment's
   end ends its trials instead: that stays the default.)
4. has a silent agent probed: the machine does not answer (lost: ``lostHostPolicy`` for its trials, the machine
   comes back later) or only the agent is gone or stuck (killed and replaced);
5. on resume, has the live agents of the experiment found and pointed at this manager (``find_agents``,
   ``write_connect``, ``wake``) instead of ``cluster.json``'s saved tokens and port;
6. places trials before any environment exists: the least loaded ready machine whose GPU rules admit the trial
   (``CUDA_VISIBLE_DEVICES`` set, ``Started.gpus`` told), and each machine's agents have their own agent URL
   (``agent_url``: SSH's reverse forward).

:class:`Machines` is the placement of ``ClusterService`` that does this (a strategy object it holds, chosen when
its launcher is a ``HostLauncher``); the module docstring of :mod:`nnix.services.remote` tells what users see of
it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from nnix.agent.protocol import Attach, Heartbeat, Hello, Kill
from nnix.errors import GpuUnavailableError, ServiceError
from nnix.model.runs import Exited, RunnerEvent, Started, TrialSpec
from nnix.services.agent_server import AgentServer
from nnix.services.fleet import AgentOptions, Fleet, FleetEnv, FleetTrial, StartFailed
from nnix.services.gpu import GpuInfo, GpuScheduler
from nnix.services.launcher import EnvRequest, EnvStatus, Host, HostError, HostLauncher
from nnix.services.mirror import OutputMirror

if TYPE_CHECKING:
    from typing import Unpack  # Python 3.11: in annotations only (nnix runs on 3.10)

    from nnix.services.base import ServiceContext

__all__ = ["Env", "Machine", "Machines", "Trial"]

log = logging.getLogger("nnix.services.remote")


class ReportedInventory:
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
class Env(FleetEnv):
    """An agent on a machine of the fixed list (its launcher's ``handle`` once launched; None: found running)."""

    machine: Machine
    launched_at: float
    state: Literal["launching", "ended"] = "launching"
    handle: str | None = None
    pid: int | None = None
    draining: bool = False  # takes no new trial
    refused: str | None = None
    hello: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def dead(self) -> bool:
        return self.state == "ended"

    @property
    def dir(self) -> str:
        return self.machine.host.env_dir(self.env_id)


@dataclass(eq=False, kw_only=True)
class Trial(FleetTrial[Env]):
    machine: Machine  # the machine it runs on


@dataclass(eq=False)
class Machine:
    """A machine of the launcher's list: its state, agents and trials (the launcher's ``host`` knows the rest)."""

    host: Host
    gpus: GpuScheduler
    inventory: ReportedInventory
    state: Literal["connecting", "ready", "down", "lost", "failed"] = "connecting"
    problem: str = ""
    down_since: float | None = None
    reuse_env: Env | None = None
    spares: list[Env] = field(default_factory=list)  # non-reuse: an agent started ahead, for the next trial
    replenishing: bool = False
    envs: dict[str, Env] = field(default_factory=dict)
    generation: int = 0
    first_attempt: asyncio.Event = field(default_factory=asyncio.Event)
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    task: asyncio.Task[None] | None = None
    checking: bool = False

    @property
    def index(self) -> int:
        return self.host.index

    @property
    def label(self) -> str:
        return self.host.label

    @property
    def key(self) -> str:
        return self.host.key

    def live_envs(self) -> list[Env]:
        return [e for e in self.envs.values() if not e.dead]


class Machines(Fleet[Env, Trial]):
    """The placement of ``ClusterService`` over a fixed list of machines (see the module docstring): its launcher
    is a :class:`~nnix.services.launcher.HostLauncher`. ``adopt_wait`` is how long a resume waits for the agents
    it found to say hello; ``lost_after`` is the machines' ``lostHostTimeout``."""

    def __init__(
        self,
        platform: str,
        emit: Callable[[RunnerEvent], None],
        launcher: HostLauncher,
        *,
        context: ServiceContext | None,
        mirror: OutputMirror | None,
        stream_output: bool,
        reuse: bool,
        trial_gpu_number: int | None,
        policy: Literal["fail", "requeue"],
        lost_after: float,
        adopt_wait: float,
        **agent: Unpack[AgentOptions],
    ) -> None:
        self.platform = platform
        super().__init__(emit, mirror, hosts=[h.label for h in launcher.hosts], lost_after=lost_after,
                         context=context, stream_output=stream_output, **agent)
        self._reuse = reuse
        self._policy = policy
        self._monitor: asyncio.Task[None] | None = None
        self._hl = launcher
        self._adopt_wait = adopt_wait
        self._machines = [Machine(h, GpuScheduler(inv, trial_gpu_number=trial_gpu_number, **h.gpu_rules), inv)
                          for h, inv in ((h, ReportedInventory()) for h in launcher.hosts)]
        self._by_key = {m.key: m for m in self._machines}
        self._rr = 0
        self._settle_timer: asyncio.TimerHandle | None = None

    @property
    def machines(self) -> list[Machine]:
        return list(self._machines)

    # --- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        await self._start_on_machines()
        self._save()  # the record says a manager ran here: `nnix stop` looks for agents it may leave behind

    async def close(self, kill_trials: bool) -> None:
        await self._close_machines(kill_trials)
        # agents left running, or a machine out of reach whose agents may live on (a lost host's retry for a
        # day): `nnix stop` (and `nnix platform clean`) end them
        unreachable = [m.label for m in self._machines if m.state in ("down", "lost")]
        if unreachable:
            log.warning("agents of this experiment may be left on %s (not reachable now): `nnix stop %s` ends "
                        "them once it is", ", ".join(unreachable),
                        self._context.experiment_id if self._context is not None else "")
        self._save(left=bool(unreachable) or any(not e.dead and (e.trials or not e.stopping)
                                                 for e in self._envs.values()))

    def set_demand(self, waiting: int) -> None:
        """Machines start no agent ahead of demand (one per machine, or one spare each): nothing to do."""

    async def _start_on_machines(self) -> None:
        self._server = AgentServer(heartbeat=self._heartbeat_every, poll_wait=20.0, clock=self._clock)
        await self._server.start()
        try:
            await self._hl.prepare()  # what every machine gets (SSH: wheels and the code archive), staged once
            for m in self._machines:
                m.task = asyncio.create_task(self._keep_connected(m))
            await asyncio.gather(*(m.first_attempt.wait() for m in self._machines))
            if not any(m.state == "ready" for m in self._machines):
                problems = "; ".join(m.problem for m in self._machines)
                raise ServiceError(f"no {self.platform} machine can be used: {problems}",
                                   "check machineList (host, port, user, credentials) and that the hosts are up")
        except BaseException:
            await self._close_machines(kill_trials=False)
            raise
        for m in self._machines:
            if m.state != "ready":
                log.error("machine %s is not used for now: %s", m.label, m.problem)
        self._monitor = asyncio.create_task(self._watch_liveness())
        self._settle_timer = asyncio.get_running_loop().call_later(max(1.0, self._adopt_wait), self._settle)

    async def _close_machines(self, kill_trials: bool) -> None:
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
            self._hl.drop(m.host)
            m.disconnected.set()
        if pending:
            for t in pending:
                t.cancel()
            pending = (await asyncio.wait(pending, timeout=5.0))[1]
            if pending:
                log.warning("closing: %d task(s) did not end: %s", len(pending),
                            ", ".join(sorted(str(t.get_coro()) for t in pending))[:500])
        with contextlib.suppress(Exception):
            await self._hl.close()
        if self._server is not None:
            await self._server.close()

    async def _wait_gone(self, env: Env, timeout: float) -> None:
        """Until the agent exited (its launcher says it ended) or, for an agent taken over from an earlier
        manager (not launched here), until it was handed its shutdown."""
        deadline = self._clock() + timeout
        while self._clock() < deadline:
            if env.handle is not None:
                if env.dead or (await self._hl.poll([env.handle]))[env.handle].state == "ended":
                    return
            elif env.shutdown_delivered():
                return
            await asyncio.sleep(0.02)

    # --- connection management -------------------------------------------------------------------
    async def _keep_connected(self, m: Machine) -> None:
        backoff = 1.0
        while not self._closing:
            try:
                await self._bring_up(m)
            except HostError as e:
                self._hl.drop(m.host)
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
            self._hl.drop(m.host)
            if m.state == "ready":
                m.state, m.problem, m.down_since = "down", f"SSH connection to {m.label} lost", self._clock()
                self._health.down(m.label, m.problem)
                log.warning("SSH connection to %s lost; reconnecting", m.label)

    async def _bring_up(self, m: Machine) -> None:
        assert self._server is not None
        m.state = "connecting" if m.state != "lost" else "lost"
        link = await self._hl.open(m.host)
        m.disconnected.clear()
        self._spawn(self._notice_close(m, link))
        resources = await self._hl.setup(m.host, self._server.port)
        if resources is not None:  # non-reuse: the GPUs, before any trial asks (in reuse mode the agent's hello tells)
            m.inventory.update(resources)
        await self._adopt(m)
        m.state, m.problem, m.down_since = "ready", "", None
        self._health.ok(m.label)
        await self._reconcile(m, raise_errors=True)
        log.info("machine %s ready (%s)", m.label, self._hl.describe(m.host))

    async def _notice_close(self, m: Machine, link: object) -> None:
        if await self._hl.closed(m.host, link):
            m.disconnected.set()

    async def _adopt(self, m: Machine) -> None:
        """Point every live agent of this experiment on the machine at this manager (and a token)."""
        assert self._server is not None
        found = await self._hl.find_agents(m.host)
        adopted: list[Env] = []
        for env_id, pid in found:
            env = self._envs.get(env_id)
            endpoint = self._server.endpoint(env_id)
            if env is not None and not env.dead:
                token = env.endpoint.token
            elif endpoint is not None and endpoint.retired is not None:
                token = endpoint.token  # a written-off agent: it will hear 410 and stop its trials
            else:
                ep = self._server.register(env_id, self)
                env = Env(env_id, ep, single=False, machine=m, launched_at=self._clock(), pid=pid, adopted=True,
                          draining=True)
                self._envs[env_id] = env
                m.envs[env_id] = env
                token = ep.token
                adopted.append(env)
                log.info("found agent %s (pid %d) of this experiment on %s: taking it over", env_id, pid, m.label)
            await self._hl.write_connect(m.host, env_id, token)
        await self._hl.wake(m.host, [p for _, p in found])
        if adopted:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*(e.hello.wait() for e in adopted)), self._adopt_wait)

    # --- agents ----------------------------------------------------------------------------------
    async def _start_env(self, m: Machine, single: bool, attach: list[Attach] | None = None) -> Env:
        assert self._server is not None
        m.generation += 1
        env_id = f"m{m.index}-{'t' if single else 'r'}{m.generation}-{secrets.token_hex(3)}"
        ep = self._server.register(env_id, self)
        env = Env(env_id, ep, single=single, machine=m, launched_at=self._clock())
        self._envs[env_id] = env
        m.envs[env_id] = env
        for a in attach or []:
            ep.send(a)
        request = EnvRequest(env_id, single, self._hl.agent_url(m.host), ep.token, self._agent_options, host=m.index)
        try:
            env.handle = await self._hl.launch(request)
        except HostError:
            self._forget_env(env)
            raise
        exited = asyncio.ensure_future(self._hl.ended(env.handle))
        hello = asyncio.ensure_future(env.hello.wait())
        try:
            done, _ = await asyncio.wait({exited, hello}, timeout=self._start_timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            hello.cancel()
        if hello not in done or not env.hello.is_set():
            exited.cancel()
            tail = await self._hl.log_tail(m.host, env_id)
            self._forget_env(env)
            if env.refused:
                raise HostError(f"the agent on {m.label} was refused: {env.refused}", permanent=True)
            what = "exited" if exited in done else f"did not connect back within {self._start_timeout:g} s"
            raise HostError(f"the nnix agent on {m.label} {what}: {tail or 'no log'}",
                             f"see {env.dir}/agent.log on the worker")
        self._spawn(self._watch_agent(env, exited))
        return env

    def _forget_env(self, env: Env) -> None:
        env.state = "ended"
        if env.handle is not None:
            self._hl.forget(env.handle)
        if self._server is not None:
            self._server.retire(env.env_id, "this environment was replaced")
        m = env.machine
        m.envs.pop(env.env_id, None)
        if m.reuse_env is env:
            m.reuse_env = None
        if env in m.spares:
            m.spares.remove(env)

    async def _watch_agent(self, env: Env, exited: asyncio.Future[EnvStatus]) -> None:
        status = await exited
        m = env.machine
        if self._closing or env.dead:
            return
        if not self._hl.connected(m.host) or m.disconnected.is_set():
            return  # the connection went away, not the agent: it keeps running; we reconnect
        if status.state != "ended":
            return  # its channel closed without a status: treat like a connection problem
        if status.exit_status == 0 and not env.trials:
            self._forget_env(env)
            return
        log.warning("the agent %s on %s ended (%s) holding trials %s; starting a new one to take them over",
                    env.env_id, m.label, status.reason, sorted(env.trials) or "none")
        self._replace_env(env)

    def _replace_env(self, env: Env) -> None:
        m = env.machine
        for tid in list(env.trials):
            t = self._trials.get(tid)
            if t is not None and t.env is env:
                if t.started is not None and not t.started.done():
                    # handed to this agent but not started: it goes back to the queue (see submit)
                    t.unstarted = f"its agent {env.env_id} on {m.label} was replaced before it started"
                    t.started.set_result(None)
                t.env = None
        env.trials.clear()
        self._forget_env(env)
        self._spawn(self._reconcile(m))

    async def _reconcile(self, m: Machine, raise_errors: bool = False) -> None:
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
                self._hl.disconnect(m.host)  # reconnect and try again

    async def _take_single(self, m: Machine) -> Env:
        """Non-reuse: a fresh agent for one trial. One is kept started ahead on each machine, so a trial
        does not wait for an SSH exec and a Python start."""
        env: Env | None = None
        while m.spares and env is None:
            spare = m.spares.pop(0)
            if not spare.dead and not spare.stopping:
                env = spare
        if env is None:
            env = await self._start_env(m, single=True)
        self._spawn(self._replenish(m))
        return env

    async def _replenish(self, m: Machine) -> None:
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
                            now - env.launched_at < self._start_timeout):
                        continue  # still starting (a slow Python start on a loaded host): _start_env times it
                    seen = env.endpoint.last_contact or env.launched_at
                    if now - seen > self._lost_after:
                        m.checking = True
                        self._spawn(self._check_host(m, env, now - seen))
                        break

    async def _check_host(self, m: Machine, env: Env, silent: float) -> None:
        """An agent has been silent too long: is its machine gone (it does not answer either), or only the
        agent (dead, or alive but stuck: then it is killed)? One round trip, with a short timeout."""
        try:
            pid = await self._hl.probe(m.host, env.env_id, env.pid, timeout=min(5.0, max(1.0, self._lost_after / 2)))
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
            await self._hl.kill(m.host, pid)
        else:
            log.warning("agent %s on %s is gone; replacing it", env.env_id, m.label)
        self._replace_env(env)

    def _declare_lost(self, m: Machine, why: str) -> None:
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
        self._hl.disconnect(m.host)

    # --- fleet hooks (nnix.services.fleet) ------------------------------------------------------------
    def _env_gone(self, env: Env) -> bool:
        return env.state == "ended"

    def _may_host(self, t: Trial, env: Env) -> bool:
        return t.machine is env.machine  # a trial of machine A is never watched by an agent on machine B

    def _retire_idle(self, env: Env) -> None:
        self._shutdown(env, "taken over; nothing left to watch")

    def _greeted(self, env: Env, hello: Hello) -> None:
        env.machine.inventory.update(hello.resources)
        env.hello.set()

    def _released(self, t: Trial) -> None:
        t.machine.gpus.release(t.trial_id)

    def _heartbeat(self, env: Env, beat: Heartbeat) -> None:
        env.machine.inventory.update(beat.resources)

    def _trial_left(self, t: Trial, env: Env) -> None:
        if env.draining and not env.trials and not env.stopping:
            self._shutdown(env, "no more trials for this agent")

    def _refused(self, env: Env, reason: str) -> None:
        env.refused = reason
        env.machine.problem = reason

    # --- the TrainingService protocol ------------------------------------------------------------
    async def submit(self, spec: TrialSpec) -> Started | None:
        ready = [m for m in self._machines if m.state == "ready" and (not self._reuse or m.reuse_env is not None)
                 and self._health.usable(m.label)]
        if not ready:
            self._give_up_if_hopeless("check the machines named (network, sshd, load, agent.log under remoteWorkDir); "
                                      "`nnix resume` runs the waiting trials once one is usable")
            self._reason = f"no {self.platform} machine is available now: " + "; ".join(
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
        remote = self._hl.place(spec, m.host)
        remote = replace(remote, env={**remote.env, **m.gpus.env(alloc)})
        out = str(remote.output_dir)
        loop = asyncio.get_running_loop()
        t = Trial(spec.trial_id, None, out, machine=m, started=loop.create_future())
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
                    return self._requeue_on_machine(t, m, t.unstarted or f"{m.label} went away")
                env = take.result()
            started = await self._handshake(t, env, remote)
        except HostError as e:
            return self._requeue_on_machine(t, m, f"cannot start it on {m.label}: {e.message}")
        except TimeoutError:
            if t.env is not None and not t.env.dead:
                t.env.endpoint.send(Kill(spec.trial_id))  # in case it starts after all
            where = f" (see {t.env.dir}/agent.log on the worker)" if t.env is not None else ""
            return self._requeue_on_machine(
                t, m, f"the agent on {m.label} did not start it within {self._start_timeout:g} s{where}")
        except StartFailed as e:
            raise ServiceError(f"trial {spec.trial_id} could not start on {m.label}: {e}",
                               "check trialCommand and that the code directory is usable on the worker") from None
        if started is None:  # its host was lost, or its agent replaced, meanwhile
            return self._requeue_on_machine(t, m, t.unstarted or f"{m.label} went away")
        t.started = None
        self._health.ok(m.label)
        return replace(started, output_dir=self._hl.output_location(spec, m.host),
                       environment_id=t.env.env_id if t.env else "", gpus=alloc.indices or None)

    def _requeue_on_machine(self, t: Trial, m: Machine, why: str) -> Started | None:
        """A trial that did not start on its machine goes back to the queue (counted: a Requeued event with the
        reason), whatever lostHostPolicy says; the machine backs off if it is still there (nnix.services.health).
        Returns None (what submit returns: not started).
        Never an experiment error: that is for when no machine can run anything (see submit)."""
        self._forget_trial(t)
        note = ""
        if m.state == "ready" and not self._closing:
            note = f"; {m.label} gets no trial for {self._health.failed(m.label, why):g} s"
        self._requeue(t.trial_id, why, note)
        return None

    async def reattach(self, trial_id: str, output_dir: Path, pid: int | None, pid_start: str | None,
                       after_index: int, gpus: tuple[int, ...] | None) -> None:
        text = str(output_dir)
        key, sep, rest = text.partition(":/")
        m = self._by_key.get(key) if sep else None
        if m is None:
            self._emit(Exited(trial_id, None, None, "",
                              f"the trial ran at {text}, which is not a machine of machineList any more"))
            return
        t = Trial(trial_id, None, "/" + rest, pid, pid_start, after_index, machine=m)
        if gpus:
            m.gpus.restore(trial_id, gpus)
        self._adopt_trial(t)
        if t.env is None and trial_id in self._trials and m.state == "ready":
            self._spawn(self._reconcile(m))

