"""Golden proposals: every built-in tuner, driven through a fixed scenario on each NNI space type, proposes
exactly (bit for bit) what it proposed when the golden file was written.

A refactoring of the tuners (shared search-space transform, shared Bayesian-optimisation toolkit) must keep
this test green. A deliberate change of behaviour rewrites the file, and says so with its quality figures
(``bench/quality.py``):

    PYTHONPATH=src python tests/tuners/test_proposals_unchanged.py --write
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nnix.core.status import TrialStatus
from nnix.errors import NnixError
from nnix.space import SearchSpace
from nnix.testing.spaces import SMAC_TYPES
from nnix.tuners.base import Direction, TrialRecord, Tuner, TunerContext

GOLDEN = Path(__file__).with_name("golden_proposals.json")
HAVE_SMAC = importlib.util.find_spec("smac") is not None

SPACES: dict[str, dict[str, Any]] = {
    "all_types": {
        "c": {"_type": "choice", "_value": ["relu", 3, {"a": 1}, True]},
        "r": {"_type": "randint", "_value": [-2, 5]},
        "u": {"_type": "uniform", "_value": [-1, 1]},
        "qu": {"_type": "quniform", "_value": [2, 10, 2]},
        "lu": {"_type": "loguniform", "_value": [1e-4, 1]},
        "qlu": {"_type": "qloguniform", "_value": [1, 100, 5]},
        "n": {"_type": "normal", "_value": [0, 2]},
        "qn": {"_type": "qnormal", "_value": [5, 3, 0.5]},
        "ln": {"_type": "lognormal", "_value": [0, 1]},
        "qln": {"_type": "qlognormal", "_value": [1, 0.5, 1]},
    },
    "nested": {
        "opt": {
            "_type": "choice",
            "_value": [
                {"_name": "sgd", "lr": {"_type": "loguniform", "_value": [1e-3, 1]}},
                {
                    "_name": "adam",
                    "beta": {"_type": "uniform", "_value": [0.8, 1]},
                    "k": {"_type": "randint", "_value": [1, 4]},
                },
                {"_name": "none"},
            ],
        },
        "x": {"_type": "uniform", "_value": [0, 1]},
    },
    "numeric": {  # GP and DNGO types
        "c": {"_type": "choice", "_value": [8, 2, 4.5, 1]},
        "r": {"_type": "randint", "_value": [0, 6]},
        "u": {"_type": "uniform", "_value": [-5, 10]},
        "qu": {"_type": "quniform", "_value": [0, 15, 3]},
        "lu": {"_type": "loguniform", "_value": [1e-3, 10]},
        "qlu": {"_type": "qloguniform", "_value": [1, 64, 4]},
    },
    "metis": {  # Metis types
        "c": {"_type": "choice", "_value": [3, 1, 2]},
        "r": {"_type": "randint", "_value": [1, 5]},
        "u": {"_type": "uniform", "_value": [-5, 10]},
        "qu": {"_type": "quniform", "_value": [0, 15, 0.5]},
    },
    "smac": SMAC_TYPES,
    "discrete": {  # small: deduplication and exhaustion
        "c": {"_type": "choice", "_value": [1, 2, 3]},
        "r": {"_type": "randint", "_value": [0, 2]},
    },
}


def _tuners() -> dict[str, Callable[[], Tuner]]:
    from nnix.tuners.anneal import AnnealTuner
    from nnix.tuners.bohb import BohbArgs, BohbTuner
    from nnix.tuners.dngo import DNGOArgs, DNGOTuner
    from nnix.tuners.evolution import EvolutionTuner
    from nnix.tuners.gp import GPArgs, GPTuner
    from nnix.tuners.metis import MetisArgs, MetisTuner
    from nnix.tuners.random import RandomTuner
    from nnix.tuners.tpe import HyperoptArgs, TpeArgs, TpeLegacyTuner, TpeTuner, TpeTunerArgs

    small_gp = {"cold_start_num": 4, "selection_num_warm_up": 300, "selection_num_starting_points": 2}
    out: dict[str, Callable[[], Tuner]] = {
        "random": lambda: RandomTuner(),
        "anneal": lambda: AnnealTuner(),
        "evolution": lambda: EvolutionTuner(),
        "tpe": lambda: TpeTuner(TpeTunerArgs(tpe_args=TpeArgs(n_startup_jobs=4))),
        "tpe_worst": lambda: TpeTuner(TpeTunerArgs(tpe_args=TpeArgs(n_startup_jobs=3, constant_liar_type="worst"))),
        "tpe_legacy": lambda: TpeLegacyTuner(HyperoptArgs(parallel_optimize=True)),
        "gp_ei": lambda: GPTuner(GPArgs(**small_gp)),  # type: ignore[arg-type]
        "gp_ucb": lambda: GPTuner(GPArgs(utility="ucb", nu=1.5, **small_gp)),  # type: ignore[arg-type]
        "gp_poi": lambda: GPTuner(GPArgs(utility="poi", nu=0.5, **small_gp)),  # type: ignore[arg-type]
        "metis": lambda: MetisTuner(MetisArgs(cold_start_num=4, selection_num_starting_points=2)),
        "metis_resample": lambda: MetisTuner(
            MetisArgs(cold_start_num=4, no_resampling=False, exploration_probability=0.5)
        ),
        "metis_nocand": lambda: MetisTuner(MetisArgs(cold_start_num=4, no_candidates=True)),
        "dngo": lambda: DNGOTuner(DNGOArgs(trials_per_update=4, num_epochs_per_training=25, sample_size=200)),
        "bohb": lambda: BohbTuner(BohbArgs(min_budget=1, max_budget=9, min_points_in_model=2, random_fraction=0.2)),
    }
    if HAVE_SMAC:
        from nnix.tuners.smac import SMACArgs, SMACTuner

        out["smac"] = lambda: SMACTuner(SMACArgs(config_dedup=True))
    return out


def _objective(value: Any) -> float:
    """A deterministic, non-trivial metric of a parameter set."""
    if isinstance(value, bool):
        return 0.7 if value else 0.2
    if isinstance(value, (int, float)):
        return math.sin(1.3 * float(value)) + 0.05 * float(value)
    if isinstance(value, str):
        return 0.1 * len(value)
    if isinstance(value, dict):
        return sum((i + 1) * _objective(value[k]) for i, k in enumerate(sorted(value)))
    return 0.0


def run_scenario(factory: Callable[[], Tuner], raw: dict[str, Any], seed: int, direction: Direction) -> list[Any]:
    """Five rounds of three proposals; each round one trial stays running into the next round and
    one fails without a value. A fresh tuner is built every other round (tuners are rebuildable)."""
    space = SearchSpace.from_json(raw)
    tuner = factory()
    history: list[TrialRecord] = []
    out: list[Any] = []
    pid = 0
    for rnd in range(5):
        if rnd % 2:
            tuner = factory()
        ids = list(range(pid, pid + 3))
        pid += 3
        try:
            got = tuner.suggest(TunerContext(space, direction, seed, tuple(history)), ids)
        except NnixError as e:
            out.append({"error": type(e).__name__, "message": str(e)})
            break
        out.append(got)
        # the running trial of the previous round ends
        history = [
            TrialRecord(r.parameter_id, r.params, TrialStatus.SUCCEEDED, _objective(r.params))
            if r.status is TrialStatus.RUNNING
            else r
            for r in history
        ]
        for k, (i, p) in enumerate(zip(ids, got, strict=False)):
            if k == 0:
                history.append(TrialRecord(i, p, TrialStatus.SUCCEEDED, _objective(p), (0.5 * _objective(p),)))
            elif k == 1 and rnd % 2:
                history.append(TrialRecord(i, p, TrialStatus.FAILED))
            elif k == 1:
                history.append(TrialRecord(i, p, TrialStatus.SUCCEEDED, _objective(p)))
            else:
                history.append(TrialRecord(i, p, TrialStatus.RUNNING))
    return out


def scenarios() -> Iterator[tuple[str, Callable[[], Tuner], dict[str, Any], int, Direction]]:
    for name, factory in _tuners().items():
        for space_name, raw in SPACES.items():
            for seed, direction in ((1, Direction.MINIMIZE), (7, Direction.MAXIMIZE)):
                if name == "smac" and (seed != 1 or space_name == "discrete"):
                    continue  # SMAC3 is slow to build: one seed, and no exhaustion run
                yield f"{name}/{space_name}/{seed}", factory, raw, seed, direction


def record() -> dict[str, Any]:
    return {
        key: json.loads(json.dumps(run_scenario(factory, raw, seed, direction)))
        for key, factory, raw, seed, direction in scenarios()
    }


def test_proposals_are_bit_identical_to_the_golden_file() -> None:
    golden = json.loads(GOLDEN.read_text())
    got = record()
    if not HAVE_SMAC:
        golden = {k: v for k, v in golden.items() if not k.startswith("smac/")}
    assert set(got) == set(golden)
    changed = sorted(k for k in golden if got[k] != golden[k])
    assert not changed, f"{len(changed)} of {len(golden)} scenarios propose differently: {changed[:10]}"
    # the golden file exercises the model phase, not just random draws or errors
    assert sum(1 for v in golden.values() if v and "error" not in v[-1]) >= 60


if __name__ == "__main__":
    if "--write" not in sys.argv:
        pytest.main([__file__, "-q"])
    else:
        GOLDEN.write_text(json.dumps(record(), indent=None, sort_keys=True) + "\n")
        print(f"wrote {GOLDEN}")
