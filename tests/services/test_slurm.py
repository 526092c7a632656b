"""The Slurm service on a real Slurm: a private single-node slurmctld + slurmd + munged (+ slurmdbd and MariaDB
for ``sacct`` when installed) started by the tests (``slurm_lab``, :class:`nnix.testing.slurm.SlurmLab`). The
launcher is driven directly with a stand-in agent (a shell script that records what it got), then whole
experiments run through the manager with the real agent.

Slurm enforces time limits in whole minutes and checks them about every 30 s; to see a real ``TIMEOUT`` without
waiting minutes, the tests shorten a running job's limit to 0 with ``scontrol update`` (as an administrator
can), and Slurm ends the job at its next check."""

from __future__ import annotations

import asyncio
import json
import re
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nnix.config import ExperimentConfig, SlurmConfig, parse_config
from nnix.core.status import ExperimentStatus, MetricType, TrialStatus
from nnix.errors import ConfigError, ServiceError
from nnix.home import read_state
from nnix.model.runs import TrialSpec
from nnix.services.base import ServiceContext
from nnix.services.cluster import EnvRequest, EnvStatus
from nnix.services.slurm import SlurmLauncher, describe_state, job_script
from nnix.testing import wait_until
from nnix.testing.experiments import detach_when, make_experiment, run_experiment
from nnix.testing.killpoints import (
    Chain,
    chain_experiment,
    kill_at_every_point_and_resume,
    leftover_processes,
    settled,
)
from nnix.testing.slurm import SlurmLab
from nnix.testing.spaces import UNIT as SPACE

FAST: dict[str, Any] = {"engine_poll_interval": 0.5, "end_grace": 0.5, "poll_interval": 0.05, "kill_grace": 1.0}
BASE: dict[str, Any] = {"searchSpace": SPACE, "trialCommand": "python3 t.py", "trialConcurrency": 1,
                        "tuner": {"name": "Random"}}

FAKE_AGENT = """#!/bin/bash
# stands in for `python -m nnix.agent ...`: records what it got
d="$(dirname "$0")/out"; mkdir -p "$d"
printf '%s\\n%s\\n%s\\n%s\\n%s\\n' "$NNIX_AGENT_TOKEN" "$*" "${SLURM_JOB_ID:-}" "${SLURM_GPUS_ON_NODE:-0}" \\
  "${NNIX_SETUP_MARK:-}" > "$d/$$.tmp"
mv "$d/$$.tmp" "$d/$$"
echo "fake agent: something went wrong" >&2
[ -f "$(dirname "$0")/exit-code" ] && exit "$(cat "$(dirname "$0")/exit-code")"
exec sleep 1000
"""


# --- fixtures ------------------------------------------------------------------------------------
@pytest.fixture
def lab(slurm_lab: SlurmLab) -> Iterator[SlurmLab]:
    yield slurm_lab
    ids = slurm_lab.run("squeue", "-h", "-t", "PD,R,CG,CF,S", "-o", "%i", check=False).stdout.split()
    if ids:  # a failed test leaves no job behind to hold the node
        slurm_lab.run("scancel", *ids, check=False)
        wait_until(lambda: not slurm_lab.run("squeue", "-h", "-t", "PD,R,CG,CF", "-o", "%i").stdout.strip(), 30)


@pytest.fixture
def fake_agent(tmp_path: Path) -> Path:
    script = tmp_path / "fake" / "agent.sh"
    script.parent.mkdir()
    script.write_text(FAKE_AGENT)
    script.chmod(0o755)
    return script


# --- helpers -------------------------------------------------------------------------------------
async def _until(launcher: SlurmLauncher, handle: str, state: str, timeout: float = 60.0) -> EnvStatus:
    deadline = time.monotonic() + timeout
    while True:
        st = (await launcher.poll([handle]))[handle]
        if st.state == state:
            return st
        if time.monotonic() > deadline:
            raise AssertionError(f"job {handle} did not become {state}: {st}")
        await asyncio.sleep(0.2)


def _recorded(fake: Path) -> list[tuple[str, ...]]:
    """``(token, args, job id, GPUs on node, $NNIX_SETUP_MARK)`` of every fake agent started."""
    out = []
    for f in sorted((fake.parent / "out").glob("[0-9]*")):
        if not f.suffix:
            out.append(tuple(f.read_text().split("\n")[:5]))
    return out


