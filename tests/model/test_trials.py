"""Series: a trial's intermediate values as a tuner sees them, compact and equal to their tuple."""

from __future__ import annotations

import json
import pickle
from array import array
from dataclasses import FrozenInstanceError, replace
from typing import Any

import pytest

from nnix.model.status import TrialStatus
from nnix.model.trials import Series, TrialRecord


def test_a_series_reads_as_the_tuple_of_its_values() -> None:
    values = (0.5, 0.25, 1.0, -3.0)
    s = Series(values)
    assert s == values and values == s and s == Series(list(values)) and s != values[:3] and s != list(values)
    assert len(s) == 4 and list(s) == list(values) and tuple(s) == values and bool(s) and not Series()
    assert s[0] == 0.5 and s[-1] == -3.0 and s[1:3] == (0.25, 1.0) and s[::-2] == (-3.0, 0.25) and s[:0] == ()
    assert sum(s[:2]) == 0.75 and 1.0 in s and s.index(1.0) == 2 and hash(s) == hash(values)
    assert repr(s) == repr(values) and pickle.loads(pickle.dumps(s)) == s
    with pytest.raises(IndexError):
        s[4]
    with pytest.raises(IndexError):
        s[-5]
    assert TrialRecord(0, {}, TrialStatus.SUCCEEDED, 1.0, s) == TrialRecord(0, {}, TrialStatus.SUCCEEDED, 1.0, values)


def test_a_lazy_series_reads_its_values_when_first_asked_and_shares_them() -> None:
    """Series of neighbouring trials share one array, read once, when one of them is first read (never for an
    empty one)."""
    loads: list[int] = []

    def load() -> array[float]:
        loads.append(1)
        return array("d", [1.0, 2.0, 3.0, 4.0, 5.0])

    cached: list[array[float]] = []

    def once() -> array[float]:
        if not cached:
            cached.append(load())
        return cached[0]

    a, b, empty = Series.lazy(once, 0, 2), Series.lazy(once, 2, 5), Series.lazy(once, 5, 5)
    assert len(a) == 2 and len(b) == 3 and empty == () and not loads
    assert b == (3.0, 4.0, 5.0) and b[-1] == 5.0 and b[1:] == (4.0, 5.0) and a == Series([1.0, 2.0])
    assert list(a) == [1.0, 2.0] and len(loads) == 1


def _lazy(values: list[float]) -> Series:
    return Series.lazy(lambda: array("d", [9.0, *values]), 1, 1 + len(values))


@pytest.mark.parametrize("make", [tuple, Series, _lazy], ids=["tuple", "series", "lazy"])
def test_a_records_intermediate_results_do_what_a_tuple_did_for_a_tuner_or_assessor_of_ones_own(make: Any) -> None:
    """A custom tuner or assessor written when ``intermediate`` was a tuple keeps working whatever the manager
    holds (a Series, read lazily from the store): it reads a tuple."""
    r = TrialRecord(3, {"x": 1}, TrialStatus.RUNNING, None, make([0.5, 0.25, 1.0]), "t3")
    assert r.intermediate + (2.0,) == (0.5, 0.25, 1.0, 2.0)  # noqa: RUF005 (concatenation, as custom code does)
    assert (0.0, *r.intermediate) == (0.0, 0.5, 0.25, 1.0) and (0.0,) + r.intermediate == (0.0, 0.5, 0.25, 1.0)  # noqa: RUF005
    assert list(r.intermediate) == [0.5, 0.25, 1.0] and list(r.intermediate[1:]) == [0.25, 1.0]
    assert r.intermediate[:2] == (0.5, 0.25) and r.intermediate[::-1] == (1.0, 0.25, 0.5)  # slicing
    assert len(r.intermediate) == 3 and r.intermediate[0] == 0.5 and r.intermediate[-1] == 1.0  # len, indexing
    assert tuple(r.intermediate) == (0.5, 0.25, 1.0) and r.intermediate == (0.5, 0.25, 1.0)
    assert isinstance(r.intermediate, tuple) and r.intermediate * 2 == (0.5, 0.25, 1.0) * 2
    assert json.dumps(r.intermediate) == "[0.5, 0.25, 1.0]"
    assert json.dumps({"id": r.parameter_id, "curve": r.intermediate}) == '{"id": 3, "curve": [0.5, 0.25, 1.0]}'
    assert r.series == (0.5, 0.25, 1.0) and (make is tuple) == isinstance(r.series, tuple)  # as held: no copy
    assert r == TrialRecord(3, {"x": 1}, TrialStatus.RUNNING, None, (0.5, 0.25, 1.0), "t3")
    assert replace(r, value=1.0).intermediate == (0.5, 0.25, 1.0) and pickle.loads(pickle.dumps(r)) == r
    assert "intermediate=(0.5, 0.25, 1.0)" in repr(r) and TrialRecord(0, {}, TrialStatus.WAITING).intermediate == ()
    with pytest.raises(FrozenInstanceError):
        r.intermediate = ()  # type: ignore[misc]
