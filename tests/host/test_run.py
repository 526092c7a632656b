"""Hosting a manager through the CLI: a resumed manager serves REST before its tuner's history is read (real
``nnix resume``, real daemon, real HTTP server and trial processes; the history read held at a gate)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from contextlib import closing
from pathlib import Path
from typing import Any

from nnix.core.events import MetricReported, StatusChanged, TrialCreated, TrialEnded, TrialStarted
from nnix.core.status import ExperimentStatus, MetricType, TrialStatus
from nnix.home import STORE_NAME, read_state
from nnix.store.sqlite import SqliteStore
from nnix.testing import wait_until
from nnix.testing.experiments import make_experiment
from nnix.testing.gates import history_gate

NNIX = [sys.executable, "-m", "nnix.cli.main"]
N = 6  # trials recorded before the resume


def _get(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=60) as resp:
        return json.loads(resp.read())


def _stopped_experiment(tmp_path: Path) -> tuple[str, Path]:
    """An experiment of N ended trials (recorded directly), stopped, that may run one more."""
    (tmp_path / "trial.py").write_text("import nni\np = nni.get_next_parameter()\nnni.report_final_result(p['x'])\n")
    exp_id, exp_dir = make_experiment(tmp_path, searchSpace={"x": {"_type": "uniform", "_value": [0, 1]}},
                                      trialCommand=f"{sys.executable} trial.py", maxTrialNumber=N + 1)
    events: list[Any] = [event for i, tid in enumerate(f"tr{i}" for i in range(N)) for event in (
        TrialCreated(tid, i, i, {"x": 0.1 * i}), TrialStarted(tid, "local-env", str(exp_dir / tid)),
        MetricReported(tid, MetricType.FINAL, 0, 0.1 * i, 0), TrialEnded(tid, TrialStatus.SUCCEEDED, 0))]
    with closing(SqliteStore(exp_dir / STORE_NAME)) as store:
        store.append([*events, StatusChanged(ExperimentStatus.STOPPED, "stop requested")])
    return exp_id, exp_dir


def test_a_resume_answers_rest_while_the_tuner_history_is_read_and_starts_no_trial_before(tmp_path: Path) -> None:
    """`nnix resume` returns (REST answers) while the resumed manager's first read of the tuner's history is held:
    check-status and the overview say it is resuming, the trial list answers, and no trial is created or started;
    once the read goes on, the next trial runs and the resuming state is gone."""
    exp_id, exp_dir = _stopped_experiment(tmp_path)
    gate = history_gate(tmp_path / "gate")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(gate.dir), *sys.path])}
    try:
        r = subprocess.run([*NNIX, "resume", exp_id, "--port", "0"], capture_output=True, text=True, timeout=120,
                           env=env)
        assert r.returncode == 0, r.stderr
        held = wait_until(gate.held_pid, 60.0, "the manager held at its history read")
        port = read_state(exp_dir, summary=True).manager_port
        assert port
        status = wait_until(lambda: (s := _get(port, "/api/v1/nni/check-status"))["status"] == "RUNNING" and s,
                            60.0, "the resumed manager running")  # (its service started beside the server's start)
        assert status["resuming"] is True, status
        assert status["waitingReason"].startswith("resuming: reading the tuner's history of 6 trials"), status
        overview = _get(port, "/api/nnix/v1/experiment")
        assert overview["resuming"] is True and overview["total"] == N
        assert overview["waitingReason"] == status["waitingReason"]
        assert len(_get(port, "/api/v1/nni/trial-jobs")) == N  # read-only answers meanwhile
        recorded = read_state(exp_dir)
        assert len(recorded.trials) == N and recorded.manager_pid == held  # the tuner was not asked, nothing started
        gate.open()
        wait_until(lambda: _get(port, "/api/v1/nni/check-status")["status"] == "DONE", 120.0,
                   "the one more trial run", show=lambda: _get(port, "/api/v1/nni/check-status"))
        jobs = _get(port, "/api/v1/nni/trial-jobs")
        assert len(jobs) == N + 1 and [j["status"] for j in jobs].count("SUCCEEDED") == N + 1
        after = _get(port, "/api/v1/nni/check-status")
        assert after["resuming"] is False and after["waitingReason"] == ""
    finally:
        gate.open()
        subprocess.run([*NNIX, "stop", exp_id], capture_output=True, text=True, timeout=120, env=env)


def test_of_concurrent_resumes_one_manager_runs_the_experiment_and_the_others_say_who_does(tmp_path: Path) -> None:
    """`nnix resume ID` three times at once (as `... & ... & ...`): exactly one manager runs the experiment, the
    two others exit 1 with a clear error naming its pid, no trial is created twice, and `nnix stop` finds and stops
    the one manager. Three rounds."""
    from nnix.home import pid_alive, read_lock_holder

    exp_id, exp_dir = _stopped_experiment(tmp_path)
    for round_ in range(3):
        procs = [subprocess.Popen([*NNIX, "resume", exp_id, "--port", "0"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(3)]
        outs = [(*p.communicate(timeout=120), p.returncode) for p in procs]
        try:
            assert sorted(rc for _, _, rc in outs) == [0, 1, 1], outs
            holder = read_lock_holder(exp_dir)
            assert holder is not None and holder.action == "resume"
            state = read_state(exp_dir, summary=True)
            assert state.manager_pid == holder.pid and state.manager_port == holder.port
            for _, err, rc in outs:
                if rc:
                    assert f"experiment {exp_id} already has a manager" in err and f"pid {holder.pid}" in err, err
                    assert "Traceback" not in err
        finally:
            stop = subprocess.run([*NNIX, "stop", exp_id], capture_output=True, text=True, timeout=120)
        assert stop.returncode == 0, stop.stderr
        assert not pid_alive(holder.pid) and read_lock_holder(exp_dir) is None, round_
    with closing(SqliteStore(exp_dir / STORE_NAME)) as store:
        sequences = [e.event.sequence_id for e in store.read() if isinstance(e.event, TrialCreated)]
    assert len(sequences) == len(set(sequences)) == N + 1  # the one more trial, created once


def test_a_viewed_experiment_cannot_be_resumed_nor_viewed_twice_until_its_viewer_stops(tmp_path: Path) -> None:
    """`nnix view ID` holds the experiment: `nnix resume ID` and a second `nnix view ID` are refused with the
    viewer's pid and port (before, a resume started a second manager beside the read-only one); after
    `nnix stop ID` the resume runs."""
    from nnix.home import read_lock_holder

    exp_id, exp_dir = _stopped_experiment(tmp_path)
    view = subprocess.run([*NNIX, "view", exp_id, "--port", "0"], capture_output=True, text=True, timeout=120)
    assert view.returncode == 0, view.stderr
    try:
        holder = read_lock_holder(exp_dir)
        assert holder is not None and holder.action == "view" and holder.port
        for verb in ("resume", "view"):
            r = subprocess.run([*NNIX, verb, exp_id, "--port", "0"], capture_output=True, text=True, timeout=120)
            assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
            assert f"experiment {exp_id} already has a manager: another nnix manager is serving it read-only " \
                   f"(pid {holder.pid}, port {holder.port})" in r.stderr, r.stderr
    finally:
        assert subprocess.run([*NNIX, "stop", exp_id], capture_output=True, timeout=120).returncode == 0
    r = subprocess.run([*NNIX, "resume", exp_id, "--port", "0"], capture_output=True, text=True, timeout=120)
    try:
        assert r.returncode == 0, r.stderr
    finally:
        subprocess.run([*NNIX, "stop", exp_id], capture_output=True, timeout=120)