def _launcher(tmp_path: Path, python: Path | str, **kw: Any) -> SlurmLauncher:
    return SlurmLauncher(experiment_id="texp", working_dir=tmp_path / "shared", python=str(python), **kw)


def _request(env_id: str, single: bool = False, token: str = "tok") -> EnvRequest:
    return EnvRequest(env_id, single, "http://127.0.0.1:9", token, ("--poll-interval", "0.1"))


def _spec(tmp_path: Path) -> TrialSpec:
    return TrialSpec("T1", "python3 t.py", tmp_path, tmp_path / "out", {})


def _trial_code(code: Path, steps: int = 3, step_s: float = 0.0) -> Path:
    code.mkdir(parents=True, exist_ok=True)
    (code / "trial.py").write_text(
        "import nni, os, time\np = nni.get_next_parameter()\n"
        f"for i in range({steps}):\n    nni.report_intermediate_result(i)\n    time.sleep({step_s})\n"
        "nni.report_final_result(p['x'])\nprint('job', os.environ.get('SLURM_JOB_ID'))\n"
    )
    return code


def _experiment(tmp_path: Path, *, trials: int, concurrency: int, steps: int = 3, step_s: float = 0.0,
                **service: Any) -> tuple[str, Path]:
    code = _trial_code(tmp_path / "code", steps, step_s)
    return make_experiment(code, searchSpace=SPACE, trialCommand="python3 trial.py", trialConcurrency=concurrency,
                           maxTrialNumber=trials, trainingService={"platform": "slurm", **service})


def _jobs(lab: SlurmLab, exp_id: str) -> dict[str, tuple[str, str]]:
    """Job id -> (state, environment id) of the jobs of one experiment."""
    out = {}
    for line in lab.run("squeue", "-h", "-t", "all", "-O", "JobID:|,State:|,Name:|").stdout.splitlines():
        job, state, name = line.split("|")[:3]
        if name.startswith(f"nnix-{exp_id}-"):
            out[job] = (state, name.removeprefix(f"nnix-{exp_id}-"))
    return out


def _running_trial(exp_dir: Path, metrics: int = 2) -> Callable[[], bool]:
    def check() -> bool:
        st = read_state(exp_dir)
        return any(t.status is TrialStatus.RUNNING and len(t.metrics) >= metrics for t in st.trials.values())

    return check


def _job_of(lab: SlurmLab, exp_id: str, env_id: str) -> str:
    return next(job for job, (_, env) in _jobs(lab, exp_id).items() if env == env_id)


# --- configuration, words, script (no Slurm needed) ----------------------------------------------
def test_config_fields_defaults_and_what_the_jobs_ask_for(tmp_path: Path) -> None:
    loaded = parse_config({**BASE, "trialGpuNumber": 2, "trainingService": {"platform": "slurm"}}, tmp_path)
    ts = loaded.config.training_service
    assert isinstance(ts, SlurmConfig)
    assert (ts.reuse_mode, ts.partition, ts.time_limit, ts.cpus_per_trial, ts.memory, ts.gres) == (
        True, None, None, 1, None, None)
    ctx = ServiceContext("exp1", tmp_path / "exp")
    launcher = SlurmLauncher.from_config(loaded.config, ctx)
    assert launcher.working_dir == tmp_path / "exp" / "slurm"
    assert launcher.directives == ["--nodes=1", "--ntasks=1", "--cpus-per-task=1", "--no-requeue", "--gres=gpu:2"]
    assert launcher.job_name("e1-abc") == "nnix-exp1-e1-abc"
    full = {"platform": "slurm", "partition": "gpu", "account": "proj42", "qos": "high", "timeLimit": "90m",
            "cpusPerTrial": 4, "memory": "8GB", "gres": "gpu:a100:1",
            "sbatchOptions": ["#SBATCH --constraint=a100", "--exclusive"], "setupCommands": ["module load cuda"],
            "pythonExecutable": "/opt/py/bin/python", "sharedWorkingDirectory": "shared/w", "reuseMode": False}
    cfg = parse_config({**BASE, "trainingService": full}, tmp_path).config
    launcher = SlurmLauncher.from_config(cfg, ctx)
    assert launcher.directives == [
        "--nodes=1", "--ntasks=1", "--cpus-per-task=4", "--no-requeue", "--partition=gpu", "--account=proj42",
        "--qos=high", "--time=0-01:30:00", "--mem=8G", "--gres=gpu:a100:1", "--constraint=a100", "--exclusive",
    ]
    shared = tmp_path / "shared" / "w"
    assert launcher.working_dir == shared
    placed = launcher.place(_spec(tmp_path))
    assert placed.output_dir == shared / "trials" / "T1" and placed.code_dir == tmp_path  # code stays (shared FS)
    assert launcher.output_location(_spec(tmp_path)) == str(shared / "trials" / "T1")  # a plain path
    # the stored form validates again to the same config (a resumed experiment reads it back)
    again = ExperimentConfig.model_validate(cfg.to_json())
    assert again.training_service == cfg.training_service


