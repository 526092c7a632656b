"""Big responses against a responsive manager: `/version` latency while a 1 GB trial file is served and
while NNI's `metric-data` with 400,000 metrics is built and sent, each against the idle baseline
measured in the same run; and the manager's RSS during each.

Builds a finished experiment (a store of N trials with M intermediate results each, and one trial
whose `trial.stdout` is SIZE bytes of text), serves it with `nnix view` (a real manager daemon), then:

* idle: `/version` p50/p95/max over a few hundred requests;
* file: a separate client process downloads `trial-file/<id>/stdout` (reading as fast as it can)
  while `/version` is measured; then the same with a client that reads slowly (the server must
  not buffer what the client has not taken);
* metric-data: a separate client process fetches `GET /metric-data` (all metrics) while `/version`
  is measured, three times.

Run: `python bench/api_io.py [--size-mb 1024] [--trials 100] [--metrics 4000]`. The goal is
`/version` under 50 ms while any of this runs: each line prints its ratio to the goal and to idle
(a ratio ≤ 1 to the goal meets it). Everything it writes is under a temporary directory removed at
the end. Not a test: nothing here asserts a timing. Compare with the code before a change by running
it with ``PYTHONPATH=<old checkout>/src`` (the daemon inherits it).
"""

from __future__ import annotations

import argparse
import http.client
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

GOAL_MS = 50.0

# a separate process, so that the download does not compete with the measuring thread for a GIL
FETCH = r"""
import http.client, sys, time
host, port, path, pause = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
c = http.client.HTTPConnection(host, port, timeout=600)
t = time.perf_counter()
c.request("GET", path)
r = c.getresponse()
n = 0
while True:
    b = r.read(1 << 20)
    if not b:
        break
    n += len(b)
    if pause:
        time.sleep(pause)
print(r.status, n, round(time.perf_counter() - t, 3), flush=True)
"""


def build(root: Path, n_trials: int, n_metrics: int, size_mb: int) -> tuple[str, Path, str]:
    from nnix.config import parse_config
    from nnix.core.events import ManagerStarted, MetricReported, StatusChanged, TrialCreated, TrialEnded, TrialStarted
    from nnix.core.status import ExperimentStatus, MetricType, TrialStatus
    from nnix.home import STORE_NAME
    from nnix.host.build import create
    from nnix.store.sqlite import SqliteStore

    code = root / "code"
    code.mkdir(parents=True)
    cfg = {
        "experimentName": "api-io", "searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}},
        "trialCommand": "python3 train.py", "trialCodeDirectory": str(code), "trialConcurrency": 1,
        "maxTrialNumber": n_trials, "tuner": {"name": "Random", "classArgs": {"seed": 1}},
        "trainingService": {"platform": "local"}, "experimentWorkingDirectory": str(root / "exps"),
    }
    exp_id, exp_dir = create(parse_config(cfg, code))
    store = SqliteStore(exp_dir / STORE_NAME)
    store.append([ManagerStarted(0, "create", None), StatusChanged(ExperimentStatus.RUNNING)])
    out_root = exp_dir / "environments" / "local-env" / "trials"
    for i in range(n_trials):
        tid = f"T{i:04d}"
        (out_root / tid).mkdir(parents=True)
        store.append([TrialCreated(tid, i, i, {"x": i / n_trials}),
                      TrialStarted(tid, "local-env", str(out_root / tid), 1000 + i)])
        ev: list[Any] = [MetricReported(tid, MetricType.PERIODICAL, k, k / (k + 1.0), k, i) for k in range(n_metrics)]
        ev.append(MetricReported(tid, MetricType.FINAL, 0, {"default": i / n_trials, "loss": 0.5}, n_metrics, i))
        ev.append(TrialEnded(tid, TrialStatus.SUCCEEDED, 0))
        store.append(ev)
    store.append([StatusChanged(ExperimentStatus.DONE, "maxTrialNumber reached")])
    store.close()
    line = b"epoch 0012 step 004096 loss 0.123456 acc 0.987654 lr 0.000300 some more text to log\n"
    block = line * ((8 << 20) // len(line))
    with open(out_root / "T0000" / "trial.stdout", "wb") as f:
        left = size_mb << 20
        while left > 0:
            f.write(block[:left])
            left -= min(left, len(block))
    return exp_id, exp_dir, "T0000"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Prober:
    """`/version` latencies on one keep-alive connection, until stopped; samples the server's RSS."""

    def __init__(self, port: int, pid: int) -> None:
        self.port, self.pid = port, pid
        self.times: list[float] = []
        self.rss: list[float] = []
        self.errors = 0

    def run(self, stop: threading.Event | None, count: int | None = None) -> None:
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        while (stop is None or not stop.is_set()) and (count is None or len(self.times) < count):
            t = time.perf_counter()
            try:
                c.request("GET", "/api/v1/nni/version")
                r = c.getresponse()
                r.read()
                ok = r.status == 200
            except OSError:
                ok = False
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
            if ok:
                self.times.append((time.perf_counter() - t) * 1000)
            else:
                self.errors += 1
            self.rss.append(rss_mb(self.pid))
            time.sleep(0.01)
        c.close()


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))] if s else float("nan")


