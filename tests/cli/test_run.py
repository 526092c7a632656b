"""The foreground run (`nnix create/resume --foreground`), through real processes: the first line, a
progress line that fits an 80-column terminal (a real pty), failure reasons, the summary, an
experiment in ERROR (no GPU) that says why and ends, and the exit codes (all failed, ERROR, Ctrl-C)."""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

import pytest

from nnix.core.events import (
    ExperimentCreated,
    ManagerStarted,
    MetricReported,
    StatusChanged,
    TrialCreated,
    TrialEnded,
    TrialStarted,
)
from nnix.core.state import ExperimentState
from nnix.core.status import ExperimentStatus, MetricType, TrialStatus
from nnix.home import Registry, pid_alive, read_state
from nnix.store.base import Stored
from nnix.testing import wait_until

NNIX = [sys.executable, "-m", "nnix.cli.main"]
EXIT_ERROR, EXIT_NO_SUCCESS, EXIT_INTERRUPTED = 3, 4, 130  # documented in the README and `nnix create --help`
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# a whole progress line: status, trials, best, elapsed time at its end
PROGRESS = re.compile(r"^[A-Z_]+ +(trials )?\d+(/\d+)?: .* \| best .* \| (elapsed )?(\d+h)?\d+m(\d\ds)?$")


def nnix(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NNIX, *args], capture_output=True, text=True, timeout=timeout, env=os.environ.copy())


def _config(tmp_path: Path, trial_body: str, **extra: Any) -> Path:
    (tmp_path / "trial.py").write_text("import nni, time, sys\np = nni.get_next_parameter()\n" + trial_body)
    cfg = {
        "searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}},
        "trialCommand": f"{sys.executable} trial.py",
        "trialCodeDirectory": str(tmp_path),
        "trialConcurrency": 1,
        "tuner": {"name": "Random"},
        "trainingService": {"platform": "local"},
        **extra,
    }
    path = tmp_path / "config.yml"
    path.write_text(json.dumps(cfg))
    return path