@pytest.mark.parametrize(("written", "slurm"), [
    ("2h", "0-02:00:00"), ("90m", "0-01:30:00"), ("1d", "1-00:00:00"), ("45s", "0-00:00:45"),
    ("1:30:00", "1:30:00"), ("2-12", "2-12"), ("30:00", "30:00"), ("unlimited", "UNLIMITED"),
])
def test_time_limits_in_both_forms(tmp_path: Path, written: str, slurm: str) -> None:
    cfg = parse_config({**BASE, "trainingService": {"platform": "slurm", "timeLimit": written}}, tmp_path).config
    assert isinstance(cfg.training_service, SlurmConfig)
    assert cfg.training_service.time_limit == slurm


def test_config_errors_name_the_field_and_give_a_hint(tmp_path: Path) -> None:
    bad = {"platform": "slurm", "timeLimit": 60, "memory": "lots", "partition": "my part", "cpusPerTrial": 0,
           "sbatchOptions": ["-J name", "exclusive", "--output=/x", "#SBATCH --mem=1G\n--exclusive"]}
    with pytest.raises(ConfigError) as err:
        parse_config({**BASE, "trainingService": bad}, tmp_path)
    text = str(err.value)
    assert ("trainingService.timeLimit: 60 is ambiguous: Slurm reads a bare number as minutes, nnix as seconds "
            "(hint: write the unit, e.g. 2h, 90m") in text
    assert "trainingService.memory: 'lots' is not an amount of memory" in text
    assert "trainingService.partition: 'my part' is not a valid Slurm name" in text
    assert "trainingService.cpusPerTrial" in text
    assert "trainingService.sbatchOptions[0]: -J is set by nnix: nnix names the jobs itself (hint: remove it)" in text
    assert "trainingService.sbatchOptions[1]: 'exclusive' is not an sbatch option" in text
    assert "trainingService.sbatchOptions[2]: --output is set by nnix" in text
    assert "trainingService.sbatchOptions[3]: must be one line" in text
    with pytest.raises(ConfigError) as err:
        parse_config({**BASE, "trialGpuNumber": 1, "trainingService": {"platform": "slurm", "gres": "gpu:1"}},
                     tmp_path)
    assert "trainingService.gres: asks for GPUs, and so does trialGpuNumber" in str(err.value)
    with pytest.raises(ConfigError, match="a time limit of zero means no limit"):
        parse_config({**BASE, "trainingService": {"platform": "slurm", "timeLimit": "0:00"}}, tmp_path)


def _words(st: EnvStatus) -> tuple[str, str]:
    return st.state, st.reason


