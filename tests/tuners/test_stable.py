from __future__ import annotations

import math

import numpy as np

from nnix.tuners.stable import OBS_DIGITS, argmax, order_desc, rank_keys, settle


def test_scores_that_differ_in_the_last_bits_tie_and_keep_their_order() -> None:
    # two L-BFGS-B refinements that end on one optimum: equal but for the CPU's rounding
    values = np.array([0.5, 0.7312, 0.7312 * (1 + 1e-13), 0.7312 * (1 - 1e-13)])
    assert order_desc(values).tolist() == [1, 2, 3, 0]
    assert argmax(values) == 1
    assert argmax(values[::-1]) == 0  # whichever comes first, not whichever is a bit larger
    assert np.argmax(values) == 2  # what a plain argmax would choose


def test_the_grid_follows_the_spread_not_the_size() -> None:
    # an acquisition offset by a large mean still ranks its differences
    values = 1000.0 + np.array([0.0, 3e-4, 1e-4, 2e-4])
    assert order_desc(values).tolist() == [1, 3, 2, 0]
    # differences below a millionth of the spread are ties
    assert order_desc(np.array([0.0, 1.0, 1.0 + 1e-8, 1.0 - 1e-8])).tolist() == [1, 2, 3, 0]
    # observed results are ranked finer
    assert order_desc(np.array([0.0, 1.0, 1.0 + 1e-8]), OBS_DIGITS).tolist() == [2, 1, 0]
    # tiny scores are ranked among themselves
    assert order_desc(np.array([1e-30, 3e-30, 2e-30])).tolist() == [1, 2, 0]


def test_special_values() -> None:
    assert order_desc(np.array([1.0, math.nan, math.inf, -math.inf, 2.0])).tolist() == [2, 4, 0, 1, 3]  # NaN as -inf
    assert order_desc(np.array([3.0, 3.0, 3.0])).tolist() == [0, 1, 2]
    assert order_desc(np.array([math.nan, math.nan])).tolist() == [0, 1]
    assert order_desc(np.array([])).tolist() == []
    assert argmax([-1e308, 1e308, 0.0]) == 1  # a spread past the largest float
    keys = rank_keys(np.array([0.1, 0.2]))
    assert keys.dtype == np.float64 and keys.shape == (2,)


def test_settle_rounds_unit_points_to_nine_decimals() -> None:
    points = np.array([[0.1234567891234, 1.0], [0.5 + 3e-13, 0.0]])
    assert settle(points).tolist() == [[0.123456789, 1.0], [0.5, 0.0]]
    assert settle(points + 1e-14).tolist() == settle(points).tolist()
