"""The remote (SSH) service on real hosts: an OpenSSH server on loopback and three network-namespace
hosts with their own sshd (``ssh_lab`` fixture). Real experiments through the manager; failures made
for real (links cut with ``ip link set ... down``, agents and managers killed with SIGKILL)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nnix.core.events import TrialRequeued, TrialStarted
from nnix.core.state import ExperimentState
from nnix.core.status import ExperimentStatus, MetricType, TrialStatus
from nnix.errors import ServiceError
from nnix.home import STORE_NAME, Registry, pid_alive, read_state
from nnix.store.sqlite import SqliteStore
from nnix.testing import wait_until
from nnix.testing.experiments import make_experiment, manager_for, run_experiment
from nnix.testing.killpoints import (
    Chain,
    assert_stopped_with_its_running_trials_canceled,
    chain_experiment,
    kill_at_every_point_and_resume,
    leftover_processes,
    settled,
)
from nnix.testing.spaces import UNIT as SPACE
from nnix.testing.sshhosts import SshHost, SshLab

FAST: dict[str, Any] = {"connect_timeout": 3.0}


def nnix_cli(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """The nnix CLI in a process of its own."""
    return subprocess.run([sys.executable, "-m", "nnix.cli.main", *args], capture_output=True, text=True,
                          timeout=180, input=input, env=os.environ.copy())


def _trial(code: Path, steps: int, step_s: float, hold: tuple[list[str], Path] | None = None,
           spread: tuple[Path, int] | None = None) -> None:
    """``hold``: on the hosts named (their hostname), the trial stops after its second result until the file exists:
    a test acts on a trial running there without racing it (an event, not a duration). The file must be where the
    lab user can see it (see :func:`_flag`). ``spread`` (a folder the lab user can write, a number of hosts): each
    trial first waits (2 minutes at most) until a trial started on that many hosts, so that quick trials cannot all
    run on the machines whose agents connected first."""
    code.mkdir(parents=True, exist_ok=True)
    start = ""
    if spread is not None:
        folder, count = spread
        start = (f"d = {str(folder)!r}\nopen(os.path.join(d, socket.gethostname()), 'w').close()\n"
                 f"end = time.time() + 120\nwhile len(os.listdir(d)) < {count} and time.time() < end:\n"
                 "    time.sleep(0.05)\n")
    wait = ""
    if hold is not None:
        names, flag = hold
        wait = (f"    if i == 1:\n        while socket.gethostname() in {names!r} and not os.path.exists("
                f"{str(flag)!r}):\n            time.sleep(0.05)\n")
    (code / "trial.py").write_text(
        f"import nni, os, time, socket\n{start}p = nni.get_next_parameter()\n"
        f"for i in range({steps}):\n    nni.report_intermediate_result(i)\n    time.sleep({step_s})\n{wait}"
        "nni.report_final_result(p['x'])\nprint('ran on', socket.gethostname())\n"
    )
    (code / ".nniignore").write_text("data/\n")
    (code / "data").mkdir(exist_ok=True)
    (code / "data" / "big.bin").write_bytes(b"\0" * 1000)


def _flag(lab: SshLab, tmp_path: Path) -> Path:
    """A path for a ``hold`` file that the lab user's trials can see (pytest's tmp_path is private to root)."""
    return lab.home / f"release-{tmp_path.name}"


def _remote(lab: SshLab, hosts: list[SshHost] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "platform": "remote",
        "knownHostsFile": str(lab.known_hosts),
        "remoteWorkDir": str(lab.home / "work"),
        "machineList": [h.machine() for h in (hosts if hosts is not None else lab.hosts)],
        **extra,
    }


def _experiment(tmp_path: Path, lab: SshLab, *, steps: int = 3, step_s: float = 0.1, concurrency: int = 3,
                trials: int = 6, hosts: list[SshHost] | None = None, hold: tuple[list[str], Path] | None = None,
                spread: tuple[Path, int] | None = None, **service: Any) -> tuple[str, Path]:
    code = tmp_path / "code"
    _trial(code, steps, step_s, hold, spread)
    return make_experiment(code, searchSpace=SPACE, trialCommand="python3 trial.py", trialConcurrency=concurrency,
                           maxTrialNumber=trials, trainingService=_remote(lab, hosts, **service))


def _starts(exp_dir: Path) -> Counter[str]:
    store = SqliteStore(exp_dir / STORE_NAME)
    try:
        return Counter(s.event.trial_id for s in store.read() if isinstance(s.event, TrialStarted))
    finally:
        store.close()


def _assert_metrics_once(st: ExperimentState, steps: int) -> None:
    for t in st.trials.values():
        if t.status is not TrialStatus.SUCCEEDED:
            continue
        seqs = [m.sequence for m in t.metrics if m.type is MetricType.PERIODICAL]
        assert seqs == list(range(steps)), (t.trial_id, seqs)
        assert sum(m.type is MetricType.FINAL for m in t.metrics) == 1


def _in_background(fn: Callable[[], None]) -> threading.Thread:
    th = threading.Thread(target=fn, daemon=True)
    th.start()
    return th


def _join(th: threading.Thread, errors: list[BaseException]) -> None:
    """Join a helper thread and raise what it raised (a failed wait there must fail the test)."""
    th.join(30)
    assert not th.is_alive(), "the helper thread did not finish"
    if errors:
        raise errors[0]


def _requeues(exp_dir: Path) -> tuple[list[TrialRequeued], list[TrialRequeued]]:
    """The TrialRequeued events: of trials that were running, and of trials that had not started."""
    running: set[str] = set()
    of_running: list[TrialRequeued] = []
    of_waiting: list[TrialRequeued] = []
    store = SqliteStore(exp_dir / STORE_NAME)
    try:
        for s in store.read():
            if isinstance(s.event, TrialStarted):
                running.add(s.event.trial_id)
            elif isinstance(s.event, TrialRequeued):
                (of_running if s.event.trial_id in running else of_waiting).append(s.event)
                running.discard(s.event.trial_id)
    finally:
        store.close()
    return of_running, of_waiting


def _unrecorded_lines(st: ExperimentState) -> bool:
    """Whether a running trial of ``st`` wrote metric lines that ``st`` has not recorded (its channel file is on this
    machine's file system: the lab's hosts share it)."""
    for t in st.trials.values():
        if t.status is TrialStatus.RUNNING and t.output_dir:
            channel = Path(str(t.output_dir).split(":", 1)[1]) / ".nnix" / "metrics.jsonl"
            with contextlib.suppress(OSError):
                if len(channel.read_bytes().splitlines()) > t.last_index + 1:
                    return True
    return False


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _agent_log(pid: int) -> str | None:
    """The log of the agent ``pid`` (next to its connect file), or None."""
    words = _cmdline(pid).split()
    if "--connect-file" not in words:
        return None
    try:
        return (Path(words[words.index("--connect-file") + 1]).parent / "agent.log").read_text(errors="replace")
    except (OSError, IndexError):
        return None


@pytest.mark.parametrize("reuse", [True, False], ids=["reuse", "non-reuse"])
def test_experiment_across_three_hosts(tmp_path: Path, ssh_lab: SshLab, reuse: bool) -> None:
    started = ssh_lab.home / f"started-{tmp_path.name}"  # where the lab user's trials can write (see _flag)
    started.mkdir()
    started.chmod(0o777)
    # trials this quick could all run on the first machines whose agents connected (the same shape failed once in
    # CI with Ray's two nodes): each waits until a trial started on all three
    exp_id, exp_dir = _experiment(tmp_path, ssh_lab, spread=(started, len(ssh_lab.hosts)), reuseMode=reuse)
    st = run_experiment(exp_dir, timeout=90, **FAST)
    assert st.status is ExperimentStatus.DONE, st.message
    assert len(st.trials) == 6
    assert all(t.status is TrialStatus.SUCCEEDED for t in st.trials.values()), [t.message for t in st.trials.values()]
    _assert_metrics_once(st, 3)
    hosts = {str(t.output_dir).split(":")[0] for t in st.trials.values()}
    assert hosts == {h.host for h in ssh_lab.hosts}  # spread over every machine
    envs = {t.environment_id for t in st.trials.values()}
    assert len(envs) == (3 if reuse else 6)  # one agent per machine, or one per trial
    names = {h.host: h.name for h in ssh_lab.hosts}
    for t in st.trials.values():  # outputs are kept on the host, where the trial ran
        host, _, path = str(t.output_dir).partition(":")
        out = Path(path)
        assert f"ran on {names[host]}" in (out / "trial.stdout").read_text()  # each namespace has its hostname
        assert os.stat(out).st_uid != 0  # written by the login user
        (code_dir,) = out.parents[1].glob("code-*")  # uploaded once per machine
        assert (code_dir / "trial.py").exists() and not (code_dir / "data").exists()  # .nniignore honoured
    store_bytes = (exp_dir / STORE_NAME).read_bytes()
    assert b"Bearer" not in store_bytes
    wait_until(lambda: not ssh_lab.agent_pids(exp_id), 60)  # every agent gone after the experiment


@pytest.mark.parametrize("reuse", [True, False], ids=["reuse", "non-reuse"])
@pytest.mark.parametrize("policy", ["fail", "requeue"])
def test_host_lost_mid_trial(tmp_path: Path, ssh_lab: SshLab, policy: str, reuse: bool) -> None:
    """A host cut while a trial runs there (the trial holds until the cut: no race), written off after
    lostHostTimeout, then back. The experiment ends DONE with every trial accounted for; what waits on time is
    only the service's own lostHostTimeout (3 s), every step of the test waits for a condition."""
    victim = ssh_lab.hosts[1]
    release = _flag(ssh_lab, tmp_path)
    _, exp_dir = _experiment(tmp_path, ssh_lab, steps=15, step_s=0.1, trials=6, reuseMode=reuse,
                             lostHostPolicy=policy, lostHostTimeout=3, hold=([victim.name], release))
    held: list[str] = []
    errors: list[BaseException] = []

    def cut_then_restore() -> None:
        try:
            def held_there() -> bool:
                st = read_state(exp_dir)
                held.extend(t.trial_id for t in st.trials.values() if t.status is TrialStatus.RUNNING
                            and str(t.output_dir).startswith(victim.host + ":") and len(t.metrics) >= 2)
                return bool(held)

            wait_until(held_there, 120)
            victim.link(False)
            release.touch()  # trials the host runs once it is back run through

            def written_off() -> bool:
                t = read_state(exp_dir).trials[held[0]]
                return not (t.status is TrialStatus.RUNNING and str(t.output_dir).startswith(victim.host + ":"))

            wait_until(written_off, 120)
            victim.link(True)  # the host comes back: its old agents are retired, it is used again
        except BaseException as e:
            errors.append(e)

    cutter = _in_background(cut_then_restore)
    try:
        st = run_experiment(exp_dir, timeout=240, **FAST)
    finally:
        release.touch()
    _join(cutter, errors)
    assert st.status is ExperimentStatus.DONE, st.message
    assert len(st.trials) == 6 and all(t.status.is_terminal for t in st.trials.values())
    lost = held[0]  # (another trial may have been running there too at the cut: it is written off alike)
    starts = _starts(exp_dir)
    of_running, of_waiting = _requeues(exp_dir)
    assert all("did not start" in e.reason for e in of_waiting)  # a slow start under load: requeued, counted
    if policy == "fail":
        failed = [t for t in st.trials.values() if t.status is TrialStatus.FAILED]
        assert lost in [t.trial_id for t in failed], [(t.trial_id, t.status, t.message) for t in st.trials.values()]
        assert all(victim.host in t.message and "lost" in t.message for t in failed)
        assert st.count(TrialStatus.SUCCEEDED) + len(failed) == 6
        assert set(starts.values()) == {1} and not of_running
    else:
        assert all(t.status is TrialStatus.SUCCEEDED for t in st.trials.values()), [
            (t.trial_id, t.message) for t in st.trials.values()]
        assert lost in [e.trial_id for e in of_running]
        assert all(victim.host in e.reason and "lostHostPolicy: requeue" in e.reason for e in of_running)
        again = Counter(e.trial_id for e in of_running)
        assert all(n == 1 + again[tid] for tid, n in starts.items())  # each re-run from scratch once more
    _assert_metrics_once(st, 15)


