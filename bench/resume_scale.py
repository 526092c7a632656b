"""`nnix resume` of a big experiment, through the CLI: this tree against the old code, same run, alternating.

Run: python bench/resume_scale.py [--exp /tmp/snap2/s100k-new/exps/o1gvlc2e] [--new 10] [--rounds 2]
                                  [--base /work/wt/base/src] [--work /tmp/resume-bench]

The experiment directory is copied once per tree (``cp -a`` under ``--work``: resume writes into it) and never
touched where it is. Each round, for each tree (its ``src`` first on PYTHONPATH, start-up included): its
``maxTrialNumber`` is raised (a LimitsUpdated appended to its store, as `nnix update trialnum` does: far
enough that the manager is still running when ``--new`` trials have ended), then
``nnix resume ID -e DIR --port 0`` is timed until it returns, then until the REST server answers
``/api/v1/nni/check-status``, then until the first new trial started, then until the ``--new`` new trials have
ended (the first ask of the tuner builds its history of every trial); the manager's RSS and peak RSS are read
then, and ``nnix stop`` ends it.
The trials run the experiment's own command (its code directory may be empty: they then fail at once, which
costs the manager what any short trial costs).

Goals (issue 15, item 1): resume answering <= 1 s; manager RSS <= 500 MB after resume + the first 10 trials.
Figures are printed with their ratio to the goal (<= 1 meets it); ``inf``: the CLI gave up waiting (20 s) while the
manager went on starting (the REST figure says when it answered). Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

GOAL_START_S = 1.0
GOAL_RSS_MB = 500.0


def rss_mb(pid: int) -> tuple[float, float]:
    f = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(f["VmRSS"].split()[0]) / 1024, int(f["VmHWM"].split()[0]) / 1024


def _env(src: Path, home: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(src), "NNIX_HOME": str(home)}


def _py(env: dict[str, str], code: str) -> str:
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    if r.returncode:
        sys.exit(f"child failed: {r.stderr[-2000:]}")
    return r.stdout


def one(src: Path, work: Path, exp: Path, new: int) -> dict[str, float]:
    exp_id = exp.name
    exps, home = work / "exps", work / "home"
    mine = exps / exp_id
    if not mine.exists():
        exps.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-a", str(exp), str(mine)], check=True)
        (mine / "manager.error").unlink(missing_ok=True)
    env = _env(src, home)
    db = mine / "db" / "nnix.sqlite"
    # raise maxTrialNumber by `new` (what `nnix update trialnum` records), with the tree's own code
    out = _py(env, f"from nnix.store.sqlite import SqliteStore\nfrom nnix.home import read_state\n"
                   f"from pathlib import Path\nfrom nnix.core.events import LimitsUpdated\n"
                   f"s = SqliteStore(Path({str(db)!r}), create=False)\n"
                   f"n = s.count('TrialCreated')\ns.append([LimitsUpdated('max_trial_number', n + {new} * 100)])\n"
                   f"print(n, max(x.seq for x in s.read(kinds=('LimitsUpdated',))))\ns.close()\n")
    n_before, seq0 = map(int, out.split())
    code = (f"import json\nfrom pathlib import Path\nfrom nnix.home import read_state\n"
            f"st = read_state(Path({str(mine)!r}), summary=True)\nprint(json.dumps([st.manager_pid, st.manager_port]))")
    before = json.loads(_py(env, code))[0]
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "nnix.cli.main", "resume", exp_id, "-e", str(exps), "--port", "0"],
                       env=env, capture_output=True, text=True, timeout=600)
    cli_s = time.perf_counter() - t0
    if r.returncode and "did not answer" not in r.stderr:  # (the CLI gives up after 20 s: the manager goes on)
        sys.exit(f"nnix resume failed: {r.stdout[-1000:]} {r.stderr[-2000:]}")
    for _ in range(600):  # (a manager the CLI gave up on records its port once it has folded the log)
        info = json.loads(_py(env, code))
        if info[1] and info[0] and info[0] != before:
            break
        time.sleep(1)
    pid, port = int(info[0]), int(info[1])
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/nni/check-status", timeout=600) as resp:
                resp.read()
            break
        except OSError:
            if time.perf_counter() - t0 > 600:
                raise
            time.sleep(0.05)
    rest_s = time.perf_counter() - t0
    con = sqlite3.connect(db, timeout=60)
    deadline = time.monotonic() + 600
    ended = 0
    first_s = float("nan")
    while time.monotonic() < deadline:
        if first_s != first_s and con.execute("SELECT 1 FROM events WHERE kind = 'TrialStarted' AND seq > ? LIMIT 1",
                                              (seq0,)).fetchone():
            first_s = time.perf_counter() - t0
        ended = con.execute("SELECT COUNT(*) FROM events WHERE kind = 'TrialEnded' AND seq > ?", (seq0,)).fetchone()[0]
        if ended >= new:
            break
        time.sleep(0.05)
    trials_s = time.perf_counter() - t0
    con.close()
    rss, peak = rss_mb(pid)
    subprocess.run([sys.executable, "-m", "nnix.cli.main", "stop", exp_id], env=env, capture_output=True, timeout=600)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.05)
    return {"trials": n_before, "cli_s": cli_s if not r.returncode else float("inf"), "rest_s": rest_s,
            "new_ended": ended, "first_trial_s": first_s, "trials_s": trials_s, "rss_mb": rss, "peak_mb": peak}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--exp", default="/tmp/snap2/s100k-new/exps/o1gvlc2e", help="the experiment directory")
    ap.add_argument("--new", type=int, default=10, help="trials the resumed manager runs")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--base", default="/work/wt/base/src", help="src of the old implementation")
    ap.add_argument("--no-base", action="store_true")
    ap.add_argument("--work", default="/tmp/resume-bench", help="where the copies go (reused by later runs)")
    ap.add_argument("--fresh", action="store_true", help="copy the experiment again")
    a = ap.parse_args(argv)
    here = Path(__file__).resolve().parent.parent / "src"
    exp, work = Path(a.exp), Path(a.work)
    trees = {"new": here} if a.no_base else {"new": here, "old": Path(a.base)}
    if a.fresh:
        for tag in trees:
            shutil.rmtree(work / tag, ignore_errors=True)
    print(f"`nnix resume` of {exp} then {a.new} new trials, {a.rounds} rounds alternating (load "
          f"{os.getloadavg()[0]:.1f}: under load, other work runs beside it)")
    got: dict[str, list[dict[str, float]]] = {tag: [] for tag in trees}
    for k in range(a.rounds):
        for tag in (list(trees) if k % 2 == 0 else list(trees)[::-1]):
            res = one(trees[tag], work / tag, exp, a.new)
            got[tag].append(res)
            print(f"  round {k + 1} {tag}: " + ", ".join(f"{key} {v:.2f}" if isinstance(v, float) else f"{key} {v}"
                                                       for key, v in res.items()), flush=True)
    print()

    def med(tag: str, key: str) -> float:
        return statistics.median(r[key] for r in got[tag])

    rows: list[tuple[str, str, float]] = [("`nnix resume` returned (s)", "cli_s", GOAL_START_S),
                                          ("REST check-status answered (s)", "rest_s", GOAL_START_S),
                                          ("first new trial started (s)", "first_trial_s", 0.0),
                                          (f"{a.new} new trials ended (s)", "trials_s", 0.0),
                                          (f"manager RSS after {a.new} trials (MB)", "rss_mb", GOAL_RSS_MB),
                                          ("manager peak RSS (MB)", "peak_mb", GOAL_RSS_MB)]
    print(f"{'median of ' + str(a.rounds):<38} {'new':>9} {'old':>9} {'old/new':>8} {'new/goal':>9}")
    for name, key, goal in rows:
        new = med("new", key)
        old = med("old", key) if "old" in got else float("nan")
        ratio = f"{new / goal:.2f}" if goal else ""
        print(f"{name:<38} {new:>9.2f} {old:>9.2f} {old / new:>8.2f} {ratio:>9}")
    summary: dict[str, Any] = {tag: {key: med(tag, key) for _, key, _ in rows} for tag in got}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
