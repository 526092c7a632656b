"""Helpers to build and run real experiments in tests (local service, SQLite store)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nnix.config import parse_config
from nnix.core.manager import ExperimentManager
from nnix.core.state import ExperimentState
from nnix.home import read_state
from nnix.host.build import build_manager, create
from nnix.model.events import (
    DataImported,
    MetricReported,
    StatusChanged,
    TrialCreated,
    TrialEnded,
    TrialRequeued,
    TrialStarted,
    TrialWarning,
)
from nnix.model.status import ExperimentStatus, MetricType, TrialStatus
from nnix.store.base import Store


def make_experiment(code_dir: Path, **fields: Any) -> tuple[str, Path]:
    """Create an experiment from NNI v2 camelCase ``fields`` (defaults: Random tuner, local)."""
    data: dict[str, Any] = {
        "trialCodeDirectory": str(code_dir),
        "trialConcurrency": 1,
        "tuner": {"name": "Random", "classArgs": {"seed": 1}},
        "trainingService": {"platform": "local"},
    }
    data.update(fields)
    loaded = parse_config(json.loads(json.dumps(data)), code_dir)
    return create(loaded)


def run_experiment(
    exp_dir: Path, action: str = "create", timeout: float = 60.0, **service_options: Any
) -> ExperimentState:
    manager = build_manager(exp_dir, **service_options)

    async def main() -> ExperimentStatus:
        return await asyncio.wait_for(manager.run(action), timeout)

    try:
        asyncio.run(main())
    finally:
        manager.store.close()
    return read_state(exp_dir)


def manager_for(exp_dir: Path, **service_options: Any) -> ExperimentManager:
    return build_manager(exp_dir, **service_options)


def detach_when(exp_dir: Path, cond: Callable[[], bool], timeout: float = 120.0, **service_options: Any) -> None:
    """Run the experiment's manager (``create``) in a thread until ``cond()`` holds, then take it away: its task is
    cancelled, so it closes without killing its trials, which keep running where their service put them (what a
    manager killed mid-run leaves behind, for resume tests). Raises ``AssertionError`` when ``cond`` never holds."""
    manager = build_manager(exp_dir, **service_options)
    loop = asyncio.new_event_loop()
    task = loop.create_task(manager.run("create"))

    def run() -> None:
        try:
            loop.run_until_complete(task)
        except asyncio.CancelledError:
            pass
        finally:
            manager.store.close()
            loop.close()

    th = threading.Thread(target=run, daemon=True)
    th.start()
    try:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError(f"the condition did not hold within {timeout:.0f} s")
            time.sleep(0.1)
    finally:
        loop.call_soon_threadsafe(task.cancel)
        th.join(60)


def busy_log(store: Store, trials: range) -> None:
    """Append a busy experiment's events for ``trials`` (t0, t1, ...): started trials with dict and plain
    intermediate results, every third requeued (its first attempt's series dropped, a resent line landing at its
    place, a NaN, a warning), every fourth from t1 left running (its series held), the others SUCCEEDED with a
    final result; then an import and RUNNING. The fold's and the snapshot's tests compare states made of it."""
    for i in trials:
        tid = f"t{i}"
        store.append([TrialCreated(tid, i, i, {"x": i}),
                      TrialStarted(tid, "local-env", f"/tmp/{tid}", 100 + i, "s", (0,))])
        store.append([MetricReported(tid, MetricType.PERIODICAL, k,
                                     {"default": k * 0.5, "o": [k]} if k % 2 else k * 1.0, k, i) for k in range(4)])
        if i % 3 == 0:  # a requeue drops the first attempt's series; a resent line lands at its place
            store.append([TrialRequeued(tid, "host lost"), TrialStarted(tid, "local-env", f"/tmp/{tid}", 7, "s")])
            store.append([MetricReported(tid, MetricType.PERIODICAL, 0, 9.0, 0, i),
                          MetricReported(tid, MetricType.PERIODICAL, 2, float("nan"), 2, i),
                          TrialWarning(tid, "metrics", "line 3: bad", 1, 3),
                          MetricReported(tid, MetricType.PERIODICAL, 1, 8.0, 1, i)])
        if i % 4 != 1:  # some stay running: their series stays held and goes into the snapshot
            store.append([MetricReported(tid, MetricType.FINAL, 0, float(i), 9, i),
                          TrialEnded(tid, TrialStatus.SUCCEEDED, 0)])
    store.append([DataImported([{"parameter": {"x": 1}, "value": 0.5}]), StatusChanged(ExperimentStatus.RUNNING)])