def test_states_in_words() -> None:
    def words(state: str, reason: str = "", **kw: Any) -> tuple[str, str]:
        return _words(describe_state(state, reason, **kw))

    assert words("PENDING", "Resources") == ("pending", "Resources: waiting for free resources")
    assert words("PENDING", "None") == ("pending", "PENDING")
    assert words("PENDING", "AssocGrpGRES") == ("pending", "AssocGrpGRES")
    assert words("PENDING", "PartitionTimeLimit")[1].startswith(
        "PartitionTimeLimit: its time limit is above the partition's maximum")
    for state in ("RUNNING", "CONFIGURING", "COMPLETING"):
        assert words(state)[0] == "running"
    assert words("TIMEOUT", "TimeLimit", time_limit="1:00:00") == (
        "ended", "TIMEOUT: the job reached its Slurm time limit (1:00:00)")
    assert words("CANCELLED") == (
        "ended", "CANCELLED: the job was cancelled outside nnix (scancel, or an administrator)")
    assert words("CANCELLED by 0", stopped=True) == ("ended", "CANCELLED: stopped by nnix")
    assert words("FAILED", "NonZeroExitCode", exit_code=1, log_tail="ModuleNotFoundError: No module named 'nnix'") == (
        "ended", "FAILED: the job exited with status 1: ModuleNotFoundError: No module named 'nnix'")
    assert words("FAILED", exit_code=0, signal=9) == ("ended", "FAILED: the job was killed by signal 9")
    assert words("COMPLETED", exit_code=0) == ("ended", "COMPLETED: the job finished")
    assert words("OUT_OF_MEMORY") == (
        "ended", "OUT_OF_MEMORY: the job used more memory than it was given (raise trainingService.memory)")
    assert words("NODE_FAIL") == ("ended", "NODE_FAIL: the job's node failed")
    assert words("PREEMPTED")[1].startswith("PREEMPTED: the job was preempted")
    assert words("BOOT_FAIL") == ("ended", "BOOT_FAIL: the job's node failed to boot")
    assert words("DEADLINE") == ("ended", "DEADLINE: the job reached its deadline")
    assert words("SPECIAL_EXIT")[0] == "ended" and words("WEIRD_NEW_STATE") == ("ended", "WEIRD_NEW_STATE")


def test_job_script_reads_the_token_from_a_file(tmp_path: Path) -> None:
    text = job_script(env_dir=tmp_path / "my env", argv=["/opt/py 3/bin/python", "-m", "nnix.agent", "--single"],
                      directives=["--cpus-per-task=2", "--time=1:00:00"], setup=["module load python"],
                      header="nnix environment e1")
    lines = text.splitlines()
    assert lines[:3] == ["#!/bin/bash", "#SBATCH --cpus-per-task=2", "#SBATCH --time=1:00:00"]
    assert "module load python" in lines
    assert f"NNIX_AGENT_TOKEN=\"$(cat '{tmp_path}/my env/token')\"" in text
    assert lines[-1] == "exec '/opt/py 3/bin/python' -m nnix.agent --single"


def test_without_the_slurm_commands_prepare_says_where_to_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch, squeue... here
    launcher = _launcher(tmp_path, "python3")
    with pytest.raises(ServiceError) as err:
        asyncio.run(launcher.prepare())
    assert err.value.message == ("platform slurm needs the Slurm commands, and sbatch, squeue, scancel, sinfo are "
                                 "not on this machine's PATH")
    assert err.value.hint is not None and "login node" in err.value.hint


# --- the launcher against a real Slurm -----------------------------------------------------------
def test_launch_runs_the_agent_in_a_job_and_stop_cancels_it(tmp_path: Path, lab: SlurmLab, fake_agent: Path) -> None:
    launcher = _launcher(tmp_path, fake_agent, time_limit="10:00", memory="100M",
                         sbatch_options=["--comment=from-sbatch-options"],
                         setup_commands=["export NNIX_SETUP_MARK='set up'"])

    async def main() -> None:
        await launcher.prepare()
        assert launcher.advertise_host == "127.0.0.1"  # every node is this machine's loopback: listen there only
        h = await launcher.launch(_request("e1-abc123", token="s3cret-token"))
        assert h.isdigit()
        await _until(launcher, h, "running")
        wait_until(lambda: len(_recorded(fake_agent)) == 1, 60.0)
        ((token, args, job, _, mark),) = _recorded(fake_agent)
        assert token == "s3cret-token" and job == h  # the token reaches the agent in its environment...
        assert mark == "set up"  # setupCommands ran before the agent
        assert args.split() == ["-m", "nnix.agent", "--url", "http://127.0.0.1:9", "--environment", "e1-abc123",
                                "--poll-interval", "0.1"]
        env_dir = launcher.env_dir("e1-abc123")
        script = (env_dir / "job.sh").read_text()
        assert "s3cret-token" not in script  # ...never in the script Slurm keeps, nor in what it shows
        assert "#SBATCH --time=10:00" in script and "#SBATCH --mem=100M" in script
        shown = lab.run("scontrol", "show", "job", "-d", h).stdout
        assert "s3cret-token" not in shown
        assert "JobName=nnix-texp-e1-abc123" in shown and "TimeLimit=00:10:00" in shown
        assert "Comment=from-sbatch-options" in shown and "MinMemoryNode=100M" in shown
        assert stat.S_IMODE(env_dir.stat().st_mode) == 0o700
        assert stat.S_IMODE((env_dir / "token").stat().st_mode) == 0o600
        assert stat.S_IMODE((env_dir / "job.sh").stat().st_mode) == 0o700
        assert "fake agent: something went wrong" in launcher.log_path("e1-abc123").read_text()
        await launcher.stop(h)
        st = await _until(launcher, h, "ended")
        assert _words(st) == ("ended", "CANCELLED: stopped by nnix")
        assert not (env_dir / "token").exists()  # of no more use
        await launcher.stop(h)  # idempotent
        await launcher.close()

    asyncio.run(main())


