"""Hostile trials against the real manager, local service and trial processes: whatever a trial writes into
its channel, however much it prints, whatever processes it leaves behind, the manager stays up, records the
good metrics exactly once, records what it skipped or killed (TrialWarning), and resumes."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from nnix.api.app import create_app
from nnix.core.events import TrialCreated, TrialStarted
from nnix.core.state import ExperimentState, TrialState
from nnix.core.status import ExperimentStatus, MetricType, TrialStatus
from nnix.home import read_state
from nnix.model.runs import Metrics
from nnix.testing import FakeMachine, FakeService, Outcome, wait_until, wait_until_async
from nnix.testing.experiments import detach_when, make_experiment, manager_for, run_experiment
from nnix.testing.fakeservice import params, sequence_id
from nnix.testing.spaces import UNIT as SPACE

PY = sys.executable
MODE_ENV = "NNIX_CONTAINMENT"


def _cgroups_here() -> bool:
    from nnix.agent.containment import _cgroup_parent

    return _cgroup_parent() is not None
HEAD = (
    "import nni, os, sys, time, json, signal, subprocess\n"
    "p = nni.get_next_parameter()\n"
    "def raw(data):\n"
    "    fd = os.open(os.path.join(os.environ['NNIX_TRIAL_CHANNEL'], 'metrics.jsonl'),"
    " os.O_WRONLY | os.O_APPEND | os.O_CREAT)\n"
    "    os.write(fd, data); os.close(fd)\n"
    "def wait_for(path):\n"
    "    while not os.path.exists(path): time.sleep(0.02)\n"
)
BAD_LINES = [
    b"{not json\n",
    b'{"type": "FINAL", "sequence": 1e999, "value": 1}\n',
    b'{"type": "PERIODICAL", "sequence": -1, "value": 1}\n',
    b'{"type": "PERIODICAL", "sequence": "3", "value": 1}\n',
    b'{"type": "BOGUS", "sequence": 0, "value": 1}\n',
    b'{"type": "PERIODICAL", "sequence": 5, "value": "high"}\n',
    b'{"type": "PERIODICAL", "sequence": 5, "value": {"acc": 1}}\n',
    b'{"type": "PERIODICAL", "sequence": 5, "value": true}\n',
    b"[1, 2, 3]\n",
    b"[" * 100_000 + b"\n",
    b'{"type": "PERIODICAL", "sequence": 5, "value": {"default": 1, "x": ' + b"[" * 50 + b"]" * 50 + b"}}\n",
    b'{"type": "PERIODICAL", "sequence": 5, "value": NaN}\n',  # nanPolicy: error (the default)
    b'{"type": "FINAL", "sequence": 0, "value": -Infinity}\n',
    b'{"type": "PERIODICAL", "sequence": 5, "value": 1' + b"0" * 400 + b"}\n",
    b'{"type": "PERIODICAL", "sequence": 5, "value": 1, "ts": 1e999}\n',
    b"\xff\xfe\xfd\n",
    b'"a string"\n',
    b"null\n",
]


def _trial(code_dir: Path, body: str) -> str:
    (code_dir / "trial.py").write_text(HEAD + body)
    return f"{PY} trial.py"


def _only(st: ExperimentState) -> TrialState:
    (t,) = st.trials.values()
    return t


def _periodical(t: TrialState) -> list[Any]:
    return [(m.sequence, m.value) for m in t.metrics if m.type is MetricType.PERIODICAL]


def _finals(t: TrialState) -> list[Any]:
    return [m.value for m in t.metrics if m.type is MetricType.FINAL]


def _live(pid: int) -> bool:
    """A process that runs (a zombie waiting for its reaper does not count)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return False
    return data[data.rfind(b")") + 2 :][:1] != b"Z"


@contextlib.contextmanager
def _reaping(pidfile: Path) -> Iterator[None]:
    """Kill what the test's trial left behind, whatever the outcome (so a failing run leaks nothing)."""
    try:
        yield
    finally:
        for pid in _pids(pidfile):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _pids(pidfile: Path) -> list[int]:
    try:
        return [int(x) for x in pidfile.read_text().split()]
    except (OSError, ValueError):
        return []