def test_a_trial_whose_agent_does_not_start_it_goes_back_to_the_queue(tmp_path: Path, ssh_lab: SshLab) -> None:
    """Issue 16: an agent that does not start its trial within the start timeout (a loaded host; here the agent
    started ahead for the next trial is stopped with SIGSTOP once connected) must not end the experiment. The
    trial goes back to the queue, counted with the reason, even under lostHostPolicy: fail (it never ran); the
    host backs off, then a fresh agent runs it."""
    host = ssh_lab.hosts[0]
    release = _flag(ssh_lab, tmp_path)
    exp_id, exp_dir = _experiment(tmp_path, ssh_lab, steps=3, step_s=0.05, concurrency=1, trials=2, hosts=[host],
                                  reuseMode=False, hold=([host.name], release))
    stopped: list[int] = []
    errors: list[BaseException] = []

    def stop_the_spare() -> None:
        try:
            first: list[str] = []

            def spare_connected() -> bool:
                st = read_state(exp_dir)
                first[:] = [t.environment_id or "" for t in st.trials.values()
                            if t.status is TrialStatus.RUNNING and len(t.metrics) >= 2]
                if not first:
                    return False
                spares = [p for p in ssh_lab.agent_pids(exp_id) if first[0] not in _cmdline(p)]
                logs = [_agent_log(p) for p in spares]
                if not spares or not all(log is not None and "connected to" in log for log in logs):
                    return False
                stopped[:] = spares
                return True

            wait_until(spare_connected, 120)
            for pid in stopped:
                os.kill(pid, signal.SIGSTOP)
            release.touch()
        except BaseException as e:
            errors.append(e)

    th = _in_background(stop_the_spare)
    try:
        st = run_experiment(exp_dir, timeout=180, start_timeout=3.0, **FAST)
    finally:
        release.touch()
    _join(th, errors)
    assert stopped
    assert st.status is ExperimentStatus.DONE, st.message
    assert [t.status for t in st.trials.values()] == [TrialStatus.SUCCEEDED] * 2, [
        t.message for t in st.trials.values()]
    of_running, of_waiting = _requeues(exp_dir)
    assert not of_running
    second = list(st.trials)[1]
    assert [e.trial_id for e in of_waiting] == [second]
    assert f"the agent on {host.user}@{host.host}:22 did not start it within 3 s" in of_waiting[0].reason
    assert set(_starts(exp_dir).values()) == {1}