def test_a_job_cancelled_outside_nnix_and_a_failing_agent_have_reasons(tmp_path: Path, lab: SlurmLab,
                                                                        fake_agent: Path) -> None:
    launcher = _launcher(tmp_path, fake_agent)

    async def main() -> None:
        await launcher.prepare()
        h = await launcher.launch(_request("e1-victim"))
        await _until(launcher, h, "running")
        lab.run("scancel", h)
        st = await _until(launcher, h, "ended")
        assert _words(st) == ("ended", "CANCELLED: the job was cancelled outside nnix (scancel, or an administrator)")
        (fake_agent.parent / "exit-code").write_text("3")
        h2 = await launcher.launch(_request("e2-fails", single=True))
        st = await _until(launcher, h2, "ended")
        assert _words(st) == ("ended", "FAILED: the job exited with status 3: fake agent: something went wrong")
        assert _recorded(fake_agent)[-1][1].split()[-3:] == ["--single", "--poll-interval", "0.1"]

    asyncio.run(main())


def test_a_python_missing_on_the_node_is_the_reason(tmp_path: Path, lab: SlurmLab) -> None:
    launcher = _launcher(tmp_path, tmp_path / "no" / "python")

    async def main() -> None:
        await launcher.prepare()
        h = await launcher.launch(_request("e1-nopy"))
        st = await _until(launcher, h, "ended")
        assert st.reason.startswith("FAILED: the job exited with status 127: ")
        assert st.reason.endswith(f"{tmp_path}/no/python: No such file or directory")

    asyncio.run(main())


def test_a_job_over_its_time_limit_ends_with_timeout(tmp_path: Path, lab: SlurmLab, fake_agent: Path) -> None:
    launcher = _launcher(tmp_path, fake_agent, time_limit="0-00:05:00")

    async def main() -> None:
        await launcher.prepare()
        h = await launcher.launch(_request("e1-slow"))
        await _until(launcher, h, "running")
        lab.run("scontrol", "update", f"JobId={h}", "TimeLimit=0")  # ends at Slurm's next check (< 30 s)
        st = await _until(launcher, h, "ended", 90)
        assert _words(st) == ("ended", "TIMEOUT: the job reached its Slurm time limit (0:00)")

    asyncio.run(main())


def test_a_job_waiting_for_resources_is_pending_with_the_reason(tmp_path: Path, lab: SlurmLab,
                                                                 fake_agent: Path) -> None:
    launcher = _launcher(tmp_path, fake_agent, cpus_per_task=2)  # the whole node

    async def main() -> None:
        await launcher.prepare()
        first = await launcher.launch(_request("e1-big"))
        await _until(launcher, first, "running")
        second = await launcher.launch(_request("e2-big"))
        st = await _until(launcher, second, "pending")
        deadline = time.monotonic() + 60
        while st.reason == "PENDING":  # not looked at by the scheduler yet
            assert time.monotonic() < deadline, f"the scheduler never looked at {second}: {st}"
            await asyncio.sleep(0.2)
            st = (await launcher.poll([second]))[second]
        assert _words(st) == ("pending", "Resources: waiting for free resources")
        await launcher.stop(first)
        await _until(launcher, second, "running")  # it starts once the node is free
        await launcher.stop(second)

    asyncio.run(main())


