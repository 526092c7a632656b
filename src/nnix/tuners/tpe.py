"""Tree-structured Parzen Estimator (NNI ``TPE``; ``TPE_legacy`` maps here too).

The algorithm (Bergstra et al., 2011): the finished trials are split by loss into a small "good"
set and the rest; each set is modelled by a Parzen mixture (one kernel per observation plus a
prior kernel); candidates are drawn from the good mixture ``l`` and the one maximising
``log l(x) - log g(x)`` is proposed (ratios ranked on a grid, :mod:`nnix.tuners.stable`, so that a near-tie
is not decided by the CPU's rounding). Everything is recomputed from ``ctx.history`` on each call
(the only cache holds per-record facts: the encoding of past parameter sets, their values and
statuses, extended while the history grows -- from a History of the same lineage that logs its
replaced records, in O(new + replaced records); work arrays are reused but carry nothing from one
call to the next), so a fresh tuner proposes the same. Randomness comes only from
``rng_for(seed, parameter_id)``.

classArgs (NNI's): ``optimize_mode`` (``minimize``), ``seed`` (overrides the experiment's seed) and
``tpe_args``: ``constant_liar_type`` (``best``; ``worst``, ``mean`` or null), ``n_startup_jobs``,
``n_ei_candidates`` (24), ``linear_forgetting`` (25), ``prior_weight`` (1.0) and ``gamma``; the good
set holds ``min(ceil(gamma * sqrt(n)), linear_forgetting)`` of ``n`` observations, as in NNI.

Model
-----
* Numeric parameters live in internal space (logs for log types). Bounded ones (the uniform family)
  have a normal prior centred mid-range with sigma = range, truncated to the bounds; the normal
  family keeps its own ``N(mu, sigma)`` prior, untruncated. Quantised types are modelled as
  continuous and rounded on output. A kernel is as wide as the larger gap to its sorted neighbours,
  at most the prior's sigma and at least ``range / min(100, n + 2)``. ``choice`` is categorical: an
  observation's kernel keeps its option with weight 1 and spreads ``prior_weight`` over all
  options; the prior kernel is uniform.
* Observation weights follow linear forgetting (the oldest observations beyond the newest
  ``linear_forgetting`` ramp from ``1/n`` up to 1); the prior kernel weighs ``prior_weight``.
* Nested choices split the space into *groups*: the top-level parameters, and for every option of a
  nested choice the sub-parameters of that option. A group is modelled from the trials in which it
  was active; until a group has ``n_startup_jobs`` observations its parameters are drawn at random.
* A record is an observation when it carries a final value (negative parameter ids are imported
  results and count like any other); a metric of 0 is data. A failed or cancelled trial without a
  value adds nothing. Trials still running or waiting get a *constant liar* value (the best, worst
  or mean observed loss; 0 when nothing is observed yet), and so do the proposals made earlier in
  the same batch, so concurrent proposals spread out. Liars never count as startup observations.
* **Long histories.** The bad mixture stands on at most ``BAD_WINDOW`` (1024) observations: the
  newest 512 as they are, and one per stratum of the older ones (512 strata of consecutive
  observations, the middle one weighing its whole stratum's forgetting weight), so a proposal costs
  about the same at 20,000 or 100,000 trials as at 1,000; the good set and the narrowest kernel
  still count every observation. With fewer bad observations nothing changes (bit for bit). Where every
  observation is a member of the top group (no NaN there), the good set is found by position and the
  window by rank, with no mask of the whole history: besides the window, a proposal costs a few passes
  over one value per observation (``bench/tuner_scale.py``, 2-core loaded: 1.3-2.7 ms at 20,000, 1.9-2.5 ms
  at 100,000). Effect (``bench/quality.py --tpe-window``, median best of 9 seeds after 500 trials, gap to the optimum
  relative to no window): a window of 256 (half the history) 1.27 on Branin (0.39794 vs 0.39789),
  0.32 on the mixed space, 0.95 on Hartmann6; of 16, 13.8, 2.5 and 1.55: thinning hurts only when
  the window is a small fraction of a short history.
* Discrete spaces (every top-level parameter categorical or quantised) are deduplicated as NNI
  does (:mod:`nnix.tuners.dedup`): a few redraws, then random draws, then the first unused grid
  point; :class:`~nnix.errors.NoMoreTrialsError` when the space is exhausted.

Defaults that differ from NNI's, chosen on ``bench/quality.py`` (figures: median best after 50
trials over 40 seeds, Branin (optimum 0.398) and the mixed space (optimum 0), NNI's choice -> ours):

* **multivariate**: candidates are drawn jointly from the good mixture (one kernel gives every
  coordinate of a group) and scored by the joint density; NNI draws and scores each parameter
  independently, which cannot follow a curved valley (Branin 0.52 -> 0.41);
* **narrowest kernel from all observations**: a kernel is at least ``range / min(100, n + 2)``
  wide with ``n`` all observations of the group; NNI counts only the kernel's own set, so the
  handful of good points keep kernels a sixth of the range wide and never refine (Branin 0.64 -> 0.41);
* ``n_startup_jobs`` **10** (NNI 20): the model takes over sooner (Branin 0.419 -> 0.409, mixed
  0.055 -> 0.003);
* ``gamma`` **0.5** (NNI 0.25), same rule: 4 of 50 trials are "good" instead of 2 (Branin 0.417 ->
  0.409, mixed 0.035 -> 0.003);
* ``randint`` is an ordered integer (truncated normal kernels on ``[low - 0.5, high - 0.5]``,
  rounded), not a set of unordered categories: integer parameters are nearly always ordinal
  (mixed 0.064 -> 0.003).

``TPE_legacy`` (NNI's hyperopt-based TPE) maps to :class:`TPELegacyTuner`: the same code with
NNI/hyperopt's model (independent parameters, widths within each set with the prior centre as a
neighbour, 20 startup jobs, ``gamma`` 0.25, categorical ``randint``) and hyperopt's classArgs
(``optimize_mode``, ``seed``, ``parallel_optimize``, ``constant_liar_type`` min/max/mean).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from nnix.model.status import TrialStatus
from nnix.model.trials import Direction, TrialRecord
from nnix.space import Params, SearchSpace
from nnix.tuners.base import History, TunerArgs, TunerContext
from nnix.tuners.dedup import Deduplicator, extends_records
from nnix.tuners.stable import argmax
from nnix.tuners.transform import Column, Group, SpaceTransform

__all__ = [
    "HyperoptArgs", "TPELegacyTuner", "TPETuner", "TpeArgs", "TpeLegacyTuner", "TpeSettings", "TpeTuner",
    "TpeTunerArgs",
]

Array = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_TRUNC_TRIES = 32  # rejection rounds when sampling a truncated normal (then clip)
BAD_WINDOW = 1024  # see TpeSettings.bad_window; proposals below this many bad observations are unchanged
_PENDING = frozenset(s for s in TrialStatus if not s.is_terminal)  # trials that get a constant liar


# --------------------------------------------------------------------------------------------------
# arguments


class TpeArgs(BaseModel):
    """NNI's ``tpe_args``. Unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")

    constant_liar_type: Literal["best", "worst", "mean"] | None = "best"
    n_startup_jobs: int = Field(default=10, ge=0)
    n_ei_candidates: int = Field(default=24, ge=1)
    linear_forgetting: int = Field(default=25, ge=1)
    prior_weight: float = Field(default=1.0, gt=0)
    gamma: float = Field(default=0.5, gt=0, le=1)


