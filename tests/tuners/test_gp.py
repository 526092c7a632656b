from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from nnix.core.status import TrialStatus
from nnix.errors import NoMoreTrialsError, SearchSpaceError
from nnix.registry import AlgorithmRef, resolve, validate_args
from nnix.space import SearchSpace, contains, key
from nnix.testing.spaces import DISCRETE, NUMERIC, SQUARE, branin
from nnix.testing.tuners import TunerContract, check_branin_smoke
from nnix.tuners.base import Direction, TrialRecord, TunerContext
from nnix.tuners.gp import GPArgs, GPTuner, Observations, UnitEncoding, collect, fit_gp
from nnix.tuners.random import RandomTuner


def small() -> GPTuner:
    return GPTuner(GPArgs(cold_start_num=3, selection_num_warm_up=300, selection_num_starting_points=2))


class TestGPContract(TunerContract):
    tuner_factory = staticmethod(small)
    spaces = (NUMERIC, DISCRETE, {"x": {"_type": "uniform", "_value": [0, 1]}})


def ctx(
    raw: dict[str, Any],
    history: list[TrialRecord] | tuple[TrialRecord, ...] = (),
    seed: int = 1,
    direction: Direction = Direction.MINIMIZE,
) -> TunerContext:
    return TunerContext(SearchSpace.from_json(raw), direction, seed, tuple(history))


def test_branin_smoke() -> None:
    """Past its cold start, in the domain and ahead of Random (quality figures: bench/quality.py)."""
    args = GPArgs(optimize_mode="minimize", selection_num_warm_up=500, selection_num_starting_points=3)
    check_branin_smoke(lambda: GPTuner(args), trials=25, below=0.6)  # Random's best here: 0.62


def test_batches_spread_with_constant_liar() -> None:
    rng = np.random.default_rng(0)
    history = [
        TrialRecord(i, {"x": float(x), "y": float(y)}, TrialStatus.SUCCEEDED, branin({"x": x, "y": y}))
        for i, (x, y) in enumerate(zip(rng.uniform(-5, 10, 15), rng.uniform(0, 15, 15), strict=True))
    ]
    tuner = GPTuner(GPArgs(optimize_mode="minimize"))
    first = tuner.suggest(ctx(SQUARE, history), [15, 16])
    running = [TrialRecord(15 + i, p, TrialStatus.RUNNING) for i, p in enumerate(first)]
    later = tuner.suggest(ctx(SQUARE, [*history, *running]), [17, 18, 19])
    points = np.array([[p["x"] / 15, p["y"] / 15] for p in [*first, *later]])
    gaps = [np.linalg.norm(a - b) for i, a in enumerate(points) for b in points[i + 1 :]]
    assert min(gaps) > 0.02, f"near-duplicate concurrent proposals: {points}"
    assert later != GPTuner(GPArgs(optimize_mode="minimize")).suggest(ctx(SQUARE, history), [17, 18, 19])


def test_metric_zero_imported_and_failed_records() -> None:
    enc = UnitEncoding(SearchSpace.from_json(SQUARE), "GP")
    history = [
        TrialRecord(-1, {"x": 1.0, "y": 2.0}, TrialStatus.SUCCEEDED, 0.0),  # imported, metric 0
        TrialRecord(0, {"x": 2.0, "y": 3.0}, TrialStatus.FAILED),
        TrialRecord(1, {"x": 3.0, "y": 4.0}, TrialStatus.USER_CANCELED),
        TrialRecord(2, {"x": 4.0, "y": 5.0}, TrialStatus.RUNNING),
        TrialRecord(3, {"x": 5.0, "y": 6.0}, TrialStatus.EARLY_STOPPED, 7.0),
        TrialRecord(4, {"x": 99.0, "z": 1}, TrialStatus.SUCCEEDED, 1.0),  # not a point of this space
    ]
    obs = collect(history, enc, Direction.MINIMIZE)
    assert obs.y.tolist() == [-0.0, -7.0]  # minimised values are negated
    assert obs.pending.shape == (1, 2)
    # imported results alone start the model: the first proposal is no longer Random's
    imported = [TrialRecord(-(i + 1), p, TrialStatus.SUCCEEDED, branin(p)) for i, p in enumerate(_grid(4))]
    proposal = GPTuner(GPArgs(optimize_mode="minimize", cold_start_num=10)).suggest(ctx(SQUARE, imported), [0])
    assert proposal != RandomTuner().suggest(ctx(SQUARE, imported), [0])