def test_trial_gpu_number_asks_slurm_for_gpus(tmp_path: Path, lab: SlurmLab, fake_agent: Path) -> None:
    cfg = parse_config({**BASE, "trialGpuNumber": 1, "trainingService": {
        "platform": "slurm", "pythonExecutable": str(fake_agent), "sharedWorkingDirectory": str(tmp_path / "w")}},
        tmp_path).config
    launcher = SlurmLauncher.from_config(cfg, ServiceContext("gexp", tmp_path / "exp"))

    async def main() -> None:
        await launcher.prepare()
        h = await launcher.launch(_request("e1-gpu"))
        await _until(launcher, h, "running")
        wait_until(lambda: len(_recorded(fake_agent)) == 1, 60.0)
        assert _recorded(fake_agent)[0][3] == "1"  # Slurm gave the job one of the node's (fake) GPUs
        assert "TresPerNode=gres:gpu:1" in lab.run("scontrol", "show", "job", h).stdout
        await launcher.stop(h)

    asyncio.run(main())


def test_refusals_are_clear_errors(tmp_path: Path, lab: SlurmLab, fake_agent: Path) -> None:
    bad = _launcher(tmp_path, fake_agent, partition="nope")
    with pytest.raises(ServiceError) as err:
        asyncio.run(bad.prepare())
    assert err.value.message == "Slurm has no partition 'nope'"
    assert err.value.hint == f"set trainingService.partition to one of: {lab.partition}"
    greedy = _launcher(tmp_path, fake_agent, gres="gpu:5")  # the node has 2

    async def submit() -> None:
        await greedy.prepare()
        await greedy.launch(_request("e1-greedy"))

    with pytest.raises(ServiceError) as err:
        asyncio.run(submit())
    assert err.value.message == ("Slurm refused the job of environment e1-greedy: "
                                 "Requested node configuration is not available")
    assert err.value.hint is not None and "gres" in err.value.hint