def test_no_usable_host_for_the_give_up_time_stops_the_experiment_naming_each_host(
    tmp_path: Path, ssh_lab: SshLab
) -> None:
    """Every host cut: only when none could run anything for the give-up time does the experiment stop, in ERROR,
    with each host and what happened to it; the trial that waits is not failed (a resume runs it)."""
    a, b = ssh_lab.hosts[0], ssh_lab.hosts[2]
    _, exp_dir = _experiment(tmp_path, ssh_lab, steps=15, step_s=0.1, concurrency=1, trials=1, hosts=[a, b],
                             lostHostPolicy="requeue", lostHostTimeout=2,
                             hold=([a.name, b.name], _flag(ssh_lab, tmp_path)))
    errors: list[BaseException] = []

    def cut_all() -> None:
        try:
            wait_until(lambda: any(t.status is TrialStatus.RUNNING and len(t.metrics) >= 2
                              for t in read_state(exp_dir).trials.values()), 120)
            a.link(False)
            b.link(False)
        except BaseException as e:
            errors.append(e)

    th = _in_background(cut_all)
    st = run_experiment(exp_dir, timeout=180, give_up_after=4.0, **FAST)
    _join(th, errors)
    assert st.status is ExperimentStatus.ERROR
    assert st.message.startswith("no host could run a trial for "), st.message
    for h in (a, b):
        assert f"{h.user}@{h.host}:22: " in st.message, st.message
    ((trial),) = st.trials.values()
    assert trial.status is TrialStatus.WAITING  # requeued from its lost host, then never failed
    of_running, _ = _requeues(exp_dir)
    assert [e.trial_id for e in of_running] == [trial.trial_id]


