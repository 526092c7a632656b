"""Tuner quality: median best value found on five problems, every nnix tuner against Optuna's TPE.

Run: python bench/quality.py [--trials 50,200] [--seeds 5] [--problems branin,hartmann6,...]
                             [--tuners tpe,anneal,...] [--ml-trials 50] [--jobs N] [--no-optuna]

Problems (all minimised, all offline on a CPU):

* ``branin``       2-D, optimum 0.397887 (three global minima)
* ``hartmann6``    6-D on [0, 1]^6, optimum -3.32237
* ``rosenbrock4``  4-D on [-2, 2]^4, optimum 0
* ``mixed``        a categorical, a log-uniform, an integer (randint) and a uniform parameter; optimum 0
* ``svm_digits``   a real task: an SVC on scikit-learn's ``digits`` (C, gamma: log-uniform; kernel:
                   choice; degree: randint), loss = 1 - 3-fold cross-validated accuracy. Each
                   evaluation costs 0.1-0.6 s, so by default it runs only up to ``--ml-trials``
                   (50) trials; pass ``--ml-trials 50,200`` for the full table.

Every nnix tuner registered under ``nnix.tuners`` is driven through the real Tuner protocol:
sequential ask/tell, a ``TunerContext`` whose history grows by one ``TrialRecord`` per trial,
direction ``minimize`` (and ``optimize_mode: minimize`` when the tuner takes one). Aliases of one
class run once. Tuners that cannot be imported, refuse a search space, or need what a plain
function evaluation cannot give (Hyperband/BOHB's ``TRIAL_BUDGET``, PBT's checkpoints, Batch's list)
are skipped and shown as ``-``. Optuna's ``TPESampler`` with its default settings (seeded) is the
baseline, run in the same process pool. Seeds are 0..N-1 for every tuner and for Optuna.

Prints, per trial budget, a table of the median best value (problem x tuner), then per problem
whether nnix's best tuner beats Optuna's median, and the headline "Branin@50 nnix TPE median best".
Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np

# tuners that a plain function evaluation cannot drive
SKIP = {
    "batch": "needs a list of complete parameter sets",
    "batchtuner": "needs a list of complete parameter sets",
    "hyperband": "advisor: needs TRIAL_BUDGET",
    "bohb": "advisor: needs TRIAL_BUDGET",
    "pbt": "needs checkpoints",
    "pbttuner": "needs checkpoints",
    "networkmorphism": "NAS tuner, no search space",
    "ppo": "NAS tuner",
    "ppotuner": "NAS tuner",
}


# --------------------------------------------------------------------------------------------------
# problems


def branin(p: dict[str, Any]) -> float:
    x, y = p["x"], p["y"]
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (y - b * x * x + c * x - 6) ** 2 + 10 * (1 - t) * math.cos(x) + 10


_H_A = np.array(
    [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14], [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
)
_H_P = 1e-4 * np.array(
    [
        [1312, 1696, 5569, 124, 8283, 5886],
        [2329, 4135, 8307, 3736, 1004, 9991],
        [2348, 1451, 3522, 2883, 3047, 6650],
        [4047, 8828, 8732, 5743, 1091, 381],
    ]
)
_H_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])


def hartmann6(p: dict[str, Any]) -> float:
    x = np.array([p[f"x{i}"] for i in range(6)])
    return float(-np.sum(_H_ALPHA * np.exp(-np.sum(_H_A * (x - _H_P) ** 2, axis=1))))


def rosenbrock4(p: dict[str, Any]) -> float:
    x = [p[f"x{i}"] for i in range(4)]
    return float(sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(3)))


_MIXED_OFFSET = {"adam": 0.0, "sgd": 0.3, "rmsprop": 0.6}
_MIXED_LR = {"adam": -3.0, "sgd": -1.5, "rmsprop": -2.5}  # best log10(lr) per optimiser


def mixed(p: dict[str, Any]) -> float:
    opt = p["optimizer"]
    lr = (math.log10(p["lr"]) - _MIXED_LR[opt]) ** 2 / 4
    depth = ((p["layers"] - 6) / 4) ** 2
    drop = (p["dropout"] - 0.2) ** 2 * 4
    return _MIXED_OFFSET[opt] + lr + depth + drop + 0.5 * lr * depth  # one interaction term


@lru_cache(maxsize=1)
def _digits() -> tuple[Any, Any, Any]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import StratifiedKFold

    x, y = load_digits(return_X_y=True)
    return x / 16.0, y, StratifiedKFold(3, shuffle=True, random_state=0)


def svm_digits(p: dict[str, Any]) -> float:
    from sklearn.model_selection import cross_val_score
    from sklearn.svm import SVC

    x, y, cv = _digits()
    model = SVC(C=p["C"], gamma=p["gamma"], kernel=p["kernel"], degree=p["degree"], max_iter=200_000)
    return 1.0 - float(cross_val_score(model, x, y, cv=cv).mean())


@dataclass(frozen=True)
class Problem:
    name: str
    space: dict[str, Any]
    f: Callable[[dict[str, Any]], float]
    optimum: float | None
    ml: bool = False


def _uniform(low: float, high: float) -> dict[str, Any]:
    return {"_type": "uniform", "_value": [low, high]}


PROBLEMS: dict[str, Problem] = {
    p.name: p
    for p in (
        Problem("branin", {"x": _uniform(-5, 10), "y": _uniform(0, 15)}, branin, 0.397887),
        Problem("hartmann6", {f"x{i}": _uniform(0, 1) for i in range(6)}, hartmann6, -3.32237),
        Problem("rosenbrock4", {f"x{i}": _uniform(-2, 2) for i in range(4)}, rosenbrock4, 0.0),
        Problem(
            "mixed",
            {
                "optimizer": {"_type": "choice", "_value": ["sgd", "adam", "rmsprop"]},
                "lr": {"_type": "loguniform", "_value": [1e-6, 1.0]},
                "layers": {"_type": "randint", "_value": [1, 21]},
                "dropout": _uniform(0.0, 0.8),
            },
            mixed,
            0.0,
        ),
        Problem(
            "svm_digits",
            {
                "C": {"_type": "loguniform", "_value": [1e-2, 1e4]},
                "gamma": {"_type": "loguniform", "_value": [1e-6, 1.0]},
                "kernel": {"_type": "choice", "_value": ["rbf", "poly", "sigmoid"]},
                "degree": {"_type": "randint", "_value": [2, 6]},
            },
            svm_digits,
            None,
            ml=True,
        ),
    )
}


# --------------------------------------------------------------------------------------------------
# tuners


def discover_tuners(only: list[str] | None = None) -> tuple[dict[str, type[Any]], dict[str, str]]:
    """Registered tuners by name (one name per class), and the skipped ones with the reason."""
    from nnix.registry import AlgorithmRef, available, resolve

    found: dict[str, type[Any]] = {}
    skipped: dict[str, str] = {}
    by_value: dict[str, str] = {}
    for name, value in sorted(available("tuner").items(), key=lambda kv: (len(kv[0]), kv[0])):
        if only is not None and name not in only:
            continue
        if name in SKIP:
            skipped[name] = SKIP[name]
            continue
        if value in by_value:
            continue  # an alias of a tuner already listed
        try:
            cls = resolve("tuner", AlgorithmRef(name=name))
            make_tuner(cls)
        except Exception as e:  # an optional extra is missing, or the module is broken
            skipped[name] = f"unavailable: {type(e).__name__}: {e}"
            continue
        by_value[value] = name
        found[name] = cls
    return found, skipped


def make_tuner(cls: type[Any]) -> Any:
    args_model = cls.Args
    fields = getattr(args_model, "model_fields", {})
    raw = {"optimize_mode": "minimize"} if "optimize_mode" in fields else {}
    return cls(args_model.model_validate(raw))


def run_nnix(name: str, problem: str, seed: int, n: int, factory: Callable[[], Any] | None = None) -> list[float] | str:
    """Best-so-far after each trial (shorter if the tuner stops early), or why it could not run."""
    from nnix.core.status import TrialStatus
    from nnix.errors import NoMoreTrialsError
    from nnix.registry import AlgorithmRef, resolve
    from nnix.space import SearchSpace
    from nnix.tuners.base import Direction, TrialRecord, TunerContext

    prob = PROBLEMS[problem]
    space = SearchSpace.from_json(prob.space)
    try:
        tuner = factory() if factory is not None else make_tuner(resolve("tuner", AlgorithmRef(name=name)))
    except Exception as e:
        return f"cannot build: {type(e).__name__}: {e}"
    history: list[TrialRecord] = []
    best = math.inf
    curve: list[float] = []
    for pid in range(n):
        ctx = TunerContext(space, Direction.MINIMIZE, seed, tuple(history))
        try:
            proposals = tuner.suggest(ctx, [pid])
        except NoMoreTrialsError:
            break
        except Exception as e:  # refuses the space, or a bug: reported, not fatal to the whole bench
            return f"trial {pid}: {type(e).__name__}: {e}"
        if not proposals:
            break
        value = prob.f(proposals[0])
        best = min(best, value)
        curve.append(best)
        history.append(TrialRecord(pid, proposals[0], TrialStatus.SUCCEEDED, value))
    return curve


def _optuna_suggest(trial: Any, space: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, spec in space.items():
        t, v = spec["_type"], spec["_value"]
        if t == "choice":
            out[name] = trial.suggest_categorical(name, v)
        elif t == "randint":
            out[name] = trial.suggest_int(name, v[0], v[1] - 1)
        elif t == "uniform":
            out[name] = trial.suggest_float(name, v[0], v[1])
        elif t == "loguniform":
            out[name] = trial.suggest_float(name, v[0], v[1], log=True)
        elif t == "quniform":
            out[name] = trial.suggest_float(name, v[0], v[1], step=v[2])
        else:
            raise ValueError(f"no Optuna equivalent for {t}")
    return out


def run_optuna(problem: str, seed: int, n: int) -> list[float]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    prob = PROBLEMS[problem]
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    curve: list[float] = []
    best = math.inf
    for _ in range(n):
        trial = study.ask()
        value = prob.f(_optuna_suggest(trial, prob.space))
        study.tell(trial, value)
        best = min(best, value)
        curve.append(best)
    return curve


WINDOWED = "tpe@"  # "tpe@W": nnix TPE whose bad mixture stands on at most W observations ("tpe@all": no window)


def run_tpe_window(window: int | None, problem: str, seed: int, n: int) -> list[float] | str:
    """:func:`run_nnix` for TPE with its bad-observation window set to ``window`` (None: no window)."""
    from dataclasses import replace

    from nnix.tuners.tpe import TpeTuner, TpeTunerArgs

    def make() -> Any:
        tuner = TpeTuner(TpeTunerArgs(optimize_mode="minimize"))
        tuner.settings = replace(tuner.settings, bad_window=window if window is not None else sys.maxsize)
        return tuner

    return run_nnix("tpe", problem, seed, n, make)


def _job(args: tuple[str, str, int, int]) -> tuple[str, str, int, list[float] | str, float]:
    tuner, problem, seed, n = args
    t0 = time.perf_counter()
    result: list[float] | str
    if tuner == OPTUNA:
        result = run_optuna(problem, seed, n)
    elif tuner.startswith(WINDOWED):
        w = tuner[len(WINDOWED) :]
        result = run_tpe_window(None if w == "all" else int(w), problem, seed, n)
    else:
        result = run_nnix(tuner, problem, seed, n)
    return tuner, problem, seed, result, time.perf_counter() - t0


OPTUNA = "optuna-tpe"


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.4f}" if abs(x) < 1000 else f"{x:.3g}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", default="50,200", help="trial budgets, comma-separated (default 50,200)")
    ap.add_argument("--seeds", type=int, default=5, help="seeds per tuner and problem (default 5)")
    ap.add_argument("--problems", default=",".join(PROBLEMS), help="comma-separated subset")
    ap.add_argument("--tuners", default=None, help="comma-separated registered names (default: all)")
    ap.add_argument("--ml-trials", default="50", help="trial budgets for the ML task (default 50; it is slow)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    ap.add_argument("--no-optuna", action="store_true", help="skip the Optuna baseline")
    ap.add_argument(
        "--tpe-window",
        default=None,
        help="instead: the effect of TPE's bad-observation window, e.g. 16,64,256 (each against no window; "
        "try --trials 500 --problems branin,mixed)",
    )
    a = ap.parse_args(argv)
    if a.tpe_window:
        return window_effect(a)

    budgets = sorted({int(x) for x in a.trials.split(",")})
    ml_budgets = sorted({int(x) for x in a.ml_trials.split(",")})
    problems = [p.strip() for p in a.problems.split(",") if p.strip()]
    for p in problems:
        if p not in PROBLEMS:
            ap.error(f"unknown problem {p!r}; known: {', '.join(PROBLEMS)}")
    only = [t.strip().lower() for t in a.tuners.split(",")] if a.tuners else None
    tuners, skipped = discover_tuners(only)
    names = list(tuners)
    if not a.no_optuna:
        try:
            import optuna  # noqa: F401
        except ImportError:
            print("optuna is not installed (pip install 'nnix[bench]'): no baseline", file=sys.stderr)
            a.no_optuna = True
    columns = [*names, *([] if a.no_optuna else [OPTUNA])]
    for name, why in skipped.items():
        print(f"skipped {name}: {why}")

    jobs = []
    for p in problems:
        n = max(ml_budgets if PROBLEMS[p].ml else budgets)
        for t in columns:
            for s in range(a.seeds):
                jobs.append((t, p, s, n))
    print(f"{len(jobs)} runs ({len(columns)} tuners x {len(problems)} problems x {a.seeds} seeds) on {a.jobs} workers")
    t0 = time.perf_counter()
    results: dict[tuple[str, str], list[list[float]]] = {}
    failed: dict[tuple[str, str], str] = {}
    seconds: dict[str, float] = {}
    with ProcessPoolExecutor(max_workers=a.jobs) as pool:
        for done, (tuner, problem, _seed, curve, took) in enumerate(pool.map(_job, jobs), 1):
            if done % max(1, len(jobs) // 20) == 0 or done == len(jobs):  # progress, on stderr
                spent = time.perf_counter() - t0
                print(
                    f"  {done}/{len(jobs)} runs, {spent:.0f} s, about {spent / done * (len(jobs) - done):.0f} s left",
                    file=sys.stderr,
                    flush=True,
                )
            seconds[tuner] = seconds.get(tuner, 0.0) + took
            if isinstance(curve, str):
                failed[(tuner, problem)] = curve
            else:
                results.setdefault((tuner, problem), []).append(curve)
    print(f"done in {time.perf_counter() - t0:.0f} s")
    for (tuner, problem), why in sorted(failed.items()):
        print(f"  {tuner} cannot run {problem}: {why}")

    def median_best(tuner: str, problem: str, n: int) -> float | None:
        curves = results.get((tuner, problem))
        if not curves or (tuner, problem) in failed:
            return None
        return statistics.median(c[min(n, len(c)) - 1] for c in curves if c)

    headline: float | None = None
    optuna_headline: float | None = None
    for n in sorted(set(budgets) | set(ml_budgets)):
        rows = [p for p in problems if n in (ml_budgets if PROBLEMS[p].ml else budgets)]
        if not rows:
            continue
        width = max(12, *(len(c) for c in columns))
        print(f"\nmedian best after {n} trials ({a.seeds} seeds; lower is better)")
        print(f"{'problem':<12} {'optimum':>9} " + " ".join(f"{c:>{width}}" for c in columns) + "  best nnix vs optuna")
        wins = 0
        for p in rows:
            vals = {c: median_best(c, p, n) for c in columns}
            line = f"{p:<12} {_fmt(PROBLEMS[p].optimum):>9} " + " ".join(f"{_fmt(vals[c]):>{width}}" for c in columns)
            ours = {c: v for c, v in vals.items() if c != OPTUNA and v is not None}
            if ours and not a.no_optuna and vals.get(OPTUNA) is not None:
                best_name = min(ours, key=lambda c: ours[c])
                ref = vals[OPTUNA]
                assert ref is not None
                verdict = "ahead" if ours[best_name] < ref else "tie" if ours[best_name] == ref else "behind"
                line += f"  {best_name} {verdict} ({_fmt(ours[best_name])} vs {_fmt(ref)})"
                wins += verdict == "ahead"
            print(line)
            if p == "branin" and n == 50:
                headline = vals.get("tpe")
                optuna_headline = vals.get(OPTUNA)
        if not a.no_optuna:
            print(f"nnix's best tuner ahead of Optuna TPE on {wins} of {len(rows)} problems after {n} trials")
    if headline is not None:
        extra = f" (Optuna TPE {_fmt(optuna_headline)}; optimum 0.3979)" if optuna_headline is not None else ""
        print(f"Branin@50 nnix TPE median best: {_fmt(headline)}{extra}")
    print("\nCPU seconds per tuner (all runs): " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(seconds.items())))
    return 0


def window_effect(a: argparse.Namespace) -> int:
    """Median best of TPE with each bad-observation window against TPE without one, same seeds."""
    budgets = sorted({int(x) for x in a.trials.split(",")})
    problems = [p.strip() for p in a.problems.split(",") if p.strip() and not PROBLEMS[p.strip()].ml]
    variants = [f"{WINDOWED}all", *(f"{WINDOWED}{int(w)}" for w in a.tpe_window.split(","))]
    jobs = [(v, p, s, max(budgets)) for p in problems for v in variants for s in range(a.seeds)]
    print(
        f"TPE window effect: {len(jobs)} runs ({len(variants)} variants x {len(problems)} problems x {a.seeds} "
        f"seeds) on {a.jobs} workers"
    )
    t0 = time.perf_counter()
    curves: dict[tuple[str, str], list[list[float]]] = {}
    seconds: dict[str, float] = {}
    with ProcessPoolExecutor(max_workers=a.jobs) as pool:
        for variant, problem, _seed, curve, took in pool.map(_job, jobs):
            if isinstance(curve, str):
                print(f"  {variant} cannot run {problem}: {curve}")
                continue
            curves.setdefault((variant, problem), []).append(curve)
            seconds[variant] = seconds.get(variant, 0.0) + took
    print(f"done in {time.perf_counter() - t0:.0f} s")
    for n in budgets:
        print(
            f"\nmedian best after {n} trials ({a.seeds} seeds; lower is better); in brackets the median gap to "
            "the optimum relative to no window (1.00 = the same)"
        )
        print(f"{'problem':<12} {'optimum':>9} " + " ".join(f"{v:>18}" for v in variants))
        for p in problems:
            opt = PROBLEMS[p].optimum or 0.0
            med = {
                v: statistics.median(c[min(n, len(c)) - 1] for c in curves.get((v, p), [[math.nan]])) for v in variants
            }
            ref_gap = med[variants[0]] - opt
            cells = []
            for v in variants:
                gap = med[v] - opt
                rel = gap / ref_gap if ref_gap > 0 else math.nan
                cells.append(f"{_fmt(med[v])} ({rel:.2f})")
            print(f"{p:<12} {_fmt(PROBLEMS[p].optimum):>9} " + " ".join(f"{c:>18}" for c in cells))
    print("\nCPU seconds per variant (all runs): " + ", ".join(f"{k} {v:.0f}" for k, v in seconds.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
