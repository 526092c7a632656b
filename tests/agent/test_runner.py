"""The trial runner against real processes: exit codes, metrics, whole-tree kill, re-attach."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from nnix.agent.runner import CHANNEL_DIRNAME, TrialRunner, read_exit_code
from nnix.model.runs import Exited, Metrics, RunnerEvent, Started, TrialSpec
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


# --- the wrapper started ahead (cgroup mode) ----------------------------------------------------------------
DUMP = (
    f"{sys.executable} -c \"import json, os; print(json.dumps({{'env': dict(os.environ), 'cwd': os.getcwd(), "
    "'stdin': os.readlink('/proc/self/fd/0')}))\""
)
TRICKY = "a'b\"c\n$HOME `x` \\ ;|&"
PER_TRIAL = {"NNI_TRIAL_JOB_ID", "NNI_SYS_DIR", "NNI_OUTPUT_DIR", "NNIX_TRIAL_CHANNEL", "NNIX_TRIAL_TOKEN",
             "NNIX_TRIAL_CGROUP", "_"}


def _cgroups_here() -> bool:
    from nnix.agent.containment import _cgroup_parent

    return _cgroup_parent() is not None


def _trial_cgroup(pid: int) -> str | None:
    """The ``nnix.trials/<token>`` cgroup ``pid`` is in, if any."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        head, _, rest = line.partition("::")
        parent, _, token = rest.rpartition("/")
        if head == "0" and parent.endswith("/nnix.trials") and len(token) == 32:
            return token
    return None


