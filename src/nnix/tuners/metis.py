"""Metis (NNI ``Metis``, alias ``MetisTuner``): GP + GMM search with exploration, exploitation and
re-sampling candidates.

Metis (Li et al., SoCC 2018) models the metric with a Gaussian process and, at each step, weighs
three kinds of candidates. This module re-derives that design on the GP of :mod:`nnix.tuners.gp`
(same unit-cube encoding, same fit, same cost caps):

* **Exploitation candidates**: the maxima of the GP mean (the model's predicted optimum, from
  multi-start L-BFGS-B), and the best *GMM candidate*: the observations are split into the best
  quarter and the rest, each set is modelled by a Gaussian mixture (one component per observation,
  Scott's bandwidth per dimension), points are drawn from the good mixture and the one with the
  highest good/bad density ratio is kept. The exploitation proposal is the one of these with the
  higher expected improvement.
* **Exploration candidates**: the maxima of the expected improvement under the GP, which rewards
  uncertainty (the "information gain" of a point). Each proposal explores with probability
  ``exploration_probability`` (drawn from the proposal's own random stream) and exploits otherwise.
* **Re-sampling** (only with ``no_resampling: false``): an observation whose leave-one-out residual
  exceeds ``OUTLIER_SIGMAS`` posterior standard deviations and which is at least as good as the
  median is suspected to be a lucky draw of a noisy metric; it is proposed again, verbatim, before
  anything else (once: a configuration already run twice, or running, is not re-sampled).
* ``no_candidates: true`` skips the candidate search: every proposal is the predicted optimum.

Until ``cold_start_num`` results exist, proposals are random draws. History, constant liar for
running trials, deduplication of discrete spaces (re-sampling excepted, which repeats on purpose)
and the cost caps are those of :mod:`nnix.tuners.gp`; ``selection_num_starting_points`` is capped
to ``STARTS_CAP`` local refinements.

Supported types (NNI's table): ``choice`` with numeric options, ``randint``, ``uniform``,
``quniform``; anything else is a :class:`~nnix.errors.SearchSpaceError` naming the parameter.

classArgs (NNI's, NNI defaults): ``optimize_mode`` (maximize), ``no_resampling`` (true),
``no_candidates`` (false), ``selection_num_starting_points`` (600), ``cold_start_num`` (10),
``exploration_probability`` (0.9), ``seed`` (overrides the experiment's seed).
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from collections.abc import Collection, Sequence
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field

from nnix.model.trials import TrialRecord
from nnix.space import Params, contains, key
from nnix.tuners.base import TunerArgs, TunerContext, rng_for
from nnix.tuners.bo import (
    MIN_OBSERVATIONS,
    STARTS_CAP,
    Array,
    BayesianTuner,
    Observations,
    Step,
    UnitEncoding,
    acquisition_score,
    acquisition_score_grad,
    best_centres,
    maximize_in_cube,
    select_new,
    warm_up_size,
)
from nnix.tuners.gp import GPModel, fit_gp
from nnix.tuners.stable import OBS_DIGITS, order_desc

__all__ = ["MetisArgs", "MetisTuner"]

METIS_TYPES = frozenset({"choice", "randint", "uniform", "quniform"})
OUTLIER_SIGMAS = 2.0  # leave-one-out residual (in posterior sds) beyond which a result is re-sampled
GOOD_FRACTION = 0.25  # share of the observations in the GMM's "good" set
GMM_SAMPLES = 500  # draws from the good mixture per proposal
MIN_BANDWIDTH = 0.01  # of the mixtures, in the unit cube
GMM_CANDIDATES = 8  # best-ratio draws kept as exploitation candidates

WARM_UP_CAP_METIS = 2000  # random warm-up points per candidate search (fewer in few dimensions, as GP)

_STREAM_ACQ = 1
_STREAM_BRANCH = 2
_STREAM_GMM = 3


class MetisArgs(TunerArgs):
    """NNI ``Metis`` classArgs."""

    optimize_mode: Literal["maximize", "minimize"] = "maximize"
    no_resampling: bool = True
    no_candidates: bool = False
    selection_num_starting_points: int = Field(default=600, ge=0)
    cold_start_num: int = Field(default=10, ge=0)
    exploration_probability: float = Field(default=0.9, ge=0, le=1)
    seed: int | None = None  # overrides the experiment's seed when set


def _mixture_logpdf(points: Array, centres: Array, bandwidth: Array) -> Array:
    """Log density at ``points`` of the equal-weight mixture of N(centre, diag(bandwidth^2))."""
    z = (points[:, None, :] - centres[None, :, :]) / bandwidth[None, None, :]
    log_comp = -0.5 * (z * z).sum(2) - np.log(bandwidth).sum() - 0.5 * points.shape[1] * math.log(2 * math.pi)
    top = log_comp.max(1)
    out: Array = top + np.log(np.exp(log_comp - top[:, None]).mean(1))
    return out


def _bandwidth(x: Array) -> Array:
    n, d = x.shape
    sd = x.std(0) if n > 1 else np.full(d, 0.25)
    out: Array = np.maximum(sd * n ** (-1.0 / (d + 4)), MIN_BANDWIDTH)
    return out


def gmm_candidates(obs: Observations, enc: UnitEncoding, rng: np.random.Generator) -> Array:
    """The best draws from the good mixture by good/bad density ratio, best first."""
    order = order_desc(obs.y, OBS_DIGITS)
    n_good = max(1, math.ceil(GOOD_FRACTION * obs.n))
    good, bad = obs.x[order[:n_good]], obs.x[order[n_good:]]
    h_good = _bandwidth(good)
    picks = good[rng.integers(good.shape[0], size=GMM_SAMPLES)]
    draws = enc.snap(np.clip(picks + h_good * rng.standard_normal(picks.shape), 0.0, 1.0))
    ratio = _mixture_logpdf(draws, good, h_good)
    if bad.shape[0]:
        ratio = ratio - _mixture_logpdf(draws, bad, _bandwidth(bad))
    best: Array = draws[order_desc(ratio)[:GMM_CANDIDATES]]
    return best


class MetisTuner(BayesianTuner[MetisArgs, GPModel]):
    """Metis; see the module docstring."""

    Args: ClassVar[type[TunerArgs]] = MetisArgs
    name: ClassVar[str] = "Metis"
    supported: ClassVar[Collection[str]] = METIS_TYPES

    def __init__(self, args: MetisArgs | None = None) -> None:
        super().__init__(args or MetisArgs())

    def fit(self, enc: UnitEncoding, obs: Observations, seed: int) -> GPModel | None:
        if enc.d > 0 and obs.n >= max(self.args.cold_start_num, MIN_OBSERVATIONS):
            return fit_gp(obs)
        return None

    def replays(self, ctx: TunerContext, obs: Observations, model: GPModel) -> list[Params]:
        return [] if self.args.no_resampling else self._outliers(ctx, obs, model)

    def _outliers(self, ctx: TunerContext, obs: Observations, model: GPModel) -> list[Params]:
        """Results to re-sample, most suspicious first (see the module docstring)."""
        residuals = model.loo_residuals()
        median = float(np.median(model.y))
        history: Sequence[TrialRecord] = ctx.history
        counts = Counter(key(r.params) for r in history)
        out: list[Params] = []
        for i in order_desc(np.abs(residuals)):
            if round(abs(float(residuals[i])), 6) <= OUTLIER_SIGMAS:
                break
            if float(model.y[i]) < median:
                continue
            record = history[int(obs.positions[int(model.source[i])])]
            params = record.params
            if counts[key(params)] > 1 or not contains(ctx.space, params):
                continue
            counts[key(params)] += 1
            out.append(copy.deepcopy(params))
        return out

    def propose(self, model: GPModel, step: Step) -> Params | None:
        args, enc, obs, seed, pid = self.args, step.enc, step.obs, step.seed, step.pid
        model = model.with_liars(step.fantasies, step.liar)
        best = step.best
        starts = min(args.selection_num_starting_points, STARTS_CAP)
        centres = best_centres(obs)
        ei, ei_grad = acquisition_score(model, "ei", best), acquisition_score_grad(model, "ei", best)

        def mean(z: Array) -> Array:
            return model.predict(z)[0]

        def mean_grad(z: Array) -> tuple[float, Array]:
            mu, _, dmu, _ = model.predict_grad(z)
            return mu, dmu

        rng = rng_for(seed, pid, _STREAM_ACQ)
        warm_up = warm_up_size(WARM_UP_CAP_METIS, enc.d)
        if args.no_candidates:
            candidates, _ = maximize_in_cube(enc, mean, mean_grad, rng, warm_up, starts, centres)
            return select_new(enc, candidates, self._dedup)
        explore = float(rng_for(seed, pid, _STREAM_BRANCH).random()) < args.exploration_probability
        if explore:
            candidates, _ = maximize_in_cube(enc, ei, ei_grad, rng, warm_up, starts, centres)
            return select_new(enc, candidates, self._dedup)
        optimum, _ = maximize_in_cube(enc, mean, mean_grad, rng, warm_up, starts, centres)
        pool = np.vstack([optimum[:GMM_CANDIDATES], gmm_candidates(obs, enc, rng_for(seed, pid, _STREAM_GMM))])
        ranked = pool[order_desc(ei(pool))]
        return select_new(enc, np.vstack([ranked, optimum]), self._dedup)
