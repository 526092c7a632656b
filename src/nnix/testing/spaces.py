"""Search spaces (NNI JSON form) and objective functions shared by the test suite and by users' tests.

Each space is a fresh-looking module constant: treat it as read-only (copy it before changing it).
"""

from __future__ import annotations

import math
from typing import Any

UNIT: dict[str, Any] = {"x": {"_type": "uniform", "_value": [0, 1]}}
"""One uniform parameter on [0, 1]: the space of experiments whose tuner does not matter."""

SMALL: dict[str, Any] = {
    "c": {"_type": "choice", "_value": ["a", "b"]},
    "r": {"_type": "randint", "_value": [0, 3]},
}
"""Six points: small enough to be exhausted."""

CONTINUOUS: dict[str, Any] = {
    "lr": {"_type": "loguniform", "_value": [1e-4, 1e-1]},
    "bs": {"_type": "choice", "_value": [16, 32, 64]},
}

EVERY_TYPE: dict[str, Any] = {
    "a": {"_type": "choice", "_value": [1, "two", 3.5]},
    "b": {"_type": "randint", "_value": [1, 10]},
    "c": {"_type": "uniform", "_value": [0, 1]},
    "d": {"_type": "quniform", "_value": [0, 10, 2.5]},
    "e": {"_type": "loguniform", "_value": [1e-5, 1]},
    "f": {"_type": "qloguniform", "_value": [1, 100, 1]},
    "g": {"_type": "normal", "_value": [0, 1]},
    "h": {"_type": "qnormal", "_value": [0, 1, 0.5]},
    "i": {"_type": "lognormal", "_value": [0, 1]},
    "j": {"_type": "qlognormal", "_value": [0, 1, 0.5]},
}
"""One parameter of each NNI type."""

NESTED: dict[str, Any] = {
    "layer": {
        "_type": "choice",
        "_value": [
            {"_name": "Empty"},
            {"_name": "Conv", "k": {"_type": "choice", "_value": [1, 3]}, "lr": {"_type": "uniform", "_value": [0, 1]}},
            {"_name": "Dense", "units": {"_type": "quniform", "_value": [8, 32, 8]}},
        ],
    },
    "act": {"_type": "choice", "_value": ["relu", "tanh"]},
}
"""A choice of nested branches (NNI's ``_name`` form), one of them empty."""

QUADRATIC: dict[str, Any] = {"x": {"_type": "uniform", "_value": [-10, 10]}}

SQUARE: dict[str, Any] = {
    "x": {"_type": "uniform", "_value": [-5, 10]},
    "y": {"_type": "uniform", "_value": [0, 15]},
}
"""Branin's domain (see :func:`branin`)."""

DISCRETE: dict[str, Any] = {
    "c": {"_type": "choice", "_value": [16, 32, 64]},
    "r": {"_type": "randint", "_value": [0, 3]},
}

NUMERIC: dict[str, Any] = {
    "c": {"_type": "choice", "_value": [4, 1, 2.5]},
    "r": {"_type": "randint", "_value": [1, 10]},
    "u": {"_type": "uniform", "_value": [-1, 1]},
    "q": {"_type": "quniform", "_value": [2, 10, 5]},
    "l": {"_type": "loguniform", "_value": [1e-4, 1]},
    "ql": {"_type": "qloguniform", "_value": [1, 100, 1]},
}
"""Numeric parameters only (what Bayesian-optimisation tuners model), one of each kind."""


def branin(p: dict[str, Any]) -> float:
    """The Branin function on :data:`SQUARE` (minimum 0.397887, reached at three points)."""
    x, y = p["x"], p["y"]
    return float(
        (y - 5.1 / (4 * math.pi**2) * x**2 + 5 / math.pi * x - 6) ** 2 + 10 * (1 - 1 / (8 * math.pi)) * math.cos(x) + 10
    )


__all__ = [
    "CONTINUOUS", "DISCRETE", "EVERY_TYPE", "NESTED", "NUMERIC", "QUADRATIC", "SMALL", "SQUARE", "UNIT", "branin",
]

# What SMAC's ConfigSpace encoding must handle: mixed-type choices, a one-value randint, log and quantised ranges.
SMAC_TYPES: dict[str, Any] = {
    "c": {"_type": "choice", "_value": ["relu", 3, {"a": 1}]},
    "r": {"_type": "randint", "_value": [1, 10]},
    "u": {"_type": "uniform", "_value": [-1, 1]},
    "q": {"_type": "quniform", "_value": [2, 10, 5]},
    "l": {"_type": "loguniform", "_value": [1e-4, 1]},
    "one": {"_type": "randint", "_value": [7, 8]},
}