class TpeTunerArgs(TunerArgs):
    """NNI ``TPE`` classArgs."""

    optimize_mode: Literal["maximize", "minimize"] = "minimize"
    seed: int | None = None  # overrides the experiment's seed when set
    tpe_args: TpeArgs = Field(default_factory=TpeArgs)


class HyperoptArgs(TunerArgs):
    """classArgs of NNI's hyperopt-based tuners (``TPE_legacy``, ``Anneal``)."""

    optimize_mode: Literal["maximize", "minimize"] = "minimize"
    seed: int | None = None
    parallel_optimize: bool = False
    constant_liar_type: Literal["min", "max", "mean"] = "min"


@dataclass(frozen=True)
class TpeSettings:
    """The whole model configuration: ``tpe_args`` plus the choices NNI does not expose."""

    liar: Literal["best", "worst", "mean"] | None = "best"
    n_startup: int = 10
    n_candidates: int = 24
    linear_forgetting: int = 25
    prior_weight: float = 1.0
    gamma: float = 0.5
    multivariate: bool = True  # draw and score all parameters of a group jointly
    clip_by_all: bool = True  # narrowest kernel: range / min(100, n + 2), n = all observations, not one set's
    prior_in_gaps: bool = False  # the prior centre counts as a neighbour (hyperopt)
    ordinal_randint: bool = True  # randint as an ordered integer, not as categories
    bad_window: int = BAD_WINDOW  # the bad mixture stands on at most this many observations (_bad_window)

    @classmethod
    def from_args(cls, args: TpeArgs) -> TpeSettings:
        return cls(
            liar=args.constant_liar_type,
            n_startup=args.n_startup_jobs,
            n_candidates=args.n_ei_candidates,
            linear_forgetting=args.linear_forgetting,
            prior_weight=args.prior_weight,
            gamma=args.gamma,
        )

    def n_good(self, n: int) -> int:
        """How many of ``n`` observations form the good set: ``min(ceil(gamma * sqrt(n)), linear_forgetting)``."""
        return min(math.ceil(self.gamma * math.sqrt(n)), self.linear_forgetting, n)


# NNI's TPE_legacy (hyperopt) model
LEGACY = TpeSettings(
    n_startup=20,
    gamma=0.25,
    multivariate=False,
    clip_by_all=False,
    prior_in_gaps=True,
    ordinal_randint=False,
)


