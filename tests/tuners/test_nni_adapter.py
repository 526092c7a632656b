from __future__ import annotations

import textwrap
from enum import Enum
from pathlib import Path
from typing import Any

import pytest

from nnix.assessors.base import AssessorContext, Decision
from nnix.core.status import TrialStatus
from nnix.errors import NoMoreTrialsError, TunerError
from nnix.registry import AlgorithmRef, resolve
from nnix.space import SearchSpace
from nnix.tuners.base import Direction, TrialRecord, TunerContext
from nnix.tuners.nni_adapter import NniAssessorAdapter, NniTunerAdapter, adapt, decision_of, is_no_more_trial_error

SPACE: dict[str, Any] = {"lr": {"_type": "choice", "_value": [0.1, 0.01, 0.001, 0.0001]}}


# -- an NNI-style custom tuner, written the way NNI users write them (without importing nni) --------


class NoMoreTrialError(Exception):
    pass


class SequenceTuner:
    """Proposes the options of ``lr`` in order; keeps what it is told."""

    def __init__(self, optimize_mode: str = "maximize", repeat: int = 1) -> None:
        self.optimize_mode = optimize_mode
        self.repeat = repeat
        self.values: list[Any] = []
        self.index = 0
        self.results: dict[int, tuple[dict[str, Any], float]] = {}
        self.ended: list[tuple[int, bool]] = []
        self.spaces: list[dict[str, Any]] = []
        self.imported: list[dict[str, Any]] = []
        self.calls = 0

    def update_search_space(self, search_space: dict[str, Any]) -> None:
        self.spaces.append(search_space)
        self.values = list(search_space["lr"]["_value"]) * self.repeat

    def generate_parameters(self, parameter_id: int, **kwargs: Any) -> dict[str, Any]:
        self.calls += 1
        if self.index >= len(self.values):
            raise NoMoreTrialError("all learning rates tried")
        lr = self.values[self.index]
        self.index += 1
        return {"lr": lr}

    def receive_trial_result(self, parameter_id: int, parameters: dict[str, Any], value: Any, **kwargs: Any) -> None:
        assert parameter_id not in self.results, "a result was given twice"
        self.results[parameter_id] = (parameters, value)

    def trial_end(self, parameter_id: int, success: bool, **kwargs: Any) -> None:
        self.ended.append((parameter_id, success))

    def import_data(self, data: list[dict[str, Any]]) -> None:
        self.imported.extend(data)


def ctx(history: list[TrialRecord], space: dict[str, Any] = SPACE) -> TunerContext:
    return TunerContext(SearchSpace.from_json(space), Direction.MAXIMIZE, 0, tuple(history))


def instance(adapter: NniTunerAdapter) -> SequenceTuner:
    inst = adapter.instance
    assert isinstance(inst, SequenceTuner)
    return inst


def test_generates_and_feeds_each_fact_once() -> None:
    adapter = NniTunerAdapter(SequenceTuner, {"optimize_mode": "minimize"})
    assert adapter.direction is Direction.MINIMIZE
    first = adapter.suggest(ctx([]), [0, 1])
    assert first == [{"lr": 0.1}, {"lr": 0.01}]
    inst = instance(adapter)
    assert inst.spaces == [SPACE]
    history = [TrialRecord(0, first[0], TrialStatus.RUNNING), TrialRecord(1, first[1], TrialStatus.RUNNING)]
    assert adapter.suggest(ctx(history), [2]) == [{"lr": 0.001}]
    history.append(TrialRecord(2, {"lr": 0.001}, TrialStatus.RUNNING))
    history[0] = TrialRecord(0, first[0], TrialStatus.RUNNING, 0.5)  # final result, still running
    history[1] = TrialRecord(1, first[1], TrialStatus.FAILED)
    adapter.suggest(ctx(history), [])
    history[0] = TrialRecord(0, first[0], TrialStatus.SUCCEEDED, 0.5)
    adapter.suggest(ctx(history), [])
    adapter.suggest(ctx(history), [])
    assert instance(adapter) is inst  # a continuation: no rebuild
    assert inst.results == {0: ({"lr": 0.1}, 0.5)}
    assert inst.ended == [(1, False), (0, True)]
    assert inst.calls == 3


def test_no_more_trial_error_keeps_what_came_before() -> None:
    adapter = NniTunerAdapter(SequenceTuner)
    got = adapter.suggest(ctx([]), [0, 1, 2, 3, 4, 5])
    assert got == [{"lr": v} for v in SPACE["lr"]["_value"]]
    history = [TrialRecord(i, p, TrialStatus.SUCCEEDED, 0.1) for i, p in enumerate(got)]
    with pytest.raises(NoMoreTrialsError, match="all learning rates tried"):
        adapter.suggest(ctx(history), [4])


