from __future__ import annotations

import copy
import math
import statistics
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from nnix.core.status import TrialStatus
from nnix.errors import NoMoreTrialsError
from nnix.registry import AlgorithmRef, resolve, validate_args
from nnix.space import SearchSpace, contains, grid, key, sample
from nnix.testing.spaces import CONTINUOUS, EVERY_TYPE, NESTED, QUADRATIC, SMALL
from nnix.testing.tuners import TunerContract
from nnix.tuners.base import Direction, History, ReplacedLog, TrialRecord, Tuner, TunerContext
from nnix.tuners.random import RandomTuner
from nnix.tuners.tpe import HyperoptArgs, TpeArgs, TpeLegacyTuner, TpeTuner, TpeTunerArgs

NESTED_CONTINUOUS: dict[str, Any] = {**NESTED, "x": {"_type": "normal", "_value": [0, 2]}}


def fast_tpe() -> Tuner:
    """A TPE that models after 4 observations, so the contract's short drives exercise the model."""
    return TpeTuner(TpeTunerArgs(tpe_args=TpeArgs(n_startup_jobs=4)))


class TestTpeContract(TunerContract):
    tuner_factory = staticmethod(fast_tpe)
    spaces = (SMALL, CONTINUOUS, EVERY_TYPE, NESTED, NESTED_CONTINUOUS, {})
    rounds = 8


class TestTpeDefaultsContract(TunerContract):
    tuner_factory = staticmethod(lambda: TpeTuner())
    spaces = (SMALL, EVERY_TYPE, NESTED)


class TestTpeLegacyContract(TunerContract):
    tuner_factory = staticmethod(lambda: TpeLegacyTuner(HyperoptArgs(parallel_optimize=True)))
    spaces = (SMALL, EVERY_TYPE, NESTED_CONTINUOUS)
    rounds = 9


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
        value = f(params)
        best = min(best, value)
        history.append(TrialRecord(pid, params, TrialStatus.SUCCEEDED, value))
    return best


def test_beats_random_on_a_quadratic() -> None:
    def f(p: dict[str, Any]) -> float:
        return float((p["x"] - 3.3) ** 2)

    tpe = [optimise(TpeTuner(), QUADRATIC, f, 60, seed) for seed in range(5)]
    rnd = [optimise(RandomTuner(), QUADRATIC, f, 60, seed) for seed in range(5)]
    assert statistics.median(tpe) < statistics.median(rnd) / 5
    assert statistics.median(tpe) < 1e-3


def test_maximize_and_minimize_go_opposite_ways() -> None:
    history = [TrialRecord(i, {"x": x}, TrialStatus.SUCCEEDED, x) for i, x in enumerate(range(-10, 10))]
    low = TpeTuner().suggest(ctx(QUADRATIC, history, direction=Direction.MINIMIZE), range(100, 110))
    high = TpeTuner().suggest(ctx(QUADRATIC, history, direction=Direction.MAXIMIZE), range(100, 110))
    assert statistics.median(p["x"] for p in low) < -5
    assert statistics.median(p["x"] for p in high) > 5


def test_metric_zero_is_data_and_failures_add_nothing() -> None:
    good = [TrialRecord(i, {"x": 8.0 + i / 10}, TrialStatus.SUCCEEDED, 0.0) for i in range(3)]
    rest = [TrialRecord(10 + i, {"x": -9.0 + i}, TrialStatus.SUCCEEDED, 1.0 + i) for i in range(12)]
    failed = [TrialRecord(30 + i, {"x": -5.0 + i / 10}, TrialStatus.FAILED) for i in range(30)]
    proposals = TpeTuner().suggest(ctx(QUADRATIC, good + rest + failed), range(100, 108))
    assert statistics.median(p["x"] for p in proposals) > 6  # near the zeros, not near the failures
    # failed and cancelled trials without a value change nothing
    assert TpeTuner().suggest(ctx(QUADRATIC, good + rest), range(100, 108)) == proposals


def test_imported_records_are_used() -> None:
    imported = [TrialRecord(-(i + 1), {"x": -9.5 + i}, TrialStatus.SUCCEEDED, (i - 1.0) ** 2) for i in range(15)]
    proposals = TpeTuner().suggest(ctx(QUADRATIC, imported), range(5))
    assert statistics.median(p["x"] for p in proposals) < -6  # around the imported optimum at -8.5
    assert proposals != TpeTuner().suggest(ctx(QUADRATIC), range(5))


