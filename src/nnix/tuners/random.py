"""Random search (NNI ``Random``): independent draws from the search space, without repeats.

The proposal for a parameter id is drawn from ``rng_for(seed, parameter_id)``, so it is a pure
function of the seed, the id and the history. When every top-level parameter is categorical or
quantised, repeats are possible and avoided as NNI does: a draw already in the history (or earlier
in the same batch) is redrawn a few times, then replaced by the first grid point not yet used; when
none is left the space is exhausted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from nnix.space import Params, sample
from nnix.tuners.base import ArgsTuner, IgnoredModeArgs, TunerArgs, TunerContext, rng_for
from nnix.tuners.dedup import RANDOM_DRAWS, Deduplicator

DRAWS_BEFORE_GRID = RANDOM_DRAWS  # random draws per proposal before falling back to the grid


class RandomArgs(IgnoredModeArgs):
    seed: int | None = None  # overrides the experiment's seed when set


class RandomTuner(ArgsTuner[RandomArgs]):
    """Uniform random search with NNI's deduplication."""

    Args: ClassVar[type[TunerArgs]] = RandomArgs

    def __init__(self, args: RandomArgs | None = None) -> None:
        super().__init__(args)
        self._dedup = Deduplicator()

    def suggest(self, ctx: TunerContext, parameter_ids: Sequence[int]) -> list[Params]:
        space = ctx.space
        seed = self.args.seed if self.args.seed is not None else ctx.seed
        self._dedup.begin(ctx)
        if not self._dedup.active:
            return [sample(space, rng_for(seed, pid)) for pid in parameter_ids]
        out: list[Params] = []
        for pid in parameter_ids:
            if not self._dedup.accept(out, self._dedup.first_new(space, seed, pid)):
                break
        return out