def _children_in_trial_cgroups() -> dict[int, str]:
    """This process's children already in a trial cgroup, by pid."""
    me, found = str(os.getpid()).encode(), {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        token = _trial_cgroup(int(name)) if len(fields) > 1 and fields[1] == me else None
        if token is not None:
            found[int(name)] = token
    return found


def _dump(tmp_path: Path, tid: str) -> dict[str, object]:
    import json

    data = json.loads((tmp_path / tid / "trial.stdout").read_text())
    assert isinstance(data, dict)
    return data


@pytest.mark.skipif(not _cgroups_here(), reason="this machine gives trials no cgroups")
def test_the_next_trial_runs_in_a_wrapper_started_ahead_in_its_cgroup(tmp_path: Path) -> None:
    """After a trial starts, the next trial's wrapper is started and moved into its own cgroup (a move costs the
    kernel's grace period: not on the way to the next trial); the next trial runs in it, with the same
    environment, working directory, stdin and files as a trial started the usual way. Closing the runner ends
    the unused one and removes every cgroup."""
    events: list[RunnerEvent] = []
    ahead: dict[int, str] = {}
    later: dict[int, str] = {}
    pids: list[int] = []

    def spec(tid: str) -> TrialSpec:
        s = _spec(tmp_path, tid, DUMP)
        return TrialSpec(s.trial_id, s.command, s.code_dir, s.output_dir, s.record, {**s.env, "TRICKY": TRICKY})

    async def main() -> None:
        runner = TrialRunner(events.append, poll_interval=0.05)
        pids.extend(_children_in_trial_cgroups())  # (wrappers of runners that other tests left open)
        try:
            first = await runner.start(spec("T1"))
            pids.append(first.pid)

            def spare() -> dict[int, str]:
                return {p: t for p, t in _children_in_trial_cgroups().items() if p not in pids}

            ahead.update(await wait_until_async(spare, 60, "the next trial's wrapper in its cgroup"))
            second = await runner.start(spec("T2"))
            pids.append(second.pid)
            await wait_until_async(lambda: sum(isinstance(e, Exited) for e in events) == 2, 60, "both exits")

            def spare_again() -> dict[int, str]:
                return {p: t for p, t in _children_in_trial_cgroups().items() if p not in pids}

            later.update(await wait_until_async(spare_again, 60, "a wrapper started ahead again"))
        finally:
            await runner.close(kill=True)

    asyncio.run(main())
    assert list(ahead) == [pids[-1]]  # the second trial ran in the wrapper started ahead
    assert [e.exit_code for e in events if isinstance(e, Exited)] == [0, 0]
    one, two = _dump(tmp_path, "T1"), _dump(tmp_path, "T2")
    assert one["cwd"] == two["cwd"] == os.path.realpath(tmp_path)
    assert one["stdin"] == two["stdin"] == "/dev/null"
    env1, env2 = one["env"], two["env"]
    assert isinstance(env1, dict) and isinstance(env2, dict)
    assert env2["TRICKY"] == TRICKY and env2["NNI_TRIAL_JOB_ID"] == "T2"
    assert {k: v for k, v in env1.items() if k not in PER_TRIAL} == {k: v for k, v in env2.items()
                                                                     if k not in PER_TRIAL}
    token = (tmp_path / "T2" / CHANNEL_DIRNAME / "token").read_text().strip()
    assert env2["NNIX_TRIAL_TOKEN"] == ahead[pids[-1]] == token
    # nothing left: no wrapper, no cgroup (the trials' own, removed by the watcher, and the unused one's)
    parent = Path(str(env2["NNIX_TRIAL_CGROUP"])).parent
    tokens = [str(env1["NNIX_TRIAL_TOKEN"]), str(env2["NNIX_TRIAL_TOKEN"]), *later.values()]
    assert len(later) == 1 and not any((parent / t).exists() for t in tokens)
    assert not any(_pid_alive(p) for p in later)


@pytest.mark.skipif(not _cgroups_here(), reason="this machine gives trials no cgroups")
def test_a_trial_the_wrapper_ahead_cannot_take_starts_the_usual_way(tmp_path: Path) -> None:
    """A wrapper started ahead that was killed meanwhile, or a trial whose environment sets a variable bash keeps
    for itself: the trial starts the usual way, runs, and the unused wrapper and its cgroup are gone."""
    import signal

    events: list[RunnerEvent] = []
    spares: list[dict[int, str]] = []
    started: list[int] = []

    async def main() -> None:
        runner = TrialRunner(events.append, poll_interval=0.05)
        others = set(_children_in_trial_cgroups())  # (wrappers of runners that other tests left open)

        def spare() -> dict[int, str]:
            return {p: t for p, t in _children_in_trial_cgroups().items() if p not in started and p not in others}

        try:
            started.append((await runner.start(_spec(tmp_path, "T1", "true"))).pid)
            spares.append(await wait_until_async(spare, 60, "the next trial's wrapper in its cgroup"))
            (killed,) = spares[0]
            os.kill(killed, signal.SIGKILL)
            # (reaped by the runner: it knows it ended. One killed during the hand-over itself ends its trial as a
            # trial killed by a signal does)
            await wait_until_async(lambda: not _pid_alive(killed), 60, "the killed wrapper reaped")
            started.append((await runner.start(_spec(tmp_path, "T2", "true"))).pid)
            spares.append(await wait_until_async(spare, 60, "a new wrapper in its cgroup"))
            own = _spec(tmp_path, "T3", "true")
            started.append((await runner.start(TrialSpec(own.trial_id, own.command, own.code_dir, own.output_dir,
                                                         own.record, {**own.env, "PPID": "1"}))).pid)
            await wait_until_async(lambda: sum(isinstance(e, Exited) for e in events) == 3, 60, "three exits")
            (unused,) = spares[1]
            await wait_until_async(lambda: not _pid_alive(unused), 60, "the unused wrapper's end")
        finally:
            await runner.close(kill=True)

    asyncio.run(main())
    assert [e.exit_code for e in events if isinstance(e, Exited)] == [0, 0, 0]
    assert not set(started) & {p for s in spares for p in s}  # none ran in a wrapper started ahead
    from nnix.agent.containment import _cgroup_parent

    parent = _cgroup_parent()
    assert parent is not None and not any((parent / t).exists() for s in spares for t in s.values())


# --- the trial's own files, made hostile ----------------------------------------------------------------------
SWAP_FILES = (
    "import os, sys\n"
    "ch, out = os.environ['NNIX_TRIAL_CHANNEL'], os.environ['NNI_OUTPUT_DIR']\n"
    "os.mkfifo(os.path.join(ch, 'metrics.jsonl'))\n"  # its channel: a FIFO nobody writes
    "os.mkfifo(os.path.join(out, 'pipe'))\n"
    "os.unlink(os.path.join(out, 'trial.stderr'))\n"
    "os.symlink(os.path.join(out, 'pipe'), os.path.join(out, 'trial.stderr'))\n"  # a FIFO in disguise
    "sys.exit(3)\n"
)


@pytest.mark.timeout(120)  # (before nnix.agent.safeopen the runner's loop blocked in open() for good)
def test_a_trial_that_makes_its_files_fifos_gets_warnings_and_never_blocks_the_runner(tmp_path: Path) -> None:
    events: list[RunnerEvent] = []
    (tmp_path / "swap.py").write_text(SWAP_FILES)

    async def main() -> None:
        runner = TrialRunner(events.append, poll_interval=0.02, stream_output=True)
        await runner.start(_spec(tmp_path, "T9", f"{sys.executable} swap.py"))
        await wait_until_async(lambda: any(isinstance(e, Exited) for e in events), 60, "the trial's exit")
        await runner.close(kill=True)

    asyncio.run(main())
    notices = [e.notice for e in events if isinstance(e, Metrics) and e.notice]
    assert any(n.startswith("metrics.jsonl is a FIFO, not a regular file") for n in notices), notices
    assert any(n.startswith("trial.stderr is a symbolic link") and "output is not sent" in n for n in notices)
    assert any(n.startswith("trial.stderr is a symbolic link") and "exit reason" in n for n in notices)
    assert len(notices) == len(set(notices)) == 3  # each said once
    exited = events[-1]
    assert isinstance(exited, Exited) and exited.exit_code == 3 and exited.stderr_tail == ""


@pytest.mark.timeout(120)
def test_attach_to_a_trial_whose_exit_code_file_is_a_fifo(tmp_path: Path) -> None:
    out = tmp_path / "T10"
    (out / CHANNEL_DIRNAME).mkdir(parents=True)
    os.mkfifo(out / CHANNEL_DIRNAME / "exitcode")
    os.mkfifo(out / CHANNEL_DIRNAME / "token")
    events: list[RunnerEvent] = []

    async def main() -> None:
        runner = TrialRunner(events.append, poll_interval=0.02)
        await runner.attach("T10", out, None, None, after_index=-1)  # it ended while nobody watched
        await wait_until_async(lambda: any(isinstance(e, Exited) for e in events), 60, "its exit")

    asyncio.run(main())
    assert isinstance(events[-1], Exited) and events[-1].exit_code is None  # not read: unknown
    assert read_exit_code(out / CHANNEL_DIRNAME) is None


def test_a_backlog_is_read_a_slice_at_a_time_paced_by_the_receiver(tmp_path: Path) -> None:
    """A trial that wrote much more than one poll reads (here 2 MB, ~40k lines, before anyone watched) is taken in
    a bounded slice at a time: the runner waits for the receiver (``pace``) between slices, and the loop runs (other
    coroutines make progress) while the backlog is read. Every line is delivered once, in order."""
    from nnix.agent.runner import DRAIN_SLICE

    out = tmp_path / "T11"
    (out / CHANNEL_DIRNAME).mkdir(parents=True)
    line = '{"type":"PERIODICAL","sequence":%d,"value":0.5}\n'
    n = 40_000
    (out / CHANNEL_DIRNAME / "metrics.jsonl").write_text("".join(line % k for k in range(n)))
    (out / CHANNEL_DIRNAME / "exitcode").write_text("0\n")
    events: list[RunnerEvent] = []
    paced = other = 0
    most_between = 0  # lines emitted between two paces, at most
    since = 0

    def emit(e: RunnerEvent) -> None:
        nonlocal since, most_between
        events.append(e)
        if isinstance(e, Metrics):
            since += len(e.items)
            most_between = max(most_between, since)

    async def pace() -> None:
        nonlocal paced, since
        paced += 1
        since = 0
        await asyncio.sleep(0)

    async def main() -> None:
        nonlocal other
        runner = TrialRunner(emit, poll_interval=0.02, pace=pace)
        done = asyncio.Event()

        async def elsewhere() -> None:
            nonlocal other
            while not done.is_set():
                other += 1
                await asyncio.sleep(0)

        task = asyncio.ensure_future(elsewhere())
        await runner.attach("T11", out, None, None, after_index=-1)
        await wait_until_async(lambda: any(isinstance(e, Exited) for e in events), 60, "its exit")
        done.set()
        await task

    asyncio.run(main())
    got = [m["sequence"] for e in events if isinstance(e, Metrics) for _, m in e.items]
    assert got == list(range(n))
    per_slice = DRAIN_SLICE // len(line % 0) + 1
    assert most_between <= per_slice  # never more than one slice ahead of the receiver
    assert paced >= n // per_slice - 1
    assert other >= paced // 2  # the loop ran between slices
    assert isinstance(events[-1], Exited) and events[-1].exit_code == 0
