"""The local training service: one environment, this machine, with GPU scheduling. It applies the agent
protocol's commands (``Run``, ``Kill``, ``Attach``) in-process through the same
:class:`~nnix.agent.commands.TrialCommands` an agent uses, so local and remote trials run by one code path
(no network hop, no encoding)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from nnix.agent.commands import TrialCommands
from nnix.agent.protocol import Attach, Kill, Run
from nnix.agent.runner import Paced, TrialRunner
from nnix.model.runs import Exited, RunnerEvent, Started, TrialSpec
from nnix.services.base import Configured, Emit, ServiceContext
from nnix.services.gpu import GpuInventory, GpuScheduler, NvmlInventory

if TYPE_CHECKING:
    from nnix.config import ExperimentConfig, LocalConfig

ENVIRONMENT_ID = "local-env"


class LocalService(Configured):
    platform = "local"

    def __init__(
        self,
        emit: Callable[[RunnerEvent], None],
        *,
        trial_gpu_number: int | None = None,
        gpu_indices: list[int] | None = None,
        max_trial_number_per_gpu: int = 1,
        use_active_gpu: bool | None = None,
        inventory: GpuInventory | None = None,
        kill_grace: float = 5.0,
        poll_interval: float = 0.1,
    ) -> None:
        self._emit_up = emit
        self._gpus = GpuScheduler(
            inventory or NvmlInventory(),
            trial_gpu_number=trial_gpu_number,
            gpu_indices=gpu_indices,
            max_trial_number_per_gpu=max_trial_number_per_gpu,
            use_active_gpu=bool(use_active_gpu),
        )
        # the runner reads a trial's metrics no faster than the manager takes them in (a flood waits in its file)
        self._runner = TrialRunner(self._on_event, kill_grace=kill_grace, poll_interval=poll_interval,
                                   pace=emit.caught_up if isinstance(emit, Paced) else None)
        self._commands = TrialCommands(self._runner)
        self._gpu_of: dict[str, tuple[int, ...]] = {}

    @classmethod
    def _options_from_config(cls, config: ExperimentConfig, emit: Emit, context: ServiceContext | None,
                             options: dict[str, Any]) -> dict[str, Any]:
        ts = cast("LocalConfig", config.training_service)
        return {"trial_gpu_number": config.trial_gpu_number, "gpu_indices": ts.gpu_indices,
                "max_trial_number_per_gpu": ts.max_trial_number_per_gpu, "use_active_gpu": ts.use_active_gpu,
                **options}

    def _on_event(self, event: RunnerEvent) -> None:
        if isinstance(event, Exited):
            self._gpus.release(event.trial_id)
        self._emit_up(event)

    async def start(self) -> None:
        self._runner.prepare()  # the first trial's wrapper, while the tuner makes its first suggestion

    async def submit(self, spec: TrialSpec) -> Started | None:
        alloc = self._gpus.allocate(spec.trial_id)
        if alloc is None:
            return None
        env = dict(spec.env)
        env.update(self._gpus.env(alloc))
        self._commands.seen.discard(spec.trial_id)  # never delivered twice here; a re-queued trial runs again
        try:
            started = await self._commands.apply(Run(replace(spec, env=env)))
        except BaseException:
            self._gpus.release(spec.trial_id)
            raise
        assert started is not None
        return replace(started, gpus=alloc.indices) if alloc.indices else started

    async def cancel(self, trial_id: str) -> None:
        await self._commands.apply(Kill(trial_id))

    async def reattach(
        self,
        trial_id: str,
        output_dir: Path,
        pid: int | None,
        pid_start: str | None,
        after_index: int,
        gpus: tuple[int, ...] | None,
    ) -> None:
        if gpus:
            self._gpus.restore(trial_id, list(gpus))
        await self._commands.apply(Attach(trial_id, str(output_dir), pid, pid_start, after_index))

    def waiting_reason(self) -> str:
        return self._gpus.waiting_reason()

    async def close(self, kill_trials: bool) -> None:
        await self._runner.close(kill=kill_trials)