async def _detail(exp_dir: Path, trial_id: str) -> dict[str, Any]:
    manager = manager_for(exp_dir)
    app = create_app(manager, read_only=True)
    try:
        transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]  # ApiApp takes scope as a dict
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            r = await c.get(f"/api/nnix/v1/trials/{trial_id}")
            assert r.status_code == 200, r.text
            listed = await c.get("/api/nnix/v1/trials")
            assert listed.status_code == 200
            detail: dict[str, Any] = r.json()
            detail["listed"] = listed.json()["items"]
            return detail
    finally:
        manager.store.close()


# --- bad lines ---------------------------------------------------------------------------------------


def test_bad_lines_are_skipped_and_recorded_good_ones_exactly_once(tmp_path: Path) -> None:
    body = (
        "nni.report_intermediate_result(0.25)\n"
        f"for line in {BAD_LINES!r}:\n    raw(line)\n"
        "raw(b'\\n')\n"  # a blank line: nothing to warn about
        "nni.report_intermediate_result(0.5)\n"
        "nni.report_final_result(0.75)\n"
    )
    exp_id, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand=_trial(tmp_path, body), maxTrialNumber=1)
    st = run_experiment(d)
    assert st.status is ExperimentStatus.DONE
    t = _only(st)
    assert t.status is TrialStatus.SUCCEEDED, t.message
    assert _periodical(t) == [(0, 0.25), (1, 0.5)]
    assert _finals(t) == [0.75]
    assert t.warning_count == len(BAD_LINES)
    assert any("not recorded" in w and "line 2" in w for w in t.warnings), t.warnings

    # shown where users look: trial ls and the REST trial info
    env = {**os.environ, "COLUMNS": "400"}
    ls = subprocess.run([PY, "-m", "nnix.cli.main", "trial", "ls", exp_id], capture_output=True, text=True,
                        env=env, timeout=60)
    assert ls.returncode == 0, ls.stderr
    assert "warnings" in ls.stdout and f"{len(BAD_LINES)}: " in ls.stdout and "not recorded" in ls.stdout
    detail = asyncio.run(_detail(d, t.trial_id))
    assert detail["warnings"] == len(BAD_LINES)
    assert any("not recorded" in w for w in detail["warningMessages"])
    assert detail["listed"][0]["warnings"] == len(BAD_LINES)


def test_resume_after_a_bad_line_records_nothing_twice(tmp_path: Path) -> None:
    flag = tmp_path / "go"
    body = (
        "nni.report_intermediate_result(1)\n"
        "raw(b'{\"type\": \"PERIODICAL\", \"sequence\": 1e999, \"value\": 2}\\n')\n"
        f"wait_for({str(flag)!r})\n"
        "nni.report_intermediate_result(3)\n"
        "nni.report_final_result(4)\n"
    )
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand=_trial(tmp_path, body), maxTrialNumber=1)
    # the first manager sees the bad line, goes on, then goes away while the trial runs
    detach_when(d, lambda: any(t.warning_count for t in read_state(d).trials.values()), timeout=30)
    flag.touch()
    st = run_experiment(d, action="resume")  # re-reads the channel from its start
    assert st.status is ExperimentStatus.DONE
    t = _only(st)
    assert t.status is TrialStatus.SUCCEEDED, t.message
    assert _periodical(t) == [(0, 1), (1, 3)]
    assert _finals(t) == [4]
    assert t.warning_count == 1  # not reported again by the resumed manager


def test_nan_and_infinity_written_directly_follow_the_nan_policy(tmp_path: Path) -> None:
    body = (
        "raw(b'{\"type\": \"PERIODICAL\", \"sequence\": 0, \"value\": NaN}\\n')\n"
        "raw(b'{\"type\": \"PERIODICAL\", \"sequence\": 1, \"value\": {\"default\": Infinity, \"x\": -Infinity}}\\n')\n"
        "raw(b'{\"type\": \"FINAL\", \"sequence\": 0, \"value\": 0.5}\\n')\n"
    )
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand=_trial(tmp_path, body), maxTrialNumber=1,
                           nanPolicy="allow")
    st = run_experiment(d)
    t = _only(st)
    assert t.status is TrialStatus.SUCCEEDED and st.status is ExperimentStatus.DONE
    (s0, v0), (s1, v1) = _periodical(t)
    assert (s0, s1) == (0, 1) and math.isnan(v0) and v1["default"] == math.inf
    assert t.final_value == 0.5 and t.warning_count == 0
    detail = asyncio.run(_detail(d, t.trial_id))  # strict JSON out: non-finite numbers as null
    assert next(m["value"] for m in detail["metrics"]) is None


