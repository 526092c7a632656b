"""The history an assessor is handed (made in O(1)) and the built-in assessors' caches of it: on a recorded
sequence of assessments, as the manager drives them, every decision is the one of the rule read afresh from
the whole history (the code before the caches)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import nnix.assessors.curvefitting as cf
from nnix.assessors.base import AssessedHistory, AssessorContext, Decision
from nnix.assessors.curvefitting import CurvefittingArgs, CurvefittingAssessor
from nnix.assessors.medianstop import MedianstopArgs, MedianstopAssessor
from nnix.model.status import TrialStatus
from nnix.model.trials import Direction, Series, TrialRecord
from nnix.tuners.base import History, ReplacedLog

S = TrialStatus.SUCCEEDED


def _records(n: int) -> list[TrialRecord]:
    return [TrialRecord(i, {"x": i}, S, float(i), (float(i),), f"t{i}") for i in range(n)]


def test_an_assessed_history_is_the_others_then_the_trial_without_a_copy() -> None:
    records = _records(5)
    trial = TrialRecord(2, {"x": 2}, TrialStatus.RUNNING, None, (0.5,), "t2")
    h = AssessedHistory(History.view(records, object(), []), 2, trial)
    old = (*(r for r in records if r.trial_id != "t2"), trial)  # what the manager handed before
    assert h == old and old == h and len(h) == 5 and tuple(h) == old and list(h) == list(old)
    assert [h[i] for i in range(-5, 5)] == [*old, *old] and h[1:3] == old[1:3] and h[::-1] == old[::-1]
    assert h[-1] is trial and h[2] is records[3]
    with pytest.raises(IndexError):
        h[5]
    with pytest.raises(IndexError):
        h[-6]
    new = TrialRecord(9, {"x": 9}, TrialStatus.RUNNING, None, (1.0,), "t9")  # a trial without a record yet
    assert AssessedHistory(History.view(records, object()), None, new) == (*records, new)


class _Driver:
    """The manager's part, recorded: trials created, started, reporting, ending (or stopped when judged Bad),
    each change a record replaced in the history list (and logged), now and then a new lineage."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.history: list[TrialRecord] = []
        self.at: dict[str, int] = {}
        self.lineage: object = object()
        self.log = ReplacedLog()

    def put(self, record: TrialRecord) -> None:
        assert record.trial_id is not None
        i = self.at.get(record.trial_id)
        if i is None:
            self.at[record.trial_id] = len(self.history)
            self.history.append(record)
        else:
            self.history[i] = record
            self.log.append(i)

    def new_lineage(self) -> None:
        self.history, self.lineage, self.log = list(self.history), object(), ReplacedLog()

    def run(self, judge: Any, n_trials: int = 160, concurrency: int = 6) -> list[tuple[Decision, Decision]]:
        """Drive ``judge(ctx_new, ctx_old, trial) -> (new decision, old decision)`` at each growth of a result."""
        rng, out = self.rng, []
        running: dict[str, tuple[int, list[float], int, float]] = {}  # id -> pid, results, length, level
        created = 0
        while created < n_trials or running:
            while created < n_trials and len(running) < concurrency:
                tid = f"t{created}"
                self.put(TrialRecord(created, {"x": created}, TrialStatus.WAITING, None, (), tid))
                self.put(TrialRecord(created, {"x": created}, TrialStatus.RUNNING, None, (), tid))
                running[tid] = (created, [], int(rng.integers(1, 25)), float(rng.normal()))
                created += 1
            tid = list(running)[int(rng.integers(len(running)))]
            pid, results, length, level = running[tid]
            results.append(round(level + float(rng.normal()) * 0.5 + 0.05 * len(results), 3))
            self.put(TrialRecord(pid, {"x": pid}, TrialStatus.RUNNING, None, Series(results), tid))
            trial = TrialRecord(pid, {"x": pid}, TrialStatus.RUNNING, None, tuple(results), tid)
            view = History.view(self.history, self.lineage, self.log)
            new_ctx = AssessorContext(Direction.MAXIMIZE, AssessedHistory(view, self.at[tid], trial))
            old_ctx = AssessorContext(Direction.MAXIMIZE, (*(r for r in self.history if r.trial_id != tid), trial))
            new, old = judge(new_ctx, old_ctx, trial)
            out.append((new, old))
            end = None
            if new is Decision.BAD:
                end = TrialStatus.EARLY_STOPPED
            elif len(results) >= length:
                end = TrialStatus.FAILED if rng.random() < 0.1 else S
            if end is not None:
                value = results[-1] if end is S else None
                self.put(TrialRecord(pid, {"x": pid}, end, value, Series(results), tid))
                del running[tid]
            if rng.random() < 0.03 and self.history:  # a late result of an ended trial: its record replaced
                r = self.history[int(rng.integers(len(self.history)))]
                if r.status is S and r.trial_id not in running:
                    late = (*r.intermediate, round(float(rng.normal()), 3))
                    self.put(TrialRecord(r.parameter_id, r.params, S, r.value, Series(late), r.trial_id))
            if rng.random() < 0.01:
                self.new_lineage()
            elif rng.random() < 0.01:
                self.log.trim(int(rng.integers(3)))  # (the assessor behind the log reads it all)
        return out


