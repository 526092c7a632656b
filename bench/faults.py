"""The kill -9 fault suite with more rounds than CI runs: a fast-reporting experiment (trials that each report
many intermediate results as fast as they can), its manager killed -9 at points drawn from a seeded generator
and resumed each time, then the store compared with every trial's channel file.

Run: python bench/faults.py [--rounds 30] [--seed 1] [--metrics 1000] [--trials N]
Prints: rounds, kill points, channel lines, stored metrics, lost, duplicated, phantom, trials re-run, and the
trials whose metrics are not exactly 0..n-1 plus one final. Exit code 1 if anything was lost or duplicated.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--metrics", type=int, default=1000, help="intermediate results per trial")
    ap.add_argument("--trials", type=int, default=0, help="default: 2 per round")
    ap.add_argument("--concurrency", type=int, default=4)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        os.environ["NNIX_HOME"] = str(work / "home")
        (work / "home").mkdir()
        from nnix.testing.faults import audit, created_id, exp_dir_of, fast_reporting_config, kill_rounds, nnix

        trials = args.trials or 2 * args.rounds
        cfg = fast_reporting_config(work, trials=trials, concurrency=args.concurrency, metrics=args.metrics)
        t0 = time.perf_counter()
        r = nnix("create", "--config", str(cfg), "--port", "0")
        if r.returncode != 0:
            print(r.stderr, file=sys.stderr)
            return 2
        exp_id = created_id(r.stdout)
        delays = kill_rounds(exp_id, args.rounds, args.seed)
        kill_phase = time.perf_counter() - t0
        final = nnix("resume", exp_id, "--foreground", "--port", "0", timeout=1800)
        if final.returncode != 0:
            print(final.stderr, file=sys.stderr)
            return 2
        a = audit(exp_dir_of(exp_id), args.metrics)
        print(f"kill -9 rounds:        {len(delays)} (seed {args.seed}; kill points "
              f"{min(delays):.2f}-{max(delays):.2f} s after each start; {kill_phase:.1f} s of kills, "
              f"{time.perf_counter() - t0:.1f} s in all)")
        print(f"trials:                {a.trials} ({a.succeeded} succeeded, "
              f"{args.metrics} intermediate + 1 final each)")
        print(f"channel lines:         {a.lines}")
        print(f"stored metrics:        {a.recorded}")
        print(f"lost / duplicated:     {a.lost} / {a.duplicated}   (phantom: {a.phantom})")
        print(f"trials re-run:         {a.reruns} (started again: a kill fell between start and its record)")
        print(f"irregular trials:      {len(a.irregular)} {a.irregular[:5]}")
        return 0 if a.ok and a.succeeded == a.trials else 1


if __name__ == "__main__":
    sys.exit(main())
