"""Learning-curve extrapolation (NNI ``Curvefitting``): stop a trial whose predicted result at
``epoch_num`` is not within ``threshold`` of the best completed trial.

The rule, for a trial with ``S`` intermediate results ``y_1..y_S`` (taken as a metric to maximise,
like NNI -- the assessor has no ``optimize_mode``):

1. ``best`` = the largest last intermediate result among completed successful trials; none yet: Good.
2. ``S < start_step``: Good. Judgements happen at ``S = start_step, start_step + gap, ...`` only
   (``(S - start_step) % gap == 0``); in between: Good. NNI remembers when it last judged a trial;
   deriving it from ``S`` gives the same steps and survives a resume.
3. ``S >= epoch_num``: Good (nothing left to extrapolate).
4. Twelve parametric curve families (``vap, pow3, linear, logx_linear, dr_hill_zero_background,
   log_power, pow4, mmf, exp4, ilog2, weibull, janoschek``; Domhan et al., 2015) are fitted by least
   squares (scipy, a bounded number of evaluations each) on ``(1..S, y)``. A curve is kept when its
   sum of squared errors is below ``S * mean(y)**2`` and its prediction at ``epoch_num`` is finite;
   then only the curves whose prediction lies within ``median +- (S / 10) * std`` of those
   predictions stay. Fewer than 4 left: Good (not enough evidence).
5. The prediction is the mean of the remaining curves' predictions at ``epoch_num``. NNI samples
   combination weights by a short MCMC (20 steps of size 0.0005 from equal weights), which stays
   next to equal weights; the equal-weight mean is its deterministic counterpart.
6. Bad iff ``prediction <= threshold * best``, else Good.

Any failure of the fitting gives Good (NNI returns None there, which kills its dispatcher).
``ilog2`` is ``c - a / log(x + 1)`` (the paper's ``log(x)`` is infinite at ``x = 1``).
"""

from __future__ import annotations

import logging
import math
import warnings
from array import array
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray
from pydantic import Field
from scipy.optimize import least_squares

from nnix.assessors.base import AssessedHistory, AssessorContext, CountedRecords, Decision
from nnix.model.args import TunerArgs
from nnix.model.status import TrialStatus
from nnix.model.trials import TrialRecord

__all__ = ["CURVES", "CurvefittingArgs", "CurvefittingAssessor", "predict"]

log = logging.getLogger("nnix.assessors.curvefitting")

Array = NDArray[np.float64]
MAX_EVALUATIONS = 200  # residual evaluations per curve and fit: caps the runtime of one judgement
MIN_CURVES = 4


class CurvefittingArgs(TunerArgs):
    epoch_num: int = Field(default=20, ge=0, le=9999)
    start_step: int = Field(default=6, ge=0, le=9999)
    threshold: float = Field(default=0.95, ge=0, le=9999)
    gap: int = Field(default=1, ge=1, le=9999)


# --------------------------------------------------------------------------------------------------
# the curve families: f(x, *params) and an initial guess from the observed curve


@dataclass(frozen=True)
class Curve:
    name: str
    f: Callable[..., Array]
    guess: Callable[[Array, Array], tuple[float, ...]]


def _vap(x: Array, a: float, b: float, c: float) -> Array:
    out: Array = np.exp(a + b / x + c * np.log(x))
    return out


def _pow3(x: Array, c: float, a: float, alpha: float) -> Array:
    out: Array = c - a * np.power(x, -alpha)
    return out


def _linear(x: Array, a: float, b: float) -> Array:
    return a * x + b


def _logx_linear(x: Array, a: float, b: float) -> Array:
    return a * np.log(x) + b


def _dr_hill(x: Array, theta: float, eta: float, kappa: float) -> Array:
    xe = np.power(x, eta)
    out: Array = theta * xe / (np.power(kappa, eta) + xe)
    return out


def _log_power(x: Array, a: float, b: float, c: float) -> Array:
    out: Array = a / (1.0 + np.power(x / np.exp(b), c))
    return out


def _pow4(x: Array, c: float, a: float, b: float, alpha: float) -> Array:
    return c - np.power(a * x + b, -alpha)


def _mmf(x: Array, alpha: float, beta: float, kappa: float, delta: float) -> Array:
    return alpha - (alpha - beta) / (1.0 + np.power(kappa * x, delta))


def _exp4(x: Array, c: float, a: float, b: float, alpha: float) -> Array:
    return c - np.exp(-a * np.power(x, alpha) + b)


def _ilog2(x: Array, c: float, a: float) -> Array:
    return c - a / np.log(x + 1.0)


def _weibull(x: Array, alpha: float, beta: float, kappa: float, delta: float) -> Array:
    return alpha - (alpha - beta) * np.exp(-np.power(kappa * x, delta))


def _janoschek(x: Array, alpha: float, beta: float, kappa: float, delta: float) -> Array:
    return alpha - (alpha - beta) * np.exp(-kappa * np.power(x, delta))


