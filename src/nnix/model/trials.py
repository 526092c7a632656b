"""What a tuner or assessor may know about one trial, and which way the objective goes."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from nnix.model.status import TrialStatus

__all__ = ["Direction", "Params", "TrialRecord"]

Params = dict[str, Any]


class Direction(str, Enum):
    MAXIMIZE = "maximize"
    MINIMIZE = "minimize"


@dataclass(frozen=True)
class TrialRecord:
    """What a tuner may know about one trial."""

    parameter_id: int
    params: Params
    status: TrialStatus
    value: float | None = None  # scalar final result (``default`` of a dict), None if none yet
    intermediate: tuple[float, ...] = ()
    trial_id: str | None = None  # None for imported results
