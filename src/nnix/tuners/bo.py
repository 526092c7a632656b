"""The Bayesian-optimisation toolkit shared by GP, Metis and DNGO: the search space as the unit cube,
the history as observations, acquisition functions and their maximisation, and a small skeleton
(:class:`BayesianTuner`) that each tuner fills in with its model and its proposal.

* **Encoding.** :class:`UnitEncoding` is the shared space transform (:mod:`nnix.tuners.transform`)
  with every parameter in ``[0, 1]``: uniform types linearly, log types in log space, ``randint`` and
  numeric ``choice`` as ordered levels (``choice`` options sorted by value), q-types relaxed and snapped
  to their grid.
* **History.** :func:`collect`: a record with a finite final value is an observation whatever its
  status (``y`` to be maximised); a trial not yet ended is a pending point; anything else is ignored.
* **Acquisition.** Expected improvement, upper confidence bound, probability of improvement, with
  their derivatives (:func:`acquisition`); :func:`maximize_in_cube` scores random warm-up points plus
  perturbations of the best observations and refines the best few with L-BFGS-B.
* **The same on every CPU** (:mod:`nnix.tuners.stable`): candidates and observations are ranked on a
  grid, so a choice does not hang on the last bits of a score, and the encoding's :meth:`~UnitEncoding.snap`
  rounds the points it proposes to nine decimals.
* **Skeleton.** :class:`BayesianTuner` holds the proposal loop: random draws until the model is ready,
  an optional queue of replays, a constant liar (the worst observed value) for running trials and for the
  earlier proposals of the batch, deduplication of discrete spaces, and
  :class:`~nnix.errors.NoMoreTrialsError` when a discrete space is exhausted.
"""

from __future__ import annotations

import contextlib
import importlib
import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Literal, Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray
from scipy.linalg import LinAlgError
from scipy.optimize import minimize
from scipy.special import ndtr

from nnix.errors import SearchSpaceError
from nnix.model.trials import Direction, TrialRecord
from nnix.space import Params, SearchSpace
from nnix.tuners.base import TunerArgs, TunerContext, rng_for
from nnix.tuners.dedup import Deduplicator, exhausted
from nnix.tuners.stable import OBS_DIGITS, order_desc, settle
from nnix.tuners.transform import SpaceTransform, unsupported

__all__ = [
    "GP_TYPES",
    "BayesianTuner",
    "EncodingCache",
    "GradientSurrogate",
    "Observations",
    "Step",
    "Surrogate",
    "UnitEncoding",
    "acquisition",
    "acquisition_score",
    "acquisition_score_grad",
    "best_and_recent",
    "best_centres",
    "candidate_points",
    "collect",
    "exhausted",
    "maximize_in_cube",
    "propose_random",
    "select_new",
    "single_threaded_blas",
    "warm_up_size",
]

Array = NDArray[np.float64]

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

GP_TYPES = frozenset({"choice", "randint", "uniform", "quniform", "loguniform", "qloguniform"})

# --------------------------------------------------------------------------------------------------
# the unit cube


class UnitEncoding(SpaceTransform):
    """A numeric search space as the unit cube ``[0, 1]^d`` (see the module docstring).

    Raises :class:`SearchSpaceError` naming every parameter ``tuner`` cannot model.
    """

    def __init__(self, space: SearchSpace, tuner: str, supported: Collection[str] = GP_TYPES) -> None:
        allowed = ", ".join(t if t != "choice" else "choice (numeric options)" for t in sorted(supported))
        nested_hint = "flatten the search space, or use TPE, Random, Anneal or Evolution"
        issues = unsupported(space, tuner, supported, numeric_choice=True, nested_hint=nested_hint, allowed=allowed)
        if issues:
            raise SearchSpaceError(issues)
        super().__init__(space, randint="ordinal", choice="ordered")
        self.dims = self.columns

    @property
    def d(self) -> int:
        return len(self.dims)

    def encode(self, params: Any) -> Array | None:
        """The unit-cube point of a parameter set (values outside the bounds are clipped); None when
        it is not a point of this space's shape (a missing key, a non-number, an unknown option)."""
        return self.to_unit(params)

    def decode(self, u: Array) -> Params:
        """The parameter set at unit-cube point ``u`` (always a valid point of the space)."""
        return self.from_unit(u)

    def snap(self, points: Array) -> Array:
        """Each row moved to the point that would really be proposed (levels, q grids, bounds), rounded
        to :data:`~nnix.tuners.stable.UNIT_DECIMALS` decimals (the same point on every machine)."""
        return settle(self.snap_unit(points))

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


