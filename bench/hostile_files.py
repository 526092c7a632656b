"""Hostile trial files through the real CLI: trials that replace the files nnix reads with FIFOs and links, and
the manager's REST answers meanwhile (issue 25 item 2).

Run: python bench/hostile_files.py [--src OTHER_TREE/src] [--timeout 120]

One experiment (`nnix create`, local service, concurrency = every trial at once) whose trials each do one hostile
thing to their own files, then report a final result and exit, beside two well-behaved trials:

* ``metrics-fifo``: ``.nnix/metrics.jsonl`` replaced by a FIFO (an open() for reading waits for a writer forever);
* ``metrics-zero``: ``metrics.jsonl`` a symbolic link to ``/dev/zero`` (an endless read);
* ``metrics-link-fifo``: ``metrics.jsonl`` a link to a FIFO (the same hang, in disguise);
* ``metrics-dir``: ``metrics.jsonl`` a directory;
* ``stderr-fifo``: ``trial.stderr`` replaced by a FIFO (what REST and `nnix log trial` serve);
* ``stdout-zero``: ``trial.stdout`` a link to ``/dev/zero``.

A client asks REST (check-status, the overview, the first trial page, in turn) 20 times a second throughout, each
latency counted from when the request was due. Printed: the longest REST stall and p95, how each trial ended
(status, warning), the REST answers for the hostile stdout/stderr files, and the time `nnix stop` took.
``--src`` runs another tree (e.g. the code before the fix) for comparison: a manager that hangs shows as a stall as
long as the run. Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from metric_flood import Poller, manager_of, pct  # (a bench script beside this one)

KINDS = ("metrics-fifo", "metrics-zero", "metrics-link-fifo", "metrics-dir", "stderr-fifo", "stdout-zero",
         "normal", "normal")

TRIAL = r"""
import json, os, sys, time
kind = json.load(open("kinds.json"))[int(os.environ["NNI_TRIAL_SEQ_ID"])]
channel = os.environ["NNIX_TRIAL_CHANNEL"]
out = os.environ["NNI_OUTPUT_DIR"]
metrics = os.path.join(channel, "metrics.jsonl")
def swap(path, make):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    make(path)
if kind == "metrics-fifo":
    swap(metrics, os.mkfifo)
elif kind == "metrics-zero":
    swap(metrics, lambda p: os.symlink("/dev/zero", p))
elif kind == "metrics-link-fifo":
    os.mkfifo(os.path.join(channel, "pipe"))
    swap(metrics, lambda p: os.symlink(os.path.join(channel, "pipe"), p))
elif kind == "metrics-dir":
    swap(metrics, os.mkdir)
elif kind in ("stderr-fifo", "stdout-zero"):
    name = "trial.stderr" if kind == "stderr-fifo" else "trial.stdout"
    for d in {out, os.path.dirname(channel.rstrip("/"))}:
        p = os.path.join(d, name)
        if os.path.lexists(p):
            swap(p, os.mkfifo if kind == "stderr-fifo" else (lambda q: os.symlink("/dev/zero", q)))
time.sleep(2)
if kind in ("normal", "stderr-fifo", "stdout-zero"):
    import nni
    nni.get_next_parameter()
    nni.report_final_result(0.5)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", default=None, help="another nnix source tree first on PYTHONPATH")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for every trial to end")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="nnix-hostile-") as tmp:
        work = Path(tmp)
        env = {**os.environ, "NNIX_HOME": str(work / "home")}
        if args.src:
            env["PYTHONPATH"] = os.pathsep.join([args.src, env.get("PYTHONPATH", "")])
        (work / "trial.py").write_text(TRIAL)
        (work / "kinds.json").write_text(json.dumps(list(KINDS)))
        cfg = {"searchSpace": {"k": {"_type": "randint", "_value": [0, len(KINDS)]}},
               "trialCommand": f"{sys.executable} trial.py",
               "trialCodeDirectory": str(work), "trialConcurrency": len(KINDS), "maxTrialNumber": len(KINDS),
               "tuner": {"name": "Random"}, "trainingService": {"platform": "local"}}
        (work / "config.yml").write_text(json.dumps(cfg))
        nnix = [sys.executable, "-m", "nnix.cli.main"]
        made = subprocess.run([*nnix, "create", "--config", str(work / "config.yml"), "--port", "0"], env=env,
                              capture_output=True, text=True, timeout=120)
        if made.returncode:
            print(made.stdout, made.stderr)
            return 1
        exp_id = next(line.split()[1] for line in made.stdout.splitlines() if line.startswith("Experiment "))
        _, port = manager_of(exp_id, env)
        base = f"http://127.0.0.1:{port}"
        poller = Poller(base)
        poller.start()
        t0 = time.monotonic()
        trials: list[dict[str, object]] = []
        while time.monotonic() - t0 < args.timeout:
            try:
                with urllib.request.urlopen(base + "/api/nnix/v1/trials?limit=100", timeout=60) as r:
                    trials = json.loads(r.read())["items"]
            except (OSError, ValueError, KeyError):
                trials = []
            if len(trials) == len(KINDS) and all(t.get("status") not in ("WAITING", "RUNNING") for t in trials):
                break
            time.sleep(0.5)
        served = {}
        for t in trials:
            kind = KINDS[int(str(t.get("seq", 0)))]
            if kind in ("stderr-fifo", "stdout-zero"):
                name = "stderr" if kind == "stderr-fifo" else "stdout"
                a = time.monotonic()
                try:
                    with urllib.request.urlopen(f"{base}/api/nnix/v1/trials/{t['id']}/logs/{name}", timeout=60) as r:
                        answer = f"{r.status}, {len(r.read())} bytes"
                except urllib.error.HTTPError as e:
                    answer = f"{e.code} {e.read()[:120]!r}"
                except OSError as e:
                    answer = f"no answer: {e}"
                served[kind] = f"{answer} in {(time.monotonic() - a) * 1000:.0f} ms"
        poller.stop.set()
        a = time.monotonic()
        stop = subprocess.run([*nnix, "stop", exp_id], env=env, capture_output=True, text=True, timeout=300)
        stop_s = time.monotonic() - a
        lat = poller.between(t0, time.monotonic())
        print(f"{len(KINDS)} trials ({', '.join(KINDS)}), {time.monotonic() - t0:.1f} s")
        print(f"REST while they ran: p95 {pct(lat, 0.95):.0f} ms, longest stall {max(lat, default=float('nan')):.0f}"
              f" ms ({len(lat)} requests)")
        for t in sorted(trials, key=lambda t: int(str(t.get("seq", 0)))):
            kind = KINDS[int(str(t.get("seq", 0)))]
            print(f"  {kind:18} {t.get('status')}: {str(t.get('message') or '')[:90]}"
                  + (f" | warnings {t.get('warnings')}" if t.get("warnings") else ""))
        for kind, answer in served.items():
            print(f"  REST log of {kind}: {answer}")
        print(f"nnix stop: exit {stop.returncode} in {stop_s:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