def test_constant_liar_spreads_a_batch() -> None:
    history = [TrialRecord(i, {"x": -10 + i}, TrialStatus.SUCCEEDED, abs(i - 10.0)) for i in range(20)]
    running = [TrialRecord(20 + i, {"x": 0.1 * i}, TrialStatus.RUNNING) for i in range(3)]
    liar = TpeTuner(TpeTunerArgs(tpe_args=TpeArgs(constant_liar_type="worst")))
    plain = TpeTuner(TpeTunerArgs(tpe_args=TpeArgs(constant_liar_type=None)))
    with_running = liar.suggest(ctx(QUADRATIC, history + running), range(30, 36))
    assert with_running != liar.suggest(ctx(QUADRATIC, history), range(30, 36))  # running trials matter
    assert plain.suggest(ctx(QUADRATIC, history + running), range(30, 36)) == plain.suggest(
        ctx(QUADRATIC, history), range(30, 36)
    )
    # the liar pushes later proposals of the batch away from the earlier ones
    xs = [p["x"] for p in with_running]
    assert len({round(x, 6) for x in xs}) == len(xs)
    assert min(abs(x - r.params["x"]) for x in xs for r in running) > 1e-6


def test_batch_proposals_are_liars_for_each_other() -> None:
    history = [TrialRecord(i, {"x": -10 + i}, TrialStatus.SUCCEEDED, abs(i - 10.0)) for i in range(20)]
    tuner = TpeTuner(TpeTunerArgs(tpe_args=TpeArgs(constant_liar_type="worst")))
    first, second = tuner.suggest(ctx(QUADRATIC, history), [50, 51])
    pending = TrialRecord(50, first, TrialStatus.WAITING)
    assert TpeTuner(TpeTunerArgs(tpe_args=TpeArgs(constant_liar_type="worst"))).suggest(
        ctx(QUADRATIC, [*history, pending]), [51]
    ) == [second]


def test_discrete_space_is_exhausted_without_repeats() -> None:
    tuner = TpeTuner(TpeTunerArgs(tpe_args=TpeArgs(n_startup_jobs=1)))
    history: list[TrialRecord] = []
    for pid in range(6):
        (params,) = tuner.suggest(ctx(SMALL, history), [pid])
        history.append(TrialRecord(pid, params, TrialStatus.SUCCEEDED, float(pid % 3)))
    assert {key(r.params) for r in history} == {key(p) for p in grid(SearchSpace.from_json(SMALL))}
    with pytest.raises(NoMoreTrialsError):
        tuner.suggest(ctx(SMALL, history), [6])


def test_nested_proposals_use_their_branch_history() -> None:
    space = SearchSpace.from_json(NESTED)
    history = []
    for i in range(30):
        if i % 3 == 0:
            params: dict[str, Any] = {"layer": {"_name": "Conv", "k": 3, "lr": 0.9 - i / 100}, "act": "tanh"}
            value = 0.01 * i
        else:
            params = {"layer": {"_name": "Empty"}, "act": "relu"}
            value = 5.0 + i
        history.append(TrialRecord(i, params, TrialStatus.SUCCEEDED, value))
    proposals = TpeTuner().suggest(ctx(NESTED, history), range(100, 110))
    assert all(contains(space, p) for p in proposals)
    conv = [p for p in proposals if p["layer"]["_name"] == "Conv"]
    assert len(conv) >= 6
    assert statistics.median(p["layer"]["lr"] for p in conv) > 0.5


def test_seed_argument_overrides_the_experiment_seed() -> None:
    fixed = TpeTuner(TpeTunerArgs(seed=7))
    assert fixed.suggest(ctx(CONTINUOUS, seed=1), [0, 1]) == fixed.suggest(ctx(CONTINUOUS, seed=2), [0, 1])
    assert TpeTuner().suggest(ctx(CONTINUOUS, seed=1), [0, 1]) != TpeTuner().suggest(ctx(CONTINUOUS, seed=2), [0, 1])


def test_args() -> None:
    args = TpeTunerArgs.model_validate({"optimize_mode": "maximize", "tpe_args": {"gamma": 0.2, "n_startup_jobs": 5}})
    assert args.tpe_args.gamma == 0.2 and args.tpe_args.n_ei_candidates == 24
    assert TpeTunerArgs().optimize_mode == "minimize"
    assert TpeTunerArgs.model_validate({"tpe_args": {"constant_liar_type": None}}).tpe_args.constant_liar_type is None
    for bad in ({"gamma": 1.5}, {"gamma": 0}, {"n_startup_jobs": -1}, {"constant_liar_type": "min"}, {"gama": 0.2}):
        with pytest.raises(ValidationError):
            TpeTunerArgs.model_validate({"tpe_args": bad})
    (issue,) = validate_args(TpeTuner, {"tpe_args": {"n_startup_job": 3}}, "tuner.classArgs")
    assert issue.path == "tuner.classArgs.tpe_args.n_startup_job"
    (issue,) = validate_args(TpeTuner, {"tpe_args": {"gamma": 2}}, "tuner.classArgs")
    assert issue.path == "tuner.classArgs.tpe_args.gamma"
    assert validate_args(TpeLegacyTuner, {"parallel_optimize": True, "constant_liar_type": "mean"}, "t") == []
    assert validate_args(TpeLegacyTuner, {"tpe_args": {}}, "t")


