"""Opening a big experiment: 100,000 finished trials × 100 intermediate results (10M events).

Builds the store quickly (rows written in bulk straight into SQLite, not through a manager; cached under
/tmp by parameters), then measures through the real CLI and REST server:

* baseline, in the same run: the full fold of the log (what `nnix view` did before the snapshot), its time
  and peak RSS, in a child process; then the snapshot a manager leaves at exit is written;
* `nnix view` and `nnix resume`: wall time until the command returns (the REST server answers), and the
  manager's RSS; REST p95 of each paged route; time and manager RSS of the streamed full lists;
* web UI (headless Chromium, bench/scale_ui.py's measure) on the `nnix view` server: first paint of the
  table and the parallel coordinates, re-sort by metric, filter;
* `nnix trial ls --tail 10` wall time; `nnix experiment export` (json, with intermediate results) peak RSS.

Run: ``python bench/scale_view.py [--trials 100000] [--metrics 100] [--old-src /work/wt/base/src]``
(``--trials 10000`` for a quick run). Each figure is printed with its ratio to the goal (≤ 1 meets it).
Not a test: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

GOAL_START_S = 1.0
GOAL_RSS_MB = 500.0
GOAL_P95_MS = 200.0
GOAL_TAIL_S = 0.3
GOAL_SORT_MS = 150.0
FORMAT = 1  # of the cached store: bump when build() changes


def build(root: Path, n_trials: int, n_metrics: int) -> tuple[str, Path]:
    """A finished experiment (created through nnix, then its trials' rows inserted in bulk)."""
    from nnix.config import parse_config
    from nnix.core.events import ManagerStarted, StatusChanged, TrialCreated, TrialEnded, TrialStarted
    from nnix.core.status import ExperimentStatus, TrialStatus
    from nnix.experiment import create
    from nnix.home import STORE_NAME
    from nnix.model.events import encode
    from nnix.store.sqlite import SqliteStore

    code = root / "code"
    code.mkdir(parents=True, exist_ok=True)
    space = {"lr": {"_type": "loguniform", "_value": [1e-5, 1e-1]}, "layers": {"_type": "randint", "_value": [1, 9]},
             "optimizer": {"_type": "choice", "_value": ["sgd", "adam", "rmsprop"]}}
    cfg = {"experimentName": "scale-view", "searchSpace": space, "trialCommand": "python3 train.py",
           "trialCodeDirectory": str(code), "trialConcurrency": 8, "maxTrialNumber": n_trials,
           "tuner": {"name": "Random", "classArgs": {"seed": 1, "optimize_mode": "maximize"}},
           "trainingService": {"platform": "local"}, "experimentWorkingDirectory": str(root / "exps")}
    exp_id, exp_dir = create(parse_config(cfg, code))
    store = SqliteStore(exp_dir / STORE_NAME)
    store.append([ManagerStarted(0, "create", None), StatusChanged(ExperimentStatus.RUNNING)])
    store.close()
    db = sqlite3.connect(exp_dir / STORE_NAME)
    db.execute("PRAGMA synchronous=OFF")
    rng = random.Random(7)
    ts = time.time() - n_trials * 30.0
    out_root = exp_dir / "environments" / "local-env" / "trials"
    rows: list[tuple[float, str, str | None, str]] = []

    def ev(e: object) -> tuple[float, str, str | None, str]:
        return (ts, e.kind, e.trial_ref, encode(e))  # type: ignore[attr-defined]

    for i in range(n_trials):
        tid = f"T{i:05X}"
        params = {"lr": 10 ** rng.uniform(-5, -1), "layers": rng.randint(1, 8),
                  "optimizer": rng.choice(["sgd", "adam", "rmsprop"])}
        quality = 1 - abs(params["lr"] - 0.01) * 20 + rng.gauss(0, 0.05)
        rows += [ev(TrialCreated(tid, i, i, params)), ev(TrialStarted(tid, "local-env", str(out_root / tid), 1000 + i))]
        for k in range(n_metrics):  # the stored metric row (nnix.model.events.metric_row), formatted directly
            ts += 0.2
            rows.append((ts, "MetricReported", tid,
                         f'["{tid}","PERIODICAL",{k},{k},{i},{quality * (1 - 0.9 ** (k + 1)):.6f}]'))
        if i % 10:
            rows.append((ts, "MetricReported", tid, f'["{tid}","FINAL",0,{n_metrics},{i},{{"default":{quality:.6f}}}]'))
            rows.append(ev(TrialEnded(tid, TrialStatus.SUCCEEDED, 0)))
        else:
            rows.append(ev(TrialEnded(tid, TrialStatus.FAILED, 1, "exit code 1: boom")))
        if len(rows) > 200_000:
            db.executemany("INSERT INTO events(ts, kind, trial_id, body) VALUES (?, ?, ?, ?)", rows)
            db.commit()
            rows.clear()
    rows.append(ev(StatusChanged(ExperimentStatus.DONE, "maxTrialNumber reached")))
    db.executemany("INSERT INTO events(ts, kind, trial_id, body) VALUES (?, ?, ?, ?)", rows)
    db.commit()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return exp_id, exp_dir


def rss_mb(pid: int) -> tuple[float, float]:
    f = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(f["VmRSS"].split()[0]) / 1024, int(f["VmHWM"].split()[0]) / 1024


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def child(code: str, env: dict[str, str]) -> tuple[float, float, str]:
    """Run ``code`` in a fresh interpreter: (wall s, its peak RSS in MB, its stdout)."""
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", "import resource, sys\n" + code +
                        "\nprint('RSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"],
                       env=env, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    if r.returncode:
        sys.exit(f"child failed: {r.stderr[-2000:]}")
    out, _, rss = r.stdout.rpartition("RSS ")
    return wall, int(rss) / 1024, out