def test_unreachable_host_at_start_is_named_and_the_others_are_used(
    tmp_path: Path, ssh_lab: SshLab, caplog: pytest.LogCaptureFixture
) -> None:
    assert ssh_lab.loopback is not None
    dead = SshHost("dead", "127.0.0.1", 1, ssh_lab.user, ssh_lab.key_file, ssh_lab.known_hosts)
    _, exp_dir = _experiment(tmp_path, ssh_lab, trials=3, hosts=[dead, ssh_lab.loopback])
    with caplog.at_level(logging.ERROR, logger="nnix"):
        st = run_experiment(exp_dir, timeout=60, **FAST)
    assert st.status is ExperimentStatus.DONE and st.count(TrialStatus.SUCCEEDED) == 3
    assert f"cannot reach {ssh_lab.user}@127.0.0.1:1" in caplog.text
    # no machine at all: the service refuses to start, naming each host
    _, exp_dir = _experiment(tmp_path / "b", ssh_lab, trials=1, hosts=[dead])
    manager = manager_for(exp_dir, **FAST)
    with pytest.raises(ServiceError, match=r"no remote machine can be used: cannot reach .*127\.0\.0\.1:1"):
        asyncio.run(manager.run())
    manager.store.close()


def test_bad_credentials_are_named_and_no_secret_is_stored_or_logged(
    tmp_path: Path, ssh_lab: SshLab, caplog: pytest.LogCaptureFixture
) -> None:
    assert ssh_lab.loopback is not None
    secret = "hunter2-very-secret"
    stranger = tmp_path / "stranger_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", secret, "-f", str(stranger)], check=True)
    lo = ssh_lab.loopback
    code = tmp_path / "code"
    _trial(code, 1, 0)
    machines = [
        {"host": lo.host, "port": lo.port, "user": lo.user, "password": secret},
        {"host": lo.host, "port": lo.port, "user": lo.user, "sshKeyFile": str(stranger), "sshPassphrase": secret},
        {"host": lo.host, "port": lo.port, "user": lo.user, "sshKeyFile": str(stranger), "sshPassphrase": "wrong"},
    ]
    _, exp_dir = make_experiment(code, searchSpace=SPACE, trialCommand="python3 trial.py", trialConcurrency=1,
                                 maxTrialNumber=1, trainingService=_remote(ssh_lab, [], machineList=machines))
    manager = manager_for(exp_dir, **FAST)
    with caplog.at_level(logging.DEBUG), pytest.raises(ServiceError) as info:
        asyncio.run(manager.run())
    manager.store.close()
    text = str(info.value)
    assert text.count(f"refused the login of user {lo.user!r}") == 2, text
    assert "with password" in text and f"with key {stranger}" in text
    assert f"cannot load SSH key {stranger}" in text  # the wrong passphrase
    assert secret not in text and secret not in caplog.text
    st = read_state(exp_dir)
    assert st.status is ExperimentStatus.ERROR and "refused the login" in st.message  # shown where users look
    assert secret.encode() not in (exp_dir / STORE_NAME).read_bytes()
    for wal in exp_dir.glob(STORE_NAME + "*"):
        assert secret.encode() not in wal.read_bytes()
    secrets_file = exp_dir / "secrets.json"
    assert secrets_file.stat().st_mode & 0o777 == 0o600  # kept for resume, owner-only
    assert json.loads(secrets_file.read_text())["training_service.machine_list.0.password"] == secret
    shown = read_state(exp_dir).config["training_service"]["machine_list"][0]["password"]
    assert shown == "**********"


