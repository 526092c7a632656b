from __future__ import annotations

import statistics
from typing import Any, ClassVar

import numpy as np
import pytest
from pydantic import ValidationError

from nnix.core.status import TrialStatus
from nnix.registry import AlgorithmRef, resolve
from nnix.space import Params, SearchSpace, contains, key
from nnix.testing.spaces import EVERY_TYPE
from nnix.testing.tuners import TunerContract
from nnix.tuners.base import Direction, TrialRecord, TunerContext
from nnix.tuners.bohb import BohbArgs, BohbTuner, Encoding
from nnix.tuners.hyperband import TRIAL_BUDGET, Schedule, random_config

PLANE: dict[str, Any] = {"x": {"_type": "uniform", "_value": [0, 1]}, "y": {"_type": "uniform", "_value": [0, 1]}}
NESTED: dict[str, Any] = {
    "layer": {
        "_type": "choice",
        "_value": [
            {"_name": "Empty"},
            {"_name": "Conv", "k": {"_type": "choice", "_value": [1, 3]}, "lr": {"_type": "uniform", "_value": [0, 1]}},
        ],
    },
    "w": {"_type": "uniform", "_value": [0, 1]},
}


def strip(params: Params) -> Params:
    return {k: v for k, v in params.items() if k != TRIAL_BUDGET}


def test_defaults_and_schedule() -> None:
    args = BohbArgs()
    assert (args.min_budget, args.max_budget, args.eta, args.min_points_in_model) == (1, 3, 3, None)
    assert (args.top_n_percent, args.num_samples, args.bandwidth_factor, args.min_bandwidth) == (15, 64, 3, 1e-3)
    assert args.random_fraction == pytest.approx(1 / 3)
    sched = Schedule.bohb(1, 3, 3)
    assert [list(sched.shapes[s].rounds) for s in (1, 0)] == [[(3, 1), (1, 3)], [(2, 3)]]
    sched = Schedule.bohb(1, 27, 3)
    assert [list(sched.shapes[s].rounds) for s in (3, 2, 1, 0)] == [
        [(27, 1), (9, 3), (3, 9), (1, 27)],
        [(12, 3), (4, 9), (1, 27)],
        [(6, 9), (2, 27)],
        [(4, 27)],
    ]
    rounds = Schedule.bohb(0.5, 2, 2).shapes[2].rounds
    assert rounds == ((4, 0.5), (2, 1), (1, 2))
    assert [type(b) for _, b in rounds] == [float, int, int]  # whole budgets are written as integers


def test_args_validation() -> None:
    with pytest.raises(ValidationError, match="config_space"):
        BohbArgs.model_validate({"config_space": "/abs/space.pcs"})
    with pytest.raises(ValidationError, match="max_budget"):
        BohbArgs(min_budget=5, max_budget=3)
    with pytest.raises(ValidationError):
        BohbArgs(eta=1)
    with pytest.raises(ValidationError):
        BohbArgs(top_n_percent=100)
    assert resolve("tuner", AlgorithmRef(name="BOHB")) is BohbTuner


def test_waits_between_rounds_like_serial_hyperband() -> None:
    tuner = BohbTuner()
    space = SearchSpace.from_json(PLANE)
    first = tuner.suggest(TunerContext(space, Direction.MAXIMIZE, 1), [0, 1, 2, 3])
    assert [p[TRIAL_BUDGET] for p in first] == [1, 1, 1]
    history = [TrialRecord(i, p, TrialStatus.RUNNING) for i, p in enumerate(first)]
    assert tuner.suggest(TunerContext(space, Direction.MAXIMIZE, 1, tuple(history)), [3]) == []
    done = [TrialRecord(i, p, TrialStatus.SUCCEEDED, p["x"]) for i, p in enumerate(first)]
    nxt = tuner.suggest(TunerContext(space, Direction.MAXIMIZE, 1, tuple(done)), [3, 4, 5])
    best = max(first, key=lambda p: p["x"])
    assert nxt[0] == {**strip(best), TRIAL_BUDGET: 3}
    assert [p[TRIAL_BUDGET] for p in nxt] == [3, 3, 3]  # then bracket s=0: 2 configurations at 3


def test_random_fraction_one_is_random_search() -> None:
    tuner = BohbTuner(BohbArgs(random_fraction=1, min_budget=1, max_budget=1))
    space = SearchSpace.from_json(PLANE)
    history = [
        TrialRecord(i, {"x": i / 20, "y": 0.5, TRIAL_BUDGET: 1}, TrialStatus.SUCCEEDED, i / 20) for i in range(20)
    ]
    got = tuner.suggest(TunerContext(space, Direction.MAXIMIZE, 3, tuple(history)), [20])
    assert strip(got[0]) == random_config(space, 3, 20, set(), set())


def run(tuner: BohbTuner, space: SearchSpace, n: int, seed: int) -> list[float]:
    """Sequential trials on a smooth function with its maximum at (0.8, 0.2); returns the values."""
    history: list[TrialRecord] = []
    values: list[float] = []
    for pid in range(n):
        (params,) = tuner.suggest(TunerContext(space, Direction.MAXIMIZE, seed, tuple(history)), [pid])
        value = -((params["x"] - 0.8) ** 2) - (params["y"] - 0.2) ** 2
        history.append(TrialRecord(pid, params, TrialStatus.SUCCEEDED, value))
        values.append(value)
    return values


