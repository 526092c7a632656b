"""Evolution (NNI ``Evolution``): tournament selection and one-parameter mutation.

NNI's algorithm, re-derived as a pure function of the history:

* **Initial population.** While fewer than ``population_size`` trials are finished-with-a-value or
  still running/waiting, proposals are random individuals. A trial that failed or was cancelled
  without a value no longer counts, so it is replaced by a fresh random individual (as NNI does).
* **Generations.** Afterwards each proposal runs a tournament: two distinct members of the
  population are drawn at random, the worse one leaves the population, and a copy of the better one
  is proposed with **one** parameter redrawn from its prior. The parameter is drawn among those
  active in the winner (a nested choice's sub-parameters included); redrawing a nested choice
  redraws its whole option.
* **Population.** Every record with a final value joins the population when it appears in the
  history (imported results, with negative parameter ids, included); the losers of the tournaments
  of earlier proposals leave it. Replaying the history in order gives the population, so a fresh
  tuner rebuilds it (the replay sees each past tournament with the results known now).
* **Not now.** With ``population_size`` or more trials running or waiting, or no finished trial to
  select from while some are still running, ``suggest`` returns fewer proposals (possibly none)
  and the manager asks again when a trial ends, as NNI defers requests.

classArgs: ``optimize_mode`` (``maximize``), ``population_size`` (32), ``seed`` (overrides the
experiment's seed). Unlike NNI, discrete spaces are deduplicated (:mod:`nnix.tuners.dedup`): a
repeated mutation is redrawn a few times, then random draws, then the first unused grid point.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from nnix.model.trials import Direction, TrialRecord
from nnix.space import Param, Params, SearchSpace, contains
from nnix.tuners.base import TunerArgs, TunerContext, rng_for
from nnix.tuners.dedup import REDRAWS, Deduplicator, extends_records

__all__ = ["EvolutionArgs", "EvolutionTuner"]

_TOURNAMENT = 1  # random stream of a proposal's tournament
_MUTATION = 2  # random streams of its mutations start here


class EvolutionArgs(TunerArgs):
    optimize_mode: Literal["maximize", "minimize"] = "maximize"
    population_size: int = Field(default=32, ge=1, le=99999)
    seed: int | None = None  # overrides the experiment's seed when set


def _tournament(population: list[tuple[int, float]], draws: tuple[float, float]) -> int:
    """Pick two distinct members with the uniform ``draws``, remove the worse, return the history
    position of the better."""
    size = len(population)
    if size == 1:
        return population[0][0]
    i = min(int(draws[0] * size), size - 1)
    j = min(int(draws[1] * (size - 1)), size - 2)
    j += j >= i
    winner, loser = (i, j) if population[i][1] >= population[j][1] else (j, i)
    position = population[winner][0]
    del population[loser]
    return position


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``1 == 1.0`` but ``True != 1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def _mutate(space: SearchSpace, params: Params, rng: np.random.Generator) -> Params:
    """A copy of ``params`` with one active parameter (nested-aware) redrawn from its prior."""
    out = copy.deepcopy(params)
    slots: list[tuple[dict[str, Any], Param]] = []

    def walk(level: Sequence[Param], values: dict[str, Any]) -> None:
        for p in level:
            slots.append((values, p))
            if p.nested:
                value = values[p.name]
                for b, name in enumerate(p.choices):
                    if _same(value["_name"], name):
                        walk(p.branches[b], value)
                        break

    walk(space.params, out)
    if not slots:
        return out
    values, p = slots[int(rng.integers(len(slots)))]
    values[p.name] = p.sample(rng)
    return out


class Breeder:
    """New proposals for the evolution tuners: random ones, and mutations of a parent, each checked against
    what was proposed before (``_dedup``); ``None`` when a discrete space has nothing new left."""

    _dedup: Deduplicator

    def _random(self, space: SearchSpace, seed: int, pid: int) -> Params | None:
        return self._dedup.first_new(space, seed, pid)

    def _evolve(self, space: SearchSpace, parent: Any, seed: int, pid: int) -> Params | None:
        if not isinstance(parent, Mapping) or not contains(space, parent):
            return self._random(space, seed, pid)  # a foreign parent (e.g. the space was updated)
        for stream in range(_MUTATION, _MUTATION + 1 + REDRAWS):
            params = _mutate(space, dict(parent), rng_for(seed, pid, stream))
            if self._dedup.is_new(params):
                return params
        return self._random(space, seed, pid)


@dataclass
class _Checkpoint:
    """The replay state after ``prefix`` (records that were all terminal), for ``settings`` (seed, sign,
    population size). A cache only: used when a later history starts with the same records."""

    settings: tuple[int, float, int]
    prefix: tuple[TrialRecord, ...]
    population: list[tuple[int, float]]
    live: int
    pending: int
    end: int


class EvolutionTuner(Breeder):
    """NNI's evolution tuner; see the module docstring."""

    Args: ClassVar[type[TunerArgs]] = EvolutionArgs

    def __init__(self, args: EvolutionArgs | None = None) -> None:
        self.args = args or EvolutionArgs()
        self._dedup = Deduplicator()
        self._draws: dict[tuple[int, int], tuple[float, float]] = {}  # cache of pure (seed, id) -> draws
        self._checkpoint: _Checkpoint | None = None  # the replay up to the first open record of a history

    def _resume(
        self, history: Sequence[TrialRecord], settings: tuple[int, float, int]
    ) -> tuple[list[tuple[int, float]], int, int, int]:
        """(population, live, pending, position) to replay ``history`` from: the checkpoint of an earlier
        call when its records are where they were in ``history``, else the start."""
        c = self._checkpoint
        n = len(c.prefix) if c is not None else 0
        if (
            c is not None
            and c.settings == settings
            and len(history) >= n
            and (n == 0 or history[n - 1] is c.prefix[-1])
            and extends_records(c.prefix, history)
        ):
            return list(c.population), c.live, c.pending, n
        return [], 0, 0, 0

    def _tournament_draws(self, seed: int, pid: int) -> tuple[float, float]:
        found = self._draws.get((seed, pid))
        if found is None:
            u = rng_for(seed, pid, _TOURNAMENT).random(2)
            found = (float(u[0]), float(u[1]))
            self._draws[(seed, pid)] = found
        return found

    def suggest(self, ctx: TunerContext, parameter_ids: Sequence[int]) -> list[Params]:
        if not parameter_ids:
            return []
        space = ctx.space
        size = self.args.population_size
        seed = self.args.seed if self.args.seed is not None else ctx.seed
        sign = 1.0 if ctx.direction is Direction.MAXIMIZE else -1.0
        # replay: every finished record joins the population; each evolved proposal's tournament
        # (one made once `size` trials were live) removed a loser
        history = ctx.history
        settings = (seed, sign, size)
        population, live, pending, start = self._resume(history, settings)
        checkpoint: _Checkpoint | None = None
        for position in range(start, len(history)):
            r = history[position]
            if checkpoint is None and not r.status.is_terminal:
                checkpoint = _Checkpoint(settings, (), list(population), live, pending, position)
            if r.parameter_id >= 0 and live >= size and population:
                _tournament(population, self._tournament_draws(seed, r.parameter_id))
            if r.value is not None and math.isfinite(r.value):
                population.append((position, sign * float(r.value)))
                live += 1
            elif not r.status.is_terminal:
                live += 1
                pending += 1
        if checkpoint is None:
            checkpoint = _Checkpoint(settings, (), list(population), live, pending, len(history))
        if checkpoint.end != start or self._checkpoint is None:
            checkpoint.prefix = tuple(history[: checkpoint.end])
            self._checkpoint = checkpoint

        self._dedup.begin(ctx)
        out: list[Params] = []
        for pid in parameter_ids:
            if pending >= size:
                break  # not now: as many trials running as the population holds
            if live < size:
                params = self._random(space, seed, pid)
            elif not population:
                if pending:
                    break  # not now: nothing finished to select from yet
                params = self._random(space, seed, pid)
            else:
                position = _tournament(population, self._tournament_draws(seed, pid))
                params = self._evolve(space, ctx.history[position].params, seed, pid)
            if not self._dedup.accept(out, params):
                break
            live += 1
            pending += 1
        return out
