"""Concurrent starts of one experiment's manager, through the CLI as a user types them
(`nnix resume ID & nnix resume ID & nnix resume ID`): how many managers start per round.

Makes a stopped experiment (NNI's config, a quick trial, a budget of one more trial per round), then for each
round starts K `nnix resume ID --port 0` processes at once, waits for them, counts the ones that exited 0, the
manager processes alive for that experiment (its lock's holder and any process whose command line resumes it),
the losers' messages, then `nnix stop ID` and checks that no manager is left. At the end: TrialCreated events,
and whether a sequence number was created twice.

Run: `python bench/concurrent_resume.py [--rounds 50] [--k 3]`. Prints one line per round and a summary
(rounds, managers started: the goal is exactly 1 per round, K-1 clear errors). Not a test: nothing here asserts.
Everything it writes is under a temporary directory removed at the end.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

NNIX = [sys.executable, "-m", "nnix.cli.main"]


def managers_of(exp_id: str) -> list[int]:
    """Live processes whose command line is a manager of ``exp_id`` (a daemon, or a forked `resume`)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and exp_id.encode() in cmd and (b"resume" in cmd or b"nnix.host.daemon" in cmd):
            out.append(int(pid))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--k", type=int, default=3, help="concurrent resumes per round")
    ap.add_argument("--run-for", type=float, default=1.0, help="seconds the manager runs trials each round")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="nnix-concurrent-") as tmp:
        root = Path(tmp)
        os.environ["NNIX_HOME"] = str(root / "home")
        (root / "trial.py").write_text("import nni\np = nni.get_next_parameter()\nnni.report_final_result(p['x'])\n")
        cfg = {"searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}},
               "trialCommand": f"{sys.executable} trial.py && sleep 0.3",
               "trialCodeDirectory": str(root), "trialConcurrency": 2, "maxTrialNumber": 1_000_000,
               "tuner": {"name": "Random"}, "trainingService": {"platform": "local"}}
        (root / "config.yml").write_text(json.dumps(cfg))
        subprocess.run([*NNIX, "create", "--config", str(root / "config.yml"), "--port", "0"],
                       capture_output=True, text=True, timeout=300, check=True)
        from nnix.home import STORE_NAME, Registry, read_lock_holder

        exp_id = Registry().all()[0].id  # each round's manager runs trials until it is stopped
        subprocess.run([*NNIX, "stop", exp_id], capture_output=True, timeout=120)

        exp_dir = Path(Registry().get(exp_id).dir)
        started = collections.Counter[int]()
        errors = collections.Counter[str]()
        leftover = 0
        t0 = time.monotonic()
        for r in range(args.rounds):
            procs = [subprocess.Popen([*NNIX, "resume", exp_id, "--port", "0"], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True) for _ in range(args.k)]
            outs = [(*p.communicate(timeout=300), p.returncode) for p in procs]
            ok = sum(rc == 0 for _, _, rc in outs)
            alive = managers_of(exp_id)
            holder = read_lock_holder(exp_dir)
            for _, err, rc in outs:
                if rc:
                    line = err.strip().splitlines()[0] if err.strip() else f"exit {rc}, nothing on stderr"
                    errors["clear (names the holder)" if holder and f"pid {holder.pid}" in line else line[:100]] += 1
            started[len(alive)] += 1
            time.sleep(args.run_for)  # the manager runs trials meanwhile
            print(f"round {r + 1}: exit 0 x{ok}, managers alive {len(alive)}, lock holder "
                  f"{holder.pid if holder else None}", flush=True)
            subprocess.run([*NNIX, "stop", exp_id], capture_output=True, timeout=120)
            deadline = time.monotonic() + 30
            while managers_of(exp_id) and time.monotonic() < deadline:
                time.sleep(0.1)
            if managers_of(exp_id):
                leftover += 1
                for pid in managers_of(exp_id):
                    os.kill(pid, 9)
        from nnix.core.events import TrialCreated
        from nnix.store.sqlite import SqliteStore

        with closing(SqliteStore(exp_dir / STORE_NAME)) as store:
            seqs = [e.event.sequence_id for e in store.read() if isinstance(e.event, TrialCreated)]
        print(f"\n{args.rounds} rounds of {args.k} concurrent `nnix resume` in {time.monotonic() - t0:.0f} s")
        print("managers alive per round: " + ", ".join(f"{n}: {c} rounds" for n, c in sorted(started.items())))
        print("the losers' errors: " + ", ".join(f"{m!r} x{c}" for m, c in errors.most_common()))
        print(f"rounds with a manager left after `nnix stop`: {leftover}")
        print(f"TrialCreated: {len(seqs)}, distinct sequence numbers: {len(set(seqs))}")


if __name__ == "__main__":
    main()
