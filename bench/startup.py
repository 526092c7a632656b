"""Start-up as the user sees it, through the real CLI (issue 15, item 3; issue 27, item 6): ``nnix --help``,
``nnix create --foreground`` to its first line and to the first trial running, ``nnix stop`` of an experiment with
two running trials, ``nnix trial ls ID`` and ``nnix experiment status ID`` of a finished one, ``nnix experiment list
--all`` and ``nnix trial ls --help`` (the last three were typer's verbs before issue 27).

Run: python bench/startup.py [--repeat 5] [--old-src /work/wt/base/src] [--ls-home HOME --ls-id ID]. Each figure
is the median (and the minimum) of ``--repeat`` runs, printed with its ratio to the goal and beside ``python -c
pass`` (Python's own start) measured in the same run; with ``--old-src``, each is also measured with that tree on
``PYTHONPATH`` (runs alternating), printed below it as "before". ``--ls-home``/``--ls-id``: also ``nnix trial ls ID
--tail 10`` on that experiment (e.g. bench/scale_view.py's 100k store; only read).
Not a test: nothing here asserts a timing. The ``nnix`` console script beside this Python is used (``python -m
nnix.cli.main`` without it); the tree it runs is the one ``PYTHONPATH`` (or the install) gives.
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
from collections.abc import Callable
from pathlib import Path

# users' installs have their bytecode: the processes measured here may write theirs (an environment that forbids
# it would measure Python compiling nnix at every start)
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
GOALS: dict[str, float | None] = {"help": 0.150, "first_trial": 0.300, "stop": 0.300, "trial_ls": 0.300,
                                  "first_line": None, "other": None}
Env = dict[str, str] | None  # the environment of the nnix processes measured (None: this one's)
SCRIPT = Path(sys.executable).parent / "nnix"
NNIX = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "nnix.cli.main"]
TRIAL = "import nni\nnni.get_next_parameter()\nnni.report_final_result(0.5)\n"
SLEEPY = "import nni, time\nnni.get_next_parameter()\ntime.sleep(600)\n"


def run(args: list[str], env: Env = None) -> float:
    t0 = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)  # (exit 0 only)
    return time.perf_counter() - t0


def config(code_dir: Path, script: str, trials: int, concurrency: int, tuner: str) -> Path:
    cfg = {
        "searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}, "y": {"_type": "choice", "_value": [1, 2, 3]}},
        "trialCommand": f"{sys.executable} {script}", "trialCodeDirectory": str(code_dir),
        "trialConcurrency": concurrency, "maxTrialNumber": trials,
        "tuner": {"name": tuner, "classArgs": {"optimize_mode": "maximize"}}, "trainingService": {"platform": "local"},
    }
    path = code_dir / f"{script}-{trials}-{concurrency}-{tuner}.json"
    path.write_text(json.dumps(cfg))
    return path


def new_entry(before: set[str]) -> Path:
    from nnix.home import Registry

    (entry,) = [e for e in Registry().all() if e.id not in before]
    return Path(entry.dir)


def first_trial(code_dir: Path, tuner: str, env: Env = None) -> float:
    """Wall time from running ``nnix create --foreground`` to the first trial's process started (its
    ``TrialStarted`` event, stamped by the manager when the process runs)."""
    from nnix.home import STORE_NAME, Registry
    from nnix.model.events import TrialStarted
    from nnix.store.sqlite import SqliteStore

    cfg = config(code_dir, "trial.py", 1, 1, tuner)
    before = {e.id for e in Registry().all()}
    t0 = time.time()
    subprocess.run([*NNIX, "create", "--config", str(cfg), "--port", "0", "--foreground"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    store = SqliteStore(new_entry(before) / STORE_NAME, create=False)
    try:
        started = next(s.ts for s in store.read() if isinstance(s.event, TrialStarted))
    finally:
        store.close()
    return started - t0


def first_line(code_dir: Path, env: Env = None) -> float:
    """Wall time from running ``nnix create --foreground`` to its first line on stdout (the experiment's id and web
    UI address); the experiment then runs to its end, untimed."""
    cfg = config(code_dir, "trial.py", 1, 1, "Random")
    t0 = time.perf_counter()
    proc = subprocess.Popen([*NNIX, "create", "--config", str(cfg), "--port", "0", "--foreground"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert proc.stdout is not None
    proc.stdout.readline()
    elapsed = time.perf_counter() - t0
    proc.stdout.read()
    if proc.wait() != 0:
        raise RuntimeError("nnix create --foreground failed")
    return elapsed


def stop(code_dir: Path, env: Env = None) -> float:
    """Wall time of ``nnix stop ID`` for a daemon experiment with two running trials."""
    from nnix.home import Registry, read_state
    from nnix.model.status import TrialStatus
    from nnix.testing.waiting import wait_until

    cfg = config(code_dir, "sleepy.py", 100, 2, "Random")
    before = {e.id for e in Registry().all()}
    subprocess.run([*NNIX, "create", "--config", str(cfg), "--port", "0"], check=True, stdout=subprocess.DEVNULL)
    exp_dir = new_entry(before)
    wait_until(lambda: read_state(exp_dir).count(TrialStatus.RUNNING) == 2, 60, "two running trials")
    return run([*NNIX, "stop", exp_dir.name], env)


def verb(argv: list[str]) -> Callable[[Env], float]:
    """Wall time of ``nnix ARGV``, in an environment."""
    return lambda env: run([*NNIX, *argv], env)


def sample(f: Callable[[], float], n: int) -> tuple[float, float]:
    """Median and minimum of ``n`` runs (the minimum is the figure least disturbed by a loaded machine)."""
    runs = [f() for _ in range(n)]
    return statistics.median(runs), min(runs)


def paired(f: Callable[[Env], float], n: int, old: Env) -> tuple[tuple[float, float], tuple[float, float] | None]:
    """``sample`` of ``f`` on this tree and, if ``old`` is given, on the old one, the runs alternating."""
    new_runs: list[float] = []
    old_runs: list[float] = []
    for _ in range(n):
        new_runs.append(f(None))
        if old is not None:
            old_runs.append(f(old))
    stats = (statistics.median(new_runs), min(new_runs))
    return stats, ((statistics.median(old_runs), min(old_runs)) if old_runs else None)


def line(name: str, value: tuple[float, float], goal: float | None, base: tuple[float, float]) -> str:
    (med, low), (base_med, base_low) = value, base
    goal_text = f"goal <= {goal * 1000:3.0f} ms, ratio to goal {med / goal:5.2f} (min {low / goal:5.2f})" if goal else (
        ("(baseline)" if value is base else "").ljust(44))
    return (f"  {name:<44} {med * 1000:7.1f} ms (min {low * 1000:7.1f})  {goal_text}  "
            f"{med / base_med:5.1f}x python -c pass (min {low / base_low:5.1f}x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--old-src", help="a checkout's src/ to measure beside this tree (e.g. /work/wt/base/src)")
    ap.add_argument("--ls-home", help="NNIX_HOME of an experiment for `nnix trial ls --tail 10` (only read)")
    ap.add_argument("--ls-id", help="that experiment's id")
    args = ap.parse_args()
    n = args.repeat
    old: Env = None if not args.old_src else {**os.environ, "PYTHONPATH": args.old_src}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["NNIX_HOME"] = str(Path(tmp) / "home")  # a scratch registry: the user's is never touched
        if old is not None:
            old["NNIX_HOME"] = os.environ["NNIX_HOME"]
        code_dir = Path(tmp, "code")
        code_dir.mkdir()
        for name, text in (("trial.py", TRIAL), ("sleepy.py", SLEEPY)):
            (code_dir / name).write_text(text)
        run([*NNIX, "--help"])  # warm the page cache
        base = sample(lambda: run([sys.executable, "-c", "pass"]), n)
        figures = [
            ("nnix --help", "help", paired(lambda env: run([*NNIX, "--help"], env), n, old)),
            ("create --foreground -> first trial (TPE)", "first_trial",
             paired(lambda env: first_trial(code_dir, "TPE", env), n, old)),
            ("create --foreground -> first trial (Random)", "first_trial",
             paired(lambda env: first_trial(code_dir, "Random", env), n, old)),
            ("create --foreground -> its first line", "first_line",
             paired(lambda env: first_line(code_dir, env), n, old)),
            ("nnix stop (2 running trials)", "stop", paired(lambda env: stop(code_dir, env), n, old)),
        ]
        from nnix.home import Registry

        done = min(Registry().all(), key=lambda e: e.created).id  # a finished experiment of one trial
        for name, argv in (("nnix trial ls ID (1 trial)", ["trial", "ls", done]),
                           ("nnix experiment status ID", ["experiment", "status", done]),
                           ("nnix experiment list --all", ["experiment", "list", "--all"]),
                           ("nnix trial ls --help", ["trial", "ls", "--help"])):
            goal = "trial_ls" if argv[:2] == ["trial", "ls"] and "--help" not in argv else "other"
            figures.append((name, goal, paired(verb(argv), n, old)))
        if args.ls_home and args.ls_id:
            ls_env = {**os.environ, "NNIX_HOME": args.ls_home}
            ls_old = None if old is None else {**old, "NNIX_HOME": args.ls_home}
            ls = [*NNIX, "trial", "ls", args.ls_id, "--tail", "10"]
            figures.append(("nnix trial ls ID --tail 10", "trial_ls",
                            paired(lambda env: run(ls, ls_env if env is None else ls_old), n, ls_old)))
        print(f"start-up through the CLI ({' '.join(Path(a).name for a in NNIX)}), median (and minimum) of {n} runs"
              + (f"; before: PYTHONPATH={args.old_src}, runs alternating" if old is not None else ""))
        print(line("python -c pass", base, None, base))
        for name, goal, (now, before) in figures:
            print(line(name, now, GOALS[goal], base))
            if before is not None:
                print(line("  before", before, GOALS[goal], base))

if __name__ == "__main__":
    main()
