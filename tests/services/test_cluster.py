"""The shared part of the cluster services (:class:`nnix.services.cluster.ClusterService`) with a fake
engine whose environments are local processes running the real nnix agent."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nnix.core.status import ExperimentStatus, TrialStatus
from nnix.home import read_state
from nnix.testing import wait_until
from nnix.testing.cluster import ProcessClusterService, ProcessLauncher
from nnix.testing.experiments import detach_when, make_experiment, run_experiment
from nnix.testing.spaces import UNIT as SPACE

FAST: dict[str, Any] = {"engine_poll_interval": 0.1, "end_grace": 0.3, "poll_interval": 0.05, "kill_grace": 1.0,
                        "backoff_min": 0.1}


def _trial(code: Path, steps: int = 3, step_s: float = 0.05, gate: tuple[int, Path] | None = None) -> None:
    """A trial reporting ``steps`` intermediate results; with ``gate=(step, path)`` it waits after that step
    until ``path`` exists."""
    code.mkdir(parents=True, exist_ok=True)
    wait = (f"    if i == {gate[0]}:\n        while not os.path.exists({str(gate[1])!r}):\n"
            "            time.sleep(0.02)\n" if gate else "")
    (code / "trial.py").write_text(
        "import os, time, nni\np = nni.get_next_parameter()\n"
        f"for i in range({steps}):\n    nni.report_intermediate_result(i)\n    time.sleep({step_s})\n{wait}"
        "nni.report_final_result(p['x'])\n"
    )


def _experiment(tmp_path: Path, *, steps: int = 3, step_s: float = 0.05, concurrency: int = 2, trials: int = 4,
                reuse: bool = True, idle: int = 60, gate: tuple[int, Path] | None = None) -> Path:
    code = tmp_path / "code"
    _trial(code, steps, step_s, gate)
    _, exp_dir = make_experiment(code, searchSpace=SPACE, trialCommand="python3 trial.py",
                                 trialConcurrency=concurrency, maxTrialNumber=trials,
                                 trainingService={"platform": "slurm", "reuseMode": reuse, "idleTimeout": idle})
    return exp_dir


def _run(exp_dir: Path, launcher: ProcessLauncher, action: str = "create", timeout: float = 60, **extra: Any) -> Any:
    return run_experiment(exp_dir, action, timeout=timeout, service_class=ProcessClusterService, launcher=launcher,
                          **{**FAST, **extra})


def _alive(launcher: ProcessLauncher) -> list[str]:
    return [h for h, p in launcher.procs.items() if p.poll() is None]


def test_reuse_runs_every_trial_in_at_most_concurrency_environments(tmp_path: Path) -> None:
    launcher = ProcessLauncher()
    exp_dir = _experiment(tmp_path, concurrency=2, trials=5)
    st = _run(exp_dir, launcher)
    assert st.status is ExperimentStatus.DONE
    assert [t.status for t in st.trials.values()] == [TrialStatus.SUCCEEDED] * 5
    for t in st.trials.values():
        assert [m.sequence for m in t.intermediate] == [0, 1, 2]
        assert t.final is not None
    assert launcher.prepared and launcher.closed
    assert 1 <= len(launcher.launched) <= 2  # never more environments than trials wanting one
    assert not any(r.single for r in launcher.launched)
    envs = {t.environment_id for t in st.trials.values()}
    assert len(envs) <= 2  # environments were reused
    assert all("NNIX_AGENT_TOKEN" in r.agent_env() and r.token not in r.agent_args() for r in launcher.launched)
    assert not _alive(launcher)  # every environment stopped at the end


def test_non_reuse_starts_one_environment_per_trial(tmp_path: Path) -> None:
    launcher = ProcessLauncher()
    exp_dir = _experiment(tmp_path, concurrency=2, trials=4, reuse=False)
    st = _run(exp_dir, launcher)
    assert [t.status for t in st.trials.values()] == [TrialStatus.SUCCEEDED] * 4
    assert len({t.environment_id for t in st.trials.values()}) == 4
    assert all(r.single for r in launcher.launched)
    assert len(launcher.launched) <= 5  # at most one started ahead beyond what ran
    deadline = time.monotonic() + 10
    while _alive(launcher) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(launcher)


def _in_background(fn: Callable[[], None]) -> threading.Thread:
    th = threading.Thread(target=fn, daemon=True)
    th.start()
    return th


def test_an_environment_ended_by_its_engine_fails_its_trial_with_the_reason(tmp_path: Path) -> None:
    launcher = ProcessLauncher()
    exp_dir = _experiment(tmp_path, concurrency=1, trials=2, steps=40, step_s=0.05)
    result: dict[str, Any] = {}
    th = _in_background(lambda: result.setdefault("st", _run(exp_dir, launcher)))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        st = read_state(exp_dir)
        running = [t for t in st.trials.values() if t.status is TrialStatus.RUNNING and len(t.intermediate) >= 2]
        if running:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("no trial ran")
    handle = next(iter(_alive(launcher)))
    launcher.kill(handle, "TIMEOUT: the job reached its time limit")
    th.join(60)
    st = result["st"]
    first, second = list(st.trials.values())
    assert first.status is TrialStatus.FAILED
    assert "TIMEOUT: the job reached its time limit" in (first.message or "")
    assert handle in (first.message or "")
    assert second.status is TrialStatus.SUCCEEDED  # the experiment went on in a new environment
    assert len(launcher.launched) == 2


def test_an_engine_refusing_the_job_is_a_clear_error(tmp_path: Path) -> None:
    launcher = ProcessLauncher(refuse="sbatch: error: invalid partition specified: nope")
    exp_dir = _experiment(tmp_path, concurrency=1, trials=1)
    st = _run(exp_dir, launcher, timeout=30)
    assert st.status is ExperimentStatus.ERROR
    t = next(iter(st.trials.values()))
    assert t.status is TrialStatus.FAILED
    assert "invalid partition" in (t.message or "")


def test_environments_whose_agent_never_connects_stop_the_experiment_with_a_hint(tmp_path: Path) -> None:
    launcher = ProcessLauncher(broken=True)
    exp_dir = _experiment(tmp_path, concurrency=1, trials=1)
    st = _run(exp_dir, launcher, timeout=30)
    assert st.status is ExperimentStatus.ERROR
    assert "after 3 failed starts in a row" in st.message and "ended before the nnix agent" in st.message
    assert "nniManagerIp" in st.message
    assert len(launcher.launched) == 3
    # the trial never started: it is not FAILED, it waits (a resume runs it)
    assert [t.status for t in st.trials.values()] == [TrialStatus.WAITING]


def test_idle_environments_are_stopped(tmp_path: Path) -> None:
    """A trial that waits long for the tuner-free slot: the environment left idle is stopped meanwhile."""
    launcher = ProcessLauncher()
    exp_dir = _experiment(tmp_path, concurrency=1, trials=1, idle=1)
    st = _run(exp_dir, launcher)
    assert [t.status for t in st.trials.values()] == [TrialStatus.SUCCEEDED]
    assert launcher.stopped  # stopped, not left to its engine
    assert not _alive(launcher)


def test_a_detached_manager_is_resumed_and_reattaches_running_trials(tmp_path: Path) -> None:
    launcher = ProcessLauncher()
    gate = tmp_path / "go-on"
    exp_dir = _experiment(tmp_path, concurrency=2, trials=2, steps=30, step_s=0.02, gate=(5, gate))

    def both_running() -> bool:
        trials = read_state(exp_dir).trials.values()
        return len(trials) == 2 and all(t.status is TrialStatus.RUNNING and t.intermediate for t in trials)

    # the manager goes away mid-run (its task is cancelled): its environments keep running the trials,
    # which wait at step 5 until the manager is gone (no wall-time race)
    detach_when(exp_dir, both_running, service_class=ProcessClusterService, launcher=launcher, **FAST)
    gate.touch()
    st = read_state(exp_dir)
    assert [t.status for t in st.trials.values()] == [TrialStatus.RUNNING] * 2
    assert len(_alive(launcher)) == 2
    assert (exp_dir / "cluster.json").is_file()

    def unrecorded() -> bool:  # the trials report meanwhile (the agents buffer): lines no manager recorded
        for t in read_state(exp_dir).trials.values():
            channel = Path(t.output_dir or "") / ".nnix" / "metrics.jsonl"
            if channel.is_file() and len(channel.read_bytes().splitlines()) > t.last_index + 1:
                return True
        return False

    wait_until(unrecorded, 60, "the trials to report while no manager ran")
    st = _run(exp_dir, launcher, action="resume")
    assert st.status is ExperimentStatus.DONE
    for t in st.trials.values():
        assert t.status is TrialStatus.SUCCEEDED, t.message
        assert [m.sequence for m in t.intermediate] == list(range(30))  # nothing lost, nothing twice
    assert len(launcher.launched) == 2, (launcher.launched, launcher.reasons)  # taken over, not restarted


def test_an_environment_with_capacity_runs_several_trials_at_once(tmp_path: Path) -> None:
    """Launcher ``capacity`` 2: one environment takes both trials of concurrency 2, at the same time."""
    launcher = ProcessLauncher(capacity=2)
    gate = tmp_path / "go-on"
    exp_dir = _experiment(tmp_path, concurrency=2, trials=4, gate=(1, gate))
    result: dict[str, Any] = {}
    th = _in_background(lambda: result.setdefault("st", _run(exp_dir, launcher)))
    deadline = time.monotonic() + 60
    while True:  # both first trials wait at step 1 in their environment: they run at once
        running = [t for t in read_state(exp_dir).trials.values() if t.status is TrialStatus.RUNNING]
        if len(running) == 2:
            break
        assert time.monotonic() < deadline, "two trials never ran at once"
        time.sleep(0.05)
    assert running[0].environment_id == running[1].environment_id
    gate.touch()
    th.join(60)
    st = result["st"]
    assert [t.status for t in st.trials.values()] == [TrialStatus.SUCCEEDED] * 4
    assert len(launcher.launched) == 1  # one environment for concurrency 2
    assert len({t.environment_id for t in st.trials.values()}) == 1


def test_with_lost_policy_requeue_a_trial_whose_environment_ends_runs_again(tmp_path: Path) -> None:
    launcher = ProcessLauncher(lost_policy="requeue")
    exp_dir = _experiment(tmp_path, concurrency=1, trials=2, steps=40, step_s=0.05)
    result: dict[str, Any] = {}
    th = _in_background(lambda: result.setdefault("st", _run(exp_dir, launcher)))
    deadline = time.monotonic() + 30
    while True:
        running = [t for t in read_state(exp_dir).trials.values()
                   if t.status is TrialStatus.RUNNING and len(t.intermediate) >= 2]
        if running:
            break
        assert time.monotonic() < deadline, "no trial ran"
        time.sleep(0.05)
    handle = next(iter(_alive(launcher)))
    launcher.kill(handle, "PREEMPTED")
    th.join(90)
    st = result["st"]
    assert [t.status for t in st.trials.values()] == [TrialStatus.SUCCEEDED] * 2  # not FAILED: run again
    assert len(launcher.launched) >= 2


def test_the_placement_hook_decides_which_environment_takes_a_trial(tmp_path: Path) -> None:
    """Launcher ``admit``/``release``: an environment of capacity 2 on a one-GPU machine runs one trial at a
    time; every admitted trial is released once."""
    launcher = ProcessLauncher(capacity=2, one_gpu=True)
    exp_dir = _experiment(tmp_path, concurrency=2, trials=3)
    st = _run(exp_dir, launcher)
    assert [t.status for t in st.trials.values()] == [TrialStatus.SUCCEEDED] * 3
    assert len(launcher.launched) == 1
    assert sorted(t for t, _ in launcher.admitted) == sorted(st.trials)
    assert sorted(launcher.released) == sorted(st.trials)  # once each
    assert launcher.gpu_holder == {}


def test_environments_of_the_earlier_manager_that_ended_meanwhile_are_no_failed_starts(
        tmp_path: Path, caplog: Any) -> None:
    """Non-reuse: the earlier manager's environments whose agent reported its trial and exited while no manager ran
    are in cluster.json, and their engine says they ended (COMPLETED): the resumed manager drops them, without an
    error and without counting them as failed starts (each was logged as an ERROR, with a backoff)."""
    import json
    import subprocess
    import sys

    launcher = ProcessLauncher()
    exp_dir = _experiment(tmp_path, concurrency=1, trials=2, reuse=False)
    envs = {}
    for i in range(3):
        done = subprocess.Popen([sys.executable, "-c", "pass"])
        done.wait()  # an environment that ended by itself (exit status 0)
        launcher.procs[f"proc-{done.pid}"] = done
        envs[f"e{i + 1}-old"] = {"token": f"token-{i}", "handle": f"proc-{done.pid}", "single": True}
    (exp_dir / "cluster.json").write_text(json.dumps({"port": 0, "url": "", "envs": envs}))
    caplog.set_level("INFO", logger="nnix.services.cluster")
    st = _run(exp_dir, launcher, action="resume")
    assert st.status is ExperimentStatus.DONE, st.message
    assert [t.status for t in st.trials.values()] == [TrialStatus.SUCCEEDED] * 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors == []
    dropped = [r.getMessage() for r in caplog.records if "of the earlier manager ended while no manager ran" in
               r.getMessage()]
    assert len(dropped) == 3
    assert set(json.loads((exp_dir / "cluster.json").read_text())["envs"]).isdisjoint(envs)  # forgotten


class _FindingLauncher(ProcessLauncher):
    """The fake engine that can also find an environment by its id (nnix.services.launcher.Reclaiming), as Slurm
    does by the job's name: ``named`` maps environment ids to handles."""

    def __init__(self) -> None:
        super().__init__()
        self.named: dict[str, str] = {}

    async def launch(self, request: Any) -> str:
        handle = await super().launch(request)
        self.named[request.env_id] = handle
        return handle

    async def adopt(self, request: Any, handle: str | None) -> str | None:
        return handle or (await self.environments()).get(request.env_id)

    async def open_engine(self) -> None:
        return None

    async def environments(self) -> dict[str, str]:
        return {e: h for e, h in self.named.items() if h in self.procs and self.procs[h].poll() is None}