def test_host_keys_are_verified(tmp_path: Path, ssh_lab: SshLab, caplog: pytest.LogCaptureFixture) -> None:
    host = ssh_lab.hosts[0]
    other_key = tmp_path / "other_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_key)], check=True)
    changed = tmp_path / "known_hosts_changed"
    changed.write_text(f"{host.host} {other_key.with_suffix('.pub').read_text().split(' ', 2)[0]} "
                       f"{other_key.with_suffix('.pub').read_text().split(' ', 2)[1]}\n")
    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")
    code = tmp_path / "code"
    _trial(code, 1, 0)

    def run(known: Path, trust: bool) -> ExperimentState:
        _, exp_dir = make_experiment(
            code, searchSpace=SPACE, trialCommand="python3 trial.py", trialConcurrency=1, maxTrialNumber=1,
            trainingService=_remote(ssh_lab, [host], knownHostsFile=str(known), trustUnknownHosts=trust))
        return run_experiment(exp_dir, timeout=60, **FAST)

    for known, trust in ((changed, False), (changed, True), (empty, False)):
        with pytest.raises(ServiceError, match=f"host key of {host.user}@{host.host}:22 is not trusted"):
            run(known, trust)  # a changed key is refused even with trustUnknownHosts
    with caplog.at_level(logging.WARNING, logger="nnix"):
        st = run(empty, True)  # an unknown host is accepted when told so, with a warning
    assert st.status is ExperimentStatus.DONE
    assert "host key of" in caplog.text and "not verified" in caplog.text


