"""A metric flood through the real CLI: one trial writes 10^6 metric lines as fast as it can (issue 25 item 4).

Run: python bench/metric_flood.py [--lines 1000000] [--writer raw|sdk] [--src OTHER_TREE/src]

The experiment is created the way a user does (``nnix create`` of a small config: one trial, the local service,
a real manager daemon). Its trial waits for a go file, then appends ``--lines`` intermediate results to its
channel (``raw``: lines joined 1,000 per ``os.write``, ~50 bytes each, what a trial looping on a fast write does;
``sdk``: ``nni.report_intermediate_result`` per line), then its final result, and exits. Meanwhile a client
asks REST routes (NNI's ``check-status``, the native overview, the first trial page, in turn) on a fixed schedule,
20 requests a second whatever the earlier ones took (each latency counted from when it was due: a stall of the
manager counts once for every request it held, as users meet it), and a thread samples the manager's RSS from
/proc every 20 ms. Printed:

* REST p50 / p95 / max with the idle manager (the trial waiting for its go, same run): the baseline;
* ingest time: from the go until REST shows the trial SUCCEEDED with its final result (its lines all read);
* REST p50 / p95 / max while the flood is ingested (goal p95 <= 200 ms), and their ratio to the baseline;
* the manager's RSS idle and at its peak (goal: at most 300 MB above idle);
* afterwards, the GET of the flooded trial (native detail, its first metric page and NNI's ``metric-data/<id>``):
  time and size, with the p95 / max of the polling client while each is served;
* what the trial's REST view says about the lines it kept (the per-trial cap's warning).

``--src`` puts another nnix source tree first on PYTHONPATH (e.g. an older checkout), for a before/after run on
the same machine. Not a test: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from live_ingest import pct  # (a bench script beside this one: the same percentile)

os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
GOAL_P95_MS = 200.0
GOAL_RSS_MB = 300.0
ROUTES = ("/api/v1/nni/check-status", "/api/nnix/v1/experiment", "/api/nnix/v1/trials?limit=20")

TRIAL = r"""
import os, sys, time
channel = os.environ["NNIX_TRIAL_CHANNEL"]
go, lines, writer = sys.argv[1], int(sys.argv[2]), sys.argv[3]
while not os.path.exists(go):
    time.sleep(0.05)
if writer == "sdk":
    import nni
    nni.get_next_parameter()
    for k in range(lines):
        nni.report_intermediate_result(k / lines)
    nni.report_final_result(0.5)