def _run_in_pty(args: list[str], columns: int, timeout: float = 120) -> tuple[int, str]:
    """Run ``args`` with a pty of ``columns`` columns as its terminal; its exit code and output."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
        else:
            proc.kill()
            raise AssertionError(f"{args} did not end within {timeout} s: {out.decode(errors='replace')[-2000:]}")
        return proc.wait(timeout=30), out.decode(errors="replace")
    finally:
        os.close(master)


def _screen_lines(raw: str) -> list[str]:
    """What a terminal shows, line by line (a carriage return or a line erase starts the line again)."""
    lines = []
    for line in ANSI.sub(lambda m: "\r" if m.group().endswith("K") else "", raw).split("\n"):
        lines += [part for part in line.split("\r") if part.strip()]
    return lines


def _first_line(proc: subprocess.Popen[str], timeout: float = 60) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.1)
        if ready:
            return proc.stdout.readline()
    raise AssertionError("no first line in time")


def _has_gpu() -> bool:
    from nnix.services.gpu import NvmlInventory

    return bool(NvmlInventory().snapshot())


def _state_with(counts: dict[TrialStatus | None, int], status: ExperimentStatus) -> ExperimentState:
    """An experiment state with ``counts`` trials of each status (None: waiting), the best 1234.56789."""
    st = ExperimentState()
    events: list[Any] = [ExperimentCreated("e1", {"max_trial_number": 1000, "tuner": {}}, 1, "minimize"),
                         ManagerStarted(1, "create", 8080, "127.0.0.1"), StatusChanged(status)]
    i = 0
    for trial_status, n in counts.items():
        for _ in range(n):
            tid = f"t{i:04d}"
            events.append(TrialCreated(tid, i, i, {"x": i}))
            i += 1
            if trial_status is None:
                continue
            events.append(TrialStarted(tid, "env", "/tmp"))
            if trial_status is TrialStatus.SUCCEEDED:
                events.append(MetricReported(tid, MetricType.FINAL, 0, 1234.56789 + i - 1, 0))
            if trial_status is not TrialStatus.RUNNING:
                events.append(TrialEnded(tid, trial_status, 1))
    for seq, e in enumerate(events, 1):
        st.apply(Stored(seq, 1000.0 + seq, e))
    return st


def test_progress_line_fits_the_width_it_is_given() -> None:
    from nnix.host.progress import progress_line

    now = 1000.0 + 3 * 3600
    counts = {TrialStatus.SUCCEEDED: 200, TrialStatus.RUNNING: 8, None: 2, TrialStatus.FAILED: 150,
              TrialStatus.EARLY_STOPPED: 140}
    st = _state_with(counts, ExperimentStatus.RUNNING)
    full = progress_line(st, now, None)
    assert full.startswith("RUNNING       trials 500/1000: 200 succeeded, 8 running, 2 waiting, 150 failed, "
                           "140 stopped")
    assert full.endswith("| best 1234.57 (trial t0000) | elapsed 2h59m58s")
    for width in (120, 100, 80):
        line = progress_line(st, now, width)
        assert len(line) < width, (width, line)
        assert PROGRESS.match(line), line  # nothing cut: the counts, best and elapsed time are there
        assert "200 " in line and "150 f" in line and "140 stop" in line and "best 1234.57" in line
        assert line.endswith("| 2h59m")  # hours and minutes when the width is short
    # the longest status at 80 columns: the elapsed time goes before anything is cut
    line = progress_line(_state_with(counts, ExperimentStatus.TUNER_NO_MORE_TRIAL), now, 80)
    assert len(line) < 80 and "…" not in line and line.endswith("140 stop | best 1234.57"), line
    narrow = progress_line(st, now, 40)
    assert len(narrow) < 40 and narrow.endswith("…")  # the last resort: cut, never wrapped


def test_foreground_output_in_an_80_column_terminal(tmp_path: Path) -> None:
    cfg = _config(
        tmp_path,
        "if p['x'] > 0.5:\n    raise ValueError('x is too large for this model')\nnni.report_final_result(p['x'])\n",
        maxTrialNumber=6, trialConcurrency=2, tuner={"name": "Random", "classArgs": {"seed": 7}},
    )
    code, raw = _run_in_pty([*NNIX, "create", "--config", str(cfg), "--foreground", "--port", "0"], columns=80)
    lines = _screen_lines(raw)
    first = lines[0]
    m = re.match(r"^Experiment (\w+)  web UI: http://127\.0\.0\.1:(\d+)/$", first)
    assert m, raw[:500]
    exp_id = m.group(1)
    assert all(len(line) <= 80 for line in lines[:-8]), repr(raw)
    progress = [line for line in lines if "| best" in line]
    assert progress and all(PROGRESS.match(line) and len(line) < 80 for line in progress), progress
    st = read_state(Path(Registry().get(exp_id).dir))
    failed = st.count(TrialStatus.FAILED)
    reason_lines = [line for line in lines if line.startswith("trial ") and "FAILED:" in line]
    if failed:  # each distinct reason once, as it first appears, whatever the count
        assert len(reason_lines) == 1 and "ValueError: x is too large for this model" in reason_lines[0], lines
        assert any(re.search(rf"failures: {failed}x .*ValueError: x is too large", line) for line in lines), lines
    best = st.best_trial()
    assert best is not None and code == 0
    assert any(line.startswith("best:") and best.trial_id in line and json.dumps(best.params) in line
               for line in lines), lines
    assert any(line.startswith("files:") and str(Registry().get(exp_id).dir) in line for line in lines)
    assert any(f"nnix view {exp_id}" in line for line in lines)


def test_every_trial_failing_exits_4_with_the_reason(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "raise RuntimeError('Error downloading train-images-idx3-ubyte.gz')\n", maxTrialNumber=3)
    r = nnix("create", "--config", str(cfg), "--foreground", "--port", "0")
    assert r.returncode == EXIT_NO_SUCCESS, r.stdout + r.stderr
    assert r.stdout.splitlines()[0].startswith("Experiment ")
    assert "RuntimeError: Error downloading train-images-idx3-ubyte.gz" in r.stdout
    assert re.search(r"failures: 3x .*RuntimeError: Error downloading", r.stdout), r.stdout
    assert "but no trial succeeded (exit code 4)" in r.stdout


@pytest.mark.skipif(_has_gpu(), reason="this host has a GPU: trialGpuNumber: 1 can be satisfied")
def test_missing_gpu_in_foreground_says_why_at_once_and_exits_3(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "nni.report_final_result(1)\n", trialConcurrency=3, maxTrialNumber=100, trialGpuNumber=1,
                  trainingService={"platform": "local", "useActiveGpu": False})
    r = nnix("create", "--config", str(cfg), "--foreground", "--port", "0", timeout=60)
    assert r.returncode == EXIT_ERROR, r.stdout + r.stderr
    exp_id = r.stdout.split()[1]
    st = read_state(Path(Registry().get(exp_id).dir))
    assert st.status.value == "ERROR" and "No GPU found, but trialGpuNumber is 1" in st.message
    summary = r.stdout.index("--- experiment")
    assert r.stdout.index("No GPU found, but trialGpuNumber is 1") < summary  # said when it happened
    assert "set trialGpuNumber to 0" in r.stdout
    assert f"experiment {exp_id}: ERROR (exit code 3): No GPU found" in r.stdout
    # none ever started: all stay WAITING (as NNI's; a resume starts them), none FAILED or counted as a failure
    assert st.count(TrialStatus.WAITING) == 3 and st.count(TrialStatus.FAILED) == 0
    assert "failures:" not in r.stdout and "FAILED" not in r.stdout, r.stdout
    assert "nnix log trial" not in r.stdout, r.stdout  # no trial has output to show
    assert not pid_alive(st.manager_pid)


@pytest.mark.skipif(_has_gpu(), reason="this host has a GPU: trialGpuNumber: 1 can be satisfied")
def test_missing_gpu_in_background_is_listed_and_stoppable(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "nni.report_final_result(1)\n", trialConcurrency=3, maxTrialNumber=100, trialGpuNumber=1,
                  trainingService={"platform": "local", "useActiveGpu": False})
    r = nnix("create", "--config", str(cfg), "--port", "0")
    exp_id = r.stdout.split()[1]
    exp_dir = Path(Registry().get(exp_id).dir)
    try:
        wait_until(lambda: read_state(exp_dir, summary=True).status.value == "ERROR", 60.0)
        st = read_state(exp_dir, summary=True)
        listed = nnix("experiment", "list")
        row = next(line for line in listed.stdout.splitlines() if line.startswith(exp_id))
        assert "ERROR" in row and f"http://127.0.0.1:{st.manager_port}/" in row and "No GPU found" in row
        status = nnix("experiment", "status", exp_id)
        assert json.loads(status.stdout)["status"] == "ERROR"  # NNI's JSON alone on stdout; the rest on stderr
        assert "reason: No GPU found, but trialGpuNumber is 1" in status.stderr
        assert f"manager: pid {st.manager_pid}, port {st.manager_port}" in status.stderr
        # its trials never start (its manager serves, but starts no more trials): --follow does not wait for them
        waiting = next(t.trial_id for t in read_state(exp_dir).trials.values())
        log = nnix("log", "trial", exp_id, "-T", waiting, "--follow", timeout=60)
        assert log.returncode == 1 and f"trial {waiting} never started (WAITING)" in log.stderr, log.stderr
        assert "No GPU found" in log.stderr and "try again later" not in log.stderr
    finally:
        stopped = nnix("stop", "--all")
    assert f"experiment {exp_id} (ERROR): its manager on port {st.manager_port} stopped" in stopped.stdout
    assert not pid_alive(st.manager_pid)
    assert read_state(exp_dir, summary=True).status.value == "ERROR"  # stopping keeps the reason
    assert "no experiment manager is running" in nnix("stop", "--all").stdout


def test_ctrl_c_says_how_to_resume_and_exits_130(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "time.sleep(60)\n", maxTrialNumber=3)
    proc = subprocess.Popen([*NNIX, "create", "--config", str(cfg), "--foreground", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        first = _first_line(proc)
        m = re.match(r"^Experiment (\w+)  web UI: (http://\S+)$", first.strip())
        assert m, first
        exp_id = m.group(1)
        exp_dir = Path(Registry().get(exp_id).dir)
        wait_until(lambda: read_state(exp_dir).count(TrialStatus.RUNNING) == 1, 60.0)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == EXIT_INTERRUPTED, out + err
    assert f"nnix resume {exp_id}" in out.split("--- experiment")[-1]
    assert f"experiment {exp_id}: STOPPED by Ctrl-C; resume it: nnix resume {exp_id} (exit code 130)" in out
    assert read_state(exp_dir).status.value == "STOPPED"