@pytest.mark.parametrize("reuse", [True, False], ids=["reuse", "non-reuse"])
def test_agent_killed_mid_trial(tmp_path: Path, ssh_lab: SshLab, reuse: bool) -> None:
    exp_id, exp_dir = _experiment(tmp_path, ssh_lab, steps=20, step_s=0.1, concurrency=2, trials=2,
                                  hosts=ssh_lab.hosts[:1], reuseMode=reuse)
    killed: list[int] = []

    def kill_agent() -> None:
        def metrics_flow() -> bool:
            return any(len(t.metrics) >= 5 for t in read_state(exp_dir).trials.values())

        wait_until(metrics_flow, 30.0)
        for pid in ssh_lab.agent_pids(exp_id):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    killer = _in_background(kill_agent)
    st = run_experiment(exp_dir, timeout=60, **FAST)
    killer.join(5)
    assert killed, "no agent was killed"
    assert st.status is ExperimentStatus.DONE
    assert all(t.status is TrialStatus.SUCCEEDED for t in st.trials.values()), [t.message for t in st.trials.values()]
    _assert_metrics_once(st, 20)  # the new agent attached: nothing lost, nothing twice
    assert set(_starts(exp_dir).values()) == {1}  # re-attached, not re-run


@pytest.mark.parametrize("reuse", [True, False], ids=["reuse", "non-reuse"])
def test_network_cut_shorter_than_the_timeout_loses_nothing(tmp_path: Path, ssh_lab: SshLab, reuse: bool) -> None:
    """A ~3 s partition (the issue's 30 s, shortened) while a trial reports: the agent's requests time
    out, it buffers, reconnects and re-sends; every metric arrives once and no trial is failed."""
    victim = ssh_lab.hosts[2]
    _, exp_dir = _experiment(tmp_path, ssh_lab, steps=30, step_s=0.1, concurrency=1, trials=1, hosts=[victim],
                             lostHostTimeout=20, reuseMode=reuse)
    cut: list[float] = []

    def partition() -> None:
        wait_until(lambda: any(len(t.metrics) >= 3 for t in read_state(exp_dir).trials.values()), 30.0)
        victim.link(False)
        t0 = time.monotonic()
        time.sleep(3.0)
        victim.link(True)
        cut.append(time.monotonic() - t0)

    th = _in_background(partition)
    st = run_experiment(exp_dir, timeout=60, agent_request_timeout=1.0, **FAST)
    th.join(5)
    assert cut and cut[0] >= 3.0
    assert st.status is ExperimentStatus.DONE and st.count(TrialStatus.SUCCEEDED) == 1, st.message
    _assert_metrics_once(st, 30)


