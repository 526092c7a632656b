"""Peers at scale: how long Optuna takes to load a large study, and optuna-dashboard to list its trials.

    python bench/peers_scale.py [--trials 100000] [--intermediates 10] [--cache /tmp/nnix-peers]

Needs ``optuna`` (and, for the dashboard figure, ``optuna-dashboard``) importable by the Python that runs
it; nnix does not depend on them, so run it with a separate environment, e.g.::

    python3.11 -m venv /tmp/peers && /tmp/peers/bin/pip install optuna optuna-dashboard
    /tmp/peers/bin/python bench/peers_scale.py

It builds (once, cached under ``--cache`` by parameters) one study of ``--trials`` finished trials with
one float parameter, a final value and ``--intermediates`` intermediate values each, in Optuna's RDB storage
(SQLite file) and in its journal storage (file backend), then prints, per storage:

* ``load``: seconds from a fresh process' ``optuna.load_study`` to ``study.trials`` holding every trial
  (what a dashboard or a resumed optimisation pays before its first answer);
* ``dashboard``: seconds for optuna-dashboard's ``GET /api/studies/<id>`` (its trial list, called in process
  through its WSGI app, no network) after the app was created.

The figures are what ``bench/scale.py`` prints beside nnix's ``view``/``resume`` time at the same size. The
intermediate count defaults to 10, not the 100 of nnix's figure: Optuna's storages write one row or line per
intermediate value through their public API and 10M of them take hours to build; the number is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

LOAD = r"""
import sys, time, optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
kind, url = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
if kind == "journal":
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend
    storage = JournalStorage(JournalFileBackend(url))
else:
    storage = url
study = optuna.load_study(study_name="scale", storage=storage)
n = len(study.trials)
load = time.perf_counter() - t0
dash = float("nan")
try:
    import io, optuna_dashboard
    app = optuna_dashboard.wsgi(storage)
    sid = study._study_id
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": f"/api/studies/{sid}", "QUERY_STRING": "after=0",
               "SERVER_NAME": "localhost", "SERVER_PORT": "80", "wsgi.url_scheme": "http",
               "wsgi.input": io.BytesIO(b""), "wsgi.errors": sys.stderr, "SERVER_PROTOCOL": "HTTP/1.1",
               "HTTP_HOST": "localhost"}
    status = []
    t1 = time.perf_counter()
    body = b"".join(app(environ, lambda s, h, *a: status.append(s)))
    dash = time.perf_counter() - t1
    if not status or not status[0].startswith("200"):
        dash = float("nan")
except ImportError:
    pass
print(f"{n} {load:.3f} {dash:.3f}")
"""


def build(kind: str, url: str, trials: int, intermediates: int) -> None:
    import optuna
    from optuna.distributions import FloatDistribution
    from optuna.trial import create_trial

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if kind == "journal":
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        storage: object = JournalStorage(JournalFileBackend(url))
    else:
        storage = url
    study = optuna.create_study(study_name="scale", storage=storage)  # type: ignore[arg-type]
    dist = {"x": FloatDistribution(-5.0, 10.0)}
    batch = []
    for i in range(trials):
        x = -5.0 + 15.0 * ((i * 7919) % 10007) / 10007
        batch.append(
            create_trial(
                params={"x": x},
                distributions=dist,
                value=(x - 1.0) ** 2,
                intermediate_values={s: (x - 1.0) ** 2 + 1.0 / (s + 1) for s in range(intermediates)},
            )
        )
        if len(batch) == 1000:
            study.add_trials(batch)
            batch = []
            print(f"\r  building {kind}: {i + 1}/{trials}", end="", file=sys.stderr, flush=True)
    if batch:
        study.add_trials(batch)
    print(file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=100_000)
    ap.add_argument("--intermediates", type=int, default=10)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/nnix-peers"))
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout instead of the table")
    args = ap.parse_args()
    try:
        import optuna
    except ImportError:
        print("optuna is not importable by this Python: see this script's docstring", file=sys.stderr)
        return 2
    args.cache.mkdir(parents=True, exist_ok=True)
    tag = f"{args.trials}x{args.intermediates}"
    targets = {
        "rdb": (f"sqlite:///{args.cache / f'optuna-{tag}.db'}", args.cache / f"optuna-{tag}.db"),
        "journal": (str(args.cache / f"optuna-{tag}.log"), args.cache / f"optuna-{tag}.log"),
    }
    result: dict[str, dict[str, float]] = {}
    for kind, (url, path) in targets.items():
        done = Path(f"{path}.done")
        if not done.exists():
            for stale in (path, Path(f"{path}.lock")):
                stale.unlink(missing_ok=True)
            t0 = time.perf_counter()
            build(kind, url, args.trials, args.intermediates)
            done.write_text(f"{time.perf_counter() - t0:.1f}\n")
        out = subprocess.run(
            [sys.executable, "-c", LOAD, kind, url], capture_output=True, text=True, check=True, env=dict(os.environ)
        ).stdout.split()
        n, load, dash = int(out[0]), float(out[1]), float(out[2])
        if n != args.trials:
            print(f"{kind}: loaded {n} trials, expected {args.trials}", file=sys.stderr)
            return 1
        result[kind] = {"load_s": load, "dashboard_s": dash}
    if args.json:
        print(json.dumps({"trials": args.trials, "intermediates": args.intermediates, **result}))
        return 0
    print(f"Optuna {optuna.__version__}, {args.trials} trials x {args.intermediates} intermediates")
    for kind, r in result.items():
        print(f"  {kind:8s} load_study + trials: {r['load_s']:7.2f} s"
              f"   dashboard trial list: {r['dashboard_s']:7.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
