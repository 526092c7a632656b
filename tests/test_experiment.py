"""The Python API (NNI's ``Experiment``) and legacy v1 configs, end to end."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import nnix
from nnix import Experiment
from nnix.core.status import ExperimentStatus, TrialStatus
from nnix.errors import NnixError
from nnix.home import Registry, read_state
from nnix.testing import wait_until
from nnix.testing.ctrlc import ctrl_c_at_the_gate, foreground_job, start_gate

TRIAL = "import nni\np = nni.get_next_parameter()\nnni.report_final_result(p['x'] ** 2)\n"


def test_experiment_run_blocks_until_done(tmp_path: Path) -> None:
    (tmp_path / "trial.py").write_text(TRIAL)
    cfg = tmp_path / "config.yml"
    cfg.write_text(json.dumps({
        "searchSpace": {"x": {"_type": "choice", "_value": [1, 2, 3]}},
        "trialCommand": f"{sys.executable} trial.py", "trialConcurrency": 2,
        "tuner": {"name": "GridSearch"}, "trainingService": {"platform": "local"},
    }))
    exp = Experiment(cfg)
    assert exp.run(port=0) is True
    assert exp.id is not None
    st = read_state(Path(Registry().get(exp.id).dir))
    assert sorted(t.final_value or 0 for t in st.trials.values()) == [1, 4, 9]


def _sleeping_trial_config(tmp_path: Path) -> Path:
    """One trial at a time, each sleeping a minute (stopped before it ends)."""
    (tmp_path / "trial.py").write_text("import nni, time\nnni.get_next_parameter()\ntime.sleep(60)\n")
    cfg = tmp_path / "config.yml"
    cfg.write_text(json.dumps({
        "searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}},
        "trialCommand": f"{sys.executable} trial.py", "trialConcurrency": 1,
        "tuner": {"name": "Random"}, "trainingService": {"platform": "local"},
    }))
    return cfg


def test_experiment_start_and_stop_a_daemon(tmp_path: Path) -> None:
    cfg = _sleeping_trial_config(tmp_path)
    exp = Experiment(cfg)
    exp_id = exp.start(port=0)
    exp_dir = Path(Registry().get(exp_id).dir)
    deadline = time.monotonic() + 30
    while read_state(exp_dir).count(TrialStatus.RUNNING) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    exp.stop()
    st = read_state(exp_dir)
    assert st.status is ExperimentStatus.STOPPED
    assert st.count(TrialStatus.USER_CANCELED) == 1


def test_legacy_v1_config_runs(tmp_path: Path) -> None:
    (tmp_path / "trial.py").write_text(TRIAL)
    (tmp_path / "space.json").write_text(json.dumps({"x": {"_type": "choice", "_value": [2, 5]}}))
    cfg = tmp_path / "config.yml"
    cfg.write_text(
        "authorName: someone\nexperimentName: v1\ntrialConcurrency: 1\nmaxExecDuration: 1h\nmaxTrialNum: 2\n"
        "trainingServicePlatform: local\nsearchSpacePath: space.json\nuseAnnotation: false\n"
        "tuner:\n  builtinTunerName: GridSearch\n"
        f"trial:\n  command: {sys.executable} trial.py\n  codeDir: .\n  gpuNum: 0\n"
    )
    exp = Experiment(cfg)
    assert exp.run(port=0) is True
    st = read_state(Path(Registry().get(exp.id or "").dir))
    assert sorted(t.final_value or 0 for t in st.trials.values()) == [4, 25]
    assert st.config["trial_gpu_number"] == 0


def test_best_follows_the_tuners_default_direction(tmp_path: Path) -> None:
    from nnix.testing.experiments import make_experiment

    _, d = make_experiment(tmp_path, searchSpace={"x": {"_type": "uniform", "_value": [0, 1]}}, trialCommand="true",
                           tuner={"name": "TPE"})
    assert read_state(d).direction == "minimize"  # TPE minimises unless told otherwise (NNI's default)
    (tmp_path / "b").mkdir()
    _, d = make_experiment(tmp_path / "b", searchSpace={"x": {"_type": "uniform", "_value": [0, 1]}},
                           trialCommand="true", tuner={"name": "Evolution"})
    assert read_state(d).direction == "maximize"


def test_experiment_run_says_when_no_trial_succeeded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "trial.py").write_text("import nni\nnni.get_next_parameter()\nraise SystemExit(3)\n")
    cfg = tmp_path / "config.yml"
    cfg.write_text(json.dumps({
        "searchSpace": {"x": {"_type": "choice", "_value": [1, 2]}}, "trialCommand": f"{sys.executable} trial.py",
        "trialConcurrency": 2, "tuner": {"name": "GridSearch"}, "trainingService": {"platform": "local"},
    }))
    exp = Experiment(cfg)
    assert exp.run(port=0) is False  # DONE, but every trial failed
    assert exp.exit_code == 4  # as `nnix create --foreground`
    assert read_state(Path(Registry().get(exp.id or "").dir)).status is ExperimentStatus.DONE
    # and it says so, with the reasons, as the CLI's summary does (logging, INFO, on stdout unless configured)
    out = capsys.readouterr().out
    assert f"INFO (nnix.experiment) Failed trials of experiment {exp.id}" in out, out
    assert re.search(r"INFO \(nnix\.experiment\)   2x .*exit code 3.*\(e\.g\. trial \w+\)", out), out
    assert f"INFO (nnix.experiment) Experiment {exp.id} is DONE, but no trial succeeded" in out


def test_experiment_run_in_error_logs_its_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from nnix.services.gpu import NvmlInventory

    if NvmlInventory().snapshot():
        pytest.skip("this host has a GPU: trialGpuNumber: 1 can be satisfied")
    (tmp_path / "trial.py").write_text(TRIAL)
    cfg = tmp_path / "config.yml"
    cfg.write_text(json.dumps({
        "searchSpace": {"x": {"_type": "choice", "_value": [1, 2]}}, "trialCommand": f"{sys.executable} trial.py",
        "trialConcurrency": 2, "trialGpuNumber": 1, "tuner": {"name": "GridSearch"},
        "trainingService": {"platform": "local", "useActiveGpu": False},
    }))
    exp = Experiment(cfg)
    assert exp.run(port=0) is False and exp.exit_code == 3
    out = capsys.readouterr().out
    assert f"ERROR (nnix.experiment) Experiment {exp.id} is in ERROR: No GPU found, but trialGpuNumber is 1" in out


def test_a_failed_experiment_run_leaves_nothing_behind(tmp_path: Path) -> None:
    (tmp_path / "trial.py").write_text(TRIAL)
    cfg = tmp_path / "config.yml"
    cfg.write_text(json.dumps({
        "searchSpace": {"x": {"_type": "choice", "_value": [1]}}, "trialCommand": f"{sys.executable} trial.py",
        "trialConcurrency": 1, "tuner": {"name": "GridSearch"}, "trainingService": {"platform": "local"},
    }))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        exp = Experiment(cfg)
        with pytest.raises(NnixError, match="is not idle"):
            exp.run(port=s.getsockname()[1])
    assert exp.id is None and Registry().all() == []


@pytest.mark.parametrize("how", ["run", "start"])
def test_a_busy_port_is_said_in_the_launchers_terms_without_a_chained_traceback(tmp_path: Path, how: str) -> None:
    (tmp_path / "trial.py").write_text(TRIAL)
    cfg = tmp_path / "config.yml"
    cfg.write_text(json.dumps({
        "searchSpace": {"x": {"_type": "choice", "_value": [1]}}, "trialCommand": f"{sys.executable} trial.py",
        "trialConcurrency": 1, "tuner": {"name": "GridSearch"}, "trainingService": {"platform": "local"},
    }))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(NnixError) as err:
            getattr(Experiment(cfg), how)(port=port)
    e = err.value
    assert e.message.startswith(f"port {port} is not idle")
    assert e.hint is not None and "run(port=8081)" in e.hint and "port=0" in e.hint and "--port" not in e.hint
    assert e.__cause__ is None and e.__suppress_context__  # no "direct cause" OSError above it
    assert Registry().all() == []


def test_run_without_waiting_starts_a_daemon_and_debug_logs_at_debug(tmp_path: Path) -> None:
    cfg = _sleeping_trial_config(tmp_path)
    exp = Experiment(cfg)
    assert exp.run(port=0, wait_completion=False, debug=True) is None  # returns while the trial sleeps
    assert exp.id is not None
    exp_dir = Path(Registry().get(exp.id).dir)
    try:
        wait_until(lambda: read_state(exp_dir).count(TrialStatus.RUNNING) == 1, 60, "a running trial")
        st = read_state(exp_dir)
        assert st.status is ExperimentStatus.RUNNING
        assert st.config["log_level"] == "debug"
        assert " DEBUG " in (exp_dir / "log" / "manager.log").read_text()
    finally:
        exp.stop()
    assert read_state(exp_dir).status is ExperimentStatus.STOPPED


START_THEN_CTRL_C = """import sys
from nnix import Experiment
exp = Experiment(sys.argv[1])
try:
    exp.start(port=0)
except KeyboardInterrupt:
    print("INTERRUPTED", exp.id, flush=True)
"""


def test_ctrl_c_while_start_waits_for_its_daemon_ends_the_daemon(tmp_path: Path) -> None:
    """The racy moment held open: the daemon is started but has not answered when Ctrl-C comes. start()
    raises KeyboardInterrupt only once that daemon has ended; no trial ran, so the experiment is discarded."""
    cfg = _sleeping_trial_config(tmp_path)
    gate = start_gate(tmp_path / "gate", "nnix.host.daemon")
    (tmp_path / "launch.py").write_text(START_THEN_CTRL_C)
    src = Path(nnix.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(gate.dir), str(src)])}
    proc = subprocess.Popen(foreground_job([sys.executable, "launch.py", str(cfg)]), cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    out, err, daemon_left = ctrl_c_at_the_gate(proc, gate)
    assert proc.returncode == 0, err
    assert "INTERRUPTED None" in out, out + err  # the experiment it created is discarded
    assert not daemon_left  # not left to run the experiment without its launcher
    assert Registry().all() == []
