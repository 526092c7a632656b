"""Hybrid mode (NNI's ``trainingService`` given as a list): one experiment's trials spread over several
training services.

Each listed service is built as it would be alone (so it keeps its own rules: GPU scheduling, reuse,
host policies) with a directory of its own under ``<experiment dir>/services/<i>-<platform>/`` for its
state. A waiting trial goes to the first service, in turn starting after the one that took the previous
trial, that can start it now; a service that can *never* run it (e.g. it has no GPU) is skipped, and the
trial fails only when no service can ever run it. Which service runs which trial is appended to
``<experiment dir>/services/hybrid.tsv``, so a resumed manager gives each running trial back to its own
service.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from nnix.errors import ServiceError, ServiceUnavailableError
from nnix.model.runs import Exited, RunnerEvent, Started, TrialSpec
from nnix.services.base import Configured, Emit, ServiceContext, TakesDemand, TrainingService

if TYPE_CHECKING:
    from nnix.config import ExperimentConfig, HybridConfig

__all__ = ["HybridService"]

log = logging.getLogger("nnix.services.hybrid")


class HybridService(Configured):
    platform = "hybrid"

    def __init__(
        self,
        emit: Callable[[RunnerEvent], None],
        children: list[TrainingService],
        labels: list[str],
        ledger: Path | None = None,
    ) -> None:
        if not children:
            raise ServiceError("hybrid mode needs at least one training service")
        self._emit = emit
        self.children = children
        self._labels = labels
        self._ledger = ledger
        self._owner: dict[str, int] = {}
        self._next = 0
        self._reason = ""

    @classmethod
    def _options_from_config(cls, config: ExperimentConfig, emit: Emit, context: ServiceContext | None,
                             options: dict[str, Any]) -> dict[str, Any]:
        from nnix.services.factory import service_factory

        ts = cast("HybridConfig", config.training_service)
        children: list[TrainingService] = []
        labels: list[str] = []
        for i, child in enumerate(ts.services):
            sub = config.model_copy(update={"training_service": child})
            sub_context = None
            if context is not None:
                sub_dir = context.experiment_dir / "services" / f"{i}-{child.platform}"
                sub_dir.mkdir(parents=True, exist_ok=True)
                sub_context = ServiceContext(context.experiment_id, sub_dir)
            children.append(service_factory(sub, sub_context, **options)(emit))
            labels.append(f"trainingService[{i}] ({child.platform})")
        ledger = context.experiment_dir / "services" / "hybrid.tsv" if context is not None else None
        return {"children": children, "labels": labels, "ledger": ledger}

    # --- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        started: list[TrainingService] = []
        for child, label in zip(self.children, self._labels, strict=True):
            try:
                await child.start()
            except ServiceError as e:
                for s in started:
                    await s.close(kill_trials=False)
                raise ServiceError(f"{label}: {e.message}", e.hint) from e
            started.append(child)

    async def close(self, kill_trials: bool) -> None:
        for child, label in zip(self.children, self._labels, strict=True):
            try:
                await child.close(kill_trials)
            except Exception as e:  # close the others anyway
                log.warning("closing %s failed: %s", label, e)

    # --- trials --------------------------------------------------------------------------------
    def set_demand(self, waiting: int) -> None:
        for child in self.children:
            if isinstance(child, TakesDemand):
                child.set_demand(waiting)

    async def submit(self, spec: TrialSpec) -> Started | None:
        n = len(self.children)
        reasons: list[str] = []
        never: list[str] = []
        unavailable = 0  # children that gave up on their hosts (nnix.services.health), not on this trial
        for k in range(n):
            i = (self._next + k) % n
            child, label = self.children[i], self._labels[i]
            try:
                started = await child.submit(spec)
            except ServiceError as e:
                never.append(f"{label}: {e.message}")
                unavailable += isinstance(e, ServiceUnavailableError)
                continue
            if started is None:
                reasons.append(f"{label}: {child.waiting_reason() or 'busy'}")
                continue
            self._owner[spec.trial_id] = i
            self._next = (i + 1) % n
            self._remember(spec.trial_id, i)
            self._reason = ""
            return started
        if len(never) == n:
            if unavailable == n:
                raise ServiceUnavailableError("no training service of the hybrid list can run anything: "
                                              + "; ".join(never))
            raise ServiceError("no training service of the hybrid list can run this trial: " + "; ".join(never))
        self._reason = "; ".join(reasons + never)
        return None

    def _remember(self, trial_id: str, index: int) -> None:
        if self._ledger is None:
            return
        try:
            with open(self._ledger, "a", encoding="utf-8") as f:
                f.write(f"{trial_id}\t{index}\n")
        except OSError as e:
            log.warning("cannot record that %s runs trial %s: %s", self._labels[index], trial_id, e)

    def _owners_on_disk(self) -> dict[str, int]:
        owners: dict[str, int] = {}
        if self._ledger is None or not self._ledger.is_file():
            return owners
        for line in self._ledger.read_text(encoding="utf-8").splitlines():
            tid, _, idx = line.partition("\t")
            if idx.strip().isdigit():
                owners[tid] = int(idx)
        return owners

    async def cancel(self, trial_id: str) -> None:
        i = self._owner.get(trial_id)
        if i is not None:
            await self.children[i].cancel(trial_id)

    async def reattach(
        self, trial_id: str, output_dir: Path, pid: int | None, pid_start: str | None, after_index: int,
        gpus: tuple[int, ...] | None,
    ) -> None:
        if trial_id not in self._owner:
            self._owner.update(self._owners_on_disk())
        i = self._owner.get(trial_id)
        if i is None or i >= len(self.children):
            self._emit(Exited(trial_id, None, None, "",
                              "the training service that ran this trial is not in the hybrid list any more"))
            return
        await self.children[i].reattach(trial_id, output_dir, pid, pid_start, after_index, gpus)

    def waiting_reason(self) -> str:
        return self._reason