def _old_medianstop(args: MedianstopArgs, ctx: AssessorContext, trial: TrialRecord) -> Decision:
    """The rule as the code before the cache read it (every record, at every assessment)."""
    history = trial.intermediate
    s = len(history)
    if s == 0 or s < args.start_step:
        return Decision.GOOD
    averages = sorted(
        sum(r.intermediate[:s]) / s
        for r in ctx.history
        if r.parameter_id != trial.parameter_id and r.status is S and len(r.intermediate) >= s
    )
    if not averages:
        return Decision.GOOD
    n = len(averages)
    if (args.optimize_mode or ctx.direction.value) == "maximize":
        return Decision.BAD if max(history) < averages[(n - 1) // 2] else Decision.GOOD
    return Decision.BAD if min(history) > averages[n // 2] else Decision.GOOD


@pytest.mark.parametrize("mode", ["maximize", "minimize"])
def test_medianstop_decides_on_a_recorded_sequence_as_the_rule_read_afresh(mode: str) -> None:
    args = MedianstopArgs(optimize_mode=mode, start_step=2)  # type: ignore[arg-type]
    assessor = MedianstopAssessor(args)

    def judge(new: AssessorContext, old: AssessorContext, trial: TrialRecord) -> tuple[Decision, Decision]:
        assert new.history == old.history  # the same records, in the same order
        return assessor.assess(new, trial), _old_medianstop(args, old, trial)

    pairs = _Driver(11).run(judge)
    assert [new for new, _ in pairs] == [old for _, old in pairs]
    assert Decision.BAD in (new for new, _ in pairs) and Decision.GOOD in (new for new, _ in pairs)  # (both ways)
    assert len(pairs) > 300


def test_curvefitting_decides_on_a_recorded_sequence_as_the_rule_read_afresh(monkeypatch: Any) -> None:
    """(The curves are fitted by a cheap stand-in, the same for both: only the reading of the history changed.)"""

    def stand_in(history: Any, target: int) -> float:
        return float(np.mean(history[-3:])) + 0.02 * (target - len(history))

    monkeypatch.setattr(cf, "predict", stand_in)
    args = CurvefittingArgs(epoch_num=20, start_step=3, threshold=0.95, gap=2)
    assessor = CurvefittingAssessor(args)

    def old_rule(ctx: AssessorContext, trial: TrialRecord) -> Decision:
        s = len(trial.intermediate)
        if s == 0 or not assessor.judged_at(s) or s >= args.epoch_num:
            return Decision.GOOD
        lasts = [r.intermediate[-1] for r in ctx.history
                 if r.parameter_id != trial.parameter_id and r.status is S and r.intermediate]
        if not lasts:
            return Decision.GOOD
        return Decision.BAD if stand_in(trial.intermediate, args.epoch_num) <= args.threshold * max(lasts) \
            else Decision.GOOD

    bests: list[tuple[float | None, float | None]] = []

    def judge(new: AssessorContext, old: AssessorContext, trial: TrialRecord) -> tuple[Decision, Decision]:
        decision = assessor.assess(new, trial)
        lasts = [r.intermediate[-1] for r in old.history
                 if r.parameter_id != trial.parameter_id and r.status is S and r.intermediate]
        bests.append((assessor.best_completed(new, trial), max(lasts) if lasts else None))
        return decision, old_rule(old, trial)

    pairs = _Driver(12).run(judge)
    assert [new for new, _ in pairs] == [old for _, old in pairs]
    assert [a for a, _ in bests] == [b for _, b in bests] and {Decision.BAD, Decision.GOOD} <= {n for n, _ in pairs}


def test_a_plain_history_or_a_record_of_the_trials_parameter_id_is_read_afresh() -> None:
    """A history that is not the manager's (a tuple), and a completed record with the assessed trial's parameter
    id (the rule leaves it out), are read record by record, as before."""
    done = [TrialRecord(i, {}, S, 1.0, Series([float(i), float(i)]), f"t{i}") for i in range(5)]
    trial = TrialRecord(0, {}, TrialStatus.RUNNING, None, (1.5, 1.5), "x")
    median = MedianstopAssessor(MedianstopArgs(optimize_mode="maximize"))
    # the others' averages at 2 results: 1, 2, 3, 4 (pid 0 left out): lower median 2
    assert median.assess(AssessorContext(Direction.MAXIMIZE, (*done, trial)), trial) is Decision.BAD
    view = AssessedHistory(History.view(done, object(), []), None, trial)
    assert median.assess(AssessorContext(Direction.MAXIMIZE, view), trial) is Decision.BAD
    # pid 4 left out: 0, 1, 2, 3, lower median 1 (with it: 2, and 1.5 would be Bad)
    four = TrialRecord(4, {}, TrialStatus.RUNNING, None, (1.5, 1.5), "y")
    view = AssessedHistory(History.view(done, object(), []), None, four)
    assert median.assess(AssessorContext(Direction.MAXIMIZE, view), four) is Decision.GOOD
    curve = CurvefittingAssessor()
    assert curve.best_completed(AssessorContext(Direction.MAXIMIZE, view), trial) == 4.0
    assert curve.best_completed(AssessorContext(Direction.MAXIMIZE, view), four) == 3.0  # pid 4 holds the best
