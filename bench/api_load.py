"""REST latency under load: 50 clients polling NNI's `GET /trial-jobs` (as 50 open web UIs and scripts
would) while 8 trials report intermediate results as fast as they can, against the same 50 clients
while the same 8 trials are running but quiet, in the same run.

A real experiment (`nnix create`, a manager daemon, the local service, 8 real trial processes). The
trials start, then wait for a go-file; phase 1 (idle) measures the 50 pollers; the go-file is written
and phase 2 (load) measures them again while the trials report. The clients run in a separate process
(asyncio, one keep-alive connection each), so they do not share a GIL with the measuring.

Run: `python bench/api_load.py [--clients 50] [--trials 8] [--seconds 10] [--path /api/v1/nni/trial-jobs]`.
Prints p50/p95/max per phase, the load/idle p95 ratio and how many metrics the manager took in. Run it
with ``PYTHONPATH=<old checkout>/src`` to measure the code before a change. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRIAL = r"""
import os, time, nni
p = nni.get_next_parameter()
go = os.environ["NNIX_BENCH_GO"]
while not os.path.exists(go):
    time.sleep(0.05)
end = time.time() + float(os.environ["NNIX_BENCH_SECONDS"])
i = 0
while time.time() < end:
    nni.report_intermediate_result(i * 1e-6 + p["x"])
    i += 1
nni.report_final_result(p["x"])
"""

# the pollers: one process, asyncio, keep-alive HTTP/1.1 by hand (no client library overhead)
POLL = r"""
import asyncio, json, sys, time
port, path, clients, seconds = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
req = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
times, sizes, errors = [], [], [0]
async def one(stop):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    while time.perf_counter() < stop:
        t = time.perf_counter()
        w.write(req)
        head = await r.readuntil(b"\r\n\r\n")
        n = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                n = int(line.split(b":")[1])
        if not head.startswith(b"HTTP/1.1 200"):
            errors[0] += 1
        body = await r.readexactly(n)
        times.append((time.perf_counter() - t) * 1000)
        sizes.append(len(body))
    w.close()
async def main():
    stop = time.perf_counter() + seconds
    await asyncio.gather(*(one(stop) for _ in range(clients)))
asyncio.run(main())
print(json.dumps({"times": times, "errors": errors[0], "bytes": sum(sizes) // max(1, len(sizes))}))
"""


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))] if s else float("nan")


def poll(port: int, path: str, clients: int, seconds: float) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", POLL, str(port), path, str(clients), str(seconds)],
                         capture_output=True, text=True, timeout=seconds + 300)
    if out.returncode != 0:
        sys.exit(f"pollers failed: {out.stderr}")
    res: dict[str, object] = json.loads(out.stdout)
    return res


def metrics_in(exp_dir: Path) -> int:
    from nnix.home import read_state

    st = read_state(exp_dir)
    return sum(len(t.metrics) for t in st.trials.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    ap.add_argument("--path", default="/api/v1/nni/trial-jobs")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="nnix-apiload-") as tmp:
        root = Path(tmp)
        code = root / "code"
        code.mkdir()
        (code / "trial.py").write_text(TRIAL)
        go = root / "go"
        env = {**os.environ, "NNIX_HOME": str(root / "home"), "NNIX_BENCH_GO": str(go),
               "NNIX_BENCH_SECONDS": str(args.seconds + 5)}
        os.environ.update({k: env[k] for k in ("NNIX_HOME", "NNIX_BENCH_GO", "NNIX_BENCH_SECONDS")})
        cfg = root / "config.json"
        cfg.write_text(json.dumps({
            "searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}},
            "trialCommand": f"{sys.executable} trial.py", "trialCodeDirectory": str(code),
            "trialConcurrency": args.trials, "maxTrialNumber": args.trials,
            "tuner": {"name": "Random", "classArgs": {"seed": 1}}, "trainingService": {"platform": "local"},
            "experimentWorkingDirectory": str(root / "exps"),
        }))
        yml = root / "config.yml"
        yml.write_text(cfg.read_text())  # JSON is YAML
        r = subprocess.run([sys.executable, "-m", "nnix.cli.main", "create", "--config", str(yml), "--port", "0"],
                           env=env, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            sys.exit(f"nnix create failed: {r.stdout}{r.stderr}")
        from nnix.home import Registry, read_state

        entry = Registry().all()[0]
        exp_dir = Path(entry.dir)
        try:
            deadline = time.time() + 120
            while True:
                st = read_state(exp_dir)
                running = sum(1 for t in st.trials.values() if t.status.value == "RUNNING")
                if running == args.trials and st.manager_port:
                    break
                if time.time() > deadline:
                    sys.exit(f"only {running} trials running after 120 s")
                time.sleep(0.2)
            port = st.manager_port
            print(f"{args.trials} trials running; {args.clients} clients polling GET {args.path} for "
                  f"{args.seconds:.0f} s per phase")
            idle = poll(port, args.path, args.clients, args.seconds)
            before = metrics_in(exp_dir)
            go.write_text("go")
            time.sleep(0.5)
            load = poll(port, args.path, args.clients, args.seconds)
            taken = metrics_in(exp_dir) - before
            rows = []
            for name, res in (("idle (trials quiet)", idle), ("load (trials reporting)", load)):
                times = res["times"]
                assert isinstance(times, list)
                rows.append(pct(times, 0.95))
                print(f"  {name:<26} requests {len(times):6d}  p50 {pct(times, 0.5):7.1f}  p95 {pct(times, 0.95):7.1f}"
                      f"  max {max(times):7.1f} ms  errors {res['errors']}  ~{res['bytes']:,} B/response")
            print(f"  p95 load/idle: {rows[1] / rows[0]:.2f}x; metrics taken in during the load phase: {taken:,} "
                  f"({taken / args.seconds:,.0f}/s)")
        finally:
            subprocess.run([sys.executable, "-m", "nnix.cli.main", "stop", entry.id], env=env, capture_output=True,
                           timeout=120)


if __name__ == "__main__":
    main()
