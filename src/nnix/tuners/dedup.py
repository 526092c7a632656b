"""Deduplication for model-based and evolutionary tuners (NNI's ``Deduplicator`` semantics).

When every top-level parameter of the space is categorical or quantised, two proposals may
coincide; then a proposal is checked against every point of the history (whatever its status) and
the proposals made earlier in the same batch. A tuner first retries its own method a few times
(:meth:`Deduplicator.is_new`), and when that keeps repeating, takes the first grid point not yet used
(:meth:`Deduplicator.next_unseen`); when none is left the space is exhausted. With a continuous
top-level parameter, coincidences are taken as impossible and nothing is checked (as NNI).

A cache only: the answers are a pure function of the history handed to :meth:`Deduplicator.begin`.
"""

from __future__ import annotations

import copy

from nnix.space import Params, SearchSpace, duplicates_possible, key
from nnix.tuners.base import TunerContext
from nnix.tuners.gridsearch import GridCursor, SeenKeys

__all__ = ["Deduplicator"]


class Deduplicator:
    """The keys seen in a history plus those taken in the current batch, and a grid to fall back on."""

    def __init__(self) -> None:
        self._seen = SeenKeys()
        self._cursor: GridCursor | None = None
        self._taken: set[str] = set()
        self._space: SearchSpace | None = None
        self._possible = False
        self.active = False

    def begin(self, ctx: TunerContext) -> None:
        """Start a batch for ``ctx``: catch up with its history, forget the previous batch."""
        space = ctx.space
        self._taken = set()
        if self._space is not space:
            self._space = space
            self._possible = space.is_empty or duplicates_possible(space)
        self.active = self._possible
        if not self.active:
            return
        extends = self._seen.update(ctx.history)
        if self._cursor is None or (self._cursor.space is not space and self._cursor.space != space):
            self._cursor = GridCursor(space)
        elif not extends:
            self._cursor.reset()

    def is_new(self, params: Params) -> bool:
        """Whether ``params`` is neither in the history nor taken in this batch (always, if inactive)."""
        if not self.active:
            return True
        k = key(params)
        return k not in self._seen and k not in self._taken

    def take(self, params: Params) -> None:
        """Record ``params`` as proposed in this batch."""
        if self.active:
            self._taken.add(key(params))

    def next_unseen(self) -> Params | None:
        """The first grid point neither seen nor taken (not yet taken: call :meth:`take`); None if none."""
        if self._cursor is None:
            return None
        found = self._cursor.next_unseen(self._seen, self._taken)
        return None if found is None else copy.deepcopy(found[1])