@pytest.mark.parametrize("reuse", [True, False], ids=["reuse", "non-reuse"])
def test_manager_killed_and_resumed_reattaches_remote_trials(tmp_path: Path, ssh_lab: SshLab, reuse: bool) -> None:
    code = tmp_path / "code"
    _trial(code, 15, 0.1)
    cfg = tmp_path / "config.yml"
    cfg.write_text(json.dumps({
        "searchSpace": SPACE, "trialCommand": "python3 trial.py", "trialCodeDirectory": str(code),
        "trialConcurrency": 2, "maxTrialNumber": 3, "tuner": {"name": "Random"},
        "trainingService": _remote(ssh_lab, ssh_lab.hosts[:2], reuseMode=reuse),
    }))
    nnix = [sys.executable, "-m", "nnix.cli.main"]
    r = subprocess.run([*nnix, "create", "--config", str(cfg), "--port", "0"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    exp_id = next(line.split()[1] for line in r.stdout.splitlines() if line.startswith("Experiment "))
    exp_dir = Path(Registry().get(exp_id).dir)

    def two_running() -> bool:
        st = read_state(exp_dir)
        running = [t for t in st.trials.values() if t.status is TrialStatus.RUNNING]
        return len(running) == 2 and all(len(t.intermediate) >= 3 for t in running)

    wait_until(two_running, 60)
    st = read_state(exp_dir)
    os.kill(st.manager_pid or 0, signal.SIGKILL)
    wait_until(lambda: not pid_alive(st.manager_pid), 30.0)
    st = read_state(exp_dir)  # what the killed manager wrote: it may have recorded metrics since the read above
    assert len(ssh_lab.agent_pids(exp_id)) >= 2  # the agents outlive their manager ...
    wait_until(lambda: _unrecorded_lines(st), 60)  # ... and their trials report what no manager recorded
    # A manager killed between acknowledging lines and writing them: the store lacks lines the agents
    # will not send again unless the resumed manager says what it has (made certain here, not left to luck).
    running = [t.trial_id for t in st.trials.values() if t.status is TrialStatus.RUNNING]
    with contextlib.closing(sqlite3.connect(exp_dir / STORE_NAME, isolation_level=None)) as db:
        for tid in running:
            db.execute("DELETE FROM events WHERE seq IN (SELECT seq FROM events WHERE kind = 'MetricReported' AND "
                       "trial_id = ? ORDER BY seq DESC LIMIT 2)", (tid,))
    assert all(len(read_state(exp_dir).trials[tid].metrics) == len(st.trials[tid].metrics) - 2 for tid in running)
    res = subprocess.run([*nnix, "resume", exp_id, "--foreground", "--port", "0"], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    st = read_state(exp_dir)
    assert st.status is ExperimentStatus.DONE
    assert len(st.trials) == 3
    assert all(t.status is TrialStatus.SUCCEEDED for t in st.trials.values()), [t.message for t in st.trials.values()]
    _assert_metrics_once(st, 15)
    assert set(_starts(exp_dir).values()) == {1}  # re-attached, not re-run
    wait_until(lambda: not ssh_lab.agent_pids(exp_id), 60)


def test_gpu_request_no_machine_can_meet_is_an_error_naming_the_machines(tmp_path: Path, ssh_lab: SshLab) -> None:
    code = tmp_path / "code"
    _trial(code, 1, 0)
    _, exp_dir = make_experiment(code, searchSpace=SPACE, trialCommand="python3 trial.py", trialConcurrency=1,
                                 maxTrialNumber=1, trialGpuNumber=1,
                                 trainingService=_remote(ssh_lab, ssh_lab.hosts[:2]))
    st = run_experiment(exp_dir, timeout=60, **FAST)
    assert st.status is ExperimentStatus.ERROR
    assert "no machine can ever run this trial" in st.message
    assert all(f"{h.user}@{h.host}:22: No GPU found" in st.message for h in ssh_lab.hosts[:2]), st.message


# --- a manager killed -9 at chosen points (nnix.testing.killpoints), stop and clean after it ---------------------
METRICS = 12


def _chain(tmp_path: Path, lab: SshLab, **service: Any) -> Chain:
    gates = lab.home / f"gates-{tmp_path.name}"  # where the lab user's trials can see them
    fields = chain_experiment(tmp_path / "code", gates, metrics=METRICS)
    exp_id, _ = make_experiment(tmp_path / "code", **{**fields, "trialConcurrency": 2, "maxTrialNumber": 4,
                                                     "trainingService": _remote(lab, lab.hosts[:2], **service)})
    return Chain(exp_id, tmp_path, gates, dict(FAST))


def test_a_manager_killed_at_each_point_is_resumed_on_ssh_hosts(tmp_path: Path, ssh_lab: SshLab) -> None:
    """Reuse, two hosts: kill -9 before an agent is started, once it was started (its manager never heard of it),
    at its hello, while trials run, just after one ended; each time resumed. Every trial succeeds, every metric
    once, no ERROR, no agent or trial process of the experiment left on the hosts."""
    chain = _chain(tmp_path, ssh_lab)
    kill_at_every_point_and_resume(chain, METRICS, remote=True)


@pytest.mark.parametrize("verb", ["stop", "delete"])
def test_stop_or_delete_after_a_kill_ends_the_agents_and_trials(tmp_path: Path, ssh_lab: SshLab, verb: str) -> None:
    chain = _chain(tmp_path, ssh_lab)
    chain.kill_at("create", "running")
    assert ssh_lab.agent_pids(chain.exp_id)  # they outlive the manager (for a resume)
    res = nnix_cli("stop", chain.exp_id) if verb == "stop" else nnix_cli("experiment", "delete", chain.exp_id, "--yes")
    assert res.returncode == 0, res.stderr
    assert "killed 1 agent(s)" in res.stdout and "trial(s)" in res.stdout, res.stdout
    assert settled(lambda: leftover_processes(chain.exp_id)) == []
    if verb == "stop":
        assert_stopped_with_its_running_trials_canceled(chain.exp_dir)


def test_an_agent_left_on_a_lost_host_is_listed_by_platform_clean_and_ended_by_stop(tmp_path: Path,
                                                                                   ssh_lab: SshLab) -> None:
    """A host cut while its trial runs is written off (requeue) and the experiment ends on the other host; its agent
    and trial live on there, cut off (the agent would retry for a day). Once the host is back, `nnix platform
    clean` lists the live agent, and `nnix stop` ends it and the trial."""
    victim = ssh_lab.hosts[1]
    release = _flag(ssh_lab, tmp_path)
    exp_id, exp_dir = _experiment(tmp_path, ssh_lab, steps=15, step_s=0.1, trials=2, concurrency=2,
                                  hosts=ssh_lab.hosts[:2], lostHostPolicy="requeue", lostHostTimeout=3,
                                  hold=([victim.name], release))
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"searchSpace": SPACE, "trialCommand": "python3 trial.py", "trialConcurrency": 1,
                               "tuner": {"name": "Random"}, "trialCodeDirectory": str(tmp_path / "code"),
                               "trainingService": _remote(ssh_lab, ssh_lab.hosts[:2])}))
    errors: list[BaseException] = []

    def cut() -> None:
        try:
            wait_until(lambda: any(t.status is TrialStatus.RUNNING and str(t.output_dir).startswith(victim.host + ":")
                                   and len(t.metrics) >= 2 for t in read_state(exp_dir).trials.values()), 120)
            victim.link(False)
        except BaseException as e:
            errors.append(e)

    cutter = _in_background(cut)
    manager = Chain(exp_id, tmp_path, release.parent, dict(FAST)).start("create")  # (a process: `nnix stop` below)
    try:
        manager.wait(240)
    finally:
        if manager.poll() is None:
            manager.kill()
        victim.link(True)
    _join(cutter, errors)
    st = read_state(exp_dir)
    assert st.status is ExperimentStatus.DONE, st.message
    assert all(t.status is TrialStatus.SUCCEEDED for t in st.trials.values())
    left = ssh_lab.agent_pids(exp_id)
    assert left  # the lost host's agent, cut off from its manager
    listed = nnix_cli("platform", "clean", "-c", str(cfg), input="n\n")
    assert f"remote {victim.user}@{victim.host}:{victim.port}: live agent " in listed.stdout, listed.stdout
    assert f"of experiment {exp_id}" in listed.stdout, listed.stdout
    said = nnix_cli("stop", exp_id)
    assert said.returncode == 0, said.stderr
    assert f"remote {victim.user}@{victim.host}:{victim.port}: killed 1 agent(s)" in said.stdout, said.stdout
    release.touch()
    assert settled(lambda: leftover_processes(exp_id)) == []