# --------------------------------------------------------------------------------------------------
# encoding: a parameter set as one row of internal values (NaN where a parameter is inactive), as the
# shared space transform gives it


class _Encoding(SpaceTransform):
    """A search space as columns and groups, with the model blocks of each group."""

    def __init__(self, space: SearchSpace, ordinal_randint: bool) -> None:
        super().__init__(space, randint="ordinal" if ordinal_randint else "categorical")
        self.ordinal_randint = ordinal_randint
        self._blocks: dict[tuple[int, bool], list[tuple[list[int], _Block]]] = {}

    def encode(self, params: Any) -> Array:
        return self.to_internal(params)

    def decode(self, row: Array) -> Params:
        return self.from_internal(row)

    def blocks(self, group: Group, joint: bool) -> list[tuple[list[int], _Block]]:
        """The blocks of ``group`` (all its columns, or one per column), with their positions in the group."""
        cache_key = (id(group), joint)
        found = self._blocks.get(cache_key)
        if found is None:
            cols = group.columns
            parts = [list(range(len(cols)))] if joint else [[j] for j in range(len(cols))]
            found = [(part, _Block.of([cols[j] for j in part])) for part in parts]
            self._blocks[cache_key] = found
        return found


class _EncodedHistory:
    """Per-record facts of a history, extended incrementally while the history grows: the encoded rows
    of the parameter sets, the values (NaN for none) and which records are pending.

    A :class:`~nnix.tuners.base.History` of the lineage of the previous call is taken at its word: the rows
    of its records are kept (their parameter sets are the same), and so are their values and statuses
    where it logs which records were replaced since (read again for those alone); nothing of it is kept.
    Otherwise all is kept while the records of the previous call are a prefix of the new ones (the same
    objects, checked in one C-level comparison; records are frozen); failing that, values and statuses are
    read again, and the rows, which depend on the parameter set alone, are kept while the previous sets are
    a prefix of the new ones (the same objects, or equal ones).
    """

    def __init__(self) -> None:
        self.encoding: _Encoding | None = None
        self._records: tuple[TrialRecord, ...] | None = ()  # None: not kept (a History was taken at its word)
        self._n = 0
        self._lineage: object | None = None
        self._mark: int | None = None  # the History's mark at the previous call (None: no log)
        self._rows: Array = np.empty((0, 0))
        self._values: Array = np.empty(0)
        self._pending: BoolArray = np.empty(0, dtype=bool)
        self.complete: BoolArray = np.empty(0, dtype=bool)  # per column: no row has a NaN there

    def update(self, enc: _Encoding, history: Sequence[TrialRecord]) -> tuple[Array, Array, BoolArray]:
        """(rows, values, pending) of ``history``: views, to be read only, valid until the next call (and
        :attr:`complete` is the history's)."""
        n, n_old = len(history), self._n
        n_rows = n_facts = n_old
        lineage = history.lineage if isinstance(history, History) else None
        refresh: Sequence[int] = ()  # records of the kept prefix whose facts are read again
        records: Sequence[TrialRecord] | None = None
        if self.encoding is enc and lineage is not None and lineage is self._lineage and n >= n_old:
            assert isinstance(history, History)
            changed = None if self._mark is None else history.replaced_since(self._mark)
            if changed is None:
                n_facts = 0
            else:
                refresh = changed
            records = history
        else:
            records = history if isinstance(history, tuple) else tuple(history)
            old_records = self._records
            # the same records as before (a caller that keeps its records): one C-level pass
            same = n_old == 0 or (
                old_records is not None and n >= n_old and records[n_old - 1] is old_records[-1]
                and extends_records(old_records, records)
            )
            if not (self.encoding is enc and same):
                n_facts = 0
                keep_rows = self.encoding is enc and old_records is not None and n >= n_old
                if keep_rows and old_records:
                    params = [r.params for r in records[:n_old]]
                    old = [r.params for r in old_records]
                    keep_rows = all(map(operator.is_, params, old)) or all(
                        a == b for a, b in zip(params, old, strict=True))
                if not keep_rows:
                    self.encoding, n_rows = enc, 0
                    self._rows = np.empty((max(64, n), enc.width))
                    self._values = np.empty(self._rows.shape[0])
                    self._pending = np.empty(self._rows.shape[0], dtype=bool)
        if n > self._rows.shape[0]:
            cap = max(2 * self._rows.shape[0], n)
            self._rows = _grown(self._rows, n_rows, cap)
            self._values = _grown(self._values, n_facts, cap)
            self._pending = _grown(self._pending, n_facts, cap)
        for i in range(n_rows, n):
            self._rows[i] = enc.encode(records[i].params)
        if n_rows == 0:
            self.complete = np.ones(enc.width, dtype=bool)
        if n_rows < n:
            self.complete &= ~np.isnan(self._rows[n_rows:n]).any(axis=0)
        if n_facts < n:
            fresh = records[n_facts:]
            self._values[n_facts:n] = np.array([r.value for r in fresh], dtype=float)  # None -> NaN
            self._pending[n_facts:n] = [r.status in _PENDING for r in fresh]
        for i in refresh:
            if i < n_facts:
                r = records[i]
                self._values[i] = math.nan if r.value is None else r.value
                self._pending[i] = r.status in _PENDING
        self._n, self._lineage = n, lineage
        self._mark = history.mark if isinstance(history, History) else None
        self._records = None if lineage is not None else tuple(records)
        return self._rows[:n], self._values[:n], self._pending[:n]


