"""Grid search (NNI ``GridSearch``): the points of :func:`nnix.space.grid`, in order, skipping seen ones.

The grid is walked by :class:`~nnix.tuners.dedup.GridCursor` (by index, :class:`~nnix.tuners.dedup.GridIndex`,
where every parameter is categorical), the history's keys kept by :class:`~nnix.tuners.dedup.SeenKeys`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from nnix.errors import FieldIssue, NoMoreTrialsError, SearchSpaceError
from nnix.space import Params
from nnix.tuners.base import ArgsTuner, IgnoredModeArgs, TunerArgs, TunerContext
from nnix.tuners.dedup import Deduplicator, GridCursor, GridIndex, SeenKeys

__all__ = ["GridCursor", "GridIndex", "GridSearchArgs", "GridSearchTuner", "SeenKeys"]


class GridSearchArgs(IgnoredModeArgs):
    """GridSearch takes only ``optimize_mode`` (ignored)."""


class GridSearchTuner(ArgsTuner[GridSearchArgs]):
    """Proposes the grid points (see :func:`nnix.space.grid`) that no trial in the history has used."""

    Args: ClassVar[type[TunerArgs]] = GridSearchArgs

    def __init__(self, args: GridSearchArgs | None = None) -> None:
        super().__init__(args)
        self._dedup = Deduplicator()

    def suggest(self, ctx: TunerContext, parameter_ids: Sequence[int]) -> list[Params]:
        space = ctx.space
        if space.is_empty:
            raise SearchSpaceError(
                [
                    FieldIssue(
                        "searchSpace",
                        "GridSearch needs at least one parameter",
                        'add one, e.g. {"lr": {"_type": "choice", "_value": [0.1, 0.01]}}',
                    )
                ]
            )
        self._dedup.begin(ctx, always=True)
        out: list[Params] = []
        for _ in parameter_ids:
            found = self._dedup.next_unseen()
            if found is None:
                break
            self._dedup.take(found)
            out.append(found)
        if parameter_ids and not out:
            raise NoMoreTrialsError(
                "search space fully explored",
                "every grid point has been tried; widen the search space or stop the experiment",
            )
        return out
