"""The Ray service on a real Ray: a head on 127.0.0.1 started as a separate process (``ray_lab``), nnix's own
private heads (one per experiment, outliving a killed manager; managers run as processes of their own and are
killed with SIGKILL), and worker nodes in network namespaces (one test). The launcher is driven directly with a
stand-in agent (a shell script that records what it got and starts a "trial" in a session of its own), then
whole experiments run through the manager with the real agent."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nnix.config import RayConfig, parse_config
from nnix.core.status import ExperimentStatus, MetricType, TrialStatus
from nnix.errors import ConfigError, ServiceError
from nnix.home import read_state
from nnix.services import rayhead
from nnix.services.base import ServiceContext
from nnix.services.cluster import EnvRequest, EnvStatus
from nnix.services.ray import RayLauncher, describe_exit, describe_ray_error
from nnix.testing import wait_until
from nnix.testing.experiments import make_experiment, run_experiment
from nnix.testing.killpoints import (
    Chain,
    assert_stopped_with_its_running_trials_canceled,
    audited,
    chain_experiment,
    errors_logged,
    kill_at_every_point_and_resume,
    leftover_processes,
    settled,
)
from nnix.testing.ray import PrivateHeads, RayLab, RayNetnsLab, netns_unavailable
from nnix.testing.spaces import UNIT as SPACE

FAST: dict[str, Any] = {"engine_poll_interval": 0.2, "end_grace": 0.5, "poll_interval": 0.05, "kill_grace": 1.0}

FAKE_AGENT = """#!/bin/bash
# stands in for `python -m nnix.agent ...`: records what it got, starts a "trial" in a session of its own
d="$(dirname "$0")/out"; mkdir -p "$d"
setsid sleep 1000 & trial=$!
cf=; prev=; for a in "$@"; do [ "$prev" = --connect-file ] && cf=$a; prev=$a; done
printf '%s\\n%s\\n%s\\n' "$trial" "$(cat "$cf" 2>/dev/null)" "$*" > "$d/$$.tmp" && mv "$d/$$.tmp" "$d/$$"
echo "fake agent: something went wrong" >&2
[ -f "$(dirname "$0")/exit-code" ] && exit "$(cat "$(dirname "$0")/exit-code")"
exec sleep 1000
"""


# --- fixtures ------------------------------------------------------------------------------------
@pytest.fixture
def fake_agent(tmp_path: Path) -> Path:
    script = tmp_path / "fake" / "agent.sh"
    script.parent.mkdir()
    script.write_text(FAKE_AGENT)
    script.chmod(0o755)
    return script


# --- helpers -------------------------------------------------------------------------------------
async def _until(launcher: RayLauncher, handle: str, state: str, timeout: float = 60.0) -> EnvStatus:
    deadline = time.monotonic() + timeout
    while True:
        st = (await launcher.poll([handle]))[handle]
        if st.state == state:
            return st
        if time.monotonic() > deadline:
            raise AssertionError(f"{handle} did not become {state}: {st}")
        await asyncio.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :][:1] not in (b"Z", b"X")


def _recorded(fake: Path) -> list[tuple[int, int, str, str]]:
    """``(agent pid, trial pid, its connect file's text, args)`` of every fake agent started."""
    out = []
    for f in sorted((fake.parent / "out").glob("[0-9]*")):
        if f.suffix:
            continue
        trial, token, args = f.read_text().splitlines()[:3]
        out.append((int(f.name), int(trial), token, args))
    return out


def _launcher(tmp_path: Path, fake: Path, address: str | None, **kw: Any) -> RayLauncher:
    return RayLauncher(experiment_id=f"t{secrets.token_hex(4)}", working_dir=tmp_path / "wd", address=address,
                       python=str(fake), kill_grace=1.0, **kw)


def _request(env_id: str, single: bool = False, token: str = "tok") -> EnvRequest:
    return EnvRequest(env_id, single, "http://127.0.0.1:9", token, ("--poll-interval", "0.1"))


def _trial_code(code: Path, steps: int = 3) -> None:
    code.mkdir(parents=True, exist_ok=True)
    (code / "trial.py").write_text(
        "import nni, os, socket\np = nni.get_next_parameter()\n"
        f"for i in range({steps}):\n    nni.report_intermediate_result(i)\n"
        "nni.report_final_result(p['x'])\nprint('mark', os.environ.get('NNIX_RAY_MARK'))\n"
        "print('ran on', socket.gethostname())\n"
    )


def _long_trial(tmp_path: Path) -> Path:
    """A trial that reports a metric every 0.1 s for ten minutes."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "trial.py").write_text("import nni, time\nnni.get_next_parameter()\nfor i in range(6000):\n"
                                   "    nni.report_intermediate_result(i)\n    time.sleep(0.1)\n")
    return code


def _ray_experiment(tmp_path: Path, service: dict[str, Any], *, trials: int, concurrency: int) -> tuple[str, Path]:
    code = tmp_path / "code"
    _trial_code(code)
    return make_experiment(code, searchSpace=SPACE, trialCommand="python3 trial.py", trialConcurrency=concurrency,
                           maxTrialNumber=trials, trainingService={"platform": "ray", **service})


def _agents_of(env_ids: set[str]) -> list[int]:
    """Live agent processes started for one of ``env_ids``."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"nnix.agent" in argv and any(f"/envs/{e}/".encode() in a for e in env_ids for a in argv) and _alive(
                int(name)):
            pids.append(int(name))
    return pids


