"""Gaussian-process Bayesian optimisation (NNI ``GP``, alias ``GPTuner``).

The model is a Gaussian process written with numpy/scipy (no scikit-learn): a constant mean, a
Matérn kernel with smoothness ``nu`` (closed forms for 0.5, 1.5, 2.5 and ``inf`` = RBF, the Bessel
form otherwise) and one length scale per parameter (ARD), a learned noise variance plus the fixed
jitter ``alpha``. The amplitude, length scales and noise maximise the marginal likelihood (analytic
gradient, L-BFGS-B from the best of six fixed starting points, so the fit is a pure function of the
data).
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

import contextlib
import importlib
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import Field
from scipy.linalg import LinAlgError, cho_solve, cholesky, solve_triangular
from scipy.optimize import minimize
from scipy.special import gamma as gamma_fn
from scipy.special import kv, ndtr

from nnix.errors import FieldIssue, NoMoreTrialsError, SearchSpaceError
from nnix.space import Param, Params, SearchSpace, sample
from nnix.tuners.base import Direction, TrialRecord, TunerArgs, TunerContext, rng_for
from nnix.tuners.dedup import Deduplicator

__all__ = [
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

Array = NDArray[np.float64]

MODEL_POINTS = 300  # observations the posterior is conditioned on
FIT_POINTS = 100  # observations the hyper-parameters are fitted on
WARM_UP_CAP = 2000  # random warm-up points (selection_num_warm_up is capped to this) ...
WARM_UP_BASE, WARM_UP_PER_DIM = 500, 150  # ... and to this many plus this many per parameter


def warm_up_size(requested: int, d: int) -> int:
    """How many random warm-up points a proposal scores (the cap of the module docstring)."""
    return max(1, min(requested, WARM_UP_CAP, WARM_UP_BASE + WARM_UP_PER_DIM * d))


LOCAL_POINTS = 200  # perturbations of the best observations added to the warm-up points
LOCAL_CENTRES = 5  # ... around this many best observations
LOCAL_SCALE = 0.05  # ... with this standard deviation in the unit cube
STARTS_CAP = 5  # L-BFGS-B refinements (selection_num_starting_points is capped to this)
LOCAL_ITERATIONS = 30  # iterations of each refinement
MIN_OBSERVATIONS = 2  # the model needs at least this many observations, whatever cold_start_num says
FIT_ITERATIONS = 50  # L-BFGS-B iterations of the hyper-parameter fit
_RANDOM_DRAWS = 8  # random draws per random proposal before falling back to the grid (discrete spaces)

_STREAM_ACQ = 1  # random stream of a proposal's warm-up points

GP_TYPES = frozenset({"choice", "randint", "uniform", "quniform", "loguniform", "qloguniform"})


# --------------------------------------------------------------------------------------------------
# the unit cube


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


@dataclass(frozen=True)
class _Dim:
    param: Param
    levels: int  # 0: continuous; otherwise the number of ordered levels (randint, numeric choice)
    lo: float = 0.0  # continuous: internal bounds (logs for log types)
    hi: float = 1.0
    order: tuple[int, ...] = ()  # choice: option indices sorted by value
    values: tuple[float, ...] = ()  # choice: option values in that order


class UnitEncoding:
    """A numeric search space as the unit cube ``[0, 1]^d`` (see the module docstring).

    Raises :class:`SearchSpaceError` naming every parameter ``tuner`` cannot model.
    """

    def __init__(self, space: SearchSpace, tuner: str, supported: Collection[str] = GP_TYPES) -> None:
        issues: list[FieldIssue] = []
        dims: list[_Dim] = []
        allowed = ", ".join(t if t != "choice" else "choice (numeric options)" for t in sorted(supported))
        for p in space.params:
            path = "searchSpace." + ".".join(str(k) for k in p.key)
            if p.nested:
                issues.append(
                    FieldIssue(
                        path,
                        f"{tuner} does not support nested choice",
                        "flatten the search space, or use TPE, Random, Anneal or Evolution",
                    )
                )
                continue
            if p.type not in supported:
                issues.append(FieldIssue(path, f"{tuner} does not support {p.type!r}", f"supported types: {allowed}"))
                continue
            if p.type == "choice":
                bad = [o for o in p.choices if not _is_number(o) or not math.isfinite(o)]
                if bad:
                    issues.append(
                        FieldIssue(
                            path,
                            f"{tuner} supports only numeric choice options, got {bad[0]!r}",
                            "use numbers (e.g. 0, 1, 2) and map them to your values in the trial code, or use TPE",
                        )
                    )
                    continue
                order = tuple(sorted(range(len(p.choices)), key=lambda i: (float(p.choices[i]), i)))
                dims.append(_Dim(p, len(order), order=order, values=tuple(float(p.choices[i]) for i in order)))
            elif p.type == "randint":
                dims.append(_Dim(p, int(p.size or 1)))
            else:
                lo, hi = p.internal_bounds()
                dims.append(_Dim(p, 0, lo, hi))
        if issues:
            raise SearchSpaceError(issues)
        self.space = space
        self.dims: tuple[_Dim, ...] = tuple(dims)

    @property
    def d(self) -> int:
        return len(self.dims)

    def encode(self, params: Any) -> Array | None:
        """The unit-cube point of a parameter set (values outside the bounds are clipped); None when
        it is not a point of this space's shape (a missing key, a non-number, an unknown option)."""
        if not isinstance(params, Mapping):
            return None
        u = np.empty(self.d)
        for j, dim in enumerate(self.dims):
            raw = params.get(dim.param.name)
            if not isinstance(raw, (int, float, np.integer, np.floating)) or isinstance(raw, (bool, np.bool_)):
                return None
            v = float(raw)
            if not math.isfinite(v):
                return None
            if dim.levels == 0:
                if dim.param.log:
                    if v <= 0:
                        return None
                    v = math.log(v)
                u[j] = (v - dim.lo) / (dim.hi - dim.lo)
            elif dim.param.type == "randint":
                index = v - float(dim.param.low or 0)
                u[j] = (min(max(math.floor(index), 0), dim.levels - 1) + 0.5) / dim.levels
            else:
                matches = [k for k, x in enumerate(dim.values) if x == v]
                if not matches:
                    return None
                u[j] = (matches[0] + 0.5) / dim.levels
        return np.clip(u, 0.0, 1.0)

    def decode(self, u: Array) -> Params:
        """The parameter set at unit-cube point ``u`` (always a valid point of the space)."""
        out: Params = {}
        for j, dim in enumerate(self.dims):
            x = min(max(float(u[j]), 0.0), 1.0)
            p = dim.param
            if dim.levels == 0:
                out[p.name] = p.from_internal(dim.lo + x * (dim.hi - dim.lo))
            else:
                index = min(int(x * dim.levels), dim.levels - 1)
                out[p.name] = int(p.low or 0) + index if p.type == "randint" else p.choice_value(dim.order[index])
        return out

    def snap(self, points: Array) -> Array:
        """Each row moved to the point that would really be proposed (levels, q grids, bounds)."""
        out = np.clip(points, 0.0, 1.0)
        for j, dim in enumerate(self.dims):
            col = out[:, j]
            if dim.levels:
                out[:, j] = (np.minimum(np.floor(col * dim.levels), dim.levels - 1) + 0.5) / dim.levels
            elif dim.param.q is not None:
                low, high, q = float(dim.param.low or 0), float(dim.param.high or 0), dim.param.q
                x = dim.lo + col * (dim.hi - dim.lo)
                v = np.exp(x) if dim.param.log else x
                v = np.clip(np.round(v / q) * q, low, high)
                x = np.log(v) if dim.param.log else v
                out[:, j] = np.clip((x - dim.lo) / (dim.hi - dim.lo), 0.0, 1.0)
        return out

    def snap_one(self, u: Array) -> Array:
        snapped: Array = self.snap(u[None, :])[0]
        return snapped