def test_protocol_metrics_are_checked_by_the_manager(tmp_path: Path) -> None:
    """A remote agent's metrics (any content, even from an older or broken agent) meet the same schema."""
    (tmp_path / "trial.py").write_text("")
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand=f"{PY} trial.py", maxTrialNumber=1)
    m = manager_for(d)
    try:
        m.record(TrialCreated("abcde", 0, 0, {"x": 0.1}), TrialStarted("abcde", "remote-env", str(tmp_path)))
        items: list[tuple[int, Any]] = [
            (0, {"type": "PERIODICAL", "sequence": 0, "value": 1.0}),
            (1, {"type": "PERIODICAL", "sequence": math.inf, "value": 1.0}),
            (2, [1, 2]),
            (3, {"type": "PERIODICAL", "sequence": 1, "value": math.nan}),
            (4, {"type": "FINAL", "sequence": 0, "value": {"default": 2.0}}),
        ]
        m._on_service_event(Metrics("abcde", items, [(5, "not valid JSON")], 1, 5))
        m._process_inbox()
        m._on_service_event(Metrics("abcde", items, [(5, "not valid JSON")], 1, 5))  # sent again: nothing new
        m._process_inbox()
        t = m.state.trials["abcde"]
        assert [(x.type, x.sequence, x.value) for x in t.metrics] == [
            (MetricType.PERIODICAL, 0, 1.0), (MetricType.FINAL, 0, {"default": 2.0})]
        assert t.warning_count == 4 and t.last_index == 5
    finally:
        m.store.close()


# --- long lines, final lines, huge output -------------------------------------------------------------


def test_huge_line_without_newline_is_skipped_with_a_warning(tmp_path: Path) -> None:
    flag = tmp_path / "go"
    body = (
        "nni.report_intermediate_result(1)\n"
        "raw(b'{\"type\": \"PERIODICAL\", \"sequence\": 9, \"value\": \"' + b'x' * (5 * 1024 * 1024))\n"
        f"wait_for({str(flag)!r})\n"
        "raw(b'\"}\\n')\n"
        "nni.report_intermediate_result(2)\n"
        "raw(b'x' * (3 * 1024 * 1024))\n"  # and a last one, never ended
    )
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand=_trial(tmp_path, body), maxTrialNumber=1)
    detach_when(d, lambda: any(t.warning_count for t in read_state(d).trials.values()), timeout=30)
    flag.touch()
    st = run_experiment(d, action="resume")
    t = _only(st)
    assert t.status is TrialStatus.SUCCEEDED and st.status is ExperimentStatus.DONE
    assert _periodical(t) == [(0, 1), (1, 2)]
    assert t.warning_count == 2
    assert all("longer than 1,000,000 bytes" in w for w in t.warnings), t.warnings


def test_final_line_without_newline_is_recorded_when_the_trial_exits(tmp_path: Path) -> None:
    body = "nni.report_intermediate_result(1)\nraw(b'{\"type\": \"FINAL\", \"sequence\": 0, \"value\": 0.125}')\n"
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand=_trial(tmp_path, body), maxTrialNumber=1)
    t = _only(run_experiment(d))
    assert t.status is TrialStatus.SUCCEEDED
    assert _finals(t) == [0.125] and t.final_value == 0.125
    assert t.warning_count == 0


