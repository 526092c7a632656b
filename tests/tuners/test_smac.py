"""SMAC tests. The wrapper needs the optional SMAC3 package (``pip install 'nnix[smac]'``); the
tests that drive SMAC itself are skipped, loudly, when it is not installed."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

import pytest
from pydantic import ValidationError

from nnix.core.status import TrialStatus
from nnix.errors import SearchSpaceError, TunerError
from nnix.registry import AlgorithmRef, resolve, validate_args
from nnix.space import SearchSpace, contains, key
from nnix.testing.spaces import SMAC_TYPES
from nnix.testing.tuners import TunerContract
from nnix.tuners.base import Direction, TrialRecord, TunerContext
from nnix.tuners.smac import SMACArgs, SMACTuner, _dims, _from_smac, _to_smac

HAVE_SMAC = importlib.util.find_spec("smac") is not None
needs_smac = pytest.mark.skipif(
    not HAVE_SMAC,
    reason="SKIPPED: SMAC3 is not installed; the SMAC tuner is untested here. Run `pip install 'nnix[smac]'`.",
)

SMAC_SPACE = SMAC_TYPES
DISCRETE: dict[str, Any] = {
    "c": {"_type": "choice", "_value": ["a", "b", "c"]},
    "r": {"_type": "randint", "_value": [0, 3]},
}
LINE: dict[str, Any] = {"x": {"_type": "uniform", "_value": [-5, 5]}}


def ctx(raw: dict[str, Any], history: list[TrialRecord] | tuple[TrialRecord, ...] = (), seed: int = 1) -> TunerContext:
    return TunerContext(SearchSpace.from_json(raw), Direction.MINIMIZE, seed, tuple(history))


@needs_smac
class TestSMACContract(TunerContract):
    # rounds * batch_size stays inside SMAC's initial design (10 configurations per parameter): fast
    tuner_factory = staticmethod(lambda: SMACTuner(SMACArgs(config_dedup=True)))
    spaces = (SMAC_SPACE, DISCRETE)
    rounds = 4


@needs_smac
def test_model_phase_moves_towards_the_optimum() -> None:
    tuner = SMACTuner(SMACArgs(optimize_mode="minimize"))
    history: list[TrialRecord] = []
    while len(history) < 14:  # 10 initial-design points, then the random forest
        ids = list(range(len(history), len(history) + 2))
        for pid, p in zip(ids, tuner.suggest(ctx(LINE, history), ids), strict=True):
            history.append(TrialRecord(pid, p, TrialStatus.SUCCEEDED, (p["x"] - 2.0) ** 2))
    initial = sorted(abs(r.params["x"] - 2.0) for r in history[:10])
    later = [abs(r.params["x"] - 2.0) for r in history[10:]]
    assert min(later) < initial[len(initial) // 2]


@needs_smac
def test_failed_and_running_configs_are_not_proposed_again() -> None:
    tuner = SMACTuner(SMACArgs())
    first = tuner.suggest(ctx(DISCRETE), range(4))
    history = [
        TrialRecord(0, first[0], TrialStatus.FAILED),
        TrialRecord(1, first[1], TrialStatus.RUNNING),
        TrialRecord(2, first[2], TrialStatus.SUCCEEDED, 0.0),
        TrialRecord(3, first[3], TrialStatus.USER_CANCELED),
    ]
    later = tuner.suggest(ctx(DISCRETE, history), range(4, 8))
    assert not {key(p) for p in later} & {key(p) for p in first}
    assert later == SMACTuner(SMACArgs()).suggest(ctx(DISCRETE, history), range(4, 8))  # rebuilt from history


def test_missing_smac_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "smac", None)  # makes `import smac` fail, installed or not
    with pytest.raises(TunerError) as info:
        SMACTuner(SMACArgs())
    assert "nnix[smac]" in str(info.value)


def test_space_conversion_round_trips() -> None:
    space = SearchSpace.from_json(SMAC_SPACE)
    dims = _dims(space)
    assert [d.fixed for d in dims] == [False, False, False, False, False, True]
    values = {"c": "2", "r": 9, "u": 0.25, "q": 2, "l": 1e-3}
    params = _from_smac(dims, values)
    assert params == {"c": {"a": 1}, "r": 9, "u": 0.25, "q": 10.0, "l": 1e-3, "one": 7}
    assert contains(space, params)
    assert _to_smac(dims, params) == values
    assert _from_smac(dims, {**values, "q": 0})["q"] == 2.0 and _from_smac(dims, {**values, "q": 1})["q"] == 5.0
    assert _to_smac(dims, {**params, "c": "nope"}) is None


def test_unsupported_types() -> None:
    for raw, match in (
        ({"x": {"_type": "qloguniform", "_value": [1, 10, 1]}}, "'qloguniform'"),
        ({"x": {"_type": "normal", "_value": [0, 1]}}, "'normal'"),
        ({"x": {"_type": "choice", "_value": [{"_name": "a"}]}}, "nested"),
    ):
        with pytest.raises(SearchSpaceError, match=match):
            _dims(SearchSpace.from_json(raw))


def test_args() -> None:
    assert (SMACArgs().optimize_mode, SMACArgs().config_dedup) == ("maximize", False)
    with pytest.raises(ValidationError):
        SMACArgs.model_validate({"config_dedup": "sometimes"})
    (issue,) = validate_args(SMACTuner, {"optimise_mode": "minimize"}, "tuner.classArgs")
    assert issue.hint == "did you mean 'optimize_mode'?"
    assert resolve("tuner", AlgorithmRef(name="SMAC")) is SMACTuner
    assert SMACTuner.heavy is True


def test_smac_learns_from_a_capped_history() -> None:
    """Beyond HISTORY_CAP observations SMAC is told the best half of the cap and the most recent others, in order."""
    from nnix.tuners.smac import _capped

    told = {f"c{i}": float((i * 37) % 101) for i in range(300)}  # config -> cost, in history order
    kept = _capped(told, 200)
    assert len(kept) == 200 and list(kept) == [c for c in told if c in kept]
    best = sorted(told, key=lambda c: told[c])[:100]
    assert set(best) <= set(kept)
    rest = [c for c in told if c not in best]
    assert set(rest[-100:]) <= set(kept)
    assert _capped(dict(list(told.items())[:150]), 200) == dict(list(told.items())[:150])


@needs_smac
def test_the_initial_design_is_drawn_once_per_space_and_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    from smac.initial_design.sobol_design import SobolInitialDesign

    calls: list[int] = []
    original = SobolInitialDesign._select_configurations

    def counted(self: Any) -> Any:
        calls.append(1)
        return original(self)

    monkeypatch.setattr(SobolInitialDesign, "_select_configurations", counted)
    tuner = SMACTuner(SMACArgs())
    first = tuner.suggest(ctx(LINE), [0, 1])
    history = [TrialRecord(i, p, TrialStatus.SUCCEEDED, p["x"]) for i, p in enumerate(first)]
    reused = tuner.suggest(ctx(LINE, history), [2, 3])
    assert len(calls) == 1  # the second suggest rebuilt the design from the kept vectors
    assert reused == SMACTuner(SMACArgs()).suggest(ctx(LINE, history), [2, 3])  # as a fresh tuner proposes
    assert len(calls) == 2  # the fresh tuner drew its own
    tuner.suggest(ctx(LINE, history, seed=2), [2])
    assert len(calls) == 3  # another seed, another design
