"""Fixtures for the API tests: a finished experiment with known content (events appended to a real
store), and a real running manager (local service, real trial processes) in the test's loop."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from nnix.api.app import ApiApp, create_app
from nnix.core.events import (
    Event,
    ManagerStarted,
    MetricReported,
    StatusChanged,
    TrialCancelRequested,
    TrialCreated,
    TrialEnded,
    TrialStarted,
)
from nnix.core.manager import ExperimentManager
from nnix.core.status import CancelReason, ExperimentStatus, MetricType, TrialStatus
from nnix.home import STORE_NAME
from nnix.host.build import build_manager
from nnix.store.sqlite import SqliteStore
from nnix.testing import wait_until_async as until
from nnix.testing.experiments import make_experiment

SPACE = {"x": {"_type": "uniform", "_value": [0, 1]}, "opt": {"_type": "choice", "_value": ["a", "b"]}}
BASE = "http://127.0.0.1"


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)  # type: ignore[arg-type]


def client(app: ApiApp) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE)  # type: ignore[arg-type]


def _metric(tid: str, mtype: MetricType, seq: int, value: Any, index: int, pid: int | None) -> MetricReported:
    return MetricReported(tid, mtype, seq, value, index, pid)


def synthetic_events(out: Path) -> list[Event]:
    """Five trials: SUCCEEDED (dict final), FAILED, SUCCEEDED (NaN intermediate), WAITING, USER_CANCELED."""
    P, F = MetricType.PERIODICAL, MetricType.FINAL
    for tid, files in {"aaaaa": {"trial.stdout": "hello from a\n", "trial.stderr": "", "trial.log": "log a\n"},
                       "bbbbb": {"trial.stdout": "", "trial.stderr": "Traceback\nboom\n"},
                       "ccccc": {"trial.stdout": "0123456789\n"}, "eeeee": {}}.items():
        (out / tid).mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (out / tid / name).write_text(text)
    ev: list[Event] = [ManagerStarted(0, "create", None), StatusChanged(ExperimentStatus.RUNNING)]
    ev += [TrialCreated("aaaaa", 0, 0, {"x": 0.1, "opt": "a"}), TrialStarted("aaaaa", "local-env", str(out / "aaaaa"))]
    ev += [_metric("aaaaa", P, i, v, i, 0) for i, v in enumerate([0.1, 0.2, 0.3])]
    ev += [_metric("aaaaa", F, 0, {"default": 0.5, "acc": 0.9}, 3, 0), TrialEnded("aaaaa", TrialStatus.SUCCEEDED, 0)]
    ev += [TrialCreated("bbbbb", 1, 1, {"x": 0.2, "opt": "b"}), TrialStarted("bbbbb", "local-env", str(out / "bbbbb"))]
    ev += [_metric("bbbbb", P, 0, 0.05, 0, 1), TrialEnded("bbbbb", TrialStatus.FAILED, 2, "exit code 2: boom")]
    ev += [TrialCreated("ccccc", 2, 2, {"x": 0.9, "opt": "a"}), TrialStarted("ccccc", "local-env", str(out / "ccccc"))]
    ev += [_metric("ccccc", P, 0, float("nan"), 0, 2), _metric("ccccc", P, 1, 0.7, 1, 2),
           _metric("ccccc", F, 0, 0.8, 2, 2), TrialEnded("ccccc", TrialStatus.SUCCEEDED, 0)]
    ev += [TrialCreated("ddddd", 3, 3, {"x": 0.4, "opt": "b"})]
    ev += [TrialCreated("eeeee", 4, 4, {"x": 0.6, "opt": "b"}), TrialStarted("eeeee", "local-env", str(out / "eeeee")),
           TrialCancelRequested("eeeee", CancelReason.USER),
           TrialEnded("eeeee", TrialStatus.USER_CANCELED, None, "canceled (user)")]
    ev += [StatusChanged(ExperimentStatus.STOPPED)]
    return ev


@pytest.fixture
def finished(tmp_path: Path) -> Path:
    """A stopped experiment with five known trials; returns its directory."""
    (tmp_path / "trial.py").write_text("import nni\n")
    _, exp_dir = make_experiment(tmp_path, searchSpace=SPACE, trialCommand=f"{sys.executable} trial.py",
                                 maxTrialNumber=20, experimentName="known")
    store = SqliteStore(exp_dir / STORE_NAME)
    store.append(synthetic_events(exp_dir / "environments" / "local-env" / "trials"))
    store.close()
    return exp_dir


@pytest.fixture
def sleeper(tmp_path: Path) -> Callable[..., Path]:
    """Make an experiment whose trials report a few intermediate results, then sleep (until killed)."""
    def make(**fields: Any) -> Path:
        code = tmp_path / "code"
        code.mkdir(exist_ok=True)
        (code / "trial.py").write_text(
            "import nni, time\np = nni.get_next_parameter()\nprint('started', flush=True)\n"
            "for i in range(3):\n    nni.report_intermediate_result(p['x'] * i)\n"
            "time.sleep(float(p.get('sleep', 60)))\nnni.report_final_result(p['x'])\n")
        defaults: dict[str, Any] = {"searchSpace": SPACE, "trialCommand": f"{sys.executable} trial.py",
                                    "trialConcurrency": 1, "maxTrialNumber": 5}
        _, exp_dir = make_experiment(code, **{**defaults, **fields})
        return exp_dir

    return make


@contextlib.asynccontextmanager
async def running(exp_dir: Path) -> AsyncIterator[ExperimentManager]:
    """A real manager running in this loop (exit_when_done=False, as the daemon); stopped at the end."""
    manager = build_manager(exp_dir, exit_when_done=False, kill_grace=1.0)
    task = asyncio.ensure_future(manager.run())
    try:
        yield manager
    finally:
        manager.request_stop()
        await asyncio.wait_for(task, 30)
        manager.store.close()


def viewer(exp_dir: Path, read_only: bool = True, token: str | None = None) -> tuple[ExperimentManager, ApiApp]:
    """A manager that is not running (as ``nnix view``) and its app."""
    manager = build_manager(exp_dir)
    return manager, create_app(manager, read_only=read_only, token=token)


class Helpers:
    """The helpers above, as a fixture (test modules cannot import conftest under importlib mode)."""

    run = staticmethod(run)
    client = staticmethod(client)
    running = staticmethod(running)
    until = staticmethod(until)
    viewer = staticmethod(viewer)
    create_app = staticmethod(create_app)
    base = BASE


@pytest.fixture
def h() -> type[Helpers]:
    return Helpers