def test_huge_output_and_many_bad_lines(tmp_path: Path) -> None:
    """Tens of MB of output and of garbage lines: bounded reads, every good metric once, every bad line counted."""
    body = (
        "chunk = b'y' * (1024 * 1024)\n"
        "for _ in range(30):\n    sys.stdout.buffer.write(chunk)\n"
        "junk = b'z' * 1023 + b'\\n'\n"
        "for i in range(400):\n"
        "    nni.report_intermediate_result(i)\n"
        "    raw(junk * 25)\n"
        "nni.report_final_result(1)\n"
    )
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand=_trial(tmp_path, body), maxTrialNumber=1)
    st = run_experiment(d, timeout=120)
    t = _only(st)
    assert t.status is TrialStatus.SUCCEEDED and st.status is ExperimentStatus.DONE
    assert [s for s, _ in _periodical(t)] == list(range(400))
    assert _finals(t) == [1]
    assert t.warning_count == 400 * 25


# --- concurrency ----------------------------------------------------------------------------------------


def test_customized_trials_wait_for_a_concurrency_slot(tmp_path: Path) -> None:
    """Manager logic only: trials are scripted (nnix.testing.FakeService), each working a few event-loop turns."""
    # the tuner's first trial runs until the 20 customized ones are queued behind it
    machine = FakeMachine(lambda spec: Outcome(final=params(spec)["x"], hang=sequence_id(spec) == 0, step=0.001))
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand="true", maxTrialNumber=21)
    m = manager_for(d, service=FakeService.factory(machine))
    most = 0

    def watch() -> None:
        nonlocal most
        most = max(most, m.state.count(TrialStatus.RUNNING))

    m.subscribe(watch)

    async def main() -> None:
        task = asyncio.ensure_future(m.run())
        await wait_until_async(lambda: m.state.status is ExperimentStatus.RUNNING, 60, "the experiment to run")
        await wait_until_async(lambda: machine.submitted, 60, "the first trial")
        for i in range(20):
            m.add_customized_trial({"x": i / 20})
        machine.release(machine.submitted[0].trial_id)
        await asyncio.wait_for(task, 90)

    try:
        asyncio.run(main())
    finally:
        m.store.close()
    st = read_state(d)
    assert st.status is ExperimentStatus.DONE and len(st.trials) == 21
    assert all(t.status is TrialStatus.SUCCEEDED for t in st.trials.values())
    assert most == 1  # never more than trialConcurrency running, whatever the source
    assert machine.peak == 1 and len(machine.submitted) == 21


# --- processes that outlive their trial ------------------------------------------------------------------

CHILDREN = (
    "ign = ('import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); '\n"
    "       'open(\"children.pid\", \"a\").write(str(os.getpid()) + chr(10)); time.sleep(300)')\n"
    "subprocess.Popen([sys.executable, '-c', ign])\n"  # same process group
    "subprocess.Popen([sys.executable, '-c', ign], start_new_session=True)\n"  # detached (setsid)
    "while len(open('children.pid').read().split()) < 2 if os.path.exists('children.pid') else True:\n"
    "    time.sleep(0.02)\n"
)


@pytest.fixture(params=["auto", "marker"])
def containment(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(MODE_ENV, request.param)
    return str(request.param)


def test_leftover_processes_are_killed_when_the_trial_succeeds(tmp_path: Path, containment: str) -> None:
    pidfile = tmp_path / "children.pid"
    body = CHILDREN + "nni.report_final_result(1)\n"
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand=_trial(tmp_path, body), maxTrialNumber=1)
    with _reaping(pidfile):
        st = run_experiment(d)
        t = _only(st)
        assert t.status is TrialStatus.SUCCEEDED and st.status is ExperimentStatus.DONE
        pids = _pids(pidfile)
        assert len(pids) == 2
        wait_until(lambda: not any(_live(p) for p in pids), 10, show=lambda: [p for p in pids if _live(p)])
        assert t.warnings == ["killed 2 leftover processes"]


