"""Tuner cost per suggestion at long histories, this tree against the old implementation, same run.

Run: python bench/tuner_scale.py [--sizes 1000,20000,100000] [--reps 9] [--rounds 3]
                                 [--tuners tpe,random,grid,anneal,evolution] [--base /work/wt/base/src] [--no-base]

For each tuner and history size ``n``, a history of ``n`` finished trials is built, one warm tuner is
asked for the next proposal ``--reps`` times, the history growing by that proposal (finished) after
each ask, as the manager drives it. Each ask gets a fresh ``History`` of the same records, of one lineage, as
the manager hands it, and handing it is timed with the ask: a view of the manager's list where the tree has
``History.view`` (no copy), else ``History(records)`` (the copy the manager made per ask; a plain ``tuple`` for
trees without ``History``).
The figure is the median CPU time of one ask (of ``--rounds`` runs of each tree, alternating: the median of
their medians) (``time.process_time``: the machine may be loaded by
others; the wall-clock median is printed too). The first ask of a fresh tuner (catching up with the
whole history) is shown apart.

* ``tpe``, ``anneal``, ``evolution``: Branin's space (two uniforms); values are Branin's.
* ``random``: a discrete space of 1,000,000 points (choice of 1000 x randint 1000), where repeats are
  possible and each draw is checked against the history; the history holds random points.
* ``grid``: a 100,000-point grid (choice of 100 x randint 1000); the history holds its first points
  in grid order (at 100k: all but ``reps + 1`` of them, so that something is left to propose).

Goals (issue 15, item 4): TPE <= 3 ms at 20k and <= 10 ms at 100k; Random and Grid O(1) per
suggestion (printed: cost at the largest size / cost at the smallest, goal about 1). Anneal and
Evolution have no goal: their growth is printed. Each worker runs in its own process: this tree
(``src`` next to this script) and the old code (``--base``, a checkout of the starting commit).
Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

TUNERS = ("tpe", "random", "grid", "anneal", "evolution")
GOALS_MS = {("tpe", 20000): 3.0, ("tpe", 100000): 10.0}
GRID_SIZE = 100_000


def _branin(x: float, y: float) -> float:
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (y - b * x * x + c * x - 6) ** 2 + 10 * (1 - t) * math.cos(x) + 10


def _value(params: dict[str, Any]) -> float:
    if "x" in params:
        return _branin(params["x"], params["y"])
    return float(hash((str(params["a"]), params["b"])) % 1000) / 1000.0


def worker(sizes: list[int], reps: int, tuners: list[str]) -> dict[str, Any]:
    """Times in this process, with whatever ``nnix`` is importable: {tuner: {n: figures}}."""
    import itertools

    import numpy as np

    from nnix.space import SearchSpace, grid
    from nnix.tuners.base import Direction, TrialRecord, TunerContext

    try:
        from nnix.tuners.base import History
    except ImportError:  # older trees: a plain tuple
        History = None  # type: ignore[assignment,misc]
    lineage = object()
    replaced: list[int] = []  # records are only appended here

    def as_history(records: list[Any]) -> Any:
        if History is None:
            return tuple(records)
        if hasattr(History, "view"):
            if hasattr(History, "replaced_since"):  # with the manager's (here empty) log of replaced records
                return History.view(records, lineage, replaced)
            return History.view(records, lineage)
        return History(records, lineage)
    from nnix.tuners.tpe import TpeTuner

    try:
        from nnix.model.status import TrialStatus
    except ImportError:  # older trees
        from nnix.core.status import TrialStatus  # type: ignore[no-redef]

    from nnix.tuners.anneal import AnnealTuner
    from nnix.tuners.evolution import EvolutionTuner
    from nnix.tuners.gridsearch import GridSearchTuner
    from nnix.tuners.random import RandomTuner

    branin_space = {"x": {"_type": "uniform", "_value": [-5, 10]}, "y": {"_type": "uniform", "_value": [0, 15]}}
    spaces = {
        "tpe": branin_space,
        "anneal": branin_space,
        "evolution": branin_space,
        "random": {
            "a": {"_type": "choice", "_value": list(range(1000))},
            "b": {"_type": "randint", "_value": [0, 1000]},
        },
        "grid": {"a": {"_type": "choice", "_value": list(range(100))}, "b": {"_type": "randint", "_value": [0, 1000]}},
    }
    factories = {
        "tpe": TpeTuner,
        "random": RandomTuner,
        "grid": GridSearchTuner,
        "anneal": AnnealTuner,
        "evolution": EvolutionTuner,
    }
    out: dict[str, Any] = {}
    for name in tuners:
        space = SearchSpace.from_json(spaces[name])
        direction = Direction.MAXIMIZE if name == "evolution" else Direction.MINIMIZE
        out[name] = {}
        for n in sizes:
            rng = np.random.default_rng(n)
            if name == "grid":
                n_hist = min(n, GRID_SIZE - reps - 1)
                points = list(itertools.islice(grid(space), n_hist))
            elif name == "random":
                n_hist = n
                points = [{"a": int(a), "b": int(b)} for a, b in rng.integers(0, 1000, size=(n, 2))]
            else:
                n_hist = n
                xs, ys = rng.uniform(-5, 10, n), rng.uniform(0, 15, n)
                points = [{"x": float(x), "y": float(y)} for x, y in zip(xs, ys, strict=True)]
            history = [TrialRecord(i, p, TrialStatus.SUCCEEDED, _value(p)) for i, p in enumerate(points)]
            tuner = factories[name]()
            ctx = TunerContext(space, direction, 1, as_history(history))
            t0 = time.process_time()
            tuner.suggest(ctx, [n_hist])
            first = time.process_time() - t0
            cpu: list[float] = []
            wall: list[float] = []
            for k in range(reps):
                pid = n_hist + 1 + k
                t0, w0 = time.process_time(), time.perf_counter()
                ctx = TunerContext(space, direction, 1, as_history(history))
                got = tuner.suggest(ctx, [pid])
                cpu.append(time.process_time() - t0)
                wall.append(time.perf_counter() - w0)
                history.append(TrialRecord(pid, got[0], TrialStatus.SUCCEEDED, _value(got[0])))
            out[name][str(n)] = {
                "history": n_hist,
                "cpu_ms": 1000 * statistics.median(cpu),
                "wall_ms": 1000 * statistics.median(wall),
                "first_ms": 1000 * first,
            }
            print(f"  {name} n={n}: {out[name][str(n)]['cpu_ms']:.2f} ms", file=sys.stderr, flush=True)
    return out


def _run(src: Path, sizes: list[int], reps: int, tuners: list[str]) -> dict[str, Any]:
    # the tree under test first; what was on the path (the dependencies' site, if any) after it
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(src), os.environ.get("PYTHONPATH")) if p)}
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        "--sizes",
        ",".join(map(str, sizes)),
        "--reps",
        str(reps),
        "--tuners",
        ",".join(tuners),
    ]
    done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the runs of one tree."""
    return {
        name: {
            n: {key: statistics.median(run[name][n][key] for run in runs) for key in runs[0][name][n]}
            for n in runs[0][name]
        }
        for name in runs[0]
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000,20000,100000")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--rounds", type=int, default=3, help="alternating runs of each tree (median of their medians)")
    ap.add_argument("--tuners", default=",".join(TUNERS))
    ap.add_argument("--base", default="/work/wt/base/src", help="src of the old implementation")
    ap.add_argument("--no-base", action="store_true", help="skip the old implementation")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    sizes = sorted(int(s) for s in a.sizes.split(","))
    tuners = [t.strip() for t in a.tuners.split(",") if t.strip()]
    if a.worker:
        print(json.dumps(worker(sizes, a.reps, tuners)))
        return 0

    here = Path(__file__).resolve().parent.parent / "src"
    print(f"tuner cost per suggestion, median CPU ms of {a.reps} asks, {a.rounds} alternating rounds"
          f" (machine load: {os.getloadavg()[0]:.1f})")
    t0 = time.perf_counter()
    with_base = not a.no_base and Path(a.base).is_dir()
    news: list[dict[str, Any]] = []
    olds: list[dict[str, Any]] = []
    for r in range(max(1, a.rounds)):  # alternating, the order swapped each round: load hits both alike
        order = [(here, news), (Path(a.base), olds)] if with_base else [(here, news)]
        for src, into in order if r % 2 == 0 else order[::-1]:
            into.append(_run(src, sizes, a.reps, tuners))
    new = _median_of(news)
    old = _median_of(olds) if olds else None
    print(f"measured in {time.perf_counter() - t0:.0f} s\n")
    print(
        f"{'tuner':<10} {'history':>8} {'new ms':>9} {'wall ms':>9} {'old ms':>9} {'old/new':>8} {'goal':>12}"
        f" {'1st new':>9} {'1st old':>9}"
    )
    for name in tuners:
        for n in sizes:
            f = new[name][str(n)]
            o = old[name][str(n)] if old else None
            goal = GOALS_MS.get((name, n))
            goal_s = f"{f['cpu_ms'] / goal:.2f}x of {goal:g}" if goal else ""
            print(
                f"{name:<10} {f['history']:>8} {f['cpu_ms']:>9.3f} {f['wall_ms']:>9.3f} "
                f"{o['cpu_ms'] if o else math.nan:>9.3f} {o['cpu_ms'] / f['cpu_ms'] if o else math.nan:>8.1f} "
                f"{goal_s:>12} {f['first_ms']:>9.1f} {o['first_ms'] if o else math.nan:>9.1f}"
            )
        lo, hi = new[name][str(sizes[0])]["cpu_ms"], new[name][str(sizes[-1])]["cpu_ms"]
        growth = f"growth {sizes[-1] // 1000}k/{sizes[0] // 1000}k: new {hi / lo:.2f}"
        if old:
            growth += f", old {old[name][str(sizes[-1])]['cpu_ms'] / old[name][str(sizes[0])]['cpu_ms']:.2f}"
        if name in ("random", "grid"):
            growth += " (goal O(1): about 1)"
        print(f"{'':<10} {growth}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
