"""The full lists of a big experiment, repeated, through a real `nnix view` server: this tree against older ones.

Run: python bench/full_lists.py [--exp /tmp/nnix-scale-view-10000x100-v1/exps/mr6lqjvs] [--repeat 3]
                                [--old base=/work/wt/base/src] [--old start=/tmp/resume-25d0e67/src] [--rounds 2]

The experiment directory is copied once per tree (``cp -a`` under ``--work``: `nnix view` writes into it). For
each tree, alternating across rounds: `nnix view` serves it (``--port 0``), then each full list (NNI's
``export-data`` and ``trial-jobs``, the native ``trials?limit=all``) is fetched ``--repeat`` times in a row
(the first fetch of each, then the median of the repeats), ``--settle`` seconds after the server first answered
(the trial summaries are warmed meanwhile), and the manager's RSS and peak RSS are read at
the end. Goal (issue 15, item 4 of the resume brief): no slower than the session start (25d0e67) where it does
not cost the RSS goal (<= 500 MB after every full list at 100k). Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

LISTS = (("NNI export-data", "/api/v1/nni/export-data"), ("NNI trial-jobs", "/api/v1/nni/trial-jobs"),
         ("native trials limit=all", "/api/nnix/v1/trials?limit=all"))


def rss_mb(pid: int) -> tuple[float, float]:
    f = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(f["VmRSS"].split()[0]) / 1024, int(f["VmHWM"].split()[0]) / 1024


def one(src: Path, work: Path, exp: Path, repeat: int, settle: float) -> dict[str, float]:
    exp_id = exp.name
    exps = work / "exps"
    env = {**os.environ, "PYTHONPATH": str(src), "NNIX_HOME": str(work / "home")}
    if not (exps / exp_id).exists():
        exps.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-a", str(exp), str(exps / exp_id)], check=True)
    code = (f"import json\nfrom pathlib import Path\nfrom nnix.home import read_state\n"
            f"st = read_state(Path({str(exps / exp_id)!r}), summary=True)\n"
            f"print(json.dumps([st.manager_pid, st.manager_port]))")

    def manager() -> list[int | None]:
        got: list[int | None] = json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                                          text=True, check=True).stdout)
        return got

    before = manager()[0]
    r = subprocess.run([sys.executable, "-m", "nnix.cli.main", "view", exp_id, "-e", str(exps), "--port", "0"],
                       env=env, capture_output=True, text=True, timeout=600)
    if r.returncode and "did not answer" not in r.stderr:  # (the CLI gives up after 20 s: the manager goes on)
        sys.exit(f"nnix view failed: {r.stderr[-2000:]}")
    for _ in range(600):  # (a manager the CLI gave up on records its port once it has folded the log)
        pid, port = manager()
        if port and pid and pid != before:
            break
        time.sleep(1)
    out: dict[str, float] = {}
    try:
        deadline = time.monotonic() + 600
        while True:  # (answering: the lists are timed from then)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/nni/check-status", timeout=600) as resp:
                    resp.read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        time.sleep(settle)  # (the summaries warm up after the server answers: lists are timed after that)
        for name, url in LISTS:
            times = []
            for _ in range(repeat + 1):
                t0 = time.perf_counter()
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{url}", timeout=600) as resp:
                    while resp.read(1 << 20):
                        pass
                times.append(time.perf_counter() - t0)
            out[f"{name} first"] = times[0]
            out[f"{name} again"] = statistics.median(times[1:])
        out["rss"], out["peak"] = rss_mb(int(pid or 0))
    finally:
        subprocess.run([sys.executable, "-m", "nnix.cli.main", "stop", exp_id], env=env, capture_output=True,
                       timeout=600)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
            time.sleep(0.05)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--exp", default="/tmp/nnix-scale-view-10000x100-v1/exps/mr6lqjvs")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--old", action="append", default=[], help="NAME=SRC of an older tree (repeatable)")
    ap.add_argument("--work", default="/tmp/full-lists-bench")
    ap.add_argument("--settle", type=float, default=10.0, help="seconds between the first answer and the lists")
    a = ap.parse_args(argv)
    trees = {"new": Path(__file__).resolve().parent.parent / "src"}
    for spec in a.old or ["base=/work/wt/base/src"]:
        name, _, src = spec.partition("=")
        trees[name] = Path(src)
    exp = Path(a.exp)
    tag = exp.name
    print(f"full lists of {exp}, each fetched {a.repeat + 1} times in a row, {a.rounds} rounds alternating "
          f"(load {os.getloadavg()[0]:.1f}: under load, other work runs beside it)")
    got: dict[str, list[dict[str, float]]] = {t: [] for t in trees}
    for k in range(a.rounds):
        order = list(trees) if k % 2 == 0 else list(trees)[::-1]
        for t in order:
            got[t].append(one(trees[t], Path(a.work) / tag / t, exp, a.repeat, a.settle))
            print(f"  round {k + 1} {t}: " + ", ".join(f"{key} {v:.2f}" for key, v in got[t][-1].items()), flush=True)
    keys = list(got["new"][0])
    print(f"\n{'median of rounds (s; MB)':<32}" + "".join(f"{t:>10}" for t in trees)
          + "".join(f"{t + '/new':>12}" for t in trees if t != "new"))
    for key in keys:
        meds = {t: statistics.median(r[key] for r in got[t]) for t in trees}
        print(f"{key:<32}" + "".join(f"{meds[t]:>10.3f}" for t in trees)
              + "".join(f"{meds[t] / meds['new']:>12.2f}" for t in trees if t != "new"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
