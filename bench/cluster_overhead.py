"""Per-trial overhead of the cluster engines (Slurm, Ray, Kubernetes), reuse vs non-reuse, against the
same trials run locally in the same run.

Each engine's lab comes from ``bench/cluster/<engine>.py`` (a context manager ``engine()`` that brings
up a real engine on this machine, as the tests do, and yields the ``trainingService`` of an experiment
on it). Every mode runs a short warm-up experiment first, then the measured one: ``--trials`` trivial
trials (start, read parameters, report one result). Measured: the span from the first trial start to the
last trial end, from the experiment's own event log, so the one-off setup is printed apart.

    per-trial slot time = span x concurrency / trials
    overhead            = slot time (engine) - slot time (local)

Goals (issue 6): reuse within 50 ms per trial of local on every engine; non-reuse bounded by the
engine's own submit-to-running latency (Slurm ~0.8 s, Kubernetes Job ~0.3 s here), not by nnix.
Not a test: nothing here asserts a timing.

Run: sudo python bench/cluster_overhead.py [--trials 50] [--concurrency 2] [--engines slurm,ray,kubernetes]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TRIAL = "import nni\np = nni.get_next_parameter()\nnni.report_final_result(p['x'])\n"
HERE = Path(__file__).resolve().parent


def run(code: Path, trials: int, concurrency: int, service: dict[str, Any]) -> tuple[float, float]:
    """``(wall seconds of the whole run, span first start .. last end)``."""
    from nnix.core.events import TrialEnded, TrialStarted
    from nnix.core.status import ExperimentStatus, TrialStatus
    from nnix.home import STORE_NAME
    from nnix.store.sqlite import SqliteStore
    from nnix.testing.experiments import make_experiment, run_experiment

    _, exp_dir = make_experiment(
        code, searchSpace={"x": {"_type": "uniform", "_value": [0, 1]}}, trialCommand=f"{sys.executable} trial.py",
        trialConcurrency=concurrency, maxTrialNumber=trials, trainingService=service,
    )
    t0 = time.perf_counter()
    st = run_experiment(exp_dir, timeout=600)
    wall = time.perf_counter() - t0
    assert st.status is ExperimentStatus.DONE and st.count(TrialStatus.SUCCEEDED) == trials, st.message
    store = SqliteStore(exp_dir / STORE_NAME)
    try:
        events = list(store.read())
    finally:
        store.close()
    starts = [s.ts for s in events if isinstance(s.event, TrialStarted)]
    ends = [s.ts for s in events if isinstance(s.event, TrialEnded)]
    return wall, max(ends) - min(starts)


def _engine(name: str) -> Any:
    path = HERE / "cluster" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"bench_cluster_{name}", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"no lab for {name}: {path} is missing")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.engine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--engines", default="slurm,ray,kubernetes")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    n, c = args.trials, args.concurrency
    results: dict[str, tuple[float, float]] = {}
    skipped: dict[str, str] = {}
    bare: dict[str, tuple[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["NNIX_HOME"] = str(Path(tmp) / "home")
        code = Path(tmp) / "code"
        code.mkdir()
        (code / "trial.py").write_text(TRIAL)
        run(code, 3, c, {"platform": "local"})
        results["local"] = run(code, n, c, {"platform": "local"})
        for name in [e.strip() for e in args.engines.split(",") if e.strip()]:
            try:
                with contextlib.ExitStack() as stack:
                    service = dict(stack.enter_context(_engine(name)()))
                    bare_fn = service.pop("_bare", None)  # the engine alone, where the lab can time it
                    for reuse in (True, False):
                        mode = f"{name} {'reuse' if reuse else 'non-reuse'}"
                        cfg = {**service, "reuseMode": reuse}
                        run(code, 2, c, cfg)  # warm-up
                        results[mode] = run(code, n, c, cfg)
                        print(f"  {mode}: done", flush=True)
                    if bare_fn is not None:
                        bare[name] = bare_fn()
            except (RuntimeError, OSError, SystemExit, AssertionError) as e:
                skipped[name] = f"{type(e).__name__}: {e}"
        # local again at the end (the machine warmed up meanwhile): the faster of the two runs is the baseline
        again = run(code, n, c, {"platform": "local"})
        if again[1] < results["local"][1]:
            results["local"] = again
    local_slot = results["local"][1] * c / n
    print(f"{n} trivial trials, concurrency {c}; each engine on this machine vs local, in the same run")
    print(f"{'mode':<24}{'wall s':>9}{'setup s':>9}{'span s':>9}{'ms/trial':>10}{'overhead ms':>13}{'ratio':>8}")
    for name, (wall, span) in results.items():
        slot = span * c / n
        print(f"{name:<24}{wall:>9.2f}{wall - span:>9.2f}{span:>9.2f}{slot * 1000:>10.1f}"
              f"{(slot - local_slot) * 1000:>13.1f}{slot / local_slot:>8.2f}")
    for name in results:
        if name.endswith(" reuse"):
            over = (results[name][1] * c / n - local_slot) * 1000
            print(f"{name}: {over:.1f} ms per trial above local (goal: <= 50 ms) -> "
                  f"{'met' if over <= 50 else 'NOT met'}")
    for name, (label, seconds) in bare.items():
        ms = (results[f"{name} non-reuse"][1] * c / n) * 1000 if f"{name} non-reuse" in results else float("nan")
        print(f"{name} non-reuse: {ms:.0f} ms per trial slot; the engine alone, {label}: {seconds * 1000:.0f} ms "
              f"(ratio {ms / (seconds * 1000):.2f})")
    for name, why in skipped.items():
        print(f"!!! {name} did NOT run: {why}")


if __name__ == "__main__":
    main()
