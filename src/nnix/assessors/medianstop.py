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
exactly as before. Its cache (the sorted averages of each step asked for) follows the manager's history from
assessment to assessment in O(new + changed records), not O(history).

Deviation: without ``optimize_mode`` in classArgs the assessor follows the
experiment's direction (NNI assumes ``maximize``, a trap with a minimising tuner).
"""

from __future__ import annotations

import math
import sys
from array import array
from bisect import bisect_left, insort
from collections.abc import Iterable, Sequence
from itertools import accumulate
from typing import ClassVar, Literal

from pydantic import Field

from nnix.assessors.base import AssessedHistory, AssessorContext, CountedRecords, Decision
from nnix.model.args import TunerArgs
from nnix.model.status import TrialStatus
from nnix.model.trials import Direction, TrialRecord

__all__ = ["MedianstopArgs", "MedianstopAssessor"]


class MedianstopArgs(TunerArgs):
    optimize_mode: Literal["maximize", "minimize"] | None = None  # None: the experiment's direction
    start_step: int = Field(default=0, ge=0, le=9999)


# Up to Python 3.11, sum() adds floats one after the other: a running sum is each prefix's sum, bit for bit
# (3.12 compensates the rounding: there, each prefix is summed anew)
_RUNNING_SUM_EXACT = sys.version_info < (3, 12)


def _averages(values: Sequence[float]) -> list[float]:
    """The running averages of ``values``, each as the rule computes it (``sum(values[:s]) / s``)."""
    if _RUNNING_SUM_EXACT:
        sums = accumulate(values, initial=0.0)
        next(sums)
        return [total / s for s, total in enumerate(sums, 1)]
    return [sum(values[:s]) / s for s in range(1, len(values) + 1)]


def _odd(values: Sequence[float]) -> bool:
    """Whether a running average of ``values`` is NaN (then their sum is: NaN stays NaN, and an overflow of
    finite values gives an infinity, not NaN). Sorting those is ill-defined: such records are not followed."""
    return math.isnan(sum(values))


class _Steps(CountedRecords):
    """The completed successful trials, and per step ``s`` asked for so far the sorted running averages over
    the first ``s`` results of those with at least ``s`` results (raw doubles): the median is one index away. A
    step is sorted when first asked for (once, what one assessment cost before), then kept as trials end."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: dict[int, array[float]] = {}
        self.odd = 0  # records counted with a NaN running average: in no step (while there is one: read afresh)

    def counts(self, record: TrialRecord) -> bool:
        return record.status is TrialStatus.SUCCEEDED and len(record.series) > 0

    def _update(self, record: TrialRecord, add: bool) -> None:
        series = record.series
        if _odd(series):
            self.odd += 1 if add else -1
            return
        longest = max((s for s in self.steps if s <= len(series)), default=0)
        if not longest:
            return
        averages = _averages(series[:longest])
        for s, sorted_at in self.steps.items():
            if s <= longest:
                if add:
                    insort(sorted_at, averages[s - 1])
                else:
                    del sorted_at[bisect_left(sorted_at, averages[s - 1])]

    def added(self, record: TrialRecord) -> None:
        self._update(record, add=True)

    def removed(self, record: TrialRecord) -> None:
        self._update(record, add=False)

    def clear(self) -> None:
        self.steps, self.odd = {}, 0
        super().clear()

    def rebuilt(self, records: Iterable[TrialRecord]) -> None:
        self.odd = sum(_odd(record.series) for record in records)

    def at(self, s: int) -> Sequence[float]:
        """The sorted averages at step ``s`` (while :attr:`odd` is 0)."""
        sorted_at = self.steps.get(s)
        if sorted_at is None:
            averages = (sum(r.series[:s]) / s for r in self.records.values() if len(r.series) >= s)
            sorted_at = self.steps[s] = array("d", sorted(averages))
        return sorted_at


class MedianstopAssessor:
    """NNI's median stopping rule. Its only state is a cache of the history (:class:`_Steps`, followed from
    the manager's history in O(new + changed records) per assessment): the decision is the rule's on the
    history handed in, whatever came before."""

    Args: ClassVar[type[TunerArgs]] = MedianstopArgs

    def __init__(self, args: MedianstopArgs | None = None) -> None:
        self.args = args or MedianstopArgs()
        self._steps = _Steps()

    def direction(self, ctx: AssessorContext) -> Direction:
        mode = self.args.optimize_mode
        return ctx.direction if mode is None else Direction(mode)

    def assess(self, ctx: AssessorContext, trial: TrialRecord) -> Decision:
        history = trial.series
        s = len(history)
        if s == 0 or s < self.args.start_step:
            return Decision.GOOD
        averages = self._averages_at(ctx, trial, s)
        if not averages:
            return Decision.GOOD
        n = len(averages)
        if self.direction(ctx) is Direction.MAXIMIZE:
            return Decision.BAD if max(history) < averages[(n - 1) // 2] else Decision.GOOD
        return Decision.BAD if min(history) > averages[n // 2] else Decision.GOOD

    def _averages_at(self, ctx: AssessorContext, trial: TrialRecord, s: int) -> Sequence[float]:
        """The sorted running averages over the first ``s`` results of the other completed successful trials."""
        if isinstance(ctx.history, AssessedHistory):
            steps = self._steps
            steps.follow(ctx.history.history)
            if trial.parameter_id not in steps.pids and not steps.odd:
                return steps.at(s)
        return sorted(
            sum(r.series[:s]) / s
            for r in ctx.history
            if r.parameter_id != trial.parameter_id and r.status is TrialStatus.SUCCEEDED and len(r.series) >= s
        )
