from __future__ import annotations

import itertools
from typing import Any

import pytest
from pydantic import ValidationError

from nnix.core.status import TrialStatus
from nnix.errors import NoMoreTrialsError, SearchSpaceError
from nnix.registry import AlgorithmRef, resolve, validate_args
from nnix.space import SearchSpace, grid
from nnix.testing.tuners import TunerContract
from nnix.tuners.base import Direction, TrialRecord, Tuner, TunerContext
from nnix.tuners.gridsearch import GridCursor, GridSearchArgs, GridSearchTuner, SeenKeys

SMALL: dict[str, Any] = {
    "c": {"_type": "choice", "_value": ["a", "b"]},
    "q": {"_type": "quniform", "_value": [0, 10, 5]},
}
MIXED: dict[str, Any] = {
    "lr": {"_type": "loguniform", "_value": [1e-4, 1e-1]},
    "bs": {"_type": "randint", "_value": [1, 4]},
    "m": {"_type": "normal", "_value": [0, 1]},
}
NESTED: dict[str, Any] = {
    "layer": {
        "_type": "choice",
        "_value": [
            {"_name": "Empty"},
            {"_name": "Conv", "k": {"_type": "choice", "_value": [1, 3]}},
            {"_name": "Dense", "units": {"_type": "qlognormal", "_value": [3, 0.5, 4]}},
        ],
    },
}


def make() -> Tuner:
    return GridSearchTuner(GridSearchArgs())


class TestGridSearchContract(TunerContract):
    tuner_factory = staticmethod(make)
    spaces = (SMALL, MIXED, NESTED)


def ctx(raw: dict[str, Any], history: tuple[TrialRecord, ...] = ()) -> TunerContext:
    return TunerContext(SearchSpace.from_json(raw), Direction.MINIMIZE, 0, history)


def records(points: list[dict[str, Any]]) -> tuple[TrialRecord, ...]:
    return tuple(TrialRecord(i, p, TrialStatus.SUCCEEDED, 1.0) for i, p in enumerate(points))


def test_follows_grid_order_and_ends() -> None:
    expected = list(grid(SearchSpace.from_json(SMALL)))
    assert len(expected) == 6
    tuner = make()
    got: list[dict[str, Any]] = []
    while len(got) < 6:
        got += tuner.suggest(ctx(SMALL, records(got)), [len(got), len(got) + 1, len(got) + 2, len(got) + 3])
    assert got == expected
    with pytest.raises(NoMoreTrialsError, match="search space fully explored"):
        tuner.suggest(ctx(SMALL, records(got)), [6])


def test_skips_whatever_the_history_holds_in_any_order() -> None:
    expected = list(grid(SearchSpace.from_json(SMALL)))
    history = records([expected[4], {"c": "z", "q": 1.0}, expected[1], expected[0]])
    assert make().suggest(ctx(SMALL, history), range(5)) == [expected[2], expected[3], expected[5]]


def test_infinite_grid_keeps_proposing() -> None:
    expected = list(itertools.islice(grid(SearchSpace.from_json(MIXED)), 40))
    tuner = make()
    got: list[dict[str, Any]] = []
    for pid in range(40):
        got += tuner.suggest(ctx(MIXED, records(got)), [pid])
    assert got == expected
    assert expected[0] == {"lr": pytest.approx(10**-2.5), "bs": 1, "m": 0.0}


def test_a_dropped_proposal_is_proposed_again() -> None:
    tuner = make()
    first = tuner.suggest(ctx(SMALL), [0, 1])
    # the manager only created the second one
    assert tuner.suggest(ctx(SMALL, records(first[1:])), [2]) == first[:1]


def test_reused_instance_with_a_rewritten_history() -> None:
    expected = list(grid(SearchSpace.from_json(SMALL)))
    tuner = make()
    assert tuner.suggest(ctx(SMALL, records(expected[:5])), [5]) == [expected[5]]
    assert tuner.suggest(ctx(SMALL, records(expected[2:4])), [0, 1, 2]) == [expected[0], expected[1], expected[4]]
    # and a changed search space
    other = {"x": {"_type": "choice", "_value": [1, 2]}}
    assert tuner.suggest(ctx(other), [0, 1, 2]) == [{"x": 1}, {"x": 2}]


def test_mutating_a_proposal_does_not_leak() -> None:
    raw = {"x": {"_type": "choice", "_value": [{"a": [1]}, {"a": [2]}]}}
    tuner = make()
    (first,) = tuner.suggest(ctx(raw), [0])
    first["x"]["a"].append(9)
    assert tuner.suggest(ctx(raw), [0]) == [{"x": {"a": [1]}}]


def test_empty_space_is_rejected() -> None:
    with pytest.raises(SearchSpaceError) as err:
        make().suggest(ctx({}), [0])
    assert err.value.issues[0].path == "searchSpace"
    assert "at least one parameter" in err.value.issues[0].message


def test_args() -> None:
    GridSearchArgs.model_validate({"optimize_mode": "maximize"})
    with pytest.raises(ValidationError):
        GridSearchArgs.model_validate({"seed": 1})
    (issue,) = validate_args(GridSearchTuner, {"optimise_mode": "maximize"}, "tuner.classArgs")
    assert issue.hint == "did you mean 'optimize_mode'?"
    assert resolve("tuner", AlgorithmRef(name="GridSearch")) is GridSearchTuner


def test_seen_keys_tracks_growth_and_rewrites() -> None:
    seen = SeenKeys()
    a = TrialRecord(0, {"x": 1}, TrialStatus.RUNNING)
    b = TrialRecord(1, {"x": 2}, TrialStatus.RUNNING)
    assert seen.update([a]) is True
    assert seen.update([TrialRecord(0, {"x": 1}, TrialStatus.SUCCEEDED, 0.3), b]) is True  # same trial, new status
    assert dict(seen.counts) == {'{"x": 1}': 1, '{"x": 2}': 1}
    assert seen.update([b]) is False
    assert dict(seen.counts) == {'{"x": 2}': 1}
    assert '{"x": 2}' in seen and '{"x": 1}' not in seen


def test_grid_cursor_respects_taken_keys() -> None:
    space = SearchSpace.from_json({"x": {"_type": "choice", "_value": [1, 2, 3]}})
    cursor = GridCursor(space)
    first = cursor.next_unseen(set(), set())
    assert first is not None and first[1] == {"x": 1}
    second = cursor.next_unseen(set(), {first[0]})
    assert second is not None and second[1] == {"x": 2}
    assert cursor.next_unseen({first[0]}, set()) == second
    assert cursor.next_unseen({'{"x": 1}', '{"x": 2}', '{"x": 3}'}) is None
