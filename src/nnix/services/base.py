"""The training-service protocol: services start and stop environments that run trials.

The manager hands a service :class:`~nnix.agent.runner.TrialSpec` objects and receives
:data:`~nnix.agent.runner.RunnerEvent` objects through the ``emit`` callback it gave the service.

Invariants (every service):

* ``submit`` returns False, and changes nothing, when the trial cannot start *now* (no free
  resources); it raises :class:`~nnix.errors.ServiceError` when it can *never* start.
* A successful ``submit`` returns ``Started``; the service then emits any number of ``Metrics``
  and exactly one ``Exited`` for that trial, unless closed with ``kill_trials=False`` (the
  trials then keep running, for a later ``reattach``).
* ``cancel`` is idempotent and never raises for a trial that already ended.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from nnix.agent.runner import Started, TrialSpec


@dataclass(frozen=True)
class CapacityChanged:
    """Emitted by a service when it can take a trial without any trial event having said so (an
    environment came up): the manager submits waiting trials at once instead of at its next check."""

    reason: str = ""


@dataclass(frozen=True)
class ServiceContext:
    """What a service may need to know about its experiment (given to ``from_config`` as ``context``)."""

    experiment_id: str
    experiment_dir: Path


class TrainingService(Protocol):
    platform: str

    async def start(self) -> None: ...

    async def submit(self, spec: TrialSpec) -> Started | None:
        """Start a trial; None when resources are busy now (the trial stays WAITING)."""
        ...

    async def cancel(self, trial_id: str) -> None: ...

    async def reattach(
        self, trial_id: str, output_dir: Path, pid: int | None, pid_start: str | None, after_index: int,
        gpus: tuple[int, ...] | None,
    ) -> None:
        """Resume watching a trial that an earlier manager started."""
        ...

    # Optional: ``set_demand(waiting: int) -> None``, called before each round of ``submit`` with the
    # number of trials waiting, for services that start environments ahead of time.

    def waiting_reason(self) -> str:
        """Why the last ``submit`` returned None, in words for the user."""
        ...

    async def close(self, kill_trials: bool) -> None: ...
