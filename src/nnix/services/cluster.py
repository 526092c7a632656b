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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from nnix.agent.runner import TrialSpec

__all__ = ["EnvRequest", "EnvStatus", "Launcher"]


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
    default guess (``nniManagerIp`` overrides both)."""

    async def prepare(self) -> None: ...

    async def launch(self, request: EnvRequest) -> str: ...

    async def poll(self, handles: Sequence[str]) -> dict[str, EnvStatus]: ...

    async def stop(self, handle: str) -> None: ...

    def place(self, spec: TrialSpec) -> TrialSpec: ...

    def output_location(self, spec: TrialSpec) -> str: ...

    async def close(self) -> None: ...
