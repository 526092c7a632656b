"""The Launcher contract: what an engine implements so that :class:`~nnix.services.cluster.ClusterService` drives
its environments (``EnvRequest`` in, ``EnvStatus`` out), and the optional capabilities a launcher may add
(each a small ``runtime_checkable`` Protocol, checked with ``isinstance``: :class:`SharesFiles`,
:class:`MultiTrial`, :class:`Admits`, :class:`LostPolicy`, :class:`HostLauncher` (a fixed list of machines),
:class:`Reclaiming`).

Re-exported by :mod:`nnix.services.cluster`, where launchers usually import it from.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from nnix.errors import ServiceError
from nnix.model.runs import TrialSpec

__all__ = ["Admits", "EnvRequest", "EnvStatus", "Host", "HostError", "HostLauncher", "Launcher", "LostPolicy",
           "MultiTrial", "Reclaiming", "SharesFiles"]


class HostError(ServiceError):
    """A machine of a :class:`HostLauncher` could not be used. ``permanent``: retrying cannot help (credentials,
    host key, Python)."""

    def __init__(self, message: str, hint: str | None = None, *, permanent: bool = False) -> None:
        super().__init__(message, hint)
        self.permanent = permanent


@dataclass(frozen=True)
class EnvRequest:
    """What an engine needs to start one environment."""

    env_id: str
    """Unique in the experiment; safe in names (``[a-z0-9-]``); engines put it in job names and labels."""
    single: bool
    """Non-reuse: the agent exits after its one trial."""
    url: str
    """The manager's agent endpoint as the environment must reach it (``http://host:port``)."""
    token: str
    """The environment's secret. Give it to the agent in ``$NNIX_AGENT_TOKEN`` (never on a command line:
    ``ps`` shows those); where the engine stores job specs (Kubernetes), use the engine's secret store."""
    agent_options: tuple[str, ...] = ()
    """Extra agent arguments chosen by the service (timeouts, poll interval)."""
    host: int | None = None
    """The machine the service chose for it, for launchers of a fixed list of machines (SSH: an index of
    ``machineList``); None: the engine places it (every other launcher ignores it)."""

    def agent_args(self) -> list[str]:
        """Arguments after ``python`` (``-m nnix.agent ...``); the token is not among them."""
        return [
            "-m", "nnix.agent", "--url", self.url, "--environment", self.env_id,
            *(["--single"] if self.single else []), *self.agent_options,
        ]

    def agent_env(self) -> dict[str, str]:
        """Environment variables the agent needs (the token)."""
        return {"NNIX_AGENT_TOKEN": self.token}


@dataclass(frozen=True)
class EnvStatus:
    """An environment as its engine sees it."""

    state: Literal["pending", "running", "ended", "unknown"]
    reason: str = ""
    """Why it is pending (``Resources``) or how it ended (``TIMEOUT: time limit reached``, ``NODE_FAIL``,
    ``preempted``, ``OOMKilled``...), in the engine's words; shown to the user."""
    killed: bool = False
    """Ended: the engine ended it (time limit, cancelled, preempted, node lost, out of memory), as opposed to its
    command exiting by itself. A trial killed by a signal in such an environment ends with the engine's reason."""
    exit_status: int | None = None
    """Ended: the agent's own exit status, where the launcher sees it (SSH: the agent's channel); else None."""


