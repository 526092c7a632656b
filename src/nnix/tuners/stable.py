"""Choices that do not hang on the last bits of a floating-point result.

The same tuner, seed and history must propose the same parameters on any machine. But the last bits of
a computed score are not the same everywhere: OpenBLAS picks its matrix kernels by CPU, LAPACK and
numpy's SIMD loops follow, so a Gaussian-process prediction or a log density differs from one machine
to another by about 1e-15 to 1e-10 of its size. A tuner that picks the best of several scores then
picks differently as soon as two of them are that close (two L-BFGS-B refinements that end on one
optimum are), and from there its proposals drift apart. So the tuners:

* **rank scores on a grid** (:func:`rank_keys`, :func:`order_desc`, :func:`argmax`): a score counts by
  its first ``digits`` significant digits of the scores' spread, ``SCORE_DIGITS`` (6) for what a model
  computes (acquisitions, likelihoods, densities), ``OBS_DIGITS`` (9) for observed results; equal keys
  are ties, broken by position;
* **round the unit-cube points they propose** to ``UNIT_DECIMALS`` (9) decimals (:func:`settle`), so
  that a point found by a continuous optimiser is the same point on every machine unless it lies within
  the machines' difference of a rounding boundary, and the history the next proposals see is the same.

A difference below the grids vanishes at the next choice instead of growing; one that straddles a grid
line is as small as the grid. The grids are far finer than any difference that matters to a search: one
millionth of the spread of the scores, one billionth of a parameter's range.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["OBS_DIGITS", "SCORE_DIGITS", "UNIT_DECIMALS", "argmax", "order_desc", "rank_keys", "settle"]

SCORE_DIGITS = 6  # significant digits (of the spread) a model's score is ranked by
OBS_DIGITS = 9  # ... and an observed result
UNIT_DECIMALS = 9  # decimals of a proposed point in the unit cube

Array = NDArray[np.float64]


def rank_keys(values: ArrayLike, digits: int = SCORE_DIGITS) -> Array:
    """``values`` on a grid of ``10**-digits`` of their spread (a power of ten), for ranking.

    NaN ranks as -inf (lowest); infinities keep their place; when every finite value is equal they all tie.
    """
    v = np.asarray(values, dtype=float)
    keys: Array = np.where(np.isnan(v), -np.inf, v)
    finite = np.isfinite(v)
    if not finite.any():
        return keys
    fv = v[finite]
    top, bottom = float(fv.max()), float(fv.min())
    span = top - bottom
    if not math.isfinite(span):
        span = max(abs(top), abs(bottom))
    if span <= 0.0:
        keys[finite] = 0.0
        return keys
    step = 10.0 ** (math.floor(math.log10(span)) + 1 - digits)
    keys[finite] = np.round(fv / step)
    return keys


def order_desc(values: ArrayLike, digits: int = SCORE_DIGITS) -> NDArray[np.int64]:
    """Indices of ``values`` from the highest key to the lowest (:func:`rank_keys`), ties by position."""
    order: NDArray[np.int64] = np.argsort(-rank_keys(values, digits), kind="stable")
    return order


def argmax(values: ArrayLike, digits: int = SCORE_DIGITS) -> int:
    """The first index of the highest key (:func:`rank_keys`)."""
    return int(np.argmax(rank_keys(values, digits)))


def settle(points: Array, decimals: int = UNIT_DECIMALS) -> Array:
    """Unit-cube points rounded to ``decimals`` decimals: the points a tuner proposes."""
    out: Array = np.round(points, decimals)
    return out
