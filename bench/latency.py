"""Suggestion latency as the history grows, every nnix tuner against Optuna's TPE.

Run: python bench/latency.py [--sizes 100,500,1000,2000] [--dims 2,10] [--calls 9] [--tuners tpe,...]

For each tuner, space (``d`` uniform parameters on [0, 1]) and history size ``n``: a history of ``n``
completed trials (random points, sphere objective) is built; then ``--calls`` suggestions are timed,
each for a history one record longer than the previous (as in a running experiment, where the same
tuner instance sees the history grow), and the median is printed in milliseconds. Optuna's
``TPESampler`` (default settings, seeded) is timed the same way in the same run: a study holding
``n`` finished trials, one ``ask`` plus the ``suggest_float`` calls, then ``tell``.

Tuners known to be slow are capped (``CAPS``: history sizes above the cap are skipped and shown as
``-``), and any tuner whose median passes ``--slow-ms`` at one size skips the larger sizes. Tuners
are discovered like ``bench/quality.py`` does. Prints the ratio nnix TPE / Optuna TPE per size.
Not a test: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quality import discover_tuners, make_tuner

OPTUNA = "optuna-tpe"
CAPS = {"gp": 500, "gptuner": 500, "metis": 500, "metistuner": 500, "dngo": 1000, "dngotuner": 1000}


def _history(d: int, n: int, seed: int = 0) -> list[tuple[dict[str, float], float]]:
    rng = np.random.default_rng(seed)
    points = rng.random((n, d))
    return [({f"x{j}": float(p[j]) for j in range(d)}, float(((p - 0.3) ** 2).sum())) for p in points]


def time_nnix(cls: type[Any], d: int, n: int, calls: int) -> float:
    from nnix.core.status import TrialStatus
    from nnix.space import SearchSpace
    from nnix.tuners.base import Direction, TrialRecord, TunerContext

    space = SearchSpace.from_json({f"x{j}": {"_type": "uniform", "_value": [0, 1]} for j in range(d)})
    data = _history(d, n + calls)
    records = [TrialRecord(i, p, TrialStatus.SUCCEEDED, v) for i, (p, v) in enumerate(data)]
    tuner = make_tuner(cls)
    tuner.suggest(TunerContext(space, Direction.MINIMIZE, 0, tuple(records[: n - 1])), [n - 1])  # warm up
    times = []
    for k in range(calls):
        ctx = TunerContext(space, Direction.MINIMIZE, 0, tuple(records[: n + k]))
        t0 = time.perf_counter()
        tuner.suggest(ctx, [n + k])
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def time_optuna(d: int, n: int, calls: int) -> float:
    import optuna
    from optuna.distributions import FloatDistribution
    from optuna.trial import create_trial

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    data = _history(d, n)
    dists = {f"x{j}": FloatDistribution(0.0, 1.0) for j in range(d)}
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0))
    study.add_trials([create_trial(params=p, distributions=dists, value=v) for p, v in data])
    times = []
    for _ in range(calls + 1):
        t0 = time.perf_counter()
        trial = study.ask()
        params = [trial.suggest_float(name, 0.0, 1.0) for name in dists]
        times.append(time.perf_counter() - t0)
        study.tell(trial, float(sum((x - 0.3) ** 2 for x in params)))
    return statistics.median(times[1:]) * 1000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="100,500,1000,2000", help="history sizes (completed trials)")
    ap.add_argument("--dims", default="2,10", help="space dimensions")
    ap.add_argument("--calls", type=int, default=9, help="timed suggestions per cell (median)")
    ap.add_argument("--tuners", default=None, help="comma-separated registered names (default: all)")
    ap.add_argument("--slow-ms", type=float, default=3000.0, help="skip larger histories once a tuner is this slow")
    ap.add_argument("--no-optuna", action="store_true")
    a = ap.parse_args(argv)
    sizes = sorted(int(x) for x in a.sizes.split(","))
    dims = [int(x) for x in a.dims.split(",")]
    only = [t.strip().lower() for t in a.tuners.split(",")] if a.tuners else None
    tuners, skipped = discover_tuners(only)
    for name, why in skipped.items():
        print(f"skipped {name}: {why}")
    columns: list[str] = [*tuners, *([] if a.no_optuna else [OPTUNA])]
    table: dict[tuple[str, int, int], float | None] = {}
    for name in columns:
        for d in dims:
            too_slow = False
            for n in sizes:
                if too_slow or n > CAPS.get(name, n):
                    table[(name, d, n)] = None
                    continue
                try:
                    ms = time_optuna(d, n, a.calls) if name == OPTUNA else time_nnix(tuners[name], d, n, a.calls)
                except Exception as e:
                    print(f"{name} failed at d={d} n={n}: {type(e).__name__}: {e}")
                    table[(name, d, n)] = None
                    too_slow = True
                    continue
                table[(name, d, n)] = ms
                too_slow = ms > a.slow_ms
                print(f"  {name:<14} d={d:<3} n={n:<5} {ms:10.2f} ms", flush=True)

    print("\nsuggestion latency, median ms (history = completed trials)")
    header = f"{'tuner':<14} {'d':>3} " + " ".join(f"{'n=' + str(n):>10}" for n in sizes)
    print(header)
    for name in columns:
        for d in dims:
            cells = []
            for n in sizes:
                v = table.get((name, d, n))
                cells.append(f"{v:10.2f}" if v is not None else f"{'-':>10}")
            print(f"{name:<14} {d:>3} " + " ".join(cells))
    if "tpe" in tuners and not a.no_optuna:
        print("\nnnix TPE / Optuna TPE latency ratio (lower is better)")
        for d in dims:
            ratios = []
            for n in sizes:
                ours, theirs = table.get(("tpe", d, n)), table.get((OPTUNA, d, n))
                ratios.append(f"{ours / theirs:10.3f}" if ours and theirs else f"{'-':>10}")
            print(f"{'tpe/optuna':<14} {d:>3} " + " ".join(ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
