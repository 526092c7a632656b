"""Gaussian-process Bayesian optimisation (NNI ``GP``, alias ``GPTuner``).

The model is a Gaussian process written with numpy/scipy (no scikit-learn): a constant mean, a
Matérn kernel with smoothness ``nu`` (closed forms for 0.5, 1.5, 2.5 and ``inf`` = RBF, the Bessel
form otherwise) and one length scale per parameter (ARD), a learned noise variance plus the fixed
jitter ``alpha``. The amplitude, length scales and noise maximise the marginal likelihood times a weak
log-normal prior of the amplitude and the length scales (analytic gradient, L-BFGS-B from the best of six
fixed starting points, so the fit is a pure function of the data).

The same seed and history give the same proposals on any CPU (:mod:`nnix.tuners.stable`): the prior
gives the fit one well-defined optimum (the likelihood of a few observations is flat along a parameter
that does not matter, and where the optimiser stopped on the flat depended on the CPU's rounding);
kernel distances are computed from differences (near-duplicates, a liar next to an observation, keep
their distance); candidates are ranked on a grid and proposed points rounded to nine decimals.
Parameters live in the unit cube: uniform types linearly, log types in log space, ``randint`` and
numeric ``choice`` as ordered levels (``choice`` options sorted by value), q-types relaxed and
rounded on output; the acquisition is always scored at the point that would really be proposed.

Each proposal maximises the acquisition ``utility`` — expected improvement (``ei``, margin ``xi``),
upper confidence bound (``ucb``, ``kappa``) or probability of improvement (``poi``, margin ``xi``) —
over random warm-up points plus perturbations of the best observations, then refines the best few
with L-BFGS-B. Until ``cold_start_num`` results exist, proposals are random draws.

History: a record with a final value is an observation whatever its status (a metric of 0 is data;
imported results with negative parameter ids count like any other); a failed or cancelled trial
without a value is ignored. Running and waiting trials, and the proposals made earlier in the same
batch, are added to the model as *constant liars* with the worst observed value, so concurrent
proposals spread out instead of piling onto one optimum. Discrete spaces are deduplicated
(:mod:`nnix.tuners.dedup`): the best-scored candidate not yet tried is proposed, then the first
unused grid point; :class:`~nnix.errors.NoMoreTrialsError` when the space is exhausted.

Supported types (NNI's table): ``choice`` with numeric options, ``randint``, ``uniform``,
``quniform``, ``loguniform``, ``qloguniform``. Anything else (a non-numeric option, a nested
choice, the normal family) is a :class:`~nnix.errors.SearchSpaceError` naming the parameter.

Cost cap (NNI: 3.3 s per suggestion at history 200, mostly 100 000 warm-up predictions and 250
L-BFGS-B runs on an isotropic scikit-learn GP refitted with many restarts). Every stage is bounded:

* the posterior is conditioned on at most ``MODEL_POINTS`` (300) observations: the best 150 and the
  most recent others;
* the hyper-parameters are fitted on at most ``FIT_POINTS`` (100) of those (the best 20 and an even
  spread of the rest), one L-BFGS-B run of at most ``FIT_ITERATIONS`` (50) iterations from the best
  of six screened starting points;
* ``selection_num_warm_up`` is capped to ``min(WARM_UP_CAP, WARM_UP_BASE + WARM_UP_PER_DIM * d)``
  random points (800 in 2-D, 2000 from 10-D), plus ``LOCAL_POINTS`` (200) perturbations of the best
  observations; ``selection_num_starting_points`` is capped to ``STARTS_CAP`` (5) L-BFGS-B
  refinements of at most ``LOCAL_ITERATIONS`` (30) iterations each (analytic gradients);
* the unit-cube encoding of the history is cached while the history only grows.
* BLAS runs single-threaded during a suggestion when ``threadpoolctl`` is installed (see
  :func:`single_threaded_blas`).

So a suggestion costs O(1) in the history length beyond reading it (``bench/latency.py``).

classArgs (NNI's, NNI defaults): ``optimize_mode`` (maximize), ``utility`` (ei), ``kappa`` (5),
``xi`` (0), ``nu`` (2.5), ``alpha`` (1e-6), ``cold_start_num`` (10), ``selection_num_warm_up``
(100000, capped as above), ``selection_num_starting_points`` (250, capped as above), ``seed``
(overrides the experiment's seed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import Field
from scipy.linalg import LinAlgError, cho_solve, cholesky, solve_triangular
from scipy.optimize import minimize
from scipy.spatial.distance import cdist
from scipy.special import gamma as gamma_fn
from scipy.special import kv

from nnix.space import Params
from nnix.tuners.base import TunerArgs
from nnix.tuners.bo import (
    MIN_OBSERVATIONS,
    STARTS_CAP,
    Array,
    BayesianTuner,
    EncodingCache,
    Observations,
    Step,
    UnitEncoding,
    acquisition,
    acquisition_score,
    acquisition_score_grad,
    best_and_recent,
    best_centres,
    collect,
    maximize_in_cube,
    propose_random,
    select_new,
    single_threaded_blas,
    warm_up_size,
)
from nnix.tuners.bo import Utility as Utility
from nnix.tuners.stable import OBS_DIGITS, argmax, order_desc

__all__ = [  # the toolkit's names stay importable from here
    "EncodingCache",
    "GPArgs",
    "GPModel",
    "GPTuner",
    "Observations",
    "UnitEncoding",
    "acquisition",
    "collect",
    "fit_gp",
    "maximize_in_cube",
    "propose_random",
    "select_new",
    "single_threaded_blas",
    "warm_up_size",
]

MODEL_POINTS = 300  # observations the posterior is conditioned on
FIT_POINTS = 100  # observations the hyper-parameters are fitted on
FIT_ITERATIONS = 50  # L-BFGS-B iterations of the hyper-parameter fit
_STREAM_ACQ = 1  # random stream of a proposal's warm-up points


def _best_and_spread(y: Array, cap: int) -> NDArray[np.int64]:
    """Indices of at most ``cap`` observations: the best fifth of the cap, then an even spread of the others."""
    n = y.shape[0]
    if n <= cap:
        return np.arange(n)
    best = order_desc(y, OBS_DIGITS)[: cap // 5]
    rest = np.setdiff1d(np.arange(n), best)
    pick = rest[np.linspace(0, rest.shape[0] - 1, cap - best.shape[0]).round().astype(np.int64)]
    return np.sort(np.concatenate([best, pick]))


# --------------------------------------------------------------------------------------------------
# the Gaussian process


def _matern(r: Array, nu: float) -> tuple[Array, Array]:
    """The unit-amplitude Matérn kernel ``k(r)`` and ``g(r) = -k'(r) / r`` (0 where undefined at r = 0)."""
    if nu == 0.5:
        e = np.exp(-r)
        with np.errstate(divide="ignore", invalid="ignore"):
            g = np.where(r > 0, e / np.where(r > 0, r, 1.0), 0.0)
        return e, g
    if nu == 1.5:
        a = math.sqrt(3.0)
        e = np.exp(-a * r)
        return (1.0 + a * r) * e, 3.0 * e
    if nu == 2.5:
        a = math.sqrt(5.0)
        e = np.exp(-a * r)
        return (1.0 + a * r + 5.0 / 3.0 * r * r) * e, 5.0 / 3.0 * (1.0 + a * r) * e
    if math.isinf(nu):
        k = np.exp(-0.5 * r * r)
        return k, k
    z = math.sqrt(2.0 * nu) * r
    c = 2.0 ** (1.0 - nu) / gamma_fn(nu)
    safe = np.where(z > 0, z, 1.0)
    k = np.where(z > 0, c * safe**nu * kv(nu, safe), 1.0)
    at_zero = c * 2.0 * nu * 2.0 ** (nu - 2.0) * gamma_fn(nu - 1.0) if nu > 1.0 else 0.0
    g = np.where(z > 0, c * 2.0 * nu * safe ** (nu - 1.0) * kv(nu - 1.0, safe), at_zero)
    return np.nan_to_num(k), np.nan_to_num(g)