def cli(env: dict[str, str], *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "nnix.cli.main", *args], env=env, capture_output=True, text=True,
                       timeout=1800)
    if r.returncode:
        sys.exit(f"nnix {' '.join(args)} failed: {r.stderr[-2000:]}")
    return time.perf_counter() - t0, r


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--trials", type=int, default=100_000)
    ap.add_argument("--metrics", type=int, default=100)
    ap.add_argument("--runs", type=int, default=40, help="requests per paged route")
    ap.add_argument("--old-src", help="a checkout's src/ from before the snapshot (e.g. /work/wt/base/src): the "
                    "baseline fold is its own")
    ap.add_argument("--browser-runs", type=int, default=2, help="page loads in headless Chromium (0: none)")
    ap.add_argument("--rebuild", action="store_true", help="build the store again (not from the /tmp cache)")
    args = ap.parse_args()
    import httpx

    root = Path(f"/tmp/nnix-scale-view-{args.trials}x{args.metrics}-v{FORMAT}")
    env = {**os.environ, "NNIX_HOME": str(root / "home")}
    os.environ["NNIX_HOME"] = env["NNIX_HOME"]
    if args.rebuild or not (root / "ready.json").exists():
        shutil.rmtree(root, ignore_errors=True)
        t0 = time.perf_counter()
        exp_id, exp_dir = build(root, args.trials, args.metrics)
        (root / "ready.json").write_text(json.dumps({"id": exp_id, "dir": str(exp_dir)}))
        print(f"store built in {time.perf_counter() - t0:.1f} s (cached in {root})")
    meta = json.loads((root / "ready.json").read_text())
    exp_id, exp_dir = meta["id"], Path(meta["dir"])
    db = exp_dir / "db" / "nnix.sqlite"
    n_events = sqlite3.connect(db).execute("SELECT MAX(seq) FROM events").fetchone()[0]
    print(f"store: {args.trials:,} trials × {args.metrics} intermediate results, {n_events:,} events, "
          f"{db.stat().st_size / 1e6:.0f} MB  (machine under load: other work runs beside it)")

    # baseline: the full fold (no snapshot), as `nnix view` did before; then the snapshot a manager leaves
    if args.old_src:  # the old code's own fold (it ignores the snapshot table)
        fold_code = (f"from nnix.store.sqlite import SqliteStore\nfrom nnix.core.state import fold_store\n"
                     f"st = fold_store(SqliteStore({str(db)!r}, create=False))\nprint(len(st.trials))")
        fold_env, what = {**env, "PYTHONPATH": args.old_src}, f"fold_store of {args.old_src}"
    else:  # this code's fold without snapshot nor loader: every series held, as before
        fold_code = (f"from nnix.store.sqlite import SqliteStore\nfrom nnix.core.state import ExperimentState\n"
                     f"s = SqliteStore({str(db)!r}, create=False)\nst = ExperimentState()\ns.replay(st)\n"
                     f"print(len(st.trials))")
        fold_env, what = env, "all series held"
    full_s, full_rss, _ = child(fold_code, fold_env)
    print(f"\nbaseline: full fold of the log ({what}; what `nnix view` and `nnix resume` did before answering): "
          f"{full_s:.2f} s, peak RSS {full_rss:.0f} MB")
    snap_code = (f"import time\nfrom nnix.store.sqlite import SqliteStore\n"
                 f"from nnix.core.events import StatusChanged\nfrom nnix.core.status import ExperimentStatus\n"
                 f"try:\n    from nnix.query.snapshot import fold_store, snapshot_of, write_snapshot\n"
                 f"except ImportError:  # (a tree from before nnix.query)\n"
                 f"    from nnix.core.state import fold_store, snapshot_of, write_snapshot\n"
                 f"s = SqliteStore({str(db)!r}, create=False)\nsqlite3 = s._db\n"
                 f"sqlite3.execute('DROP TABLE IF EXISTS snapshot')\n"
                 f"sqlite3.execute('DROP TABLE IF EXISTS snapshot_chunk')\n"
                 f"t = time.perf_counter(); st = fold_store(s); a = time.perf_counter() - t\n"
                 f"t = time.perf_counter(); write_snapshot(s, st); b = time.perf_counter() - t\n"
                 f"s.append([StatusChanged(ExperimentStatus.DONE, 'again')]); st = fold_store(s, st)\n"
                 f"t = time.perf_counter(); snap = snapshot_of(st); c = time.perf_counter() - t\n"
                 f"t = time.perf_counter(); s.snapshot_writer().write_snapshot(snap); d = time.perf_counter() - t\n"
                 f"print(f'{{a:.2f}} {{b:.2f}} {{c:.2f}} {{d:.2f}} {{len(snap.body) + sum(len(p) for p in snap.parts)}}')")
    _, snap_rss, out = child(snap_code, env)
    fold_s, write_s, encode_s, thread_s, size = out.split()
    print(f"full fold with series left in the store: {fold_s} s, peak RSS {snap_rss:.0f} MB; snapshot written "
          f"in {write_s} s ({int(size) / 1e6:.0f} MB). Again after one more event, as a running manager does: "
          f"encoded in {encode_s} s (on its loop: ended trials are not encoded again), written in {thread_s} s "
          f"(by a thread on its own connection, a chunk per transaction: the loop goes on)")

    results: dict[str, float] = {}
    for action in ("view", "resume"):
        start_s, _ = cli(env, action, exp_id, "--port", "0")
        from nnix.home import read_state

        st = read_state(exp_dir, summary=True)
        pid, port = st.manager_pid or 0, st.manager_port
        rss, peak = rss_mb(pid)
        results[f"{action}_s"] = start_s
        print(f"\n`nnix {action}` answering after {start_s:.2f} s (ratio {start_s / GOAL_START_S:.2f}); manager RSS "
              f"{rss:.0f} MB, peak {peak:.0f} MB (ratio {peak / GOAL_RSS_MB:.2f})")
        if action == "view":
            one = f"T{args.trials // 2:05X}"
            paged = [("trials, first page", "/api/nnix/v1/trials?limit=100"),
                     ("trials, page 500 sorted -metric", f"/api/nnix/v1/trials?limit=100&offset={args.trials // 2}"
                                                         "&sort=-metric"),
                     ("trials, filtered page", "/api/nnix/v1/trials?status=SUCCEEDED&q=0A&limit=100"),
                     ("overview", "/api/nnix/v1/experiment"),
                     ("one trial", f"/api/nnix/v1/trials/{one}"),
                     ("one trial's metrics", f"/api/nnix/v1/trials/{one}/metrics"),
                     ("intermediate, 10 trials", "/api/nnix/v1/intermediate?trials="
                      + ",".join(f"T{i:05X}" for i in range(10))),
                     ("NNI trial-jobs/{id}", f"/api/v1/nni/trial-jobs/{one}"),
                     ("NNI metric-data/{id}", f"/api/v1/nni/metric-data/{one}")]
            print(f"  REST p95 of paged routes ({args.runs} warm requests; goal ≤ {GOAL_P95_MS:.0f} ms)")
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600) as c:
                for name, url in paged:
                    c.get(url).raise_for_status()
                    times = []
                    for _ in range(args.runs):
                        t0 = time.perf_counter()
                        c.get(url).raise_for_status()
                        times.append((time.perf_counter() - t0) * 1000)
                    p95 = pct(times, 0.95)
                    print(f"    {name:<34} p50 {statistics.median(times):7.1f}  p95 {p95:7.1f} ms  "
                          f"ratio {p95 / GOAL_P95_MS:.2f}")
                print("  streamed full lists (one request each; manager RSS after it)")
                for name, url in (("native trials limit=all", "/api/nnix/v1/trials?limit=all"),
                                  ("NNI trial-jobs", "/api/v1/nni/trial-jobs"),
                                  ("NNI export-data", "/api/v1/nni/export-data"),
                                  ("NNI metric-data (all series)", "/api/v1/nni/metric-data")):
                    t0 = time.perf_counter()
                    n = 0
                    with c.stream("GET", url) as r:
                        for chunk in r.iter_bytes():
                            n += len(chunk)
                    took = time.perf_counter() - t0
                    rss, peak = rss_mb(pid)
                    print(f"    {name:<34} {took:6.2f} s, {n / 1e6:7.1f} MB; RSS {rss:.0f} MB, peak {peak:.0f} MB "
                          f"(ratio {peak / GOAL_RSS_MB:.2f})")
            if args.browser_runs:
                sys.path.insert(0, str(Path(__file__).parent))
                from scale_ui import GOAL_PAINT_MS, browser

                res = browser(f"http://127.0.0.1:{port}/", args.browser_runs)
                print(f"  web UI in headless Chromium ({args.browser_runs} loads; goals: paint ≤ "
                      f"{GOAL_PAINT_MS:.0f} ms, sort/filter ≤ {GOAL_SORT_MS:.0f} ms)")
                if isinstance(res, str):
                    print("    " + res)
                else:
                    for key, goal in (("table", GOAL_PAINT_MS), ("parcoords", GOAL_PAINT_MS), ("sort", GOAL_SORT_MS),
                                      ("search", GOAL_SORT_MS)):
                        med = statistics.median(res[key])
                        print(f"    {key:<10} median {med:7.0f} ms  ratio {med / goal:.2f}  (runs: "
                              f"{', '.join(f'{v:.0f}' for v in res[key])})")
        cli(env, "stop", exp_id)

    tails = [cli(env, "trial", "ls", exp_id, "--tail", "10")[0] for _ in range(3)]
    tail_s = statistics.median(tails)
    print(f"\n`nnix trial ls --tail 10`: {tail_s:.2f} s (median of 3; ratio {tail_s / GOAL_TAIL_S:.2f})")
    out = root / "export.json"
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "nnix.cli.main", "experiment", "export", exp_id, "--type", "json",
                             "--filename", str(out), "--intermediate"], env=env, stdout=subprocess.DEVNULL)
    peak = 0.0
    while proc.poll() is None:  # its peak RSS, read while it runs
        try:
            peak = max(peak, rss_mb(proc.pid)[1])
        except (OSError, KeyError, ValueError):
            pass
        time.sleep(0.05)
    took = time.perf_counter() - t0
    print(f"`nnix experiment export --intermediate` (json): {took:.1f} s, {out.stat().st_size / 1e6:.0f} MB written, "
          f"peak RSS {peak:.0f} MB (ratio to {GOAL_RSS_MB:.0f} MB: {peak / GOAL_RSS_MB:.2f})")
    out.unlink()
    print(json.dumps({"trials": args.trials, "metrics": args.metrics, "old_fold_s": full_s, **results}))


if __name__ == "__main__":
    main()