def _grown(a: NDArray[Any], n_keep: int, cap: int) -> NDArray[Any]:
    """``a`` with room for ``cap`` entries along axis 0, of which the first ``n_keep`` are kept."""
    out: NDArray[Any] = np.empty((cap, *a.shape[1:]), dtype=a.dtype)
    out[:n_keep] = a[:n_keep]
    return out


# --------------------------------------------------------------------------------------------------
# numerics


def _ndtr(x: Array) -> Array:
    """Standard normal CDF (Abramowitz & Stegun 7.1.26 for erfc; absolute error below 1e-7)."""
    z = -x / math.sqrt(2.0)
    a = np.abs(z)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erfc_abs = poly * np.exp(-a * a)
    erfc = np.where(z >= 0, erfc_abs, 2.0 - erfc_abs)
    result: Array = 0.5 * erfc
    return result


def _logsumexp_rows(a: Array) -> Array:
    """Row-wise log-sum-exp; consumes ``a``."""
    m = a.max(axis=1)
    m = np.where(np.isfinite(m), m, 0.0)
    a -= m[:, None]
    # exp of far-negative values is slow (subnormals) and contributes nothing; the bound is a row, as
    # np.maximum against a scalar is several times slower
    np.maximum(a, np.full(a.shape[1], -60.0), out=a)
    np.exp(a, out=a)
    out: Array = np.log(a.sum(axis=1)) + m
    return out


def _forgetting_weights(n: int, lf: int) -> Array:
    """Linear forgetting: the newest ``lf`` weigh 1, older ones ramp from ``1/n`` to 1 (oldest first)."""
    if n <= lf:
        return np.ones(n)
    return np.concatenate([np.linspace(1.0 / n, 1.0, num=n - lf), np.ones(lf)])


def _forgetting_sum(n: int, lf: int, k: IntArray) -> Array:
    """``sum(_forgetting_weights(n, lf)[:k])`` for each ``k``, in closed form (the ramp is linear)."""
    ramp = n - lf  # how many weigh less than 1: a ramp from 1/n up to 1
    kf = k.astype(np.float64)
    if ramp <= 0:
        return kf
    r = np.minimum(kf, ramp)
    step = (1.0 - 1.0 / n) / (ramp - 1) if ramp > 1 else 0.0
    return r / n + step * r * (r - 1.0) / 2.0 + (kf - r)


def _bad_window(idx: IntArray, lf: int, window: int) -> tuple[IntArray, Array]:
    """At most ``window`` of the bad observations at ``idx`` (history order) with their weights, standing
    for all of them: the newest ``window // 2`` as they are, with their forgetting weights, and one per
    stratum of the older ones (``window - window // 2`` strata of consecutive observations, nearly equal in
    size), the middle one, weighing what its whole stratum weighs. The mixture keeps its total weight
    and, per stratum, where that weight sits in history order; the older part is thinned evenly, never
    by value. Work: O(window), besides ``idx``.
    """
    ranks, weights = _bad_window_ranks(idx.size, lf, window)
    return idx[ranks], weights


def _bad_window_ranks(n: int, lf: int, window: int) -> tuple[IntArray, Array]:
    """:func:`_bad_window` of ``n > window`` bad observations: which of them (ranks in history order), and
    their weights."""
    recent = window // 2
    old = n - recent
    strata = window - recent
    bounds = (np.arange(strata + 1, dtype=np.int64) * old) // strata  # strictly increasing: old > strata
    middle = (bounds[:-1] + bounds[1:]) // 2
    ranks = np.concatenate([middle, np.arange(old, n, dtype=np.int64)])
    cut = np.concatenate([bounds, np.arange(old + 1, n + 1, dtype=np.int64)])
    return ranks, np.diff(_forgetting_sum(n, lf, cut))


def _skipping(ranks: IntArray, skipped: IntArray) -> IntArray:
    """The positions of the entries of ranks ``ranks`` among ``0, 1, 2, ...`` less the sorted positions
    ``skipped``: O(len(ranks) * log(len(skipped))), whatever the length of the whole."""
    if not skipped.size:
        return ranks
    before = skipped - np.arange(skipped.size, dtype=np.int64)  # entries kept before each skipped one
    out: IntArray = ranks + np.searchsorted(before, ranks, side="right")
    return out


