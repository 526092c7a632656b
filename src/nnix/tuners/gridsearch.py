"""Grid search (NNI ``GridSearch``): the points of :func:`nnix.space.grid`, in order, skipping seen ones.

Also home of the two helpers deduplicating tuners share: :class:`SeenKeys` (the keys of a history,
kept up to date incrementally) and :class:`GridCursor` (the first grid point not yet seen).
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Container, Iterator, Sequence
from typing import ClassVar, Literal

from nnix.errors import FieldIssue, NoMoreTrialsError, SearchSpaceError
from nnix.model.trials import TrialRecord
from nnix.space import Params, SearchSpace, grid, key
from nnix.tuners.base import TunerArgs, TunerContext


class SeenKeys:
    """How often each :func:`~nnix.space.key` occurs in a history, maintained incrementally.

    A cache only: :meth:`update` gives the same counts as a fresh instance would, whatever history
    it is handed; it just does less work when the history merely grew since the last call.
    """

    def __init__(self) -> None:
        self._records: list[TrialRecord] = []
        self.counts: Counter[str] = Counter()

    def update(self, history: Sequence[TrialRecord]) -> bool:
        """Catch up with ``history``. True if it extends the previous one (the counts only grew)."""
        extends = len(history) >= len(self._records) and all(
            old is new or (old.parameter_id == new.parameter_id and old.params == new.params)
            for old, new in zip(self._records, history, strict=False)
        )
        if not extends:
            self._records = []
            self.counts = Counter()
        for record in history[len(self._records) :]:
            self._records.append(record)
            self.counts[key(record.params)] += 1
        return extends

    def __contains__(self, k: object) -> bool:
        return k in self.counts


class GridCursor:
    """The first points of ``grid(space)`` not yet seen, without re-walking the grid every time.

    Correct as long as the ``seen`` set handed to :meth:`next_unseen` only grows between calls; call
    :meth:`reset` when it did not (see :meth:`SeenKeys.update`).
    """

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self.reset()

    def reset(self) -> None:
        self._points: Iterator[Params] = grid(self.space)
        # points taken from the iterator that were not seen when taken, in grid order
        self._pending: list[tuple[str, Params]] = []

    def next_unseen(self, seen: Container[str], taken: Container[str] = ()) -> tuple[str, Params] | None:
        """``(key, point)`` of the first grid point in neither ``seen`` nor ``taken``; None if none is left.

        ``seen`` must only grow between calls; ``taken`` (e.g. the keys proposed earlier in the same
        batch) may be anything.
        """
        self._pending = [(k, p) for k, p in self._pending if k not in seen]
        for k, p in self._pending:
            if k not in taken:
                return k, p
        for p in self._points:
            k = key(p)
            if k in seen:
                continue
            self._pending.append((k, p))
            if k not in taken:
                return k, p
        return None


class GridSearchArgs(TunerArgs):
    optimize_mode: Literal["maximize", "minimize"] | None = None  # accepted as NNI does, and ignored


class GridSearchTuner:
    """Proposes the grid points (see :func:`nnix.space.grid`) that no trial in the history has used."""

    Args: ClassVar[type[TunerArgs]] = GridSearchArgs

    def __init__(self, args: GridSearchArgs | None = None) -> None:
        self.args = args or GridSearchArgs()
        self._seen = SeenKeys()
        self._cursor: GridCursor | None = None

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
        extends = self._seen.update(ctx.history)
        if self._cursor is None or (self._cursor.space is not space and self._cursor.space != space):
            self._cursor = GridCursor(space)
        elif not extends:
            self._cursor.reset()
        out: list[Params] = []
        taken: set[str] = set()
        for _ in parameter_ids:
            found = self._cursor.next_unseen(self._seen, taken)
            if found is None:
                break
            taken.add(found[0])
            out.append(copy.deepcopy(found[1]))
        if parameter_ids and not out:
            raise NoMoreTrialsError(
                "search space fully explored",
                "every grid point has been tried; widen the search space or stop the experiment",
            )
        return out
