"""REST and web-UI scale: 10,000 finished trials × 100 intermediate results each.

Builds the store directly through SqliteStore (batched appends, a fake clock so trials have real
durations), serves it with ``nnix view`` (a real manager daemon, read-only), then reports:

* manager start (folding ~1M events) and its RSS (current and peak);
* REST latency p50/p95 of the trial list: first page (native, by seq and sorted by metric), the
  full list (native ``limit=all`` and NNI's ``/trial-jobs``), NNI's ``export-data``, the overview;
* in headless Chromium: time from navigation start to the first paint of the trial table and of the
  parallel-coordinates plot, and the time to re-sort the table by metric.

Run: ``python bench/scale_ui.py [--trials 10000] [--metrics 100]``. Every figure is printed with
its ratio to the issue's goal (p95 ≤ 200 ms, first paint ≤ 1 s, RSS ≤ 300 MB): a ratio ≤ 1 meets
it. Not a test: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

GOAL_P95_MS = 200.0
GOAL_PAINT_MS = 1000.0
GOAL_RSS_MB = 300.0
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]


def build_store(root: Path, n_trials: int, n_metrics: int, seed: int = 7) -> tuple[str, Path, float]:
    """A finished experiment with ``n_trials`` trials of ``n_metrics`` intermediate results each."""
    from nnix.config import parse_config
    from nnix.core.events import (
        ManagerStarted,
        MetricReported,
        StatusChanged,
        TrialCreated,
        TrialEnded,
        TrialStarted,
    )
    from nnix.core.status import ExperimentStatus, MetricType, TrialStatus
    from nnix.home import STORE_NAME
    from nnix.host.build import create
    from nnix.store.sqlite import SqliteStore

    code = root / "code"
    code.mkdir(parents=True, exist_ok=True)
    space = {
        "lr": {"_type": "loguniform", "_value": [1e-5, 1e-1]},
        "momentum": {"_type": "uniform", "_value": [0.5, 0.99]},
        "layers": {"_type": "randint", "_value": [1, 9]},
        "optimizer": {"_type": "choice", "_value": ["sgd", "adam", "rmsprop"]},
        "dropout": {"_type": "uniform", "_value": [0.0, 0.6]},
    }
    cfg = {
        "experimentName": "scale-ui", "searchSpace": space, "trialCommand": "python3 train.py",
        "trialCodeDirectory": str(code), "trialConcurrency": 8, "maxTrialNumber": n_trials,
        "tuner": {"name": "Random", "classArgs": {"seed": 1, "optimize_mode": "maximize"}},
        "trainingService": {"platform": "local"}, "experimentWorkingDirectory": str(root / "exps"),
    }
    exp_id, exp_dir = create(parse_config(cfg, code))
    rng = random.Random(seed)
    now = [time.time() - n_trials * 30.0]
    store = SqliteStore(exp_dir / STORE_NAME, clock=lambda: now[0])
    t0 = time.perf_counter()
    store.append([ManagerStarted(0, "create", None), StatusChanged(ExperimentStatus.RUNNING)])
    out_root = exp_dir / "environments" / "local-env" / "trials"
    for i in range(n_trials):
        tid = "T" + f"{i:04X}"[-4:] if i < 65536 else f"T{i}"
        params = {
            "lr": 10 ** rng.uniform(-5, -1), "momentum": rng.uniform(0.5, 0.99), "layers": rng.randint(1, 8),
            "optimizer": rng.choice(["sgd", "adam", "rmsprop"]), "dropout": rng.uniform(0, 0.6),
        }
        quality = 1 - abs(params["lr"] - 0.01) * 20 - params["dropout"] * 0.3 + rng.gauss(0, 0.05)
        store.append([TrialCreated(tid, i, i, params), TrialStarted(tid, "local-env", str(out_root / tid), 1000 + i)])
        now[0] += rng.uniform(10, 50)
        curve = [quality * (1 - 0.9 ** (k + 1)) + rng.gauss(0, 0.01) for k in range(n_metrics)]
        events: list[Any] = [MetricReported(tid, MetricType.PERIODICAL, k, v, k, i) for k, v in enumerate(curve)]
        roll = rng.random()
        if roll < 0.9:
            events.append(MetricReported(tid, MetricType.FINAL, 0, {"default": curve[-1], "loss": 1 - curve[-1],
                                                                    "acc5": min(1.0, curve[-1] + 0.1)}, n_metrics, i))
            events.append(TrialEnded(tid, TrialStatus.SUCCEEDED, 0))
        elif roll < 0.95:
            events.append(TrialEnded(tid, TrialStatus.FAILED, 1, "exit code 1: boom"))
        else:
            events.append(TrialEnded(tid, TrialStatus.EARLY_STOPPED, None, "canceled (early_stop)"))
        store.append(events[:-1])
        now[0] += 0.5
        store.append(events[-1:])
        now[0] += rng.uniform(0, 5)
    store.append([StatusChanged(ExperimentStatus.DONE, "maxTrialNumber reached")])
    store.close()
    return exp_id, exp_dir, time.perf_counter() - t0


def rss_mb(pid: int) -> tuple[float, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        fields[k] = v.strip()
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def timed(client: Any, url: str, n: int) -> tuple[float, list[float], int]:
    t = time.perf_counter()
    r = client.get(url)
    cold = (time.perf_counter() - t) * 1000
    r.raise_for_status()
    size = len(r.content)
    times = []
    for _ in range(n):
        t = time.perf_counter()
        client.get(url).raise_for_status()
        times.append((time.perf_counter() - t) * 1000)
    return cold, times, size


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def browser(url: str, runs: int) -> dict[str, list[float]] | str:
    if not Path(CHROMIUM).exists():
        return f"skipped: {CHROMIUM} is absent (apt-get install -y --no-install-recommends chromium)"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return "skipped: playwright is absent (pip install playwright; never `playwright install`)"
    out: dict[str, list[float]] = {"table": [], "parcoords": [], "sort": [], "search": []}
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for _ in range(runs):
                page = b.new_page(viewport={"width": 1400, "height": 1000})
                page.goto(url + "#/trials/params")
                page.wait_for_function("() => window.__nnix && window.__nnix.tablePaint > 0 && "
                                       "window.__nnix.parcoordsPaint > 0", timeout=60000)
                out["table"].append(page.evaluate("window.__nnix.tablePaint"))
                out["parcoords"].append(page.evaluate("window.__nnix.parcoordsPaint"))
                # a paged table (window.__nnix.settled: bumped when the server's rows are shown) is timed until they
                # are painted; the old one, sorting and filtering in the page, until the next frame
                out["sort"].append(page.evaluate("""() => new Promise((done) => {
                    const paged = 'settled' in window.__nnix, before = window.__nnix.settled;
                    const t0 = performance.now();
                    document.querySelector('.vt-hcell[data-key=metric]').click();
                    const wait = () => (paged && window.__nnix.settled === before ? requestAnimationFrame(wait)
                        : requestAnimationFrame(() => setTimeout(() => done(performance.now() - t0), 0)));
                    wait();
                })"""))
                out["search"].append(page.evaluate("""() => new Promise((done) => {
                    const paged = 'settled' in window.__nnix, before = window.__nnix.settled;
                    const box = document.querySelector('#trial-search');
                    const t0 = performance.now();
                    box.value = 'lr>0.001; optimizer=adam';
                    box.dispatchEvent(new Event('input'));
                    const waiting = () => (paged ? window.__nnix.settled === before
                        : document.querySelector('#trial-count').textContent.startsWith(
                            String(window.__nnix.S.trials.size) + ' of'));
                    const wait = () => (waiting() ? requestAnimationFrame(wait)
                        : requestAnimationFrame(() => setTimeout(() => done(performance.now() - t0 - 120), 0)));
                    wait();
                })"""))
                page.close()
        finally:
            b.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=10_000)
    ap.add_argument("--metrics", type=int, default=100)
    ap.add_argument("--runs", type=int, default=50, help="requests per REST measurement")
    ap.add_argument("--browser-runs", type=int, default=3)
    args = ap.parse_args()

    import httpx

    with tempfile.TemporaryDirectory(prefix="nnix-scale-") as tmp:
        root = Path(tmp)
        env = {**os.environ, "NNIX_HOME": str(root / "home")}
        os.environ["NNIX_HOME"] = env["NNIX_HOME"]
        exp_id, exp_dir, build_s = build_store(root, args.trials, args.metrics)
        n_events = args.trials * (args.metrics + 4)
        print(f"store: {args.trials} trials × {args.metrics} intermediate results (~{n_events:,} events) "
              f"written in {build_s:.1f} s; {(exp_dir / 'db' / 'nnix.sqlite').stat().st_size / 1e6:.0f} MB")

        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "nnix.cli.main", "view", exp_id, "--port", "0"], env=env,
                           capture_output=True, text=True, timeout=600)
        start_s = time.perf_counter() - t0
        if r.returncode != 0:
            sys.exit(f"nnix view failed: {r.stderr}")
        from nnix.home import read_state

        st = read_state(exp_dir, summary=True)
        pid, port = st.manager_pid or 0, st.manager_port
        base = f"http://127.0.0.1:{port}"
        try:
            rss, peak = rss_mb(pid)
            print(f"manager (nnix view): ready in {start_s:.1f} s; RSS {rss:.0f} MB, peak {peak:.0f} MB "
                  f"(goal ≤ {GOAL_RSS_MB:.0f} MB: ratio {rss / GOAL_RSS_MB:.2f}, peak {peak / GOAL_RSS_MB:.2f})")
            cases = [
                ("native first page (100, by seq)", "/api/nnix/v1/trials?limit=100", args.runs),
                ("native first page (100, sort -metric)", "/api/nnix/v1/trials?limit=100&sort=-metric", args.runs),
                ("native page filtered (status+search)", "/api/nnix/v1/trials?status=SUCCEEDED&q=0a&limit=100",
                 args.runs),
                ("native full list (limit=all)", "/api/nnix/v1/trials?limit=all", max(10, args.runs // 3)),
                ("NNI /trial-jobs (full)", "/api/v1/nni/trial-jobs", max(10, args.runs // 3)),
                ("NNI /export-data (full)", "/api/v1/nni/export-data", max(10, args.runs // 5)),
                ("native overview", "/api/nnix/v1/experiment", args.runs),
                ("intermediate, 10 trials × ≤200 pts", "/api/nnix/v1/intermediate?trials="
                 + ",".join(f"T{i:04X}" for i in range(10)), args.runs),
                ("intermediate, all trials × ≤40 pts", "/api/nnix/v1/intermediate?maxPoints=40", 5),
            ]
            print(f"\nREST latency (ms; {args.runs} warm requests; goal p95 ≤ {GOAL_P95_MS:.0f} ms)")
            print(f"  {'route':<40} {'cold':>7} {'p50':>7} {'p95':>7} {'ratio':>6} {'bytes':>11}")
            with httpx.Client(base_url=base, timeout=120) as client:
                for name, url, n in cases:
                    cold, times, size = timed(client, url, n)
                    p95 = pct(times, 0.95)
                    print(f"  {name:<40} {cold:7.1f} {pct(times, 0.5):7.1f} {p95:7.1f} {p95 / GOAL_P95_MS:6.2f}"
                          f" {size:11,}")
            rss, peak = rss_mb(pid)
            print(f"  manager RSS after the requests: {rss:.0f} MB (peak {peak:.0f} MB)")

            print(f"\nweb UI in headless Chromium ({args.browser_runs} page loads of /#/trials/params; goal ≤ "
                  f"{GOAL_PAINT_MS:.0f} ms)")
            res = browser(base + "/", args.browser_runs)
            if isinstance(res, str):
                print("  " + res)
            else:
                for key, label in (("table", "first paint: trial table"),
                                   ("parcoords", "first paint: parallel coordinates"),
                                   ("sort", "re-sort the table by metric"),
                                   ("search", "filter: lr>0.001; optimizer=adam")):
                    med = statistics.median(res[key])
                    ratio = f"ratio {med / GOAL_PAINT_MS:.2f}" if key in ("table", "parcoords") else ""
                    print(f"  {label:<36} median {med:7.0f} ms  (runs: {', '.join(f'{v:.0f}' for v in res[key])}) "
                          f"{ratio}")
            rss, peak = rss_mb(pid)
            print(f"\nmanager RSS at the end: {rss:.0f} MB (peak {peak:.0f} MB)")
        finally:
            subprocess.run([sys.executable, "-m", "nnix.cli.main", "stop", exp_id], env=env, capture_output=True,
                           timeout=60)
        print(json.dumps({"trials": args.trials, "metrics": args.metrics}))


if __name__ == "__main__":
    main()
