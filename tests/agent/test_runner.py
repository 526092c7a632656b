"""The trial runner against real processes: exit codes, metrics, whole-tree kill, re-attach."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

from nnix.agent.runner import (
    CHANNEL_DIRNAME,
    Exited,
    Metrics,
    RunnerEvent,
    Started,
    TrialRunner,
    TrialSpec,
    read_exit_code,
)
from nnix.testing import wait_until_async


def _spec(tmp_path: Path, tid: str, command: str) -> TrialSpec:
    out = tmp_path / tid
    out.mkdir(parents=True, exist_ok=True)
    record = {"parameter_id": 0, "parameter_source": "algorithm", "parameters": {"x": 3}, "parameter_index": 0}
    env = {"NNI_PLATFORM": "local", "NNI_TRIAL_JOB_ID": tid}
    return TrialSpec(tid, command, tmp_path, out, record, env)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_exit_code_metrics_and_files(tmp_path: Path) -> None:
    events: list[RunnerEvent] = []
    trial = (
        f"{sys.executable} -c \"import nni,sys; p=nni.get_next_parameter(); "
        "nni.report_intermediate_result(p['x']); nni.report_final_result({'default': p['x']*2, 'acc': 1}); "
        "print('hello'); print('bad', file=sys.stderr); sys.exit(3)\""
    )

    async def main() -> None:
        runner = TrialRunner(events.append, poll_interval=0.05)
        started = await runner.start(_spec(tmp_path, "T1", trial))
        assert isinstance(started, Started) and started.pid > 0 and started.pid_start
        await wait_until_async(lambda: any(isinstance(e, Exited) for e in events), 60, "the trial's exit")

    asyncio.run(main())
    metrics = [item for e in events if isinstance(e, Metrics) for item in e.items]
    assert [(i, m["type"], m["value"]) for i, m in metrics] == [
        (0, "PERIODICAL", 3), (1, "FINAL", {"default": 6, "acc": 1}),
    ]
    exited = events[-1]
    assert isinstance(exited, Exited) and exited.exit_code == 3 and exited.stderr_tail == "bad\n"
    assert (tmp_path / "T1" / "trial.stdout").read_text() == "hello\n"
    assert (tmp_path / "T1" / ".nnix" / "exitcode").read_text() == "3\n"


def test_kill_takes_the_whole_process_tree(tmp_path: Path) -> None:
    """A trial that forks a grandchild which ignores SIGTERM: both are gone after kill."""
    pidfile = tmp_path / "grandchild.pid"
    trial = (
        f"bash -c 'trap \"\" TERM; sleep 60 & echo $! > {pidfile}; wait' & "
        "sleep 60"
    )
    events: list[RunnerEvent] = []

    async def main() -> None:
        runner = TrialRunner(events.append, poll_interval=0.05, kill_grace=0.5)
        await runner.start(_spec(tmp_path, "T2", trial))
        for _ in range(200):
            if pidfile.exists() and pidfile.read_text().strip():
                break
            await asyncio.sleep(0.02)
        # SIGKILL after the grace period: kill returns without waiting for the group (which ignores TERM and would
        # live 60 s); the guard only catches a hang
        await asyncio.wait_for(runner.kill("T2"), 30)
        await wait_until_async(lambda: any(isinstance(e, Exited) for e in events), 60, "the killed trial's exit")

    asyncio.run(main())
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 3
    while _pid_alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _pid_alive(grandchild), "a grandchild survived the kill"
    exited = events[-1]
    assert isinstance(exited, Exited) and exited.exit_code is None and exited.signal is not None


def test_reattach_after_the_watcher_is_gone(tmp_path: Path) -> None:
    """A runner closed without killing (its manager died) leaves the trial running; a new runner
    re-attaches, emits only metrics it was not told about, and learns the exit code."""
    go = tmp_path / "go"
    trial = (
        f"{sys.executable} -c \"import nni,os,time; nni.get_next_parameter(); "
        "nni.report_intermediate_result(1); nni.report_intermediate_result(2)\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
        "nni.report_final_result(9)\"; exit 0"
    )
    first: list[RunnerEvent] = []
    second: list[RunnerEvent] = []

    async def main() -> None:
        runner = TrialRunner(first.append, poll_interval=0.05)
        started = await runner.start(_spec(tmp_path, "T3", trial))
        await wait_until_async(lambda: sum(len(e.items) for e in first if isinstance(e, Metrics)) >= 2, 60,
                               "two metrics")
        await runner.close(kill=False)
        assert _pid_alive(started.pid)
        go.touch()
        again = TrialRunner(second.append, poll_interval=0.05)
        # index 0 was recorded before the "crash"; index 1 was not
        await again.attach("T3", tmp_path / "T3", started.pid, started.pid_start, after_index=0)
        await wait_until_async(lambda: any(isinstance(e, Exited) for e in second), 60, "the re-attached trial's exit")

    asyncio.run(main())
    items = [item for e in second if isinstance(e, Metrics) for item in e.items]
    assert [(i, m["value"]) for i, m in items] == [(1, 2), (2, 9)]
    exited = second[-1]
    assert isinstance(exited, Exited) and exited.exit_code == 0


def test_attach_to_a_trial_that_ended_meanwhile(tmp_path: Path) -> None:
    events: list[RunnerEvent] = []
    code = "import nni; nni.get_next_parameter(); nni.report_final_result(1)"
    spec = _spec(tmp_path, "T4", f'{sys.executable} -c "{code}"')

    async def main() -> None:
        runner = TrialRunner(lambda e: None, poll_interval=0.05)
        started = await runner.start(spec)
        await runner.close(kill=False)
        await wait_until_async(lambda: not (_pid_alive(started.pid) and os.path.exists(f"/proc/{started.pid}")), 60,
                               "the trial's end")
        await wait_until_async(lambda: read_exit_code(spec.output_dir / CHANNEL_DIRNAME) is not None, 60,
                               "its exit status on disk")
        again = TrialRunner(events.append, poll_interval=0.05)
        await again.attach("T4", spec.output_dir, started.pid, started.pid_start, after_index=-1)
        await wait_until_async(lambda: any(isinstance(e, Exited) for e in events), 60, "the re-attached trial's exit")

    asyncio.run(main())
    assert [m["value"] for e in events if isinstance(e, Metrics) for _, m in e.items] == [1]
    assert isinstance(events[-1], Exited) and events[-1].exit_code == 0