def _assert_all_succeeded(st: Any, n: int) -> None:
    assert st.status is ExperimentStatus.DONE, st.message
    assert len(st.trials) == n
    assert all(t.status is TrialStatus.SUCCEEDED for t in st.trials.values()), [t.message for t in st.trials.values()]
    for t in st.trials.values():
        assert [m.sequence for m in t.metrics if m.type is MetricType.PERIODICAL] == [0, 1, 2]
        assert sum(m.type is MetricType.FINAL for m in t.metrics) == 1


# --- configuration and messages (no Ray needed) --------------------------------------------------
def test_config_fields_and_defaults(tmp_path: Path) -> None:
    base = {"searchSpace": SPACE, "trialCommand": "python3 t.py", "trialCodeDirectory": str(tmp_path),
            "trialConcurrency": 1, "tuner": {"name": "Random"}, "trialGpuNumber": 2}
    loaded = parse_config({**base, "trainingService": {"platform": "ray"}}, tmp_path)
    ts = loaded.config.training_service
    assert isinstance(ts, RayConfig)
    assert (ts.address, ts.num_cpus, ts.num_gpus, ts.resources, ts.reuse_mode) == (None, 1, None, {}, True)
    ctx = ServiceContext("exp1", tmp_path / "exp")
    launcher = RayLauncher.from_config(loaded.config, ctx)
    assert launcher.demand == {"CPU": 1, "GPU": 2}  # numGpus defaults to trialGpuNumber
    assert launcher.working_dir == tmp_path / "exp" / "ray"
    assert launcher.advertise_host == "127.0.0.1"  # a private Ray on loopback
    full = {"platform": "ray", "address": "10.0.0.1:6379", "numCpus": 0.5, "numGpus": 0, "resources": {"TPU": 1},
            "runtimeEnv": {"env_vars": {"A": "1"}}, "pythonExecutable": "/opt/py/bin/python",
            "workingDirectory": "shared/w", "reuseMode": False}
    cfg = parse_config({**base, "trainingService": full}, tmp_path).config
    launcher = RayLauncher.from_config(cfg, ctx)
    assert launcher.demand == {"CPU": 0.5, "TPU": 1}
    assert launcher.advertise_host != "127.0.0.1"  # this machine's address on the route to 10.0.0.1, if any
    assert launcher.working_dir == tmp_path / "shared" / "w"
    assert launcher.place(_spec(tmp_path)).output_dir == tmp_path / "shared" / "w" / "trials" / "T1"
    with pytest.raises(ConfigError) as err:
        parse_config({**base, "trainingService": {"platform": "ray", "resources": {"CPU": 2}, "numCpus": -1,
                                                  "numGpus": "1", "address": "http://head/"}}, tmp_path)
    text = str(err.value)
    assert "trainingService.resources" in text and "numCpus" in text and "trainingService.numGpus" in text
    assert "trainingService.address: 'http://head/' is not a Ray cluster address" in text


def _spec(tmp_path: Path) -> Any:
    from nnix.model.runs import TrialSpec

    return TrialSpec("T1", "python3 t.py", tmp_path, tmp_path / "out", {})


def test_reasons_in_words() -> None:
    class ActorDiedError(Exception):
        pass

    node = ActorDiedError("The actor died unexpectedly before finishing this task.\n\tclass_name: NnixEnvironment\n"
                          "\tip: 10.0.0.2\nThe actor died because its node has died. Node Id: 4f2a")
    assert describe_ray_error(node) == "node died: The actor died because its node has died. Node Id: 4f2a"
    killed = ActorDiedError("The actor died unexpectedly before finishing this task.\n\tpid: 7\n"
                            "The actor is dead because it was killed by `ray.kill`.")
    assert describe_ray_error(killed) == "actor died: The actor is dead because it was killed by `ray.kill`."
    assert describe_exit({"status": 3, "tail": "Traceback...\nModuleNotFoundError: No module named 'nnix'\n"}) == (
        "agent exited with status 3: ModuleNotFoundError: No module named 'nnix'")
    assert describe_exit({"status": 0, "tail": ""}) == "agent exited with status 0"
    killed_exit = describe_exit({"status": -signal.SIGKILL, "why": "stop requested"})
    assert killed_exit == "agent killed by SIGKILL (stop requested)"


