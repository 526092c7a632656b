"""The web UI on a big experiment, this tree against an older one in the same run (alternating).

For each side: ``nnix view`` of a stored experiment (its own copy: a view appends to the store), the first overview
(``/experiment``: the totals), the first sorted page (``/trials?sort=-metric``), then at once the first page sorted
by id, status, duration and a parameter, the first status filter and the first search (each the first of its kind,
asked right after the view: FIRSTS), then headless Chromium (bench/scale_ui.py's measure: first paint of the table
and of the parallel coordinates, re-sort by metric, filter ``lr>0.001; optimizer=adam``). Each figure with its ratio
to the issue's goal (≤ 1 meets it): first paint ≤ 1 s, sort and filter ≤ 150 ms, REST ≤ 200 ms.

Run: ``python bench/ui_page.py --store COPY --old-store OTHER_COPY --old-src /work/wt/base/src`` where each copy is
a folder like bench/scale_view.py's (``ready.json`` and ``home/``). Not a test: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

GOALS = {"view_s": 1.0, "overview_ms": 200.0, "sorted_ms": 200.0, "first_id_ms": 150.0, "first_status_ms": 150.0,
         "first_duration_ms": 150.0, "first_param_ms": 150.0, "first_filter_ms": 150.0, "first_search_ms": 150.0,
         "table": 1000.0, "parcoords": 1000.0, "sort": 150.0, "search": 150.0}
# right after the overview: the first page of each sort, the first status filter and the first search (each the first
# of its kind; a page of 100); {p} is the experiment's first parameter name
FIRSTS = (("first_id_ms", {"sort": "-id"}), ("first_status_ms", {"sort": "status"}),
          ("first_duration_ms", {"sort": "-duration"}), ("first_param_ms", {"sort": "param:{p}"}),
          ("first_filter_ms", {"status": "FAILED,SUCCEEDED", "sort": "-metric"}),
          ("first_search_ms", {"q": "{p}>0.001; metric<1"}))


def side(root: Path, src: str, browser_runs: int) -> dict[str, list[float]]:
    import httpx

    sys.path.insert(0, str(Path(__file__).parent))
    from scale_ui import browser

    meta = json.loads((root / "ready.json").read_text())
    env = {**os.environ, "NNIX_HOME": str(root / "home"), "PYTHONPATH": src}
    nnix = [sys.executable, "-m", "nnix.cli.main"]
    t0 = time.perf_counter()
    r = subprocess.run([*nnix, "view", meta["id"], "--port", "0"], env=env, capture_output=True, text=True, timeout=900)
    view_s = time.perf_counter() - t0
    if r.returncode:
        sys.exit(f"nnix view failed: {r.stderr[-2000:]}")
    url = next(line.split()[-1] for line in r.stdout.splitlines() if "Web UI" in line)
    out: dict[str, list[float]] = {"view_s": [view_s]}
    try:
        with httpx.Client(base_url=url.rstrip("/"), timeout=900) as c:
            t0 = time.perf_counter()
            over = c.get("/api/nnix/v1/experiment")
            over.raise_for_status()
            out["overview_ms"] = [(time.perf_counter() - t0) * 1000]
            t0 = time.perf_counter()
            c.get("/api/nnix/v1/trials?limit=100&sort=-metric").raise_for_status()
            out["sorted_ms"] = [(time.perf_counter() - t0) * 1000]
            p = (over.json().get("paramKeys") or ["x"])[0]
            for name, query in FIRSTS:
                params = {k: v.format(p=p) for k, v in query.items()}
                t0 = time.perf_counter()
                c.get("/api/nnix/v1/trials", params={"limit": "100", **params}).raise_for_status()
                out[name] = [(time.perf_counter() - t0) * 1000]
        res = browser(url, browser_runs)
        if isinstance(res, str):
            print("  " + res)
        else:
            out.update(res)
    finally:
        subprocess.run([*nnix, "stop", meta["id"]], env=env, capture_output=True, timeout=120)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--store", required=True, help="a copy of a stored experiment, for this tree")
    ap.add_argument("--old-store", required=True, help="another copy, for the older tree")
    ap.add_argument("--old-src", required=True, help="the older tree's src/ (e.g. /work/wt/base/src)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--browser-runs", type=int, default=2)
    args = ap.parse_args()
    new_src = str(Path(__file__).resolve().parents[1] / "src")
    sides = {"old": (Path(args.old_store), args.old_src), "new": (Path(args.store), new_src)}
    got: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
    for k in range(args.rounds):
        for name in (("old", "new") if k % 2 == 0 else ("new", "old")):
            root, src = sides[name]
            print(f"round {k + 1}: {name} ({src})", flush=True)
            for key, values in side(root, src, args.browser_runs).items():
                got[name].setdefault(key, []).extend(values)
    print("\nmedians (machine under load; ratio to the goal, ≤ 1 meets it)")
    print(f"  {'figure':<14} {'old':>10} {'new':>10} {'goal':>8} {'new/goal':>9}")
    for key, goal in GOALS.items():
        old, new = got["old"].get(key), got["new"].get(key)
        if not new:
            continue
        o = statistics.median(old) if old else float("nan")
        n = statistics.median(new)
        print(f"  {key:<14} {o:10.2f} {n:10.2f} {goal:8.0f} {n / goal:9.2f}   (new runs: "
              f"{', '.join(f'{v:.0f}' if v > 10 else f'{v:.2f}' for v in new)}; old: "
              f"{', '.join(f'{v:.0f}' if v > 10 else f'{v:.2f}' for v in old or [])})")
    print(json.dumps(got))


if __name__ == "__main__":
    main()
