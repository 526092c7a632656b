from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from nnix.core.status import TrialStatus
from nnix.errors import SearchSpaceError
from nnix.registry import AlgorithmRef, resolve, validate_args
from nnix.space import SearchSpace
from nnix.testing.spaces import DISCRETE, NUMERIC, SQUARE, branin
from nnix.testing.tuners import TunerContract, check_branin_smoke
from nnix.tuners.base import Direction, TrialRecord, TunerContext
from nnix.tuners.dngo import BayesianLinear, DNGOArgs, DNGOTuner, train_network
from nnix.tuners.random import RandomTuner


def small(**kw: Any) -> DNGOTuner:
    return DNGOTuner(DNGOArgs(trials_per_update=3, num_epochs_per_training=30, sample_size=60, **kw))


class TestDNGOContract(TunerContract):
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
    """Past its first trainings, in the domain and ahead of Random (quality figures: bench/quality.py)."""
    args = DNGOArgs(optimize_mode="minimize", trials_per_update=10, num_epochs_per_training=300)
    check_branin_smoke(lambda: DNGOTuner(args), trials=30)


def test_random_until_the_first_training() -> None:
    tuner = DNGOTuner(DNGOArgs(trials_per_update=5, num_epochs_per_training=20))
    history = [TrialRecord(i, {"x": 1.0 + i, "y": 2.0}, TrialStatus.SUCCEEDED, float(i)) for i in range(4)]
    assert tuner.suggest(ctx(SQUARE, history), [4]) == RandomTuner().suggest(ctx(SQUARE, history), [4])
    history.append(TrialRecord(4, {"x": 0.0, "y": 0.0}, TrialStatus.SUCCEEDED, 0.0))  # a metric of 0 is data
    assert tuner.suggest(ctx(SQUARE, history), [5]) != RandomTuner().suggest(ctx(SQUARE, history), [5])


def test_network_is_trained_at_update_boundaries_only() -> None:
    tuner = DNGOTuner(DNGOArgs(trials_per_update=5, num_epochs_per_training=20))
    rng = np.random.default_rng(0)
    history = [
        TrialRecord(i, {"x": float(x), "y": float(y)}, TrialStatus.SUCCEEDED, float(x + y))
        for i, (x, y) in enumerate(rng.uniform(0, 10, (12, 2)))
    ]
    tuner.suggest(ctx(SQUARE, history[:10]), [10])
    first = tuner._network
    tuner.suggest(ctx(SQUARE, history[:12]), [12])  # 12 results: still the network of the first 10
    assert tuner._network is first
    # failed and running trials do not count as results
    more = [*history[:12], TrialRecord(12, {"x": 1.0, "y": 1.0}, TrialStatus.FAILED)]
    more += [TrialRecord(13 + i, {"x": 2.0 + i, "y": 1.0}, TrialStatus.RUNNING) for i in range(3)]
    tuner.suggest(ctx(SQUARE, more), [16])
    assert tuner._network is first


def test_concurrent_proposals_spread() -> None:
    rng = np.random.default_rng(3)
    history = [
        TrialRecord(i, {"x": float(x), "y": float(y)}, TrialStatus.SUCCEEDED, branin({"x": x, "y": y}))
        for i, (x, y) in enumerate(zip(rng.uniform(-5, 10, 20), rng.uniform(0, 15, 20), strict=True))
    ]
    batch = DNGOTuner(DNGOArgs(optimize_mode="minimize", num_epochs_per_training=200)).suggest(
        ctx(SQUARE, history), range(20, 24)
    )
    points = np.array([[p["x"] / 15, p["y"] / 15] for p in batch])
    gaps = [np.linalg.norm(a - b) for i, a in enumerate(points) for b in points[i + 1 :]]
    assert min(gaps) > 0.01, points


def test_surrogate_learns_a_smooth_function() -> None:
    rng = np.random.default_rng(1)
    x = rng.random((60, 2))
    y = np.sin(4 * x[:, 0]) + x[:, 1] ** 2
    net = train_network(x, (y - y.mean()) / y.std(), 500, np.random.default_rng(0))
    phi = np.hstack([net.features(x), np.ones((60, 1))])
    model = BayesianLinear(phi, y)
    test = rng.random((40, 2))
    mu, sd = model.predict(np.hstack([net.features(test), np.ones((40, 1))]))
    assert np.abs(mu - (np.sin(4 * test[:, 0]) + test[:, 1] ** 2)).mean() < 0.15
    assert (sd > 0).all()


def test_only_numeric_types() -> None:
    for raw, match in (
        ({"c": {"_type": "choice", "_value": ["a", "b"]}}, "numeric"),
        ({"n": {"_type": "lognormal", "_value": [0, 1]}}, "'lognormal'"),
    ):
        with pytest.raises(SearchSpaceError, match=match):
            small().suggest(TunerContext(SearchSpace.from_json(raw), Direction.MAXIMIZE, 0), [0])


def test_args() -> None:
    args = DNGOArgs()
    assert (args.optimize_mode, args.sample_size, args.trials_per_update, args.num_epochs_per_training) == (
        "maximize",
        1000,
        20,
        500,
    )
    for bad in ({"sample_size": 0}, {"trials_per_update": 0}, {"num_epochs_per_training": -1}, {"lr": 0.1}):
        with pytest.raises(ValidationError):
            DNGOArgs.model_validate(bad)
    (issue,) = validate_args(DNGOTuner, {"sample_sise": 10}, "tuner.classArgs")
    assert issue.hint == "did you mean 'sample_size'?"
    assert resolve("tuner", AlgorithmRef(name="DNGO")) is DNGOTuner
    assert resolve("tuner", AlgorithmRef(name="DNGOTuner")) is DNGOTuner
    assert DNGOTuner.heavy is True
