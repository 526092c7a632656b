"""Live ingest through the real CLI: N concurrent sleeping trials, each reporting R metrics per second.

Run: python bench/live_ingest.py [--trials 1000] [--rate 10] [--duration 20] [--service local|kube]
     [--baseline /work/wt/base/src]

Each trial is a small bash loop (no Python start per trial: 1,000 interpreters would measure the machine, not
nnix) that waits until every trial runs, then appends a metric line to its channel every 1/R s on a fixed
schedule (each trial at its own phase) for ``--duration`` seconds; the metric's value is the time it was
written (ms since the bench started). The experiment runs as a real manager daemon
(``nnix create``). Printed, with the ratio to the goal (issue 15 item 2):

* metric-to-REST lag: a sample of trials is polled through ``/api/nnix/v1/intermediate`` as fast as the
  bench can; the lag of a metric is when its first response arrived minus when the trial wrote it (the
  poll period inflates it a little: an upper bound). p50 / p95; goal p95 <= 200 ms;
* metric-to-store lag for every metric (the commit time the store holds minus the write time): p50 / p95;
* lost metrics: lines the trials wrote minus metrics the store holds (goal 0); duplicated (goal 0);
* manager CPU while the trials report (utime + stime of the manager process / wall time): goal <= 1 core;
* how long the N trials took to start (not a goal; the machine's fork rate shows there).

``--baseline SRC`` runs the same load first with another nnix source tree on PYTHONPATH (e.g. the starting
commit's checkout), so both figures come from one run on one machine. ``--service kube`` runs the trials
through the Kubernetes training service on the process kubelet lab (nnix.testing.kube), one pod per trial.
Not a test: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: bytecode compiled once, not at every start
GOAL_LAG_MS = 200.0
GOAL_CPU = 1.0
T0 = time.time()

TRIAL = r"""
f="$NNIX_TRIAL_CHANNEL/metrics.jsonl"
fifo="$NNIX_TRIAL_CHANNEL/tick"; mkfifo "$fifo"; exec 3<>"$fifo"   # read -t on it: a sleep without a fork
exec 4>>"$f"   # one open, one write per line (what the nni SDK does)
n=$((RATE * DURATION)); period=$((1000000 / RATE)); t0=$BENCH_T0_US
while [ ! -e "$BENCH_GO" ]; do read -t 0.2 -u 3; done   # every trial reports once all of them run
printf -v s '0.%06d' $(((RANDOM * 32768 + RANDOM) % period)); read -t "$s" -u 3   # each at its own phase
next=${EPOCHREALTIME/./}
for ((k = 0; k < n; k++)); do
  next=$((next + period)); d=$((next - ${EPOCHREALTIME/./}))
  if ((d > 0)); then printf -v s '%d.%06d' $((d / 1000000)) $((d % 1000000)); read -t "$s" -u 3; fi
  now=$((${EPOCHREALTIME/./} - t0))
  printf '{"type":"PERIODICAL","sequence":%d,"value":%d.%03d}\n' "$k" $((now / 1000)) $((now % 1000)) >&4
