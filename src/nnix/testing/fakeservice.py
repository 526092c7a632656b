"""A training service that runs trials as scripted, in this process: no subprocess, no file, no network.

For unit tests of the manager (its limits, tuner and assessor calls, cancels, stops, resumes) where a real
trial process would only cost time. Each trial does what its :class:`Outcome` says: report intermediate
results (one per step), a final result, then exit with a code, a signal, a line on stderr, or lose its
environment; or hang until it is cancelled or :meth:`FakeService.release`\\ d::

    fake = FakeService.scripted(lambda spec: Outcome(intermediate=(1, 2), final=params(spec)["x"]))
    st = run_fake_experiment(exp_dir, fake)          # nnix.testing.experiments

Deterministic: steps are event-loop turns unless an outcome asks for ``step`` seconds; trials report in the
order they were submitted. A :class:`FakeMachine` outlives the services that use it: trials left running by
``close(kill_trials=False)`` go on there, and a later service (a resumed manager's) re-attaches them and
reports what the earlier one had not (the metric lines after ``after_index``, then the exit).
"""

from __future__ import annotations

import asyncio
import itertools
import signal as signals
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nnix.errors import ServiceError
from nnix.model.runs import Exited, Metrics, Requeued, RunnerEvent, Started, TrialSpec

__all__ = ["FAKE_PID_BASE", "FakeMachine", "FakeService", "Outcome", "params", "sequence_id"]

# above the kernel's PID_MAX_LIMIT (2**22): no real process has such a pid, so nothing can signal one by mistake
FAKE_PID_BASE = 2**22 + 1
ENVIRONMENT_ID = "fake-env"


@dataclass(frozen=True)
class Outcome:
    """What one fake trial does, in order: its metric lines, then (``hang``) waiting, then its end."""

    intermediate: Sequence[Any] = ()  # PERIODICAL values, sequence 0, 1, ...
    final: Any = None  # the FINAL value (None: no final result)
    exit_code: int | None = 0
    signal: int | None = None
    stderr: str = ""  # the end of its stderr (what a failed trial's message is made of)
    hang: bool = False  # after its intermediate results (before its final one), run until cancelled or released
    lost: str = ""  # the environment is lost after the metric lines: Exited(None) with this message...
    requeue: bool = False  # ... or Requeued with it (a lostHostPolicy of requeue)
    step: float = 0.0  # seconds of simulated work before each metric line and before the end
    lines: Sequence[Any] | None = None  # raw channel lines instead of intermediate/final (untrusted input)
    leftovers: int = 0
    refuse: str = ""  # submit raises ServiceError(refuse): a trial that can never start

    def hang_at(self) -> int:
        """How many metric lines come before the hang."""
        return len(self.lines) if self.lines is not None else len(self.intermediate)

    def metric_lines(self) -> list[Any]:
        if self.lines is not None:
            return list(self.lines)
        out: list[Any] = [{"type": "PERIODICAL", "sequence": i, "value": v} for i, v in enumerate(self.intermediate)]
        if self.final is not None:
            out.append({"type": "FINAL", "sequence": 0, "value": self.final})
        return out


Script = Outcome | Callable[[TrialSpec], Outcome]


def params(spec: TrialSpec) -> dict[str, Any]:
    """The trial's parameters (what ``nni.get_next_parameter()`` would return)."""
    value = spec.record.get("parameters")
    return value if isinstance(value, dict) else {}


def sequence_id(spec: TrialSpec) -> int:
    """The trial's sequence number (``nni.get_sequence_id()``)."""
    return int(spec.env.get("NNI_TRIAL_SEQ_ID", "-1"))


@dataclass
class _Trial:
    spec: TrialSpec
    outcome: Outcome
    pid: int
    written: int = 0  # metric lines the trial has written (reported or not)
    released: bool = False
    ended: Exited | Requeued | None = None
    wake: asyncio.Event | None = None


@dataclass
class FakeMachine:
    """Where fake trials live: shared by the services of one test (a manager and the one that resumes it).

    ``submitted`` lists the specs in submission order, ``cancelled`` the ids cancelled while running."""

    script: Script = field(default_factory=Outcome)
    slots: int | None = None  # trials at once (None: no limit); submit says "not now" beyond
    submitted: list[TrialSpec] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    trials: dict[str, _Trial] = field(default_factory=dict)
    peak: int = 0  # the most trials running at once
    _pids: itertools.count[int] = field(default_factory=lambda: itertools.count(FAKE_PID_BASE))

    def outcome(self, spec: TrialSpec) -> Outcome:
        return self.script if isinstance(self.script, Outcome) else self.script(spec)

    def release(self, trial_id: str) -> None:
        """Let a hanging trial go on to its end (now, or when a service next watches it)."""
        trial = self.trials[trial_id]
        trial.released = True
        if trial.wake is not None:
            trial.wake.set()

    def running(self) -> list[str]:
        """Trials that have not ended (whether a service watches them or not)."""
        return [tid for tid, t in self.trials.items() if t.ended is None]


