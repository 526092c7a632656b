"""The remote training service (``platform: remote``): trials on SSH workers, each running the nnix agent.

What is SSH (steps 1 to 5 below, probes, ``nnix platform clean``) is :class:`~nnix.services.ssh.SshLauncher`, a
Launcher with a fixed list of machines; the fleet over it (machine states, agents per machine, scheduling, lost
hosts, resume) is :class:`~nnix.services.cluster.ClusterService`'s, for every launcher with ``hosts``
(:mod:`nnix.services.hosts`). This module only wires the config to them. For each machine of ``machineList`` the
service

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

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from nnix.errors import ServiceError
from nnix.model.runs import RunnerEvent
from nnix.services.base import Emit, LeftTrial, ServiceContext
from nnix.services.cluster import ClusterService
from nnix.services.fleet import AgentOptions
from nnix.services.ssh import HostError, SshHost, SshLauncher

if TYPE_CHECKING:
    from typing import Unpack  # Python 3.11: in annotations only (nnix runs on 3.10)

    from nnix.config import ExperimentConfig, RemoteConfig, RemoteMachineConfig

__all__ = ["HostError", "RemoteService"]  # HostError: nnix.services.ssh


class RemoteService(ClusterService):
    """``platform: remote``: a :class:`ClusterService` over an :class:`SshLauncher` (see the module docstring)."""

    platform = "remote"
    launcher: SshLauncher

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
        launcher = SshLauncher(
            [SshHost(index=i, cfg=m) for i, m in enumerate(machines)],
            experiment_id=context.experiment_id if context is not None else "",
            stage_dir=context.experiment_dir / "remote" if context is not None else None, code_dir=code_dir,
            reuse=reuse, trust_unknown_hosts=trust_unknown_hosts, known_hosts_file=known_hosts_file,
            remote_work_dir=remote_work_dir, connect_timeout=connect_timeout,
            keepalive_interval=max(1.0, float(lost_host_timeout) / 4), lost_policy=lost_host_policy)
        # one policy for failed starts and lost hosts (nnix.services.health); giving up needs every machine
        # failing for lostHostTimeout, and never less than one agent start timeout
        super().__init__(emit, launcher=launcher, context=context, reuse=reuse, trial_gpu_number=trial_gpu_number,
                         lost_timeout=lost_host_timeout, adopt_wait=adopt_wait, **agent)

    @classmethod
    def _options_from_config(cls, config: ExperimentConfig, emit: Emit, context: ServiceContext | None,
                             options: dict[str, Any]) -> dict[str, Any]:
        ts = cast("RemoteConfig", config.training_service)
        return {"machines": list(ts.machine_list), "context": context, "code_dir": config.trial_code_directory,
                "reuse": ts.reuse_mode, "trial_gpu_number": config.trial_gpu_number,
                "trust_unknown_hosts": ts.trust_unknown_hosts, "known_hosts_file": ts.known_hosts_file,
                "remote_work_dir": ts.remote_work_dir, "lost_host_policy": ts.lost_host_policy,
                "lost_host_timeout": float(ts.lost_host_timeout), **options}

    @classmethod
    async def reclaim(cls, config: ExperimentConfig, context: ServiceContext,
                      trials: Sequence[LeftTrial] = ()) -> list[str]:
        """Without a manager: on each machine, the experiment's agents (which would retry for a day) and the trials
        it left running there are killed (nnix.services.base.Reclaims; :meth:`SshLauncher.reclaim`)."""
        service = cls.from_config(config, lambda _: None, context=context)
        return await service.launcher.reclaim(trials)

    # --- `nnix platform clean` --------------------------------------------------------------------
    async def leftovers(self, remove: bool = False) -> list[tuple[str, list[str], str, list[str]]]:
        """For each machine: ``(label, directories nnix left under remoteWorkDir, problem, live agents)``; with
        ``remove`` the agents are killed and the directories deleted (see
        :meth:`nnix.services.ssh.SshLauncher.leftovers`)."""
        return await self.launcher.leftovers(remove)

    # --- views (tests, CLI) ----------------------------------------------------------------------
    def machines(self) -> list[tuple[str, str, str]]:
        """``(label, state, problem)`` of each machine."""
        return [(m.label, m.state, m.problem) for m in self._machines]
