from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from nnix.core.status import TrialStatus
from nnix.errors import SearchSpaceError
from nnix.registry import AlgorithmRef, resolve, validate_args
from nnix.space import SearchSpace, contains
from nnix.testing.spaces import DISCRETE, SQUARE, branin
from nnix.testing.tuners import TunerContract, check_branin_smoke
from nnix.tuners.base import Direction, TrialRecord, TunerContext
from nnix.tuners.bo import UnitEncoding, collect
from nnix.tuners.metis import MetisArgs, MetisTuner, gmm_candidates

METIS_SPACE: dict[str, Any] = {
    "c": {"_type": "choice", "_value": [4, 1, 2.5]},
    "r": {"_type": "randint", "_value": [1, 10]},
    "u": {"_type": "uniform", "_value": [-1, 1]},
    "q": {"_type": "quniform", "_value": [2, 10, 5]},
}


def ctx(
    raw: dict[str, Any],
    history: list[TrialRecord] | tuple[TrialRecord, ...] = (),
    seed: int = 1,
    direction: Direction = Direction.MINIMIZE,
) -> TunerContext:
    return TunerContext(SearchSpace.from_json(raw), direction, seed, tuple(history))


def small(**kw: Any) -> MetisTuner:
    return MetisTuner(MetisArgs(cold_start_num=3, selection_num_starting_points=2, **kw))


class TestMetisContract(TunerContract):
    tuner_factory = staticmethod(small)
    spaces = (METIS_SPACE, DISCRETE, {"x": {"_type": "uniform", "_value": [0, 1]}})


class TestMetisExploitContract(TunerContract):
    tuner_factory = staticmethod(lambda: small(exploration_probability=0.0))
    spaces = (METIS_SPACE,)


def test_branin_smoke() -> None:
    """Past its cold start, in the domain and ahead of Random (quality figures: bench/quality.py)."""
    check_branin_smoke(lambda: MetisTuner(MetisArgs(optimize_mode="minimize", selection_num_starting_points=3)),
                       trials=25, below=0.6)  # Random's best here: 0.62


def smooth_history(n: int = 16) -> list[TrialRecord]:
    rng = np.random.default_rng(2)
    points = [
        {"x": float(x), "y": float(y)} for x, y in zip(rng.uniform(-5, 10, n), rng.uniform(0, 15, n), strict=True)
    ]
    return [TrialRecord(i, p, TrialStatus.SUCCEEDED, branin(p)) for i, p in enumerate(points)]


def test_resampling_repeats_a_suspiciously_good_result() -> None:
    history = smooth_history(30)
    lucky = history[7].params
    history[7] = TrialRecord(7, lucky, TrialStatus.SUCCEEDED, -60.0)  # far better than its neighbourhood says
    with_resampling = MetisTuner(MetisArgs(optimize_mode="minimize", no_resampling=False))
    proposals = with_resampling.suggest(ctx(SQUARE, history), [30, 31])
    assert proposals[0] == lucky and proposals[1] != lucky
    # once repeated, it is not re-sampled again; and the default never re-samples
    again = [*history, TrialRecord(30, lucky, TrialStatus.SUCCEEDED, 30.0)]
    assert lucky not in with_resampling.suggest(ctx(SQUARE, again), [31, 32])
    assert lucky not in MetisTuner(MetisArgs(optimize_mode="minimize")).suggest(ctx(SQUARE, history), [30, 31])


def test_no_candidates_proposes_the_predicted_optimum() -> None:
    space = {"x": {"_type": "uniform", "_value": [0, 1]}}
    history = [
        TrialRecord(i, {"x": float(x)}, TrialStatus.SUCCEEDED, -((x - 0.3) ** 2))
        for i, x in enumerate(np.linspace(0.0, 1.0, 11))
    ]
    (p,) = MetisTuner(MetisArgs(no_candidates=True)).suggest(ctx(space, history, direction=Direction.MAXIMIZE), [11])
    assert abs(p["x"] - 0.3) < 0.05


def test_concurrent_proposals_spread() -> None:
    tuner = MetisTuner(MetisArgs(optimize_mode="minimize"))
    history = smooth_history()
    batch = tuner.suggest(ctx(SQUARE, history), range(16, 20))
    points = np.array([[p["x"] / 15, p["y"] / 15] for p in batch])
    gaps = [np.linalg.norm(a - b) for i, a in enumerate(points) for b in points[i + 1 :]]
    assert min(gaps) > 0.02, points


def test_gmm_candidates_come_from_the_good_region() -> None:
    space = SearchSpace.from_json(SQUARE)
    enc = UnitEncoding(space, "Metis")
    history = smooth_history(40)
    obs = collect(history, enc, Direction.MINIMIZE)
    cands = gmm_candidates(obs, enc, np.random.default_rng(0))
    mean_value = np.mean([branin(enc.decode(u)) for u in cands])
    assert mean_value < np.median([r.value for r in history if r.value is not None])
    assert all(contains(space, enc.decode(u)) for u in cands)


def test_only_numeric_types() -> None:
    for raw, match in (
        ({"l": {"_type": "loguniform", "_value": [1e-3, 1]}}, "'loguniform'"),
        ({"c": {"_type": "choice", "_value": [1, "two"]}}, "numeric"),
        ({"n": {"_type": "qnormal", "_value": [0, 1, 1]}}, "'qnormal'"),
    ):
        with pytest.raises(SearchSpaceError, match=match):
            small().suggest(TunerContext(SearchSpace.from_json(raw), Direction.MAXIMIZE, 0), [0])


def test_args() -> None:
    args = MetisArgs()
    assert (args.optimize_mode, args.no_resampling, args.no_candidates) == ("maximize", True, False)
    assert (args.selection_num_starting_points, args.cold_start_num, args.exploration_probability) == (600, 10, 0.9)
    for bad in ({"exploration_probability": 1.5}, {"cold_start_num": -2}, {"no_resampling": "maybe"}, {"x": 1}):
        with pytest.raises(ValidationError):
            MetisArgs.model_validate(bad)
    (issue,) = validate_args(MetisTuner, {"no_resample": True}, "tuner.classArgs")
    assert issue.hint == "did you mean 'no_resampling'?"
    assert resolve("tuner", AlgorithmRef(name="Metis")) is MetisTuner
    assert resolve("tuner", AlgorithmRef(name="MetisTuner")) is MetisTuner
    assert MetisTuner.heavy is True
