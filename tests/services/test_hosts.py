"""The machine part of ClusterService (:mod:`nnix.services.hosts`): a launcher with a fixed list of machines
(``hosts``, the capability SSH has) driven by the one cluster service, without SSH: the machines of
:class:`~nnix.testing.cluster.ProcessHostsLauncher` are folders here, its agents local processes running the real
nnix agent. The SSH lab covers the rest (tests/services/test_remote.py)."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

from nnix.core.status import ExperimentStatus, MetricType, TrialStatus
from nnix.home import read_state
from nnix.services.launcher import HostLauncher
from nnix.testing import wait_until
from nnix.testing.cluster import ProcessHostsLauncher, ProcessHostsService
from nnix.testing.experiments import make_experiment, run_experiment
from nnix.testing.spaces import UNIT as SPACE

FAST: dict[str, Any] = {"poll_interval": 0.05, "kill_grace": 1.0, "backoff_min": 0.1, "adopt_wait": 0.5}


def _experiment(tmp_path: Path, *, trials: int, concurrency: int, steps: int = 3, gate: Path | None = None) -> Path:
    code = tmp_path / "code"
    code.mkdir()
    wait = (f"    if i == 1:\n        while not os.path.exists({str(gate)!r}):\n            time.sleep(0.02)\n"
            if gate is not None else "")
    (code / "trial.py").write_text(
        "import os, time, nni\np = nni.get_next_parameter()\n"
        f"for i in range({steps}):\n    nni.report_intermediate_result(i)\n    time.sleep(0.02)\n{wait}"
        "nni.report_final_result(p['x'])\n")
    _, exp_dir = make_experiment(code, searchSpace=SPACE, trialCommand="python3 trial.py",
                                 trialConcurrency=concurrency, maxTrialNumber=trials,
                                 trainingService={"platform": "slurm", "reuseMode": True})
    return exp_dir


def _run(exp_dir: Path, launcher: ProcessHostsLauncher) -> Any:
    return run_experiment(exp_dir, timeout=90, service_class=ProcessHostsService, launcher=launcher, **FAST)


def test_one_agent_per_machine_and_trials_on_the_least_loaded_machine(tmp_path: Path) -> None:
    launcher = ProcessHostsLauncher(tmp_path / "machines", machines=2)
    contract: HostLauncher = launcher  # the optional capability, checked by mypy
    assert len(contract.hosts) == 2
    st = _run(_experiment(tmp_path, trials=4, concurrency=2), launcher)
    assert st.status is ExperimentStatus.DONE
    assert [t.status for t in st.trials.values()] == [TrialStatus.SUCCEEDED] * 4
    # reuse mode: one agent per machine, started when the machine came up, each pointed at its machine's URL
    assert sorted(r.host for r in launcher.engine.launched if r.host is not None) == [0, 1]
    assert not any(r.single for r in launcher.engine.launched)
    # each trial went to the least loaded machine (ties: the next one in turn): both ran trials; output_dir names
    # the machine as <key>:<path>
    assert {(t.output_dir or "").split(":")[0] for t in st.trials.values()} == {"m0", "m1"}
    assert launcher.engine.closed


def test_a_dead_agent_is_replaced_on_its_machine_and_its_trial_keeps_running(tmp_path: Path) -> None:
    launcher = ProcessHostsLauncher(tmp_path / "machines", machines=1)
    gate = tmp_path / "go-on"
    exp_dir = _experiment(tmp_path, trials=1, concurrency=1, steps=4, gate=gate)
    result: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            result.append(_run(exp_dir, launcher))
        except BaseException as e:  # a failed run must fail the test
            errors.append(e)

    th = threading.Thread(target=run, daemon=True)
    th.start()

    def running() -> bool:
        trials = list(read_state(exp_dir).trials.values())
        return len(trials) == 1 and trials[0].status is TrialStatus.RUNNING and len(trials[0].intermediate) >= 2

    wait_until(running, 60, "the trial to run and report (it then waits for the gate)")
    [first] = launcher.engine.launched
    agent = launcher.engine.procs[launcher.handles[first.env_id]]
    os.kill(agent.pid, signal.SIGKILL)  # the agent only: the trial is a process group of its own
    wait_until(lambda: len(launcher.engine.launched) == 2, 60, "a new agent on the same machine")
    gate.touch()
    th.join(90)
    assert not th.is_alive() and not errors, errors
    [st] = result
    [t] = st.trials.values()
    assert t.status is TrialStatus.SUCCEEDED, t.message
    assert [m.sequence for m in t.metrics if m.type is MetricType.PERIODICAL] == [0, 1, 2, 3]  # none lost, none twice
    assert [r.host for r in launcher.engine.launched] == [0, 0]  # replaced in place, not a new environment