def _rows_of(obs: Array, which: IntArray | BoolArray, out: Array) -> Array:
    """The rows of ``obs`` picked by a mask or by indices, into ``out``."""
    if which.dtype == np.bool_:
        return np.compress(which.astype(np.bool_, copy=False), obs, axis=0, out=out)
    return np.take(obs, which.astype(np.int64, copy=False), axis=0, out=out)


def _smallest_at(a: Array, k: int, bound: float | None = None) -> tuple[IntArray, float | None]:
    """The positions (ascending) of the ``k`` smallest entries of ``a``, ties going to the earliest (a stable
    sort's first ``k``), and the ``k``-th smallest value. ``bound``: a guess of it (the last one found); where at
    least ``k`` entries are at most ``bound``, the ``k`` smallest are among them, and only those are sorted out."""
    if k >= a.size:
        return np.arange(a.size, dtype=np.int64), None
    if k <= 0:
        return np.empty(0, dtype=np.int64), None
    at: IntArray | None = None
    if bound is not None:
        at = np.flatnonzero(a <= bound)
        if at.size < k:
            at = None
    sub = a if at is None else a[at]
    kth = float(np.partition(sub, k - 1)[k - 1])
    below = np.flatnonzero(sub < kth)
    if below.size < k:
        below = np.union1d(below, np.flatnonzero(sub == kth)[: k - below.size])
    out: IntArray = below if at is None else at[below]
    return out, kth