def test_without_ray_installed_prepare_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    launcher = RayLauncher(experiment_id="x", working_dir=tmp_path / "wd")
    with pytest.raises(ServiceError) as err:
        asyncio.run(launcher.prepare())
    assert "needs the ray package" in err.value.message
    assert err.value.hint == "install Ray where the manager runs: pip install 'nnix[ray]'"


def test_unreachable_address_is_a_service_error(tmp_path: Path, ray_env: dict[str, str]) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    launcher = RayLauncher(experiment_id="x", working_dir=tmp_path / "wd", address=f"127.0.0.1:{port}")
    with pytest.raises(ServiceError, match="cannot reach the Ray cluster"):
        asyncio.run(launcher.prepare())
    assert os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") is None  # the loopback pin is undone


# --- the launcher against a real head ------------------------------------------------------------
def test_launch_runs_the_agent_and_stop_kills_it_with_its_trials(tmp_path: Path, ray_lab: RayLab,
                                                                 fake_agent: Path) -> None:
    launcher = _launcher(tmp_path, fake_agent, ray_lab.address)

    async def main() -> None:
        await launcher.prepare()
        assert launcher.advertise_host == "127.0.0.1"  # a loopback cluster: agents reach the manager there
        try:
            h = await launcher.launch(_request("e1-abc123", token="s3cret"))
            assert h == "e1-abc123"
            await _until(launcher, h, "running")
            wait_until(lambda: len(_recorded(fake_agent)) == 1, 60.0)
            ((agent, trial, connect, args),) = _recorded(fake_agent)
            connect_file = launcher.log_path(h).with_name("agent.json")
            # the token comes in its connect file (mode 0600)...
            assert json.loads(connect) == {"url": "http://127.0.0.1:9", "environment_id": "e1-abc123",
                                           "token": "s3cret"}
            assert connect_file.stat().st_mode & 0o777 == 0o600
            assert b"s3cret" not in Path(f"/proc/{agent}/cmdline").read_bytes()  # ...never on the command line
            assert b"s3cret" not in Path(f"/proc/{agent}/environ").read_bytes()
            assert args.split() == ["-m", "nnix.agent", "--connect-file", str(connect_file), "--poll-interval", "0.1"]
            assert _alive(agent) and _alive(trial)
            # the agent records itself before it writes to its log: under load the line may come a moment later
            wait_until(lambda: "fake agent: something went wrong" in launcher.log_path(h).read_text(), 30,
                       "the agent's output in its log", show=lambda: launcher.log_path(h).read_text())
            await launcher.stop(h)
            assert (await launcher.poll([h]))[h] == EnvStatus("ended", "stopped")
            wait_until(lambda: not _alive(agent) and not _alive(trial), 15)  # the trial's own session too
            await launcher.stop(h)  # idempotent
            assert (await launcher.poll(["never-launched"]))["never-launched"].state == "ended"
        finally:
            await launcher.close()

    asyncio.run(main())


def test_agent_exit_ends_the_environment_with_its_status(tmp_path: Path, ray_lab: RayLab, fake_agent: Path) -> None:
    (fake_agent.parent / "exit-code").write_text("3")
    launcher = _launcher(tmp_path, fake_agent, ray_lab.address, num_cpus=2)

    async def main() -> None:
        import ray

        await launcher.prepare()
        try:
            h = await launcher.launch(_request("e1-exit", single=True))
            st = await _until(launcher, h, "ended")
            assert st.reason == "agent exited with status 3: fake agent: something went wrong"
            ((_, trial, _, args),) = _recorded(fake_agent)
            assert args.split()[-3:] == ["--single", "--poll-interval", "0.1"]
            wait_until(lambda: not _alive(trial), 15)  # what the agent left behind is killed
            # its CPUs are given back at once: a second environment wanting the whole cluster starts
            (fake_agent.parent / "exit-code").unlink()
            h2 = await launcher.launch(_request("e2-exit"))
            await _until(launcher, h2, "running")
            assert ray.available_resources().get("CPU", 0) == 0  # type: ignore[no-untyped-call]
            await launcher.stop(h2)
        finally:
            await launcher.close()

    asyncio.run(main())


def test_more_than_the_cluster_has_stays_pending_with_a_reason(tmp_path: Path, ray_lab: RayLab,
                                                               fake_agent: Path) -> None:
    big = _launcher(tmp_path, fake_agent, ray_lab.address, num_cpus=64)

    async def main() -> None:
        await big.prepare()
        try:
            h = await big.launch(_request("e1-big"))
            st = (await big.poll([h]))[h]
            assert st.state == "pending"
            assert st.reason.startswith("waiting for resources: {'CPU': 64}")
            assert "the whole cluster has {'CPU': 2}" in st.reason
            custom = RayLauncher(experiment_id="tpu", working_dir=tmp_path / "wd", address=ray_lab.address,
                                 num_cpus=1, resources={"TPU": 1}, python=str(fake_agent))
            await custom.prepare()  # shares this process's connection
            h2 = await custom.launch(_request("e2-tpu"))
            st2 = (await custom.poll([h2]))[h2]
            assert st2 == EnvStatus("pending", "waiting for resources: {'CPU': 1, 'TPU': 1} (the whole cluster has "
                                               "{'TPU': 0}: it cannot start until a node with more joins)")
            await custom.stop(h2)
            await big.stop(h)
            assert (await big.poll([h]))[h] == EnvStatus("ended", "stopped")
            assert _recorded(fake_agent) == []  # never ran
        finally:
            await big.close()

    asyncio.run(main())


