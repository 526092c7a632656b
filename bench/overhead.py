"""Per-trial overhead of nnix against a bare subprocess loop, launch-to-first-trial, and stop.

Run: python bench/overhead.py [--trials 50]. Prints ratios against a baseline measured in the same
run. Not a test: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRIAL = "import nni\np = nni.get_next_parameter()\nnni.report_final_result(0.5)\n"


def bare_loop(code_dir: Path, n: int, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        subprocess.run([sys.executable, "trial.py"], cwd=code_dir, env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def nnix_run(code_dir: Path, n: int, concurrency: int) -> float:
    from nnix.core.status import ExperimentStatus, TrialStatus
    from nnix.testing.experiments import make_experiment, run_experiment

    _, d = make_experiment(
        code_dir, searchSpace={"x": {"_type": "uniform", "_value": [0, 1]}},
        trialCommand=f"{sys.executable} trial.py", trialConcurrency=concurrency, maxTrialNumber=n,
    )
    t0 = time.perf_counter()
    st = run_experiment(d)
    wall = time.perf_counter() - t0
    assert st.status is ExperimentStatus.DONE and st.count(TrialStatus.SUCCEEDED) == n
    return wall


def config_file(code_dir: Path, trial_cmd: str, n: int, concurrency: int) -> Path:
    cfg = {
        "searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}}, "trialCommand": trial_cmd,
        "trialCodeDirectory": str(code_dir), "trialConcurrency": concurrency, "maxTrialNumber": n,
        "tuner": {"name": "Random"}, "trainingService": {"platform": "local"},
    }
    path = code_dir / f"cfg-{n}-{concurrency}.yml"
    path.write_text(json.dumps(cfg))
    return path


def first_trial_latency(code_dir: Path, foreground: bool) -> float:
    from nnix.core.events import TrialStarted
    from nnix.home import STORE_NAME, Registry
    from nnix.store.sqlite import SqliteStore

    cfg = config_file(code_dir, f"{sys.executable} trial.py", 1 if foreground else 1000, 1)
    before = {e.id for e in Registry().all()}
    t0 = time.time()
    args = [sys.executable, "-m", "nnix.cli.main", "create", "--config", str(cfg), "--port", "0"]
    if foreground:
        args.append("--foreground")
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    (entry,) = [e for e in Registry().all() if e.id not in before]
    store = SqliteStore(Path(entry.dir) / STORE_NAME)
    started = next(s.ts for s in store.read() if isinstance(s.event, TrialStarted))
    store.close()
    if not foreground:
        subprocess.run([sys.executable, "-m", "nnix.cli.main", "stop", entry.id], check=True, stdout=subprocess.DEVNULL)
    return started - t0


def stop_latency(code_dir: Path) -> float:
    from nnix.core.status import TrialStatus
    from nnix.home import Registry, read_state

    (code_dir / "sleepy.py").write_text("import nni, time\nnni.get_next_parameter()\ntime.sleep(600)\n")
    cfg = config_file(code_dir, f"{sys.executable} sleepy.py", 100, 2)
    before = {e.id for e in Registry().all()}
    subprocess.run([sys.executable, "-m", "nnix.cli.main", "create", "--config", str(cfg), "--port", "0"],
                   check=True, stdout=subprocess.DEVNULL)
    (entry,) = [e for e in Registry().all() if e.id not in before]
    while read_state(Path(entry.dir)).count(TrialStatus.RUNNING) < 2:
        time.sleep(0.05)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "nnix.cli.main", "stop", entry.id], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trials", type=int, default=50)
    n = ap.parse_args().trials
    from nnix.trial import shim_path

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["NNIX_HOME"] = str(Path(tmp) / "home")
        code_dir = Path(tmp) / "code"
        code_dir.mkdir()
        (code_dir / "trial.py").write_text(TRIAL)
        env = dict(os.environ, PYTHONPATH=shim_path())
        bare_loop(code_dir, 3, env)  # warm the page cache
        bare = bare_loop(code_dir, n, env)
        c1 = nnix_run(code_dir, n, 1)
        c2 = nnix_run(code_dir, n, 2)
        print(f"{n} trivial trials (import nni, get parameters, report final)")
        print(f"  bare subprocess loop      {bare / n * 1000:7.1f} ms/trial   (baseline)")
        print(f"  nnix concurrency 1        {c1 / n * 1000:7.1f} ms/trial   ratio {c1 / bare:.2f}x  (goal <= 1.5x)")
        print(f"  nnix concurrency 2        {c2 / n * 1000:7.1f} ms/trial   ratio {c2 / bare:.2f}x")
        fg = min(first_trial_latency(code_dir, True) for _ in range(3))
        bg = min(first_trial_latency(code_dir, False) for _ in range(3))
        print(f"  launch-to-first-trial     foreground {fg:.3f} s, background daemon {bg:.3f} s  (goal <= 0.5 s;"
              f" NNI 3.0: 5.6 s)")
        stop = min(stop_latency(code_dir) for _ in range(3))
        print(f"  nnix stop (2 running)     {stop:.3f} s  (goal <= 0.5 s; NNI 3.0: 6 s)")


if __name__ == "__main__":
    main()
