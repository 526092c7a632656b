from __future__ import annotations

import pytest
from pydantic import ValidationError

import nnix.assessors.curvefitting as cf
from nnix.assessors.base import AssessorContext, Decision
from nnix.assessors.curvefitting import CurvefittingArgs, CurvefittingAssessor, predict
from nnix.core.status import TrialStatus
from nnix.registry import AlgorithmRef, resolve
from nnix.tuners.base import Direction, TrialRecord

BEST = TrialRecord(0, {}, TrialStatus.SUCCEEDED, 0.9, (0.5, 0.7, 0.8, 0.85, 0.88, 0.9))
FAILED_HIGH = TrialRecord(1, {}, TrialStatus.FAILED, None, (0.99,))  # not a completed successful trial
LOW = (0.1, 0.2, 0.25, 0.28, 0.3, 0.31, 0.315, 0.318, 0.32)  # saturates near 1/3
RISING = (0.3, 0.5, 0.65, 0.75, 0.82, 0.87, 0.9, 0.92)  # heading past 0.95


def judge(
    history: tuple[float, ...],
    assessor: CurvefittingAssessor | None = None,
    others: tuple[TrialRecord, ...] = (BEST, FAILED_HIGH),
) -> Decision:
    trial = TrialRecord(9, {}, TrialStatus.RUNNING, None, history)
    return (assessor or CurvefittingAssessor()).assess(AssessorContext(Direction.MAXIMIZE, (*others, trial)), trial)


def test_a_curve_saturating_low_is_bad() -> None:
    prediction = predict(LOW[:6], 20)
    assert prediction is not None and prediction < 0.5
    assert judge(LOW[:6]) is Decision.BAD


def test_a_rising_curve_is_good() -> None:
    prediction = predict(RISING[:6], 20)
    assert prediction is not None and prediction > 0.95 * 0.9
    assert judge(RISING[:6]) is Decision.GOOD


def test_before_start_step_or_without_a_completed_trial_it_is_good() -> None:
    assert judge(LOW[:5]) is Decision.GOOD
    assert judge(LOW[:6], others=(FAILED_HIGH,)) is Decision.GOOD
    assert judge(LOW[:6], CurvefittingAssessor(CurvefittingArgs(epoch_num=6))) is Decision.GOOD  # nothing to predict


def test_gap_rule_is_derived_from_the_number_of_results() -> None:
    assessor = CurvefittingAssessor(CurvefittingArgs(start_step=6, gap=2))
    assert [assessor.judged_at(s) for s in range(5, 11)] == [False, True, False, True, False, True]
    assert judge(LOW[:6], assessor) is Decision.BAD
    assert judge(LOW[:7], assessor) is Decision.GOOD  # between judgements
    assert judge(LOW[:8], assessor) is Decision.BAD
    # a fresh assessor (a resumed experiment) judges the same
    assert judge(LOW[:7], CurvefittingAssessor(CurvefittingArgs(start_step=6, gap=2))) is Decision.GOOD


def test_threshold() -> None:
    lenient = CurvefittingAssessor(CurvefittingArgs(threshold=0.3))
    assert judge(LOW[:6], lenient) is Decision.GOOD


def test_fit_failure_is_good(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise FloatingPointError("no fit")

    monkeypatch.setattr(cf, "least_squares", boom)
    assert predict(LOW[:6], 20) is None
    assert judge(LOW[:6]) is Decision.GOOD

    def crash(*args: object, **kwargs: object) -> None:
        raise RuntimeError("unexpected")

    monkeypatch.setattr(cf, "predict", crash)
    assert judge(LOW[:6]) is Decision.GOOD


def test_disagreeing_or_degenerate_curves_predict_nothing() -> None:
    assert predict([], 20) is None
    assert predict([0.1, float("nan"), 0.3], 20) is None


def test_args_and_registry() -> None:
    args = CurvefittingArgs()
    assert (args.epoch_num, args.start_step, args.threshold, args.gap) == (20, 6, 0.95, 1)
    with pytest.raises(ValidationError):
        CurvefittingArgs(gap=0)
    with pytest.raises(ValidationError):
        CurvefittingArgs.model_validate({"optimize_mode": "maximize"})
    assert resolve("assessor", AlgorithmRef(name="curvefitting")) is CurvefittingAssessor
    assert len(cf.CURVES) == 12
