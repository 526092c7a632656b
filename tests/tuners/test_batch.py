from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from nnix.core.status import TrialStatus
from nnix.errors import NoMoreTrialsError, SearchSpaceError
from nnix.registry import AlgorithmRef, resolve, validate_args
from nnix.space import Params, SearchSpace
from nnix.testing.tuners import TunerContract
from nnix.tuners.base import Direction, TrialRecord, Tuner, TunerContext
from nnix.tuners.batch import BatchArgs, BatchTuner, batch_entries

SETS: list[dict[str, Any]] = [
    {"lr": 0.1, "bs": 16},
    {"lr": 0.01, "bs": 32},
    {"lr": 0.001, "bs": 64, "opt": "adam"},
    {"lr": 0.0001, "bs": 128},
]
SPACE: dict[str, Any] = {"combination": {"_type": "choice", "_value": SETS}}


def make() -> Tuner:
    return BatchTuner(BatchArgs())


class TestBatchContract(TunerContract):
    tuner_factory = staticmethod(make)
    spaces = (SPACE, {"only": {"_type": "choice", "_value": [{"x": i} for i in range(10)]}})

    def is_valid_proposal(self, space: SearchSpace, params: Params) -> bool:
        return params in batch_entries(space)


def ctx(raw: dict[str, Any], history: tuple[TrialRecord, ...] = ()) -> TunerContext:
    return TunerContext(SearchSpace.from_json(raw), Direction.MAXIMIZE, 0, history)


def records(points: list[dict[str, Any]]) -> tuple[TrialRecord, ...]:
    return tuple(TrialRecord(i, p, TrialStatus.FAILED) for i, p in enumerate(points))


def test_yields_the_sets_in_order_as_whole_parameter_sets_then_stops() -> None:
    tuner = make()
    assert tuner.suggest(ctx(SPACE), [0, 1, 2]) == SETS[:3]
    assert tuner.suggest(ctx(SPACE, records(SETS[:3])), [3, 4]) == SETS[3:]
    with pytest.raises(NoMoreTrialsError, match="all 4 parameter sets"):
        tuner.suggest(ctx(SPACE, records(SETS)), [4])


def test_position_comes_from_the_history_alone() -> None:
    assert make().suggest(ctx(SPACE, records(SETS[:2])), [7]) == [SETS[2]]
    # trials that are not from the list do not use up an entry; out-of-order history is fine
    history = records([{"lr": 5}, SETS[1], SETS[0]])
    assert make().suggest(ctx(SPACE, history), [3, 4, 5]) == SETS[2:]
    assert make().suggest(ctx(SPACE, records([SETS[2]])), [1, 2]) == [SETS[0], SETS[1]]


def test_repeated_sets_are_issued_as_often_as_listed() -> None:
    raw = {"c": {"_type": "choice", "_value": [{"a": 1}, {"a": 2}, {"a": 1}]}}
    tuner = make()
    assert tuner.suggest(ctx(raw, records([{"a": 1}])), [1]) == [{"a": 2}]
    assert tuner.suggest(ctx(raw, records([{"a": 1}, {"a": 2}])), [2]) == [{"a": 1}]
    with pytest.raises(NoMoreTrialsError):
        tuner.suggest(ctx(raw, records([{"a": 1}, {"a": 2}, {"a": 1}])), [3])


def test_proposals_are_copies() -> None:
    raw = {"c": {"_type": "choice", "_value": [{"a": [1]}]}}
    tuner = make()
    (first,) = tuner.suggest(ctx(raw), [0])
    first["a"].append(2)
    assert tuner.suggest(ctx(raw), [0]) == [{"a": [1]}]


@pytest.mark.parametrize(
    ("raw", "path", "fragment"),
    [
        (
            {"a": {"_type": "choice", "_value": [{"x": 1}]}, "b": {"_type": "choice", "_value": [{"x": 1}]}},
            "searchSpace",
            "exactly one parameter",
        ),
        ({}, "searchSpace", "exactly one parameter"),
        ({"a": {"_type": "randint", "_value": [0, 3]}}, "searchSpace.a._type", "needs a choice"),
        ({"a": {"_type": "choice", "_value": [{"x": 1}, 3]}}, "searchSpace.a._value[1]", "complete parameter set"),
    ],
)
def test_invalid_batch_spaces(raw: dict[str, Any], path: str, fragment: str) -> None:
    with pytest.raises(SearchSpaceError) as err:
        make().suggest(ctx(raw), [0])
    assert [i.path for i in err.value.issues] == [path]
    assert fragment in err.value.issues[0].message


def test_args_and_names() -> None:
    with pytest.raises(ValidationError):
        BatchArgs.model_validate({"seed": 1})
    assert validate_args(BatchTuner, {"x": 1}, "tuner.classArgs")[0].message == "unknown argument"
    assert resolve("tuner", AlgorithmRef(name="Batch")) is BatchTuner
    assert resolve("tuner", AlgorithmRef(name="BatchTuner")) is BatchTuner


def test_incremental_batch_proposes_what_a_fresh_tuner_does() -> None:
    """Batch keeps what was issued between asks: at every step, with histories that grow, shrink, repeat a
    set or hold sets that are not in the batch, it proposes exactly what a fresh tuner would."""
    import random

    from nnix.errors import NoMoreTrialsError as Done
    from nnix.model.status import TrialStatus
    from nnix.space import SearchSpace
    from nnix.tuners.base import Direction, History, TrialRecord, TunerContext
    from nnix.tuners.batch import BatchTuner

    sets = [{"lr": v % 4} for v in range(12)] + [{"lr": 9}]
    space = SearchSpace.from_json({"combination": {"_type": "choice", "_value": sets}})
    rnd = random.Random(7)
    kept, lineage = BatchTuner(), object()
    history: list[TrialRecord] = []
    for step in range(60):
        if step % 17 == 16:
            history, lineage = history[: len(history) // 2], object()
        pool = [*sets, {"lr": 42}]
        history = [*history, *(TrialRecord(len(history) + i, dict(rnd.choice(pool)), TrialStatus.SUCCEEDED, 0.0)
                               for i in range(rnd.randint(0, 2)))]
        ids = list(range(1000 + step, 1000 + step + rnd.randint(1, 3)))

        def ask(tuner: BatchTuner, hist: Any, ids: list[int] = ids) -> Any:
            try:
                return tuner.suggest(TunerContext(space, Direction.MAXIMIZE, 1, hist), ids)
            except Done:
                return "done"

        plain = step % 2 == 0
        got = ask(kept, tuple(history) if plain else History(history, lineage))
        assert got == ask(BatchTuner(), tuple(history)), step
