"""nnix_myengine: the training service of the guide, as a package of its own (one module, two entry points).

"myengine" stands for a batch engine: an environment is a job whose command is the nnix agent. Here a job is a
process on this machine, started in a session of its own and watched by its pid, so the example runs anywhere.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from nnix.config.services import ClusterCommonConfig
from nnix.errors import ServiceError
from nnix.model.runs import TrialSpec
from nnix.services.base import ServiceContext
from nnix.services.cluster import ClusterService, EnvRequest, EnvStatus


class MyEngineConfig(ClusterCommonConfig):
    platform: Literal["myengine"]  # must be the entry point's name
    python: str = sys.executable  # the Python that runs the agent in a job


class MyEngineLauncher:
    kind: str = "myengine"
    advertise_host: str | None = "127.0.0.1"  # the jobs run on this machine: the agent endpoint stays on loopback

    def __init__(self, python: str, work_dir: Path) -> None:
        self.python = python
        self.work_dir = work_dir
        self.jobs: dict[str, asyncio.subprocess.Process] = {}

    async def prepare(self) -> None:
        if not os.access(self.python, os.X_OK):
            raise ServiceError(f"myengine cannot run {self.python}", "set trainingService.python to a Python "
                               "with nnix installed")
        self.work_dir.mkdir(parents=True, exist_ok=True)

    async def launch(self, request: EnvRequest) -> str:
        with open(self.work_dir / f"{request.env_id}.log", "wb") as log:  # the job's output, for poll's reasons
            job = await asyncio.create_subprocess_exec(
                self.python, *request.agent_args(), env={**os.environ, **request.agent_env()},
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        handle = str(job.pid)
        self.jobs[handle] = job
        return handle

    async def poll(self, handles: Sequence[str]) -> dict[str, EnvStatus]:
        out = {}
        for handle in handles:
            job = self.jobs.get(handle)
            if job is None:  # a job of an earlier manager (a resume): ask the system
                out[handle] = EnvStatus("running" if _alive(int(handle)) else "ended", "gone")
            elif job.returncode is None:
                out[handle] = EnvStatus("running")
            else:
                out[handle] = EnvStatus("ended", f"the job exited with status {job.returncode}")
        return out

    async def stop(self, handle: str) -> None:
        try:
            os.killpg(int(handle), signal.SIGKILL)  # the job's session: the agent and what it started
        except ProcessLookupError:
            pass  # ended already: stop is idempotent

    def place(self, spec: TrialSpec) -> TrialSpec:
        return spec  # the jobs see this machine's files

    def output_location(self, spec: TrialSpec) -> str:
        return str(spec.output_dir)

    async def close(self) -> None:
        self.jobs.clear()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class MyEngineService(ClusterService):
    platform = "myengine"

    @classmethod
    def make_launcher(cls, config: Any, context: ServiceContext | None) -> MyEngineLauncher:
        work_dir = context.experiment_dir / "myengine" if context is not None else Path.cwd() / "myengine"
        return MyEngineLauncher(config.training_service.python, work_dir)