def test_an_environment_submitted_but_not_yet_recorded_by_a_killed_manager_is_taken_over(tmp_path: Path) -> None:
    """The manager recorded the environment, then was killed after the engine took it and before it learned the
    handle: the resumed manager finds it on the engine (by its id), takes its agent over, and stops it at the end
    (it used to be skipped: its agent, unknown to the new manager, kept retrying, an orphan)."""
    import asyncio
    import json

    from nnix.services.cluster import EnvRequest, Reclaiming
    from nnix.testing.labs import free_port

    launcher = _FindingLauncher()
    assert isinstance(launcher, Reclaiming)
    exp_dir = _experiment(tmp_path, concurrency=1, trials=2)
    port = free_port()
    token = "t" * 32
    asyncio.run(launcher.launch(EnvRequest("e9-old", False, f"http://127.0.0.1:{port}", token,
                                           ("--poll-interval", "0.05"))))
    (exp_dir / "cluster.json").write_text(json.dumps(
        {"platform": "process", "port": port, "envs": {"e9-old": {"token": token, "handle": None, "single": False}}}))
    try:
        st = _run(exp_dir, launcher, action="resume")
        assert st.status is ExperimentStatus.DONE, st.message
        assert [t.status for t in st.trials.values()] == [TrialStatus.SUCCEEDED] * 2
        assert {t.environment_id for t in st.trials.values()} == {"e9-old"}  # its agent ran them: taken over
        assert len(launcher.launched) == 1  # no other environment was needed
        wait_until(lambda: not _alive(launcher), 30, "the taken-over environment to be stopped with the experiment")
        record = json.loads((exp_dir / "cluster.json").read_text())
        assert (record["platform"], record["envs"], record["left"]) == ("process", {}, False)  # nothing left
    finally:  # (a failure must not leave its agent retrying for a day)
        for handle in _alive(launcher):
            launcher.kill(handle, "the test is over")