def _sq_dist(a: Array, b: Array) -> Array:
    """Squared distances between the rows of ``a`` and ``b``, from their differences: exact where points are
    close. (``|a|^2 + |b|^2 - 2 a.b`` loses every digit of a near-duplicate's distance, and the kernel
    matrix of a liar next to an observation then hangs on the CPU's rounding.)"""
    out: Array = cdist(a, b, "sqeuclidean")
    return out


def _cholesky(k: Array) -> Array:
    """Lower Cholesky factor, adding jitter when ``k`` is numerically singular."""
    jitter = 0.0
    for _ in range(8):
        try:
            factor: Array = cholesky(k + jitter * np.eye(k.shape[0]), lower=True, check_finite=False)
            return factor
        except LinAlgError:
            jitter = max(jitter * 10.0, 1e-8 * float(np.mean(np.diag(k))))
    raise LinAlgError("kernel matrix is not positive definite")


@dataclass(frozen=True)
class Hyper:
    """Fitted hyper-parameters: amplitude, length scales (unit cube), noise variance (standardised y)."""

    amplitude: float
    lengths: Array
    noise: float


_LOG_AMP = (math.log(0.05), math.log(20.0))
_LOG_LEN = (math.log(0.01), math.log(20.0))
# noise variance of the standardised y, at least 1e-5 (sd 0.3% of y's): nearer 0 the kernel matrix of a few
# close observations is so ill-conditioned that the fit ends wherever the CPU's rounding lets its line search
_LOG_NOISE = (math.log(1e-5), math.log(1.0))
_START_LENGTHS = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6)  # screened starting length scales of the fit
# The fit maximises the likelihood times a log-normal prior of the amplitude (median 1: y is standardised) and
# of each length scale (median 0.3 of the unit cube), both with this standard deviation of the log. Without
# it the likelihood of a few observations is flat along a length scale that does not matter (any value from
# 2 to 20 fits), and where L-BFGS-B stops along it depends on the CPU's rounding: so do the proposals.
_PRIOR_AMPLITUDE, _PRIOR_LENGTH, _PRIOR_SD = 1.0, 0.3, 1.0
FIT_FTOL, FIT_GTOL = 1e-10, 1e-6  # the fit stops near the optimum, not on a flat stretch before it


