from __future__ import annotations

import math
import statistics
from typing import Any

import pytest
from pydantic import ValidationError

from nnix.core.status import TrialStatus
from nnix.errors import NoMoreTrialsError
from nnix.registry import AlgorithmRef, resolve, validate_args
from nnix.space import SearchSpace, contains, grid, key
from nnix.testing.spaces import EVERY_TYPE, NESTED, QUADRATIC, SMALL
from nnix.testing.tuners import TunerContract
from nnix.tuners.anneal import AnnealTuner
from nnix.tuners.base import Direction, TrialRecord, Tuner, TunerContext
from nnix.tuners.random import RandomTuner
from nnix.tuners.tpe import HyperoptArgs

NESTED_CONTINUOUS: dict[str, Any] = {**NESTED, "x": {"_type": "lognormal", "_value": [0, 1]}}


class TestAnnealContract(TunerContract):
    tuner_factory = staticmethod(lambda: AnnealTuner())
    spaces = (SMALL, EVERY_TYPE, NESTED, NESTED_CONTINUOUS, {})


class TestAnnealParallelContract(TunerContract):
    tuner_factory = staticmethod(lambda: AnnealTuner(HyperoptArgs(parallel_optimize=True, constant_liar_type="mean")))
    spaces = (SMALL, EVERY_TYPE, NESTED_CONTINUOUS)


def ctx(
    raw: dict[str, Any],
    history: list[TrialRecord] | tuple[TrialRecord, ...] = (),
    seed: int = 1,
    direction: Direction = Direction.MINIMIZE,
) -> TunerContext:
    return TunerContext(SearchSpace.from_json(raw), direction, seed, tuple(history))


def optimise(tuner: Tuner, raw: dict[str, Any], f: Any, n: int, seed: int) -> float:
    history: list[TrialRecord] = []
    best = math.inf
    for pid in range(n):
        (params,) = tuner.suggest(ctx(raw, history, seed), [pid])
        best = min(best, f(params))
        history.append(TrialRecord(pid, params, TrialStatus.SUCCEEDED, f(params)))
    return best


def test_beats_random_on_a_quadratic() -> None:
    raw = {name: {"_type": "uniform", "_value": [-10, 10]} for name in "xyz"}

    def f(p: dict[str, Any]) -> float:
        return float((p["x"] - 3.3) ** 2 + (p["y"] + 1) ** 2 + p["z"] ** 2)

    anneal = [optimise(AnnealTuner(), raw, f, 80, seed) for seed in range(5)]
    rnd = [optimise(RandomTuner(), raw, f, 80, seed) for seed in range(5)]
    assert statistics.median(anneal) < statistics.median(rnd)


def test_proposals_stay_near_the_best_and_follow_the_direction() -> None:
    history = [TrialRecord(i, {"x": -9.5 + i}, TrialStatus.SUCCEEDED, float(i)) for i in range(20)]
    low = AnnealTuner().suggest(ctx(QUADRATIC, history), range(100, 120))
    high = AnnealTuner().suggest(ctx(QUADRATIC, history, direction=Direction.MAXIMIZE), range(100, 120))
    assert statistics.median(p["x"] for p in low) < -5
    assert statistics.median(p["x"] for p in high) > 5
    # 20 observations: the window is a third of the range around the start point
    assert all(abs(p["x"] - (-9.5)) <= 20 / 3 / 2 + 1e-9 or p["x"] > -9 for p in low)


def test_metric_zero_is_data_failures_are_not() -> None:
    history = [TrialRecord(0, {"x": 7.0}, TrialStatus.SUCCEEDED, 0.0)]
    history += [TrialRecord(1 + i, {"x": -9.0 + i}, TrialStatus.SUCCEEDED, 1.0 + i) for i in range(5)]
    failed = [TrialRecord(10 + i, {"x": 0.0}, TrialStatus.FAILED) for i in range(5)]
    proposals = AnnealTuner().suggest(ctx(QUADRATIC, history + failed), range(100, 120))
    assert sum(p["x"] > 3 for p in proposals) >= 4  # the best trial (metric 0) is a start point
    assert proposals == AnnealTuner().suggest(ctx(QUADRATIC, history), range(100, 120))
    assert proposals != AnnealTuner().suggest(ctx(QUADRATIC, history[1:]), range(100, 120))


def test_imported_records_are_used() -> None:
    imported = [TrialRecord(-(i + 1), {"x": -9.5 + i}, TrialStatus.SUCCEEDED, float(i)) for i in range(20)]
    proposals = AnnealTuner().suggest(ctx(QUADRATIC, imported), range(10))
    assert statistics.median(p["x"] for p in proposals) < -5


