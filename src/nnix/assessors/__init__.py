"""Assessors: pure algorithms that decide whether a running trial is worth continuing. The classes below are
imported on first use (importing this package imports none of them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nnix.lazy import lazy_exports

if TYPE_CHECKING:
    from nnix.assessors.base import Assessor as Assessor
    from nnix.assessors.base import AssessorContext as AssessorContext
    from nnix.assessors.base import Decision as Decision
    from nnix.assessors.curvefitting import CurvefittingAssessor as CurvefittingAssessor
    from nnix.assessors.medianstop import MedianstopAssessor as MedianstopAssessor

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "nnix.assessors.base": ("Assessor", "AssessorContext", "Decision"),
        "nnix.assessors.curvefitting": ("CurvefittingAssessor",),
        "nnix.assessors.medianstop": ("MedianstopAssessor",),
    },
)
