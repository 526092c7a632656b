"""The manager's commands applied to a :class:`~nnix.agent.runner.TrialRunner`: the one code path that runs
trials. The agent process applies the commands it receives over the network; the local service applies the
same command objects in-process (no network hop, no encoding: the local service stays as fast as a bare
subprocess loop), so local and remote trials are started, attached and killed by the same code."""

from __future__ import annotations

import logging
from pathlib import Path

from nnix.agent.protocol import Attach, Kill, Run
from nnix.agent.runner import CHANNEL_DIRNAME, TrialRunner
from nnix.model.runs import Started

_log = logging.getLogger("nnix.agent")

__all__ = ["TrialCommands"]


class TrialCommands:
    def __init__(self, runner: TrialRunner) -> None:
        self.runner = runner
        self.seen: set[str] = set()  # trials run or attached: a command delivered twice does nothing

    async def apply(self, command: Run | Attach | Kill) -> Started | None:
        """Apply one command; ``Run`` returns the trial's ``Started`` (None when delivered twice) and raises
        :class:`~nnix.errors.ServiceError` or ``OSError`` when the trial cannot start."""
        if isinstance(command, Run):
            return await self._run(command)
        if isinstance(command, Attach):
            if command.trial_id not in self.runner.running and command.trial_id not in self.seen:
                self.seen.add(command.trial_id)
                await self.runner.attach(command.trial_id, Path(command.output_dir), command.pid,
                                         command.pid_start, command.after_index)
            else:  # already watched: the manager says what it has; send again what it misses
                _log.info("trial %s: sending again its metrics after line %d", command.trial_id, command.after_index)
                await self.runner.resend(command.trial_id, command.after_index)
            return None
        await self.runner.kill(command.trial_id)
        return None

    async def _run(self, run: Run) -> Started | None:
        spec = run.spec
        if spec.trial_id in self.seen:
            return None
        self.seen.add(spec.trial_id)
        out = spec.output_dir
        if (out / CHANNEL_DIRNAME).exists():  # an earlier attempt ran here: keep it, aside
            n = 1
            while out.with_name(f"{out.name}.{n}").exists():
                n += 1
            out.rename(out.with_name(f"{out.name}.{n}"))
        out.mkdir(parents=True, exist_ok=True)
        return await self.runner.start(spec)