def test_killed_actor_ends_with_a_reason_and_takes_its_agent_down(tmp_path: Path, ray_lab: RayLab,
                                                                  fake_agent: Path) -> None:
    launcher = _launcher(tmp_path, fake_agent, ray_lab.address)

    async def main() -> None:
        import ray

        await launcher.prepare()
        try:
            h = await launcher.launch(_request("e1-victim"))
            await _until(launcher, h, "running")
            wait_until(lambda: len(_recorded(fake_agent)) == 1, 60.0)
            ((agent, trial, _, _),) = _recorded(fake_agent)
            ray.kill(ray.get_actor(h, namespace=launcher.namespace))
            st = await _until(launcher, h, "ended")
            assert st.reason == "actor died: The actor is dead because it was killed by `ray.kill`."
            wait_until(lambda: not _alive(agent) and not _alive(trial), 15)
        finally:
            await launcher.close()

    asyncio.run(main())


def test_a_new_manager_finds_the_environments_of_the_earlier_one(tmp_path: Path, ray_lab: RayLab,
                                                                 fake_agent: Path) -> None:
    first = _launcher(tmp_path, fake_agent, ray_lab.address)
    second = RayLauncher(experiment_id=first.namespace.removeprefix("nnix-"), working_dir=tmp_path / "wd",
                         address=ray_lab.address, python=str(fake_agent), kill_grace=1.0)

    async def main() -> None:
        await first.prepare()
        try:
            h = await first.launch(_request("e1-kept"))
            await _until(first, h, "running")
            await second.prepare()  # on a shared cluster the actors are named and detached
            assert (await second.poll(["e9-unknown"])) == {"e9-unknown": EnvStatus("ended", "gone")}
            await _until(second, h, "running")  # found by its name in the experiment's namespace
            await second.stop(h)
            await _until(first, h, "ended")  # the earlier one hears of it too (its own call's answer may lag)
        finally:
            await second.close()
            await first.close()

    asyncio.run(main())


def test_missing_python_on_the_node_is_the_reason(tmp_path: Path, ray_lab: RayLab) -> None:
    launcher = _launcher(tmp_path, tmp_path / "no" / "python", ray_lab.address)

    async def main() -> None:
        await launcher.prepare()
        try:
            h = await launcher.launch(_request("e1-nopy"))
            st = await _until(launcher, h, "ended")
            assert st.reason.startswith(f"the agent could not start: cannot run {tmp_path}/no/python")
        finally:
            await launcher.close()

    asyncio.run(main())


# --- whole experiments ---------------------------------------------------------------------------
@pytest.mark.parametrize("reuse", [True, False], ids=["reuse", "non-reuse"])
def test_experiment_on_a_ray_cluster(tmp_path: Path, ray_lab: RayLab, reuse: bool) -> None:
    service = {"address": ray_lab.address, "reuseMode": reuse, "runtimeEnv": {"env_vars": {"NNIX_RAY_MARK": "rt"}}}
    _, exp_dir = _ray_experiment(tmp_path, service, trials=5, concurrency=2)
    st = run_experiment(exp_dir, timeout=180, **FAST)
    _assert_all_succeeded(st, 5)
    envs = {str(t.environment_id) for t in st.trials.values()}
    if reuse:
        assert 1 <= len(envs) <= 2  # at most one environment per concurrent trial, each running several
    else:
        assert len(envs) == 5  # one environment per trial
    for t in st.trials.values():
        out = Path(str(t.output_dir))
        assert out == exp_dir / "ray" / "trials" / t.trial_id
        assert "mark rt\nran on" in (out / "trial.stdout").read_text()  # runtimeEnv reaches the trial
    assert all((exp_dir / "ray" / "envs" / e / "agent.log").exists() for e in envs)
    wait_until(lambda: not _agents_of(envs), 20)  # every agent gone with the experiment