def test_the_model_beats_random_search() -> None:
    space = SearchSpace.from_json(PLANE)
    bohb, rand = BohbTuner(BohbArgs(max_budget=1)), BohbTuner(BohbArgs(max_budget=1, random_fraction=1))
    model = [statistics.mean(run(bohb, space, 60, s)[30:]) for s in range(3)]
    random = [statistics.mean(run(rand, space, 60, s)[30:]) for s in range(3)]
    assert statistics.mean(model) > statistics.mean(random) + 0.03


def test_minimize_uses_the_other_end() -> None:
    space = SearchSpace.from_json(PLANE)
    tuner = BohbTuner(BohbArgs(max_budget=1, random_fraction=0))
    history = [
        TrialRecord(i, {"x": x, "y": y, TRIAL_BUDGET: 1}, TrialStatus.SUCCEEDED, x + y)
        for i, (x, y) in enumerate(np.random.default_rng(0).random((30, 2)).tolist())
    ]
    lo = tuner.suggest(TunerContext(space, Direction.MINIMIZE, 0, tuple(history)), range(30, 40))
    hi = tuner.suggest(TunerContext(space, Direction.MAXIMIZE, 0, tuple(history)), range(30, 40))
    assert statistics.mean(p["x"] + p["y"] for p in lo) < 0.6 < statistics.mean(p["x"] + p["y"] for p in hi)


def test_observations_by_budget_and_imported_at_max_budget() -> None:
    tuner = BohbTuner(BohbArgs(max_budget=9))
    enc = Encoding(SearchSpace.from_json(PLANE))
    history = [
        TrialRecord(-1, {"x": 0.1, "y": 0.1}, TrialStatus.SUCCEEDED, 0.0),  # imported: a metric of 0 is data
        TrialRecord(0, {"x": 0.2, "y": 0.2, TRIAL_BUDGET: 1}, TrialStatus.SUCCEEDED, 0.5),
        TrialRecord(1, {"x": 0.3, "y": 0.3, TRIAL_BUDGET: 1}, TrialStatus.EARLY_STOPPED, None, (0.1, 0.4)),
        TrialRecord(2, {"x": 0.4, "y": 0.4, TRIAL_BUDGET: 3}, TrialStatus.FAILED),
        TrialRecord(3, {"x": 0.5, "y": 0.5, TRIAL_BUDGET: 3}, TrialStatus.RUNNING, None, (0.3,)),
        TrialRecord(4, {"x": 0.6, "y": 0.6}, TrialStatus.SUCCEEDED, 0.9),  # not BOHB's: no budget
    ]
    obs = tuner.observations(enc, history, Direction.MAXIMIZE)
    assert sorted(obs) == [1.0, 9.0]
    assert [loss for loss, _ in obs[1.0]] == [-0.5, -0.4]
    assert [loss for loss, _ in obs[9.0]] == [0.0]


@pytest.mark.parametrize("raw", [EVERY_TYPE, NESTED])
def test_encoding_round_trip(raw: dict[str, Any]) -> None:
    space = SearchSpace.from_json(raw)
    enc = Encoding(space)
    rng = np.random.default_rng(0)
    for _ in range(50):
        row = np.array([rng.integers(d.categories) if d.categories else rng.random() for d in enc.dims], dtype=float)
        params = enc.decode(row, rng)
        assert contains(space, params)
        again = enc.encode(params)
        assert again is not None
        assert enc.decode(again, np.random.default_rng(1)).keys() == params.keys()
        for d in enc.dims:
            if d.categories or d.param.type == "randint":
                assert enc.decode(again, rng)[d.param.name] == params[d.param.name] or d.param.nested
    assert enc.encode({"a": 1}) is None


def test_discrete_space_model_proposals_are_new() -> None:
    raw = {"a": {"_type": "choice", "_value": list(range(10))}, "b": {"_type": "randint", "_value": [0, 10]}}
    space = SearchSpace.from_json(raw)
    tuner = BohbTuner(BohbArgs(max_budget=1, random_fraction=0))
    history: list[TrialRecord] = []
    for pid in range(40):
        (params,) = tuner.suggest(TunerContext(space, Direction.MAXIMIZE, 5, tuple(history)), [pid])
        history.append(TrialRecord(pid, params, TrialStatus.SUCCEEDED, -abs(params["a"] - 7) - abs(params["b"] - 2)))
    keys = [key(strip(r.params)) for r in history]
    assert len(set(keys)) == len(keys)


class TestBohbContract(TunerContract):
    tuner_factory = staticmethod(lambda: BohbTuner(BohbArgs(min_budget=1, max_budget=3, random_fraction=0.2)))
    spaces = (PLANE, EVERY_TYPE, NESTED, {"c": {"_type": "choice", "_value": [1, 2]}})
    rounds = 8
    deduplicates = False  # promotions repeat configurations by design
    budgets: ClassVar[set[int]] = {1, 3}

    def is_valid_proposal(self, space: SearchSpace, params: Params) -> bool:
        return params.get(TRIAL_BUDGET) in self.budgets and contains(space, strip(params))


class TestBohbContractModelEarly(TestBohbContract):
    tuner_factory = staticmethod(
        lambda: BohbTuner(BohbArgs(min_budget=1, max_budget=1, min_points_in_model=1, random_fraction=0))
    )
    direction = Direction.MINIMIZE
    budgets: ClassVar[set[int]] = {1}