def _fit_hyper(x: Array, y: Array, nu: float, alpha: float) -> Hyper:
    """Maximise the marginal likelihood of standardised ``y`` from the best of a few fixed starts."""
    n, d = x.shape
    diffs2 = (x[:, None, :] - x[None, :, :]) ** 2  # (n, n, d)
    diffs2 = np.moveaxis(diffs2, 2, 0)  # (d, n, n)
    eye = np.eye(n)
    half_log_2pi = 0.5 * n * math.log(2.0 * math.pi)
    prior_centre = np.array([math.log(_PRIOR_AMPLITUDE)] + [math.log(_PRIOR_LENGTH)] * d)

    def nll(theta: Array) -> tuple[float, Array]:
        amp = math.exp(theta[0])
        lengths = np.exp(theta[1 : d + 1])
        noise = math.exp(theta[-1])
        scaled = diffs2 / (lengths**2)[:, None, None]
        r = np.sqrt(scaled.sum(0))
        k, g = _matern(r, nu)
        kf = amp * k
        kk = kf + (noise + alpha) * eye
        try:
            chol = cholesky(kk, lower=True, check_finite=False)
        except LinAlgError:
            return 1e25, np.zeros_like(theta)
        a = cho_solve((chol, True), y, check_finite=False)
        value = 0.5 * float(y @ a) + float(np.log(np.diag(chol)).sum()) + half_log_2pi
        w = np.outer(a, a) - cho_solve((chol, True), eye, check_finite=False)
        grad = np.empty_like(theta)
        grad[0] = -0.5 * float((w * kf).sum())
        grad[1 : d + 1] = -0.5 * amp * np.einsum("ij,kij->k", w * g, scaled)
        grad[-1] = -0.5 * noise * float(np.trace(w))
        # the log-normal prior of the amplitude and the length scales
        dev = (theta[: d + 1] - prior_centre) / _PRIOR_SD
        value += 0.5 * float(dev @ dev)
        grad[: d + 1] += dev / _PRIOR_SD
        return value, grad

    bounds = [_LOG_AMP] + [_LOG_LEN] * d + [_LOG_NOISE]
    # screen a few fixed starting points with one evaluation each; refine only the best one
    starts = [np.array([0.0] + [math.log(length)] * d + [math.log(1e-3)]) for length in _START_LENGTHS]
    theta = starts[argmax([-nll(t)[0] for t in starts])]
    try:
        options = {"maxiter": FIT_ITERATIONS, "ftol": FIT_FTOL, "gtol": FIT_GTOL}
        res = minimize(nll, theta, jac=True, method="L-BFGS-B", bounds=bounds, options=options)
        if math.isfinite(float(res.fun)):
            theta = np.asarray(res.x, dtype=float)
    except (ValueError, LinAlgError, FloatingPointError):
        pass
    return Hyper(math.exp(theta[0]), np.exp(theta[1 : d + 1]), math.exp(theta[-1]))


