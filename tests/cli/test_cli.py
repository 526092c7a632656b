"""The CLI end to end, through real processes: the example, bad configs, a daemon steered by
`update` / `trial kill` / `stop`, and kill -9 of the manager followed by `nnix resume`."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from nnix.core.events import TrialStarted
from nnix.core.state import ExperimentState
from nnix.core.status import ExperimentStatus, MetricType, TrialStatus
from nnix.home import STORE_NAME, Registry, pid_alive, read_state
from nnix.store.sqlite import SqliteStore
from nnix.testing import wait_until

REPO = Path(__file__).resolve().parents[2]
NNIX = [sys.executable, "-m", "nnix.cli.main"]


def nnix(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NNIX, *args], capture_output=True, text=True, timeout=timeout, env=os.environ.copy())


def _state(exp_id: str) -> ExperimentState:
    return read_state(Path(Registry().get(exp_id).dir))


def _created_id(out: str) -> str:
    for line in out.splitlines():
        if line.startswith("Experiment ") and "started" in line:
            return line.split()[1]
    raise AssertionError(out)


def _config(tmp_path: Path, trial_body: str, **extra: Any) -> Path:
    (tmp_path / "trial.py").write_text("import nni, time, sys\np = nni.get_next_parameter()\n" + trial_body)
    cfg = {
        "searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}},
        "trialCommand": f"{sys.executable} trial.py",
        "trialCodeDirectory": ".",
        "trialConcurrency": 1,
        "tuner": {"name": "Random"},
        "trainingService": {"platform": "local"},
        **extra,
    }
    path = tmp_path / "config.yml"
    path.write_text(json.dumps(cfg))  # JSON is YAML
    return path


def test_example_experiment_end_to_end(tmp_path: Path) -> None:
    r = nnix("create", "--config", str(REPO / "examples/branin/config.yml"), "--foreground", "--port", "0")
    assert r.returncode == 0, r.stderr
    assert "DONE" in r.stdout and "trials 40/40: 40 succeeded" in r.stdout
    exp_id = r.stdout.strip().splitlines()[-1].split()[1].rstrip(":")
    st = _state(exp_id)
    assert st.status is ExperimentStatus.DONE
    assert all(len(t.intermediate) == 5 and t.final is not None for t in st.trials.values())
    out = tmp_path / "out.csv"
    assert nnix("experiment", "export", exp_id, "--type", "csv", "--filename", str(out)).returncode == 0
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 40 and set(rows[0]) == {"x1", "x2", "reward", "trialJobId"}
    ls = nnix("trial", "ls", exp_id, "--json")
    assert len(json.loads(ls.stdout)) == 40


def test_bad_config_reports_every_field_with_exit_2(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.yml"
    cfg.write_text(
        "searchSpace: {x: {_type: uniformm, _value: [0, 1]}}\n"
        "trialCommand: python3 t.py\n"
        "trialConcurency: 2\n"
        "maxExperimentDuration: 10x\n"
        "tuner: {name: Random}\n"
        "trainingService: {platform: local}\n"
    )
    r = nnix("create", "--config", str(cfg))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr + r.stdout
    assert "trialConcurency" in r.stderr and "did you mean 'trialConcurrency'" in r.stderr
    assert "maxExperimentDuration" in r.stderr
    assert "searchSpace.x._type" in r.stderr


def test_daemon_update_kill_and_stop(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "time.sleep(60)\n")
    r = nnix("create", "--config", str(cfg), "--port", "0")
    assert r.returncode == 0, r.stderr
    exp_id = _created_id(r.stdout)
    try:
        wait_until(lambda: _state(exp_id).count(TrialStatus.RUNNING) == 1, 30.0)
        time.sleep(0.3)  # not a wait for an event: the window in which a second trial would wrongly start
        assert _state(exp_id).count(TrialStatus.RUNNING) == 1  # concurrency 1 holds
        assert nnix("update", "concurrency", exp_id, "--value", "2").returncode == 0
        wait_until(lambda: _state(exp_id).count(TrialStatus.RUNNING) == 2, 30.0)
        first = next(iter(_state(exp_id).trials))
        pid = _state(exp_id).trials[first].pid
        k = nnix("trial", "kill", exp_id, "--trial_id", first)
        assert k.returncode == 0, k.stderr
        wait_until(lambda: _state(exp_id).trials[first].status is TrialStatus.USER_CANCELED, 30.0)
        assert not pid_alive(pid)
    finally:
        s = nnix("stop", exp_id)
    assert s.returncode == 0, s.stderr
    st = _state(exp_id)
    assert st.status is ExperimentStatus.STOPPED
    assert not any(t.is_active for t in st.trials.values())
    assert not pid_alive(st.manager_pid)
    again = nnix("trial", "kill", exp_id, "-T", first)
    assert again.returncode == 1 and "not running" in again.stderr


def test_kill_9_then_resume_loses_nothing(tmp_path: Path) -> None:
    cfg = _config(
        tmp_path,
        "for i in range(20):\n    nni.report_intermediate_result(i)\n    time.sleep(0.1)\n"
        "nni.report_final_result(p['x'])\n",
        trialConcurrency=2,
        maxTrialNumber=4,
    )
    r = nnix("create", "--config", str(cfg), "--port", "0")
    assert r.returncode == 0, r.stderr
    exp_id = _created_id(r.stdout)

    def two_running_with_metrics() -> bool:
        st = _state(exp_id)
        running = [t for t in st.trials.values() if t.status is TrialStatus.RUNNING]
        return len(running) == 2 and all(len(t.intermediate) >= 3 for t in running)

    wait_until(two_running_with_metrics, 30.0)
    st = _state(exp_id)
    os.kill(st.manager_pid or 0, signal.SIGKILL)
    wait_until(lambda: not pid_alive(st.manager_pid), 30.0)
    running_before = {t.trial_id: t.pid for t in st.trials.values() if t.status is TrialStatus.RUNNING}
    assert all(pid_alive(p) for p in running_before.values())  # trials outlive their manager

    def reported_unheard() -> bool:  # they keep reporting while no manager listens
        channels = [(Path(str(t.output_dir)) / ".nnix" / "metrics.jsonl", t.last_index) for t in st.trials.values()
                    if t.trial_id in running_before]
        return all(c.is_file() and len(c.read_bytes().splitlines()) > last + 1 for c, last in channels)

    wait_until(reported_unheard, 30, "metrics reported while no manager listens")
    listed = nnix("experiment", "list", "--all")
    assert "STOPPED" in listed.stdout

    res = nnix("resume", exp_id, "--foreground", "--port", "0")
    assert res.returncode == 0, res.stderr
    st = _state(exp_id)
    assert st.status is ExperimentStatus.DONE
    assert len(st.trials) == 4
    assert all(t.status is TrialStatus.SUCCEEDED for t in st.trials.values()), [t.message for t in st.trials.values()]
    assert sorted(t.sequence_id for t in st.trials.values()) == [0, 1, 2, 3]
    for t in st.trials.values():
        seqs = [m.sequence for m in t.metrics if m.type is MetricType.PERIODICAL]
        assert seqs == list(range(20)), (t.trial_id, seqs)  # every metric, exactly once
        assert sum(m.type is MetricType.FINAL for m in t.metrics) == 1
    started = Counter(
        s.event.trial_id for s in SqliteStore(Path(Registry().get(exp_id).dir) / STORE_NAME).read()
        if isinstance(s.event, TrialStarted)
    )
    assert set(started.values()) == {1}  # re-attached, not re-run
    assert all(st.trials[tid].pid == pid for tid, pid in running_before.items())


def test_update_limits_import_logs_and_delete(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "time.sleep(60)\n", maxTrialNumber=1)
    r = nnix("create", "--config", str(cfg), "--port", "0")
    assert r.returncode == 0, r.stderr
    exp_id = _created_id(r.stdout)
    try:
        wait_until(lambda: _state(exp_id).count(TrialStatus.RUNNING) == 1, 30.0)
        assert nnix("update", "trialnum", exp_id, "-v", "3").returncode == 0
        assert nnix("update", "duration", exp_id, "-v", "2h").returncode == 0
        bad = nnix("update", "duration", exp_id, "-v", "2x")
        assert bad.returncode != 0 and "2x" in bad.stderr
        space = tmp_path / "space.json"
        space.write_text(json.dumps({"x": {"_type": "choice", "_value": [7]}}))
        assert nnix("update", "searchspace", exp_id, "-f", str(space)).returncode == 0
        assert nnix("update", "concurrency", exp_id, "-v", "2").returncode == 0
        wait_until(lambda: _state(exp_id).count(TrialStatus.RUNNING) == 2, 30.0)
        st = _state(exp_id)
        assert st.limits["max_trial_number"] == 3 and st.limits["max_experiment_duration"] == 7200
        newest = max(st.trials.values(), key=lambda t: t.sequence_id)
        assert newest.params == {"x": 7}  # the tuner uses the new search space
        logs = nnix("log", "trial", exp_id)
        assert all(t in logs.stdout for t in st.trials)
    finally:
        assert nnix("stop", exp_id).returncode == 0
    data = tmp_path / "prior.json"
    data.write_text(json.dumps([{"parameter": {"x": 0.5}, "value": 0.25}]))
    imp = nnix("experiment", "import", exp_id, "-f", str(data))
    assert imp.returncode == 0, imp.stderr
    assert _state(exp_id).imported == [{"parameter": {"x": 0.5}, "value": 0.25}]
    exp_dir = Path(Registry().get(exp_id).dir)
    assert nnix("experiment", "delete", exp_id, "--yes").returncode == 0
    assert not exp_dir.exists()
    assert exp_id not in nnix("experiment", "list", "--all").stdout


def test_algo_list_shows_installed_algorithms() -> None:
    r = nnix("algo", "list")
    assert r.returncode == 0
    rows = {line.split()[0] for line in r.stdout.splitlines()[1:]}  # piped: a plain table
    assert {"random", "gridsearch", "batch"} <= rows