def test_resume_replays_the_history_into_a_fresh_instance() -> None:
    live = NniTunerAdapter(SequenceTuner, {"repeat": 2})
    history: list[TrialRecord] = []
    for pid in range(3):
        (params,) = live.suggest(ctx(history), [pid])
        history.append(TrialRecord(pid, params, TrialStatus.RUNNING))
    history[0] = TrialRecord(0, history[0].params, TrialStatus.SUCCEEDED, 0.7)
    history[1] = TrialRecord(1, history[1].params, TrialStatus.USER_CANCELED)
    history.insert(0, TrialRecord(-1, {"lr": 0.5}, TrialStatus.SUCCEEDED, 0.0))  # imported: a 0 is data

    resumed = NniTunerAdapter(SequenceTuner, {"repeat": 2})  # a new manager process
    assert resumed.suggest(ctx(history), [3]) == live.suggest(ctx(history), [3]) == [{"lr": 0.0001}]
    inst = instance(resumed)
    assert inst.index == 4  # generate_parameters replayed for ids 0..2, then id 3
    assert inst.results == {0: ({"lr": 0.1}, 0.7)}
    assert inst.ended == [(0, True), (1, False)]
    assert inst.imported == [{"parameter": {"lr": 0.5}, "value": 0.0}]
    assert instance(live).imported == [{"parameter": {"lr": 0.5}, "value": 0.0}]


def test_a_foreign_history_rebuilds() -> None:
    adapter = NniTunerAdapter(SequenceTuner)
    adapter.suggest(ctx([]), [0])
    first = instance(adapter)
    other = [TrialRecord(0, {"lr": 0.0001}, TrialStatus.SUCCEEDED, 0.3)]  # not what it proposed for id 0
    assert adapter.suggest(ctx(other), [1]) == [{"lr": 0.01}]
    assert instance(adapter) is not first
    assert instance(adapter).results == {0: ({"lr": 0.0001}, 0.3)}


def test_proposals_never_created_are_asked_again() -> None:
    adapter = NniTunerAdapter(SequenceTuner)
    adapter.suggest(ctx([]), [0, 1])
    inst = instance(adapter)
    # the manager created only id 0 and asks for id 1 again: still a continuation
    assert adapter.suggest(ctx([TrialRecord(0, {"lr": 0.1}, TrialStatus.RUNNING)]), [1]) == [{"lr": 0.001}]
    assert instance(adapter) is inst


def test_search_space_update_goes_to_the_same_instance() -> None:
    adapter = NniTunerAdapter(SequenceTuner)
    adapter.suggest(ctx([]), [])
    bigger = {"lr": {"_type": "choice", "_value": [1.0, 2.0]}}
    assert adapter.suggest(ctx([], bigger), [0]) == [{"lr": 1.0}]
    assert instance(adapter).spaces == [SPACE, bigger]


class MultiTuner(SequenceTuner):
    def generate_multiple_parameters(self, parameter_id_list: list[int], **kwargs: Any) -> list[dict[str, Any]]:
        return [{"lr": 0.5, "id": pid} for pid in parameter_id_list]


def test_generate_multiple_parameters_is_used_when_defined() -> None:
    assert NniTunerAdapter(MultiTuner).suggest(ctx([]), [4, 5]) == [{"lr": 0.5, "id": 4}, {"lr": 0.5, "id": 5}]


class Broken(SequenceTuner):
    def generate_parameters(self, parameter_id: int, **kwargs: Any) -> Any:
        return [0.1] if parameter_id == 0 else 1 / 0


def test_errors_are_tuner_errors() -> None:
    with pytest.raises(TunerError, match="not a dict"):
        NniTunerAdapter(Broken).suggest(ctx([]), [0])
    with pytest.raises(TunerError, match="ZeroDivisionError"):
        NniTunerAdapter(Broken).suggest(ctx([]), [1])
    with pytest.raises(TunerError, match="classArgs"):
        NniTunerAdapter(SequenceTuner, {"bogus": 1})


def test_no_more_trial_error_is_matched_by_name() -> None:
    class NoMoreTrialError(RuntimeError):  # e.g. nni.NoMoreTrialError from the shim, or NNI's own
        pass

    class Sub(NoMoreTrialError):
        pass

    assert is_no_more_trial_error(Sub()) and not is_no_more_trial_error(RuntimeError())


