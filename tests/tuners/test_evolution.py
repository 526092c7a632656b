from __future__ import annotations

import math
import statistics
from typing import Any

import pytest
from pydantic import ValidationError

from nnix.core.status import TrialStatus
from nnix.registry import AlgorithmRef, resolve, validate_args
from nnix.space import SearchSpace, contains, key
from nnix.testing.spaces import EVERY_TYPE, NESTED, SMALL
from nnix.testing.tuners import TunerContract
from nnix.tuners.base import Direction, TrialRecord, TunerContext
from nnix.tuners.evolution import EvolutionArgs, EvolutionTuner
from nnix.tuners.random import RandomTuner

NESTED_CONTINUOUS: dict[str, Any] = {**NESTED, "x": {"_type": "normal", "_value": [0, 1]}}
QUADRATIC: dict[str, Any] = {
    "x": {"_type": "uniform", "_value": [-10, 10]},
    "y": {"_type": "uniform", "_value": [-10, 10]},
}


def small_population() -> EvolutionTuner:
    return EvolutionTuner(EvolutionArgs(population_size=4))


class TestEvolutionContract(TunerContract):
    tuner_factory = staticmethod(small_population)
    spaces = (SMALL, EVERY_TYPE, NESTED, NESTED_CONTINUOUS, {})
    rounds = 8


class TestEvolutionDefaultsContract(TunerContract):
    tuner_factory = staticmethod(lambda: EvolutionTuner())
    spaces = (EVERY_TYPE, NESTED)


def ctx(
    raw: dict[str, Any],
    history: list[TrialRecord] | tuple[TrialRecord, ...] = (),
    seed: int = 1,
    direction: Direction = Direction.MAXIMIZE,
) -> TunerContext:
    return TunerContext(SearchSpace.from_json(raw), direction, seed, tuple(history))


def test_first_population_is_random_then_one_parameter_mutates() -> None:
    tuner = small_population()
    first = tuner.suggest(ctx(QUADRATIC), range(4))
    assert first == RandomTuner().suggest(ctx(QUADRATIC), range(4))  # the same draws as Random
    history = [TrialRecord(i, p, TrialStatus.SUCCEEDED, -(p["x"] ** 2) - p["y"] ** 2) for i, p in enumerate(first)]
    children = tuner.suggest(ctx(QUADRATIC, history), range(4, 8))
    parents = [r.params for r in history]
    for child in children:  # each child differs from some parent in exactly one parameter
        assert any(sum(child[k] != parent[k] for k in child) <= 1 for parent in parents)


def test_tournament_winners_are_the_better_ones() -> None:
    history = [TrialRecord(i, {"x": float(i - 10), "y": 0.0}, TrialStatus.SUCCEEDED, float(i)) for i in range(20)]
    tuner = EvolutionTuner(EvolutionArgs(population_size=20))
    children = tuner.suggest(ctx(QUADRATIC, history), range(20, 40))
    # a child keeps either its parent's x (mutated y) or draws a new x: kept xs come from winners
    kept = [c["x"] for c in children if c["x"] in {float(i - 10) for i in range(20)}]
    assert kept and statistics.median(kept) > 0  # rewards grow with x (maximize)
    low = EvolutionTuner(EvolutionArgs(population_size=20)).suggest(
        ctx(QUADRATIC, history, direction=Direction.MINIMIZE), range(20, 40)
    )
    kept_low = [c["x"] for c in low if c["x"] in {float(i - 10) for i in range(20)}]
    assert kept_low and statistics.median(kept_low) < 0


def test_failed_trials_are_replaced_by_random_individuals() -> None:
    tuner = small_population()
    first = tuner.suggest(ctx(QUADRATIC), range(4))
    history = [
        TrialRecord(i, p, TrialStatus.FAILED if i < 2 else TrialStatus.SUCCEEDED, 1.0 if i >= 2 else None)
        for i, p in enumerate(first)
    ]
    again = tuner.suggest(ctx(QUADRATIC, history), [4, 5, 6])
    assert again[:2] == RandomTuner().suggest(ctx(QUADRATIC), [4, 5])  # two fresh random individuals