def _grid(n: int) -> list[dict[str, Any]]:
    return [{"x": -5 + 15 * (i + 0.5) / n, "y": 15 * (j + 0.5) / n} for i in range(n) for j in range(n)]


def test_maximize_and_minimize() -> None:
    space = {"x": {"_type": "uniform", "_value": [0, 1]}}
    history = [TrialRecord(i, {"x": x}, TrialStatus.SUCCEEDED, x) for i, x in enumerate(np.linspace(0.05, 0.95, 12))]
    tuner = GPTuner(GPArgs(utility="ucb", kappa=0.1))
    (up,) = tuner.suggest(ctx(space, history, direction=Direction.MAXIMIZE), [12])
    (down,) = tuner.suggest(ctx(space, history, direction=Direction.MINIMIZE), [12])
    assert up["x"] > 0.9 and down["x"] < 0.1


@pytest.mark.parametrize("utility", ["ei", "ucb", "poi"])
def test_utilities_and_kernels_stay_in_bounds(utility: str) -> None:
    space = SearchSpace.from_json(NUMERIC)
    for nu in (0.5, 1.5, 2.5, 1.7, math.inf):
        tuner = GPTuner(GPArgs(utility=utility, nu=nu, cold_start_num=4, selection_num_warm_up=200))  # type: ignore[arg-type]
        history: list[TrialRecord] = []
        for pid in range(8):
            (p,) = tuner.suggest(TunerContext(space, Direction.MAXIMIZE, 3, tuple(history)), [pid])
            assert contains(space, p), p
            history.append(TrialRecord(pid, p, TrialStatus.SUCCEEDED, float(p["u"] + p["r"])))


def test_discrete_space_is_exhausted_without_repeats() -> None:
    tuner = small()
    history: list[TrialRecord] = []
    seen: set[str] = set()
    with pytest.raises(NoMoreTrialsError):
        for pid in range(20):
            for p in tuner.suggest(ctx(DISCRETE, history), [pid]):
                assert key(p) not in seen
                seen.add(key(p))
                history.append(TrialRecord(pid, p, TrialStatus.SUCCEEDED, float(p["c"] * p["r"])))
    assert len(seen) == 9


def test_unsupported_spaces_name_the_parameter() -> None:
    with pytest.raises(SearchSpaceError) as info:
        small().suggest(ctx({**SQUARE, "act": {"_type": "choice", "_value": ["relu", "tanh"]}}), [0])
    assert "searchSpace.act" in str(info.value) and "numeric" in str(info.value)
    nested = {
        "layer": {
            "_type": "choice",
            "_value": [{"_name": "a"}, {"_name": "b", "k": {"_type": "randint", "_value": [1, 3]}}],
        }
    }
    with pytest.raises(SearchSpaceError, match="nested"):
        small().suggest(ctx(nested), [0])
    with pytest.raises(SearchSpaceError, match="'normal'"):
        small().suggest(
            ctx({"n": {"_type": "normal", "_value": [0, 1]}, "b": {"_type": "choice", "_value": [True]}}), [0]
        )


