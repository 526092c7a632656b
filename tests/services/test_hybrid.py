"""Hybrid mode (NNI's ``trainingService`` as a list): one experiment over several services."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest

from nnix.config import HybridConfig, parse_config
from nnix.core.status import ExperimentStatus, TrialStatus
from nnix.errors import ConfigError, ServiceError
from nnix.model.runs import Exited, RunnerEvent, Started, TrialSpec
from nnix.services.hybrid import HybridService
from nnix.testing.experiments import make_experiment, run_experiment
from nnix.testing.spaces import UNIT as SPACE
from nnix.testing.sshhosts import SshLab

BASE: dict[str, Any] = {"searchSpace": SPACE, "trialCommand": "python3 trial.py", "trialConcurrency": 2,
                        "tuner": {"name": "Random"}}


def _code(tmp_path: Path, start: str = "") -> Path:
    """A quick trial; ``start``: code it runs first (after ``import nni, time``)."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "trial.py").write_text(
        f"import nni, time\n{start}p = nni.get_next_parameter()\nnni.report_intermediate_result(1)\n"
        "time.sleep(0.2)\nnni.report_final_result(p['x'])\n")
    return code


def _ledger(exp_dir: Path) -> dict[str, int]:
    lines = (exp_dir / "services" / "hybrid.tsv").read_text().splitlines()
    return {tid: int(i) for tid, i in (line.split("\t") for line in lines)}


def test_a_list_of_services_is_hybrid_mode_and_errors_name_the_item(tmp_path: Path) -> None:
    loaded = parse_config({**BASE, "trainingService": [{"platform": "local"}, {"platform": "local"}]}, tmp_path)
    ts = loaded.config.training_service
    assert isinstance(ts, HybridConfig) and [s.platform for s in ts.services] == ["local", "local"]
    cases = [
        ([{"platform": "local"}, {"platform": "remot"}], "trainingService[1].platform", "did you mean 'remote'"),
        ([{"platform": "local"}, {"platform": "remote", "machineList": [{"hst": "h", "user": "u"}]}],
         "trainingService[1].machineList[0].hst", "did you mean 'host'"),
        ([{"platform": "local", "maxTrialNumberPerGpu": 2}, {"platform": "local"}],
         "trainingService[0].maxTrialNumberPerGpu", "trialGpuNumber"),
        ([{"platform": "local"}, {"platform": "hybrid", "services": []}], "trainingService[1].platform",
         "list of training services"),
    ]
    for services, path, words in cases:
        with pytest.raises(ConfigError) as e:
            parse_config({**BASE, "trainingService": services}, tmp_path)
        text = str(e.value)
        assert path in text and words in text, text


def test_a_list_of_one_service_is_that_service(tmp_path: Path) -> None:
    loaded = parse_config({**BASE, "trainingService": [{"platform": "local"}]}, tmp_path)
    assert loaded.config.training_service.platform == "local"


def test_trials_spread_over_every_listed_service(tmp_path: Path) -> None:
    code = _code(tmp_path)
    _, exp_dir = make_experiment(code, searchSpace=SPACE, trialCommand="python3 trial.py", trialConcurrency=2,
                                 maxTrialNumber=6,
                                 trainingService=[{"platform": "local"}, {"platform": "local"}])
    st = run_experiment(exp_dir, timeout=60)
    assert st.status is ExperimentStatus.DONE
    assert [t.status for t in st.trials.values()] == [TrialStatus.SUCCEEDED] * 6
    owners = _ledger(exp_dir)
    assert set(owners) == set(st.trials) and set(owners.values()) == {0, 1}
    assert (exp_dir / "services" / "0-local").is_dir() and (exp_dir / "services" / "1-local").is_dir()