def report(name: str, p: Prober, idle_p95: float | None, extra: str = "") -> float:
    p50, p95, mx = pct(p.times, 0.5), pct(p.times, 0.95), max(p.times, default=float("nan"))
    vs = f"  p95 vs idle {p95 / idle_p95:5.1f}x" if idle_p95 else ""
    print(f"  {name:<34} n={len(p.times):4d} p50 {p50:7.1f}  p95 {p95:7.1f}  max {mx:7.1f} ms  "
          f"(max/goal {mx / GOAL_MS:5.2f}){vs}  RSS max {max(p.rss, default=0):6.0f} MB{extra}")
    return p95


def during(port: int, pid: int, path: str, pause: float, env: dict[str, str]) -> tuple[Prober, str]:
    p = Prober(port, pid)
    stop = threading.Event()
    th = threading.Thread(target=p.run, args=(stop,), daemon=True)
    fetch = subprocess.Popen([sys.executable, "-c", FETCH, "127.0.0.1", str(port), path, str(pause)],
                             stdout=subprocess.PIPE, text=True, env=env)
    th.start()
    out, _ = fetch.communicate(timeout=1800)
    stop.set()
    th.join(120)
    status, size, secs = out.split()
    return p, f"; fetch: HTTP {status}, {int(size) / 1e6:,.0f} MB in {float(secs):.1f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mb", type=int, default=1024, help="size of the served trial.stdout")
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--metrics", type=int, default=4000, help="intermediate results per trial")
    ap.add_argument("--idle", type=int, default=300, help="/version requests for the idle baseline")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="nnix-apiio-") as tmp:
        root = Path(tmp)
        env = {**os.environ, "NNIX_HOME": str(root / "home")}
        os.environ["NNIX_HOME"] = env["NNIX_HOME"]
        t0 = time.perf_counter()
        exp_id, exp_dir, tid = build(root, args.trials, args.metrics, args.size_mb)
        total = args.trials * (args.metrics + 1)
        print(f"built: {args.trials} trials, {total:,} metrics, a {args.size_mb} MB trial.stdout "
              f"in {time.perf_counter() - t0:.1f} s")
        r = subprocess.run([sys.executable, "-m", "nnix.cli.main", "view", exp_id, "--port", "0"], env=env,
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            sys.exit(f"nnix view failed: {r.stderr}")
        from nnix.home import read_state

        st = read_state(exp_dir, summary=True)
        pid, port = st.manager_pid or 0, st.manager_port or 0
        try:
            print(f"manager (nnix view) pid {pid}, RSS {rss_mb(pid):.0f} MB; /version latency "
                  f"(goal: max under {GOAL_MS:.0f} ms while each runs)")
            idle = Prober(port, pid)
            idle.run(None, args.idle)
            idle_p95 = report("idle", idle, None)
            p, note = during(port, pid, f"/api/v1/nni/trial-file/{tid}/stdout", 0.0, env)
            report(f"serving {args.size_mb} MB trial-file (fast)", p, idle_p95, note)
            p, note = during(port, pid, f"/api/v1/nni/trial-file/{tid}/stdout", 0.02, env)
            report(f"serving {args.size_mb} MB trial-file (slow)", p, idle_p95, note)
            for i in range(3):
                p, note = during(port, pid, "/api/v1/nni/metric-data", 0.0, env)
                report(f"metric-data, {total:,} metrics #{i + 1}", p, idle_p95, note)
            again = Prober(port, pid)
            again.run(None, args.idle)
            report("idle again", again, idle_p95)
        finally:
            subprocess.run([sys.executable, "-m", "nnix.cli.main", "stop", exp_id], env=env, capture_output=True,
                           timeout=120)


if __name__ == "__main__":
    main()
