"""The tuner protocol.

Invariants every tuner keeps (checked by ``nnix.testing.tuners.TunerContract``):

* **Pure.** No I/O, no globals, no wall clock. Randomness only from :func:`rng_for`.
* **Rebuildable.** Everything a tuner knows comes from ``ctx.history``; a fresh instance given
  the same context proposes the same parameters. Resume therefore needs no checkpoint.
* **In bounds.** Every proposal is a valid point of ``ctx.space``.
* ``suggest`` may return fewer proposals than asked, even none: that means "not now" (e.g. a
  Hyperband round waits for its trials); the manager asks again when something changes (a trial
  ends, a metric arrives). It raises :class:`NoMoreTrialsError` when it will never propose
  again. Returning nothing while no trial is active also ends the experiment (nothing could
  change its mind).
* Running trials are in ``ctx.history`` (status RUNNING, no value): model-based tuners use them
  to avoid proposing near-duplicates (constant liar or equivalent).
* A tuner with ``heavy = True`` (the optional ability :class:`Heavy`) is called in a worker thread so it never
  blocks the loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Generic, Literal, Protocol, TypeVar, cast, runtime_checkable

from nnix.model.args import TunerArgs
from nnix.model.history import History, ReplacedLog
from nnix.model.metrics import scalar_value
from nnix.model.trials import Direction, Params, TrialRecord

__all__ = [
    "ArgsTuner", "Direction", "Heavy", "History", "IgnoredModeArgs", "Params", "ReplacedLog", "TrialRecord", "Tuner",
    "TunerArgs", "TunerContext", "rng_for", "scalar_value",
]

if TYPE_CHECKING:
    import numpy as np

    from nnix.space import SearchSpace

@dataclass(frozen=True)
class TunerContext:
    """Everything a tuner may read. ``history`` holds every trial created so far, oldest first."""

    space: SearchSpace
    direction: Direction
    seed: int
    history: Sequence[TrialRecord] = field(default_factory=tuple)


def rng_for(seed: int, parameter_id: int, stream: int = 0) -> np.random.Generator:
    """The random generator for one proposal: a pure function of (seed, parameter id, stream)."""
    import numpy as np  # here: the tuners that draw nothing (Grid, Batch) never import numpy

    return np.random.default_rng([seed & 0xFFFFFFFF, parameter_id, stream])


@runtime_checkable
class Tuner(Protocol):
    """A tuner proposes parameters. It is built as ``cls(args)`` where ``args`` is its ``Args`` model."""

    Args: ClassVar[type[TunerArgs]]

    def suggest(self, ctx: TunerContext, parameter_ids: Sequence[int]) -> list[Params]:
        """Propose up to ``len(parameter_ids)`` parameter sets, one per id, in order."""
        ...


@runtime_checkable
class Heavy(Protocol):
    """The optional ability of a tuner (or assessor) to say how costly its calls are: ``heavy`` True, the manager
    calls it in a worker thread (a class attribute, ``heavy: ClassVar[bool] = True``)."""

    heavy: ClassVar[bool]


class IgnoredModeArgs(TunerArgs):
    """classArgs of a tuner that reads no result (Random, Grid): ``optimize_mode`` accepted as NNI does, and
    ignored."""

    optimize_mode: Literal["maximize", "minimize"] | None = None


A = TypeVar("A", bound=TunerArgs)


class ArgsTuner(Generic[A]):
    """A tuner holding its classArgs: built as ``cls(args)``, ``cls()`` meaning the defaults of ``cls.Args``."""

    Args: ClassVar[type[TunerArgs]]

    def __init__(self, args: A | None = None) -> None:
        self.args: A = args if args is not None else cast(A, type(self).Args())
