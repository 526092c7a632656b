"""The OpenPAI service against a local fake of OpenPAI's REST API that checks every request against the
documented protocol (method, path, bearer token, content type, job protocol v2) and, on submission, runs
the job's command as a local process (container mount point = local mount point), so a real experiment
runs through the OpenPAI launcher. Not a live OpenPAI cluster."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from nnix.config import OpenpaiConfig, parse_config
from nnix.core.status import ExperimentStatus, TrialStatus
from nnix.errors import ConfigError
from nnix.testing.experiments import make_experiment, run_experiment
from nnix.testing.openpai import TOKEN, FakePai
from nnix.testing.spaces import UNIT as SPACE


def _service(pai: FakePai, mount: Path, **extra: Any) -> dict[str, Any]:
    return {"platform": "openpai", "host": pai.url, "username": pai.user, "token": TOKEN, "trialCpuNumber": 2,
            "trialMemorySize": "1gb", "storageConfigName": "confs", "dockerImage": "python:3.11",
            "virtualCluster": "vc1", "localStorageMountPoint": str(mount), "containerStorageMountPoint": str(mount),
            **extra}


def _experiment(tmp_path: Path, pai: FakePai, reuse: bool = True, trials: int = 3, **extra: Any) -> Path:
    code = tmp_path / "code"
    code.mkdir()
    (code / "trial.py").write_text("import nni\np = nni.get_next_parameter()\nnni.report_intermediate_result(1)\n"
                                   "print('hello from pai')\nnni.report_final_result(p['x'])\n")
    mount = tmp_path / "mount"
    mount.mkdir()
    _, exp_dir = make_experiment(code, searchSpace=SPACE, trialCommand="python3 trial.py", trialConcurrency=2,
                                 maxTrialNumber=trials, trialGpuNumber=0, nniManagerIp="127.0.0.1",
                                 trainingService=_service(pai, mount, reuseMode=reuse, **extra))
    return exp_dir


FAST: dict[str, Any] = {"engine_poll_interval": 0.2, "poll_interval": 0.05}


@pytest.mark.parametrize("reuse", [True, False], ids=["reuse", "non-reuse"])
def test_an_experiment_runs_through_openpai_jobs(tmp_path: Path, pai: FakePai, reuse: bool) -> None:
    exp_dir = _experiment(tmp_path, pai, reuse=reuse)
    st = run_experiment(exp_dir, timeout=90, **FAST)
    assert st.status is ExperimentStatus.DONE, st.message
    assert [t.status for t in st.trials.values()] == [TrialStatus.SUCCEEDED] * 3
    assert not pai.problems
    for t in st.trials.values():
        assert t.final is not None
        assert (Path(str(t.output_dir)) / "trial.stdout").read_text() == "hello from pai\n"  # read where it ran
    names = list(pai.jobs)
    assert all(n.startswith(f"nni_exp_{st.experiment_id}_env_") for n in names)
    if not reuse:
        assert len(names) >= 3  # one job per trial
    else:
        assert len(names) <= 2  # never more jobs than trials running at once
    job = pai.jobs[names[0]]
    assert job["protocolVersion"] == 2 and job["type"] == "job" and job["jobRetryCount"] == 0
    assert job["prerequisites"] == [{"type": "dockerimage", "uri": "python:3.11", "name": "docker_image_0"}]
    role = job["taskRoles"]["taskrole"]
    assert role["resourcePerInstance"] == {"gpu": 0, "cpu": 2, "memoryMB": 1024}
    assert role["dockerImage"] == "docker_image_0" and role["instances"] == 1
    assert job["extras"]["storages"] == [{"name": "confs"}] and job["defaults"] == {"virtualCluster": "vc1"}
    assert TOKEN not in json.dumps(pai.jobs)  # credentials never in a job protocol
    # every job ends (stopped, or its agent exits when told to): the manager does not wait for the processes to
    # be reaped, so give them a bounded time rather than racing the exit
    deadline = time.monotonic() + 30
    while any(p.poll() is None for p in pai.procs.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(p.poll() is not None for p in pai.procs.values())


def test_user_protocol_commands_run_before_the_agent(tmp_path: Path, pai: FakePai) -> None:
    marker = tmp_path / "setup-ran"
    protocol = {"protocolVersion": 2, "name": "mine", "type": "job",
                "prerequisites": [{"type": "dockerimage", "uri": "custom:1", "name": "img"}],
                "taskRoles": {"main": {"instances": 1, "dockerImage": "img", "commands": [f"touch {marker}", "true"],
                                       "resourcePerInstance": {"gpu": 0, "cpu": 1, "memoryMB": 512}}}}
    exp_dir = _experiment(tmp_path, pai, trials=1, openpaiConfig=protocol)
    st = run_experiment(exp_dir, timeout=60, **FAST)
    assert [t.status for t in st.trials.values()] == [TrialStatus.SUCCEEDED]
    assert marker.exists()
    job = next(iter(pai.jobs.values()))
    assert job["name"].startswith("nni_exp_") and job["prerequisites"][0]["uri"] == "custom:1"
    command = job["taskRoles"]["main"]["commands"]
    assert len(command) == 1 and command[0].startswith(f"touch {marker} && true && ")
    assert job["taskRoles"]["main"]["resourcePerInstance"]["memoryMB"] == 512  # the user's resources kept


def test_a_wrong_token_is_a_clear_error_without_the_token(tmp_path: Path, pai: FakePai) -> None:
    exp_dir = _experiment(tmp_path, pai, trials=1, token="wrong-token")
    with pytest.raises(Exception) as e:
        run_experiment(exp_dir, timeout=30, **FAST)
    text = str(e.value)
    assert "refused user 'alice'" in text and "wrong-token" not in text
    assert pai.requests and all(m == "GET" for m, _ in pai.requests)  # nothing submitted


def test_config_rules(tmp_path: Path) -> None:
    base = {"searchSpace": SPACE, "trialCommand": "python3 t.py", "trialConcurrency": 1, "tuner": {"name": "Random"}}
    fake = FakePai.__new__(FakePai)
    fake.url, fake.user = "pai.example.com", "alice"
    ts = _service(fake, tmp_path)
    loaded = parse_config({**base, "trialGpuNumber": 1, "trainingService": ts}, tmp_path)
    cfg = loaded.config.training_service
    assert isinstance(cfg, OpenpaiConfig) and cfg.trial_memory_size == 1024
    with pytest.raises(ConfigError, match="trialGpuNumber"):
        parse_config({**base, "trainingService": ts}, tmp_path)
    with pytest.raises(ConfigError, match="mutually exclusive"):
        parse_config({**base, "trialGpuNumber": 0, "trainingService": {
            **ts, "openpaiConfig": {}, "openpaiConfigFile": str(tmp_path / "p.yml")}}, tmp_path)
    with pytest.raises(ConfigError, match="containerStorageMountPoint"):
        parse_config({**base, "trialGpuNumber": 0, "trainingService": {**ts, "containerStorageMountPoint": "x"}},
                     tmp_path)
    stored = loaded.config.to_json()
    assert stored["trainingService"]["token"] != TOKEN


def test_a_v1_pai_config_lands_in_the_openpai_schema(tmp_path: Path) -> None:
    (tmp_path / "search_space.json").write_text(json.dumps(SPACE))
    mount = tmp_path / "mount"
    mount.mkdir()
    v1 = {
        "authorName": "me", "experimentName": "demo", "trialConcurrency": 1, "trainingServicePlatform": "pai",
        "searchSpacePath": "search_space.json", "tuner": {"builtinTunerName": "TPE"},
        "trial": {"command": "python3 main.py", "codeDir": ".", "gpuNum": 1, "cpuNum": 2, "memoryMB": 4096,
                  "image": "img:1", "virtualCluster": "vc", "paiStorageConfigName": "st",
                  "nniManagerNFSMountPath": str(mount), "containerNFSMountPath": "/mnt/pai"},
        "paiConfig": {"userName": "alice", "token": TOKEN, "host": "pai.example.com", "reuse": True},
    }
    cfg = parse_config(v1, tmp_path).config
    ts = cfg.training_service
    assert isinstance(ts, OpenpaiConfig), ts
    assert (ts.username, ts.host, ts.trial_cpu_number, ts.trial_memory_size) == ("alice", "pai.example.com", 2, 4096)
    assert (ts.docker_image, ts.virtual_cluster, ts.storage_config_name) == ("img:1", "vc", "st")
    assert ts.container_storage_mount_point == "/mnt/pai" and cfg.trial_gpu_number == 1
    assert ts.token.get_secret_value() == TOKEN