class Launcher(Protocol):
    """The engine-specific part of a cluster service.

    Contract:

    * ``prepare`` runs once before any ``launch``: check the engine answers (raise
      :class:`~nnix.errors.ServiceError` with a hint otherwise) and stage what environments need (code,
      wheels) where they can read it.
    * ``launch`` submits one environment whose command runs ``<python> <request.agent_args()>`` with
      ``request.agent_env()`` set, and returns the engine's handle for it (job id, object name). It raises
      ``ServiceError`` when the engine refuses the submission (bad partition, invalid object...).
    * ``poll`` returns the state of the given handles (one engine call for all of them where possible);
      a handle the engine no longer knows is ``ended`` (reason ``"gone"``) or ``unknown``.
    * ``stop`` cancels an environment; idempotent, never raises for one that already ended.
    * ``place`` maps a trial onto the environment's file system: its ``code_dir`` and ``output_dir`` as the
      agent will see them; ``output_location`` is what the manager records as the trial's ``output_dir``
      (a path the manager can read when storage is shared, else ``"<kind>:<path>"``).
    * ``close`` releases clients (not environments: the service stops those first).
    """

    kind: str
    """Engine name for messages and environment-variable ``NNI_PLATFORM`` (``slurm``, ``ray``...)."""
    advertise_host: str | None
    """The address environments use to reach the manager, when the engine knows it better than the
    default guess (``nniManagerIp`` overrides both).

    Optional abilities (Protocols of their own, below): :class:`SharesFiles`, :class:`MultiTrial`, :class:`Admits`,
    :class:`LostPolicy`, :class:`Reclaiming`, and *a fixed list of machines* (:class:`HostLauncher`; SSH), which
    gets machines instead of environments on demand (:mod:`nnix.services.hosts`)."""

    async def prepare(self) -> None: ...

    async def launch(self, request: EnvRequest) -> str: ...

    async def poll(self, handles: Sequence[str]) -> dict[str, EnvStatus]: ...

    async def stop(self, handle: str) -> None: ...

    def place(self, spec: TrialSpec) -> TrialSpec: ...

    def output_location(self, spec: TrialSpec) -> str: ...

    async def close(self) -> None: ...


@runtime_checkable
class SharesFiles(Protocol):
    """Optional: ``shares_files`` True (the default of a launcher without it): the trials' output directories are on
    storage the manager reads (``output_location`` is a path here). False: agents stream each trial's stdout and
    stderr, and the manager keeps a copy (:mod:`nnix.services.mirror`)."""

    shares_files: bool


@runtime_checkable
class MultiTrial(Protocol):
    """Optional: ``capacity`` (default 1): how many trials one environment runs at once in reuse mode (an
    environment with the resources of several trials: a whole node, a machine); non-reuse environments always
    run one."""

    capacity: int


@runtime_checkable
class LostPolicy(Protocol):
    """Optional: ``lost_policy`` (default ``"fail"``): what becomes of a running trial whose environment ended under
    it (the engine ended the job, its agent fell silent, its machine was lost): it fails with the reason, or goes
    back to the queue to run again from scratch (``lostHostPolicy`` of the SSH service). A trial that had not
    started goes back to the queue either way."""

    lost_policy: Literal["fail", "requeue"]


@runtime_checkable
class Admits(Protocol):
    """Optional placement hook, for environments that hold resources of several trials (:class:`MultiTrial`).
    A trial no environment admits waits.

    * ``admit(spec, handle, resources)``: may the environment ``handle``, whose agent last reported ``resources``
      (``gpus``: index, util, mem_util, processes...), take the placed trial now? Returns the spec to run there
      (e.g. with ``CUDA_VISIBLE_DEVICES`` set), or None: not now;
    * ``release(trial_id)``: the trial left its environment; called once for each admitted trial."""

    def admit(self, spec: TrialSpec, handle: str, resources: dict[str, Any]) -> TrialSpec | None: ...

    def release(self, trial_id: str) -> None: ...


class Host(Protocol):
    """One machine of a :class:`HostLauncher`'s fixed list, as the launcher knows it (SSH: ``SshHost``)."""

    index: int
    """Its position in the list (what ``EnvRequest.host`` names)."""

    @property
    def label(self) -> str:
        """How messages name it (``user@host:port``)."""

    @property
    def key(self) -> str:
        """How a trial's recorded ``output_dir`` names it (``<key>:<path>``; see ``output_location``)."""

    @property
    def gpu_rules(self) -> dict[str, Any]:
        """Its GPU rules as :class:`~nnix.services.gpu.GpuScheduler` keywords (``gpu_indices``,
        ``max_trial_number_per_gpu``, ``use_active_gpu``)."""

    def env_dir(self, env_id: str) -> str:
        """Where environment ``env_id`` keeps its files on the machine (named in messages: ``agent.log``)."""