def test_a_custom_tuner_loaded_by_class_name(tmp_path: Path) -> None:
    (tmp_path / "nnix_test_user_tuner.py").write_text(
        textwrap.dedent(
            """
            import random

            class MyTuner:
                def __init__(self, optimize_mode='maximize', seed=0):
                    self.rng = random.Random(seed)
                    self.space = {}
                    self.best = None

                def update_search_space(self, search_space):
                    self.space = search_space

                def generate_parameters(self, parameter_id, **kwargs):
                    low, high = self.space['x']['_value']
                    return {'x': self.rng.uniform(low, high)}

                def receive_trial_result(self, parameter_id, parameters, value, **kwargs):
                    if self.best is None or value > self.best:
                        self.best = value
            """
        )
    )
    cls = resolve("tuner", AlgorithmRef(class_name="nnix_test_user_tuner.MyTuner", code_directory=tmp_path))
    built = adapt("tuner", cls, {"seed": 3})
    assert built is not None
    tuner, direction = built
    assert isinstance(tuner, NniTunerAdapter) and direction is Direction.MAXIMIZE
    space = {"x": {"_type": "uniform", "_value": [2, 4]}}
    (params,) = tuner.suggest(ctx([], space), [0])
    assert 2 <= params["x"] <= 4
    tuner.suggest(ctx([TrialRecord(0, params, TrialStatus.SUCCEEDED, 0.25)], space), [])
    assert tuner.instance.best == 0.25
    assert adapt("tuner", SequenceTuner, {}) is not None
    assert adapt("assessor", SequenceTuner, {}) is None


# -- an NNI-style custom assessor -------------------------------------------------------------------


class AssessResult(Enum):
    Good = True
    Bad = False


class HalfOfBest:
    """Bad when the latest value is below half of the best final value of the trials that ended well."""

    def __init__(self) -> None:
        self.histories: dict[str, list[float]] = {}
        self.best: float | None = None
        self.ends: list[tuple[str, bool]] = []

    def assess_trial(self, trial_job_id: str, trial_history: list[float]) -> AssessResult:
        self.histories[trial_job_id] = list(trial_history)
        if self.best is not None and trial_history[-1] < self.best / 2:
            return AssessResult.Bad
        return AssessResult.Good

    def trial_end(self, trial_job_id: str, success: bool) -> None:
        self.ends.append((trial_job_id, success))
        if success:
            last = self.histories[trial_job_id][-1]
            self.best = last if self.best is None else max(self.best, last)


def test_custom_assessor_and_its_resume() -> None:
    done = TrialRecord(0, {}, TrialStatus.SUCCEEDED, 1.0, (0.5, 1.0))
    failed = TrialRecord(1, {}, TrialStatus.FAILED, None, (5.0,))
    silent = TrialRecord(2, {}, TrialStatus.SUCCEEDED, 9.0)  # no intermediate result: never shown
    low = TrialRecord(3, {}, TrialStatus.RUNNING, None, (0.2,))
    high = TrialRecord(3, {}, TrialStatus.RUNNING, None, (0.2, 0.6))

    adapter = NniAssessorAdapter(HalfOfBest, {})
    running0 = TrialRecord(0, {}, TrialStatus.RUNNING, None, (0.5,))
    assert adapter.assess(AssessorContext(Direction.MAXIMIZE, (running0,)), running0) is Decision.GOOD
    history = (done, failed, silent, low)
    assert adapter.assess(AssessorContext(Direction.MAXIMIZE, history), low) is Decision.BAD
    assert adapter.assess(AssessorContext(Direction.MAXIMIZE, (done, failed, silent, high)), high) is Decision.GOOD
    inst = adapter.instance
    assert isinstance(inst, HalfOfBest)
    assert inst.ends == [("0", True), ("1", False)]  # once each; the silent trial is not reported

    resumed = NniAssessorAdapter(HalfOfBest, {})  # a new manager process: catches up from the records
    assert resumed.assess(AssessorContext(Direction.MAXIMIZE, history), low) is Decision.BAD
    assert isinstance(resumed.instance, HalfOfBest) and resumed.instance.best == 1.0


def test_decisions() -> None:
    assert decision_of(True, "x") is Decision.GOOD
    assert decision_of(False, "x") is Decision.BAD
    assert decision_of(AssessResult.Bad, "x") is Decision.BAD
    assert decision_of(Decision.BAD, "x") is Decision.BAD
    assert decision_of(None, "x") is Decision.GOOD
    with pytest.raises(TunerError):
        decision_of("bad", "x")
    built = adapt("assessor", HalfOfBest, {})
    assert built is not None and isinstance(built[0], NniAssessorAdapter)