done
now=$((${EPOCHREALTIME/./} - t0))
printf '{"type":"FINAL","sequence":0,"value":%d.%03d}\n' $((now / 1000)) $((now % 1000)) >&4
"""


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def get(url: str) -> Any:
    """The JSON at ``url``; None when the manager does not answer within 60 s (printed: that is a finding)."""
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return json.loads(r.read())
    except TimeoutError:
        print(f"  the manager did not answer {url[:60]}... within 60 s", flush=True)
        return None


def count(db: sqlite3.Connection, kind: str) -> int:
    return int(db.execute("SELECT COUNT(*) FROM events WHERE kind = ?", (kind,)).fetchone()[0])


def run_once(work: Path, src: str | None, args: argparse.Namespace, label: str) -> dict[str, Any]:
    env = {**os.environ, "NNIX_HOME": str(work / "home")}
    if src:
        env["PYTHONPATH"] = src
    # the values go into the script: a trial of an agent-based service does not inherit this environment
    values = {"RATE": args.rate, "DURATION": args.duration, "BENCH_T0_US": int(T0 * 1e6), "BENCH_GO": work / "go"}
    (work / "trial.sh").write_text("".join(f"{k}='{v}'\n" for k, v in values.items()) + TRIAL)
    cfg: dict[str, Any] = {
        "searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}},
        "trialCommand": "bash trial.sh",
        "trialCodeDirectory": str(work),
        "trialConcurrency": args.trials,
        "maxTrialNumber": args.trials,
        "tuner": {"name": "Random", "classArgs": {"seed": 1}},
        "trainingService": {"platform": "local"},
    }
    lab: Any = None
    if args.service == "kube":
        from nnix.testing.kube import KubeLab, kube_available

        why = kube_available()
        if why:
            sys.exit(f"--service kube: {why}")
        lab = KubeLab(work / "kube").__enter__()
        env["KUBECONFIG"] = str(lab.kubeconfig)
        store = work / "storage"
        store.mkdir()
        # reuse mode: an agent per pod, talking to the manager's agent endpoint (acknowledged after the commit)
        cfg["nniManagerIp"] = "127.0.0.1"
        cfg["trainingService"] = {"platform": "kubernetes", "reuseMode": True, "cpu": "10m", "memory": "64Mi",
                                  "storage": {"storageType": "hostPath", "path": str(store),
                                              "containerMountPoint": str(store)}}
    (work / "cfg.json").write_text(json.dumps(cfg))
    try:
        r = subprocess.run([sys.executable, "-m", "nnix.cli.main", "create", "--config", str(work / "cfg.json"),
                            "--port", "0"], env=env, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            sys.exit(f"nnix create failed: {r.stderr}")
        exp_id = next(line.split()[1] for line in r.stdout.splitlines()
                      if line.startswith("Experiment ") and "started" in line)
        try:
            return measure(exp_id, env, args, label, work / "go")
        finally:  # whatever happened, nothing of this run is left running
            subprocess.run([sys.executable, "-m", "nnix.cli.main", "stop", exp_id], env=env, capture_output=True,
                           timeout=300)
    finally:
        if lab is not None:
            lab.__exit__(None, None, None)


def manager_of(exp_id: str, env: dict[str, str]) -> tuple[Path, int, int]:
    """The experiment's directory, manager pid and REST port (asked of the nnix under test)."""
    code = ("import sys; from pathlib import Path; from nnix.home import Registry, read_state; "
            "d = Path(Registry().get(sys.argv[1]).dir); s = read_state(d, summary=True); "
            "print(d, s.manager_pid, s.manager_port)")
    out = subprocess.run([sys.executable, "-c", code, exp_id], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    return Path(out[0]), int(out[1]), int(out[2])


def measure(exp_id: str, env: dict[str, str], args: argparse.Namespace, label: str, go: Path) -> dict[str, Any]:
    exp_dir, pid, port = manager_of(exp_id, env)
    spy = None
    if args.profile:  # where the manager's time goes: py-spy's top functions, written when the manager ends
        spy = subprocess.Popen(["py-spy", "record", "-p", str(pid), "-f", "raw", "-o", args.profile, "-r", "50"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    db = sqlite3.connect(f"file:{exp_dir / 'db' / 'nnix.sqlite'}?mode=ro", uri=True, timeout=30)
    t_start = time.time()
    while count(db, "TrialStarted") < args.trials:  # every trial running
        if time.time() - t_start > 300:
            sys.exit("the trials did not all start within 5 minutes")
        time.sleep(0.2)
    started_s = time.time() - t_start
    go.touch()  # the trials report from now on, all of them running
    steady_ms = (time.time() - T0) * 1000
    ids = [row[0] for row in db.execute("SELECT trial_id FROM events WHERE kind = 'TrialStarted' ORDER BY seq")]
    step = max(1, len(ids) // args.sample)
    sample = ids[::step][: args.sample]
    url = f"{base}/api/nnix/v1/intermediate?maxPoints=100000&trials={','.join(sample)}"
    cpu0, wall0 = cpu_seconds(pid), time.time()
    window = max(1.0, args.duration - 1.0)  # while all of them report
    seen: set[tuple[str, int]] = set()
    lags: list[float] = []
    cpu = float("nan")
    polls = 0
    while True:
        body = get(url) or {"trials": []}
        got = (time.time() - T0) * 1000
        polls += 1
        for t in body["trials"]:
            for x, y in zip(t["x"], t["y"], strict=True):
                if (t["id"], x) not in seen:
                    seen.add((t["id"], x))
                    if y >= steady_ms:
                        lags.append(got - y)
        now = time.time()
        if cpu != cpu and now - wall0 >= window:
            cpu = (cpu_seconds(pid) - cpu0) / (now - wall0)
        if cpu == cpu and count(db, "TrialEnded") >= args.trials:
            break
        if now - wall0 > window + args.duration + 600:
            sys.exit("the trials did not end in time")
        time.sleep(0.02)
    # every metric: its commit time in the store minus its write time
    store_lags: list[float] = []
    keys: set[tuple[str, int]] = set()
    dup = 0
    for ts, body in db.execute("SELECT ts, body FROM events WHERE kind = 'MetricReported'"):
        row = json.loads(body)
        if isinstance(row, list):
            tid, _type, _seq, index, _pid, value = row
        else:
            tid, index, value = row["trial_id"], row["index"], row["value"]
        if (tid, index) in keys:
            dup += 1
        keys.add((tid, index))
        lag = (ts - T0) * 1000 - float(value)
        if float(value) >= steady_ms:
            store_lags.append(lag)
    expected = args.trials * (args.rate * args.duration + 1)
    db.close()
    if spy is not None:
        spy.send_signal(signal.SIGINT)  # py-spy writes its file on Ctrl-C
        spy.wait(60)
    return {"label": label, "started_s": started_s, "rest_p50": pct(lags, 0.5), "rest_p95": pct(lags, 0.95),
            "rest_n": len(lags), "polls": polls, "store_p50": pct(store_lags, 0.5),
            "store_p95": pct(store_lags, 0.95),
            "store_n": len(store_lags), "lost": expected - len(keys), "dup": dup,
            "expected": expected, "cpu": cpu}


def report(r: dict[str, Any], args: argparse.Namespace) -> None:
    rate = args.trials * args.rate
    print(f"[{r['label']}] {args.trials} trials x {args.rate} metrics/s ({rate:,} metrics/s), {args.service}; "
          f"all {args.trials} started in {r['started_s']:.1f} s")
    print(f"  metric-to-REST lag ({args.sample} sampled trials, {r['rest_n']} metrics, "
          f"{r['polls']} polls): p50 {r['rest_p50']:.0f} ms, p95 {r['rest_p95']:.0f} ms "
          f"(goal <= {GOAL_LAG_MS:.0f}: ratio {r['rest_p95'] / GOAL_LAG_MS:.2f})")
    print(f"  metric-to-store lag (all {r['store_n']:,} metrics): p50 {r['store_p50']:.0f} ms, "
          f"p95 {r['store_p95']:.0f} ms")
    print(f"  lost {r['lost']} of {r['expected']:,} (goal 0), duplicated {r['dup']} (goal 0)")
    print(f"  manager CPU while they report: {r['cpu']:.2f} cores "
          f"(goal <= {GOAL_CPU:.0f}: ratio {r['cpu'] / GOAL_CPU:.2f})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--rate", type=int, default=10, help="metrics per second per trial")
    ap.add_argument("--duration", type=int, default=20, help="seconds each trial reports")
    ap.add_argument("--sample", type=int, default=20, help="trials polled through REST")
    ap.add_argument("--service", choices=["local", "kube"], default="local")
    ap.add_argument("--profile", default=None, help="py-spy the manager into this file (raw collapsed stacks)")
    ap.add_argument("--baseline", default=None, help="another nnix source tree, run first with the same load")
    args = ap.parse_args()
    results = []
    runs = ([("baseline", args.baseline)] if args.baseline else []) + [("this tree", None)]
    for label, src in runs:
        with tempfile.TemporaryDirectory(prefix="nnix-ingest-") as tmp:
            r = run_once(Path(tmp), src, args, label)
            report(r, args)
            results.append(r)
    if len(results) == 2:
        b, m = results
        print(f"this tree / baseline: REST lag p95 {m['rest_p95'] / b['rest_p95']:.2f}, "
              f"manager CPU {m['cpu'] / b['cpu']:.2f}")
    return 0 if all(r["lost"] == 0 and r["dup"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