def test_trial_whose_actor_is_killed_fails_with_the_reason(tmp_path: Path, ray_lab: RayLab) -> None:
    code = _long_trial(tmp_path)
    exp_id, exp_dir = make_experiment(code, searchSpace=SPACE, trialCommand="python3 trial.py", maxTrialNumber=1,
                                      trainingService={"platform": "ray", "address": ray_lab.address})
    killed: list[str] = []

    def kill_its_actor() -> None:
        import ray

        def running() -> bool:
            st = read_state(exp_dir)
            return any(t.status is TrialStatus.RUNNING and len(t.metrics) >= 2 for t in st.trials.values())

        wait_until(running, 120)
        (trial,) = read_state(exp_dir).trials.values()
        assert trial.environment_id is not None
        ray.kill(ray.get_actor(trial.environment_id, namespace=f"nnix-{exp_id}"))  # the manager's connection
        killed.append(trial.environment_id)

    th = threading.Thread(target=kill_its_actor, daemon=True)
    th.start()
    st = run_experiment(exp_dir, timeout=180, **FAST)
    th.join(10)
    assert killed
    (trial,) = st.trials.values()
    assert trial.status is TrialStatus.FAILED
    assert trial.message == (f"its ray environment {killed[0]} ended: actor died: "
                             "The actor is dead because it was killed by `ray.kill`.")
    wait_until(lambda: not _agents_of(set(killed)), 20)  # its agent (and trial) went down with the actor


def test_experiment_on_a_private_ray(tmp_path: Path, ray_env: dict[str, str], heads: PrivateHeads) -> None:
    _, exp_dir = _ray_experiment(tmp_path, {"reuseMode": True}, trials=3, concurrency=1)
    done = threading.Event()

    def note_head() -> None:  # its record goes when it stops
        while heads.seen(exp_dir) is None and not done.wait(0.05):  # ends with the experiment at the latest
            pass

    th = threading.Thread(target=note_head, daemon=True)
    th.start()
    try:
        st = run_experiment(exp_dir, timeout=180, **FAST)
    finally:
        done.set()
        th.join(10)
    _assert_all_succeeded(st, 3)
    import ray

    assert not ray.is_initialized()  # the private Ray is shut down with the experiment
    assert os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") is None
    assert os.environ.get("RAY_AUTH_MODE") == ray_env["RAY_AUTH_MODE"]  # its own token was this process's for a while
    assert os.environ.get("RAY_AUTH_TOKEN") == ray_env["RAY_AUTH_TOKEN"]
    (head,) = heads.heads.values()
    assert _head_gone(head) and rayhead.read(exp_dir) is None  # stopped with the experiment, nothing left


# --- the private head outlives its manager -------------------------------------------------------
WAIT_FOR_GO = """import nni, os, time
p = nni.get_next_parameter()
nni.report_intermediate_result(0)
nni.report_intermediate_result(1)
go = os.path.join(os.path.dirname(os.path.abspath(__file__)), "go")
deadline = time.monotonic() + 600
while not os.path.exists(go) and time.monotonic() < deadline:
    time.sleep(0.05)
nni.report_intermediate_result(2)
nni.report_final_result(p["x"])
"""


@pytest.fixture
def heads(ray_env: dict[str, str]) -> Iterator[PrivateHeads]:
    guard = PrivateHeads()
    try:
        yield guard
    finally:
        guard.down()


def _waiting_experiment(tmp_path: Path, name: str, *, trials: int, concurrency: int,
                        **service: Any) -> tuple[str, Path, Path]:
    """A private-Ray experiment whose trials report 0 and 1, then wait for ``<code>/go`` to report 2 and end."""
    code = tmp_path / name
    code.mkdir()
    (code / "trial.py").write_text(WAIT_FOR_GO)
    exp_id, exp_dir = make_experiment(code, searchSpace=SPACE, trialCommand="python3 trial.py",
                                      trialConcurrency=concurrency, maxTrialNumber=trials,
                                      trainingService={"platform": "ray", **service})
    return exp_id, exp_dir, code


def _running(exp_dir: Path, n: int) -> bool:
    st = read_state(exp_dir)
    return sum(t.status is TrialStatus.RUNNING and len(t.metrics) >= 2 for t in st.trials.values()) >= n


def _head_gone(head: Any) -> bool:
    """Nothing of ``head`` is left: neither its keeper nor any process naming its temporary directory."""
    return rayhead.proc_start(head.keeper_pid) is None and not rayhead.naming(head.temp_dir)


def _user_with_a_ray_token(tmp_path: Path) -> dict[str, str]:
    """A user's environment with Ray's token authentication on (``~/.ray/auth_token``, ``RAY_AUTH_MODE=token``)."""
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text(secrets.token_hex(32))
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}
    return {**env, "HOME": str(home), "RAY_AUTH_MODE": "token"}