def test_leftover_processes_are_killed_on_stop(tmp_path: Path, containment: str) -> None:
    pidfile = tmp_path / "children.pid"
    body = CHILDREN + "time.sleep(300)\n"
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand=_trial(tmp_path, body), maxTrialNumber=1)
    m = manager_for(d, kill_grace=1.0)

    async def main() -> None:
        task = asyncio.ensure_future(m.run())
        deadline = time.monotonic() + 30
        while len(_pids(pidfile)) < 2:
            assert time.monotonic() < deadline and not task.done()
            await asyncio.sleep(0.05)
        m.request_stop()
        await asyncio.wait_for(task, 60)

    with _reaping(pidfile):
        try:
            asyncio.run(main())
        finally:
            m.store.close()
        st = read_state(d)
        assert st.status is ExperimentStatus.STOPPED
        pids = _pids(pidfile)
        wait_until(lambda: not any(_live(p) for p in pids), 10, show=lambda: [p for p in pids if _live(p)])
        t = _only(st)
        assert t.status is TrialStatus.USER_CANCELED or t.status.is_terminal
        assert "killed 1 leftover process" in t.warnings  # the detached one; its sibling went with the group


def test_leftovers_of_a_trial_that_ended_while_no_manager_watched(tmp_path: Path, containment: str) -> None:
    flag, pidfile = tmp_path / "go", tmp_path / "children.pid"
    body = CHILDREN + f"wait_for({str(flag)!r})\nnni.report_final_result(1)\n"
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand=_trial(tmp_path, body), maxTrialNumber=1)
    with _reaping(pidfile):
        detach_when(d, lambda: len(_pids(pidfile)) == 2, timeout=30)
        out = Path(_only(read_state(d)).output_dir or "")
        flag.touch()  # the trial ends while no manager runs
        wait_until(lambda: (out / ".nnix" / "exitcode").exists(), 30)
        pids = _pids(pidfile)
        if containment == "auto" and _cgroups_here():
            # in a cgroup the trial's own wrapper kills them: no manager needed
            wait_until(lambda: not any(_live(p) for p in pids), 10, show=lambda: [p for p in pids if _live(p)])
        st = run_experiment(d, action="resume")  # re-attached: the watcher finds the trial over
        t = _only(st)
        assert t.status is TrialStatus.SUCCEEDED
        wait_until(lambda: not any(_live(p) for p in pids), 10, show=lambda: [p for p in pids if _live(p)])
        assert t.warnings == ["killed 2 leftover processes"]


# --- channel and log files that are not regular files (FIFOs, links) --------------------------------------------

SWAP = (
    "def swap(path, kind):\n"
    "    d = os.path.dirname(path)\n"
    "    if os.path.lexists(path):\n"
    "        os.unlink(path)\n"
    "    if kind == 'fifo':\n"
    "        os.mkfifo(path)\n"
    "    elif kind == 'link to /dev/zero':\n"
    "        os.symlink('/dev/zero', path)\n"
    "    else:\n"  # a FIFO in disguise: a link to one
    "        os.mkfifo(os.path.join(d, 'pipe'))\n"
    "        os.symlink(os.path.join(d, 'pipe'), path)\n"
)
KINDS = ["fifo", "link to /dev/zero", "link to a fifo"]
NOTICE = {"fifo": "metrics.jsonl is a FIFO, not a regular file",
          "link to /dev/zero": "metrics.jsonl is a symbolic link", "link to a fifo": "metrics.jsonl is a symbolic link"}


async def _rest(m: Any, path: str) -> Any:
    """``GET path`` of the manager's REST app, served by this loop (what blocks the loop blocks this too)."""
    app = create_app(m, read_only=True)
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]  # ApiApp takes scope as a dict
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
        r = await c.get(path)
        assert r.status_code == 200, (path, r.status_code, r.text)
        return r.json()


