"""Cluster services: an engine (Slurm, Ray, Kubernetes, OpenPAI, ...) only starts and stops *environments*.

An environment is one engine job (an ``sbatch`` job, a Ray actor, a Kubernetes Job, an OpenPAI job) whose
command is the nnix agent (``python -m nnix.agent``). The agent connects back to the manager's agent
endpoint over HTTP, and everything else (dispatching trials, metrics, the trial's output, kill, exit status)
goes through the agent protocol of :mod:`nnix.agent.protocol`, shared by every engine. An engine module
therefore implements only :class:`Launcher`; :class:`ClusterService` does the rest.

Each environment runs one trial at a time and gets the resources of one trial from its engine. Reuse mode
(``reuseMode: true``, the default): an environment takes the next trial when one ends, and is stopped after
``idle_timeout`` seconds without work. Non-reuse: one environment per trial (the agent runs with
``--single`` and exits after reporting it).

How many environments: never more than the trials waiting or running (the manager tells the service how many
wait through :meth:`ClusterService.set_demand`), so an experiment near its end does not queue useless jobs.

Where agents run is the service's *placement*, a strategy object chosen once from the launcher's declared
abilities: :class:`Engines` (this module: the engine starts and places environments on demand) or, for a launcher
with a fixed list of machines (the optional capability :class:`~nnix.services.launcher.HostLauncher`: SSH),
:class:`~nnix.services.hosts.Machines`: connections kept up, one agent per machine (or per trial), agents replaced in
place, lost hosts, GPU placement per machine, resume by adoption. Both are a :class:`~nnix.services.fleet.Fleet`
(the shared bookkeeping of agents and trials); :class:`ClusterService` holds one and hands it every call.
The contract types (:class:`Launcher`, :class:`EnvRequest`, :class:`EnvStatus`) live in
:mod:`nnix.services.launcher` and are re-exported here.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import secrets
import signal
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from nnix.agent.protocol import Heartbeat, Hello
from nnix.errors import ServiceError
from nnix.model.runs import Exited, RunnerEvent, Started, TrialSpec
from nnix.services.agent_server import AgentServer
from nnix.services.base import CapacityChanged, Configured, Emit, LeftTrial, ServiceContext
from nnix.services.fleet import RECORD, AgentOptions, Fleet, FleetEnv, FleetTrial, StartFailed, write_private
from nnix.services.hosts import Machine, Machines
from nnix.services.launcher import (
    Admits,
    EnvRequest,
    EnvStatus,
    HostLauncher,
    Launcher,
    LostPolicy,
    MultiTrial,
    Reclaiming,
    SharesFiles,
)
from nnix.services.mirror import OutputMirror

if TYPE_CHECKING:
    from typing import Unpack  # Python 3.11: in annotations only (nnix runs on 3.10)

    from nnix.config import ExperimentConfig

__all__ = ["RECORD", "ClusterService", "Engines", "EnvRequest", "EnvStatus", "Launcher", "Placement", "Reclaiming",
           "SharedStorageLayout"]

log = logging.getLogger("nnix.services.cluster")


class SharedStorageLayout:
    """``place`` / ``output_location`` of launchers whose environments mount the experiment's directory on shared
    storage (see :func:`nnix.services.packing.stage_shared`): at ``remote`` in the environments, at ``local`` here;
    trials run in ``code/`` and write to ``trials/<trial>/``."""

    remote: str
    local: Path

    def place(self, spec: TrialSpec) -> TrialSpec:
        return replace(spec, code_dir=Path(f"{self.remote}/code"),
                       output_dir=Path(f"{self.remote}/trials/{spec.trial_id}"))

    def output_location(self, spec: TrialSpec) -> str:
        return str(self.local / "trials" / spec.trial_id)


_SIGNALS_FROM_OUTSIDE = (signal.SIGTERM, signal.SIGKILL, signal.SIGINT, signal.SIGHUP)


def _by_signal(exited: Exited) -> bool:
    """Whether a trial died of a signal an engine sends when it ends a job (directly, or as its shell's
    ``128 + signal`` exit status)."""
    if exited.signal is not None:
        return exited.signal in _SIGNALS_FROM_OUTSIDE
    code = exited.exit_code
    return code is not None and (-code in _SIGNALS_FROM_OUTSIDE or code - 128 in _SIGNALS_FROM_OUTSIDE)


def _guess_host() -> str:
    """This machine's address on its default route (no packet is sent), else loopback."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("10.255.255.255", 1))
        addr = str(s.getsockname()[0])
        if addr and not addr.startswith("0."):
            return addr
    return "127.0.0.1"


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


