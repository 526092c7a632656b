"""Nightly-style fuzzing of the REST API: the CI fuzz test (``tests/api/test_fuzz.py``) with many more
cases. A real running manager (local service, real trials); every routed NNI and native path; prints
the count of requests by status and the 5xx count, and checks the manager is alive and its state
still folds from the store.

Run: ``python bench/fuzz.py [--cases 20000]``. Exit status 1 on a 5xx or a broken manager (the failing
request, shrunk by hypothesis, is printed). Everything is written under a temporary directory.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=20_000)
    args = ap.parse_args()
    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("nnix_fuzz_test", root / "tests" / "api" / "test_fuzz.py")
    assert spec is not None and spec.loader is not None
    with tempfile.TemporaryDirectory(prefix="nnix-fuzz-") as tmp:
        os.environ["NNIX_HOME"] = str(Path(tmp) / "home")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        from nnix.testing.experiments import make_experiment

        code = Path(tmp) / "code"
        code.mkdir()
        (code / "trial.py").write_text(
            "import nni, time\np = nni.get_next_parameter()\nprint('started', flush=True)\n"
            "for i in range(3):\n    nni.report_intermediate_result(p['x'] * i)\ntime.sleep(600)\n")
        space = {"x": {"_type": "uniform", "_value": [0, 1]}, "opt": {"_type": "choice", "_value": ["a", "b"]}}
        _, exp_dir = make_experiment(code, searchSpace=space, trialCommand=f"{sys.executable} trial.py",
                                     trialConcurrency=1, maxTrialNumber=3)
        t0 = time.perf_counter()
        try:
            codes = module.fuzz_manager(exp_dir, args.cases)
        except AssertionError as e:
            print(f"FAILED: {e}")
            sys.exit(1)
        n = sum(codes.values())
        print(f"{n} requests in {time.perf_counter() - t0:.0f} s ({n / (time.perf_counter() - t0):.0f}/s); "
              f"5xx: {sum(v for c, v in codes.items() if c >= 500)}")


if __name__ == "__main__":
    main()
