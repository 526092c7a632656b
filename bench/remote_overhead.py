"""Per-trial overhead of the remote (SSH) service, reuse vs non-reuse, against the same trials run
locally in the same run.

Three network-namespace hosts with their own sshd (``nnix.testing.sshhosts``; needs root) run 100
trivial trials (start, read parameters, report one result). Each mode runs one warm-up experiment
first (the worker venv is installed once per nnix build), then the measured one. Measured: the span
from the first trial start to the last trial end, from the experiment's own event log, so the one-off
connection setup (printed separately) is not counted per trial.

    per-trial slot time = span x concurrency / trials
    overhead            = slot time (remote) - slot time (local)

Goal (issue 5): reuse mode within 50 ms per trial of local. Not a test: nothing here asserts a timing.
Run: sudo python bench/remote_overhead.py [--trials 100] [--concurrency 3]
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

TRIAL = "import nni\np = nni.get_next_parameter()\nnni.report_final_result(p['x'])\n"
PYTHON = "/usr/bin/python3"  # the same interpreter locally and on the namespace hosts


def run(code: Path, trials: int, concurrency: int, service: dict[str, Any]) -> tuple[float, float]:
    """``(wall seconds of the whole run, span first start .. last end)``."""
    from nnix.core.events import TrialEnded, TrialStarted
    from nnix.core.status import ExperimentStatus, TrialStatus
    from nnix.home import STORE_NAME
    from nnix.store.sqlite import SqliteStore
    from nnix.testing.experiments import make_experiment, run_experiment

    _, exp_dir = make_experiment(
        code, searchSpace={"x": {"_type": "uniform", "_value": [0, 1]}}, trialCommand=f"{PYTHON} trial.py",
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--concurrency", type=int, default=3)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    from nnix.testing.sshhosts import SshLab, unavailable

    reason = unavailable()
    if reason:
        raise SystemExit(f"cannot run: {reason}")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["NNIX_HOME"] = str(Path(tmp) / "home")
        code = Path(tmp) / "code"
        code.mkdir()
        (code / "trial.py").write_text(TRIAL)
        lab = SshLab(n_hosts=3).up()
        try:
            remote: dict[str, Any] = {
                "platform": "remote", "knownHostsFile": str(lab.known_hosts), "remoteWorkDir": str(lab.home / "w"),
                "machineList": [h.machine() for h in lab.hosts],
            }
            modes: dict[str, dict[str, Any]] = {
                "local": {"platform": "local"},
                "remote reuse": {**remote, "reuseMode": True},
                "remote non-reuse": {**remote, "reuseMode": False},
            }
            results: dict[str, tuple[float, float]] = {}
            for name, service in modes.items():
                run(code, 3, args.concurrency, service)  # warm-up (worker venv, caches)
                results[name] = run(code, args.trials, args.concurrency, service)
        finally:
            lab.down()
    n, c = args.trials, args.concurrency
    local_slot = results["local"][1] * c / n
    print(f"{n} trivial trials, concurrency {c}, 3 namespace hosts (remote) vs this machine (local)")
    print(f"{'mode':<18}{'wall s':>9}{'setup s':>9}{'span s':>9}{'ms/trial':>10}{'overhead ms':>13}{'ratio':>8}")
    for name, (wall, span) in results.items():
        slot = span * c / n
        print(f"{name:<18}{wall:>9.2f}{wall - span:>9.2f}{span:>9.2f}{slot * 1000:>10.1f}"
              f"{(slot - local_slot) * 1000:>13.1f}{slot / local_slot:>8.2f}")
    reuse_over = (results["remote reuse"][1] * c / n - local_slot) * 1000
    verdict = "met" if reuse_over <= 50 else "NOT met"
    print(f"reuse overhead per trial: {reuse_over:.1f} ms (goal: <= 50 ms) -> {verdict}")


if __name__ == "__main__":
    main()