class FakeService:
    """A :class:`~nnix.services.base.TrainingService` over a :class:`FakeMachine` (see the module's text)."""

    platform = "local"  # what trials see as NNI_PLATFORM

    def __init__(self, emit: Callable[[RunnerEvent], None], machine: FakeMachine | None = None) -> None:
        self._emit = emit
        self.machine = machine if machine is not None else FakeMachine()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._closed = False

    @classmethod
    def scripted(cls, script: Script, slots: int | None = None) -> FakeMachine:
        """A machine whose trials follow ``script``; give it to :func:`factory` or to ``FakeService``."""
        return FakeMachine(script, slots)

    @staticmethod
    def factory(machine: FakeMachine) -> Callable[[Callable[[RunnerEvent], None]], FakeService]:
        """The ``service_factory`` of an :class:`~nnix.core.manager.ExperimentManager` running on ``machine``."""
        return lambda emit: FakeService(emit, machine)

    # -- the TrainingService protocol ------------------------------------------------------------------
    async def start(self) -> None:
        return None

    async def submit(self, spec: TrialSpec) -> Started | None:
        if self._closed:
            raise ServiceError("the fake service is closed")
        outcome = self.machine.outcome(spec)
        if outcome.refuse:
            raise ServiceError(outcome.refuse, "the trial's script refuses it")
        if self.machine.slots is not None and len(self.machine.running()) >= self.machine.slots:
            return None
        trial = _Trial(spec, outcome, next(self.machine._pids))
        self.machine.trials[spec.trial_id] = trial
        self.machine.submitted.append(spec)
        self.machine.peak = max(self.machine.peak, len(self.machine.running()))
        self._watch(trial, after_index=-1)
        return Started(spec.trial_id, trial.pid, "fake", str(spec.output_dir), None, ENVIRONMENT_ID)

    async def cancel(self, trial_id: str) -> None:
        trial = self.machine.trials.get(trial_id)
        if trial is None or trial.ended is not None:
            return  # unknown or ended: nothing to do
        self.machine.cancelled.append(trial_id)
        self._end(trial, Exited(trial_id, None, signals.SIGTERM))

    async def reattach(
        self, trial_id: str, output_dir: Path, pid: int | None, pid_start: str | None, after_index: int,
        gpus: tuple[int, ...] | None,
    ) -> None:
        trial = self.machine.trials.get(trial_id)
        if trial is None:  # nobody ran it on this machine: as a vanished process
            self._emit(Exited(trial_id, None, None, "", "the trial's process is gone"))
            return
        self._watch(trial, after_index)

    def waiting_reason(self) -> str:
        return f"all {self.machine.slots} fake slots are busy" if self.machine.slots is not None else ""

    async def close(self, kill_trials: bool) -> None:
        self._closed = True
        for trial_id, task in list(self._tasks.items()):
            task.cancel()
            trial = self.machine.trials[trial_id]
            if kill_trials and trial.ended is None:
                self._end(trial, Exited(trial_id, None, signals.SIGTERM), report=False)
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._tasks.clear()

    # -- driving trials --------------------------------------------------------------------------------
    def release(self, trial_id: str) -> None:
        """Let a hanging trial go on to its end."""
        self.machine.release(trial_id)

    def _watch(self, trial: _Trial, after_index: int) -> None:
        trial.wake = asyncio.Event()
        trial_id = trial.spec.trial_id
        task = asyncio.ensure_future(self._run(trial, after_index))
        self._tasks[trial_id] = task

        def forget(done: asyncio.Task[None]) -> None:
            if self._tasks.get(trial_id) is done:
                del self._tasks[trial_id]

        task.add_done_callback(forget)

    async def _run(self, trial: _Trial, after_index: int) -> None:
        lines = trial.outcome.metric_lines()
        # what it wrote while nobody watched, then the rest
        unread = [(i, lines[i]) for i in range(after_index + 1, trial.written)]
        if unread:
            self._emit(Metrics(trial.spec.trial_id, unread))
        if trial.ended is not None:  # it ended while nobody watched
            self._emit(trial.ended)
            return
        while trial.written < len(lines):
            if trial.written == trial.outcome.hang_at() and trial.outcome.hang:
                await self._hold(trial)
            await asyncio.sleep(trial.outcome.step)
            i = trial.written
            trial.written += 1
            self._emit(Metrics(trial.spec.trial_id, [(i, lines[i])]))
        if trial.outcome.hang and trial.outcome.hang_at() == len(lines):
            await self._hold(trial)
        await asyncio.sleep(trial.outcome.step)
        o = trial.outcome
        end: Exited | Requeued
        if o.lost and o.requeue:
            end = Requeued(trial.spec.trial_id, o.lost)
        elif o.lost:
            end = Exited(trial.spec.trial_id, None, None, "", o.lost)
        else:
            end = Exited(trial.spec.trial_id, o.exit_code, o.signal, o.stderr, "", o.leftovers)
        self._end(trial, end, cancel_task=False)

    @staticmethod
    async def _hold(trial: _Trial) -> None:
        assert trial.wake is not None
        while not trial.released:
            await trial.wake.wait()
            trial.wake.clear()

    def _end(self, trial: _Trial, end: Exited | Requeued, *, report: bool = True, cancel_task: bool = True) -> None:
        trial.ended = end
        task = self._tasks.get(trial.spec.trial_id)
        if cancel_task and task is not None:
            task.cancel()
        if report:
            self._emit(end)