def test_not_now_while_the_population_is_running() -> None:
    tuner = small_population()
    running = [TrialRecord(i, p, TrialStatus.RUNNING) for i, p in enumerate(tuner.suggest(ctx(QUADRATIC), range(4)))]
    assert tuner.suggest(ctx(QUADRATIC, running), [4, 5]) == []
    one_done = [TrialRecord(0, running[0].params, TrialStatus.SUCCEEDED, 0.0), *running[1:]]
    assert len(tuner.suggest(ctx(QUADRATIC, one_done), [4, 5])) == 1  # a metric of 0 is a result


def test_optimises_better_than_random() -> None:
    def run(tuner: Any, seed: int) -> float:
        history: list[TrialRecord] = []
        best = -math.inf
        for pid in range(120):
            (p,) = tuner.suggest(ctx(QUADRATIC, history, seed), [pid])
            v = -((p["x"] - 1) ** 2) - (p["y"] + 2) ** 2
            best = max(best, v)
            history.append(TrialRecord(pid, p, TrialStatus.SUCCEEDED, v))
        return best

    evo = [run(EvolutionTuner(EvolutionArgs(population_size=10)), s) for s in range(5)]
    rnd = [run(RandomTuner(), s) for s in range(5)]
    assert statistics.median(evo) > statistics.median(rnd)


def test_imported_records_join_the_population() -> None:
    imported = [TrialRecord(-(i + 1), {"x": 5.0, "y": float(i)}, TrialStatus.SUCCEEDED, 1.0) for i in range(4)]
    children = small_population().suggest(ctx(QUADRATIC, imported), range(3))
    assert all(c["x"] == 5.0 or c["y"] in {0.0, 1.0, 2.0, 3.0} for c in children)


def test_nested_mutation_stays_valid() -> None:
    space = SearchSpace.from_json(NESTED_CONTINUOUS)
    tuner = small_population()
    history: list[TrialRecord] = []
    for pid in range(40):
        (p,) = tuner.suggest(ctx(NESTED_CONTINUOUS, history), [pid])
        assert contains(space, p)
        history.append(TrialRecord(pid, p, TrialStatus.SUCCEEDED, float(pid % 7)))
    assert len({key(r.params) for r in history}) > 30


def test_args() -> None:
    assert EvolutionArgs().optimize_mode == "maximize" and EvolutionArgs().population_size == 32
    with pytest.raises(ValidationError):
        EvolutionArgs(population_size=0)
    (issue,) = validate_args(EvolutionTuner, {"population": 3}, "t")
    assert issue.hint == "did you mean 'population_size'?"
    assert resolve("tuner", AlgorithmRef(name="evolution")) is EvolutionTuner


def test_a_warm_tuner_replays_only_what_is_new_and_proposes_as_a_fresh_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The replay of the population resumes from the first record still open in the previous history;
    a record that changes before it (here: a different value) makes it replay from the start."""
    from nnix.tuners import evolution

    calls = [0]
    original = evolution._tournament

    def counting(*args: Any) -> int:
        calls[0] += 1
        return original(*args)

    monkeypatch.setattr(evolution, "_tournament", counting)
    space = SearchSpace.from_json({"x": {"_type": "uniform", "_value": [0, 1]}})
    history = [TrialRecord(i, {"x": i / 2000}, TrialStatus.SUCCEEDED, math.sin(i)) for i in range(2000)]
    history.append(TrialRecord(2000, {"x": 0.5}, TrialStatus.RUNNING))
    warm = EvolutionTuner(EvolutionArgs(population_size=8))
    warm.suggest(TunerContext(space, Direction.MAXIMIZE, 1, tuple(history)), [2001])
    for step in range(3):
        pid = 2002 + step
        history[2000 + step] = TrialRecord(2000 + step, history[2000 + step].params, TrialStatus.SUCCEEDED, 0.1)
        history.append(TrialRecord(pid, {"x": 0.25}, TrialStatus.RUNNING))
        ctx = TunerContext(space, Direction.MAXIMIZE, 1, tuple(history))
        calls[0] = 0
        got = warm.suggest(ctx, [pid + 10])
        assert calls[0] <= 4  # the records since the checkpoint, and this proposal's tournament
        assert got == EvolutionTuner(EvolutionArgs(population_size=8)).suggest(ctx, [pid + 10])
    history[5] = TrialRecord(5, history[5].params, TrialStatus.SUCCEEDED, 99.0)
    ctx = TunerContext(space, Direction.MAXIMIZE, 1, tuple(history))
    assert warm.suggest(ctx, [99]) == EvolutionTuner(EvolutionArgs(population_size=8)).suggest(ctx, [99])
