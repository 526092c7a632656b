"""Simulated-annealing search (NNI ``Anneal``, hyperopt's annealing idea, re-implemented).

Each proposal starts from a good past trial and samples around it in a neighbourhood that shrinks
as the parameter gathers observations:

* The finished trials are ranked by loss; the starting point is the trial at rank ``k``, with ``k``
  geometric of mean ``AVG_BEST_RANK`` (so mostly the best few, sometimes a worse one).
* A parameter observed ``T`` times gets the shrink factor ``s = 1 / (1 + SHRINK * T)``: a bounded
  numeric parameter is drawn uniformly from a window of ``s * range`` centred on the starting value
  (internal space, so log types shrink in log space; clipped to the bounds, then quantised); a
  normal-family one from ``N(start, s * sigma)``; ``randint`` from an integer window of ``s * range``;
  a ``choice`` keeps its option with probability ``1 - s`` and is redrawn uniformly otherwise.
* A nested choice that keeps its option anneals that option's sub-parameters the same way (their
  ``T`` counts only the trials that chose it); a new option gets fresh random sub-parameters.
* With no finished trial yet, proposals are random.

classArgs (NNI's hyperopt tuners): ``optimize_mode`` (``minimize``), ``seed``, ``parallel_optimize``
(``False``) and ``constant_liar_type`` (``min``; ``max``, ``mean``): with ``parallel_optimize`` the
running and waiting trials, and the proposals earlier in the same batch, are ranked with the
min/max/mean observed loss (0 when none). A record with a final value is an observation whatever
its status (a metric of 0 included); failed or cancelled trials without one add nothing.

Unlike NNI (one random retry, duplicates still possible), discrete spaces are deduplicated as TPE
does (:mod:`nnix.tuners.dedup`). Pure: randomness only from ``rng_for(seed, parameter_id)``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import numpy as np

from nnix.model.trials import Direction, TrialRecord
from nnix.space import Key, Param, Params, SearchSpace, sample
from nnix.tuners.base import TunerArgs, TunerContext
from nnix.tuners.dedup import Deduplicator, extends_records
from nnix.tuners.tpe import HyperoptArgs

__all__ = ["AnnealTuner"]

AVG_BEST_RANK = 2.0  # mean rank of the trial a proposal starts from (0 = the best)
SHRINK = 0.1  # neighbourhood shrink per observation of a parameter


def _active_nested(params: Sequence[Param], values: Any, counts: Counter[Key], top: bool = True) -> None:
    """Count one observation for every sub-parameter of a nested choice active in ``values``
    (top-level parameters are counted by the caller)."""
    if not isinstance(values, Mapping):
        return
    for p in params:
        if p.name not in values:
            continue
        if not top:
            counts[p.key] += 1
        if p.nested:
            branch = _branch_of(p, values[p.name])
            if branch is not None:
                _active_nested(p.branches[branch], values[p.name], counts, top=False)


def _same(a: Any, b: Any) -> bool:
    """JSON equality for options: ``1 == 1.0`` but ``True != 1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def _option_index(p: Param, value: Any) -> int | None:
    for i, option in enumerate(p.choices):
        if _same(option, value):
            return i
    return None


def _branch_of(p: Param, value: Any) -> int | None:
    if not isinstance(value, Mapping) or "_name" not in value:
        return None
    return _option_index(p, value["_name"])


@dataclass
class _Checkpoint:
    """What the finished records of ``prefix`` (all terminal) contribute, for ``settings`` (the loss sign,
    and the space when nested): their losses in history order, the sorted (loss, position, params) and
    the sub-parameter activations. A cache only: used when a later history starts with the same records."""

    settings: tuple[float, SearchSpace | None]
    prefix: tuple[TrialRecord, ...]
    losses: list[float]
    ranked: list[tuple[float, int, Params]]
    active: Counter[Key]
    end: int


