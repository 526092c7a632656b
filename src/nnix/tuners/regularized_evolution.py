"""Regularized evolution (NNI ``RegularizedEvolutionTuner``): ageing evolution on an HPO search space.

The algorithm of Real et al. (2019), re-derived as a pure function of the history:

* **Initial population.** Until ``population_size`` trials exist (finished with a value, running or
  waiting), proposals are random individuals; a trial that ended without a value does not count.
* **Ageing population.** The population is the ``population_size`` *youngest* trials with a final value
  (in creation order): a member leaves when it is the oldest, however good it is. That is the
  "regularization": no individual survives for ever on one lucky evaluation.
* **Tournament.** Each later proposal draws ``sample_size`` distinct members uniformly at random, takes
  the best of them as the parent and proposes a copy with **one** active parameter (a nested choice's
  sub-parameters included) redrawn from its prior.

classArgs as NNI's: ``optimize_mode`` (``maximize``), ``population_size`` (100), ``sample_size`` (25),
plus ``seed``. This differs from ``Evolution``, whose population keeps the winners of two-member
tournaments and loses the losers. Discrete spaces are deduplicated like the other tuners.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from nnix.model.trials import Direction
from nnix.space import Params
from nnix.tuners.base import TunerArgs, TunerContext, rng_for
from nnix.tuners.dedup import Deduplicator
from nnix.tuners.evolution import Breeder

__all__ = ["RegularizedEvolutionArgs", "RegularizedEvolutionTuner"]

_TOURNAMENT = 1


class RegularizedEvolutionArgs(TunerArgs):
    optimize_mode: Literal["maximize", "minimize"] = "maximize"
    population_size: int = Field(default=100, ge=1, le=99999)
    sample_size: int = Field(default=25, ge=1, le=99999)
    seed: int | None = None

    @model_validator(mode="after")
    def _sample_fits(self) -> RegularizedEvolutionArgs:
        if self.sample_size > self.population_size:
            raise ValueError(
                f"sample_size ({self.sample_size}) must not exceed population_size ({self.population_size})"
            )
        return self


def select_parent(population: Sequence[tuple[int, float]], sample_size: int, rng: np.random.Generator) -> int:
    """The history position of the best of ``sample_size`` distinct members drawn uniformly."""
    k = min(sample_size, len(population))
    picks = rng.choice(len(population), size=k, replace=False)
    best = max(picks, key=lambda i: (population[int(i)][1], -int(i)))
    return population[int(best)][0]


class RegularizedEvolutionTuner(Breeder):
    """Ageing evolution with tournament selection; see the module docstring."""

    Args: ClassVar[type[TunerArgs]] = RegularizedEvolutionArgs

    def __init__(self, args: RegularizedEvolutionArgs | None = None) -> None:
        self.args = args or RegularizedEvolutionArgs()
        self._dedup = Deduplicator()

    def suggest(self, ctx: TunerContext, parameter_ids: Sequence[int]) -> list[Params]:
        if not parameter_ids:
            return []
        size = self.args.population_size
        seed = self.args.seed if self.args.seed is not None else ctx.seed
        sign = 1.0 if ctx.direction is Direction.MAXIMIZE else -1.0
        scored: list[tuple[int, float]] = []
        live = 0
        for position, r in enumerate(ctx.history):
            if r.value is not None and math.isfinite(r.value):
                scored.append((position, sign * float(r.value)))
                live += 1
            elif not r.status.is_terminal:
                live += 1
        population = scored[-size:]  # the youngest members: the oldest age out
        self._dedup.begin(ctx)
        out: list[Params] = []
        for pid in parameter_ids:
            if live < size or not population:
                params = self._random(ctx.space, seed, pid)
            else:
                position = select_parent(population, self.args.sample_size, rng_for(seed, pid, _TOURNAMENT))
                params = self._evolve(ctx.space, ctx.history[position].params, seed, pid)
            if not self._dedup.accept(out, params):
                break
            live += 1
        return out
