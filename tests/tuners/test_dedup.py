"""The helpers of the deduplicating tuners: the lazy grid index, and per-suggestion work that does not
grow with the history or the grid (counted, not timed)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from nnix.errors import NoMoreTrialsError
from nnix.model.status import TrialStatus
from nnix.space import SearchSpace, grid, key
from nnix.tuners import dedup
from nnix.tuners.base import Direction, History, TrialRecord, TunerContext
from nnix.tuners.dedup import GridIndex, SeenKeys
from nnix.tuners.gridsearch import GridSearchTuner
from nnix.tuners.random import RandomTuner

CATEGORICAL: dict[str, dict[str, Any]] = {
    "flat": {
        "c": {"_type": "choice", "_value": ["relu", 3, {"a": 1}, True, None]},
        "r": {"_type": "randint", "_value": [-2, 5]},
        "one": {"_type": "choice", "_value": [7]},
    },
    "nested": {
        "opt": {
            "_type": "choice",
            "_value": [
                {"_name": "sgd", "lr": {"_type": "choice", "_value": [0.1, 0.01]}},
                {
                    "_name": "adam",
                    "beta": {"_type": "randint", "_value": [0, 3]},
                    "k": {"_type": "choice", "_value": ["a", "b"]},
                },
                {"_name": "none"},
            ],
        },
        "x": {"_type": "randint", "_value": [0, 2]},
    },
}
BIG = {"a": {"_type": "choice", "_value": list(range(100))}, "b": {"_type": "randint", "_value": [0, 1000]}}


@pytest.mark.parametrize("name", sorted(CATEGORICAL))
def test_grid_index_is_the_grid_in_its_order_and_ends(name: str) -> None:
    space = SearchSpace.from_json(CATEGORICAL[name])
    index = GridIndex.of(space)
    assert index is not None
    expected = list(grid(space))
    assert len(index) == len(expected)
    got = [index.point(i) for i in range(len(index))]
    assert got == expected
    assert [key(p) for p in got] == [key(p) for p in expected]  # types too (True is not 1)
    with pytest.raises(IndexError):
        index.point(len(index))
    with pytest.raises(IndexError):
        index.point(-1)


def test_grid_index_leaves_epoch_grids_and_repeated_options_to_the_walker() -> None:
    for raw in (
        {"u": {"_type": "uniform", "_value": [0, 1]}},
        {"q": {"_type": "quniform", "_value": [0, 10, 2]}},
        {"c": {"_type": "choice", "_value": [1, 2, 1]}},
    ):
        assert GridIndex.of(SearchSpace.from_json(raw)) is None


def test_a_100k_grid_is_never_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    """GridSearch over a 100,000-point grid computes only the points it proposes (by index), and never
    walks the grid."""
    space = SearchSpace.from_json(BIG)
    built: list[int] = []
    original = GridIndex.point

    def counting(self: GridIndex, i: int) -> Any:
        built.append(i)
        return original(self, i)

    def no_walk(_space: SearchSpace) -> Any:
        raise AssertionError("the grid was walked")

    monkeypatch.setattr(GridIndex, "point", counting)
    monkeypatch.setattr(dedup, "grid", no_walk)
    index = GridIndex.of(space)
    assert index is not None and len(index) == 100_000
    assert index.point(99_999) == {"a": 99, "b": 999} and index.point(1234) == {"a": 1, "b": 234}
    built.clear()
    tuner = GridSearchTuner()
    got = tuner.suggest(TunerContext(space, Direction.MINIMIZE, 0), [0, 1, 2])
    assert got == [{"a": 0, "b": 0}, {"a": 0, "b": 1}, {"a": 0, "b": 2}]
    assert built == [0, 1, 2]


def test_grid_search_exhausts_an_indexed_grid_in_order() -> None:
    space = SearchSpace.from_json(CATEGORICAL["nested"])
    tuner = GridSearchTuner()
    history: list[TrialRecord] = []
    proposed: list[Any] = []
    while True:
        try:
            got = tuner.suggest(TunerContext(space, Direction.MINIMIZE, 0, tuple(history)), [len(history)] * 2)
        except NoMoreTrialsError:
            break
        for p in got:
            history.append(TrialRecord(len(history), p, TrialStatus.SUCCEEDED, 0.0))
        proposed.extend(got)
    assert proposed == list(grid(space))


def _count_keys(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]

    def counting(params: Any) -> str:
        calls[0] += 1
        return key(params)

    monkeypatch.setattr(dedup, "key", counting)
    return calls


def _work_per_suggestion(tuner_factory: Any, raw: dict[str, Any], n: int, calls: list[int]) -> list[int]:
    """key() calls of each of 5 suggestions made by one tuner after a history of ``n``, growing by one."""
    space = SearchSpace.from_json(raw)
    rng = np.random.default_rng(n)
    history = (
        [TrialRecord(i, p, TrialStatus.SUCCEEDED, 0.0) for i, p in enumerate(itertools.islice(grid(space), n))]
        if isinstance(tuner_factory(), GridSearchTuner)
        else [
            TrialRecord(i, {"a": int(a), "b": int(b)}, TrialStatus.SUCCEEDED, 0.0)
            for i, (a, b) in enumerate(rng.integers(0, 100, size=(n, 2)))
        ]
    )
    tuner = tuner_factory()
    tuner.suggest(TunerContext(space, Direction.MINIMIZE, 0, tuple(history)), [n])  # catches up
    out = []
    for k in range(5):
        calls[0] = 0
        got = tuner.suggest(TunerContext(space, Direction.MINIMIZE, 0, tuple(history)), [n + 1 + k])
        out.append(calls[0])
        history.append(TrialRecord(n + 1 + k, got[0], TrialStatus.SUCCEEDED, 0.0))
    return out


@pytest.mark.parametrize("factory", [GridSearchTuner, RandomTuner])
def test_work_per_suggestion_does_not_grow_with_the_history(factory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once caught up, a suggestion keys the one new record and its own candidates: the same work after
    a history of 100 as after 5,000 (grid: 100,000 points; random: a discrete space of 100,000)."""
    calls = _count_keys(monkeypatch)
    raw = (
        BIG
        if factory is GridSearchTuner
        else {
            "a": {"_type": "choice", "_value": list(range(100))},
            "b": {"_type": "randint", "_value": [0, 1000]},
        }
    )
    short = _work_per_suggestion(factory, raw, 100, calls)
    long = _work_per_suggestion(factory, raw, 5000, calls)
    assert max(long) <= 4 and max(short) <= 4  # the new record, a candidate, taking it (+ a redraw)
    assert sum(long) <= sum(short) + 2