@pytest.mark.timeout(180)  # (before nnix.agent.safeopen a FIFO hung the manager's loop for good: this fails, not hangs)
@pytest.mark.parametrize("kind", KINDS)
def test_a_channel_made_a_fifo_or_a_link_is_its_trials_problem_only(tmp_path: Path, kind: str) -> None:
    """The first trial reports a result, then replaces its metrics.jsonl with a FIFO or a link, and runs on. The
    manager keeps answering, the trial gets a warning saying what its channel is, the other trial runs to its end
    with all its results, and stop ends the experiment (killing the first trial)."""
    flag = tmp_path / "swap"
    body = (
        SWAP
        + "if os.environ['NNI_TRIAL_SEQ_ID'] == '0':\n"
        "    nni.report_intermediate_result(1)\n"
        f"    wait_for({str(flag)!r})\n"
        f"    swap(os.path.join(os.environ['NNIX_TRIAL_CHANNEL'], 'metrics.jsonl'), {kind!r})\n"
        "    time.sleep(300)\n"
        "else:\n"
        f"    wait_for({str(flag)!r})\n"
        "    for i in range(3):\n        nni.report_intermediate_result(i)\n"
        "    nni.report_final_result(0.5)\n"
    )
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand=_trial(tmp_path, body), maxTrialNumber=2,
                           trialConcurrency=2)
    m = manager_for(d, exit_when_done=False, kill_grace=1.0)

    async def main() -> None:
        task = asyncio.ensure_future(m.run())
        try:
            def by_seq(seq: int) -> TrialState | None:
                return next((t for t in m.state.trials.values() if t.sequence_id == seq), None)

            await wait_until_async(lambda: (t := by_seq(0)) is not None and len(t.metrics) == 1, 60, "a first result")
            flag.touch()
            hostile = by_seq(0)
            assert hostile is not None
            await wait_until_async(lambda: hostile.warning_count >= 1, 60, "the warning",
                                   show=lambda: hostile.warnings)
            await wait_until_async(lambda: (t := by_seq(1)) is not None and t.status.is_terminal, 60, "the other trial")
            detail = await _rest(m, f"/api/nnix/v1/trials/{hostile.trial_id}")  # the manager answers
            assert detail["status"] == "RUNNING" and detail["warnings"] == 1
            assert any(w.startswith(NOTICE[kind]) and "not read" in w for w in detail["warningMessages"]), detail
            assert "status" in await _rest(m, "/api/v1/nni/check-status")
            m.request_stop()
            await asyncio.wait_for(task, 60)
        finally:
            if not task.done():
                task.cancel()

    try:
        asyncio.run(main())
    finally:
        m.store.close()
    st = read_state(d)
    assert st.status is ExperimentStatus.STOPPED
    first, other = sorted(st.trials.values(), key=lambda t: t.sequence_id)
    assert first.status is TrialStatus.USER_CANCELED or first.status.is_terminal
    assert [(x.sequence, x.value) for x in first.metrics] == [(0, 1)]
    assert first.warning_count == 1  # said once, however often the poller looked
    assert other.status is TrialStatus.SUCCEEDED and other.warning_count == 0
    assert _periodical(other) == [(0, 0), (1, 1), (2, 2)] and _finals(other) == [0.5]


@pytest.mark.timeout(180)
def test_resume_with_a_fifo_channel_does_not_hang(tmp_path: Path) -> None:
    """A manager goes away while the trial's channel is a FIFO; the resumed one re-attaches the trial (reading the
    channel from its start) without blocking, warns once, and records the trial's end."""
    flag, go = tmp_path / "swapped", tmp_path / "go"
    body = (
        SWAP
        + "nni.report_intermediate_result(1)\n"
        "swap(os.path.join(os.environ['NNIX_TRIAL_CHANNEL'], 'metrics.jsonl'), 'fifo')\n"
        f"open({str(flag)!r}, 'w').close()\n"
        f"wait_for({str(go)!r})\n"
    )
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand=_trial(tmp_path, body), maxTrialNumber=1)
    detach_when(d, lambda: flag.exists() and any(t.warning_count for t in read_state(d).trials.values()), timeout=60)
    go.touch()
    st = run_experiment(d, action="resume", timeout=60)
    t = _only(st)
    assert st.status is ExperimentStatus.DONE and t.status is TrialStatus.SUCCEEDED
    assert t.warning_count == 1 and t.warnings[0].startswith("metrics.jsonl is a FIFO")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", ["fifo", "link to a fifo"])