def test_local_and_remote_in_one_experiment(tmp_path: Path, ssh_lab: SshLab) -> None:
    # quick trials could all run locally before the remote machine is ready: a local trial first waits (4 s at
    # most) until a trial started on the remote machine (a marker per hostname, where the lab user can write)
    marks = ssh_lab.home / f"hybrid-{tmp_path.name}"
    marks.mkdir()
    marks.chmod(0o777)
    code = _code(tmp_path, start=(f"import os, socket\nopen(os.path.join({str(marks)!r}, socket.gethostname()), 'w')"
                                  f".close()\nend = time.time() + 4\nwhile socket.gethostname() == "
                                  f"{socket.gethostname()!r} and len(os.listdir({str(marks)!r})) < 2 and "
                                  "time.time() < end:\n    time.sleep(0.05)\n"))
    host = ssh_lab.hosts[0]
    remote = {"platform": "remote", "knownHostsFile": str(ssh_lab.known_hosts),
              "remoteWorkDir": str(ssh_lab.home / "work"), "machineList": [host.machine()]}
    _, exp_dir = make_experiment(code, searchSpace=SPACE, trialCommand="python3 trial.py", trialConcurrency=2,
                                 maxTrialNumber=6, trainingService=[{"platform": "local"}, remote])
    st = run_experiment(exp_dir, timeout=120)
    assert st.status is ExperimentStatus.DONE, st.message
    assert [t.status for t in st.trials.values()] == [TrialStatus.SUCCEEDED] * 6
    remote_dirs = [t.output_dir for t in st.trials.values() if (t.output_dir or "").startswith(f"{host.host}")]
    local_dirs = [t.output_dir for t in st.trials.values() if Path(t.output_dir or "x").is_absolute()]
    assert remote_dirs and local_dirs, [t.output_dir for t in st.trials.values()]
    assert all(t.final is not None for t in st.trials.values())


class _Child:
    """A service fake: ``mode`` "busy" (submit says not now), "never" (raises), "ok" (starts)."""

    platform = "fake"

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.submitted: list[str] = []
        self.reattached: list[str] = []
        self.canceled: list[str] = []

    async def start(self) -> None: ...

    async def submit(self, spec: TrialSpec) -> Started | None:
        if self.mode == "never":
            raise ServiceError("no GPU here")
        if self.mode == "busy":
            return None
        self.submitted.append(spec.trial_id)
        return Started(spec.trial_id, 1, None, str(spec.output_dir))

    async def cancel(self, trial_id: str) -> None:
        self.canceled.append(trial_id)

    async def reattach(self, trial_id: str, output_dir: Path, pid: int | None, pid_start: str | None,
                       after_index: int, gpus: tuple[int, ...] | None) -> None:
        self.reattached.append(trial_id)

    def waiting_reason(self) -> str:
        return "all slots taken"

    async def close(self, kill_trials: bool) -> None: ...


def _spec(tid: str, tmp_path: Path) -> TrialSpec:
    return TrialSpec(tid, "true", tmp_path, tmp_path / tid, {})


def test_submit_skips_busy_and_never_services_and_says_why(tmp_path: Path) -> None:
    events: list[RunnerEvent] = []
    busy, never, ok = _Child("busy"), _Child("never"), _Child("ok")
    svc = HybridService(events.append, [busy, never, ok], ["a", "b", "c"], tmp_path / "hybrid.tsv")

    async def main() -> None:
        assert await svc.submit(_spec("t1", tmp_path)) is not None
        assert ok.submitted == ["t1"]
        ok.mode = "busy"
        assert await svc.submit(_spec("t2", tmp_path)) is None
        assert "a: all slots taken" in svc.waiting_reason() and "b: no GPU here" in svc.waiting_reason()
        busy.mode = ok.mode = "never"
        with pytest.raises(ServiceError, match="no training service of the hybrid list"):
            await svc.submit(_spec("t3", tmp_path))
        await svc.cancel("t1")
        assert ok.canceled == ["t1"]

    asyncio.run(main())


def test_a_resumed_hybrid_service_gives_each_trial_back_to_its_service(tmp_path: Path) -> None:
    ledger = tmp_path / "hybrid.tsv"
    ledger.write_text("t1\t1\nt2\t0\nt9\t7\n")
    events: list[RunnerEvent] = []
    a, b = _Child("ok"), _Child("ok")
    svc = HybridService(events.append, [a, b], ["a", "b"], ledger)

    async def main() -> None:
        for tid in ("t1", "t2", "t9", "t5"):
            await svc.reattach(tid, tmp_path, None, None, -1, None)

    asyncio.run(main())
    assert a.reattached == ["t2"] and b.reattached == ["t1"]
    assert sorted(e.trial_id for e in events if isinstance(e, Exited)) == ["t5", "t9"]
