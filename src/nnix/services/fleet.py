"""The fleet: the bookkeeping of every service whose trials run in nnix agents (engine environments and the
machines of a fixed list, such as SSH's, both driven by :class:`~nnix.services.cluster.ClusterService`; the
machines' part is :mod:`nnix.services.hosts`).

An *environment* is one agent (``python -m nnix.agent``) that the manager knows by its id and token; a *trial*
is what the manager handed an environment (or an earlier manager did, before a resume). :class:`Fleet` keeps
both registries and implements, once, what follows from the agent protocol (:mod:`nnix.agent.protocol`):

* ``on_hello``: the trials an agent says it runs are taken over (an environment of an earlier manager gets an
  :class:`~nnix.agent.protocol.Attach`, so that it sends again what the store may lack), and a trial nobody
  expects there is killed (a *stray*) once the fleet has *settled*;
* ``on_message``: ``Started`` answers the start handshake, ``Metrics`` are passed on once started (their line
  index kept for a later ``Attach``), ``Exited`` ends the trial (or fails its start); ``Output`` goes to the
  output mirror. A service may *hold* an exit (``_hold_exit``) until it knows better why the trial ended (a
  cluster engine that killed the environment);
* the *early buffer*: after a resume, what an adopted agent says about a trial before the manager re-attached
  that trial is kept, and replayed by ``_adopt_trial``; ``_settle`` ends the buffering, kills strays in
  adopted environments and retires the ones left with nothing to watch;
* the start handshake (``_handshake``: ``Run``, then the agent's ``Started`` or exit within the start
  timeout), ``cancel``, the requeue of a trial that did not start (``_requeue``), and what a lost environment or
  host means for its trials (``_write_off``: not started, back to the queue; started, the lost-host policy);
* ``_shutdown`` (and whether the agent got it), the agent options and the health policy
  (:mod:`nnix.services.health`) built from one set of timing options (:class:`AgentOptions`).

What differs between services stays in hooks: ``_env_gone`` (the environment can no longer run anything),
``_may_host`` (placement: a trial of machine A is never watched by an agent on machine B), ``_greeted`` /
``_hello_done`` (around the hello), ``_heartbeat``, ``_refused``, ``_hold_exit``, ``_released`` (what
placement gave a trial is freed, once, whatever ended it), ``_trial_left`` and ``_retire_idle``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, TypedDict, TypeVar

from nnix.agent.protocol import Attach, Heartbeat, Hello, Kill, Message, Run, Shutdown
from nnix.agent.reason import exit_reason
from nnix.agent.runner import committed
from nnix.errors import ServiceUnavailableError
from nnix.model.runs import Exited, Metrics, Output, Requeued, RunnerEvent, Started, TrialSpec
from nnix.services.agent_server import AgentServer, Endpoint
from nnix.services.health import HostHealth
from nnix.services.mirror import OutputMirror

if TYPE_CHECKING:
    from typing import Unpack  # Python 3.11: in annotations only (nnix runs on 3.10)

    from nnix.services.base import ServiceContext

__all__ = ["RECORD", "AgentOptions", "Fleet", "FleetEnv", "FleetTrial", "StartFailed", "write_private"]

log = logging.getLogger("nnix.services.fleet")


RECORD = "cluster.json"
"""The record a fleet keeps in its experiment's directory (:meth:`Fleet._save`)."""


def write_private(path: Path, data: dict[str, Any]) -> None:
    """``data`` as JSON into ``path`` (mode 0600: it holds the agents' tokens), replaced at once."""
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, path)


class StartFailed(Exception):
    """A trial exited (or its environment ended) before its agent said it started; the message says why."""