def test_a_stderr_made_a_fifo_is_not_read_for_the_reason_nor_served(tmp_path: Path, kind: str) -> None:
    """A failing trial whose trial.stderr is a FIFO (or a link to one) when it ends: the manager does not wait on it
    for the exit reason (the trial FAILED with its exit code, and a warning), and REST refuses it at once."""
    body = SWAP + f"swap(os.path.join(os.environ['NNI_OUTPUT_DIR'], 'trial.stderr'), {kind!r})\nsys.exit(7)\n"
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand=_trial(tmp_path, body), maxTrialNumber=1)
    st = run_experiment(d, timeout=60)
    t = _only(st)
    assert t.status is TrialStatus.FAILED and t.exit_code == 7 and "7" in t.message
    what = "a FIFO" if kind == "fifo" else "a symbolic link"
    assert t.warnings == [f"trial.stderr is {what}, not a regular file: not read for the trial's exit reason"]

    async def served() -> None:
        m = manager_for(d)
        app = create_app(m, read_only=True)
        try:
            transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
                for url in (f"/api/nnix/v1/trials/{t.trial_id}/logs/stderr",
                            f"/api/v1/nni/trial-file/{t.trial_id}/stderr"):
                    r = await asyncio.wait_for(c.get(url), 30)
                    assert r.status_code == 403 and "not served" in r.json()["error"], (url, r.text)
                    assert what in r.json()["error"]
                detail = (await c.get(f"/api/nnix/v1/trials/{t.trial_id}")).json()
                assert detail["logs"]["stderr"] is None and detail["logs"]["stdout"] == 0
        finally:
            m.store.close()

    asyncio.run(served())


# --- a metric flood -----------------------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_a_metric_flood_is_taken_in_bounded_batches_and_capped(tmp_path: Path) -> None:
    """One trial writes 30,000 results at once (much faster than they can be recorded). The manager takes them in a
    bounded batch per turn of its loop (one store transaction each, never the whole backlog), its loop running
    between batches (another coroutine makes progress); the trial reading waits for the manager (the inbox stays
    small); beyond the per-trial cap the results are thinned out (at most about twice the cap kept) and the trial
    says so; its final result is kept."""
    from nnix.core.manager import INGEST_BATCH

    n, cap = 30_000, 1_000
    body = (
        f"lines = ['{{\"type\":\"PERIODICAL\",\"sequence\":%d,\"value\":%d}}\\n' % (k, k) for k in range({n})]\n"
        "for lo in range(0, len(lines), 1000):\n    raw(''.join(lines[lo:lo + 1000]).encode())\n"
        "nni.report_final_result(0.25)\n"
    )
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand=_trial(tmp_path, body), maxTrialNumber=1)
    m = manager_for(d)
    m.metric_cap = cap
    appends: list[int] = []  # metric events per store transaction
    turns_between: list[int] = []  # turns of another coroutine between two of them
    turns = 0
    inbox_most = 0
    append = m.store.append

    def counting(events: Any) -> Any:
        nonlocal turns
        k = sum(1 for e in events if type(e).__name__ == "MetricReported")
        if k:
            appends.append(k)
            turns_between.append(turns)
            turns = 0
        return append(events)

    m.store.append = counting  # type: ignore[method-assign]

    def watch() -> None:
        nonlocal inbox_most
        inbox_most = max(inbox_most, sum(len(e.items) for e in m._inbox if isinstance(e, Metrics)))

    m.subscribe(watch)

    async def main() -> None:
        nonlocal turns
        task = asyncio.ensure_future(m.run())
        while not task.done():
            turns += 1
            await asyncio.sleep(0)
        await task

    try:
        asyncio.run(asyncio.wait_for(main(), 240))
    finally:
        m.store.close()
    st = read_state(d)
    t = _only(st)
    assert t.status is TrialStatus.SUCCEEDED and _finals(t) == [0.25]
    assert cap < t.n_inter <= 2 * cap + n // cap  # thinned out beyond the cap: about twice it at most
    kept = [s for s, _ in _periodical(t)]
    assert kept[:cap] == list(range(cap)) and kept == sorted(kept) and kept[-1] > n // 2  # spread over the series
    assert t.warning_count == 1 and t.warnings[0].startswith(f"{cap:,} intermediate results recorded (the cap")
    assert len(appends) > 10 and max(appends) <= INGEST_BATCH + 1_500  # bounded batches (+ one message at most)
    assert all(k > 0 for k in turns_between[1:])  # the loop ran between every two of them
    assert inbox_most <= 3 * INGEST_BATCH  # the trial's reader waited for the manager