class GPModel:
    """A Gaussian-process posterior in the unit cube, predicting in the units of ``y``."""

    def __init__(self, x: Array, y: Array, hyper: Hyper, nu: float, alpha: float, mean: float, scale: float) -> None:
        self.x, self.y = x, y
        self.hyper, self.nu, self.alpha = hyper, nu, alpha
        self.mean, self.scale = mean, scale
        self.source: NDArray[np.int64] = np.arange(x.shape[0])  # index of each point among the observations
        self._xs = x / hyper.lengths
        k = self._k(self._xs, self._xs) + (hyper.noise + alpha) * np.eye(x.shape[0])
        self._chol = _cholesky(k)
        self._a = cho_solve((self._chol, True), (y - mean) / scale, check_finite=False)

    def _k(self, a: Array, b: Array) -> Array:
        k, _ = _matern(np.sqrt(_sq_dist(a, b)), self.nu)
        out: Array = self.hyper.amplitude * k
        return out

    def loo_residuals(self) -> Array:
        """Leave-one-out residual of each conditioning point, in posterior standard deviations
        (``(y_i - mean without i) / sd without i``, closed form from the kernel inverse)."""
        n = self.x.shape[0]
        inv_diag = np.diag(cho_solve((self._chol, True), np.eye(n), check_finite=False))
        out: Array = self._a / np.sqrt(np.maximum(inv_diag, 1e-300))
        return out

    def condition(self, x: Array, y: Array) -> GPModel:
        """The same model with more (e.g. fantasised) observations; hyper-parameters unchanged."""
        if x.shape[0] == 0:
            return self
        return GPModel(
            np.vstack([self.x, x]), np.concatenate([self.y, y]), self.hyper, self.nu, self.alpha, self.mean, self.scale
        )

    def with_liars(self, points: Sequence[Array], liar: float) -> GPModel:
        """The same model with ``points`` observed at the value ``liar`` (a constant liar)."""
        return self.condition(np.array(points), np.full(len(points), liar)) if points else self

    def predict(self, z: Array) -> tuple[Array, Array]:
        """Posterior mean and standard deviation (of the latent function) at the rows of ``z``."""
        ks = self._k(z / self.hyper.lengths, self._xs)
        mu = ks @ self._a
        v = solve_triangular(self._chol, ks.T, lower=True, check_finite=False)
        var = np.maximum(self.hyper.amplitude - (v * v).sum(0), 1e-12)
        return self.mean + self.scale * mu, self.scale * np.sqrt(var)

    def predict_grad(self, z: Array) -> tuple[float, float, Array, Array]:
        """Mean, standard deviation and their gradients at one point ``z``."""
        lengths = self.hyper.lengths
        diff = (z / lengths)[None, :] - self._xs  # (n, d) in scaled units
        r = np.sqrt((diff * diff).sum(1))
        k, g = _matern(r, self.nu)
        ks = self.hyper.amplitude * k
        dks = -(self.hyper.amplitude * g)[:, None] * diff / lengths[None, :]  # d k(z, x_i) / d z, (n, d)
        mu = float(ks @ self._a)
        kinv_ks = cho_solve((self._chol, True), ks, check_finite=False)
        var = max(self.hyper.amplitude - float(ks @ kinv_ks), 1e-12)
        sd = math.sqrt(var)
        dmu = dks.T @ self._a
        dvar = -2.0 * (dks.T @ kinv_ks)
        dsd = dvar / (2.0 * sd)
        return self.mean + self.scale * mu, self.scale * sd, self.scale * dmu, self.scale * dsd


