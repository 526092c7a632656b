"""nnix.testing.FakeService: scripted outcomes, deterministic; and the contract suite catches services that break
the contract (each broken fake below fails the one contract test about what it breaks)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nnix.errors import ServiceError
from nnix.model.runs import Exited, Metrics, Requeued, RunnerEvent, TrialSpec
from nnix.services.base import TrainingService
from nnix.testing import FakeMachine, FakeService, Outcome
from nnix.testing.fakeservice import FAKE_PID_BASE, params, sequence_id
from nnix.testing.servicecontract import FakeServiceContract


def _spec(trial_id: str, x: int = 1, seq: int = 0) -> TrialSpec:
    return TrialSpec(trial_id, "true", Path("/nonexistent"), Path("/nonexistent") / trial_id,
                     {"parameters": {"x": x}}, {"NNI_TRIAL_SEQ_ID": str(seq)})


def _drive(machine: FakeMachine, *specs: TrialSpec) -> list[RunnerEvent]:
    events: list[RunnerEvent] = []

    async def main() -> None:
        svc = FakeService(events.append, machine)
        await svc.start()
        for spec in specs:
            assert await svc.submit(spec) is not None
        while sum(isinstance(e, (Exited, Requeued)) for e in events) < len(specs):
            await asyncio.sleep(0)
        await svc.close(kill_trials=True)

    asyncio.run(asyncio.wait_for(main(), 30))
    return events


def test_outcomes_follow_the_script_in_submission_order() -> None:
    def script(spec: TrialSpec) -> Outcome:
        if sequence_id(spec) == 1:
            return Outcome(intermediate=(0.5,), exit_code=2, stderr="Traceback...\nValueError: bad\n")
        if sequence_id(spec) == 2:
            return Outcome(intermediate=(1, 2), lost="host h1 lost")
        if sequence_id(spec) == 3:
            return Outcome(lost="host h2 lost", requeue=True)
        return Outcome(intermediate=(1, 2), final=params(spec)["x"] * 10)

    machine = FakeMachine(script)
    events = _drive(machine, *(_spec(f"t{i}", x=i + 1, seq=i) for i in range(4)))
    lines = {tid: [item for e in events if isinstance(e, Metrics) and e.trial_id == tid for item in e.items]
             for tid in ("t0", "t1", "t2", "t3")}
    assert lines["t0"] == [(0, {"type": "PERIODICAL", "sequence": 0, "value": 1}),
                           (1, {"type": "PERIODICAL", "sequence": 1, "value": 2}),
                           (2, {"type": "FINAL", "sequence": 0, "value": 10})]
    assert lines["t3"] == []
    ends = {e.trial_id: e for e in events if isinstance(e, (Exited, Requeued))}
    assert ends["t0"] == Exited("t0", 0, None, "", "", 0)
    assert ends["t1"] == Exited("t1", 2, None, "Traceback...\nValueError: bad\n", "", 0)
    assert ends["t2"] == Exited("t2", None, None, "", "host h1 lost", 0)
    assert ends["t3"] == Requeued("t3", "host h2 lost")
    assert [s.trial_id for s in machine.submitted] == ["t0", "t1", "t2", "t3"]
    assert machine.peak == 4 and machine.running() == []


def test_the_same_script_gives_the_same_events() -> None:
    script = Outcome(intermediate=range(5), final=1)
    first = _drive(FakeMachine(script), _spec("a"), _spec("b"))
    assert first == _drive(FakeMachine(script), _spec("a"), _spec("b"))


def test_a_refused_trial_raises_and_a_full_machine_says_not_now() -> None:
    async def main() -> None:
        machine = FakeMachine(lambda spec: Outcome(refuse="needs 8 GPUs") if spec.trial_id == "big" else
                              Outcome(hang=True), slots=1)
        svc = FakeService(lambda e: None, machine)
        with pytest.raises(ServiceError, match="needs 8 GPUs"):
            await svc.submit(_spec("big"))
        started = await svc.submit(_spec("a"))
        assert started is not None and started.pid >= FAKE_PID_BASE
        assert await svc.submit(_spec("b")) is None and "busy" in svc.waiting_reason()
        await svc.close(kill_trials=True)
        assert machine.running() == []

    asyncio.run(main())


def test_fake_pids_are_never_real_processes() -> None:
    with open("/proc/sys/kernel/pid_max", encoding="utf-8") as f:
        assert int(f.read()) < FAKE_PID_BASE
    with pytest.raises(ProcessLookupError):
        os.kill(FAKE_PID_BASE, 0)


# -- the contract suite catches broken services ---------------------------------------------------------------


class _Broken(FakeServiceContract):
    """The contract on a fake service class of the test's choice."""

    service_class: type[FakeService]
    timeout = 2.0  # a broken service may leave a wait unmet: fail fast

    def make_service(self, emit: Callable[[RunnerEvent], None], busy: bool = False) -> TrainingService:
        self.machine.slots = 1 if busy else None
        return self.service_class(emit, self.machine)


class _ExitsTwice(FakeService):
    def _end(self, trial: Any, end: Any, *, report: bool = True, cancel_task: bool = True) -> None:
        super()._end(trial, end, report=report, cancel_task=cancel_task)
        if report:
            self._emit(end)


class _CancelIgnored(FakeService):
    async def cancel(self, trial_id: str) -> None:
        if trial_id not in self.machine.trials:
            raise KeyError(trial_id)


class _CloseKillsNothing(FakeService):
    async def close(self, kill_trials: bool) -> None:
        await super().close(kill_trials=False)


class _ReattachLosesLines(FakeService):
    async def reattach(self, trial_id: str, output_dir: Path, pid: int | None, pid_start: str | None,
                       after_index: int, gpus: tuple[int, ...] | None) -> None:
        trial = self.machine.trials[trial_id]
        await super().reattach(trial_id, output_dir, pid, pid_start, max(after_index, trial.written - 1), gpus)


class _NeverBusy(FakeService):
    async def submit(self, spec: TrialSpec) -> Any:
        self.machine.slots = None
        return await super().submit(spec)


@pytest.mark.parametrize(("service_class", "test"), [
    (_ExitsTwice, "test_submit_then_lines_in_order_and_one_exit"),
    (_CancelIgnored, "test_cancel_ends_a_running_trial_and_is_harmless_otherwise"),
    (_CloseKillsNothing, "test_close_with_kill_trials_leaves_nothing_running"),
    (_ReattachLosesLines, "test_reattach_after_a_restart_gets_what_was_not_recorded"),
    (_NeverBusy, "test_submit_when_busy_waits_with_a_reason"),
])
def test_the_contract_fails_a_service_that_breaks_it(service_class: type[FakeService], test: str,
                                                       tmp_path: Path) -> None:
    suite = _Broken()
    suite.service_class = service_class
    with pytest.raises((AssertionError, KeyError, TimeoutError)):
        getattr(suite, test)(tmp_path)
    good = _Broken()
    good.service_class = FakeService
    getattr(good, test)(tmp_path / "good")  # and the honest fake passes the same test