def test_unit_encoding_round_trips() -> None:
    space = SearchSpace.from_json(NUMERIC)
    enc = UnitEncoding(space, "GP")
    rng = np.random.default_rng(0)
    for u in rng.random((200, enc.d)):
        p = enc.decode(u)
        assert contains(space, p)
        back = enc.encode(p)
        assert back is not None and enc.decode(back) == p
        assert np.allclose(enc.snap(u[None, :])[0], back)
    assert enc.encode({"c": 2.5, "r": 9, "u": 1.0, "q": 10.0, "l": 1.0, "ql": 100.0}) is not None
    assert enc.encode({"c": 3, "r": 9, "u": 1.0, "q": 10.0, "l": 1.0, "ql": 100.0}) is None  # not an option


def test_gp_model_fits_a_smooth_function() -> None:
    rng = np.random.default_rng(1)
    x = rng.random((40, 2))
    y = np.sin(6 * x[:, 0]) + x[:, 1] ** 2
    model = fit_gp(Observations(x, y, np.zeros((0, 2)), np.arange(40)))
    test = rng.random((50, 2))
    mu, sd = model.predict(test)
    assert np.abs(mu - (np.sin(6 * test[:, 0]) + test[:, 1] ** 2)).max() < 0.1
    assert (sd >= 0).all() and float(model.predict(x[:1])[1][0]) < 0.05


def test_args() -> None:
    args = GPArgs()
    assert (args.optimize_mode, args.utility, args.kappa, args.xi, args.nu, args.alpha) == (
        "maximize",
        "ei",
        5,
        0,
        2.5,
        1e-6,
    )
    assert (args.cold_start_num, args.selection_num_warm_up, args.selection_num_starting_points) == (10, 100000, 250)
    for bad in ({"utility": "pi"}, {"kappa": -1}, {"nu": 0}, {"alpha": 0}, {"cold_start_num": -1}, {"foo": 1}):
        with pytest.raises(ValidationError):
            GPArgs.model_validate(bad)
    (issue,) = validate_args(GPTuner, {"utilty": "ei"}, "tuner.classArgs")
    assert issue.path == "tuner.classArgs.utilty" and issue.hint == "did you mean 'utility'?"
    assert resolve("tuner", AlgorithmRef(name="GP")) is GPTuner
    assert resolve("tuner", AlgorithmRef(name="GPTuner")) is GPTuner
    assert GPTuner.heavy is True


def test_squared_distances_of_near_duplicates_are_exact() -> None:
    """A liar next to an observation: their distance, not the rounding of |a|^2 + |b|^2 - 2 a.b (which
    made the kernel matrix, and the proposals, depend on the CPU's BLAS)."""
    from nnix.tuners.gp import _sq_dist

    rng = np.random.default_rng(0)
    a = rng.random((50, 6)) * 3.0  # unit-cube points over length scales of 1/3
    b = a + 1e-6 * rng.standard_normal(a.shape)
    d2 = _sq_dist(a, b)
    exact = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
    assert np.abs(np.diag(d2) / np.diag(exact) - 1.0).max() < 1e-12  # the expansion: off by up to 0.3%
    assert np.allclose(d2, exact, rtol=1e-12, atol=0.0)


def test_the_fit_does_not_hang_on_the_last_bits() -> None:
    """A few observations of a function of two of six parameters: the likelihood alone is flat along the
    four others, and where the fit stopped moved by up to 2e-3 (log scale) when the results changed by
    1e-13; with the prior it moves by less than 1e-6."""
    from nnix.tuners.gp import _fit_hyper

    moved = []
    for trial in range(40):
        rng = np.random.default_rng(trial)
        x = rng.random((5 + trial % 8, 6))
        y = np.sin(3 * x[:, 0]) + x[:, 1] ** 2
        y = (y - y.mean()) / y.std()
        a = _fit_hyper(x, y, 2.5, 1e-6)
        b = _fit_hyper(x, y * (1 + 1e-13 * rng.standard_normal(y.shape)), 2.5, 1e-6)
        theta_a = np.log(np.r_[a.amplitude, a.lengths, a.noise])
        theta_b = np.log(np.r_[b.amplitude, b.lengths, b.noise])
        moved.append(float(np.abs(theta_a - theta_b).max()))
    assert max(moved) < 1e-6, moved
