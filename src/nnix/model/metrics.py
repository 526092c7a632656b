"""Metric values: NNI's scalar extraction."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def scalar_value(value: Any) -> float | None:
    """NNI's metric extraction: a number, or a dict's numeric ``default``; None otherwise."""
    if isinstance(value, Mapping):
        value = value.get("default")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)