def test_parallel_optimize_counts_running_trials() -> None:
    history = [TrialRecord(i, {"x": -9.5 + i}, TrialStatus.SUCCEEDED, float(i)) for i in range(10)]
    running = [TrialRecord(10, {"x": 9.0}, TrialStatus.RUNNING)]
    plain = AnnealTuner().suggest(ctx(QUADRATIC, history + running), range(20, 30))
    assert plain == AnnealTuner().suggest(ctx(QUADRATIC, history), range(20, 30))
    liar = AnnealTuner(HyperoptArgs(parallel_optimize=True)).suggest(ctx(QUADRATIC, history + running), range(20, 40))
    assert liar[:10] != plain
    assert sum(p["x"] > 5 for p in liar) >= 2  # the running trial ranks among the best (liar = min loss)


def test_nested_and_discrete() -> None:
    space = SearchSpace.from_json(NESTED)
    points = AnnealTuner().suggest(ctx(NESTED), range(40))
    assert len({key(p) for p in points}) == 40 and all(contains(space, p) for p in points)
    history = [
        TrialRecord(i, p, TrialStatus.SUCCEEDED, float(i)) for i, p in enumerate(grid(SearchSpace.from_json(SMALL)))
    ]
    with pytest.raises(NoMoreTrialsError):
        AnnealTuner().suggest(ctx(SMALL, history), [10])
    assert len({key(p) for p in AnnealTuner().suggest(ctx(SMALL, history[:3]), range(10))}) == 3


def test_args() -> None:
    assert HyperoptArgs().optimize_mode == "minimize"
    with pytest.raises(ValidationError):
        HyperoptArgs.model_validate({"constant_liar_type": "best"})
    assert validate_args(AnnealTuner, {"optimize_mode": "maximize", "parallel_optimize": True}, "t") == []
    (issue,) = validate_args(AnnealTuner, {"parallel_optimise": True}, "t")
    assert issue.hint == "did you mean 'parallel_optimize'?"
    assert resolve("tuner", AlgorithmRef(name="Anneal")) is AnnealTuner


def test_a_warm_tuner_reads_only_the_new_records_and_proposes_as_a_fresh_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the first record still open in the previous history, nothing is read again (here: the
    activations of a nested space counted for the new records only); a changed earlier record makes
    it start over."""
    from nnix.tuners import anneal

    calls = [0]
    original = anneal._active_nested

    def counting(*args: Any, **kwargs: Any) -> None:
        calls[0] += 1
        original(*args, **kwargs)

    monkeypatch.setattr(anneal, "_active_nested", counting)
    raw = {
        "opt": {
            "_type": "choice",
            "_value": [{"_name": "a", "x": {"_type": "uniform", "_value": [0, 1]}}, {"_name": "b"}],
        },
        "y": {"_type": "uniform", "_value": [0, 1]},
    }
    space = SearchSpace.from_json(raw)

    def point(i: int) -> dict[str, Any]:
        return {"opt": {"_name": "a", "x": (i % 97) / 97} if i % 2 else {"_name": "b"}, "y": (i % 89) / 89}

    history = [TrialRecord(i, point(i), TrialStatus.SUCCEEDED, math.sin(i)) for i in range(1500)]
    history.append(TrialRecord(1500, point(1500), TrialStatus.RUNNING))
    args = HyperoptArgs(parallel_optimize=True)
    warm = AnnealTuner(args)
    warm.suggest(TunerContext(space, Direction.MINIMIZE, 1, tuple(history)), [1501])
    for step in range(3):
        history[1500 + step] = TrialRecord(1500 + step, point(1500 + step), TrialStatus.SUCCEEDED, 0.5)
        history.append(TrialRecord(1501 + step, point(1501 + step), TrialStatus.RUNNING))
        ctx = TunerContext(space, Direction.MINIMIZE, 1, tuple(history))
        calls[0] = 0
        got = warm.suggest(ctx, [1600 + step, 1700 + step])
        assert calls[0] <= 12  # the new records, the liar of the running one, the first proposal
        assert got == AnnealTuner(args).suggest(ctx, [1600 + step, 1700 + step])
    history[3] = TrialRecord(3, point(3), TrialStatus.SUCCEEDED, -99.0)
    ctx = TunerContext(space, Direction.MINIMIZE, 1, tuple(history))
    assert warm.suggest(ctx, [9]) == AnnealTuner(args).suggest(ctx, [9])
