"""Assessor cost per assessment at long histories, this tree against the old implementation, same run.

Run: python bench/assessor_scale.py [--sizes 1000,20000] [--reports 40] [--rounds 3] [--base /work/wt/base/src]
                                    [--no-base]

For each history size ``n`` (finished successful trials, 20 intermediate results each, held as the manager
holds them) two trials, one after the other, report ``--reports`` results each; at each one the manager's part
is done as the tree's manager does it (the trial's record replaced in the history list; the assessor's history
built: the tuple of every other record plus the trial's on the old code, an ``AssessedHistory`` over a view of
the list on this tree) and the assessor is asked. The figure is the median CPU time of one assessment (history
built + assess) of the second trial, the median of ``--rounds`` alternating runs of each tree; "1st" is the
first trial's (on this tree, the assessor's cache catching up: Medianstop sorts a step's averages when first
asked for it, what one assessment cost before).

* ``medianstop``: ``Medianstop`` (start_step 0), a trial whose results stay above the median (Good).
* ``curvefitting``: ``Curvefitting`` (start_step 1, epoch_num 9999: every report is judged) with the curve
  fitting itself replaced by a constant (it is unchanged and costs tens of ms: it would hide what changed,
  the reading of the history).

Goal (issue 15's tpe part): O(1) per assessment (printed: cost at the largest size / cost at the smallest,
goal about 1). Each worker runs in its own process. Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
ASSESSORS = ("medianstop", "curvefitting")
RESULTS = 20


def worker(sizes: list[int], reports: int) -> dict[str, Any]:
    """Times in this process, with whatever ``nnix`` is importable: {assessor: {n: figures}}."""
    import numpy as np

    import nnix.assessors.curvefitting as cf
    from nnix.assessors.base import AssessorContext
    from nnix.assessors.curvefitting import CurvefittingArgs, CurvefittingAssessor
    from nnix.assessors.medianstop import MedianstopArgs, MedianstopAssessor
    from nnix.model.status import TrialStatus
    from nnix.model.trials import Direction, Series, TrialRecord
    from nnix.tuners.base import History

    try:
        from nnix.assessors.base import AssessedHistory
    except ImportError:  # the old code
        AssessedHistory = None  # type: ignore[assignment,misc]

    cf.predict = lambda history, target: 0.5  # type: ignore[assignment]  # (the fit: see the module docstring)
    out: dict[str, Any] = {}
    for name in ASSESSORS:
        out[name] = {}
        for n in sizes:
            rng = np.random.default_rng(n)
            curves = rng.uniform(0, 1, size=(n, RESULTS)).cumsum(axis=1) / np.arange(1, RESULTS + 1)
            history = [TrialRecord(i, {"x": i}, TrialStatus.SUCCEEDED, float(c[-1]), Series(c.tolist()), f"t{i}")
                       for i, c in enumerate(curves)]
            lineage, log = object(), list[int]()
            if name == "medianstop":
                assessor: Any = MedianstopAssessor(MedianstopArgs(optimize_mode="maximize"))
            else:
                assessor = CurvefittingAssessor(CurvefittingArgs(start_step=1, epoch_num=9999))
            times: list[list[float]] = []
            for tid, pid in (("first", n), ("second", n + 1)):  # two trials, one after the other
                at = len(history)
                history.append(TrialRecord(pid, {"x": pid}, TrialStatus.RUNNING, None, (), tid))
                cpu: list[float] = []
                results: list[float] = []
                for k in range(reports):
                    results.append(2.0 + 0.01 * k)
                    t0 = time.process_time()
                    # the manager: the trial's record replaced (a metric arrived), then the assessor's history
                    history[at] = TrialRecord(pid, {"x": pid}, TrialStatus.RUNNING, None, Series(results), tid)
                    log.append(at)
                    record = TrialRecord(pid, {"x": pid}, TrialStatus.RUNNING, None, tuple(results), tid)
                    if AssessedHistory is not None:
                        ctx_history: Any = AssessedHistory(History.view(history, lineage, log), at, record)
                    else:
                        ctx_history = tuple([r for r in history if r.trial_id != tid] + [record])
                    assessor.assess(AssessorContext(Direction.MAXIMIZE, ctx_history), record)
                    cpu.append(time.process_time() - t0)
                times.append(cpu)
                history[at] = TrialRecord(pid, {"x": pid}, TrialStatus.SUCCEEDED, results[-1], Series(results), tid)
                log.append(at)
            first, cpu = times
            out[name][str(n)] = {"cpu_ms": 1000 * statistics.median(cpu), "first_ms": 1000 * statistics.median(first)}
            print(f"  {name} n={n}: {out[name][str(n)]['cpu_ms']:.3f} ms", file=sys.stderr, flush=True)
    return out


def _run(src: Path, sizes: list[int], reports: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(src), os.environ.get("PYTHONPATH")) if p)}
    cmd = [sys.executable, __file__, "--worker", "--sizes", ",".join(map(str, sizes)), "--reports", str(reports)]
    done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        name: {n: {key: statistics.median(run[name][n][key] for run in runs) for key in runs[0][name][n]}
               for n in runs[0][name]}
        for name in runs[0]
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000,20000")
    ap.add_argument("--reports", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--base", default="/work/wt/base/src", help="src of the old implementation")
    ap.add_argument("--no-base", action="store_true", help="skip the old implementation")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    sizes = sorted(int(s) for s in a.sizes.split(","))
    if a.worker:
        print(json.dumps(worker(sizes, a.reports)))
        return 0
    here = Path(__file__).resolve().parent.parent / "src"
    print(f"assessor cost per assessment, median CPU ms of {a.reports} reports, {a.rounds} alternating rounds"
          f" (machine load: {os.getloadavg()[0]:.1f})")
    with_base = not a.no_base and Path(a.base).is_dir()
    news: list[dict[str, Any]] = []
    olds: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for r in range(max(1, a.rounds)):
        order = [(here, news), (Path(a.base), olds)] if with_base else [(here, news)]
        for src, into in order if r % 2 == 0 else order[::-1]:
            into.append(_run(src, sizes, a.reports))
    new = _median_of(news)
    old = _median_of(olds) if olds else None
    print(f"measured in {time.perf_counter() - t0:.0f} s\n")
    print(f"{'assessor':<13} {'history':>8} {'new ms':>9} {'old ms':>9} {'old/new':>8} {'1st new':>9} {'1st old':>9}")
    for name in ASSESSORS:
        for n in map(str, sizes):
            f, o = new[name][n], old[name][n] if old else None
            print(f"{name:<13} {n:>8} {f['cpu_ms']:>9.3f} {o['cpu_ms'] if o else float('nan'):>9.3f} "
                  f"{o['cpu_ms'] / f['cpu_ms'] if o else float('nan'):>8.1f} {f['first_ms']:>9.1f} "
                  f"{o['first_ms'] if o else float('nan'):>9.1f}")
        lo, hi = new[name][str(sizes[0])]["cpu_ms"], new[name][str(sizes[-1])]["cpu_ms"]
        growth = f"growth {sizes[-1] // 1000}k/{sizes[0] // 1000}k: new {hi / lo:.2f}"
        if old:
            growth += f", old {old[name][str(sizes[-1])]['cpu_ms'] / old[name][str(sizes[0])]['cpu_ms']:.2f}"
        print(f"{'':<13} {growth} (goal O(1): about 1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