class _AdoptAfterHello(_FindingLauncher):
    """Its ``adopt`` (the engine asked, at resume) answers only once an agent has said hello to the resumed manager:
    an engine slow to answer (Ray under load), its agents quick to reconnect."""

    def __init__(self) -> None:
        super().__init__()
        self.slow = False
        self.greeted = False
        self.gate: Path | None = None  # opened once it answers (the trial still runs at the agent's hello)

    async def adopt(self, request: Any, handle: str | None) -> str | None:
        import asyncio

        deadline = time.monotonic() + 30
        while self.slow and not self.greeted and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if self.gate is not None:
            self.gate.touch()
        return await super().adopt(request, handle)


class _HelloHeard(ProcessClusterService):
    """Tells its launcher (an :class:`_AdoptAfterHello`) when an agent said hello."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        launcher = self.launcher
        placement: Any = self.placement  # what hears from the agents
        real = placement.on_hello

        def on_hello(environment_id: str, hello: Any) -> None:
            real(environment_id, hello)
            if isinstance(launcher, _AdoptAfterHello):
                launcher.greeted = True

        placement.on_hello = on_hello


def test_an_agent_saying_hello_while_the_resumed_manager_asks_the_engine_keeps_its_trial(tmp_path: Path) -> None:
    """The resumed manager listens (with the recorded tokens) before it has asked the engine about the recorded
    environments; an agent that reconnects meanwhile reports the trial it runs, which the manager has not
    re-attached yet: that trial is the experiment's, not a stray to kill (it was killed and FAILED: a flake
    under load of the Ray kill chain)."""
    launcher = _AdoptAfterHello()
    gate = tmp_path / "go-on"
    exp_dir = _experiment(tmp_path, concurrency=1, trials=1, steps=30, step_s=0.02, gate=(5, gate))

    def running() -> bool:
        trials = read_state(exp_dir).trials.values()
        return len(trials) == 1 and all(t.status is TrialStatus.RUNNING and t.intermediate for t in trials)

    try:
        detach_when(exp_dir, running, service_class=_HelloHeard, launcher=launcher, **FAST)
        launcher.slow, launcher.gate, launcher.greeted = True, gate, False
        st = run_experiment(exp_dir, "resume", timeout=60, service_class=_HelloHeard, launcher=launcher, **FAST)
        assert launcher.greeted
        assert st.status is ExperimentStatus.DONE, st.message
        (t,) = st.trials.values()
        assert t.status is TrialStatus.SUCCEEDED, t.message
        assert [m.sequence for m in t.intermediate] == list(range(30))
        assert len(launcher.launched) == 1  # taken over, not restarted
    finally:
        for handle in _alive(launcher):
            launcher.kill(handle, "the test is over")