Guess = Callable[[Array, Array], tuple[float, ...]]
_FAMILIES: list[Curve] = []


def _family(name: str, f: Callable[..., Array]) -> Callable[[Guess], Guess]:
    """Declares the family ``name``: the curve ``f`` with the decorated initial guess (``CURVES`` keeps the
    order of the declarations)."""

    def declare(guess: Guess) -> Guess:
        _FAMILIES.append(Curve(name, f, guess))
        return guess

    return declare


def _ends(x: Array, y: Array) -> tuple[float, float, float]:
    first, last = float(y[0]), float(y[-1])
    return first, last, float(x[-1])


@_family("vap", _vap)
def _g_vap(x: Array, y: Array) -> tuple[float, ...]:
    _, last, _ = _ends(x, y)
    return (math.log(max(abs(last), 1e-6)), -0.5, 0.1)


@_family("pow3", _pow3)
def _g_pow3(x: Array, y: Array) -> tuple[float, ...]:
    first, last, _ = _ends(x, y)
    return (last + 0.5 * abs(last - first), 1.5 * (last - first) if last != first else 0.1, 0.5)


@_family("linear", _linear)
def _g_linear(x: Array, y: Array) -> tuple[float, ...]:
    a, b = np.polyfit(x, y, 1) if len(x) > 1 else (0.0, float(y[0]))
    return (float(a), float(b))


@_family("logx_linear", _logx_linear)
def _g_logx_linear(x: Array, y: Array) -> tuple[float, ...]:
    a, b = np.polyfit(np.log(x), y, 1) if len(x) > 1 else (0.0, float(y[0]))
    return (float(a), float(b))


@_family("dr_hill_zero_background", _dr_hill)
def _g_dr_hill(x: Array, y: Array) -> tuple[float, ...]:
    _, last, n = _ends(x, y)
    return (last * 1.2 if last else 1.0, 1.0, max(n / 2, 1.0))


@_family("log_power", _log_power)
def _g_log_power(x: Array, y: Array) -> tuple[float, ...]:
    _, last, n = _ends(x, y)
    return (last * 1.2 if last else 1.0, math.log(max(n / 2, 1.0)), -1.0)


@_family("pow4", _pow4)
def _g_pow4(x: Array, y: Array) -> tuple[float, ...]:
    first, last, _ = _ends(x, y)
    return (last + abs(last - first) * 0.1 + 1e-3, 1.0, 1.0, 1.0)


@_family("mmf", _mmf)
def _g_mmf(x: Array, y: Array) -> tuple[float, ...]:
    first, last, n = _ends(x, y)
    return (last * 1.1 if last else 1.0, first, 1.0 / n, 1.0)


@_family("exp4", _exp4)
def _g_exp4(x: Array, y: Array) -> tuple[float, ...]:
    first, last, _ = _ends(x, y)
    gap = max(abs(last - first), 1e-3)
    return (last + gap * 0.1, 0.5, math.log(gap) + 0.5, 0.5)


@_family("ilog2", _ilog2)
def _g_ilog2(x: Array, y: Array) -> tuple[float, ...]:
    first, last, _ = _ends(x, y)
    return (last, (last - first) * math.log(2.0) if last != first else 0.1)


@_family("weibull", _weibull)
def _g_weibull(x: Array, y: Array) -> tuple[float, ...]:
    first, last, n = _ends(x, y)
    return (last, first, 1.0 / n, 1.0)


@_family("janoschek", _janoschek)
def _g_janoschek(x: Array, y: Array) -> tuple[float, ...]:
    first, last, _ = _ends(x, y)
    return (last, first, 0.1, 1.0)


CURVES: tuple[Curve, ...] = tuple(_FAMILIES)


# --------------------------------------------------------------------------------------------------
# prediction


