"""A conformance suite every training service passes (pytest), stating the contract of
:mod:`nnix.services.base`.

Subclass it in a test module, name the subclass ``Test...``, and say how to build the service: by default
through its platform's entry point, from a ``trainingService`` section (``training_service``) and options
(``service_options``)::

    class TestMyEngine(ServiceContract):
        training_service = {"platform": "myengine", "queue": "test"}

Each test builds a fresh service on a fresh experiment directory, submits :class:`Program`\\ s (a trial that
writes metric lines, may wait to be released, then exits with a code) and watches what the service emits.
Real services run each program as a small shell script that writes the trial channel itself (no Python
start-up); :class:`FakeServiceContract` runs them as :class:`~nnix.testing.fakeservice.Outcome`\\ s.

The contract:

* ``submit`` returns ``Started`` for the trial; then its metric lines arrive in order with their line index,
  and exactly one ``Exited`` with the trial's exit code, after its last line;
* ``cancel`` of a running trial ends it (one ``Exited``, not a success); ``cancel`` of an unknown or ended
  trial changes nothing and does not raise;
* ``close(kill_trials=True)`` leaves nothing running: a trial released afterwards never finishes;
* after ``close(kill_trials=False)`` the trial keeps running, and a new service (a resumed manager's)
  ``reattach``\\ ed to it with ``after_index`` gets every line after that index and the one exit;
* ``waiting_reason`` is words (a string) at any time; where the service has a capacity limit
  (``busy_service``), ``submit`` beyond it returns None and ``waiting_reason`` says why.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
import shlex
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from nnix.model.runs import Exited, Metrics, RunnerEvent, Started, TrialSpec
from nnix.services.base import ServiceContext, TrainingService
from nnix.testing.fakeservice import FakeMachine, FakeService, Outcome
from nnix.testing.waiting import wait_until_async
from nnix.trial import CHANNEL_ENV, METRICS_FILE

__all__ = ["FakeServiceContract", "Program", "ServiceContract", "Watched"]

T = TypeVar("T")


@dataclass(frozen=True)
class Program:
    """A contract trial: ``metrics`` PERIODICAL lines (values 0, 1, ...), then (``hold``) waiting to be released,
    then a FINAL line (value ``metrics``), then exit with ``exit_code``."""

    metrics: int = 2
    exit_code: int = 0
    hold: bool = False

    def lines(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [{"type": "PERIODICAL", "sequence": i, "value": i} for i in range(self.metrics)]
        return [*out, {"type": "FINAL", "sequence": 0, "value": self.metrics}]

    def script(self, gate: str) -> str:
        """The program as a shell script writing the trial channel (``gate``: the file that releases it)."""
        ch = f'"${CHANNEL_ENV}/{METRICS_FILE}"'
        *head, final = (json.dumps(line, separators=(",", ":")) for line in self.lines())
        out = ["#!/bin/sh", f'mkdir -p "${CHANNEL_ENV}"']
        out += [f"printf '%s\\n' {shlex.quote(line)} >> {ch}" for line in head]
        if self.hold:
            out.append(f'while [ ! -e "{gate}" ]; do sleep 0.02; done')
        out += [f"printf '%s\\n' {shlex.quote(final)} >> {ch}", f"exit {self.exit_code}"]
        return "\n".join(out) + "\n"


@dataclass
class Watched:
    """What one service emitted, per trial."""

    lines: dict[str, list[tuple[int, Any]]] = field(default_factory=dict)
    exits: dict[str, list[Exited]] = field(default_factory=dict)
    order: list[RunnerEvent] = field(default_factory=list)

    def emit(self, event: RunnerEvent) -> None:
        self.order.append(event)
        if isinstance(event, Metrics):
            self.lines.setdefault(event.trial_id, []).extend(event.items)
        elif isinstance(event, Exited):
            self.exits.setdefault(event.trial_id, []).append(event)

    def indices(self, trial_id: str) -> list[int]:
        return [i for i, _ in self.lines.get(trial_id, [])]


class ServiceContract:
    """Base class of a service's conformance tests (not collected itself: its name has no ``Test``)."""

    training_service: ClassVar[dict[str, Any] | list[dict[str, Any]]] = {"platform": "local"}
    service_options: ClassVar[dict[str, Any]] = {}
    busy_service: ClassVar[dict[str, Any] | list[dict[str, Any]] | None] = None  # a trainingService taking one trial
    busy_options: ClassVar[dict[str, Any]] = {}
    timeout: ClassVar[float] = 60.0  # deadline of each wait: catches hangs only
    experiment_id: ClassVar[str] = "contract"
    _dir: Path | None = None  # set by setup() (pytest collects no class with an __init__), with:
    exp_dir: Path  # the experiment's directory
    code_dir: Path  # the trials' code

    # -- hooks a subclass may override ----------------------------------------------------------------
    def workdir(self, tmp_path: Path) -> Path:
        """Where the experiment, the trials' code and the release files live (must be visible to the trials)."""
        return tmp_path

    def make_service(self, emit: Callable[[RunnerEvent], None], busy: bool = False) -> TrainingService:
        """A new service on this test's experiment (one per manager session: a resume makes a second one)."""
        from nnix.config import parse_config
        from nnix.services.factory import service_factory

        section = self.service_section(busy)
        data = {"trialCodeDirectory": str(self.code_dir), "trialCommand": "true", "trialConcurrency": 1,
                "searchSpace": {"x": {"_type": "choice", "_value": [1]}}, "tuner": {"name": "Random"},
                "trainingService": section}
        chosen = self.busy_options if busy else self.service_options
        if "trialGpuNumber" in chosen:  # a config field, not an option of the service
            data["trialGpuNumber"] = chosen["trialGpuNumber"]
        config = parse_config(data, self.code_dir).config
        options = {k: v for k, v in chosen.items() if k != "trialGpuNumber"}
        return service_factory(config, ServiceContext(self.experiment_id, self.exp_dir), **options)(emit)

    def service_section(self, busy: bool) -> Any:
        """The ``trainingService`` section of the service under test (``busy``: of the one with one slot)."""
        return self.busy_service if busy else self.training_service

    def spec(self, trial_id: str, program: Program) -> TrialSpec:
        """The trial running ``program`` (made before the service starts: some services copy the code then)."""
        script = program.script(str(self.gate(trial_id)))
        name = "trial-" + hashlib.sha1(script.encode()).hexdigest()[:10] + ".sh"
        (self.code_dir / name).write_text(script)
        out = self.exp_dir / "trials" / trial_id
        out.mkdir(parents=True, exist_ok=True)
        env = {"NNI_EXP_ID": self.experiment_id, "NNI_TRIAL_JOB_ID": trial_id, "NNI_TRIAL_SEQ_ID": "0"}
        record = {"parameter_id": 0, "parameter_source": "algorithm", "parameters": {"x": 1}, "parameter_index": 0}
        return TrialSpec(trial_id, f"sh {name}", self.code_dir, out, record, env)

    def release(self, service: TrainingService, trial_id: str) -> None:
        """Let a holding trial go on to its end."""
        self.gate(trial_id).write_text("")

    # -- helpers ------------------------------------------------------------------------------------
    @property
    def root(self) -> Path:
        assert self._dir is not None, "call self.setup(tmp_path) first"
        return self._dir

    def gate(self, trial_id: str) -> Path:
        return self.root / "gates" / trial_id

    def setup(self, tmp_path: Path) -> None:
        self._dir = self.workdir(tmp_path) / ("c" + secrets.token_hex(3))
        self.exp_dir, self.code_dir = self._dir / "experiment", self._dir / "code"
        for d in (self.exp_dir, self.code_dir, self.root / "gates"):
            d.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)
        for d in (self.code_dir, self.root / "gates"):
            d.chmod(0o777)

    def run(self, tmp_path: Path, body: Callable[[], Coroutine[Any, Any, T]]) -> T:
        self.setup(tmp_path)

        async def main() -> T:
            return await asyncio.wait_for(body(), 4 * self.timeout)

        return asyncio.run(main())

    async def until(self, cond: Callable[[], object], what: str) -> None:
        await wait_until_async(cond, self.timeout, what, interval=0.01)

    async def started(self, svc: TrainingService, spec: TrialSpec) -> Started:
        """Submit ``spec`` until the service takes it (a service may need a moment for its first environment)."""
        result: list[Started] = []

        async def taken() -> bool:
            started = await svc.submit(spec)
            if started is not None:
                result.append(started)
            return started is not None

        await self._poll(taken, f"the service to take trial {spec.trial_id}")
        return result[0]

    async def _poll(self, check: Callable[[], Awaitable[bool]], what: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        while not await check():
            assert loop.time() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.05)

    # -- the contract -------------------------------------------------------------------------------
    def test_submit_then_lines_in_order_and_one_exit(self, tmp_path: Path) -> None:
        async def body() -> None:
            ok, bad = self.spec("t-ok", Program(metrics=3)), self.spec("t-bad", Program(metrics=1, exit_code=3))
            seen = Watched()
            svc = self.make_service(seen.emit)
            await svc.start()
            try:
                started = await self.started(svc, ok)
                assert started.trial_id == "t-ok"
                await self.until(lambda: seen.exits.get("t-ok"), "t-ok's exit")
                await self.started(svc, bad)
                await self.until(lambda: seen.exits.get("t-bad"), "t-bad's exit")
            finally:
                await svc.close(kill_trials=True)
            assert seen.indices("t-ok") == [0, 1, 2, 3], f"every line once, in order, with its index: {seen.order}"
            assert [line for _, line in seen.lines["t-ok"]] == Program(metrics=3).lines()
            assert [e.exit_code for e in seen.exits["t-ok"]] == [0]
            assert [e.exit_code for e in seen.exits["t-bad"]] == [3]
            assert seen.indices("t-bad") == [0, 1]
            for tid in ("t-ok", "t-bad"):  # the exit comes after the trial's last line
                last_line = max(k for k, e in enumerate(seen.order) if isinstance(e, Metrics) and e.trial_id == tid)
                exit_at = next(k for k, e in enumerate(seen.order) if isinstance(e, Exited) and e.trial_id == tid)
                assert last_line < exit_at

        self.run(tmp_path, body)

    def test_cancel_ends_a_running_trial_and_is_harmless_otherwise(self, tmp_path: Path) -> None:
        async def body() -> None:
            run, after = self.spec("t-run", Program(metrics=1, hold=True)), self.spec("t-after", Program(metrics=0))
            seen = Watched()
            svc = self.make_service(seen.emit)
            await svc.start()
            try:
                await svc.cancel("never-submitted")  # unknown: nothing happens
                await self.started(svc, run)
                await self.until(lambda: seen.lines.get("t-run"), "t-run's first line")
                await svc.cancel("t-run")
                await self.until(lambda: seen.exits.get("t-run"), "the cancelled trial's exit")
                await svc.cancel("t-run")  # ended: nothing happens
                self.release(svc, "t-run")
                await self.started(svc, after)
                await self.until(lambda: seen.exits.get("t-after"), "a later trial's exit")
                await svc.cancel("t-after")
            finally:
                await svc.close(kill_trials=True)
            (ended,) = seen.exits["t-run"]
            assert ended.exit_code != 0, "a cancelled trial is no success"
            assert seen.indices("t-run") == [0], "it was ended before its final line"
            assert [e.exit_code for e in seen.exits["t-after"]] == [0]
            assert set(seen.exits) == {"t-run", "t-after"}

        self.run(tmp_path, body)

    async def restart(self, trial_id: str, program: Program, lines: int, kill_trials: bool,
                      after_index: int) -> tuple[Watched, Watched]:
        """Run ``program`` until it wrote ``lines`` lines, close the service (``kill_trials``), release the trial,
        then re-attach a new service to it (``after_index``: what the store had) until it reports its end."""
        spec = self.spec(trial_id, program)
        first = Watched()
        svc = self.make_service(first.emit)
        await svc.start()
        try:
            started = await self.started(svc, spec)
            await self.until(lambda: len(first.lines.get(trial_id, [])) >= lines, f"{trial_id}'s {lines} lines")
        finally:
            await svc.close(kill_trials=kill_trials)
        second = Watched()
        again = self.make_service(second.emit)
        await again.start()
        try:
            await again.reattach(trial_id, Path(started.output_dir), started.pid, started.pid_start, after_index,
                                 started.gpus)
            self.release(again, trial_id)  # had it been killed and survived, it would now finish with success
            await self.until(lambda: second.exits.get(trial_id), f"{trial_id}'s end, seen after the re-attach")
        finally:
            await again.close(kill_trials=True)
        return first, second

    def test_close_with_kill_trials_leaves_nothing_running(self, tmp_path: Path) -> None:
        _, second = self.run(tmp_path, lambda: self.restart("t-kill", Program(metrics=1, hold=True), 1, True, 0))
        (ended,) = second.exits["t-kill"]
        assert ended.exit_code != 0 and 1 not in second.indices("t-kill"), "it never got to its final line"

    def test_reattach_after_a_restart_gets_what_was_not_recorded(self, tmp_path: Path) -> None:
        # the manager goes away (the trial does not) when the store had lines 0 and 1 only: the new service
        # must bring 2, 3 and the final one
        first, second = self.run(tmp_path, lambda: self.restart("t-keep", Program(metrics=4, hold=True), 4, False, 1))
        assert "t-keep" not in first.exits, "close(kill_trials=False) ended the trial"
        assert {2, 3, 4} <= set(second.indices("t-keep")), "every line after after_index arrives"
        assert dict(second.lines["t-keep"])[4] == Program(metrics=4).lines()[4]
        assert [e.exit_code for e in second.exits["t-keep"]] == [0]

    def test_submit_when_busy_waits_with_a_reason(self, tmp_path: Path) -> None:
        if self.busy_service is None:
            import pytest

            pytest.skip("this service has no capacity limit of its own to test (every trial it is given starts)")

        async def body() -> tuple[Watched, str, str]:
            one, two = self.spec("t-one", Program(metrics=0, hold=True)), self.spec("t-two", Program(metrics=0))
            seen = Watched()
            svc = self.make_service(seen.emit, busy=True)
            await svc.start()
            try:
                assert isinstance(svc.waiting_reason(), str)
                await self.started(svc, one)
                refused = await svc.submit(two)
                assert refused is None, "a second trial beyond the capacity must wait"
                reason = svc.waiting_reason()
                self.release(svc, "t-one")
                await self.until(lambda: seen.exits.get("t-one"), "t-one's exit")
                await self.started(svc, two)
                await self.until(lambda: seen.exits.get("t-two"), "t-two's exit")
            finally:
                await svc.close(kill_trials=True)
            return seen, reason, svc.waiting_reason()

        seen, reason, _ = self.run(tmp_path, body)
        assert reason, "waiting_reason says why the trial waits"
        assert [e.exit_code for e in seen.exits["t-one"]] == [0] and [e.exit_code for e in seen.exits["t-two"]] == [0]


class FakeServiceContract(ServiceContract):
    """The contract suite on :class:`~nnix.testing.fakeservice.FakeService` (programs become outcomes)."""

    machine: FakeMachine
    outcomes: dict[str, Outcome]

    def setup(self, tmp_path: Path) -> None:
        super().setup(tmp_path)
        self.outcomes = {}
        self.machine = FakeMachine(lambda spec: self.outcomes[spec.trial_id])

    busy_service: ClassVar[dict[str, Any] | None] = {"slots": 1}

    def make_service(self, emit: Callable[[RunnerEvent], None], busy: bool = False) -> TrainingService:
        self.machine.slots = 1 if busy else None
        return FakeService(emit, self.machine)

    def spec(self, trial_id: str, program: Program) -> TrialSpec:
        self.outcomes[trial_id] = Outcome(intermediate=range(program.metrics), final=program.metrics,
                                          exit_code=program.exit_code, hang=program.hold)
        return TrialSpec(trial_id, "true", self.code_dir, self.exp_dir / trial_id, {"parameters": {"x": 1}})

    def release(self, service: TrainingService, trial_id: str) -> None:
        self.machine.release(trial_id)
