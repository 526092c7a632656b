"""The training-service protocol: services start and stop environments that run trials.

The manager hands a service :class:`~nnix.model.runs.TrialSpec` objects and receives
:data:`~nnix.model.runs.RunnerEvent` objects through the ``emit`` callback it gave the service.

Invariants (every service):

* ``submit`` returns None, and changes nothing, when the trial cannot start *now* (no free
  resources; ``waiting_reason`` says why); it raises :class:`~nnix.errors.ServiceError` when it can *never* start.
* A successful ``submit`` returns ``Started``; the service then emits any number of ``Metrics``
  and exactly one ``Exited`` for that trial, unless closed with ``kill_trials=False`` (the
  trials then keep running, for a later ``reattach``).
* ``cancel`` is idempotent and never raises for a trial that already ended.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast, runtime_checkable

from nnix.model.runs import RunnerEvent, Started, TrialSpec

if TYPE_CHECKING:
    from nnix.config import ExperimentConfig


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


@dataclass(frozen=True)
class LeftTrial:
    """A trial the store shows RUNNING while no manager runs: what an earlier manager recorded of it."""

    trial_id: str
    output_dir: str
    pid: int | None
    pid_start: str | None


@runtime_checkable
class Reclaims(Protocol):
    """The optional ability of a service class to end, without a manager, what an experiment left running on its
    engine (``nnix stop`` / ``nnix experiment delete`` of an experiment whose manager died): its environments, and
    the trials ``trials`` it left running where the engine does not end them with the environments. Returns what
    it ended, in words (one line per engine or machine); never raises for an engine it cannot reach (says so)."""

    @classmethod
    async def reclaim(cls, config: ExperimentConfig, context: ServiceContext,
                      trials: Sequence[LeftTrial]) -> list[str]: ...


@runtime_checkable
class TakesDemand(Protocol):
    """The optional ability of a service to start environments ahead of time: the manager calls ``set_demand``
    before each round of ``submit`` with the number of trials waiting (and allowed to start)."""

    def set_demand(self, waiting: int) -> None: ...


Emit = Callable[[RunnerEvent], None]
"""How a service hands the manager what its trials did."""

_S = TypeVar("_S", bound="Configured")


class Configured:
    """``from_config``, written once: a service class built from an experiment's config inherits it and says only
    which keyword arguments of its ``__init__`` the config gives (``_options_from_config``)."""

    @classmethod
    def from_config(
        cls: type[_S],
        config: ExperimentConfig,
        emit: Emit,
        context: ServiceContext | None = None,
        **options: Any,
    ) -> _S:
        """The service for ``config``; ``options`` (tests, hybrid members) override what the config says."""
        service: _S = cast(Any, cls)(emit, **cls._options_from_config(config, emit, context, dict(options)))
        return service

    @classmethod
    def _options_from_config(cls, config: ExperimentConfig, emit: Emit, context: ServiceContext | None,
                             options: dict[str, Any]) -> dict[str, Any]:
        """The keyword arguments of ``cls(emit, **...)`` for ``config``, ``options`` included."""
        raise NotImplementedError(f"{cls.__name__} does not say how it is configured")


class TrainingService(Protocol):
    """A training service (the invariants are the module docstring's). Optional abilities are Protocols of their
    own, checked with ``isinstance``: :class:`TakesDemand` (an instance), :class:`Reclaims` (the class)."""

    platform: str
    """What trials see as ``NNI_PLATFORM`` and messages name it by (``local``, ``remote``, ``slurm``...)."""

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

    def waiting_reason(self) -> str:
        """Why the last ``submit`` returned None, in words for the user."""
        ...

    async def close(self, kill_trials: bool) -> None: ...