def test_registered_names() -> None:
    assert resolve("tuner", AlgorithmRef(name="TPE")) is TpeTuner
    assert resolve("tuner", AlgorithmRef(name="TPE_legacy")) is TpeLegacyTuner


def test_a_long_lived_tuner_proposes_what_a_fresh_one_does() -> None:
    """The per-record cache keeps up with records replaced (a trial finishing), a history list changed
    in place, equal but new parameter sets, and a history that is not an extension of the last one."""
    space = SearchSpace.from_json(EVERY_TYPE)
    rng = np.random.default_rng(0)
    history: list[TrialRecord] = []
    for i in range(40):
        params = sample(space, rng)
        if i % 5 == 4:
            history.append(TrialRecord(i, params, TrialStatus.RUNNING))
        else:
            history.append(TrialRecord(i, params, TrialStatus.SUCCEEDED, float(rng.random())))

    def fresh(h: list[TrialRecord]) -> list[Any]:
        return fast_tpe().suggest(TunerContext(space, Direction.MINIMIZE, 1, tuple(h)), [100, 101])

    tuner = fast_tpe()

    def live(h: list[TrialRecord] | tuple[TrialRecord, ...]) -> list[Any]:
        return tuner.suggest(TunerContext(space, Direction.MINIMIZE, 1, h), [100, 101])

    for n in (10, 25, 40):
        assert live(tuple(history[:n])) == fresh(history[:n])
    same_list = list(history)
    assert live(same_list) == fresh(history)
    same_list[4] = TrialRecord(4, history[4].params, TrialStatus.SUCCEEDED, -1.0)  # a running trial finished
    assert live(same_list) == fresh(same_list)
    renewed = [replace_params(r, copy.deepcopy(r.params)) for r in same_list]
    renewed[7] = TrialRecord(7, history[8].params, TrialStatus.SUCCEEDED, 0.5)  # a different parameter set
    assert live(renewed) == fresh(renewed)
    assert live(renewed[::-1]) == fresh(renewed[::-1])
    assert live(renewed[:20]) == fresh(renewed[:20])


def replace_params(record: TrialRecord, params: dict[str, Any]) -> TrialRecord:
    return TrialRecord(record.parameter_id, params, record.status, record.value)


# --------------------------------------------------------------------------------------------------
# long histories: the bad mixture stands on a bounded window of observations


