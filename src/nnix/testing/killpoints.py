"""The kill-timing suite's parts (tests/services/test_{slurm,ray,kubernetes,remote}.py and bench/killpoints.py): a
real manager process (:func:`nnix.host.run.run_manager`, REST, lock and log included) killed with ``kill -9`` at
chosen points of an environment's life, then resumed, or stopped, or deleted; and the checks that follow (every
trial done, every metric once, no ERROR logged, nothing of the experiment left on the engine or in ``ps``).

The points are reached deterministically, never by a delay:

* ``submit``: the environment is recorded, the engine not yet asked (the manager freezes before the launcher's
  ``launch``);
* ``submitted``: the engine took it, the manager has not recorded its handle (frozen as ``launch`` returns);
* ``hello``: its agent started and said hello, no trial handed to it yet (frozen in the first hello);
* ``running``: trials run and reported (the store shows a trial RUNNING with 2 metrics);
* ``ended``: a trial ended (the store shows one SUCCEEDED) while the others still run (they wait at a gate file
  until the test opens it, so the experiment cannot end first).

A frozen manager writes a marker file first and then blocks its whole process (``time.sleep``), so nothing happens
between the point and the kill. Run ``python -m nnix.testing.killpoints EXP_ID ACTION POINT MARKER OPTIONS_JSON``
(``POINT`` ``-``: none).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from nnix.home import read_state
from nnix.model.status import ExperimentStatus, TrialStatus
from nnix.testing.faults import Audit, audit, exp_dir_of
from nnix.testing.waiting import wait_until

__all__ = ["POINTS", "Chain", "chain_experiment", "errors_logged", "leftover_processes", "main"]

POINTS = ("submit", "submitted", "hello", "running", "ended")
HOOKED = ("submit", "submitted", "hello")  # reached inside the manager (a marker file); the others: in the store


def _freeze(marker: Path) -> None:
    """Say the point is reached, then block this whole process until it is killed."""
    marker.write_text(f"{os.getpid()}\n")
    time.sleep(3600)
    os._exit(3)


def hooked(base: type[Any], point: str, marker: Path) -> type[Any]:
    """``base`` (a cluster service class) whose manager freezes at ``point`` (one of :data:`HOOKED`)."""

    class Hooked(base):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            real = self.launcher.launch

            async def launch(request: Any) -> str:
                if point == "submit":
                    _freeze(marker)
                handle: str = await real(request)
                if point == "submitted":
                    _freeze(marker)
                return handle

            self.launcher.launch = launch
            handler = self.placement  # what hears from the agents (nnix.services.cluster.Placement)
            real_hello = handler.on_hello

            def on_hello(environment_id: str, hello: Any) -> None:
                if point == "hello":
                    _freeze(marker)
                real_hello(environment_id, hello)

            handler.on_hello = on_hello

    Hooked.__name__ = Hooked.__qualname__ = f"Hooked{base.__name__}"
    return Hooked


def main(argv: Sequence[str] | None = None) -> int:
    """The manager process: ``EXP_ID ACTION POINT MARKER OPTIONS_JSON``."""
    from nnix.config import ExperimentConfig
    from nnix.host.run import run_manager
    from nnix.registry import entry_point_group

    exp_id, action, point, marker, options = (argv if argv is not None else sys.argv[1:])[:5]
    kwargs: dict[str, Any] = json.loads(options)
    if point != "-":
        config = ExperimentConfig.model_validate(read_state(exp_dir_of(exp_id), summary=True).config)
        eps = {ep.name: ep for ep in entry_point_group("nnix.services")}
        kwargs["service_class"] = hooked(eps[config.training_service.platform].load(), point, Path(marker))
    outcome = run_manager(exp_id, action, port=0, live=False, **kwargs)
    return 0 if getattr(outcome, "status", None) is not ExperimentStatus.ERROR else 1


# --- the test's side -------------------------------------------------------------------------------------------------


def chain_experiment(code: Path, gates: Path, *, metrics: int = 20, step_s: float = 0.05) -> dict[str, Any]:
    """The trial code (in ``code``) and config fields of a kill-chain experiment: each trial reports ``metrics``
    intermediate results then a final one, waiting at its 5th result until ``gates/go-<its sequence id>`` or
    ``gates/go-all`` exists (:meth:`Chain.open`). Give ``trainingService``, ``trialConcurrency``, ``maxTrialNumber``."""
    code.mkdir(parents=True, exist_ok=True)
    gates.mkdir(parents=True, exist_ok=True)
    os.chmod(gates, 0o755)
    (code / "chain_trial.py").write_text(
        "import nni, os, time\np = nni.get_next_parameter()\n"
        f"mine = os.path.join({str(gates)!r}, 'go-' + os.environ.get('NNI_TRIAL_SEQ_ID', ''))\n"
        f"every = os.path.join({str(gates)!r}, 'go-all')\n"
        f"for i in range({metrics}):\n"
        "    while i == 5 and not (os.path.exists(mine) or os.path.exists(every)):\n        time.sleep(0.05)\n"
        f"    nni.report_intermediate_result(i)\n    time.sleep({step_s})\n"
        "nni.report_final_result(p['x'])\n")
    return {"searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}},
            "trialCommand": "python3 chain_trial.py", "trialCodeDirectory": str(code),
            "tuner": {"name": "Random", "classArgs": {"seed": 5}}}


def _succeeded(exp_dir: Path) -> int:
    return sum(t.status is TrialStatus.SUCCEEDED for t in read_state(exp_dir).trials.values())


@dataclass
class Chain:
    """One experiment's managers, each killed -9 at its point, then resumed (see the module docstring)."""

    exp_id: str
    work: Path
    gates: Path
    options: dict[str, Any] = field(default_factory=dict)
    hit: list[str] = field(default_factory=list)  # the points a manager was killed at
    seconds: dict[str, float] = field(default_factory=dict)  # how long each manager ran until its kill

    @property
    def exp_dir(self) -> Path:
        return exp_dir_of(self.exp_id)

    def start(self, action: str, point: str = "-") -> subprocess.Popen[bytes]:
        marker = self.work / f"reached-{point}-{len(self.hit)}"
        with contextlib.suppress(FileNotFoundError):
            marker.unlink()
        out = open(self.work / "managers.out", "ab")
        try:
            return subprocess.Popen(
                [sys.executable, "-m", "nnix.testing.killpoints", self.exp_id, action, point, str(marker),
                 json.dumps(self.options)], stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=os.environ.copy())
        finally:
            out.close()

    def kill_at(self, action: str, point: str, timeout: float = 180.0) -> None:
        """Start a manager (``action``), wait until it reaches ``point`` and ``kill -9`` it."""
        begun = time.monotonic()
        done_before = _succeeded(self.exp_dir)
        if point == "ended":  # one trial that waits at its gate may go on: this manager sees it end
            waiting = sorted(t.sequence_id for t in read_state(self.exp_dir).trials.values()
                             if t.status in (TrialStatus.RUNNING, TrialStatus.WAITING))
            if not waiting:
                raise AssertionError("point 'ended': no trial left to end")
            self.open(waiting[0])
        proc = self.start(action, point if point in HOOKED else "-")
        marker = self.work / f"reached-{point}-{len(self.hit)}"

        def there() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"the manager ended (status {proc.returncode}) before point {point!r}: "
                                     f"{self.log_tail()}")
            if point in HOOKED:
                return marker.exists()
            if point == "running":
                return any(t.status is TrialStatus.RUNNING and len(t.metrics) >= 2
                           for t in read_state(self.exp_dir).trials.values())
            return _succeeded(self.exp_dir) > done_before

        try:
            wait_until(there, timeout, f"the manager to reach point {point!r}")
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait()
        self.hit.append(point)
        self.seconds[point] = time.monotonic() - begun

    def open(self, sequence_id: int | None = None) -> None:
        """Let trial ``sequence_id`` (None: every trial) go on past its gate."""
        (self.gates / ("go-all" if sequence_id is None else f"go-{sequence_id}")).touch()

    def finish(self, action: str = "resume", timeout: float = 240.0) -> ExperimentStatus:
        """Every gate opened, a manager run to the end (no kill); the experiment's final status."""
        self.open()
        proc = self.start(action)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            raise AssertionError(f"the resumed manager did not finish within {timeout:.0f} s: {self.log_tail()}"
                                 ) from None
        return read_state(self.exp_dir).status

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = (self.exp_dir / "log" / "manager.log").read_text(errors="replace")
        except OSError:
            text = ""
        return "\n".join(text.splitlines()[-lines:])


