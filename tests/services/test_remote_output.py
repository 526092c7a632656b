"""Remote trials' stdout/stderr reach the manager while they run (real sshd host, ``ssh_lab``)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from nnix.core.status import ExperimentStatus, TrialStatus
from nnix.home import read_state, trial_files_dir
from nnix.testing.experiments import make_experiment, run_experiment
from nnix.testing.spaces import UNIT as SPACE
from nnix.testing.sshhosts import SshLab


def test_remote_trial_output_is_copied_to_the_manager_while_it_runs(tmp_path: Path, ssh_lab: SshLab) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "trial.py").write_text(
        "import nni, sys, time\np = nni.get_next_parameter()\n"
        "for i in range(30):\n    print('step', i, flush=True)\n    time.sleep(0.1)\n"
        "sys.stderr.write('a warning\\n')\nnni.report_final_result(p['x'])\n")
    host = ssh_lab.hosts[0]
    _, exp_dir = make_experiment(code, searchSpace=SPACE, trialCommand="python3 trial.py", trialConcurrency=1,
                                 maxTrialNumber=1, trainingService={
                                     "platform": "remote", "knownHostsFile": str(ssh_lab.known_hosts),
                                     "remoteWorkDir": str(ssh_lab.home / "work"), "machineList": [host.machine()]})
    result: dict[str, Any] = {}
    th = threading.Thread(target=lambda: result.setdefault("st", run_experiment(exp_dir, timeout=120,
                                                                                connect_timeout=3.0)), daemon=True)
    th.start()
    seen_live = ""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and th.is_alive():
        st = read_state(exp_dir)
        t = next(iter(st.trials.values()), None)
        if t is not None and t.status is TrialStatus.RUNNING:
            folder = trial_files_dir(exp_dir, t.trial_id, t.output_dir)
            out = folder / "trial.stdout" if folder else None
            if out is not None and out.is_file() and "step 3\n" in out.read_text():
                seen_live = out.read_text()
                break
        time.sleep(0.05)
    th.join(120)
    st = result["st"]
    assert st.status is ExperimentStatus.DONE
    t = next(iter(st.trials.values()))
    assert t.status is TrialStatus.SUCCEEDED
    assert t.output_dir.startswith(host.host)  # the trial's own files are on the worker ...
    assert "step 29" not in seen_live and "step 3" in seen_live  # ... and a copy grew while it ran
    folder = trial_files_dir(exp_dir, t.trial_id, t.output_dir)
    assert folder is not None
    assert (folder / "trial.stdout").read_text() == "".join(f"step {i}\n" for i in range(30))
    assert (folder / "trial.stderr").read_text() == "a warning\n"