# --------------------------------------------------------------------------------------------------
# the history


@dataclass(frozen=True)
class Observations:
    """The history in the unit cube: ``x``/``y`` the observations (``y`` to be maximised), ``pending``
    the running and waiting trials."""

    x: Array
    y: Array
    pending: Array
    positions: NDArray[np.int64]  # each observation's index in the history

    @property
    def n(self) -> int:
        return int(self.x.shape[0])


def collect(
    history: Sequence[TrialRecord], enc: UnitEncoding, direction: Direction, cache: EncodingCache | None = None
) -> Observations:
    """Observations (records with a finite final value, any status) and pending points (trials not
    yet ended, without a value); records that are not points of the space are skipped."""
    sign = 1.0 if direction is Direction.MAXIMIZE else -1.0
    points = cache.encode_all(history, enc) if cache is not None else [enc.encode(r.params) for r in history]
    xs: list[Array] = []
    ys: list[float] = []
    positions: list[int] = []
    pending: list[Array] = []
    for i, (r, u) in enumerate(zip(history, points, strict=True)):
        if u is None:
            continue
        if r.value is not None and math.isfinite(r.value):
            xs.append(u)
            ys.append(sign * float(r.value))
            positions.append(i)
        elif not r.status.is_terminal:
            pending.append(u)
    d = enc.d
    return Observations(
        x=np.array(xs, dtype=float).reshape(-1, d),
        y=np.array(ys, dtype=float),
        pending=np.array(pending, dtype=float).reshape(-1, d),
        positions=np.array(positions, dtype=np.int64),
    )


