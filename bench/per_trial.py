"""Per-trial cost as the user sees it: ``nnix create --foreground`` through the real CLI against a bare loop.

Run: python bench/per_trial.py [--trials 51] [--rounds 3] [--baseline /work/wt/base/src] [--profile FILE]

The trial is trivial (``import nni``, get the parameters, report a final result). Each round, paired: a bare
subprocess loop running the same trial 1 and N times (with the nni shim on PYTHONPATH, as nnix runs it), and
``nnix create --foreground`` of a 1-trial and an N-trial experiment (concurrency 1), end to end. Printed
(medians over the rounds), with the ratio to the goal (issue 15 item 3):

* marginal per-trial cost: (CLI(N) - CLI(1)) / (N - 1) minus (bare(N) - bare(1)) / (N - 1); goal <= 5 ms;
* the N-trial experiment through the CLI against a bare loop of N runs plus Python's own start
  (``python -c pass``); goal <= 1.5x.

``--baseline SRC`` measures the same with another nnix source tree on PYTHONPATH (e.g. the starting commit's
checkout) in the same rounds. ``--profile FILE`` runs py-spy on one N-trial run (raw collapsed stacks of
the whole CLI process, manager included). Not a test: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# what users run is compiled once: installed packages have their bytecode, so the processes measured here may
# write theirs (an environment that forbids it would measure Python compiling nnix at every start)
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
GOAL_MARGINAL_MS = 5.0
GOAL_RATIO = 1.5
TRIAL = "import nni\np = nni.get_next_parameter()\nnni.report_final_result(0.5)\n"


def shim_path(src: str | None) -> str:
    code = "from nnix.trial import shim_path; print(shim_path())"
    env = dict(os.environ, **({"PYTHONPATH": src} if src else {}))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def bare(code: Path, n: int, shim: str) -> float:
    env = dict(os.environ, PYTHONPATH=shim)
    t0 = time.perf_counter()
    for _ in range(n):
        subprocess.run([sys.executable, "trial.py"], cwd=code, env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def python_start() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - t0


def cli(code: Path, home: Path, n: int, src: str | None, profile: str | None = None) -> float:
    cfg = {"searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}}, "trialCommand": f"{sys.executable} trial.py",
           "trialCodeDirectory": str(code), "trialConcurrency": 1, "maxTrialNumber": n,
           "tuner": {"name": "Random"}, "trainingService": {"platform": "local"}}
    path = code / f"cfg-{n}.json"
    path.write_text(json.dumps(cfg))
    env = dict(os.environ, NNIX_HOME=str(home))
    if src:
        env["PYTHONPATH"] = src
    argv = [sys.executable, "-m", "nnix.cli.main", "create", "--config", str(path), "--foreground", "--port", "0"]
    if profile:
        argv = ["py-spy", "record", "-f", "raw", "-r", "200", "-s", "-o", profile, "--", *argv]
    t0 = time.perf_counter()
    r = subprocess.run(argv, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"nnix create --foreground failed ({r.returncode}): {r.stderr[-2000:]}")
    return wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=51)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", default=None, help="another nnix source tree, measured in the same rounds")
    ap.add_argument("--profile", default=None, help="py-spy one N-trial CLI run of this tree into this file")
    args = ap.parse_args()
    n = args.trials
    trees = ([("baseline", args.baseline)] if args.baseline else []) + [("this tree", None)]
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="nnix-pertrial-") as tmp:
        code = Path(tmp) / "code"
        code.mkdir()
        (code / "trial.py").write_text(TRIAL)
        shims = {label: shim_path(src) for label, src in trees}
        bare(code, 3, shims["this tree"])  # warm the page cache
        for r in range(args.rounds):
            times.setdefault("python", []).append(python_start())
            times.setdefault("bare1", []).append(bare(code, 1, shims["this tree"]))
            times.setdefault("bareN", []).append(bare(code, n, shims["this tree"]))
            for label, src in trees:
                home = Path(tmp) / f"home-{label.replace(' ', '-')}-{r}"
                times.setdefault(f"{label} 1", []).append(cli(code, home, 1, src))
                times.setdefault(f"{label} N", []).append(cli(code, home, n, src))
        if args.profile:
            cli(code, Path(tmp) / "home-profile", n, None, args.profile)
    med = {k: statistics.median(v) for k, v in times.items()}
    bare_per = (med["bareN"] - med["bare1"]) / (n - 1) * 1000
    print(f"trivial trial (import nni, get parameters, report final); {args.rounds} paired rounds, medians")
    print(f"  python -c pass            {med['python'] * 1000:8.1f} ms")
    print(f"  bare loop                 1 run {med['bare1'] * 1000:8.1f} ms   {n} runs {med['bareN'] * 1000:8.1f} ms"
          f"   ({bare_per:.1f} ms per run)")
    for label, _ in trees:
        one, many = med[f"{label} 1"], med[f"{label} N"]
        per = (many - one) / (n - 1) * 1000
        marginal = per - bare_per
        ratio = many / (med["bareN"] + med["python"])
        print(f"  [{label}] nnix create --foreground: 1 trial {one * 1000:8.1f} ms   {n} trials {many * 1000:8.1f} ms")
        print(f"      marginal per-trial overhead {marginal:6.1f} ms over the bare loop "
              f"(goal <= {GOAL_MARGINAL_MS:.0f} ms: ratio {marginal / GOAL_MARGINAL_MS:.2f}); "
              f"{per:.1f} ms per trial in all")
        print(f"      {n} trials / (bare loop of {n} + python start) = {ratio:.2f}x "
              f"(goal <= {GOAL_RATIO}x: ratio {ratio / GOAL_RATIO:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