def test_seen_keys_recount_when_the_history_is_not_an_extension() -> None:
    seen = dedup.SeenKeys()
    a, b = ({"x": 1}, {"x": 2})
    first = (TrialRecord(0, a, TrialStatus.RUNNING), TrialRecord(1, b, TrialStatus.RUNNING))
    assert seen.update(first)
    # the same ids and parameters, rebuilt records with new statuses: still an extension
    rebuilt = (TrialRecord(0, dict(a), TrialStatus.SUCCEEDED, 1.0), TrialRecord(1, b, TrialStatus.FAILED))
    assert seen.update(rebuilt) and seen.counts == {key(a): 1, key(b): 1}
    # a different parameter set at position 0: counted afresh
    assert not seen.update((TrialRecord(0, b, TrialStatus.SUCCEEDED, 1.0),))
    assert seen.counts == {key(b): 1}


def test_seen_keys_take_a_history_of_one_lineage_at_its_word(monkeypatch: pytest.MonkeyPatch) -> None:
    """A longer History of the same lineage costs a key per new record (the old ones are not compared); a new
    lineage or a plain sequence is counted afresh or compared, so the counts stay those of the history."""
    from nnix.tuners.base import History

    records = [TrialRecord(i, {"a": i % 3}, TrialStatus.SUCCEEDED, 0.0) for i in range(50)]
    calls: list[Any] = []

    def counted(params: Any) -> str:
        calls.append(params)
        return key(params)

    monkeypatch.setattr(dedup, "key", counted)
    seen, lineage = dedup.SeenKeys(), object()
    assert not seen.update(History(records[:40], lineage))
    calls.clear()
    assert seen.update(History(records, lineage))
    assert len(calls) == 10 and seen.counts == dedup.SeenKeys().counts + _counts(records)
    assert not seen.update(History(records[:45], object()))  # a new lineage: counted afresh
    assert seen.counts == _counts(records[:45])
    assert not seen.update(tuple(records[:20]))  # a plain sequence after a History: counted afresh
    assert seen.counts == _counts(records[:20])
    assert seen.update(tuple(records[:30]))
    assert seen.counts == _counts(records[:30])


def _counts(records: list[TrialRecord]) -> Any:
    from collections import Counter

    return Counter(key(r.params) for r in records)


def test_seen_keys_take_a_longer_view_of_the_same_lineage_at_its_word() -> None:
    records = [TrialRecord(i, {"x": i}, TrialStatus.SUCCEEDED, float(i)) for i in range(50)]
    lineage = object()
    seen = SeenKeys()
    assert not seen.update(History.view(records[:40], lineage))
    assert seen.update(History.view(records, lineage)) and len(seen.added) == 10
    assert not seen.update(History.view(records[:45], object()))  # a new lineage: counted afresh