class EncodingCache:
    """The unit-cube points of a history's parameter sets, extended while the history grows.

    A cache only: :meth:`encode_all` answers what ``enc.encode`` would for every record.
    """

    def __init__(self) -> None:
        self._space: SearchSpace | None = None
        self._records: list[TrialRecord] = []
        self._points: list[Array | None] = []

    def encode_all(self, history: Sequence[TrialRecord], enc: UnitEncoding) -> list[Array | None]:
        same_space = self._space is enc.space
        extends = same_space and len(history) >= len(self._records)
        if extends:
            for old, new in zip(self._records, history, strict=False):
                if old is not new and (old.parameter_id != new.parameter_id or old.params != new.params):
                    extends = False
                    break
        if not extends:
            self._space, self._records, self._points = enc.space, [], []
        for record in history[len(self._records) :]:
            self._records.append(record)
            self._points.append(enc.encode(record.params))
        return list(self._points)


def _best_and_recent(y: Array, cap: int) -> NDArray[np.int64]:
    """Indices of at most ``cap`` observations: the best half of the cap, then the most recent others."""
    n = y.shape[0]
    if n <= cap:
        return np.arange(n)
    best = np.argsort(-y, kind="stable")[: cap // 2]
    rest = np.setdiff1d(np.arange(n), best)[-(cap - best.shape[0]) :]
    return np.sort(np.concatenate([best, rest]))


def _best_and_spread(y: Array, cap: int) -> NDArray[np.int64]:
    """Indices of at most ``cap`` observations: the best fifth of the cap, then an even spread of the others."""
    n = y.shape[0]
    if n <= cap:
        return np.arange(n)
    best = np.argsort(-y, kind="stable")[: cap // 5]
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
    d2 = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T
    out: Array = np.maximum(d2, 0.0)
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
_LOG_NOISE = (math.log(1e-6), math.log(1.0))
_START_LENGTHS = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6)  # screened starting length scales of the fit


def _fit_hyper(x: Array, y: Array, nu: float, alpha: float) -> Hyper:
    """Maximise the marginal likelihood of standardised ``y`` from the best of a few fixed starts."""
    n, d = x.shape
    diffs2 = (x[:, None, :] - x[None, :, :]) ** 2  # (n, n, d)
    diffs2 = np.moveaxis(diffs2, 2, 0)  # (d, n, n)
    eye = np.eye(n)
    half_log_2pi = 0.5 * n * math.log(2.0 * math.pi)

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
        return value, grad

    bounds = [_LOG_AMP] + [_LOG_LEN] * d + [_LOG_NOISE]
    # screen a few fixed starting points with one evaluation each; refine only the best one
    starts = [np.array([0.0] + [math.log(length)] * d + [math.log(1e-3)]) for length in _START_LENGTHS]
    theta = min(starts, key=lambda t: nll(t)[0])
    try:
        res = minimize(nll, theta, jac=True, method="L-BFGS-B", bounds=bounds, options={"maxiter": FIT_ITERATIONS})
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
    keep = _best_and_recent(obs.y, MODEL_POINTS)
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
# acquisition


Utility = Literal["ei", "ucb", "poi"]


def _phi(z: Array) -> Array:
    out: Array = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    return out


def acquisition(
    utility: Utility, mu: Array, sd: Array, best: float, kappa: float, xi: float
) -> tuple[Array, Array, Array]:
    """Value of the acquisition and its derivatives with respect to ``mu`` and ``sd`` (maximisation)."""
    if utility == "ucb":
        return mu + kappa * sd, np.ones_like(mu), np.full_like(sd, kappa)
    z = (mu - best - xi) / sd
    cdf, pdf = ndtr(z), _phi(z)
    if utility == "poi":
        return cdf, pdf / sd, -z * pdf / sd
    return (mu - best - xi) * cdf + sd * pdf, cdf, pdf


Score = Callable[[Array], Array]
ScoreGrad = Callable[[Array], tuple[float, Array]]


def maximize_in_cube(
    enc: UnitEncoding,
    score: Score,
    score_grad: ScoreGrad | None,
    rng: np.random.Generator,
    warm_up: int,
    starts: int,
    centres: Array,
) -> tuple[Array, Array]:
    """Candidates (snapped to proposable points) and their scores, best first: ``warm_up`` random
    points, ``LOCAL_POINTS`` perturbations of ``centres``, and L-BFGS-B refinements of the best
    ``starts`` of those (when ``score_grad`` is given)."""
    d = enc.d
    parts = [rng.random((max(1, warm_up), d))]
    if centres.shape[0]:
        picks = centres[rng.integers(centres.shape[0], size=LOCAL_POINTS)]
        parts.append(np.clip(picks + LOCAL_SCALE * rng.standard_normal((LOCAL_POINTS, d)), 0.0, 1.0))
    cand = enc.snap(np.vstack(parts))
    values = score(cand)
    if score_grad is not None and starts > 0:
        refined: list[Array] = []
        seen: set[bytes] = set()
        for i in np.argsort(-values, kind="stable"):
            if len(seen) >= starts:
                break
            start = cand[i]
            tag = start.round(6).tobytes()
            if tag in seen:
                continue
            seen.add(tag)

            def neg(z: Array) -> tuple[float, Array]:
                v, g = score_grad(z)
                return -v, -g

            try:
                res = minimize(
                    neg,
                    start,
                    jac=True,
                    method="L-BFGS-B",
                    bounds=[(0.0, 1.0)] * d,
                    options={"maxiter": LOCAL_ITERATIONS},
                )
                refined.append(enc.snap_one(np.asarray(res.x, dtype=float)))
            except (ValueError, LinAlgError, FloatingPointError):
                continue
        if refined:
            extra = np.array(refined)
            cand = np.vstack([extra, cand])
            values = np.concatenate([score(extra), values])
    values = np.where(np.isfinite(values), values, -np.inf)
    order = np.argsort(-values, kind="stable")
    return cand[order], values[order]


def select_new(enc: UnitEncoding, candidates: Array, dedup: Deduplicator, limit: int = 256) -> Params | None:
    """The first of ``candidates`` (best first) that is new to the history and batch (discrete spaces),
    then the first unused grid point; None when the space is exhausted."""
    for u in candidates[:limit] if dedup.active else candidates[:1]:
        params = enc.decode(u)
        if dedup.is_new(params):
            return params
    return dedup.next_unseen()


def propose_random(space: SearchSpace, seed: int, pid: int, dedup: Deduplicator) -> Params | None:
    """A random point (NNI's warm-up), new to the history when duplicates are possible."""
    rng = rng_for(seed, pid)
    for _ in range(_RANDOM_DRAWS):
        params = sample(space, rng)
        if dedup.is_new(params):
            return params
    return dedup.next_unseen()


def single_threaded_blas() -> contextlib.AbstractContextManager[object]:
    """BLAS limited to one thread while a suggestion is computed, when ``threadpoolctl`` is installed.

    The matrices here are small (at most a few hundred rows): extra BLAS threads only add
    synchronisation, and on a busy machine OpenBLAS's spinning threads can make a suggestion ten
    times slower. Without ``threadpoolctl`` this is a no-op.
    """
    try:
        module = importlib.import_module("threadpoolctl")
    except ImportError:
        return contextlib.nullcontext()
    limits: contextlib.AbstractContextManager[object] = module.threadpool_limits(limits=1, user_api="blas")
    return limits


def exhausted() -> NoMoreTrialsError:
    return NoMoreTrialsError(
        "search space fully explored",
        "every point of this discrete search space has been tried; widen the search space or stop the experiment",
    )


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


class GPTuner:
    """Gaussian-process Bayesian optimisation; see the module docstring."""

    Args: ClassVar[type[TunerArgs]] = GPArgs
    heavy: ClassVar[bool] = True

    def __init__(self, args: GPArgs | None = None) -> None:
        self.args = args or GPArgs()
        self._dedup = Deduplicator()
        self._cache = EncodingCache()

    def suggest(self, ctx: TunerContext, parameter_ids: Sequence[int]) -> list[Params]:
        with single_threaded_blas():
            return self._suggest(ctx, parameter_ids)

    def _suggest(self, ctx: TunerContext, parameter_ids: Sequence[int]) -> list[Params]:
        if not parameter_ids:
            return []
        args = self.args
        enc = UnitEncoding(ctx.space, "GP")
        seed = args.seed if args.seed is not None else ctx.seed
        self._dedup.begin(ctx)
        obs = collect(ctx.history, enc, ctx.direction, self._cache)
        model_ready = enc.d > 0 and obs.n >= max(args.cold_start_num, MIN_OBSERVATIONS)
        model = fit_gp(obs, args.nu, args.alpha) if model_ready else None
        liar = float(obs.y.min()) if obs.n else 0.0
        fantasies: list[Array] = list(obs.pending)
        out: list[Params] = []
        for pid in parameter_ids:
            if model is None:
                params = propose_random(ctx.space, seed, pid, self._dedup)
            else:
                params = self._propose(enc, model, obs, fantasies, liar, rng_for(seed, pid, _STREAM_ACQ))
            if params is None:
                if not out:
                    raise exhausted()
                break
            self._dedup.take(params)
            out.append(params)
            u = enc.encode(params)
            if u is not None:
                fantasies.append(u)
        return out

    def _propose(
        self,
        enc: UnitEncoding,
        model: GPModel,
        obs: Observations,
        fantasies: list[Array],
        liar: float,
        rng: np.random.Generator,
    ) -> Params | None:
        args = self.args
        if fantasies:
            model = model.condition(np.array(fantasies), np.full(len(fantasies), liar))
        best = float(obs.y.max())
        utility: Utility = args.utility

        def score(z: Array) -> Array:
            mu, sd = model.predict(z)
            return acquisition(utility, mu, sd, best, args.kappa, args.xi)[0]

        def score_grad(z: Array) -> tuple[float, Array]:
            mu, sd, dmu, dsd = model.predict_grad(z)
            value, da, db = acquisition(utility, np.array([mu]), np.array([sd]), best, args.kappa, args.xi)
            return float(value[0]), float(da[0]) * dmu + float(db[0]) * dsd

        centres = obs.x[np.argsort(-obs.y, kind="stable")[:LOCAL_CENTRES]]
        candidates, _ = maximize_in_cube(
            enc,
            score,
            score_grad,
            rng,
            warm_up_size(args.selection_num_warm_up, enc.d),
            min(args.selection_num_starting_points, STARTS_CAP),
            centres,
        )
        return select_new(enc, candidates, self._dedup)