@dataclass(eq=False)
class FleetEnv:
    """One agent as the fleet sees it."""

    env_id: str
    endpoint: Endpoint
    single: bool  # non-reuse: the agent exits after its one trial
    adopted: bool = False  # taken over from an earlier manager (resume)
    stopping: bool = False
    used: bool = False  # it was given a trial
    claims: list[str] = field(default_factory=list)  # the trials it said it runs (its last hello)
    trials: set[str] = field(default_factory=set)  # the trials it watches for this manager
    shutdown_seq: int = 0  # the command that told it to shut down (0: none)

    def shutdown_delivered(self) -> bool:
        """Whether its agent was handed the shutdown (it polled it); True when none was sent."""
        return self.endpoint.delivered_command >= self.shutdown_seq


_EnvT = TypeVar("_EnvT", bound=FleetEnv)


@dataclass(eq=False)
class FleetTrial(Generic[_EnvT]):
    """One trial handed to an environment (or to be re-attached after a resume); ``_EnvT``: the service's
    environment type."""

    trial_id: str
    env: _EnvT | None
    location: str  # its output directory as the agent sees it
    pid: int | None = None
    pid_start: str | None = None
    last_index: int = -1  # the last metric line the manager has
    started: asyncio.Future[Started | None] | None = None  # the start handshake, while it runs
    unstarted: str = ""  # why ``started`` was resolved with None (its host lost, its agent replaced)
    killing: bool = False  # nnix asked its agent to kill it
    held: Exited | None = None  # its exit, held until the service knows why it ended (see _hold_exit)
    held_at: float = 0.0


class AgentOptions(TypedDict, total=False):
    """The timing options every fleet takes (as keyword arguments; tests shorten them)."""

    start_timeout: float
    """Seconds an agent has to connect back, and to start a trial it was handed (default 60)."""
    give_up_after: float | None
    """Seconds every host may fail before the experiment stops (default: the lost timeout, at least
    ``start_timeout``; see nnix.services.health)."""
    backoff_min: float
    backoff_max: float
    agent_request_timeout: float
    poll_interval: float
    kill_grace: float
    clock: Callable[[], float]


E = TypeVar("E", bound=FleetEnv)
T = TypeVar("T", bound=FleetTrial[Any])


