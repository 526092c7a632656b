"""Median stopping (NNI ``Medianstop``): stop a trial whose best result so far is worse than the
median of what completed trials had reached at the same step.

NNI's rule, for a trial with ``S`` intermediate results:

1. ``S < start_step``: Good.
2. ``best`` = the trial's best intermediate result so far (max when maximising, min when minimising).
3. Over the *completed successful* trials (status SUCCEEDED) with at least ``S`` intermediate results,
   take the running average of their first ``S`` values. None: Good.
4. Sort those averages. Maximise: ``median = sorted[(n - 1) // 2]`` (the lower median), Bad iff
   ``best < median``. Minimise: ``median = sorted[n // 2]`` (the upper median), Bad iff ``best > median``.
   Both comparisons are strict.

Pure: everything comes from the records handed in (no per-trial memory), so a resumed experiment judges
exactly as before. Deviation: without ``optimize_mode`` in classArgs the assessor follows the
experiment's direction (NNI assumes ``maximize``, a trap with a minimising tuner).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from nnix.assessors.base import AssessorContext, Decision
from nnix.model.args import TunerArgs
from nnix.model.status import TrialStatus
from nnix.model.trials import Direction, TrialRecord

__all__ = ["MedianstopArgs", "MedianstopAssessor"]


class MedianstopArgs(TunerArgs):
    optimize_mode: Literal["maximize", "minimize"] | None = None  # None: the experiment's direction
    start_step: int = Field(default=0, ge=0, le=9999)


class MedianstopAssessor:
    """NNI's median stopping rule, stateless."""

    Args: ClassVar[type[TunerArgs]] = MedianstopArgs

    def __init__(self, args: MedianstopArgs | None = None) -> None:
        self.args = args or MedianstopArgs()

    def direction(self, ctx: AssessorContext) -> Direction:
        mode = self.args.optimize_mode
        return ctx.direction if mode is None else Direction(mode)

    def assess(self, ctx: AssessorContext, trial: TrialRecord) -> Decision:
        history = trial.intermediate
        s = len(history)
        if s == 0 or s < self.args.start_step:
            return Decision.GOOD
        averages = sorted(
            sum(r.intermediate[:s]) / s
            for r in ctx.history
            if r.parameter_id != trial.parameter_id and r.status is TrialStatus.SUCCEEDED and len(r.intermediate) >= s
        )
        if not averages:
            return Decision.GOOD
        n = len(averages)
        if self.direction(ctx) is Direction.MAXIMIZE:
            return Decision.BAD if max(history) < averages[(n - 1) // 2] else Decision.GOOD
        return Decision.BAD if min(history) > averages[n // 2] else Decision.GOOD