def best_and_recent(y: Array, cap: int) -> NDArray[np.int64]:
    """Indices of at most ``cap`` observations: the best half of the cap, then the most recent others."""
    n = y.shape[0]
    if n <= cap:
        return np.arange(n)
    best = order_desc(y, OBS_DIGITS)[: cap // 2]
    rest = np.setdiff1d(np.arange(n), best)[-(cap - best.shape[0]) :]
    return np.sort(np.concatenate([best, rest]))


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


class Surrogate(Protocol):
    """A model of the metric in the unit cube (``y`` to be maximised)."""

    def predict(self, z: Array) -> tuple[Array, Array]:
        """Mean and standard deviation at the rows of ``z``."""
        ...


class GradientSurrogate(Surrogate, Protocol):
    def predict_grad(self, z: Array) -> tuple[float, float, Array, Array]:
        """Mean, standard deviation and their gradients at one point ``z``."""
        ...


def acquisition_score(model: Surrogate, utility: Utility, best: float, kappa: float = 0.0, xi: float = 0.0) -> Score:
    """The acquisition of ``model`` at the rows of a matrix."""

    def score(z: Array) -> Array:
        mu, sd = model.predict(z)
        return acquisition(utility, mu, sd, best, kappa, xi)[0]

    return score


def acquisition_score_grad(
    model: GradientSurrogate, utility: Utility, best: float, kappa: float = 0.0, xi: float = 0.0
) -> ScoreGrad:
    """The acquisition of ``model`` and its gradient at one point."""

    def score_grad(z: Array) -> tuple[float, Array]:
        mu, sd, dmu, dsd = model.predict_grad(z)
        value, da, db = acquisition(utility, np.array([mu]), np.array([sd]), best, kappa, xi)
        return float(value[0]), float(da[0]) * dmu + float(db[0]) * dsd

    return score_grad


def best_centres(obs: Observations) -> Array:
    """The best ``LOCAL_CENTRES`` observations, best first: where local candidates are drawn."""
    centres: Array = obs.x[order_desc(obs.y, OBS_DIGITS)[:LOCAL_CENTRES]]
    return centres


def candidate_points(enc: UnitEncoding, rng: np.random.Generator, count: int, centres: Array) -> Array:
    """``count`` random points of the cube plus ``LOCAL_POINTS`` perturbations of ``centres`` (when
    there are any), snapped to proposable points."""
    d = enc.d
    parts = [rng.random((count, d))]
    if centres.shape[0]:
        picks = centres[rng.integers(centres.shape[0], size=LOCAL_POINTS)]
        parts.append(np.clip(picks + LOCAL_SCALE * rng.standard_normal((LOCAL_POINTS, d)), 0.0, 1.0))
    return enc.snap(np.vstack(parts))


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
    cand = candidate_points(enc, rng, max(1, warm_up), centres)
    values = score(cand)
    if score_grad is not None and starts > 0:
        refined: list[Array] = []
        seen: set[bytes] = set()
        for i in order_desc(values):
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
    order = order_desc(values)
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
    return dedup.first_new(space, seed, pid)


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


# --------------------------------------------------------------------------------------------------
# the skeleton


@dataclass(frozen=True)
class Step:
    """What one model-based proposal sees: the encoding, the observations, the pending points and the
    batch's earlier proposals (``fantasies``, to be modelled with the value ``liar``), and its id."""

    enc: UnitEncoding
    obs: Observations
    fantasies: tuple[Array, ...]
    liar: float
    seed: int
    pid: int

    @property
    def best(self) -> float:
        """The best observed value (to be maximised)."""
        return float(self.obs.y.max())

    def rng(self, stream: int) -> np.random.Generator:
        return rng_for(self.seed, self.pid, stream)


class _SeededArgs(Protocol):
    @property
    def seed(self) -> int | None: ...


A = TypeVar("A", bound=_SeededArgs)
M = TypeVar("M")


class BayesianTuner(Generic[A, M]):
    """The proposal loop of a Bayesian-optimisation tuner (see the module docstring).

    A tuner names itself (``name``, for errors), lists the types it models (``supported``) and fills in
    :meth:`fit` (its model of the observations, None while it is not ready: random proposals) and
    :meth:`propose` (one proposal from the model, the pending points and the batch's earlier
    proposals as ``fantasies`` with the value ``liar``); optionally :meth:`replays` (parameter sets to
    propose again, verbatim, before anything else).
    """

    Args: ClassVar[type[TunerArgs]]
    heavy: ClassVar[bool] = True
    name: ClassVar[str]
    supported: ClassVar[Collection[str]] = GP_TYPES

    def __init__(self, args: A) -> None:
        self.args = args
        self._dedup = Deduplicator()
        self._cache = EncodingCache()

    def fit(self, enc: UnitEncoding, obs: Observations, seed: int) -> M | None:
        raise NotImplementedError

    def propose(self, model: M, step: Step) -> Params | None:
        raise NotImplementedError

    def replays(self, ctx: TunerContext, obs: Observations, model: M) -> list[Params]:
        return []

    def suggest(self, ctx: TunerContext, parameter_ids: Sequence[int]) -> list[Params]:
        with single_threaded_blas():
            return self._suggest(ctx, parameter_ids)

    def _suggest(self, ctx: TunerContext, parameter_ids: Sequence[int]) -> list[Params]:
        if not parameter_ids:
            return []
        enc = UnitEncoding(ctx.space, self.name, self.supported)
        seed = self.args.seed if self.args.seed is not None else ctx.seed
        self._dedup.begin(ctx)
        obs = collect(ctx.history, enc, ctx.direction, self._cache)
        model = self.fit(enc, obs, seed)
        liar = float(obs.y.min()) if obs.n else 0.0
        fantasies: list[Array] = list(obs.pending)
        queue = self.replays(ctx, obs, model) if model is not None else []
        out: list[Params] = []
        for pid in parameter_ids:
            params: Params | None
            if queue:
                params = queue.pop(0)
            elif model is None:
                params = propose_random(ctx.space, seed, pid, self._dedup)
            else:
                params = self.propose(model, Step(enc, obs, tuple(fantasies), liar, seed, pid))
            if not self._dedup.accept(out, params):
                break
            assert params is not None
            u = enc.encode(params)
            if u is not None:
                fantasies.append(u)
        return out