else:
    fd = os.open(os.path.join(channel, "metrics.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    for lo in range(0, lines, 1000):
        os.write(fd, "".join('{"type":"PERIODICAL","sequence":%d,"value":%.6f}\n' % (k, k / lines)
                             for k in range(lo, min(lines, lo + 1000))).encode())
    os.write(fd, b'{"type":"FINAL","sequence":0,"value":0.5}\n')
    os.close(fd)
"""


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


class Poller(threading.Thread):
    """A client asking the routes on a fixed schedule (open loop: one request every ``period`` seconds, whatever
    the earlier ones took); each answer's (time it was due, latency in ms from then)."""

    def __init__(self, base: str, period: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.base = base
        self.period = period
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.pool = ThreadPoolExecutor(max_workers=64)

    def _one(self, due: float, route: str) -> None:
        try:
            with urllib.request.urlopen(self.base + route, timeout=300) as r:
                r.read()
        except OSError as e:
            print(f"  request failed: {e}", flush=True)
        self.samples.append((due, (time.monotonic() - due) * 1000))

    def run(self) -> None:
        i = 0
        due = time.monotonic()
        while not self.stop.is_set():
            self.pool.submit(self._one, due, ROUTES[i % len(ROUTES)])
            i += 1
            due += self.period
            time.sleep(max(0.0, due - time.monotonic()))

    def between(self, a: float, b: float) -> list[float]:
        return [ms for t, ms in list(self.samples) if a <= t < b]


class RssSampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.samples.append((time.monotonic(), rss_mb(self.pid)))
            time.sleep(0.02)

    def peak(self, a: float, b: float) -> float:
        return max((mb for t, mb in list(self.samples) if a <= t <= b), default=float("nan"))


def get_json(url: str, timeout: float = 300) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def timed_get(url: str) -> tuple[float, int]:
    t0 = time.monotonic()
    with urllib.request.urlopen(url, timeout=600) as r:
        n = len(r.read())
    return time.monotonic() - t0, n


def manager_of(exp_id: str, env: dict[str, str]) -> tuple[int, int]:
    code = ("import sys; from pathlib import Path; from nnix.home import Registry, read_state; "
            "d = Path(Registry().get(sys.argv[1]).dir); s = read_state(d, summary=True); "
            "print(s.manager_pid, s.manager_port)")
    out = subprocess.run([sys.executable, "-c", code, exp_id], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    return int(out[0]), int(out[1])


def stats(values: list[float]) -> str:
    return (f"p50 {pct(values, 0.5):.0f} ms, p95 {pct(values, 0.95):.0f} ms, "
            f"max {max(values, default=float('nan')):.0f} ms ({len(values)} requests)")


def run(work: Path, args: argparse.Namespace) -> None:
    env = {**os.environ, "NNIX_HOME": str(work / "home")}
    if args.src:
        env["PYTHONPATH"] = args.src
    (work / "flood.py").write_text(TRIAL)
    go = work / "go"
    cfg = {
        "searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}},
        "trialCommand": f"{sys.executable} flood.py {go} {args.lines} {args.writer}",
        "trialCodeDirectory": str(work),
        "trialConcurrency": 1,
        "maxTrialNumber": 1,
        "tuner": {"name": "Random", "classArgs": {"seed": 1}},
        "trainingService": {"platform": "local"},
    }
    (work / "cfg.json").write_text(json.dumps(cfg))
    r = subprocess.run([sys.executable, "-m", "nnix.cli.main", "create", "--config", str(work / "cfg.json"),
                        "--port", "0"], env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        sys.exit(f"nnix create failed: {r.stderr}")
    exp_id = next(line.split()[1] for line in r.stdout.splitlines()
                  if line.startswith("Experiment ") and "started" in line)
    try:
        measure(exp_id, env, args, go)
    finally:
        t0 = time.monotonic()
        stop = subprocess.run([sys.executable, "-m", "nnix.cli.main", "stop", exp_id], env=env, capture_output=True,
                              text=True, timeout=300)
        print(f"  nnix stop: exit {stop.returncode} in {time.monotonic() - t0:.1f} s")


def measure(exp_id: str, env: dict[str, str], args: argparse.Namespace, go: Path) -> None:
    pid, port = manager_of(exp_id, env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    tid = None
    while tid is None:  # the trial runs (and waits for its go)
        items = get_json(base + "/api/nnix/v1/trials?limit=1")["items"]
        if items and items[0]["status"] == "RUNNING":
            tid = items[0]["id"]
        elif time.monotonic() > deadline:
            sys.exit("the trial did not start within 2 minutes")
        else:
            time.sleep(0.1)
    poller, sampler = Poller(base), RssSampler(pid)
    poller.start()
    sampler.start()
    t_idle = time.monotonic()
    time.sleep(args.idle)
    idle_rss = pct([mb for _, mb in sampler.samples], 0.5)
    t_go = time.monotonic()
    go.touch()
    while True:
        t = get_json(f"{base}/api/nnix/v1/trials?limit=1")["items"][0]
        if t["status"] != "RUNNING":
            break
        if time.monotonic() - t_go > args.timeout:
            sys.exit(f"the flood was not ingested within {args.timeout} s")
        time.sleep(0.05)
    t_done = time.monotonic()
    time.sleep(1.0)
    gets = []
    for label, path in (("native trial detail", f"/api/nnix/v1/trials/{tid}"),
                        ("native metrics, a page of 1,000", f"/api/nnix/v1/trials/{tid}/metrics?limit=1000"),
                        ("native metrics, all", f"/api/nnix/v1/trials/{tid}/metrics"),
                        ("NNI metric-data/<id>", f"/api/v1/nni/metric-data/{tid}")):
        a = time.monotonic()
        secs, size = timed_get(base + path)
        b = time.monotonic()
        gets.append((label, secs, size, a, b))
        time.sleep(1.0)
    detail = get_json(f"{base}/api/nnix/v1/trials/{tid}")
    t_end = time.monotonic()
    poller.stop.set()
    poller.join()
    poller.pool.shutdown(wait=True)  # every request asked has its answer
    sampler.stop.set()
    flood = poller.between(t_go, t_done)
    idle = poller.between(t_idle, t_go)
    peak_flood = sampler.peak(t_go, t_done)
    print(f"metric flood: {args.lines:,} lines ({args.writer}) from one trial; nnix from "
          f"{args.src or 'this tree'}")
    print(f"  idle manager (baseline, same run): REST {stats(idle)}")
    why = f": {t['message']}" if t.get("message") else ""
    print(f"  ingest: {t_done - t_go:.2f} s until the trial is {t['status']} in REST{why} "
          f"(final {t.get('metric')}, {t.get('nInter')} intermediate results kept)")
    p95 = pct(flood, 0.95)
    print(f"  during the flood: REST {stats(flood)}; p95 vs goal {GOAL_P95_MS:.0f} ms: ratio "
          f"{p95 / GOAL_P95_MS:.2f}; vs idle p95: {p95 / max(pct(idle, 0.95), 1e-9):.1f}x")
    print(f"  manager RSS: idle {idle_rss:.0f} MB, peak during the flood {peak_flood:.0f} MB "
          f"(+{peak_flood - idle_rss:.0f} MB; goal <= +{GOAL_RSS_MB:.0f}: ratio "
          f"{(peak_flood - idle_rss) / GOAL_RSS_MB:.2f})")
    for label, secs, size, a, b in gets:
        during = poller.between(a, b)
        print(f"  GET {label}: {secs * 1000:.0f} ms, {size / 1e6:.1f} MB; the other client meanwhile: "
              f"{stats(during)}; RSS peak {sampler.peak(a, b):.0f} MB")
    whole = sampler.peak(t_idle, t_end)
    print(f"  peak RSS over the whole run: {whole:.0f} MB (+{whole - idle_rss:.0f} MB above idle)")
    print(f"  the trial's detail: {detail.get('metricCount')} metrics ({len(detail['metrics'])} in it); "
          f"warnings ({detail.get('warnings')}): {detail.get('warningMessages')}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--writer", choices=["raw", "sdk"], default="raw")
    ap.add_argument("--idle", type=float, default=5.0, help="seconds the idle manager is polled first")
    ap.add_argument("--timeout", type=float, default=900.0, help="give up when the flood takes longer")
    ap.add_argument("--src", default=None, help="another nnix source tree first on PYTHONPATH")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="nnix-flood-") as tmp:
        run(Path(tmp), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