def test_a_killed_managers_private_ray_keeps_its_trials_for_resume(tmp_path: Path, heads: PrivateHeads) -> None:
    exp_id, exp_dir, code = _waiting_experiment(tmp_path, "code", trials=3, concurrency=2)
    env = _user_with_a_ray_token(tmp_path)
    first = heads.manager(exp_id, "create", tmp_path / "first.out", env=env, **FAST)
    wait_until(lambda: _running(exp_dir, 2) or first.poll() is not None, 240)
    assert first.poll() is None, (tmp_path / "first.out").read_text()[-3000:]
    head = heads.seen(exp_dir)
    assert head is not None and head.experiment_id == exp_id and head.owner_pid == first.pid
    assert head.address.startswith("127.0.0.1:")
    before = {t.trial_id: t for t in read_state(exp_dir).trials.values() if t.status is TrialStatus.RUNNING}
    agents = _agents_of({str(t.environment_id) for t in before.values()})
    assert agents and set(agents) <= set(rayhead.descendants(head.keeper_pid))  # guardians and agents: its keeper's
    first.kill()  # kill -9 of the manager mid-trial
    first.wait()
    assert rayhead.check(head, exp_id) is None  # its head runs on without it...
    assert any(b"gcs_server" in Path(f"/proc/{p}/cmdline").read_bytes() for p in rayhead.naming(head.temp_dir))
    assert all(t.pid is not None and _alive(t.pid) for t in before.values())  # ...and so do its trials
    (code / "go").write_text("")  # they end while no manager runs: their agents keep what they report
    second = heads.manager(exp_id, "resume", tmp_path / "second.out", env=env, **FAST)
    assert second.wait(300) == 0, (tmp_path / "second.out").read_text()[-3000:]
    st = read_state(exp_dir)
    _assert_all_succeeded(st, 3)  # every metric once, across the crash
    assert f"took over the private Ray head of the earlier manager at {head.address}" in (
        exp_dir / "log" / "manager.log").read_text()
    assert {st.trials[t].environment_id for t in before} == {t.environment_id for t in before.values()}
    wait_until(lambda: _head_gone(head), 60)  # stopped with the experiment: no Ray process left
    assert rayhead.read(exp_dir) is None and not Path(head.temp_dir).exists()
    assert not any(_alive(t.pid) for t in st.trials.values() if t.pid is not None)


def test_a_resumed_manager_whose_port_was_taken_points_the_running_agents_at_its_new_one(tmp_path: Path,
                                                                                         heads: PrivateHeads) -> None:
    """While the killed manager is away, something else takes its agent port (on a private head: a Ray worker or
    the resumed manager's own Ray driver, which take random ports in 10002-19999; here a socket that accepts and
    never answers). The resumed manager listens elsewhere and has each environment's actor point its running
    agent there: the trials that ran through the crash succeed, every metric once, in the same environments."""
    import socket

    exp_id, exp_dir, code = _waiting_experiment(tmp_path, "code", trials=3, concurrency=2)
    first = heads.manager(exp_id, "create", tmp_path / "first.out", **FAST)
    wait_until(lambda: _running(exp_dir, 2) or first.poll() is not None, 240)
    assert first.poll() is None, (tmp_path / "first.out").read_text()[-3000:]
    before = {t.trial_id: t for t in read_state(exp_dir).trials.values() if t.status is TrialStatus.RUNNING}
    port = json.loads((exp_dir / "cluster.json").read_text())["port"]
    first.kill()
    first.wait()
    taker = socket.socket()
    try:
        taker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taker.bind(("127.0.0.1", port))  # the port the agents knew: taken by someone who never answers
        taker.listen(64)
        (code / "go").write_text("")
        second = heads.manager(exp_id, "resume", tmp_path / "second.out", **FAST)
        assert second.wait(240) == 0, (tmp_path / "second.out").read_text()[-3000:]
    finally:
        taker.close()
    st = read_state(exp_dir)
    _assert_all_succeeded(st, 3)
    log = (exp_dir / "log" / "manager.log").read_text()
    assert f"port {port} of the earlier manager is taken" in log
    assert {st.trials[t].environment_id for t in before} == {t.environment_id for t in before.values()}


def test_each_experiment_has_its_own_head_and_stop_or_done_ends_it(tmp_path: Path, heads: PrivateHeads) -> None:
    from nnix.client import stop_experiment

    a_id, a_dir, _ = _waiting_experiment(tmp_path, "a", trials=1, concurrency=1)
    b_id, b_dir, b_code = _waiting_experiment(tmp_path, "b", trials=1, concurrency=1, idleTimeout=1)
    a = heads.manager(a_id, "create", tmp_path / "a.out", exit_when_done=False, **FAST)
    b = heads.manager(b_id, "create", tmp_path / "b.out", exit_when_done=False, head_idle=1.0, **FAST)
    wait_until(lambda: (_running(a_dir, 1) and _running(b_dir, 1)) or a.poll() is not None or b.poll() is not None, 300)
    assert a.poll() is None and b.poll() is None, (
        (tmp_path / "a.out").read_text(errors="replace")[-3000:],
        (tmp_path / "b.out").read_text(errors="replace")[-3000:],
        (a_dir / "log" / "manager.log").read_text(errors="replace")[-3000:])
    ha, hb = heads.seen(a_dir), heads.seen(b_dir)
    assert ha is not None and hb is not None
    assert ha.address != hb.address and ha.keeper_pid != hb.keeper_pid and ha.temp_dir != hb.temp_dir
    assert rayhead.check(ha, b_id) is not None and rayhead.check(hb, a_id) is not None  # neither adopts the other
    (a_trial,) = read_state(a_dir).trials.values()
    (b_trial,) = read_state(b_dir).trials.values()
    # a killed manager, then `nnix stop`: its head goes, with the trial it kept running
    a.kill()
    a.wait()
    assert "its private Ray head (127.0.0.1:" in stop_experiment(a_id)
    assert _head_gone(ha) and rayhead.read(a_dir) is None
    wait_until(lambda: a_trial.pid is not None and not _alive(a_trial.pid), 30)
    assert rayhead.check(hb, b_id) is None and b_trial.pid is not None and _alive(b_trial.pid)  # the other's runs on
    # DONE while the manager keeps serving: the idle head is stopped
    (b_code / "go").write_text("")
    wait_until(lambda: read_state(b_dir).status is ExperimentStatus.DONE, 120)
    wait_until(lambda: _head_gone(hb), 120)
    assert b.poll() is None  # the manager still runs
    stop_experiment(b_id)
    assert b.wait(30) == 0