class Fleet(Generic[E, T]):
    """The shared bookkeeping (see the module docstring). A placement (engine environments, a fixed list of
    machines: :mod:`nnix.services.cluster`) subclasses it, calls ``super().__init__`` and overrides the hooks it
    needs."""

    platform: str

    def __init__(
        self,
        emit: Callable[[RunnerEvent], None],
        mirror: OutputMirror | None,
        *,
        hosts: Sequence[str],
        lost_after: float,
        max_failures: int | None = None,
        noun: str = "host",
        context: ServiceContext | None = None,
        stream_output: bool = True,
        **options: Unpack[AgentOptions],
    ) -> None:
        """``hosts``: the names the health policy (nnix.services.health) keeps apart; ``lost_after``: seconds
        of silence after which an agent (or host) is lost; ``context``: where the record is kept (:meth:`_save`);
        ``stream_output`` False: the manager reads trial files where they are (agents stream no copy)."""
        unknown = sorted(set(options) - set(AgentOptions.__annotations__))
        if unknown:
            raise TypeError(f"{type(self).__name__}() got unexpected keyword arguments {unknown}")
        self._emit = emit
        self._lost_after = float(lost_after)
        self._start_timeout = float(options.get("start_timeout", 60.0))
        self._kill_grace = float(options.get("kill_grace", 5.0))
        self._clock: Callable[[], float] = options.get("clock", time.monotonic)
        self._agent_options: tuple[str, ...] = (
            "--request-timeout", f"{options.get('agent_request_timeout', 10.0):g}",
            "--poll-interval", f"{options.get('poll_interval', 0.25):g}", "--kill-grace", f"{self._kill_grace:g}",
            *(() if stream_output else ("--no-output-stream",)),
        )
        self._context = context
        self._server: AgentServer | None = None
        self._url = ""
        give_up = options.get("give_up_after")
        self._health = HostHealth(
            hosts, give_up_after=give_up if give_up is not None else max(self._lost_after, self._start_timeout),
            backoff_min=options.get("backoff_min", 1.0), backoff_max=options.get("backoff_max", 30.0),
            max_failures=max_failures, noun=noun, clock=self._clock)
        self._mirror = mirror
        self._envs: dict[str, E] = {}
        self._trials: dict[str, T] = {}
        self._early: list[tuple[E, Message]] = []
        self._settled = False  # after a resume: the manager re-attached what it had (strays may be killed)
        self._closing = False
        self._reason = ""
        self._tasks: set[asyncio.Task[Any]] = set()

    # --- the record (resume) -----------------------------------------------------------------------
    @property
    def _state_path(self) -> Path | None:
        return self._context.experiment_dir / RECORD if self._context is not None else None

    def _recorded_envs(self) -> dict[str, dict[str, Any]]:
        """The environments the record lists, with their tokens and engine handles (none by default: agents on
        machines are found there again)."""
        return {}

    def _save(self, left: bool = True) -> None:
        """The record (``cluster.json``): the platform, the agent endpoint's port and :meth:`_recorded_envs`.
        ``left`` False: a closing manager left nothing on the engine (``nnix stop`` then has nothing to cancel
        there)."""
        path = self._state_path
        if path is None or self._server is None:
            return
        envs = self._recorded_envs()
        write_private(path, {"platform": self.platform, "port": self._server.port, "url": self._url, "envs": envs,
                             "left": left or bool(envs)})

    def _load(self) -> dict[str, Any]:
        path = self._state_path
        if path is None or not path.is_file():
            return {}
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    @property
    def _heartbeat_every(self) -> float:
        """How often agents must show a sign of life (the agent endpoint's heartbeat)."""
        return max(0.2, min(5.0, self._lost_after / 4))

    # --- hooks -------------------------------------------------------------------------------------
    def _env_gone(self, env: E) -> bool:
        """The environment can run nothing any more (ended, replaced, written off)."""
        raise NotImplementedError

    def _may_host(self, trial: T, env: E) -> bool:
        """Whether ``env`` may watch ``trial`` (placement: the same machine)."""
        return True

    def _greeted(self, env: E, hello: Hello) -> None:
        """A hello from ``env``, before the trials it claims are taken over."""

    def _hello_done(self, env: E, hello: Hello) -> None:
        """After the trials ``env`` claims were taken over."""

    def _heartbeat(self, env: E, beat: Heartbeat) -> None:
        """A heartbeat (with the host's resources)."""

    def _refused(self, env: E, reason: str) -> None:
        """The agent server refused ``env``'s agent (a version it cannot talk to)."""
        log.error("the nnix agent of %s environment %s was refused: %s", self.platform, env.env_id, reason)

    def _hold_exit(self, trial: T, env: E, exited: Exited) -> bool:
        """Whether to keep a started trial's exit until the service knows better why it ended (then it calls
        :meth:`_exited` itself). ``cancel`` delivers a held exit at once."""
        return False

    def _trial_left(self, trial: T, env: E) -> None:
        """``trial`` ended in ``env`` (after :meth:`_released`)."""

    def _released(self, trial: T) -> None:
        """``trial`` is no longer the fleet's (ended, written off, did not start): free what placement gave it
        (GPUs). Called once per trial the fleet forgets."""

    def _retire_idle(self, env: E) -> None:
        """At settling: an adopted environment with nothing left to watch."""

    # --- registries --------------------------------------------------------------------------------
    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _assign(self, t: T, env: E) -> None:
        t.env = env
        env.trials.add(t.trial_id)
        env.used = True

    def _take(self, t: T, env: E) -> None:
        """``env`` speaks of ``t``, which no environment watches yet: it watches it now."""
        if env.adopted:
            self._bind(t, env)
        else:
            self._assign(t, env)

    def _bind(self, t: T, env: E) -> None:
        """A trial of an earlier manager found in an agent it left running: the agent sends again any
        metrics after the last one recorded (the earlier manager may have acknowledged lines it never
        recorded before it was killed)."""
        self._assign(t, env)
        log.info("trial %s: taken over with %s agent %s of the earlier manager (metrics after line %d sent again)",
                 t.trial_id, self.platform, env.env_id, t.last_index)
        env.endpoint.send(Attach(t.trial_id, t.location, t.pid, t.pid_start, t.last_index))

    def _shutdown(self, env: E, reason: str, kill_trials: bool = False) -> None:
        """Tell ``env``'s agent to exit (killing its trials, or leaving them running for a later manager); it
        takes no trial from now on."""
        env.stopping = True
        env.shutdown_seq = env.endpoint.send(Shutdown(reason, kill_trials=kill_trials))

    def _forget_trial(self, t: T) -> None:
        """Out of the registries, and what placement gave it freed (once: not again for a trial already
        forgotten)."""
        if t.env is not None:
            t.env.trials.discard(t.trial_id)
        if self._trials.get(t.trial_id) is t:
            del self._trials[t.trial_id]
            self._released(t)

    def _kill_stray(self, env: E, trial_id: str) -> None:
        log.warning("%s agent %s runs trial %s, which this experiment no longer expects there: killing it",
                    self.platform, env.env_id, trial_id)
        env.endpoint.send(Kill(trial_id))

    # --- messages from agents (EnvironmentHandler) -------------------------------------------------
    def on_hello(self, environment_id: str, hello: Hello) -> None:
        env = self._envs.get(environment_id)
        if env is None or self._env_gone(env):
            return
        env.claims = list(hello.running)
        self._greeted(env, hello)
        for tid in hello.running:
            t = self._trials.get(tid)
            if t is None:
                if self._settled or not env.adopted:
                    self._kill_stray(env, tid)
            elif t.env is None and self._may_host(t, env):
                self._take(t, env)
        self._hello_done(env, hello)

    def on_refused(self, environment_id: str, reason: str) -> None:
        env = self._envs.get(environment_id)
        if env is not None:
            self._refused(env, reason)

    async def committed(self) -> None:
        """What the agent endpoint awaits before acknowledging messages: every metric emitted is in the store."""
        await committed(self._emit)

    def on_message(self, environment_id: str, message: Message) -> None:
        env = self._envs.get(environment_id)
        if env is None:
            return
        if isinstance(message, Heartbeat):
            self._heartbeat(env, message)
            return
        if isinstance(message, Output):
            if message.trial_id in self._trials and self._mirror is not None:
                self._mirror.write(message)  # trial files stay where the trial ran: keep a copy here
            return
        if not isinstance(message, (Started, Metrics, Exited)):
            return
        t = self._trials.get(message.trial_id)
        if t is None:
            if env.adopted and not self._settled:
                self._early.append((env, message))  # the manager has not re-attached its trials yet
            return
        if not self._may_host(t, env):
            return
        if t.env is None:
            self._take(t, env)  # an earlier manager's agent speaks first: it sends again what the store lacks
        if t.env is not self._envs.get(environment_id):
            return  # a replaced agent still talking about a trial another agent now watches
        if isinstance(message, Started):
            t.pid, t.pid_start = message.pid, message.pid_start
            if t.started is not None and not t.started.done():
                t.started.set_result(message)
        elif isinstance(message, Metrics):
            t.last_index = max(t.last_index, message.last_line)
            if t.started is None or t.started.done():
                self._emit(message)
        elif (t.started is None or t.started.done()) and not t.killing and self._hold_exit(t, env, message):
            t.held = message
        else:
            self._exited(t, env, message)

    def _exited(self, t: T, env: E, message: Exited) -> None:
        """``t`` ended (or failed to start) in ``env``."""
        self._forget_trial(t)
        env.trials.discard(t.trial_id)
        self._trial_left(t, env)
        if t.started is not None and not t.started.done():
            t.started.set_exception(StartFailed(exit_reason(message.exit_code, message.signal, message.stderr_tail,
                                                            message.message)))
        else:
            self._emit(message)

    def _write_off(self, t: T, why: str, policy: Literal["fail", "requeue"] | None = None) -> None:
        """``t`` can no longer be watched: its environment ended, or its host was lost. Not started yet: its
        start handshake ends with None (``t.unstarted`` says why) and ``submit`` requeues it, whatever the
        policy (it never ran). Started: the lost-host policy; ``requeue`` sends it back to the queue, ``fail``
        ends it with ``why`` (None: no policy to name, as with a cluster engine that ended the environment)."""
        self._forget_trial(t)
        if t.started is not None and not t.started.done():
            t.unstarted = why
            t.started.set_result(None)
        elif policy == "requeue":
            self._emit(Requeued(t.trial_id, f"{why}; re-queued (lostHostPolicy: requeue)"))
        else:
            self._emit(Exited(t.trial_id, None, None, "",
                              why if policy is None else f"{why} (lostHostPolicy: {policy})"))

    # --- start, cancel, requeue --------------------------------------------------------------------
    def _give_up_if_hopeless(self, hint: str) -> None:
        """The health policy's verdict (nnix.services.health), raised: no host could run anything for long."""
        verdict = self._health.verdict()
        if verdict is not None:
            raise ServiceUnavailableError(verdict, hint)

    async def _handshake(self, t: T, env: E, spec: TrialSpec) -> Started | None:
        """Hand ``spec`` to ``env`` and wait for its ``Started``: raises ``TimeoutError`` after the start
        timeout, :class:`StartFailed` when it exited first; None when the service gave up on it meanwhile
        (``t.unstarted`` says why)."""
        assert t.started is not None
        self._trials[t.trial_id] = t
        self._assign(t, env)
        env.endpoint.send(Run(spec))
        return await asyncio.wait_for(asyncio.shield(t.started), self._start_timeout)

    def _requeue(self, trial_id: str, why: str, note: str = "") -> None:
        """A trial that did not start goes back to the queue (counted: a Requeued event with the reason), never
        an experiment error by itself; ``note`` says what the host's backoff is."""
        log.warning("trial %s did not start: %s%s", trial_id, why, note)
        self._emit(Requeued(trial_id, f"did not start: {why}; back to the queue"))
        self._reason = why + note

    async def cancel(self, trial_id: str) -> None:
        t = self._trials.get(trial_id)
        if t is None or t.env is None or self._env_gone(t.env):
            return  # ended; or delivered once an agent watches it (re-attach), or written off with its host
        t.killing = True
        if t.held is not None:  # it is over already
            self._exited(t, t.env, t.held)
            return
        t.env.endpoint.send(Kill(trial_id))

    # --- resume ------------------------------------------------------------------------------------
    def _adopt_trial(self, t: T) -> None:
        """``reattach``: watch ``t`` again, with the live environment that claims it if any, and replay what
        adopted agents said of it before."""
        self._trials[t.trial_id] = t
        for env in self._envs.values():
            if t.trial_id in env.claims and not self._env_gone(env) and self._may_host(t, env):
                self._bind(t, env)
                break
        early, self._early = self._early, []
        for env, msg in early:
            if isinstance(msg, (Started, Metrics, Exited)) and msg.trial_id == t.trial_id:
                self.on_message(env.env_id, msg)
            else:
                self._early.append((env, msg))

    def _settle(self) -> None:
        """After the manager re-attached its running trials: strays in adopted agents are killed, and adopted
        agents left with nothing to watch are retired."""
        self._settled = True
        self._early.clear()
        for env in list(self._envs.values()):
            if self._env_gone(env) or not env.adopted:
                continue
            for tid in env.claims:
                if tid not in self._trials:
                    self._kill_stray(env, tid)
            if not env.trials and not env.stopping:  # its trials (if any) are watched by another agent
                self._retire_idle(env)

    def waiting_reason(self) -> str:
        return self._reason
