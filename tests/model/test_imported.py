"""Imported results (``nnix experiment import``, NNI's import-data): one schema for every importer (a value is
checked as a trial's final metric line is, with the experiment's nanPolicy); the manager leaves out a record that
breaks it and was stored before imports were checked, and says so, instead of going to ERROR at every start."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from nnix import limits
from nnix.agent.channel import metric_problem
from nnix.errors import NnixError
from nnix.home import STORE_NAME
from nnix.model.events import DataImported, ManagerStarted, StatusChanged
from nnix.model.imported import MAX_PARAMETER_DEPTH, record_problem, validate_import
from nnix.model.status import ExperimentStatus, TrialStatus
from nnix.store.sqlite import SqliteStore
from nnix.testing import FakeMachine, FakeService, Outcome
from nnix.testing.experiments import make_experiment, manager_for, run_experiment
from nnix.testing.fakeservice import params
from nnix.testing.spaces import UNIT as SPACE


def _deep(n: int) -> Any:
    value: Any = 1
    for _ in range(n):
        value = [value]
    return value


# (record, what the refusal names): each must be refused, naming record [1] and the field
HOSTILE: list[tuple[Any, str]] = [
    ({"parameter": {"x": 1}, "value": 10**400}, "'value'"),
    ({"parameter": {"x": 1}, "value": -(10**400)}, "'value'"),
    ({"parameter": {"x": 1}, "value": "nan"}, "'value'"),
    ({"parameter": {"x": 1}, "value": None}, "'value'"),
    ({"parameter": {"x": 1}, "value": [1, 2]}, "'value'"),
    ({"parameter": {"x": 1}, "value": True}, "'value'"),
    ({"parameter": {"x": 1}, "value": float("nan")}, "'value'"),
    ({"parameter": {"x": 1}, "value": float("-inf")}, "'value'"),
    ({"parameter": {"x": 1}, "value": {"default": 10**400}}, "'default'"),
    ({"parameter": {"x": 1}, "value": {"default": "0.5"}}, "'default'"),
    ({"parameter": {"x": 1}, "value": {"acc": 0.5}}, "'default'"),
    ({"parameter": {"x": 1}, "value": {"default": 0.5, "x": _deep(40)}}, "nested deeper"),
    ({"parameter": {"x": 1}, "value": {"default": 0.5, "x": [1, float("inf")]}}, "'value'"),
    ({"parameter": {"x": 1}}, "'value'"),
    ({"value": 0.5}, "'parameter'"),
    ({"parameter": [1], "value": 0.5}, "'parameter'"),
    ({"parameter": "x=1", "value": 0.5}, "'parameter'"),
    ({"parameter": {"x": 10**400}, "value": 0.5}, "'parameter.x'"),
    ({"parameter": {"a": {"b": [0, 10**400]}}, "value": 0.5}, "'parameter.a.b[1]'"),
    ({"parameter": {"x": _deep(150)}, "value": 0.5}, "nested deeper"),
    ([{"parameter": {}, "value": 1}], "must be an object"),
    ("record", "must be an object"),
    (None, "must be an object"),
]


@pytest.mark.parametrize("record,field", HOSTILE)
def test_a_hostile_record_is_refused_naming_its_index_and_field(record: Any, field: str) -> None:
    data = [{"parameter": {"x": 0.5}, "value": 0.1}, record, {"parameter": {"x": 0.6}, "value": 0.2}]
    with pytest.raises(NnixError) as e:
        validate_import(data, metric_problem, allow_nan=False)
    assert e.value.message.startswith("import record [1]: "), e.value.message
    assert field in e.value.message and "nothing was imported" in e.value.message
    assert e.value.hint and "parameter" in e.value.hint
    assert len(e.value.message) < 400  # (a huge value is never printed whole)


def test_every_bad_record_is_counted_and_good_ones_are_kept_as_given() -> None:
    with pytest.raises(NnixError, match=r"import record \[0\]: .*\(2 more records cannot be used either\)"):
        validate_import([{"parameter": {}, "value": None}, {"parameter": {}, "value": "1"},
                         {"parameter": {}, "value": 1}, {"value": 1}], metric_problem, allow_nan=False)
    good = [{"parameter": {"x": 0.5, "opt": "a", "n": 2**1000}, "value": {"default": 0.5, "acc": [1, 2]}, "x": 1},
            {"parameter": {}, "value": -3}]
    assert validate_import(good, metric_problem, allow_nan=False) == [
        {"parameter": good[0]["parameter"], "value": good[0]["value"]}, {"parameter": {}, "value": -3}]
    assert validate_import([], metric_problem, allow_nan=False) == []
    for data in ({"parameter": {}, "value": 1}, "[]", None, 3):
        with pytest.raises(NnixError, match="must be a JSON list"):
            validate_import(data, metric_problem, allow_nan=False)


def test_nan_follows_the_experiments_nan_policy_as_a_final_metric_does() -> None:
    for value in (float("nan"), float("inf"), {"default": float("-inf")}):
        line = {"type": "FINAL", "value": value}
        assert (record_problem({"parameter": {}, "value": value}, metric_problem, allow_nan=True) is None) == (
            metric_problem(line, allow_nan=True) is None) is True
        assert record_problem({"parameter": {}, "value": value}, metric_problem, allow_nan=False) is not None
        assert metric_problem(line, allow_nan=False) is not None


def test_the_parameter_depth_is_a_config_documents() -> None:
    assert MAX_PARAMETER_DEPTH == limits.MAX_DEPTH
    assert record_problem({"parameter": {"x": _deep(MAX_PARAMETER_DEPTH - 2)}, "value": 1}, metric_problem,
                          allow_nan=False) is None


BAD_STORED: list[Any] = [{"parameter": {"x": 0.5}, "value": 10**400}, {"parameter": {"x": 0.25}, "value": "nan"},
              {"parameter": {"x": 0.75}, "value": None}, {"parameter": {"x": 0.5}, "value": [1, 2]},
              {"parameter": {"x": 10**400}, "value": 0.5}, {"parameter": {"x": 0.1}, "value": {"default": 10**400}},
              "junk", {"parameter": 3, "value": 1}]


def test_a_store_holding_unusable_imports_resumes_and_runs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A store written before imports were checked: its bad records are left out of the tuner's history (with one
    warning), the good one stays (parameter id by its place), and the experiment that went to ERROR over them
    (OverflowError at every start) resumes and finishes."""
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand="true", maxTrialNumber=3,
                           tuner={"name": "TPE", "classArgs": {"seed": 1}})
    store = SqliteStore(d / STORE_NAME)
    store.append([DataImported([*BAD_STORED, {"parameter": {"x": 0.3}, "value": 0.9}]),
                  ManagerStarted(1, "create", None),
                  StatusChanged(ExperimentStatus.ERROR, "tuner crashed: OverflowError: int too large to convert")])
    store.close()
    caplog.set_level(logging.WARNING, "nnix.manager")
    m = manager_for(d)
    try:
        history = m._history()
        assert [(r.parameter_id, r.params, r.value) for r in history] == [(-9, {"x": 0.3}, 0.9)]
        m.record(DataImported([{"parameter": {"x": 0.4}, "value": 0.1}]))  # read on from where it stopped
        assert [r.parameter_id for r in m._history()] == [-9, -10]
    finally:
        m.store.close()
    warned = [r.getMessage() for r in caplog.records if "left out of the tuner's history" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith("8 imported records are left out"), warned
    assert "record [0]: 'value'" in warned[0] and "; ..." in warned[0]

    machine = FakeMachine(lambda spec: Outcome(final=params(spec)["x"]))
    st = run_experiment(d, "resume", service=FakeService.factory(machine))
    assert st.status is ExperimentStatus.DONE, st.message
    assert len(st.trials) == 3 and all(t.status is TrialStatus.SUCCEEDED for t in st.trials.values())


def test_the_manager_refuses_a_hostile_import_and_records_nothing(tmp_path: Path) -> None:
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand="true", nanPolicy="allow")
    m = manager_for(d)
    try:
        before = m.state.last_seq
        with pytest.raises(NnixError, match=r"import record \[1\]: 'value'"):
            m.import_data([{"parameter": {"x": 0.1}, "value": 1}, {"parameter": {"x": 0.1}, "value": 10**400}])
        assert m.state.last_seq == before and m.state.imported == []
        assert m.import_data([{"parameter": {"x": 0.1}, "value": float("nan")}]) == 1  # nanPolicy: allow
        assert [(r.parameter_id, r.value) for r in m._history()] == [(-1, None)]
    finally:
        m.store.close()