def test_experiment_across_namespace_nodes(tmp_path: Path, ray_env: dict[str, str]) -> None:
    reason = netns_unavailable()
    if reason:
        pytest.skip(f"!!! RAY NODES IN NETWORK NAMESPACES UNAVAILABLE: {reason} "
                    "— the multi-node Ray test did NOT run !!!")
    try:
        lab = RayNetnsLab(n_nodes=2, cpus_per_node=1, token=ray_env["RAY_AUTH_TOKEN"]).up()
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        detail = getattr(e, "stderr", "") or ""
        pytest.skip(f"!!! RAY NODES IN NETWORK NAMESPACES COULD NOT BE BUILT HERE: {e} {detail} "
                    "— the multi-node Ray test did NOT run !!!")
    try:
        assert lab.head_ip.startswith("10.203.")  # a test bridge, never eth0's address
        _, exp_dir = _ray_experiment(tmp_path, {"address": lab.address}, trials=4, concurrency=2)
        # each trial waits (2 minutes at most) until a trial started on both nodes: trials this quick could all
        # run in the first environment before the second one's agent connected (seen once in CI)
        started = tmp_path / "started"
        started.mkdir()
        trial = tmp_path / "code" / "trial.py"
        trial.write_text(f"import pathlib, socket, time\nd = pathlib.Path({str(started)!r})\n"
                         "(d / socket.gethostname()).touch()\nend = time.time() + 120\n"
                         "while len(list(d.iterdir())) < 2 and time.time() < end:\n    time.sleep(0.05)\n"
                         + trial.read_text())
        st = run_experiment(exp_dir, timeout=240, **FAST)
        _assert_all_succeeded(st, 4)
        hosts = {Path(str(t.output_dir), "trial.stdout").read_text().split()[-1] for t in st.trials.values()}
        assert hosts == set(lab.node_names())  # both namespace nodes ran trials (the head has no CPU)
        assert len({t.environment_id for t in st.trials.values()}) == 2
        # the agents reached the manager on the bridge (the address on the route to the head), not on eth0's
        assert json.loads((exp_dir / "cluster.json").read_text())["url"].startswith(f"http://{lab.head_ip}:")
    finally:
        lab.down()


def test_the_actor_needs_only_ray_on_the_nodes(tmp_path: Path, ray_env: dict[str, str]) -> None:
    import sys

    import ray.cloudpickle as cloudpickle

    from nnix.services.ray import _actor_class

    pickled = tmp_path / "actor.pkl"
    pickled.write_bytes(cloudpickle.dumps(_actor_class()))  # type: ignore[no-untyped-call]
    check = (
        "import sys\n"
        "class NoNnix:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'nnix': raise ImportError(name)\n"
        "sys.meta_path.insert(0, NoNnix())\n"
        "import ray.cloudpickle as cp\n"
        f"cls = cp.loads(open({str(pickled)!r}, 'rb').read())\n"
        "print(cls.__name__, cls(False).info())\n"
    )
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["NnixEnvironment", "{}"]


# --- a manager killed -9 at chosen points (nnix.testing.killpoints) ------------------------------------------------
METRICS = 12


def _chain(tmp_path: Path, service: dict[str, Any]) -> Chain:
    gates = tmp_path / "gates"
    fields = chain_experiment(tmp_path / "code", gates, metrics=METRICS)
    exp_id, _ = make_experiment(tmp_path / "code", **{**fields, "trialConcurrency": 2, "maxTrialNumber": 4,
                                                     "trainingService": {"platform": "ray", **service}})
    return Chain(exp_id, tmp_path, gates, {**FAST, "lost_timeout": 20.0})


def _kill_chain_and_resume(chain: Chain) -> None:
    kill_at_every_point_and_resume(chain, METRICS)


