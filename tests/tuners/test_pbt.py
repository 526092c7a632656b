from __future__ import annotations

import math
import os
from typing import Any, ClassVar

import numpy as np
import pytest
from pydantic import ValidationError

from nnix.core.status import TrialStatus
from nnix.errors import SearchSpaceError, TunerError
from nnix.registry import AlgorithmRef, resolve, validate_args
from nnix.space import Params, SearchSpace, contains
from nnix.testing.spaces import EVERY_TYPE
from nnix.testing.tuners import TunerContract
from nnix.tuners.base import Direction, TrialRecord, TunerContext
from nnix.tuners.pbt import LOAD_KEY, SAVE_KEY, PBTArgs, PBTTuner, checkpoint_dir, perturb

SMALL: dict[str, Any] = {"lr": {"_type": "uniform", "_value": [0, 1]}, "bs": {"_type": "choice", "_value": [16, 32]}}
ROOT = os.path.join("ckpt", "exp")


def pbt(**kw: Any) -> PBTTuner:
    return PBTTuner(PBTArgs(all_checkpoint_dir=ROOT, population_size=4, **kw))


class TestPBTContract(TunerContract):
    tuner_factory = staticmethod(pbt)
    spaces = (EVERY_TYPE, SMALL, {"c": {"_type": "choice", "_value": ["x"]}})
    root: ClassVar[str] = ROOT

    def is_valid_proposal(self, space: SearchSpace, params: Params) -> bool:
        hyper = {k: v for k, v in params.items() if k not in (LOAD_KEY, SAVE_KEY)}
        save, load = params.get(SAVE_KEY), params.get(LOAD_KEY)
        return (
            contains(space, hyper)
            and isinstance(save, str)
            and isinstance(load, str)
            and save.startswith(os.path.join(self.root, ""))
            and load.startswith(os.path.join(self.root, ""))
        )


class TestPBTDefaultsContract(TestPBTContract):
    tuner_factory = staticmethod(lambda **_: PBTTuner())
    root = "checkpoint"
    rounds = 8


def ctx(
    raw: dict[str, Any], history: list[TrialRecord] | tuple[TrialRecord, ...] = (), seed: int = 1, **kw: Any
) -> TunerContext:
    return TunerContext(SearchSpace.from_json(raw), kw.get("direction", Direction.MAXIMIZE), seed, tuple(history))


def finish(proposals: list[Params], first_id: int, values: list[float | None]) -> list[TrialRecord]:
    return [
        TrialRecord(first_id + i, p, TrialStatus.SUCCEEDED if v is not None else TrialStatus.FAILED, v)
        for i, (p, v) in enumerate(zip(proposals, values, strict=True))
    ]


def test_generation_zero_layout_and_partial_batches() -> None:
    tuner = pbt()
    first = tuner.suggest(ctx(SMALL), [0, 1])
    assert [p[SAVE_KEY] for p in first] == [checkpoint_dir(ROOT, m, 0) for m in (0, 1)]
    assert all(p[LOAD_KEY] == p[SAVE_KEY] for p in first)  # step 0 loads from its own (empty) directory
    running = [TrialRecord(i, p, TrialStatus.RUNNING) for i, p in enumerate(first)]
    rest = tuner.suggest(ctx(SMALL, running), [2, 3, 4, 5])  # only the two missing members
    assert [p[SAVE_KEY] for p in rest] == [checkpoint_dir(ROOT, m, 0) for m in (2, 3)]
    everyone = running + [TrialRecord(2 + i, p, TrialStatus.RUNNING) for i, p in enumerate(rest)]
    assert tuner.suggest(ctx(SMALL, everyone), [6, 7]) == []  # not now: the generation runs
    almost = [TrialRecord(r.parameter_id, r.params, TrialStatus.SUCCEEDED, 0.5) for r in everyone[:3]] + everyone[3:]
    assert tuner.suggest(ctx(SMALL, almost), [6]) == []


def test_exploit_and_explore_from_history() -> None:
    tuner = pbt(fraction=0.25, resample_probability=0.0)
    gen0 = tuner.suggest(ctx(SMALL), range(4))
    history = finish(gen0, 0, [1.0, 4.0, 0.0, 2.0])  # member 2 is worst (0 is a real result), member 1 best
    gen1 = tuner.suggest(ctx(SMALL, history), range(4, 8))
    assert [p[SAVE_KEY] for p in gen1] == [checkpoint_dir(ROOT, m, 1) for m in range(4)]
    for m in (0, 1, 3):  # the others continue from their own checkpoint with their hyper-parameters
        assert gen1[m][LOAD_KEY] == checkpoint_dir(ROOT, m, 0)
        assert {k: gen1[m][k] for k in SMALL} == {k: gen0[m][k] for k in SMALL}
    assert gen1[2][LOAD_KEY] == checkpoint_dir(ROOT, 1, 0)  # copies the best member's checkpoint ...
    assert math.isclose(abs(gen1[2]["lr"] - gen0[1]["lr"]), 0.2) or gen1[2]["lr"] in (0.0, 1.0)  # ... and moves
    assert gen1[2]["bs"] in (16, 32)
    # minimising turns the ranking around: member 1 (4.0) is now the worst and copies member 2
    down = pbt(fraction=0.25).suggest(ctx(SMALL, history, direction=Direction.MINIMIZE), range(4, 8))
    assert down[1][LOAD_KEY] == checkpoint_dir(ROOT, 2, 0)
    # a fresh tuner rebuilds the same generation from the history alone
    assert pbt(fraction=0.25, resample_probability=0.0).suggest(ctx(SMALL, history), range(4, 8)) == gen1


