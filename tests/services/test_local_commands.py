"""The local service applies the agent protocol's commands in-process (one code path with the agents)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from nnix.model.runs import Exited, RunnerEvent, TrialSpec
from nnix.services.local import LocalService
from nnix.testing import wait_until_async
from nnix.testing.gpu import DescribedInventory


def test_local_runs_through_the_agents_commands_and_keeps_an_earlier_attempt(tmp_path: Path) -> None:
    events: list[RunnerEvent] = []
    svc = LocalService(events.append, inventory=DescribedInventory([]), poll_interval=0.02)
    out = tmp_path / "t1"
    (out / ".nnix").mkdir(parents=True)
    (out / "trial.stdout").write_text("first attempt\n")
    code = tmp_path / "code"
    code.mkdir()

    async def main() -> None:
        started = await svc.submit(TrialSpec("t1", "echo second attempt", code, out, {}))
        assert started is not None and started.trial_id == "t1"
        await wait_until_async(lambda: any(isinstance(e, Exited) for e in events), 60, "the first run's exit")
        # a re-queued trial is submitted again with the same id: it runs again
        events.clear()
        assert await svc.submit(TrialSpec("t1", "echo third attempt", code, out, {})) is not None
        await wait_until_async(lambda: any(isinstance(e, Exited) for e in events), 60, "the second run's exit")
        await svc.close(kill_trials=True)

    asyncio.run(main())
    assert (out / "trial.stdout").read_text() == "third attempt\n"
    assert (tmp_path / "t1.1" / "trial.stdout").read_text() == "first attempt\n"
    assert (tmp_path / "t1.2" / "trial.stdout").read_text() == "second attempt\n"
    assert not any(isinstance(e, Exited) and e.exit_code != 0 for e in events)
