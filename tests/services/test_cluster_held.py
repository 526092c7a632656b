"""The shared cluster service: a trial killed by a signal as its environment ends gets the engine's reason;
killed by a signal in a live environment, it keeps its own exit."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from nnix.core.status import ExperimentStatus, TrialStatus
from nnix.home import read_state
from nnix.testing import wait_until
from nnix.testing.cluster import ProcessClusterService, ProcessLauncher
from nnix.testing.experiments import make_experiment, run_experiment
from nnix.testing.spaces import UNIT as SPACE

FAST: dict[str, Any] = {"engine_poll_interval": 0.1, "end_grace": 0.3, "poll_interval": 0.05, "kill_grace": 1.0}


def _experiment(tmp_path: Path, *, reuse: bool = True) -> Path:
    code = tmp_path / "code"
    code.mkdir(parents=True, exist_ok=True)
    (code / "trial.py").write_text(
        "import time, nni\np = nni.get_next_parameter()\n"
        "for i in range(2000):\n    nni.report_intermediate_result(i)\n    time.sleep(0.05)\n"
        "nni.report_final_result(p['x'])\n"
    )
    _, exp_dir = make_experiment(code, searchSpace=SPACE, trialCommand="exec python3 trial.py", trialConcurrency=1,
                                 maxTrialNumber=1, trainingService={"platform": "slurm", "reuseMode": reuse})
    return exp_dir


def _running(exp_dir: Path) -> Any:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        st = read_state(exp_dir)
        running = [t for t in st.trials.values() if t.status is TrialStatus.RUNNING and len(t.intermediate) >= 2]
        if running:
            return running[0]
        time.sleep(0.05)
    raise AssertionError("no trial ran")


def _start(exp_dir: Path, launcher: ProcessLauncher) -> tuple[threading.Thread, dict[str, Any]]:
    result: dict[str, Any] = {}

    def run() -> None:
        result["st"] = run_experiment(exp_dir, timeout=60, service_class=ProcessClusterService, launcher=launcher,
                                      **FAST)

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th, result


def _ended(pid: int) -> bool:
    """Whether process ``pid`` is gone or a zombie (its /proc entry may vanish between two reads: it is reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:  # FileNotFoundError, or ProcessLookupError once reaped mid-read
        return True
    return b"Z" in stat.rsplit(b")", 1)[1][:3]


def test_a_trial_signalled_as_its_engine_ends_the_environment_gets_the_engine_reason(tmp_path: Path) -> None:
    launcher = ProcessLauncher()
    exp_dir = _experiment(tmp_path)
    th, result = _start(exp_dir, launcher)
    trial = _running(exp_dir)
    assert trial.pid is not None
    (handle,) = [h for h, p in launcher.procs.items() if p.poll() is None]
    os.kill(trial.pid, signal.SIGTERM)  # an engine signals the job's processes one by one: the trial first...
    wait_until(lambda: _ended(trial.pid), 30, f"trial process {trial.pid} to end")
    launcher.kill(handle, "TIMEOUT: the job reached its time limit")  # ...and ends the environment
    th.join(60)
    (t,) = result["st"].trials.values()
    assert t.status is TrialStatus.FAILED
    assert t.message == f"its process environment {handle} ended: TIMEOUT: the job reached its time limit"


def test_a_trial_killed_by_a_signal_in_a_live_environment_keeps_its_own_exit(tmp_path: Path) -> None:
    launcher = ProcessLauncher()
    exp_dir = _experiment(tmp_path)
    th, result = _start(exp_dir, launcher)
    trial = _running(exp_dir)
    assert trial.pid is not None
    os.kill(trial.pid, signal.SIGTERM)  # e.g. the OOM killer, or the user: the environment lives on
    th.join(60)
    st = result["st"]
    assert st.status is ExperimentStatus.DONE
    (t,) = st.trials.values()
    assert t.status is TrialStatus.FAILED
    assert "environment" not in (t.message or "") and "SIGTERM" in (t.message or "")


def test_non_reuse_a_trial_killed_by_a_signal_keeps_its_own_exit(tmp_path: Path) -> None:
    launcher = ProcessLauncher()
    exp_dir = _experiment(tmp_path, reuse=False)
    th, result = _start(exp_dir, launcher)
    trial = _running(exp_dir)
    assert trial.pid is not None
    os.kill(trial.pid, signal.SIGTERM)  # its agent reports it, then exits by itself: the environment ends normally
    th.join(60)
    (t,) = result["st"].trials.values()
    assert t.status is TrialStatus.FAILED
    assert "environment" not in (t.message or "") and "SIGTERM" in (t.message or "")