class AnnealTuner:
    """Annealing around good past trials; see the module docstring."""

    Args: ClassVar[type[TunerArgs]] = HyperoptArgs

    def __init__(self, args: HyperoptArgs | None = None) -> None:
        self.args = args or HyperoptArgs()
        self._dedup = Deduplicator()
        self._checkpoint: _Checkpoint | None = None  # the facts of a history up to its first open record

    def _resume(self, history: Sequence[TrialRecord], settings: tuple[float, SearchSpace | None]) -> _Checkpoint | None:
        """The checkpoint of an earlier call when its records are where they were in ``history``."""
        c = self._checkpoint
        if c is None or c.settings[0] != settings[0] or c.settings[1] is not settings[1] or len(history) < c.end:
            return None
        if c.end and (history[c.end - 1] is not c.prefix[-1] or not extends_records(c.prefix, history)):
            return None
        return c

    def suggest(self, ctx: TunerContext, parameter_ids: Sequence[int]) -> list[Params]:
        if not parameter_ids:
            return []
        space = ctx.space
        seed = self.args.seed if self.args.seed is not None else ctx.seed
        sign = 1.0 if ctx.direction is Direction.MINIMIZE else -1.0
        history = ctx.history
        nested = len(space.parameters) > len(space.params)
        settings = (sign, space if nested else None)
        c = self._resume(history, settings)
        start = c.end if c is not None else 0
        losses = list(c.losses) if c is not None else []  # history order
        ranked = list(c.ranked) if c is not None else []  # (loss, position, params), sorted
        active: Counter[Key] = Counter(c.active) if c is not None else Counter()  # sub-parameter activations
        pending: list[Params] = []
        checkpoint: _Checkpoint | None = None
        for i in range(start, len(history)):
            r = history[i]
            if checkpoint is None and not r.status.is_terminal:
                checkpoint = _Checkpoint(settings, (), list(losses), sorted(ranked), Counter(active), i)
            if r.value is not None and math.isfinite(r.value):
                loss = sign * float(r.value)
                losses.append(loss)
                ranked.append((loss, i, r.params))
                if nested:
                    _active_nested(space.params, r.params, active)
            elif not r.status.is_terminal:
                pending.append(r.params)
        if checkpoint is None:
            checkpoint = _Checkpoint(settings, (), list(losses), sorted(ranked), Counter(active), len(history))
        if c is None or checkpoint.end != c.end:
            checkpoint.prefix = tuple(history[: checkpoint.end])
            self._checkpoint = checkpoint
        liar: float | None = None
        if self.args.parallel_optimize:
            kind = self.args.constant_liar_type
            if not losses:
                liar = 0.0
            elif kind == "min":
                liar = min(losses)
            elif kind == "max":
                liar = max(losses)
            else:
                liar = sum(losses) / len(losses)
            position = len(history)
            for waiting in pending:
                ranked.append((liar, position, waiting))
                if nested:
                    _active_nested(space.params, waiting, active)
                position += 1
        ranked.sort()  # by (loss, position): positions are unique, parameter sets never compared
        counts: Counter[Key] = Counter({p.key: len(ranked) for p in space.params})
        counts.update(active)

        self._dedup.begin(ctx)
        out: list[Params] = []
        for pid in parameter_ids:
            params = self._one(space, seed, pid, ranked, counts)
            if not self._dedup.accept(out, params):
                break
            assert params is not None
            if liar is not None:
                ranked.append((liar, len(ctx.history) + len(pending) + len(out), params))
                ranked.sort()
                counts.update(p.key for p in space.params)
                _active_nested(space.params, params, counts)
        return out

    def _one(
        self,
        space: SearchSpace,
        seed: int,
        pid: int,
        ranked: Sequence[tuple[float, int, Params]],
        counts: Counter[Key],
    ) -> Params | None:
        def draw(rng: np.random.Generator) -> Params:
            if not ranked:
                return sample(space, rng)
            rank = min(int(rng.geometric(1.0 / (1.0 + AVG_BEST_RANK))) - 1, len(ranked) - 1)
            return _anneal_level(space.params, ranked[rank][2], counts, rng)

        return self._dedup.first_new(space, seed, pid, draw)


def _anneal_level(params: Sequence[Param], start: Any, counts: Counter[Key], rng: np.random.Generator) -> Params:
    values = start if isinstance(start, Mapping) else {}
    return {p.name: _anneal(p, values.get(p.name), counts[p.key], counts, rng) for p in params}


def _anneal(p: Param, start: Any, observed: int, counts: Counter[Key], rng: np.random.Generator) -> Any:
    shrink = 1.0 / (1.0 + SHRINK * observed)
    if start is None or not p.contains(start):
        return p.sample(rng)
    if p.type == "choice":
        if p.nested:
            branch = _branch_of(p, start)
            if branch is None:
                return p.sample(rng)
            if rng.random() < shrink:
                new = int(rng.integers(len(p.choices)))
                if new != branch:
                    return {"_name": p.choices[new], **{q.name: q.sample(rng) for q in p.branches[new]}}
            return {"_name": p.choices[branch], **_anneal_level(p.branches[branch], start, counts, rng)}
        index = _option_index(p, start)
        if index is None or rng.random() < shrink:
            return p.choice_value(int(rng.integers(len(p.choices))))
        return p.choice_value(index)
    if p.type == "randint":
        low, high = int(cast(float, p.low)), int(cast(float, p.high))
        reach = max(0, math.ceil(shrink * (high - low) / 2))
        first, last = max(low, int(start) - reach), min(high - 1, int(start) + reach)
        return int(rng.integers(first, last + 1))
    if p.is_bounded:
        lo, hi = p.internal_bounds()
        x0 = math.log(start) if p.log else float(start)
        half = shrink * (hi - lo) / 2
        return p.from_internal(float(rng.uniform(max(lo, x0 - half), min(hi, x0 + half))))
    if p.log and start <= 0:
        return p.sample(rng)
    x0 = math.log(start) if p.log else float(start)
    return p.from_internal(float(rng.normal(x0, shrink * cast(float, p.sigma))))