def test_a_manager_killed_at_each_point_is_resumed_on_a_ray_cluster(tmp_path: Path, ray_lab: RayLab) -> None:
    """Non-reuse on an existing head: kill -9 before an actor is created, after it was created with its agent's
    start call sent (the call dies with the manager: the resumed manager starts the agent), at the agent's hello,
    while trials run, just after one ended; each time resumed. Every trial succeeds, every metric once, no ERROR, no
    actor or process of the experiment left."""
    chain = _chain(tmp_path, {"address": ray_lab.address, "reuseMode": False})
    _kill_chain_and_resume(chain)
    assert ray_lab.named_actors(f"nnix-{chain.exp_id}", wait=30) == []


def test_a_manager_killed_at_each_point_is_resumed_on_its_private_ray(tmp_path: Path, heads: PrivateHeads) -> None:
    """The same on the experiment's private head (reuse mode): the head outlives each killed manager (or a new one
    starts), and goes with the experiment."""
    chain = _chain(tmp_path, {"reuseMode": True})
    heads.seen(chain.exp_dir)  # its heads are ended at the test's end whatever happens
    _kill_chain_and_resume(chain)
    assert settled(lambda: [] if rayhead.read(chain.exp_dir) is None else ["its head"], 60) == []
    assert all(_head_gone(h) for h in heads.heads.values())


@pytest.mark.parametrize("verb", ["stop", "delete"])
def test_stop_or_delete_after_a_kill_ends_every_actor(tmp_path: Path, ray_lab: RayLab, verb: str) -> None:
    """kill -9 while trials run on an existing head, then `nnix stop` / `nnix experiment delete`: the experiment's
    actors (and the agents and trials in them) are ended, the trials shown RUNNING are USER_CANCELED (stop)."""
    from nnix.testing.faults import nnix

    chain = _chain(tmp_path, {"address": ray_lab.address, "reuseMode": True})
    chain.kill_at("create", "running")
    actors = ray_lab.named_actors(f"nnix-{chain.exp_id}")
    assert actors
    res = nnix("stop", chain.exp_id) if verb == "stop" else nnix("experiment", "delete", chain.exp_id, "--yes")
    assert res.returncode == 0, res.stderr
    assert "ray: cancelled" in res.stdout and all(a in res.stdout for a in actors), res.stdout
    assert ray_lab.named_actors(f"nnix-{chain.exp_id}", wait=30) == []
    assert settled(lambda: leftover_processes(chain.exp_id)) == []
    if verb == "stop":
        assert_stopped_with_its_running_trials_canceled(chain.exp_dir)


def test_an_actor_whose_agent_start_died_with_the_manager_is_started_by_the_resumed_one(tmp_path: Path,
                                                                                        ray_lab: RayLab) -> None:
    """The earlier manager created the detached actor of an environment and was killed before the actor's start
    call ran: the actor waits (it would free itself after 120 s). The resumed manager starts the agent in it with
    the recorded token and runs the trials there: no failed start, no ERROR, no new environment, nothing left."""
    from nnix.testing.labs import free_port

    gates = tmp_path / "gates"
    fields = chain_experiment(tmp_path / "code", gates, metrics=METRICS)
    exp_id, exp_dir = make_experiment(tmp_path / "code", **{**fields, "trialConcurrency": 1, "maxTrialNumber": 2,
                                                           "trainingService": {"platform": "ray",
                                                                               "address": ray_lab.address}})
    namespace = f"nnix-{exp_id}"
    make = ("import sys, ray; from nnix.services.ray import _actor_class; "
            "ray.init(sys.argv[1], namespace=sys.argv[2], logging_level='ERROR'); "
            "ray.remote(_actor_class()).options(name='e1-old', namespace=sys.argv[2], lifetime='detached', "
            "num_cpus=1, max_concurrency=4, max_restarts=0).remote(True); "
            "ray.get_actor('e1-old', namespace=sys.argv[2])")  # created; its start never called
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    made = subprocess.run([sys.executable, "-c", make, ray_lab.address, namespace], capture_output=True, text=True,
                          env=env, timeout=120)
    assert made.returncode == 0, made.stderr[-2000:]
    assert ray_lab.named_actors(namespace) == ["e1-old"]
    (exp_dir / "cluster.json").write_text(json.dumps({
        "platform": "ray", "port": free_port(), "left": True,
        "envs": {"e1-old": {"token": secrets.token_hex(16), "handle": "e1-old", "single": False}}}))
    chain = Chain(exp_id, tmp_path, gates, {**FAST, "lost_timeout": 20.0})
    assert chain.finish(timeout=120) is ExperimentStatus.DONE, chain.log_tail()
    st = read_state(exp_dir)
    assert [t.status for t in st.trials.values()] == [TrialStatus.SUCCEEDED] * 2
    a = audited(exp_dir, METRICS)
    assert a.ok and not a.irregular, a
    assert {t.environment_id for t in st.trials.values()} == {"e1-old"}  # its agent was started and ran them
    assert errors_logged(exp_dir) == []
    assert ray_lab.named_actors(namespace, wait=30) == []
