from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from pydantic import ValidationError

from nnix.core.status import TrialStatus
from nnix.errors import NoMoreTrialsError
from nnix.registry import AlgorithmRef, resolve, validate_args
from nnix.space import SearchSpace, contains, grid, key
from nnix.testing.spaces import CONTINUOUS, EVERY_TYPE, SMALL
from nnix.testing.tuners import TunerContract
from nnix.tuners.base import Direction, TrialRecord, Tuner, TunerContext
from nnix.tuners.random import RandomArgs, RandomTuner

NESTED: dict[str, Any] = {
    "layer": {
        "_type": "choice",
        "_value": [
            {"_name": "Empty"},
            {"_name": "Conv", "k": {"_type": "choice", "_value": [1, 3]}},
            {"_name": "Dense", "units": {"_type": "quniform", "_value": [8, 32, 8]}},
        ],
    },
    "act": {"_type": "choice", "_value": ["relu", "tanh"]},
}


def make() -> Tuner:
    return RandomTuner(RandomArgs())


class TestRandomContract(TunerContract):
    tuner_factory = staticmethod(make)
    spaces = (SMALL, CONTINUOUS, EVERY_TYPE, NESTED, {})


def ctx(raw: dict[str, Any], history: tuple[TrialRecord, ...] = (), seed: int = 1) -> TunerContext:
    return TunerContext(SearchSpace.from_json(raw), Direction.MAXIMIZE, seed, history)


def records(points: list[dict[str, Any]], status: TrialStatus = TrialStatus.SUCCEEDED) -> tuple[TrialRecord, ...]:
    return tuple(
        TrialRecord(i, p, status, 0.5 if status is TrialStatus.SUCCEEDED else None) for i, p in enumerate(points)
    )


def test_a_proposal_depends_on_seed_and_id_not_on_the_batch() -> None:
    tuner = make()
    batch = tuner.suggest(ctx(CONTINUOUS), [3, 4, 5])
    assert make().suggest(ctx(CONTINUOUS), [5]) == batch[2:]
    assert make().suggest(ctx(CONTINUOUS), [4, 3]) == [batch[1], batch[0]]
    assert make().suggest(ctx(CONTINUOUS, seed=2), [3, 4, 5]) != batch
    # a continuous space is not deduplicated, so the history does not matter
    assert make().suggest(ctx(CONTINUOUS, records(batch)), [3, 4, 5]) == batch


def test_seed_argument_overrides_the_experiment_seed() -> None:
    fixed = RandomTuner(RandomArgs(seed=7))
    assert fixed.suggest(ctx(CONTINUOUS, seed=1), [0, 1]) == fixed.suggest(ctx(CONTINUOUS, seed=2), [0, 1])
    assert fixed.suggest(ctx(CONTINUOUS, seed=7), [0, 1]) == make().suggest(ctx(CONTINUOUS, seed=7), [0, 1])


def test_draws_are_spread_over_the_space() -> None:
    points = make().suggest(ctx(CONTINUOUS), range(600))
    counts = Counter(p["bs"] for p in points)
    assert set(counts) == {16, 32, 64} and min(counts.values()) > 150
    assert all(1e-4 <= p["lr"] <= 1e-1 for p in points)
    assert sum(p["lr"] < 1e-2 for p in points) > 300  # log-uniform: 2 of 3 decades below 1e-2


def test_discrete_space_is_explored_without_repeats_then_exhausted() -> None:
    tuner = make()
    history: list[TrialRecord] = []
    for pid in range(6):
        (params,) = tuner.suggest(ctx(SMALL, tuple(history)), [pid])
        history.append(TrialRecord(pid, params, TrialStatus.FAILED if pid % 2 else TrialStatus.SUCCEEDED))
    keys = {key(r.params) for r in history}
    assert keys == {key(p) for p in grid(SearchSpace.from_json(SMALL))}
    with pytest.raises(NoMoreTrialsError, match="search space fully explored") as err:
        tuner.suggest(ctx(SMALL, tuple(history)), [6])
    assert err.value.hint
    with pytest.raises(NoMoreTrialsError):
        make().suggest(ctx(SMALL, tuple(history)), [6, 7])


def test_one_batch_covers_a_small_space_without_repeats() -> None:
    points = make().suggest(ctx(SMALL), range(10))
    assert len(points) == 6
    assert len({key(p) for p in points}) == 6


def test_partially_exhausted_returns_fewer() -> None:
    space = SearchSpace.from_json(SMALL)
    seen = list(grid(space))[:4]
    points = make().suggest(ctx(SMALL, records(seen, TrialStatus.USER_CANCELED)), [10, 11, 12])
    assert len(points) == 2
    assert {key(p) for p in points} == {key(p) for p in list(grid(space))[4:]}


def test_duplicate_draws_fall_back_to_the_first_unseen_grid_point() -> None:
    # one unseen point left: it is found whatever the random draws say
    space = SearchSpace.from_json(SMALL)
    points = list(grid(space))
    for missing in range(6):
        history = records(points[:missing] + points[missing + 1 :])
        assert make().suggest(ctx(SMALL, history), [99]) == [points[missing]]


def test_nested_space_with_discrete_top_level_is_deduplicated() -> None:
    points = make().suggest(ctx(NESTED), range(40))
    # 2 activations x (1 + 2 + 4) layers = 14 points
    assert len(points) == 14
    assert all(contains(SearchSpace.from_json(NESTED), p) for p in points)
    assert len({key(p) for p in points}) == 14


def test_quantised_normal_counts_as_discrete() -> None:
    raw = {"x": {"_type": "qnormal", "_value": [0, 0.3, 1]}}
    points = make().suggest(ctx(raw), range(12))
    values = [p["x"] for p in points]
    assert len(set(values)) == 12  # most draws are 0.0, the rest comes from the grid
    assert all(v == round(v) for v in values)


def test_empty_space_gives_one_empty_point() -> None:
    assert make().suggest(ctx({}), [0]) == [{}]
    with pytest.raises(NoMoreTrialsError):
        make().suggest(ctx({}, records([{}])), [1])


def test_reused_instance_handles_a_shorter_history() -> None:
    tuner = make()
    space = SearchSpace.from_json(SMALL)
    all_points = list(grid(space))
    tuner.suggest(ctx(SMALL, records(all_points[:5])), [5])
    assert tuner.suggest(ctx(SMALL, records(all_points[:1])), [1, 2]) == make().suggest(
        ctx(SMALL, records(all_points[:1])), [1, 2]
    )


def test_args() -> None:
    assert RandomArgs.model_validate({"seed": 3, "optimize_mode": "minimize"}).seed == 3
    with pytest.raises(ValidationError):
        RandomArgs.model_validate({"optimize_mode": "max"})
    (issue,) = validate_args(RandomTuner, {"sed": 1}, "tuner.classArgs")
    assert issue.path == "tuner.classArgs.sed"
    assert issue.hint == "did you mean 'seed'?"
    assert resolve("tuner", AlgorithmRef(name="Random")) is RandomTuner
