"""RegularizedEvolutionTuner (NNI's name and classArgs): the contract, the ageing population (the oldest
member leaves however good it is) and tournament selection among ``sample_size`` members."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from nnix.core.status import TrialStatus
from nnix.registry import AlgorithmRef, resolve
from nnix.space import SearchSpace
from nnix.testing.tuners import TunerContract
from nnix.tuners.base import Direction, TrialRecord, TunerContext
from nnix.tuners.regularized_evolution import RegularizedEvolutionArgs, RegularizedEvolutionTuner

GRID: dict[str, Any] = {"a": {"_type": "choice", "_value": list(range(1, 30))},
                        "b": {"_type": "choice", "_value": list(range(1, 30))}}
CONV = {"_name": "conv", "k": {"_type": "randint", "_value": [1, 5]}}
MIXED: dict[str, Any] = {"lr": {"_type": "loguniform", "_value": [1e-4, 1]},
                         "layer": {"_type": "choice", "_value": [{"_name": "none"}, CONV]}}


def small() -> RegularizedEvolutionTuner:
    return RegularizedEvolutionTuner(RegularizedEvolutionArgs(population_size=4, sample_size=2))


class TestRegularizedEvolutionContract(TunerContract):
    tuner_factory = staticmethod(small)
    spaces = (GRID, MIXED, {})


def test_nni_name_resolves_with_its_defaults() -> None:
    assert resolve("tuner", AlgorithmRef(name="RegularizedEvolutionTuner")) is RegularizedEvolutionTuner
    args = RegularizedEvolutionArgs()
    assert (args.optimize_mode, args.population_size, args.sample_size) == ("maximize", 100, 25)
    with pytest.raises(ValidationError, match="sample_size"):
        RegularizedEvolutionArgs(population_size=3, sample_size=4)


@pytest.mark.parametrize("direction,best", [(Direction.MAXIMIZE, 2), (Direction.MINIMIZE, 3)])
def test_parent_is_the_best_of_the_youngest(direction: Direction, best: int) -> None:
    space = SearchSpace.from_json(GRID)
    values = {1: 100.0 if direction is Direction.MAXIMIZE else -100.0, 2: 5.0, 3: 1.0}
    history = [TrialRecord(i, {"a": i, "b": i}, TrialStatus.SUCCEEDED, values[i]) for i in (1, 2, 3)]
    tuner = RegularizedEvolutionTuner(RegularizedEvolutionArgs(population_size=2, sample_size=2))
    ctx = TunerContext(space, direction, seed=11, history=history)
    children = tuner.suggest(ctx, list(range(10, 30)))
    assert len(children) == 20
    for child in children:  # one parameter redrawn: the other is the parent's; #1 aged out despite its value
        assert best in (child["a"], child["b"]), child


def test_random_until_the_population_is_full() -> None:
    space = SearchSpace.from_json(GRID)
    history = [TrialRecord(0, {"a": 5, "b": 5}, TrialStatus.SUCCEEDED, 1.0),
               TrialRecord(1, {"a": 6, "b": 6}, TrialStatus.RUNNING)]
    tuner = RegularizedEvolutionTuner(RegularizedEvolutionArgs(population_size=4, sample_size=2))
    out = tuner.suggest(TunerContext(space, Direction.MAXIMIZE, seed=3, history=history), [2, 3])
    fresh = RegularizedEvolutionTuner(RegularizedEvolutionArgs(population_size=4, sample_size=2))
    assert out == fresh.suggest(TunerContext(space, Direction.MAXIMIZE, seed=3, history=history), [2, 3])
    assert sum(5 in (c["a"], c["b"]) for c in out) < 2  # not children of #0 (random draws)