@runtime_checkable
class HostLauncher(Launcher, Protocol):
    """The optional capability *a fixed list of machines* (the SSH launcher has it; no engine needs it).

    A launcher that has every member below (``isinstance``) gets from :class:`~nnix.services.cluster.ClusterService`
    what a list of machines needs (:mod:`nnix.services.hosts`): a connection per machine kept up with backoff,
    per-machine health, one agent per machine in reuse mode (with the machine's GPU rules as its capacity) or one
    per trial plus one started ahead, agents replaced *in place* when they die (their trials keep running and are
    re-attached), silent agents probed (host lost, or agent dead or stuck), a resume that adopts the live agents it
    finds, and GPU placement on the least loaded machine. Every method below is then required; every error they
    raise about a machine is a :class:`HostError` (``permanent``: retrying cannot help).

    * ``open`` connects to the machine and returns a *link* (opaque); ``closed(host, link)`` returns when that link
      ended, telling whether it was still the machine's current one; ``connected`` says whether the machine's link
      is up; ``disconnect`` breaks it (the service notices through ``closed`` and reconnects); ``drop`` forgets it;
    * ``setup(host, port)`` makes a connected machine ready for agents that reach the manager's agent endpoint on
      ``port`` here at ``agent_url(host)``; returns the machine's resources (``gpus``) when it knows them before
      any agent says hello, else None; ``describe(host)`` is a few words on the ready machine for the log;
    * ``launch`` of an ``EnvRequest`` whose ``host`` names the machine; ``ended(handle)`` returns when that
      environment ended (``EnvStatus`` with its ``exit_status``, or ``unknown`` when only the link went away: the
      agent may still run); ``forget(handle)``: the service is done with it;
    * ``probe(host, env_id, pid, timeout)``: the pid of a silent agent if alive, else None; raises when the machine
      itself does not answer; ``kill(host, pid)``; ``log_tail(host, env_id)``: the end of its log, for messages;
    * resume by adoption: ``find_agents(host)`` lists ``(environment id, pid)`` of the experiment's live agents,
      ``write_connect(host, env_id, token)`` points one at this manager, ``wake(host, pids)`` makes them read it;
    * ``place(spec, host)`` and ``output_location(spec, host)``: ``place`` / ``output_location`` on that machine.
    """

    @property
    def hosts(self) -> Sequence[Host]: ...

    async def open(self, host: Any) -> object: ...

    async def closed(self, host: Any, link: object) -> bool: ...

    def connected(self, host: Any) -> bool: ...

    def disconnect(self, host: Any) -> None: ...

    def drop(self, host: Any) -> None: ...

    async def setup(self, host: Any, port: int) -> dict[str, Any] | None: ...

    def agent_url(self, host: Any) -> str: ...

    def describe(self, host: Any) -> str: ...

    def ended(self, handle: str) -> Awaitable[EnvStatus]: ...

    def forget(self, handle: str) -> None: ...

    async def probe(self, host: Any, env_id: str, pid: int | None, timeout: float) -> int | None: ...

    async def kill(self, host: Any, pid: int) -> None: ...

    async def log_tail(self, host: Any, env_id: str) -> str: ...

    async def find_agents(self, host: Any) -> list[tuple[str, int]]: ...

    async def write_connect(self, host: Any, env_id: str, token: str) -> None: ...

    async def wake(self, host: Any, pids: Sequence[int]) -> None: ...

    def place(self, spec: TrialSpec, host: Any = None) -> TrialSpec: ...

    def output_location(self, spec: TrialSpec, host: Any = None) -> str: ...


@runtime_checkable
class Reclaiming(Protocol):
    """The optional capability of a :class:`Launcher` to deal with environments no live manager knows: those a
    killed manager left on the engine, whatever state they were in (submitted, starting, connected, finished).

    * ``adopt(request, handle)``: a resumed manager takes over environment ``request.env_id`` of the earlier
      manager, recorded with ``handle`` (None: that manager died before the engine told it). Returns the handle
      when the engine still has the environment (and, where the earlier manager died before the agent in it was
      started, starts it now as ``request`` says: its token, this manager's address), None when the engine has no
      such environment any more (never submitted, or ended and forgotten): it is dropped, never counted as a
      failed start;
    * ``open_engine()``: get ready to call ``environments`` and ``stop`` without ``prepare`` (which stages files
      and may start a cluster): ``nnix stop`` / ``nnix experiment delete`` of an experiment whose manager died;
    * ``environments()``: ``{environment id: handle}`` of every environment of this experiment the engine still
      runs or queues (found by the experiment's names or labels, so one never recorded is found too).
    """

    async def adopt(self, request: EnvRequest, handle: str | None) -> str | None: ...

    async def open_engine(self) -> None: ...

    async def environments(self) -> dict[str, str]: ...
