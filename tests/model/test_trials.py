"""Series: a trial's intermediate values as a tuner sees them, compact and equal to their tuple."""

from __future__ import annotations

import pickle
from array import array

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