def test_a_link_cut_during_the_python_check_is_transient(tmp_path: Path, ssh_lab: SshLab,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    """The link of a host is cut while its Python check runs (its `python3` waits there until the test says): the
    host is not given up for good; once the link is back it is set up (the other host's trial waits until then)."""
    victim, other = ssh_lab.hosts[0], ssh_lab.hosts[1]
    tools = ssh_lab.home / f"py-{tmp_path.name}"
    tools.mkdir()
    reached, go = tools / "reached", tools / "go"
    (tools / "python3").write_text(f"#!/bin/sh\nif [ ! -f {go} ]; then touch {reached}; "
                                   f"while [ ! -f {go} ]; do sleep 0.05; done; fi\nexec /usr/bin/python3 \"$@\"\n")
    (tools / "python3").chmod(0o755)
    tools.chmod(0o777)
    release = _flag(ssh_lab, tmp_path)
    code = tmp_path / "code"
    _trial(code, 3, 0.05, hold=([other.name], release))
    machines = [victim.machine(pythonPath=str(tools)), other.machine()]
    _, exp_dir = make_experiment(code, searchSpace=SPACE, trialCommand="python3 trial.py", trialConcurrency=1,
                                 maxTrialNumber=1, trainingService={**_remote(ssh_lab), "machineList": machines,
                                                                    "lostHostTimeout": 4})
    caplog.set_level(logging.INFO, logger="nnix.services.remote")
    label = f"{victim.user}@{victim.host}:{victim.port}"
    errors: list[BaseException] = []

    def said(words: str) -> bool:
        return any(words in r.getMessage() for r in caplog.records)

    def cut_while_checking() -> None:
        try:
            wait_until(reached.exists, 120, "the Python check to run on the host")
            victim.link(False)
            wait_until(lambda: said(f"the SSH connection to {label} was lost while a command ran there"), 60)
            victim.link(True)
            go.touch()
            wait_until(lambda: said(f"machine {label} ready"), 120, "the host to be set up once back")
        except BaseException as e:
            errors.append(e)
        finally:
            release.touch()

    cutter = _in_background(cut_while_checking)
    try:
        st = run_experiment(exp_dir, timeout=240, **FAST)
    finally:
        victim.link(True)
        go.touch()
        release.touch()
    _join(cutter, errors)
    assert st.status is ExperimentStatus.DONE, st.message
    assert not said("no usable Python")
