from __future__ import annotations

from nnix.core.events import (
    ExperimentCreated,
    LimitsUpdated,
    ManagerStarted,
    MetricReported,
    StatusChanged,
    TrialCancelRequested,
    TrialCreated,
    TrialEnded,
    TrialStarted,
)
from nnix.core.state import fold
from nnix.core.status import CancelReason, ExperimentStatus, MetricType, TrialStatus
from nnix.store.base import Stored


def _log(*pairs: tuple[float, object]) -> list[Stored]:
    return [Stored(i + 1, ts, ev) for i, (ts, ev) in enumerate(pairs)]  # type: ignore[arg-type]


CONFIG = {"trial_concurrency": 2, "max_trial_number": 5, "search_space": {"x": {"_type": "choice", "_value": [1]}},
          "tuner": {"class_args": {"optimize_mode": "minimize"}}}


def test_fold_builds_trials_metrics_and_best() -> None:
    state = fold(_log(
        (100.0, ExperimentCreated("e1", CONFIG, 7)),
        (100.0, ManagerStarted(1, "create", 8080)),
        (100.5, StatusChanged(ExperimentStatus.RUNNING)),
        (101.0, TrialCreated("a", 0, 0, {"x": 1})),
        (101.0, TrialCreated("b", 1, 1, {"x": 2})),
        (101.1, TrialStarted("a", "local-env", "/tmp/a", 10, "1")),
        (101.2, MetricReported("a", MetricType.PERIODICAL, 0, 3.0, 0)),
        (101.3, MetricReported("a", MetricType.FINAL, 0, {"default": 2.0, "acc": 0.1}, 1)),
        (101.4, TrialEnded("a", TrialStatus.SUCCEEDED, 0)),
        (101.5, TrialStarted("b", "local-env", "/tmp/b", 11, "1")),
        (101.6, MetricReported("b", MetricType.FINAL, 0, 1.5, 0)),
        (101.7, TrialCancelRequested("b", CancelReason.USER)),
        (101.8, TrialEnded("b", TrialStatus.USER_CANCELED, None)),
    ))
    assert state.experiment_id == "e1" and state.seed == 7
    assert state.next_sequence_id == 2 and state.next_parameter_id == 2
    a, b = state.trials["a"], state.trials["b"]
    assert a.final_value == 2.0 and [m.value for m in a.intermediate] == [3.0]
    assert b.status is TrialStatus.USER_CANCELED and b.cancel_reason is CancelReason.USER
    assert state.best_trial() is b  # minimize
    assert state.count(TrialStatus.SUCCEEDED) == 1
    assert state.limits["trial_concurrency"] == 2


def test_limits_updates_and_status_end_time() -> None:
    state = fold(_log(
        (0.0, ExperimentCreated("e", CONFIG, 1)),
        (0.0, ManagerStarted(1, "create")),
        (1.0, LimitsUpdated("max_trial_number", 9)),
        (2.0, StatusChanged(ExperimentStatus.DONE, "limit")),
    ))
    assert state.limits["max_trial_number"] == 9
    assert state.end_time == 2.0
    state.apply(Stored(5, 3.0, LimitsUpdated("max_trial_number", 20)))
    state.apply(Stored(6, 3.0, StatusChanged(ExperimentStatus.RUNNING)))
    assert state.end_time is None


def test_elapsed_counts_sessions_not_downtime() -> None:
    state = fold(_log(
        (0.0, ExperimentCreated("e", CONFIG, 1)),
        (0.0, ManagerStarted(1, "create")),
        (0.0, StatusChanged(ExperimentStatus.RUNNING)),
        (30.0, TrialCreated("a", 0, 0, {})),  # last sign of life of session 1 (then a crash)
        (1000.0, ManagerStarted(2, "resume")),
        (1000.0, StatusChanged(ExperimentStatus.RUNNING)),
        (1010.0, TrialCreated("b", 1, 1, {})),
    ))
    assert state.elapsed() == 40.0
    assert state.elapsed(now=1020.0) == 50.0