def errors_logged(exp_dir: Path) -> list[str]:
    """The ERROR lines of the experiment's manager log (every manager it had)."""
    out = []
    for path in sorted((exp_dir / "log").glob("manager.log*")):
        with contextlib.suppress(OSError):
            out += [ln for ln in path.read_text(errors="replace").splitlines() if " ERROR " in ln]
    return out


def leftover_processes(exp_id: str) -> list[str]:
    """Processes that name the experiment in their command line or environment (its trials carry
    ``NNI_EXP_ID``; Slurm agents the job name), other than this process and its ancestors: ``pid command``."""
    mine = set()
    pid = os.getpid()
    while pid > 1:
        mine.add(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                pid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    needle = exp_id.encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in mine:
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state != b"Z" and (needle in cmd or needle in env):
            words = cmd.replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{name} {words[:200]}")
    return found


_Left = TypeVar("_Left", list[str], dict[str, list[str]])


def settled(check: Callable[[], _Left], timeout: float = 30.0) -> _Left:
    """``check()`` (what is left) once it is empty, or what it still says after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        left = check()
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def audited(exp_dir: Path, metrics: int, remote: bool = False) -> Audit:
    """:func:`nnix.testing.faults.audit` of the experiment (channel files against the store); ``remote``: the trials
    ran on SSH hosts of a lab, whose files are on this file system (``host[:port]:path``)."""
    return audit(exp_dir, metrics, (lambda s: Path(s.rpartition(":")[2])) if remote else Path)


if __name__ == "__main__":
    sys.exit(main())


KILL_POINTS = ("submitted", "hello", "running", "ended")  # where a resumed manager is killed again (after "submit")


def kill_at_every_point_and_resume(chain: Chain, metrics: int, trials: int = 4, remote: bool = False,
                                   leftovers_wait: float = 30.0) -> None:
    """The kill chain every engine's lab runs: kill -9 the creating manager before its first submit, then each
    resumed one at every point of :data:`KILL_POINTS`, then resume to the end. Asserts what a user is promised: DONE,
    every trial SUCCEEDED, every metric recorded once, nothing logged as an ERROR, no process of the experiment left
    here (what is left on the engine itself the caller checks)."""
    chain.kill_at("create", "submit")
    for point in KILL_POINTS:
        chain.kill_at("resume", point)
    assert chain.finish() is ExperimentStatus.DONE, chain.log_tail()
    st = read_state(chain.exp_dir)
    assert [t.status for t in st.trials.values()] == [TrialStatus.SUCCEEDED] * trials, [
        t.message for t in st.trials.values()]
    a = audited(chain.exp_dir, metrics, remote=remote)
    assert a.ok and not a.irregular, a
    assert errors_logged(chain.exp_dir) == []
    assert settled(lambda: leftover_processes(chain.exp_id), leftovers_wait) == []


def assert_stopped_with_its_running_trials_canceled(exp_dir: Path) -> None:
    """What `nnix stop` of a killed manager's experiment records: STOPPED, the trials it showed RUNNING canceled."""
    st = read_state(exp_dir)
    assert st.status is ExperimentStatus.STOPPED
    assert any(t.status is TrialStatus.USER_CANCELED for t in st.trials.values())
    assert not any(t.status is TrialStatus.RUNNING for t in st.trials.values())