def test_an_unreachable_controller_is_named(tmp_path: Path, lab: SlurmLab, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    conf = tmp_path / "slurm.conf"
    conf.write_text(re.sub(r"SlurmctldPort=\d+", f"SlurmctldPort={port}", lab.conf.read_text()))
    monkeypatch.setenv("SLURM_CONF", str(conf))
    with pytest.raises(ServiceError) as err:
        asyncio.run(_launcher(tmp_path, "python3").prepare())
    assert err.value.message.startswith("the Slurm controller does not answer: ")
    assert "Unable to contact slurm controller" in err.value.message


def test_jobs_squeue_has_forgotten_are_read_from_sacct(tmp_path: Path, lab: SlurmLab, fake_agent: Path) -> None:
    if not lab.accounting:
        pytest.skip("!!! SLURM ACCOUNTING (slurmdbd + MariaDB) UNAVAILABLE — the sacct test did NOT run !!!")
    launcher = _launcher(tmp_path, fake_agent)
    (fake_agent.parent / "exit-code").write_text("4")

    async def main() -> None:
        await launcher.prepare()
        h = await launcher.launch(_request("e1-old"))
        await _until(launcher, h, "ended")
        lab.set_min_job_age(2)  # squeue forgets ended jobs after 2 s (Slurm purges them about every 10 s)
        try:
            wait_until(lambda: h not in lab.job_ids(), 90)
        finally:
            lab.set_min_job_age(300)
        st = (await launcher.poll([h]))[h]
        assert _words(st) == ("ended", "FAILED: the job exited with status 4: fake agent: something went wrong")
        other = SlurmLauncher(experiment_id="texp", working_dir=tmp_path / "shared")  # a resumed manager
        assert (await other.poll([h]))[h] == st  # finds its environment (and log) by the job's name

    asyncio.run(main())


# --- whole experiments ---------------------------------------------------------------------------
@pytest.mark.parametrize("reuse", [True, False], ids=["reuse", "non-reuse"])
def test_experiment_on_slurm(tmp_path: Path, lab: SlurmLab, reuse: bool) -> None:
    exp_id, exp_dir = _experiment(tmp_path, trials=5, concurrency=2, reuseMode=reuse, timeLimit="10m",
                                  memory="200M")
    st = run_experiment(exp_dir, timeout=180, **FAST)
    assert st.status is ExperimentStatus.DONE, st.message
    assert len(st.trials) == 5
    assert all(t.status is TrialStatus.SUCCEEDED for t in st.trials.values()), [t.message for t in st.trials.values()]
    jobs = _jobs(lab, exp_id)
    envs = {str(t.environment_id) for t in st.trials.values()}
    if reuse:
        assert 1 <= len(envs) <= 2  # at most one job per concurrent trial, each running several
    else:
        assert len(envs) == 5  # one job per trial
    assert envs <= {env for _, env in jobs.values()}
    for t in st.trials.values():
        assert [m.sequence for m in t.metrics if m.type is MetricType.PERIODICAL] == [0, 1, 2]
        assert sum(m.type is MetricType.FINAL for m in t.metrics) == 1
        out = Path(str(t.output_dir))
        assert out == exp_dir / "slurm" / "trials" / t.trial_id  # read by the manager where the job wrote it
        job = _job_of(lab, exp_id, str(t.environment_id))
        assert f"job {job}" in (out / "trial.stdout").read_text()  # it ran inside that Slurm job
    wait_until(lambda: all(state in ("COMPLETED", "CANCELLED") for state, _ in _jobs(lab, exp_id).values()), 30)
    assert set(_jobs(lab, exp_id)) == set(jobs)  # every job over, no job left behind
    assert all((exp_dir / "slurm" / "envs" / e / "agent.log").exists() for e in envs)
    assert not list((exp_dir / "slurm" / "envs").glob("*/token"))  # no token left once the jobs are over


def _run_in_background(exp_dir: Path, result: dict[str, Any], timeout: float = 180) -> threading.Thread:
    def run() -> None:
        result["st"] = run_experiment(exp_dir, timeout=timeout, **FAST)

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th


def test_trial_whose_job_is_cancelled_outside_fails_with_the_reason(tmp_path: Path, lab: SlurmLab) -> None:
    exp_id, exp_dir = _experiment(tmp_path, trials=1, concurrency=1, steps=6000, step_s=0.1)
    result: dict[str, Any] = {}
    th = _run_in_background(exp_dir, result)
    wait_until(_running_trial(exp_dir), 120)
    (trial,) = read_state(exp_dir).trials.values()
    job = _job_of(lab, exp_id, str(trial.environment_id))
    lab.run("scancel", job)
    th.join(120)
    st = result["st"]
    (trial,) = st.trials.values()
    assert trial.status is TrialStatus.FAILED
    assert trial.message == (f"its slurm environment {job} ended: CANCELLED: the job was cancelled outside nnix "
                             "(scancel, or an administrator)")


def test_trial_killed_by_the_time_limit_fails_with_timeout(tmp_path: Path, lab: SlurmLab) -> None:
    exp_id, exp_dir = _experiment(tmp_path, trials=1, concurrency=1, steps=6000, step_s=0.1, timeLimit="10m")
    result: dict[str, Any] = {}
    th = _run_in_background(exp_dir, result)
    wait_until(_running_trial(exp_dir), 120)
    (trial,) = read_state(exp_dir).trials.values()
    job = _job_of(lab, exp_id, str(trial.environment_id))
    lab.run("scontrol", "update", f"JobId={job}", "TimeLimit=0")
    th.join(150)
    st = result["st"]
    (trial,) = st.trials.values()
    assert trial.status is TrialStatus.FAILED
    assert trial.message == f"its slurm environment {job} ended: TIMEOUT: the job reached its Slurm time limit (0:00)"
    assert _jobs(lab, exp_id)[job][0] == "TIMEOUT"


def test_a_bad_partition_stops_the_experiment_with_the_reason(tmp_path: Path, lab: SlurmLab) -> None:
    _, exp_dir = _experiment(tmp_path, trials=1, concurrency=1, partition="nope")
    with pytest.raises(ServiceError, match="Slurm has no partition 'nope'"):
        run_experiment(exp_dir, timeout=60, **FAST)
    st = read_state(exp_dir)
    assert st.status is ExperimentStatus.ERROR
    assert st.message == "Slurm has no partition 'nope'"  # where users look (nnix view, the web UI)


def test_a_detached_manager_is_resumed_and_takes_its_jobs_over(tmp_path: Path, lab: SlurmLab) -> None:
    exp_id, exp_dir = _experiment(tmp_path, trials=2, concurrency=2, steps=60, step_s=0.1)

    def both_running() -> bool:
        st = read_state(exp_dir)
        return len(st.trials) == 2 and all(t.status is TrialStatus.RUNNING and len(t.metrics) >= 3
                                           for t in st.trials.values())

    detach_when(exp_dir, both_running, **FAST)
    saved = json.loads((exp_dir / "cluster.json").read_text())
    assert len(saved["envs"]) == 2
    running = {job for job, (state, _) in _jobs(lab, exp_id).items() if state == "RUNNING"}
    assert running == {e["handle"] for e in saved["envs"].values()}  # the jobs outlive their manager
    st = run_experiment(exp_dir, action="resume", timeout=120, **FAST)
    assert st.status is ExperimentStatus.DONE, st.message
    for t in st.trials.values():
        assert t.status is TrialStatus.SUCCEEDED, t.message
        assert [m.sequence for m in t.intermediate] == list(range(60))  # nothing lost, nothing twice
    assert set(_jobs(lab, exp_id)) == running  # taken over, no new job submitted


# --- a manager killed -9 at chosen points (nnix.testing.killpoints) ------------------------------------------------
def _live_jobs(lab: SlurmLab, exp_id: str) -> list[str]:
    return [f"{job} {state}" for job, (state, _) in _jobs(lab, exp_id).items()
            if state not in ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY")]


def _chain(tmp_path: Path, reuse: bool) -> Chain:
    gates = tmp_path / "gates"
    fields = chain_experiment(tmp_path / "code", gates, metrics=METRICS)
    exp_id, _ = make_experiment(tmp_path / "code", **{**fields, "trialConcurrency": 2, "maxTrialNumber": 4,
                                                     "trainingService": {"platform": "slurm", "reuseMode": reuse,
                                                                         "memory": "200M"}})
    return Chain(exp_id, tmp_path, gates, {**FAST, "lost_timeout": 20.0})


METRICS = 12


def test_a_manager_killed_at_each_point_of_an_environment_s_life_is_resumed(tmp_path: Path, lab: SlurmLab) -> None:
    """Non-reuse (an environment per trial): kill -9 before a job is submitted, after it was submitted but before
    its id was recorded, when its agent said hello, while trials run, just after one ended; each time resumed. Every
    trial succeeds, every metric is recorded once, nothing is logged as an ERROR (an environment that ended while no
    manager ran is no failed start), and no job or process of the experiment is left."""
    chain = _chain(tmp_path, reuse=False)
    kill_at_every_point_and_resume(chain, METRICS)
    assert settled(lambda: _live_jobs(lab, chain.exp_id)) == []


@pytest.mark.parametrize("verb", ["stop", "delete"])
def test_stop_or_delete_after_a_kill_cancels_every_job(tmp_path: Path, lab: SlurmLab, verb: str) -> None:
    """kill -9 while trials run (one job submitted and not yet recorded, too), then `nnix stop` or `nnix experiment
    delete`: every job of the experiment is cancelled, the trials shown RUNNING are USER_CANCELED (stop)."""
    from nnix.testing.faults import nnix

    chain = _chain(tmp_path, reuse=True)
    chain.kill_at("create", "running")
    jobs = _live_jobs(lab, chain.exp_id)
    assert jobs
    res = nnix("stop", chain.exp_id) if verb == "stop" else nnix("experiment", "delete", chain.exp_id, "--yes")
    assert res.returncode == 0, res.stderr
    assert "slurm: cancelled" in res.stdout and all(j.split()[0] in res.stdout for j in jobs), res.stdout
    assert settled(lambda: _live_jobs(lab, chain.exp_id)) == []
    assert settled(lambda: leftover_processes(chain.exp_id)) == []
    if verb == "stop":
        st = read_state(chain.exp_dir)
        assert st.status is ExperimentStatus.STOPPED
        assert {t.status for t in st.trials.values()} <= {TrialStatus.USER_CANCELED, TrialStatus.WAITING}
        assert any(t.status is TrialStatus.USER_CANCELED for t in st.trials.values())