def fit_gp(obs: Observations, nu: float = 2.5, alpha: float = 1e-6) -> GPModel:
    """Fit a GP to the observations, within the cost caps of the module docstring."""
    keep = best_and_recent(obs.y, MODEL_POINTS)
    x, y = obs.x[keep], obs.y[keep]
    mean = float(y.mean())
    scale = float(y.std())
    if not math.isfinite(scale) or scale <= 1e-12 * max(1.0, abs(mean)):
        scale = 1.0
    sub = _best_and_spread(y, FIT_POINTS)
    hyper = _fit_hyper(x[sub], (y[sub] - mean) / scale, nu, alpha)
    model = GPModel(x, y, hyper, nu, alpha, mean, scale)
    model.source = keep
    return model


# --------------------------------------------------------------------------------------------------
# the tuner


class GPArgs(TunerArgs):
    """NNI ``GP`` classArgs."""

    optimize_mode: Literal["maximize", "minimize"] = "maximize"
    utility: Utility = "ei"
    kappa: float = Field(default=5.0, ge=0, description="UCB exploration weight")
    xi: float = Field(default=0.0, ge=0, description="EI/POI improvement margin, in metric units")
    nu: float = Field(default=2.5, gt=0, description="Matérn smoothness (0.5, 1.5, 2.5 fast; inf = RBF)")
    alpha: float = Field(default=1e-6, gt=0, description="jitter added to the kernel diagonal")
    cold_start_num: int = Field(default=10, ge=0, description="random proposals before the model")
    selection_num_warm_up: int = Field(default=100000, ge=1)
    selection_num_starting_points: int = Field(default=250, ge=0)
    seed: int | None = None  # overrides the experiment's seed when set


class GPTuner(BayesianTuner[GPArgs, GPModel]):
    """Gaussian-process Bayesian optimisation; see the module docstring."""

    Args: ClassVar[type[TunerArgs]] = GPArgs
    name: ClassVar[str] = "GP"

    def __init__(self, args: GPArgs | None = None) -> None:
        super().__init__(args or GPArgs())

    def fit(self, enc: UnitEncoding, obs: Observations, seed: int) -> GPModel | None:
        args = self.args
        if enc.d > 0 and obs.n >= max(args.cold_start_num, MIN_OBSERVATIONS):
            return fit_gp(obs, args.nu, args.alpha)
        return None

    def propose(self, model: GPModel, step: Step) -> Params | None:
        args = self.args
        model = model.with_liars(step.fantasies, step.liar)
        best = step.best
        candidates, _ = maximize_in_cube(
            step.enc,
            acquisition_score(model, args.utility, best, args.kappa, args.xi),
            acquisition_score_grad(model, args.utility, best, args.kappa, args.xi),
            step.rng(_STREAM_ACQ),
            warm_up_size(args.selection_num_warm_up, step.enc.d),
            min(args.selection_num_starting_points, STARTS_CAP),
            best_centres(step.obs),
        )
        return select_new(step.enc, candidates, self._dedup)