def test_failed_trials_rank_last_so_the_generation_advances() -> None:
    tuner = pbt(fraction=0.25)
    gen0 = tuner.suggest(ctx(SMALL), range(4))
    history = finish(gen0, 0, [1.0, None, 3.0, 2.0])
    history[3] = TrialRecord(3, gen0[3], TrialStatus.USER_CANCELED)
    gen1 = tuner.suggest(ctx(SMALL, history), range(4, 8))
    assert len(gen1) == 4
    exploited = [m for m in range(4) if gen1[m][LOAD_KEY] != checkpoint_dir(ROOT, m, 0)]
    assert exploited == [3]  # ceil(0.25 * 4) = 1: the last of the two failures (ties keep member order)
    assert gen1[3][LOAD_KEY] == checkpoint_dir(ROOT, 2, 0)
    gen2 = tuner.suggest(ctx(SMALL, history + finish(gen1, 4, [1.0, 1.0, 1.0, 1.0])), range(8, 12))
    assert [p[SAVE_KEY] for p in gen2] == [checkpoint_dir(ROOT, m, 2) for m in range(4)]


def test_foreign_records_are_ignored_and_imported_pbt_records_count() -> None:
    tuner = pbt()
    gen0 = tuner.suggest(ctx(SMALL), range(4))
    imported = [TrialRecord(-(i + 1), p, TrialStatus.SUCCEEDED, float(i)) for i, p in enumerate(gen0)]
    foreign = [TrialRecord(0, {"lr": 0.5, "bs": 16}, TrialStatus.SUCCEEDED, 9.0)]
    gen1 = tuner.suggest(ctx(SMALL, imported + foreign), range(1, 5))
    assert [p[SAVE_KEY] for p in gen1] == [checkpoint_dir(ROOT, m, 1) for m in range(4)]
    other_root = PBTTuner(PBTArgs(all_checkpoint_dir="elsewhere", population_size=4))
    assert [p[SAVE_KEY] for p in other_root.suggest(ctx(SMALL, imported), range(1, 3))] == [
        checkpoint_dir("elsewhere", m, 0) for m in range(2)
    ]


def test_perturbation_steps() -> None:
    space = SearchSpace.from_json(EVERY_TYPE)
    base = {"a": "two", "b": 5, "c": 0.5, "d": 5.0, "e": 1e-3, "f": 50.0, "g": 0.0, "h": 0.5, "i": 1.0, "j": 1.0}
    log_range = math.log(1) - math.log(1e-5)
    for seed in range(20):
        moved = perturb(space, base, np.random.default_rng(seed), 0.2, 0.0)
        assert contains(space, moved)
        assert moved["a"] in (1, 3.5) and abs(moved["b"] - 5) == 1
        assert math.isclose(abs(moved["c"] - 0.5), 0.2) and abs(moved["d"] - 5.0) == 2.5
        assert math.isclose(abs(math.log(moved["e"]) - math.log(1e-3)), 0.2 * log_range)
        assert abs(moved["f"] - 50.0) == 1 and math.isclose(abs(moved["g"]), 0.2)
        assert abs(moved["h"] - 0.5) == 0.5 and math.isclose(abs(math.log(moved["i"])), 0.2)
        assert abs(moved["j"] - 1.0) == 0.5
    edge = perturb(space, {**base, "a": 1, "b": 1, "c": 1.0}, np.random.default_rng(0), 0.2, 0.0)
    assert contains(space, edge)  # clipped at the bounds
    resampled = [perturb(space, base, np.random.default_rng(s), 0.2, 1.0) for s in range(5)]
    assert all(contains(space, p) for p in resampled) and len({p["c"] for p in resampled}) == 5


def test_space_and_args_errors() -> None:
    nested = {"layer": {"_type": "choice", "_value": [{"_name": "a"}, {"_name": "b"}]}}
    with pytest.raises(SearchSpaceError, match="nested"):
        pbt().suggest(ctx(nested), [0])
    with pytest.raises(TunerError, match="save_checkpoint_dir"):
        pbt().suggest(ctx({SAVE_KEY: {"_type": "uniform", "_value": [0, 1]}}), [0])
    args = PBTArgs()
    assert (args.optimize_mode, args.all_checkpoint_dir, args.population_size) == ("maximize", None, 10)
    assert (args.factor, args.resample_probability, args.fraction) == (0.2, 0.25, 0.2)
    for bad in ({"fraction": 0.6}, {"population_size": 0}, {"factor": 0}, {"resample_probability": 2}, {"factors": 1}):
        with pytest.raises(ValidationError):
            PBTArgs.model_validate(bad)
    (issue,) = validate_args(PBTTuner, {"factors": 0.2}, "tuner.classArgs")
    assert issue.hint == "did you mean 'factor'?"
    assert resolve("tuner", AlgorithmRef(name="PBT")) is PBTTuner
    assert resolve("tuner", AlgorithmRef(name="PBTTuner")) is PBTTuner
