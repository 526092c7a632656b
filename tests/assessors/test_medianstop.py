from __future__ import annotations

import pytest
from pydantic import ValidationError

from nnix.assessors.base import AssessorContext, Decision
from nnix.assessors.medianstop import MedianstopArgs, MedianstopAssessor
from nnix.core.status import TrialStatus
from nnix.registry import AlgorithmRef, resolve
from nnix.tuners.base import Direction, TrialRecord

S = TrialStatus.SUCCEEDED
OTHERS = (
    TrialRecord(0, {}, S, 3.0, (1.0, 2.0, 3.0)),  # running averages: S=2 -> 1.5, S=3 -> 2.0
    TrialRecord(1, {}, S, 4.0, (2.0, 3.0, 4.0)),  # S=2 -> 2.5, S=3 -> 3.0
    TrialRecord(2, {}, S, 1.0, (0.5, 1.0)),  # S=2 -> 0.75; too short for S=3
    TrialRecord(3, {}, TrialStatus.FAILED, None, (9.0, 9.0, 9.0)),  # not a completed successful trial
    TrialRecord(4, {}, TrialStatus.EARLY_STOPPED, None, (9.0, 9.0, 9.0)),
    TrialRecord(5, {}, TrialStatus.RUNNING, None, (9.0, 9.0, 9.0)),
    TrialRecord(6, {}, S, 2.0),  # no intermediate results
)


def judge(
    history: tuple[float, ...], mode: str | None, direction: Direction = Direction.MAXIMIZE, start: int = 0
) -> Decision:
    trial = TrialRecord(99, {}, TrialStatus.RUNNING, None, history)
    assessor = MedianstopAssessor(MedianstopArgs(optimize_mode=mode, start_step=start))  # type: ignore[arg-type]
    return assessor.assess(AssessorContext(direction, (*OTHERS, trial)), trial)


# (trial history, optimize_mode, expected) -- NNI's rule, section 4.1
CASES = [
    # S=3: averages [2.0, 3.0]; maximize: lower median 2.0, Bad iff best < 2.0
    ((1.0, 1.5, 1.9), "maximize", Decision.BAD),
    ((1.0, 2.0, 1.0), "maximize", Decision.GOOD),  # best == median: strict comparison
    ((0.0, 0.0, 2.5), "maximize", Decision.GOOD),  # best of the whole history, not the latest
    # minimize: upper median 3.0, Bad iff best (min) > 3.0
    ((3.5, 3.1, 4.0), "minimize", Decision.BAD),
    ((3.5, 3.0, 4.0), "minimize", Decision.GOOD),
    ((2.5, 9.0, 9.0), "minimize", Decision.GOOD),
    # S=2: averages [0.75, 1.5, 2.5]; n odd: median 1.5 either way
    ((1.0, 1.4), "maximize", Decision.BAD),
    ((1.0, 1.5), "maximize", Decision.GOOD),
    ((1.6, 2.0), "minimize", Decision.BAD),
    ((1.5, 2.0), "minimize", Decision.GOOD),
    # S=4: no completed trial reported 4 results
    ((0.0, 0.0, 0.0, 0.0), "maximize", Decision.GOOD),
    # S=1: averages [1.0, 2.0, 0.5] -> sorted [0.5, 1.0, 2.0], median 1.0
    ((0.9,), "maximize", Decision.BAD),
    ((1.1,), "minimize", Decision.BAD),
]


@pytest.mark.parametrize(("history", "mode", "expected"), CASES)
def test_nni_rule(history: tuple[float, ...], mode: str, expected: Decision) -> None:
    assert judge(history, mode) is expected


def test_even_count_uses_lower_median_for_maximize_and_upper_for_minimize() -> None:
    # S=3 averages are [2.0, 3.0]: the two modes use different medians
    assert judge((2.5, 2.5, 2.5), "maximize") is Decision.GOOD  # vs 2.0
    assert judge((2.5, 2.5, 2.5), "minimize") is Decision.GOOD  # vs 3.0
    assert judge((1.99, 1.99, 1.99), "maximize") is Decision.BAD
    assert judge((3.01, 3.01, 3.01), "minimize") is Decision.BAD


def test_start_step() -> None:
    assert judge((0.0, 0.0), "maximize", start=3) is Decision.GOOD
    assert judge((0.0, 0.0, 0.0), "maximize", start=3) is Decision.BAD


def test_no_completed_trials_is_good() -> None:
    trial = TrialRecord(0, {}, TrialStatus.RUNNING, None, (-100.0,))
    assert MedianstopAssessor().assess(AssessorContext(Direction.MAXIMIZE, (trial,)), trial) is Decision.GOOD


def test_direction_defaults_to_the_experiment_and_optimize_mode_overrides_it() -> None:
    assert judge((3.5, 3.1, 4.0), None, Direction.MINIMIZE) is Decision.BAD
    assert judge((3.5, 3.1, 4.0), None, Direction.MAXIMIZE) is Decision.GOOD
    assert judge((3.5, 3.1, 4.0), "minimize", Direction.MAXIMIZE) is Decision.BAD


def test_pure_and_registered() -> None:
    a = MedianstopAssessor()
    assert [judge((1.0, 1.5, 1.9), "maximize") for _ in range(3)] == [Decision.BAD] * 3
    assert resolve("assessor", AlgorithmRef(name="Medianstop")) is MedianstopAssessor
    assert a.args.start_step == 0
    with pytest.raises(ValidationError):
        MedianstopArgs(start_step=-1)
    with pytest.raises(ValidationError):
        MedianstopArgs.model_validate({"optimize_mode": "max"})
