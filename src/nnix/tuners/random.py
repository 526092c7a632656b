"""Random search (NNI ``Random``): independent draws from the search space, without repeats.

The proposal for a parameter id is drawn from ``rng_for(seed, parameter_id)``, so it is a pure
function of the seed, the id and the history. When every top-level parameter is categorical or
quantised, repeats are possible and avoided as NNI does: a draw already in the history (or earlier
in the same batch) is redrawn a few times, then replaced by the first grid point not yet used; when
none is left the space is exhausted.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import ClassVar, Literal

from nnix.errors import NoMoreTrialsError
from nnix.space import Params, duplicates_possible, key, sample
from nnix.tuners.base import TunerArgs, TunerContext, rng_for
from nnix.tuners.gridsearch import GridCursor, SeenKeys

DRAWS_BEFORE_GRID = 8  # random draws per proposal before falling back to the grid


class RandomArgs(TunerArgs):
    seed: int | None = None  # overrides the experiment's seed when set
    optimize_mode: Literal["maximize", "minimize"] | None = None  # accepted as NNI does, and ignored


class RandomTuner:
    """Uniform random search with NNI's deduplication."""

    Args: ClassVar[type[TunerArgs]] = RandomArgs

    def __init__(self, args: RandomArgs | None = None) -> None:
        self.args = args or RandomArgs()
        self._seen = SeenKeys()
        self._cursor: GridCursor | None = None

    def suggest(self, ctx: TunerContext, parameter_ids: Sequence[int]) -> list[Params]:
        space = ctx.space
        seed = self.args.seed if self.args.seed is not None else ctx.seed
        if not space.is_empty and not duplicates_possible(space):
            return [sample(space, rng_for(seed, pid)) for pid in parameter_ids]
        extends = self._seen.update(ctx.history)
        if self._cursor is None or (self._cursor.space is not space and self._cursor.space != space):
            self._cursor = GridCursor(space)
        elif not extends:
            self._cursor.reset()
        out: list[Params] = []
        taken: set[str] = set()
        for pid in parameter_ids:
            rng = rng_for(seed, pid)
            chosen: tuple[str, Params] | None = None
            for _ in range(DRAWS_BEFORE_GRID):
                params = sample(space, rng)
                k = key(params)
                if k not in self._seen and k not in taken:
                    chosen = (k, params)
                    break
            if chosen is None:
                found = self._cursor.next_unseen(self._seen, taken)
                if found is None:
                    break
                chosen = (found[0], copy.deepcopy(found[1]))
            taken.add(chosen[0])
            out.append(chosen[1])
        if parameter_ids and not out:
            raise NoMoreTrialsError(
                "search space fully explored",
                "every point of this discrete search space has been tried; "
                "widen the search space or stop the experiment",
            )
        return out