def _fit(curve: Curve, x: Array, y: Array, target: float) -> tuple[float, float] | None:
    """(sum of squared errors, prediction at ``target``) of one family, or None when it does not fit.

    The fit stops after ``MAX_EVALUATIONS`` evaluations and keeps the best parameters found so far
    (ill-posed families such as ``pow3`` on a log-like curve drift for ever without converging)."""
    p0 = np.asarray(curve.guess(x, y), dtype=np.float64)

    def residuals(p: Array) -> Array:
        r: Array = np.nan_to_num(curve.f(x, *p) - y, nan=1e6, posinf=1e6, neginf=-1e6)
        return r

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        if not np.all(np.isfinite(curve.f(x, *p0))):
            return None
        try:
            if len(x) >= len(p0):  # MINPACK's Levenberg-Marquardt; its budget counts Jacobian evaluations
                result = least_squares(residuals, p0, method="lm", max_nfev=MAX_EVALUATIONS)
            else:
                result = least_squares(residuals, p0, method="trf", max_nfev=MAX_EVALUATIONS // (len(p0) + 1))
        except (ValueError, FloatingPointError, OverflowError, ZeroDivisionError, np.linalg.LinAlgError):
            return None
        params = result.x
        fitted = curve.f(x, *params)
        prediction = curve.f(np.array([target], dtype=np.float64), *params)
    sse = float(np.sum((fitted - y) ** 2))
    value = float(prediction[0])
    if not (math.isfinite(sse) and math.isfinite(value)):
        return None
    return sse, value


def predict(history: Sequence[float], target: int) -> float | None:
    """The predicted result at step ``target`` (1-based) from ``history``, or None when the curves
    disagree or too few of them fit."""
    y = np.asarray(history, dtype=np.float64)
    s = len(y)
    if s == 0 or not np.all(np.isfinite(y)):
        return None
    x = np.arange(1, s + 1, dtype=np.float64)
    limit = s * float(np.mean(y)) ** 2
    predictions = []
    for curve in CURVES:
        fit = _fit(curve, x, y, float(target))
        if fit is not None and fit[0] < limit:
            predictions.append(fit[1])
    if len(predictions) < MIN_CURVES:
        return None
    values = np.array(predictions)
    median = float(np.median(values))
    spread = (s / 10.0) * float(np.std(values))
    kept = values[np.abs(values - median) <= spread + 1e-12 * max(1.0, abs(median))]
    if len(kept) < MIN_CURVES:
        return None
    return float(np.mean(kept))


# --------------------------------------------------------------------------------------------------
# the assessor


class _Lasts(CountedRecords):
    """The last intermediate results of the completed successful trials, sorted (raw doubles)."""

    def __init__(self) -> None:
        super().__init__()
        self.lasts: array[float] = array("d")
        self.odd = 0  # records counted with a NaN last result: not in lasts (max of them is ill-defined)

    def counts(self, record: TrialRecord) -> bool:
        return record.status is TrialStatus.SUCCEEDED and len(record.series) > 0

    def added(self, record: TrialRecord) -> None:
        last = record.series[-1]
        if math.isnan(last):
            self.odd += 1
        else:
            insort(self.lasts, last)

    def removed(self, record: TrialRecord) -> None:
        last = record.series[-1]
        if math.isnan(last):
            self.odd -= 1
        else:
            del self.lasts[bisect_left(self.lasts, last)]

    def clear(self) -> None:
        self.lasts, self.odd = array("d"), 0
        super().clear()

    def rebuilt(self, records: Iterable[TrialRecord]) -> None:
        lasts = [record.series[-1] for record in records]
        finite = [last for last in lasts if not math.isnan(last)]
        self.lasts, self.odd = array("d", sorted(finite)), len(lasts) - len(finite)


class CurvefittingAssessor:
    """NNI's curve-fitting assessor: extrapolate, compare with the best completed trial. Its only state is a
    cache of the history (the completed trials' last results, followed from the manager's history in
    O(new + changed records) per assessment)."""

    Args: ClassVar[type[TunerArgs]] = CurvefittingArgs
    heavy: ClassVar[bool] = True  # a judgement fits 12 curves (tens to hundreds of ms): may run in a thread

    def __init__(self, args: CurvefittingArgs | None = None) -> None:
        self.args = args or CurvefittingArgs()
        self._lasts = _Lasts()

    def best_completed(self, ctx: AssessorContext, trial: TrialRecord) -> float | None:
        """The largest last result of the other completed successful trials (None: none)."""
        if isinstance(ctx.history, AssessedHistory):
            cache = self._lasts
            cache.follow(ctx.history.history)
            if trial.parameter_id not in cache.pids and not cache.odd:
                return cache.lasts[-1] if cache.lasts else None
        lasts = [
            r.series[-1]
            for r in ctx.history
            if r.parameter_id != trial.parameter_id and r.status is TrialStatus.SUCCEEDED and r.series
        ]
        return max(lasts) if lasts else None

    def judged_at(self, steps: int) -> bool:
        """Whether a trial with ``steps`` results is judged (start_step, start_step + gap, ...)."""
        return steps >= self.args.start_step and (steps - self.args.start_step) % self.args.gap == 0

    def assess(self, ctx: AssessorContext, trial: TrialRecord) -> Decision:
        s = len(trial.series)
        if s == 0 or not self.judged_at(s) or s >= self.args.epoch_num:
            return Decision.GOOD
        best = self.best_completed(ctx, trial)
        if best is None:
            return Decision.GOOD
        try:
            prediction = predict(trial.series, self.args.epoch_num)
        except Exception:  # a numerical corner we did not foresee must not stop the trial
            log.exception("curve fitting failed on trial %s", trial.parameter_id)
            return Decision.GOOD
        if prediction is None:
            return Decision.GOOD
        return Decision.BAD if prediction <= self.args.threshold * best else Decision.GOOD