@dataclass(eq=False, kw_only=True)
class EngineEnv(FleetEnv):
    """An environment an engine started (or an earlier manager did: ``adopted``), known by its engine ``handle``."""

    launched_at: float
    state: Literal["launching", "pending", "ready", "ended"] = "launching"
    handle: str | None = None
    idle_since: float | None = None
    reason: str = ""
    connected: bool = False  # its agent said hello (at least once)
    resources: dict[str, Any] = field(default_factory=dict)  # as its agent last reported them
    ended_seen: float | None = None  # when the engine first said it ended


@dataclass(eq=False, kw_only=True)
class EngineTrial(FleetTrial[EngineEnv]):
    placed: TrialSpec | None = None  # admitted by the launcher's placement hook (None: a trial of an earlier manager)


class Engines(Fleet[EngineEnv, EngineTrial]):
    """The placement of :class:`ClusterService` whose environments an engine starts and places (Slurm, Ray,
    Kubernetes, OpenPAI; see the module docstring).

    Resume: the agent endpoint's port and each environment's token and engine handle are kept in
    ``<experiment dir>/cluster.json``. A resumed manager listens on the same port with the same tokens (a port
    below the kernel's ephemeral range, so that no outgoing connection takes it while no manager runs), so
    the agents of the environments that kept running reconnect by themselves (they retry with backoff)
    and report the trials they still run; their metrics are neither lost nor duplicated (line indices).
    A trial whose environment ended meanwhile ends FAILED with the engine's reason.
    """

    def __init__(
        self,
        platform: str,
        emit: Callable[[RunnerEvent], None],
        launcher: Launcher,
        *,
        context: ServiceContext | None,
        mirror: OutputMirror | None,
        stream_output: bool,
        reuse: bool,
        policy: Literal["fail", "requeue"],
        idle_timeout: float,
        advertise_host: str | None,
        max_environments: int | None,
        lost_after: float,
        engine_poll_interval: float,
        end_grace: float,
        port: int,
        **agent: Unpack[AgentOptions],
    ) -> None:
        self.platform = platform
        # failed starts (environments that die before their agent connects, agents that do not start a trial
        # in time) and when to give up: the policy shared with machines (nnix.services.health). The engine is
        # one "host"; three failed starts in a row, or failing for lost_after, stop the experiment
        super().__init__(emit, mirror, hosts=[platform], lost_after=lost_after, max_failures=3,
                         noun=f"{platform} environment", context=context, stream_output=stream_output, **agent)
        self.launcher = launcher
        self._reuse = reuse
        self._idle_timeout = float(idle_timeout)
        self._advertise = advertise_host
        self._max_envs = max_environments
        self._engine_poll = float(engine_poll_interval)
        self._end_grace = float(end_grace)
        self._capacity = max(1, launcher.capacity) if reuse and isinstance(launcher, MultiTrial) else 1
        self._admits = launcher if isinstance(launcher, Admits) else None
        self._requeue_lost = policy == "requeue"
        self._port = port
        self._demand = 0
        self._fatal: ServiceError | None = None
        self._counter = 0
        self._settle_deadline = 0.0
        self._settled = True  # until start finds environments of an earlier manager
        self._monitor: asyncio.Task[None] | None = None

    def _recorded_envs(self) -> dict[str, dict[str, Any]]:
        """Every environment not known to have ended, with its token and engine handle (None until the engine gave
        one: an environment is recorded before it is submitted, so that a manager killed at any point leaves a
        record of it)."""
        return {e.env_id: {"token": e.endpoint.token, "handle": e.handle, "single": e.single}
                for e in self._envs.values() if e.state != "ended"}

    # --- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        await self.launcher.prepare()  # first: some engines learn the address environments reach us at
        advertise = self._advertise or self.launcher.advertise_host or _guess_host()
        bind = "127.0.0.1" if _is_loopback(advertise) else "0.0.0.0"  # agents authenticate by token
        saved = self._load()
        port = self._port or int(saved.get("port") or 0)
        heartbeat = self._heartbeat_every
        self._server = AgentServer(host=bind, port=port, heartbeat=heartbeat, poll_wait=20.0, clock=self._clock,
                                   stable_port=True)
        try:
            await self._server.start()
        except ServiceError:
            if not port or self._port:
                await self.launcher.close()
                raise
            log.warning("port %d of the earlier manager is taken: environments still running cannot reconnect",
                        port)
            self._server = AgentServer(host=bind, port=0, heartbeat=heartbeat, poll_wait=20.0, clock=self._clock)
            await self._server.start()
        self._url = f"http://{advertise}:{self._server.port}"
        envs = saved.get("envs")
        for env_id, info in (envs.items() if isinstance(envs, dict) else []):
            if not isinstance(info, dict) or not isinstance(info.get("token"), str) or not info["token"]:
                continue
            handle = info.get("handle")
            ep = self._server.register(str(env_id), self, token=info["token"])
            env = EngineEnv(str(env_id), ep, bool(info.get("single")), launched_at=self._clock(), state="pending",
                       handle=str(handle) if handle else None, adopted=True)
            self._envs[env.env_id] = env
        # unsettled from here: their agents may say hello while the engine is asked (it listens already), with trials
        # the manager has not re-attached yet, not strays to kill
        self._settled = not self._envs
        await self._adopt_recorded()
        if self._envs:
            log.info("%d %s environment(s) of the earlier manager may reconnect", len(self._envs), self.platform)
        self._settle_deadline = self._clock() + (self._lost_after if self._envs else 0.0)
        self._settled = not self._envs
        self._save()
        self._monitor = asyncio.create_task(self._watch())

    async def _adopt_recorded(self) -> None:
        """Resume: each environment the earlier manager recorded is taken over as the engine has it (started now if
        that manager died before its agent was started), or dropped when the engine has no such environment (never
        submitted, or gone); an environment recorded before the engine gave its handle is found by its name. None is
        ever counted as a failed start (nnix.services.launcher.Reclaiming)."""
        adopted = [e for e in self._envs.values() if e.adopted and e.state != "ended"]
        if not adopted:
            return
        if not isinstance(self.launcher, Reclaiming):
            for env in adopted:
                if env.handle is None:  # the engine cannot be asked: nothing to watch
                    self._end_env(env, "its manager died before it was submitted")
            return
        for env in adopted:
            request = EnvRequest(env.env_id, env.single, self._url, env.endpoint.token, self._agent_options)
            try:
                handle = await self.launcher.adopt(request, env.handle)
            except Exception as e:  # the engine is asked again at each poll
                log.warning("cannot take over %s environment %s (%s) of the earlier manager: %s", self.platform,
                            env.env_id, env.handle, e)
                if env.handle is None:
                    self._end_env(env, f"not found: {e}")
                continue
            if handle is None:
                log.info("%s environment %s (%s) of the earlier manager is not on the engine any more: dropped",
                         self.platform, env.env_id, env.handle or "never submitted")
                self._end_env(env, "not on the engine any more")
                continue
            if handle != env.handle:
                log.info("%s environment %s of the earlier manager found as %s", self.platform, env.env_id, handle)
            env.handle = handle

    async def close(self, kill_trials: bool) -> None:
        self._closing = True
        if self._monitor is not None:
            self._monitor.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*(t for t in [self._monitor, *self._tasks] if t is not None), return_exceptions=True)
        stops = []
        for env in list(self._envs.values()):
            if env.state == "ended":
                continue
            if env.trials and not kill_trials:
                continue  # keeps running: a resumed manager takes it over
            self._shutdown(env, "the experiment's manager is closing", kill_trials=True)
            for tid in env.trials:
                t = self._trials.get(tid)
                if t is not None:
                    t.killing = True
            stops.append(env)
        if stops:
            deadline = self._clock() + (self._kill_grace + 2.0 if kill_trials else 1.0)
            while self._clock() < deadline and any(not e.shutdown_delivered() for e in stops if e.state == "ready"):
                await asyncio.sleep(0.05)
        if any(e.handle is None for e in stops) and isinstance(self.launcher, Reclaiming):
            # submissions cut short by the closing: the engine may have them all the same (found by their names)
            with contextlib.suppress(Exception):
                found = await self.launcher.environments()
                for e in stops:
                    e.handle = e.handle or found.get(e.env_id)
        await asyncio.gather(*(self._stop_env(e, "the experiment's manager is closing") for e in stops),
                             return_exceptions=True)
        self._save(left=False)
        with contextlib.suppress(Exception):
            await self.launcher.close()
        if self._server is not None:
            await self._server.close()

    async def _stop_env(self, env: EngineEnv, why: str) -> None:
        env.stopping = True
        if env.handle is not None:
            try:
                await self.launcher.stop(env.handle)
            except Exception as e:  # stopping is best effort; the engine's own limits end it otherwise
                log.warning("could not stop %s environment %s (%s): %s", self.platform, env.env_id, env.handle, e)
        self._end_env(env, why)

    def _end_env(self, env: EngineEnv, why: str) -> None:
        if env.state == "ended":
            return
        env.state, env.reason = "ended", why
        if self._server is not None:
            self._server.retire(env.env_id, why)
        for tid in sorted(env.trials):
            t = self._trials.get(tid)
            if t is not None:  # one still starting waits for another environment (submit)
                self._write_off(t, f"its {self.platform} environment {env.handle or env.env_id} ended: {why}",
                                "requeue" if self._requeue_lost and not self._closing else None)
        env.trials.clear()
        if not self._closing:
            self._save()

    # --- environments --------------------------------------------------------------------------
    def set_demand(self, waiting: int) -> None:
        """How many trials wait for an environment now (the manager says so before each ``submit`` round)."""
        self._demand = max(0, waiting)

    def _live(self) -> list[EngineEnv]:
        return [e for e in self._envs.values() if e.state != "ended" and not e.stopping]

    def _slots(self, env: EngineEnv) -> int:
        """How many more trials ``env`` can take (its capacity, less what it runs)."""
        if env.stopping or env.state == "ended" or (env.single and (env.used or bool(env.claims))):
            return 0  # (a non-reuse agent of the earlier manager that speaks of a trial ran its one: no other)
        return max(0, self._capacity - len(env.trials))

    def _free(self, env: EngineEnv) -> bool:
        return self._slots(env) > 0

    def _ensure_envs(self) -> None:
        if self._closing or self._fatal is not None or not self._health.usable(self.platform):
            return
        live = self._live()
        coming = sum(self._slots(e) for e in live)
        want = -(-(max(self._demand, 1) - coming) // self._capacity)  # environments, rounded up
        if self._max_envs is not None:
            want = min(want, self._max_envs - len(live))
        for _ in range(max(0, want)):
            self._counter += 1
            env_id = f"e{self._counter}-{secrets.token_hex(3)}"
            assert self._server is not None
            ep = self._server.register(env_id, self)
            env = EngineEnv(env_id, ep, single=not self._reuse, launched_at=self._clock())
            self._envs[env_id] = env
            self._spawn(self._launch(env))
        if want > 0:
            self._save()  # before the engine hears of them: a manager killed meanwhile leaves a record of each

    async def _launch(self, env: EngineEnv) -> None:
        request = EnvRequest(env.env_id, env.single, self._url, env.endpoint.token, self._agent_options)
        try:
            env.handle = await self.launcher.launch(request)
        except ServiceError as e:
            log.error("cannot start a %s environment: %s", self.platform, e.message)
            self._fatal = e
            self._end_env(env, e.message)
            return
        except Exception as e:
            self._failure(env, f"{type(e).__name__}: {e}")
            return
        if env.state == "launching":
            env.state = "pending"
        log.info("%s environment %s submitted as %s", self.platform, env.env_id, env.handle)
        self._save()
        if env.stopping or self._closing:
            await self._stop_env(env, "not needed any more")

    def _failure(self, env: EngineEnv, why: str) -> None:
        """An environment ended before its agent connected: a failed start (backoff; see nnix.services.health)."""
        log.error("%s environment %s (%s) ended before its agent connected: %s", self.platform, env.env_id,
                  env.handle, why)
        self._end_env(env, why)
        self._health.failed(self.platform, f"environment {env.handle or env.env_id} ended before the nnix agent in "
                                           f"it connected back: {why}")

    async def _watch(self) -> None:
        """Engine states, liveness, idle environments; once every ``engine_poll_interval`` seconds."""
        while not self._closing:
            await asyncio.sleep(self._engine_poll)
            try:
                await self._check()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # an engine hiccup must not end the experiment
                log.warning("checking %s environments failed: %s", self.platform, e)

    async def _check(self) -> None:
        now = self._clock()
        envs = [e for e in self._envs.values() if e.state != "ended" and e.handle is not None]
        states = await self.launcher.poll([e.handle for e in envs if e.handle is not None]) if envs else {}
        for env in envs:
            st = states.get(env.handle or "")
            if st is None or st.state == "unknown":
                continue
            if st.state == "pending":
                env.reason = st.reason
            elif st.state == "ended":
                if env.state in ("launching", "pending") and not env.endpoint.hello and not env.stopping:
                    if env.adopted:  # it ended while no manager ran (its trial reported): not a failed start
                        log.info("%s environment %s (%s) of the earlier manager ended while no manager ran: %s",
                                 self.platform, env.env_id, env.handle, st.reason or "ended")
                        self._end_env(env, st.reason or "ended")
                        continue
                    self._failure(env, st.reason or "ended")
                    continue
                if not env.trials or env.stopping:
                    self._end_env(env, st.reason or "ended")
                    continue
                held = [t for t in (self._trials.get(tid) for tid in sorted(env.trials)) if t is not None]
                if held and all(t.held is not None for t in held) and not st.killed:
                    for t in held:  # its own exit stands: the engine did not end the job
                        assert t.held is not None
                        self._exited(t, env, t.held)
                    self._end_env(env, st.reason or "ended")
                    continue
                # its agent may still be delivering the trial's exit: a short grace
                if env.ended_seen is None:
                    env.ended_seen = now
                elif now - env.ended_seen >= self._end_grace:
                    self._end_env(env, st.reason or "ended")
        for t in list(self._trials.values()):  # exits held for the engine's word: it said nothing
            if t.held is not None and t.env is not None and t.env.state != "ended" and t.env.ended_seen is None and (
                    now - t.held_at >= 2 * self._engine_poll + self._end_grace):
                self._exited(t, t.env, t.held)
        for env in list(self._envs.values()):
            if env.state != "ready" or env.stopping:
                continue
            seen = env.endpoint.last_contact or env.launched_at
            if now - seen > self._lost_after:
                log.warning("%s environment %s (%s) silent for %.0f s: stopping it", self.platform, env.env_id,
                            env.handle, now - seen)
                self._spawn(self._stop_env(env, f"its agent was silent for {now - seen:.0f} s"))
            elif not env.trials and env.idle_since is not None and self._demand == 0 and (
                    now - env.idle_since > self._idle_timeout):
                log.info("%s environment %s idle for %.0f s: stopping it", self.platform, env.env_id,
                         now - env.idle_since)
                self._shutdown(env, "idle")
                self._spawn(self._stop_env(env, "idle"))
        if self._settle_deadline and now >= self._settle_deadline:
            self._settle()

    def _settle(self) -> None:
        """After a resume: trials whose environment never came back are over; strays in adopted environments
        are killed, and adopted environments with nothing left to run are stopped (nnix.services.fleet)."""
        self._settle_deadline = 0.0
        for t in list(self._trials.values()):
            if t.env is None and t.started is None:
                self._forget_trial(t)
                self._emit(Exited(t.trial_id, None, None, "",
                                  f"its {self.platform} environment did not come back after the manager restarted"))
        super()._settle()

    # --- fleet hooks (nnix.services.fleet) -----------------------------------------------------
    def _env_gone(self, env: EngineEnv) -> bool:
        return env.state == "ended"

    def _retire_idle(self, env: EngineEnv) -> None:
        self._spawn(self._stop_env(env, "taken over; nothing left to run"))

    def _greeted(self, env: EngineEnv, hello: Hello) -> None:
        env.state, env.reason, env.resources = "ready", "", dict(hello.resources)
        if env.idle_since is None:
            env.idle_since = self._clock()
        self._health.ok(self.platform)

    def _hello_done(self, env: EngineEnv, hello: Hello) -> None:
        if not env.connected:
            env.connected = True
            log.info("%s environment %s (%s) connected from %s", self.platform, env.env_id, env.handle,
                     hello.resources.get("hostname", "?"))
            self._emit(CapacityChanged(f"{self.platform} environment {env.env_id} is ready"))  # type: ignore[arg-type]

    def _hold_exit(self, t: EngineTrial, env: EngineEnv, exited: Exited) -> bool:
        """Killed by a signal nnix did not send: the engine may be ending the environment (time limit, scancel,
        preemption) and signals the trial with it; its reason is the one to show, so the exit waits for the
        engine's word (the next polls, see _check)."""
        if env.stopping or not _by_signal(exited):
            return False
        t.held_at = self._clock()
        return True

    def _released(self, t: EngineTrial) -> None:
        if self._admits is not None and t.placed is not None:  # admitted here (not a trial of an earlier manager)
            self._admits.release(t.trial_id)

    def _heartbeat(self, env: EngineEnv, beat: Heartbeat) -> None:
        env.resources = dict(beat.resources)

    def _trial_left(self, t: EngineTrial, env: EngineEnv) -> None:
        if not env.trials:
            env.idle_since = self._clock()
        if env.single:
            env.stopping = True  # its agent exits by itself; the engine job ends with it

    def _refused(self, env: EngineEnv, reason: str) -> None:
        self._fatal = ServiceError(f"the nnix agent in {self.platform} environment {env.handle} was refused: "
                                   f"{reason}", "install the manager's nnix version in the environments")

    # --- the TrainingService protocol ----------------------------------------------------------
    async def submit(self, spec: TrialSpec) -> Started | None:
        if self._fatal is not None:
            raise self._fatal
        free = [e for e in self._envs.values() if e.state == "ready" and self._free(e)]
        if not free:
            self._give_up_if_hopeless(
                f"check that the environments can run the agent (python with nnix) and reach the "
                f"manager at {self._url} (set nniManagerIp to an address they can reach)")
            self._ensure_envs()
            pending = [e for e in self._live() if e.state in ("launching", "pending")]
            if not self._health.usable(self.platform) and not pending:
                self._reason = (f"no new {self.platform} environment for "
                                f"{self._health.retry_in(self.platform):.0f} s: {self._health.describe(self.platform)}")
            elif pending:
                detail = "; ".join(f"{e.handle or 'submitting'}" + (f" ({e.reason})" if e.reason else "")
                                   for e in pending[:3])
                self._reason = f"waiting for {len(pending)} {self.platform} environment(s) to start: {detail}"
            else:
                self._reason = f"every {self.platform} environment is busy"
            return None
        placed = self.launcher.place(spec)
        chosen: tuple[EngineEnv, TrialSpec] | None = None
        for env in sorted(free, key=lambda e: e.launched_at):  # the oldest first
            admitted = placed if self._admits is None else self._admits.admit(placed, env.handle or "", env.resources)
            if admitted is not None:
                chosen = (env, admitted)
                break
        if chosen is None:
            self._reason = f"no {self.platform} environment can take it now (placement: {self.launcher.kind})"
            return None
        env, placed = chosen
        loop = asyncio.get_running_loop()
        t = EngineTrial(spec.trial_id, None, self.launcher.output_location(spec), placed=placed,
                   started=loop.create_future())
        env.idle_since = None
        try:
            started = await self._handshake(t, env, placed)
        except TimeoutError:
            self._forget_trial(t)
            why = f"the agent of {self.platform} environment {env.handle} did not start it within " \
                  f"{self._start_timeout:g} s"
            self._spawn(self._stop_env(env, f"its agent did not start trial {spec.trial_id} within "
                                            f"{self._start_timeout:g} s"))
            return self._requeue_unstarted(spec.trial_id, why)
        except StartFailed as e:
            self._forget_trial(t)
            raise ServiceError(f"trial {spec.trial_id} could not start in {self.platform} environment "
                               f"{env.handle}: {e}", "check trialCommand and the code directory") from None
        if started is None:  # the environment died under it: the trial waits for another one
            return self._requeue_unstarted(spec.trial_id, t.unstarted)
        t.started = None
        self._reason = ""
        self._demand = max(0, self._demand - 1)
        self._health.ok(self.platform)
        return replace(started, output_dir=t.location, environment_id=env.env_id)

    def _requeue_unstarted(self, trial_id: str, why: str) -> Started | None:
        """A trial that did not start goes back to the queue, and the engine backs off (nnix.services.health).
        Returns None."""
        delay = self._health.failed(self.platform, why)
        self._requeue(trial_id, why)
        log.warning("no new %s environment for %g s", self.platform, delay)
        return None

    async def reattach(
        self, trial_id: str, output_dir: Path, pid: int | None, pid_start: str | None, after_index: int,
        gpus: tuple[int, ...] | None,
    ) -> None:
        t = EngineTrial(trial_id, None, str(output_dir), last_index=after_index)
        self._adopt_trial(t)
        if t.env is None and not self._settle_deadline:
            self._settle_deadline = self._clock()


class Placement(Protocol):
    """Where a :class:`ClusterService`'s agents run, and everything that follows from it: :class:`Engines` (an engine
    starts and places environments on demand) or :class:`~nnix.services.hosts.Machines` (a fixed list of machines).
    The training-service calls, less ``platform``."""

    async def start(self) -> None: ...

    async def submit(self, spec: TrialSpec) -> Started | None: ...

    async def cancel(self, trial_id: str) -> None: ...

    async def reattach(self, trial_id: str, output_dir: Path, pid: int | None, pid_start: str | None,
                       after_index: int, gpus: tuple[int, ...] | None) -> None: ...

    def set_demand(self, waiting: int) -> None: ...

    def waiting_reason(self) -> str: ...

    async def close(self, kill_trials: bool) -> None: ...


@runtime_checkable
class _Reusable(Protocol):
    """A platform config with ``reuseMode`` (every platform of nnix but hybrid)."""

    reuse_mode: bool


@runtime_checkable
class _Idles(Protocol):
    """A platform config with ``idleTimeout`` (the engines': nnix.config.services.ClusterCommonConfig)."""

    idle_timeout: float


class ClusterService(Configured):
    """A training service whose trials run in nnix agents that a :class:`Launcher` starts (see the module docstring).

    Subclasses set ``platform`` and implement ``make_launcher``; ``from_config`` does the rest. What depends on the
    launcher is its *placement* (:class:`Placement`), chosen once here: a launcher with a fixed list of machines
    (:class:`~nnix.services.launcher.HostLauncher`: SSH) gets :class:`~nnix.services.hosts.Machines`
    (``adopt_wait``: how long a resume waits for the agents it found to say hello; ``lost_timeout``: the machines'
    ``lostHostTimeout``), every other launcher :class:`Engines` (``idle_timeout``, ``max_environments``,
    ``engine_poll_interval``, ``end_grace``, ``port``).
    """

    platform = "cluster"
    engine_poll_interval = 2.0
    """Seconds between two engine polls (a service may say otherwise: how cheap its engine's answer is)."""

    def __init__(
        self,
        emit: Callable[[RunnerEvent], None],
        *,
        launcher: Launcher,
        context: ServiceContext | None,
        reuse: bool = True,
        idle_timeout: float = 60.0,
        advertise_host: str | None = None,
        trial_gpu_number: int | None = None,
        max_environments: int | None = None,
        lost_timeout: float = 60.0,
        engine_poll_interval: float = 2.0,
        end_grace: float = 3.0,
        port: int = 0,
        adopt_wait: float = 3.0,
        **agent: Unpack[AgentOptions],
    ) -> None:
        self.launcher = launcher
        self._context = context
        shared = launcher.shares_files if isinstance(launcher, SharesFiles) else True
        policy: Literal["fail", "requeue"] = launcher.lost_policy if isinstance(launcher, LostPolicy) else "fail"
        mirror = OutputMirror(context.experiment_dir) if context is not None and not shared else None
        self.placement: Placement
        if isinstance(launcher, HostLauncher):  # a fixed list of machines (nnix.services.hosts): each has its health
            self.placement = Machines(self.platform, emit, launcher, context=context, mirror=mirror,
                                      stream_output=not shared, reuse=reuse, trial_gpu_number=trial_gpu_number,
                                      policy=policy, lost_after=lost_timeout, adopt_wait=adopt_wait, **agent)
        else:
            self.placement = Engines(self.platform, emit, launcher, context=context, mirror=mirror,
                                     stream_output=not shared, reuse=reuse, policy=policy, idle_timeout=idle_timeout,
                                     advertise_host=advertise_host, max_environments=max_environments,
                                     lost_after=lost_timeout, engine_poll_interval=engine_poll_interval,
                                     end_grace=end_grace, port=port, **agent)

    # --- construction --------------------------------------------------------------------------
    @classmethod
    def make_launcher(cls, config: ExperimentConfig, context: ServiceContext | None) -> Launcher:
        raise NotImplementedError(f"{cls.__name__} does not say how to start its environments")

    @classmethod
    def _options_from_config(cls, config: ExperimentConfig, emit: Emit, context: ServiceContext | None,
                             options: dict[str, Any]) -> dict[str, Any]:
        ts = config.training_service
        launcher = options.pop("launcher", None) or cls.make_launcher(config, context)
        return {"launcher": launcher, "context": context,
                "reuse": bool(ts.reuse_mode) if isinstance(ts, _Reusable) else True,
                "idle_timeout": float(ts.idle_timeout) if isinstance(ts, _Idles) else 60.0,
                "advertise_host": config.nni_manager_ip, "trial_gpu_number": config.trial_gpu_number,
                "engine_poll_interval": cls.engine_poll_interval, **options}

    @property
    def _machines(self) -> list[Machine]:
        """The machines of a fixed list (none where an engine places environments): views
        (``RemoteService.machines``)."""
        return self.placement.machines if isinstance(self.placement, Machines) else []

    # --- the TrainingService protocol (the placement's) ------------------------------------------
    async def start(self) -> None:
        if self._context is None:
            raise ServiceError(f"the {self.platform} service needs its experiment's id and directory "
                               "(a ServiceContext)")
        await self.placement.start()

    async def submit(self, spec: TrialSpec) -> Started | None:
        return await self.placement.submit(spec)

    async def cancel(self, trial_id: str) -> None:
        await self.placement.cancel(trial_id)

    async def reattach(
        self, trial_id: str, output_dir: Path, pid: int | None, pid_start: str | None, after_index: int,
        gpus: tuple[int, ...] | None,
    ) -> None:
        await self.placement.reattach(trial_id, output_dir, pid, pid_start, after_index, gpus)

    def set_demand(self, waiting: int) -> None:
        """How many trials wait for an environment now (the manager says so before each ``submit`` round;
        :class:`~nnix.services.base.TakesDemand`)."""
        self.placement.set_demand(waiting)

    def waiting_reason(self) -> str:
        return self.placement.waiting_reason()

    async def close(self, kill_trials: bool) -> None:
        await self.placement.close(kill_trials)

    @classmethod
    async def reclaim(cls, config: ExperimentConfig, context: ServiceContext,
                      trials: Sequence[LeftTrial] = ()) -> list[str]:
        """Without a manager (``nnix stop`` / ``nnix experiment delete`` of an experiment whose manager died): stop
        every environment the experiment still has on its engine, found by the engine (names, labels) and in the
        record; its trials end with it. Returns what was stopped, in words (one line per engine); the record is
        then emptied (nnix.services.base.Reclaims)."""
        path = context.experiment_dir / RECORD
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            record = {}
        record = record if isinstance(record, dict) else {}
        launcher = cls.make_launcher(config, context)
        if not isinstance(launcher, Reclaiming):
            return []
        recorded = record.get("envs")
        recorded = recorded if isinstance(recorded, dict) else {}
        try:
            await launcher.open_engine()
            found = await launcher.environments()
            handles = dict(found)
            for env_id, info in recorded.items():
                if isinstance(info, dict) and info.get("handle") and env_id not in handles:
                    handles[str(env_id)] = str(info["handle"])
            stopped, problems = [], []
            for env_id, handle in sorted(handles.items()):
                try:
                    await launcher.stop(handle)
                except Exception as e:
                    problems.append(f"{handle}: {e}")
                    continue
                if env_id in found:
                    stopped.append(handle)
        finally:
            with contextlib.suppress(Exception):
                await launcher.close()
        if not problems:
            record.update(envs={}, left=False)
            with contextlib.suppress(OSError):
                write_private(path, record)
        out = []
        if stopped:
            out.append(f"{cls.platform}: cancelled {len(stopped)} environment(s) ({', '.join(stopped)})")
        if problems:
            out.append(f"{cls.platform}: could not cancel {'; '.join(problems)}")
        return out
