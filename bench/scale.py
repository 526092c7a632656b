"""Issue 15's figures in one run: start-up and per-trial cost through the CLI, a 100k-trial experiment, tuners at
long histories, and (``--live``) live ingest; with the peers where one exists.

Run: python bench/scale.py [--quick] [--live] [--peers-python PY] [--old-src DIR] [--only startup,view,...]

Each part is a script of its own in bench/, run here one after the other as a child process (so a part's
memory and imports do not bend the next one's figures); each prints its figures with the ratio to the goal and
the baseline it measured in the same run:

* ``startup``   bench/startup.py       ``nnix --help``, ``create --foreground`` to the first trial, ``nnix stop``
                                       (goals 150 / 300 / 300 ms; baseline: ``python -c pass``)
* ``per_trial`` bench/per_trial.py     marginal per-trial cost at concurrency 1 (goal <= 5 ms over a bare
                                       subprocess loop) and a 51-trial experiment (goal <= 1.5x a bare loop)
* ``view``      bench/scale_view.py    100,000 trials x 100 intermediates: ``nnix view`` / ``resume`` to the
                                       first answer, RSS, REST p95, UI paint/sort/filter, ``trial ls --tail 10``,
                                       export memory (baseline: the full fold, in the same run)
* ``tuners``    bench/tuner_scale.py   ms per suggestion at histories 1k / 20k / 100k (baseline: ``--old-src``)
* ``live``      bench/live_ingest.py   1,000 trials x 10 metrics/s: lag, losses, manager CPU (only with ``--live``)
* ``peers``     bench/peers_scale.py   Optuna's RDB and journal storages loading a large study, optuna-dashboard's
                                       trial list (only with ``--peers-python``: a Python with optuna installed)

``--quick`` runs each part at a size that ends in a few minutes on 2 cores (10,000 trials for ``view``,
histories up to 20,000 for ``tuners``, 100 trials for ``live``). ``--old-src`` (a checkout's ``src/`` from
before a change) is passed to the parts that compare against old code. Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def parts(args: argparse.Namespace) -> dict[str, list[str]]:
    q = args.quick
    old = args.old_src
    out: dict[str, list[str]] = {
        "startup": ["startup.py", "--repeat", "3" if q else "5"],
        "per_trial": ["per_trial.py", "--rounds", "1" if q else "3"] + (["--baseline", old] if old else []),
        "view": ["scale_view.py", "--trials", "10000" if q else "100000"] + (["--old-src", old] if old else []),
        "tuners": ["tuner_scale.py", "--sizes", "1000,20000" if q else "1000,20000,100000"]
        + (["--base", old] if old else ["--no-base"]),
    }
    if args.live:
        out["live"] = ["live_ingest.py"] + (["--trials", "100"] if q else [])
    if args.peers_python:
        out["peers"] = ["peers_scale.py", "--trials", "10000" if q else "100000"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes: minutes instead of an hour")
    ap.add_argument("--live", action="store_true", help="also live ingest (1,000 concurrent trials)")
    ap.add_argument("--peers-python", help="a Python with optuna (and optuna-dashboard) installed")
    ap.add_argument("--old-src", help="src/ of a checkout before the change, for the parts that compare")
    ap.add_argument("--only", help="comma-separated parts (startup, per_trial, view, tuners, live, peers)")
    args = ap.parse_args()
    todo = parts(args)
    if args.only:
        wanted = args.only.split(",")
        unknown = [w for w in wanted if w not in todo]
        if unknown:
            ap.error(f"unknown or not enabled part(s): {', '.join(unknown)} (parts: {', '.join(todo)})")
        todo = {k: v for k, v in todo.items() if k in wanted}
    failed = []
    for name, argv in todo.items():
        python = args.peers_python if name == "peers" else sys.executable
        print(f"\n=== {name}: {' '.join(argv)}", flush=True)
        t0 = time.monotonic()
        rc = subprocess.run([python, str(HERE / argv[0]), *argv[1:]]).returncode
        print(f"=== {name}: exit {rc}, {time.monotonic() - t0:.0f} s", flush=True)
        if rc:
            failed.append(name)
    if failed:
        print(f"\nparts that failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
