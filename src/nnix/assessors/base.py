"""The assessor protocol.

An assessor is called each time a running trial's intermediate results grow (only the contiguous
prefix of sequence numbers counts, as NNI). It sees that trial and every other trial's record
and answers :class:`Decision`. Like tuners, assessors are pure: no I/O, no clock, state
rebuildable from the history they are given. A BAD decision makes the manager stop the trial as
EARLY_STOPPED; the tuner then sees it in its history with that status.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import ClassVar, Protocol, runtime_checkable

from nnix.model.args import TunerArgs
from nnix.model.trials import Direction, TrialRecord


class Decision(str, Enum):
    GOOD = "Good"
    BAD = "Bad"


@dataclass(frozen=True)
class AssessorContext:
    direction: Direction
    history: Sequence[TrialRecord] = field(default_factory=tuple)  # every trial, incl. the assessed one


@runtime_checkable
class Assessor(Protocol):
    Args: ClassVar[type[TunerArgs]]

    def assess(self, ctx: AssessorContext, trial: TrialRecord) -> Decision:
        """``trial.intermediate`` holds its scalar intermediate results, in sequence order."""
        ...
