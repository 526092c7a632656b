"""BOHB (NNI ``BOHB``): Hyperband's brackets with configurations drawn from a density model.

Scheduling is :class:`nnix.tuners.hyperband.HyperbandScheduler` itself (same queue, same
``TRIAL_BUDGET`` key, same rebuild-from-history), with BOHB's budgets: ``s_max =
floor(log_eta(max_budget / min_budget) + 1e-6)``, bracket ``s`` starts ``n = ceil((s_max + 1) *
eta**s / (s + 1) - 1e-6)`` configurations at ``max_budget / eta**s`` and round ``i`` runs
``floor(n / eta**i + 1e-6)`` of them at ``max_budget / eta**(s - i)`` (written as an integer when it
is a whole number). Brackets run one after another -- a new one opens only when the latest has
issued its last round (Hyperband's ``serial`` mode) -- so the model learns from each bracket before
the next one draws its configurations.

Fresh configurations (round 0) follow Falkner et al. (2018):

* each parameter is mapped to ``[0, 1]`` (uniform family: linearly in internal space, logs for log
  types; normal family: through the normal CDF; ``randint``: ordinal cells) or is categorical
  (``choice``; for a nested choice the option is modelled and its sub-parameters are drawn at random);
* observations are the ended trials with a performance (final result, else latest intermediate), grouped by
  ``TRIAL_BUDGET``; imported results without one count at ``max_budget``. The model uses the largest
  budget with at least ``max(dim + 1, min_points_in_model)`` observations;
* the best ``max(m, top_n_percent% of N)`` observations form the "good" set and the worst
  ``max(m, (100 - top_n_percent)% of N)`` the "bad" set (``m = min_points_in_model``, default
  ``dim + 1``); each is a product-kernel density (Gaussian kernels, normal-reference bandwidths
  ``1.06 * std * n**(-1 / (dim + 4))`` at least ``min_bandwidth``; categorical kernels keep the observed
  option with probability ``1 - lambda``);
* ``num_samples`` candidates are drawn around random good observations with bandwidths widened by
  ``bandwidth_factor``; the one maximising ``l(x) / g(x)`` (ranked on a grid, :mod:`nnix.tuners.stable`) is
  proposed;
* with probability ``random_fraction``, or while no budget has enough observations, the draw is random
  (on discrete spaces, model and random draws avoid configurations already tried when they can).

Everything is recomputed from ``ctx.history`` with ``rng_for(seed, parameter_id)``, so resume needs no
checkpoint. ``config_space`` (a ConfigSpace ``.pcs`` file in NNI) is not supported: the search space is
the one of the experiment.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import Field, field_validator, model_validator
from scipy.special import ndtr, ndtri

from nnix.model.trials import Direction, TrialRecord
from nnix.space import Params, SearchSpace, key
from nnix.tuners.base import TunerArgs, TunerContext, rng_for
from nnix.tuners.hyperband import (
    TRIAL_BUDGET,
    Budget,
    HyperbandScheduler,
    Schedule,
    budget_of,
    check_space,
    performance,
    propose,
    random_config,
    seen_configs,
)
from nnix.tuners.stable import order_desc
from nnix.tuners.transform import EDGE as _EDGE
from nnix.tuners.transform import SpaceTransform

__all__ = ["BOHBTuner", "BohbArgs", "BohbTuner", "Encoding"]

Array = NDArray[np.float64]
_TINY = 1e-32
MODEL_STREAM = 1000


class BohbArgs(TunerArgs):
    optimize_mode: Literal["maximize", "minimize"] = "maximize"
    min_budget: float = Field(default=1, gt=0)
    max_budget: float = Field(default=3, gt=0)
    eta: int = Field(default=3, ge=2)
    min_points_in_model: int | None = Field(default=None, ge=1)
    top_n_percent: int = Field(default=15, ge=1, le=99)
    num_samples: int = Field(default=64, ge=1)
    random_fraction: float = Field(default=1 / 3, ge=0, le=1)
    bandwidth_factor: float = Field(default=3, gt=0)
    min_bandwidth: float = Field(default=1e-3, ge=0)
    config_space: str | None = None
    seed: int | None = None  # overrides the experiment's seed when set

    @field_validator("config_space")
    @classmethod
    def _no_config_space(cls, v: str | None) -> str | None:
        if v is not None:
            raise ValueError(
                "config_space (a ConfigSpace .pcs file) is not supported by nnix; "
                "describe the parameters in the experiment's search space instead"
            )
        return v

    @model_validator(mode="after")
    def _budgets(self) -> BohbArgs:
        if self.max_budget < self.min_budget:
            raise ValueError(f"max_budget ({self.max_budget}) must be >= min_budget ({self.min_budget})")
        return self


# --------------------------------------------------------------------------------------------------
# encoding to the unit cube (the shared space transform)


class Encoding(SpaceTransform):
    """Top-level parameters <-> rows of floats: ``[0, 1]`` for numeric ones, an option index for choices."""

    def __init__(self, space: SearchSpace) -> None:
        super().__init__(space, randint="ordinal", choice="categorical")
        self.dims = self.columns

    def encode(self, params: Any) -> Array | None:
        """The row of a parameter set, or None when it is not a point of this space."""
        return self.to_unit(params) if isinstance(params, dict) else None

    def decode(self, row: Array, rng: np.random.Generator) -> Params:
        """The parameter set of a row; the sub-parameters of a nested choice are drawn at random."""
        out = self.from_unit(row)
        for c in self.dims:
            if c.param.nested:
                index = int(row[c.col])
                out[c.param.name].update({sub.name: sub.sample(rng) for sub in c.param.branches[index]})
        return out


# --------------------------------------------------------------------------------------------------
# the density model


@dataclass(frozen=True)
class _Kde:
    data: Array  # (n, d)
    bandwidth: Array  # (d,): sigma of continuous dims, lambda of categorical dims
    categories: tuple[int, ...]

    @classmethod
    def fit(cls, data: Array, categories: tuple[int, ...], min_bandwidth: float) -> _Kde:
        n, d = data.shape
        factor = n ** (-1.0 / (d + 4))
        bw = np.empty(d)
        for j, k in enumerate(categories):
            col = data[:, j]
            if k:
                mode_share = np.max(np.bincount(col.astype(int), minlength=k)) / n
                bw[j] = min(max(factor * (1.0 - mode_share), min_bandwidth), (k - 1) / k if k > 1 else 0.0)
            else:
                bw[j] = max(1.06 * float(np.std(col)) * factor, min_bandwidth, _EDGE)
        return cls(data, bw, categories)

    def log_pdf(self, x: Array) -> Array:
        """Log density at each row of ``x`` (m, d)."""
        logk = np.zeros((x.shape[0], self.data.shape[0]))
        for j, k in enumerate(self.categories):
            xj = x[:, j][:, None]
            dj = self.data[:, j][None, :]
            if k:
                lam = self.bandwidth[j]
                same = np.isclose(xj, dj)
                other = lam / (k - 1) if k > 1 else 0.0
                logk += np.log(np.maximum(np.where(same, 1.0 - lam, other), _TINY))
            else:
                h = self.bandwidth[j]
                logk += -0.5 * ((xj - dj) / h) ** 2 - math.log(h * math.sqrt(2 * math.pi))
        top = np.max(logk, axis=1, keepdims=True)
        out: Array = (top[:, 0] + np.log(np.mean(np.exp(logk - top), axis=1))).astype(np.float64)
        return np.maximum(out, math.log(_TINY))

    def sample(self, rng: np.random.Generator, count: int, widen: float, min_bandwidth: float) -> Array:
        n, d = self.data.shape
        centres = self.data[rng.integers(n, size=count)]
        out = np.empty((count, d))
        for j, k in enumerate(self.categories):
            bw = max(self.bandwidth[j] * widen, min_bandwidth)
            if k:
                keep = rng.random(count) >= min(bw, 1.0)
                out[:, j] = np.where(keep, centres[:, j], rng.integers(k, size=count))
            else:
                m = centres[:, j]
                a, b = ndtr((0.0 - m) / bw), ndtr((1.0 - m) / bw)
                u = a + (b - a) * rng.random(count)
                out[:, j] = np.clip(m + bw * ndtri(np.clip(u, _EDGE, 1 - _EDGE)), 0.0, 1.0)
        return out


# --------------------------------------------------------------------------------------------------
# the tuner


class BOHBTuner:
    """BOHB: Hyperband scheduling (shared code) plus a good/bad density model per budget."""

    Args: ClassVar[type[TunerArgs]] = BohbArgs

    def __init__(self, args: BohbArgs | None = None) -> None:
        self.args = args or BohbArgs()
        self.schedule = Schedule.bohb(self.args.min_budget, self.args.max_budget, self.args.eta)

    def state(self, ctx: TunerContext) -> HyperbandScheduler:
        return HyperbandScheduler.replay(self.schedule, ctx.direction, "serial", ctx.history)

    def suggest(self, ctx: TunerContext, parameter_ids: Sequence[int]) -> list[Params]:
        check_space(ctx.space, "BOHB")
        seed = self.args.seed if self.args.seed is not None else ctx.seed
        state = self.state(ctx)
        seen = seen_configs(ctx.space, ctx.history)
        enc = Encoding(ctx.space)
        model = self._model(enc, ctx.history, ctx.direction)

        def sampler(pid: int, budget: Budget, taken: set[str], clashes: Callable[[str], bool]) -> Params:
            rng = rng_for(seed, pid, MODEL_STREAM)  # random draws use streams 0.. of the same id
            if model is not None and rng.random() >= self.args.random_fraction:
                found = self._from_model(enc, model, rng, seen, taken, clashes)
                if found is not None:
                    return found
            return random_config(ctx.space, seed, pid, seen, taken, clashes)

        return propose(state, parameter_ids, sampler)

    # -- the model ----------------------------------------------------------------------------------

    def observations(
        self, enc: Encoding, history: Sequence[TrialRecord], direction: Direction
    ) -> dict[float, list[tuple[float, Array]]]:
        """``budget -> [(loss, row)]`` over ended trials with a performance (loss: lower is better)."""
        sign = -1.0 if direction is Direction.MAXIMIZE else 1.0
        out: dict[float, list[tuple[float, Array]]] = {}
        for r in history:
            if not (r.status.is_terminal or r.parameter_id < 0):
                continue
            perf = performance(r)
            if perf is None or not isinstance(r.params, dict):
                continue
            budget = budget_of(r.params)
            if budget is None:
                if r.parameter_id >= 0:
                    continue
                budget = float(self.args.max_budget)
            row = enc.encode({k: v for k, v in r.params.items() if k != TRIAL_BUDGET})
            if row is None:
                continue
            out.setdefault(_budget_key(budget), []).append((sign * perf, row))
        return out

    def _model(self, enc: Encoding, history: Sequence[TrialRecord], direction: Direction) -> tuple[_Kde, _Kde] | None:
        d = len(enc.dims)
        if d == 0:
            return None
        m = self.args.min_points_in_model or d + 1
        needed = max(d + 1, m)
        obs = self.observations(enc, history, direction)
        usable = [b for b, rows in obs.items() if len(rows) >= needed]
        if not usable:
            return None
        rows = sorted(obs[max(usable)], key=lambda lr: lr[0])  # stable: ties keep history order
        n = len(rows)
        n_good = min(n, max(m, self.args.top_n_percent * n // 100))
        n_bad = min(n, max(m, (100 - self.args.top_n_percent) * n // 100))
        data = np.array([row for _, row in rows])
        cats = tuple(dim.categories for dim in enc.dims)
        good = _Kde.fit(data[:n_good], cats, self.args.min_bandwidth)
        bad = _Kde.fit(data[n - n_bad :], cats, self.args.min_bandwidth)
        return good, bad

    def _from_model(
        self,
        enc: Encoding,
        model: tuple[_Kde, _Kde],
        rng: np.random.Generator,
        seen: set[str],
        taken: set[str],
        clashes: Callable[[str], bool],
    ) -> Params | None:
        good, bad = model
        cands = good.sample(rng, self.args.num_samples, self.args.bandwidth_factor, self.args.min_bandwidth)
        score = good.log_pdf(cands) - bad.log_pdf(cands)
        for j in order_desc(score):
            params = enc.decode(cands[j], rng)
            k = key(params)
            if k not in seen and k not in taken and not clashes(k):
                return params
        return None


def _budget_key(b: float) -> float:
    return round(b, 9)


BohbTuner = BOHBTuner  # the other spelling of the acronym (nnix.tuners)