class _Scratch:
    """Work arrays reused from call to call, for the large temporaries of a proposal (the bad mixture).

    Fresh large arrays are slow: each is new memory, paged in again on every call. Nothing is carried
    from one use to the next: an array handed out is written in full before it is read.
    """

    def __init__(self) -> None:
        self._bufs: dict[str, Array] = {}

    def get(self, name: str, rows: int, cols: int) -> Array:
        """An uninitialised ``rows x cols`` array, valid until ``name`` is asked for again."""
        size = rows * cols
        buf = self._bufs.get(name)
        if buf is None or buf.size < size:
            buf = np.empty(size + size // 4 + 64)  # room to grow with the history
            self._bufs[name] = buf
        return buf[:size].reshape(rows, cols)


def _gap_sigmas(mu: Array, n_points: int, floor: float, out: Array) -> None:
    """Adaptive bandwidths of the kernels centred at ``mu`` into ``out`` (one row per dimension, a
    column per kernel, the prior's last; normalised units, the prior is ``N(0, 1)``).

    The first ``n_points`` centres are the neighbours: the observations, and the prior centre too when
    it counts as one. Each observation's kernel is as wide as the larger gap to its sorted neighbours,
    clipped to ``[floor, 1]``; the prior kernel's width is 1.
    """
    n_obs = mu.shape[1] - 1
    points = mu[:, :n_points]
    if n_points < 2:
        out[:, :n_obs] = 1.0
    elif n_points < 256:  # short rows: all at once
        order = np.argsort(points, axis=1)
        widest = np.take_along_axis(points, order, axis=1)
        gaps = np.diff(widest, axis=1)
        widest[:, 0], widest[:, -1] = gaps[:, 0], gaps[:, -1]
        np.maximum(gaps[:, :-1], gaps[:, 1:], out=widest[:, 1:-1])
        np.put_along_axis(out, order, widest, axis=1)
    else:  # long rows: one at a time, with smaller temporaries
        for row, dest in zip(points, out, strict=True):
            order = np.argsort(row)
            gaps = np.diff(row[order])
            dest[order[0]], dest[order[-1]] = gaps[0], gaps[-1]
            dest[order[1:-1]] = np.maximum(gaps[:-1], gaps[1:])
    out[:, n_obs] = 1.0
    np.clip(out, floor, 1.0, out=out)


def _log_mass(block: _Block, mu: Array, sig: Array, scratch: _Scratch, tag: str) -> Array:
    """Per kernel (column), the sum over the bounded dims of the log of its mass within the bounds.

    The normal CDF at a bound more than 8.5 sigmas away is taken as exactly 0 or 1, so only kernels
    near a bound lose mass; the others keep exactly 1, whose log adds nothing.
    """
    b = block.bounded
    if not b.all():
        mu, sig = mu[b], sig[b]
    rows, n = mu.shape
    up = np.subtract(block.hi[b][:, None], mu, out=scratch.get(tag + "up", rows, n))
    up /= sig
    down = np.subtract(block.lo[b][:, None], mu, out=scratch.get(tag + "down", rows, n))
    down /= sig
    near = np.flatnonzero((up < 8.5) | (down > -8.5))
    t_up, t_down = up.ravel()[near], down.ravel()[near]
    near_up, near_down = t_up < 8.5, t_down > -8.5
    cdf = _ndtr(np.concatenate([t_up[near_up], t_down[near_down]]))  # one call for both bounds
    k = int(np.count_nonzero(near_up))
    mass = np.ones(near.size)
    mass[near_up] = cdf[:k]
    mass[near_down] -= cdf[k:]
    log_mass = np.log(np.maximum(mass, 1e-300))
    out: Array = np.asarray(np.bincount(near % n, weights=log_mass, minlength=n), dtype=np.float64)
    return out


@dataclass(frozen=True, eq=False)
class _Block:
    """Dimensions modelled jointly. Numeric ones are normalised so that each prior is ``N(0, 1)``
    (bounded ones truncated to ``[-0.5, 0.5]``)."""

    dims: tuple[Column, ...]
    num: IntArray  # positions of the numeric dims within the block
    cat: tuple[int, ...]  # positions of the categorical dims
    centre: Array
    scale: Array
    lo: Array
    hi: Array
    bounded: BoolArray

    @classmethod
    def of(cls, dims: Sequence[Column]) -> _Block:
        num = [j for j, d in enumerate(dims) if not d.categorical]
        centre = np.array([dims[j].mu for j in num])
        scale = np.array([dims[j].sigma for j in num])
        lo = np.array([(dims[j].lo - dims[j].mu) / dims[j].sigma for j in num])
        hi = np.array([(dims[j].hi - dims[j].mu) / dims[j].sigma for j in num])
        return cls(
            tuple(dims),
            np.array(num, dtype=np.int64),
            tuple(j for j, d in enumerate(dims) if d.categorical),
            centre,
            scale,
            lo,
            hi,
            np.isfinite(lo),
        )


class _Mixture:
    """A Parzen mixture over one block: a kernel per observation (weighted), plus the prior kernel.

    Numeric kernels are stored one row per dimension, a column per kernel (the prior's last); the
    arrays live in ``scratch`` under ``tag``, so they are valid until the next mixture of that tag.
    """

    def __init__(
        self, block: _Block, obs: Array, weights: Array, s: TpeSettings, n_all: int, scratch: _Scratch, tag: str
    ) -> None:
        self.block = block
        self._scratch, self._tag = scratch, tag
        m, d = obs.shape[0], block.num.size
        w = np.append(weights, s.prior_weight)
        self.p = w / w.sum()
        self.n = m + 1
        base = np.log(self.p)
        # numeric dims: truncated normal kernels, evaluated as one quadratic form per candidate
        self.mu = mu = scratch.get(tag + "mu", d, m + 1)
        np.subtract((obs[:, block.num] if block.cat else obs).T, block.centre[:, None], out=mu[:, :m])
        np.divide(mu[:, :m], block.scale[:, None], out=mu[:, :m])
        mu[:, m] = 0.0
        floor = 1.0 / min(100.0, (n_all if s.clip_by_all else m) + 2.0)
        self.sig = sig = scratch.get(tag + "sig", d, m + 1)
        _gap_sigmas(mu, m + 1 if s.prior_in_gaps else m, floor, sig)
        tmp = scratch.get(tag + "tmp", d, m + 1)
        base -= np.log(sig, out=tmp).sum(axis=0) + d * _HALF_LOG_2PI
        if block.bounded.any():
            base -= _log_mass(block, mu, sig, scratch, tag)
        # log kernel density at x = base - sum(a * (x - mu)**2) = [x*x, x, 1] . [-a, 2*a*mu, base - sum(a*mu*mu)]
        self.coef = coef = scratch.get(tag + "coef", 2 * d + 1, m + 1)
        a, two_a_mu = coef[:d], coef[d : 2 * d]
        np.multiply(sig, sig, out=a)
        np.divide(0.5, a, out=a)
        np.multiply(mu, mu, out=tmp)
        tmp *= a
        base -= tmp.sum(axis=0)
        np.multiply(a, 2.0, out=two_a_mu)
        two_a_mu *= mu
        np.negative(a, out=a)
        coef[2 * d] = base
        # categorical dims: an observation keeps its option with weight 1 and spreads prior_weight over all
        pw = s.prior_weight
        self.own: list[Array] = []
        self.cat_log: list[tuple[float, float, float]] = []
        self.spread: list[float] = []  # probability that an observation's kernel draws uniformly
        for j in block.cat:
            k = block.dims[j].size
            self.own.append(np.append(obs[:, j], -1.0))
            own, other = (1.0 + pw / k) / (1.0 + pw), (pw / k) / (1.0 + pw)
            self.cat_log.append((math.log(own), math.log(other) if k > 1 else 0.0, -math.log(k)))
            self.spread.append(pw / (1.0 + pw))

    def sample(self, rng: np.random.Generator, count: int) -> tuple[Array, Array]:
        """``count`` draws: (normalised numeric values, category indices), one row per draw."""
        b = self.block
        idx = rng.choice(self.n, size=count, p=self.p)
        mu, sig = self.mu[:, idx].T, self.sig[:, idx].T
        x = mu + sig * rng.standard_normal(mu.shape)
        if b.bounded.any():
            for _ in range(_TRUNC_TRIES):
                bad = (x < b.lo) | (x > b.hi)
                if not bad.any():
                    break
                x = np.where(bad, mu + sig * rng.standard_normal(mu.shape), x)
            x = np.clip(x, b.lo, b.hi)
        cats = np.empty((count, len(b.cat)))
        for c, j in enumerate(b.cat):
            own = self.own[c][idx]
            uniform = rng.integers(b.dims[j].size, size=count).astype(float)
            keep = (own >= 0) & (rng.random(count) >= self.spread[c])
            cats[:, c] = np.where(keep, own, uniform)
        return x, cats

    def log_pdf(self, x: Array, cats: Array) -> Array:
        """Log density of each draw (normalised units: the same Jacobian for every mixture)."""
        count, tag = x.shape[0], self._tag
        feats = np.hstack([x * x, x, np.ones((count, 1))])
        acc = np.matmul(feats, self.coef, out=self._scratch.get(tag + "acc", count, self.n))
        if self.block.cat:
            term = self._scratch.get(tag + "term", count, self.n)
            for c in range(len(self.block.cat)):
                log_own, log_other, log_prior = self.cat_log[c]
                term.fill(log_other)
                np.copyto(term, log_own, where=cats[:, c, None] == self.own[c][None, :])
                term[:, -1] = log_prior
                acc += term
        return _logsumexp_rows(acc)


class _Data:
    """One proposal's view: encoded rows (real observations and liars), losses, which are real (and how
    many), which columns hold no NaN in any row, and which observations are good (their positions; a mask
    when first asked for)."""

    def __init__(
        self, rows: Array, loss: Array, real: BoolArray, n_real: int, complete: BoolArray, bound: list[float | None],
    ) -> None:
        self.rows, self.loss, self.real, self.n_real, self.complete = rows, loss, real, n_real, complete
        self._bound = bound  # the tuner's guess of the largest good loss (the last one found), updated here
        self._good_at: IntArray | None = None
        self._good: BoolArray | None = None

    def good_at(self, s: TpeSettings) -> IntArray:
        if self._good_at is None:
            self._good_at, self._bound[0] = _smallest_at(self.loss, s.n_good(self.loss.size), self._bound[0])
        return self._good_at

    def good(self, s: TpeSettings) -> BoolArray:
        if self._good is None:
            self._good = np.zeros(self.loss.size, dtype=bool)
            self._good[self.good_at(s)] = True
        return self._good


class TPETuner:
    """TPE with NNI's classArgs; see the module docstring for the model and the changed defaults."""

    Args: ClassVar[type[TunerArgs]] = TpeTunerArgs

    def __init__(self, args: TpeTunerArgs | None = None) -> None:
        self.args = args or TpeTunerArgs()
        self.settings = TpeSettings.from_args(self.args.tpe_args)
        self._seed_override = self.args.seed
        self._encoding: _Encoding | None = None
        self._history = _EncodedHistory()
        self._scratch = _Scratch()
        self._dedup = Deduplicator()
        self._good_bound: list[float | None] = [None]  # the largest good loss last found (a guess: see _smallest_at)

    def _encoding_for(self, space: SearchSpace) -> _Encoding:
        enc = self._encoding
        if enc is None or (enc.space is not space and enc.space != space):
            enc = _Encoding(space, self.settings.ordinal_randint)
            self._encoding = enc
        return enc

    def suggest(self, ctx: TunerContext, parameter_ids: Sequence[int]) -> list[Params]:
        if not parameter_ids:
            return []
        seed = self._seed_override if self._seed_override is not None else ctx.seed
        enc = self._encoding_for(ctx.space)
        rows, raw, pending = self._history.update(enc, ctx.history)
        sign = 1.0 if ctx.direction is Direction.MINIMIZE else -1.0
        values = sign * raw
        real_all = np.isfinite(values)
        liar = self._liar_value(values[real_all])
        keep = real_all | pending if liar is not None else real_all
        if keep.all():
            obs_rows, real = rows, real_all
        else:
            idx = np.flatnonzero(keep)  # history order: linear forgetting weighs by age
            obs_rows, real, values = rows[idx], real_all[idx], values[idx]
        obs_loss = np.where(real, values, liar if liar is not None else 0.0)

        complete = self._history.complete
        n_real = int(np.count_nonzero(real))

        self._dedup.begin(ctx)
        out: list[Params] = []
        for pid in parameter_ids:
            data = _Data(obs_rows, obs_loss, real, n_real, complete, self._good_bound)
            params = self._one(enc, ctx.space, seed, pid, data)
            if not self._dedup.accept(out, params):
                break
            assert params is not None
            if liar is not None and len(out) < len(parameter_ids):
                liar_row = enc.encode(params)
                obs_rows = np.vstack([obs_rows, liar_row[None, :]])
                obs_loss = np.append(obs_loss, liar)
                real = np.append(real, False)
                complete = complete & ~np.isnan(liar_row)
        return out

    def _liar_value(self, losses: Array) -> float | None:
        kind = self.settings.liar
        if kind is None:
            return None
        if losses.size == 0:
            return 0.0
        if kind == "best":
            return float(losses.min())
        if kind == "worst":
            return float(losses.max())
        return float(losses.mean())

    def _one(self, enc: _Encoding, space: SearchSpace, seed: int, pid: int, data: _Data) -> Params | None:
        def draw(rng: np.random.Generator) -> Params:
            row = np.full(enc.width, math.nan)
            self._sample_group(enc, enc.top, data, None, rng, row)
            return enc.decode(row)

        return self._dedup.first_new(space, seed, pid, draw)

    def _sample_group(
        self, enc: _Encoding, group: Group, data: _Data, active: BoolArray | None, rng: np.random.Generator,
        row: Array,
    ) -> None:
        """Fill ``row`` with the columns of ``group`` and of its active subgroups. ``active``: the observations
        in which the group was active (None: all of them)."""
        dims = group.columns
        if not dims:
            return
        s = self.settings
        cols = [d.col for d in dims]
        values = data.rows if cols == list(range(data.rows.shape[1])) else data.rows[:, cols]
        good_rows: IntArray | BoolArray
        bad_rows: IntArray | BoolArray
        if active is None and data.complete[cols].all():  # every observation is a member: no mask of them all
            n_members, n_real = data.rows.shape[0], data.n_real
        else:
            if active is None:
                active = np.ones(data.rows.shape[0], dtype=bool)
            missing = np.isnan(values)
            members = active & ~missing.any(axis=1) if missing.any() else active
            n_members = int(np.count_nonzero(members))
            n_real = int(np.count_nonzero(members & data.real))
        if n_real < max(s.n_startup, 1):
            for d in dims:
                row[d.col] = self._prior_draw(d, rng)
        else:
            if active is None:  # the good ones by position; the window of the bad ones without a list of them all
                good_rows = data.good_at(s)
                n_good = good_rows.size
                n_bad = n_members - n_good
                if n_bad > s.bad_window:
                    ranks, w_bad = _bad_window_ranks(n_bad, s.linear_forgetting, s.bad_window)
                    bad_rows = _skipping(ranks, good_rows)
                    n_bad = bad_rows.size
                else:
                    bad_rows, w_bad = ~data.good(s), _forgetting_weights(n_bad, s.linear_forgetting)
            else:
                good_rows = members & data.good(s)
                n_good = int(np.count_nonzero(good_rows))
                bad = members & ~data.good(s)
                n_bad = int(np.count_nonzero(bad))
                bad_rows = bad
                if n_bad > s.bad_window:
                    bad_rows, w_bad = _bad_window(np.flatnonzero(bad), s.linear_forgetting, s.bad_window)
                    n_bad = bad_rows.size
                else:
                    w_bad = _forgetting_weights(n_bad, s.linear_forgetting)
            w_good = _forgetting_weights(n_good, s.linear_forgetting)
            for positions, block in enc.blocks(group, s.multivariate):
                obs = values if len(positions) == values.shape[1] else values[:, positions]
                bad_obs = _rows_of(obs, bad_rows, self._scratch.get("bad", n_bad, obs.shape[1]))
                l_mix = _Mixture(block, obs[good_rows], w_good, s, n_members, self._scratch, "l")
                g_mix = _Mixture(block, bad_obs, w_bad, s, n_members, self._scratch, "g")
                x, cats = l_mix.sample(rng, s.n_candidates)
                score = l_mix.log_pdf(x, cats) - g_mix.log_pdf(x, cats)
                best = argmax(score)
                for k, j in enumerate(block.num):
                    row[block.dims[j].col] = block.centre[k] + block.scale[k] * x[best, k]
                for c, j in enumerate(block.cat):
                    row[block.dims[j].col] = cats[best, c]
        for d in dims:
            if d.children:
                b = int(row[d.col])
                chosen = data.rows[:, d.col] == b
                self._sample_group(enc, d.children[b], data, chosen if active is None else active & chosen, rng, row)

    @staticmethod
    def _prior_draw(d: Column, rng: np.random.Generator) -> float:
        if d.categorical:
            return float(rng.integers(d.size))
        if d.bounded:
            return float(rng.uniform(d.lo, d.hi))
        return float(rng.normal(d.mu, d.sigma))


class TPELegacyTuner(TPETuner):
    """NNI ``TPE_legacy`` (hyperopt's TPE): :class:`TPETuner` with hyperopt's model and classArgs."""

    Args: ClassVar[type[TunerArgs]] = HyperoptArgs

    def __init__(self, args: HyperoptArgs | None = None) -> None:
        h = args or HyperoptArgs()
        super().__init__(TpeTunerArgs(optimize_mode=h.optimize_mode, seed=h.seed))
        liar_map: dict[str, Literal["best", "worst", "mean"]] = {"min": "best", "max": "worst", "mean": "mean"}
        liar = liar_map[h.constant_liar_type] if h.parallel_optimize else None
        self.settings = replace(LEGACY, liar=liar)
        self.hyperopt_args = h


TpeTuner = TPETuner  # NNI's class name (acronyms: nnix.tuners)
TpeLegacyTuner = TPELegacyTuner