def _branin_history(n: int, seed: int = 0) -> list[TrialRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for i, (x, y) in enumerate(zip(rng.uniform(-5, 10, n), rng.uniform(0, 15, n), strict=True)):
        value = (y - 5.1 / (4 * math.pi**2) * x * x + 5 / math.pi * x - 6) ** 2 + 10 * math.cos(x)
        out.append(TrialRecord(i, {"x": float(x), "y": float(y)}, TrialStatus.SUCCEEDED, float(value)))
    return out


BRANIN_SPACE = {"x": {"_type": "uniform", "_value": [-5, 10]}, "y": {"_type": "uniform", "_value": [0, 15]}}


def test_bad_window_keeps_the_newest_and_one_per_stratum_with_the_whole_weight() -> None:
    from nnix.tuners.tpe import _bad_window, _forgetting_weights

    for n, lf, window in ((5000, 25, 1024), (1025, 25, 1024), (3001, 2000, 64), (700, 1, 7)):
        idx = np.arange(n, dtype=np.int64) * 3 + 1  # positions in a longer history
        picked, w = _bad_window(idx, lf, window)
        full = _forgetting_weights(n, lf)
        assert picked.size == w.size == window
        assert np.all(np.diff(picked) > 0) and np.isin(picked, idx).all()  # history order, no repeats
        assert np.array_equal(picked[-(window // 2) :], idx[-(window // 2) :])  # the newest, as they are
        assert np.allclose(w[-(window // 2) :], full[-(window // 2) :])  # with their own weights
        assert math.isclose(float(w.sum()), float(full.sum()), rel_tol=1e-9)  # the whole weight
        assert np.all(w > 0)


def test_below_the_window_proposals_are_those_of_the_unwindowed_model() -> None:
    from dataclasses import replace

    space = SearchSpace.from_json(BRANIN_SPACE)
    history = tuple(_branin_history(900))  # fewer than 1024 bad observations
    ctx = TunerContext(space, Direction.MINIMIZE, 3, history)
    windowed = TpeTuner()
    unwindowed = TpeTuner()
    unwindowed.settings = replace(unwindowed.settings, bad_window=10**9)
    assert windowed.settings.bad_window == 1024
    assert windowed.suggest(ctx, [900, 901]) == unwindowed.suggest(ctx, [900, 901])


def test_at_long_histories_the_bad_mixture_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The work of a proposal follows the window, not the history: the bad mixture never holds more
    than ``bad_window`` observations (plus the prior kernel), whatever the history's length."""
    from nnix.tuners import tpe

    sizes: list[int] = []
    original = tpe._Mixture.__init__

    def counting(self: Any, block: Any, obs: Any, *args: Any) -> None:
        sizes.append(int(obs.shape[0]))
        original(self, block, obs, *args)

    monkeypatch.setattr(tpe._Mixture, "__init__", counting)
    space = SearchSpace.from_json(BRANIN_SPACE)
    for n in (1500, 4000):
        sizes.clear()
        got = TpeTuner().suggest(TunerContext(space, Direction.MINIMIZE, 1, tuple(_branin_history(n))), [n])
        assert contains(space, got[0])
        assert len(sizes) == 2 and max(sizes) == 1024  # the good mixture, and the bad one at the window


class _CountingView(History):
    """A History view that counts the records read from it (one by one, by slice or by iteration)."""

    __slots__ = ("reads",)
    reads: int

    @classmethod
    def of(cls, records: list[TrialRecord], lineage: object, log: ReplacedLog) -> _CountingView:
        view = History.view(records, lineage, log)
        self = cls.__new__(cls)
        self._items, self._n, self.lineage = view._items, view._n, view.lineage
        self._replaced, self._mark = view._replaced, view._mark
        self.reads = 0
        return self

    def __getitem__(self, index: Any) -> Any:
        got = super().__getitem__(index)
        self.reads += len(got) if isinstance(index, slice) else 1
        return got

    def __iter__(self) -> Any:
        self.reads += len(self)
        return super().__iter__()


@pytest.mark.parametrize("space_json", [BRANIN_SPACE, NESTED], ids=["branin", "nested"])
def test_a_lineage_with_a_log_of_replaced_records_is_read_in_o_new_and_proposes_as_a_fresh_tuner(
    space_json: dict[str, Any],
) -> None:
    """The manager hands views of one lineage with its log of replaced records: the tuner reads only the new
    and the replaced records (not the whole history per ask), and proposes exactly what a fresh tuner given
    the whole history proposes, above the bad window too (trials that end, fail, change value meanwhile)."""
    space = SearchSpace.from_json(space_json)
    rng = np.random.default_rng(5)
    records: list[TrialRecord] = []
    for i in range(1300):
        u, params = rng.random(), sample(space, rng)
        status = TrialStatus.FAILED if u < 0.05 else TrialStatus.RUNNING if u < 0.1 else TrialStatus.SUCCEEDED
        records.append(TrialRecord(i, params, status, float(rng.normal()) if status is TrialStatus.SUCCEEDED else None))
    lineage, log = object(), ReplacedLog()
    tuner = TpeTuner()
    tuner.suggest(TunerContext(space, Direction.MINIMIZE, 3, _CountingView.of(records, lineage, log)), [9999])
    for ask in range(4):
        changed = [j for j, r in enumerate(records) if r.status is TrialStatus.RUNNING][: 3 + ask]
        changed.append(int(rng.integers(len(records))))
        for j in changed:  # running trials end (one fails), a finished one gets another value
            r = records[j]
            status = TrialStatus.FAILED if j == changed[0] else TrialStatus.SUCCEEDED
            records[j] = TrialRecord(r.parameter_id, r.params, status, None if j == changed[0] else -float(ask))
            log.append(j)
        if ask == 2:
            log.trim(1)  # the log dropped entries the tuner has not seen: it reads the facts of every record
        ids = [len(records), len(records) + 1]
        view = _CountingView.of(records, lineage, log)
        got = tuner.suggest(TunerContext(space, Direction.MINIMIZE, 3, view), ids)
        new = 2 if ask else 0  # the proposals of the previous ask: read for their params, facts (and dedup's keys)
        if ask != 2:
            assert view.reads <= 3 * new + len(changed)  # neither the old records nor a copy of them read
        assert got == TpeTuner().suggest(TunerContext(space, Direction.MINIMIZE, 3, tuple(records)), ids)
        records.extend(TrialRecord(i, p, TrialStatus.RUNNING) for i, p in zip(ids, got, strict=True))
