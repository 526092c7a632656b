"""A fake engine for the shared part of the cluster services (:mod:`nnix.services.cluster`): each
environment is a local process running the real nnix agent, started in a session of its own, so tests can
make it end the ways engine jobs end (killed, time limit) without any engine.

:class:`ProcessHostsLauncher` is the same with the optional capability *a fixed list of machines*
(:class:`~nnix.services.launcher.HostLauncher`, what SSH has): its "machines" are folders here, its agents local
processes, so that the machines placement of ``ClusterService`` (:mod:`nnix.services.hosts`) is tested without SSH."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from nnix.errors import ServiceError
from nnix.model.runs import TrialSpec
from nnix.services.base import ServiceContext
from nnix.services.cluster import ClusterService, EnvRequest, EnvStatus
from nnix.services.rayhead import descendants

__all__ = ["ProcessClusterService", "ProcessHost", "ProcessHostsLauncher", "ProcessHostsService", "ProcessLauncher"]


@dataclass
class ProcessLauncher:
    """Environments as local processes. ``hold`` > 0: the first ``hold`` launches stay "pending" until
    :meth:`release` (an engine queue); ``refuse``: every launch raises (an engine rejecting the job);
    ``broken``: environments start a command that is not the agent (it exits at once); ``capacity``: trials
    one environment runs at once (reuse mode); ``lost_policy``: what becomes of a trial whose environment ends
    under it; ``one_gpu``: placement as on a one-GPU machine (an environment admits one trial at a time, with
    ``CUDA_VISIBLE_DEVICES=0``); ``admitted`` and ``released`` record the placement hook's calls."""

    kind: str = "process"
    advertise_host: str | None = "127.0.0.1"
    refuse: str = ""
    capacity: int = 1
    lost_policy: Literal["fail", "requeue"] = "fail"
    one_gpu: bool = False
    admitted: list[tuple[str, str]] = field(default_factory=list)  # (trial, handle)
    released: list[str] = field(default_factory=list)
    gpu_holder: dict[str, str] = field(default_factory=dict)  # handle -> the trial holding its GPU
    broken: bool = False
    launched: list[EnvRequest] = field(default_factory=list)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    stopped: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)
    prepared: bool = False
    closed: bool = False

    async def prepare(self) -> None:
        self.prepared = True

    async def launch(self, request: EnvRequest) -> str:
        if self.refuse:
            raise ServiceError(self.refuse, "fix the engine options")
        self.launched.append(request)
        argv = [sys.executable, *request.agent_args()]
        if self.broken:
            argv = [sys.executable, "-c", "import sys; sys.exit(3)"]
        env = {**os.environ, **request.agent_env()}
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        handle = f"proc-{proc.pid}"
        self.procs[handle] = proc
        return handle

    async def poll(self, handles: Sequence[str]) -> dict[str, EnvStatus]:
        out: dict[str, EnvStatus] = {}
        for h in handles:
            proc = self.procs.get(h)
            if proc is None:
                out[h] = EnvStatus("ended", "gone")
            elif proc.poll() is None:
                out[h] = EnvStatus("running")
            else:
                out[h] = EnvStatus("ended", self.reasons.get(h, f"exit status {proc.returncode}"),
                                   killed=h in self.reasons)
        return out

    async def stop(self, handle: str) -> None:
        self.stopped.append(handle)
        self.kill(handle, "stopped")

    def kill(self, handle: str, reason: str) -> None:
        """End an environment the way an engine does (its whole process group), with ``reason``."""
        proc = self.procs.get(handle)
        self.reasons.setdefault(handle, reason)
        if proc is not None and proc.poll() is None:
            # like an engine ending a job: the agent and everything it started (trials run in sessions
            # of their own, so a process group kill alone would spare them)
            for pid in [*descendants(proc.pid), proc.pid]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.wait()

    def place(self, spec: TrialSpec) -> TrialSpec:
        return spec

    def admit(self, spec: TrialSpec, handle: str, resources: dict[str, Any]) -> TrialSpec | None:
        if self.one_gpu:
            if handle in self.gpu_holder:
                return None
            self.gpu_holder[handle] = spec.trial_id
            spec = replace(spec, env={**spec.env, "CUDA_VISIBLE_DEVICES": "0"})
        self.admitted.append((spec.trial_id, handle))
        return spec

    def release(self, trial_id: str) -> None:
        self.released.append(trial_id)
        for handle in [h for h, t in self.gpu_holder.items() if t == trial_id]:
            del self.gpu_holder[handle]

    def output_location(self, spec: TrialSpec) -> str:
        return str(spec.output_dir)

    async def close(self) -> None:
        self.closed = True


class ProcessClusterService(ClusterService):
    """The shared cluster service over :class:`ProcessLauncher` (pass ``launcher=`` to share one)."""

    platform = "process"

    @classmethod
    def make_launcher(cls, config: Any, context: ServiceContext | None) -> ProcessLauncher:
        return ProcessLauncher()


@dataclass(eq=False)
class ProcessHost:
    """A "machine" of :class:`ProcessHostsLauncher`: a folder here (agents keep their files in ``envs/``)."""

    index: int
    root: Path
    up: asyncio.Event | None = None  # its link, while connected

    @property
    def label(self) -> str:
        return f"machine{self.index}"

    @property
    def key(self) -> str:
        return f"m{self.index}"

    @property
    def gpu_rules(self) -> dict[str, Any]:
        return {}

    def env_dir(self, env_id: str) -> str:
        return str(self.root / "envs" / env_id)


class ProcessHostsLauncher:
    """A :class:`ProcessLauncher` (``engine``) over a fixed list of ``machines`` (folders under ``root``): ``launch``
    starts an agent for the machine its request names, pointed at ``agent_url``; ``engine.launched`` and
    ``engine.procs`` tell tests what ran."""

    kind = "process"
    advertise_host: str | None = "127.0.0.1"
    shares_files = False

    def __init__(self, root: Path, machines: int = 2) -> None:
        self.engine = ProcessLauncher()
        self._hosts = [ProcessHost(i, Path(root) / f"machine{i}") for i in range(machines)]
        self._port = 0
        self.on_machine: dict[str, int] = {}  # handle -> the machine it runs on
        self.handles: dict[str, str] = {}  # environment id -> handle

    async def prepare(self) -> None:
        await self.engine.prepare()

    async def poll(self, handles: Sequence[str]) -> dict[str, EnvStatus]:
        return await self.engine.poll(handles)

    async def stop(self, handle: str) -> None:
        await self.engine.stop(handle)

    async def close(self) -> None:
        await self.engine.close()

    @property
    def hosts(self) -> list[ProcessHost]:
        return self._hosts

    async def open(self, host: ProcessHost) -> object:
        host.up = asyncio.Event()
        return host.up

    async def closed(self, host: ProcessHost, link: object) -> bool:
        assert isinstance(link, asyncio.Event)
        await link.wait()
        return host.up is link

    def connected(self, host: ProcessHost) -> bool:
        return host.up is not None and not host.up.is_set()

    def disconnect(self, host: ProcessHost) -> None:
        if host.up is not None:
            host.up.set()

    def drop(self, host: ProcessHost) -> None:
        self.disconnect(host)
        host.up = None

    async def setup(self, host: ProcessHost, port: int) -> dict[str, Any] | None:
        (host.root / "envs").mkdir(parents=True, exist_ok=True)
        self._port = port
        return None

    def agent_url(self, host: ProcessHost) -> str:
        return f"http://127.0.0.1:{self._port}"

    def describe(self, host: ProcessHost) -> str:
        return str(host.root)

    async def launch(self, request: EnvRequest) -> str:
        assert request.host is not None and request.url == self.agent_url(self._hosts[request.host])
        handle = await self.engine.launch(request)
        self.on_machine[handle] = request.host
        self.handles[request.env_id] = handle
        return handle

    async def ended(self, handle: str) -> EnvStatus:
        proc = self.engine.procs.get(handle)
        if proc is None:
            return EnvStatus("unknown")
        while proc.poll() is None:
            await asyncio.sleep(0.05)
        code = proc.returncode
        if code < 0:
            return EnvStatus("ended", f"signal {-code}", killed=True)
        return EnvStatus("ended", f"exit status {code}", exit_status=code)

    def forget(self, handle: str) -> None:
        pass

    async def probe(self, host: ProcessHost, env_id: str, pid: int | None, timeout: float) -> int | None:
        proc = self.engine.procs.get(self.handles.get(env_id, ""))
        return proc.pid if proc is not None and proc.poll() is None else None

    async def kill(self, host: ProcessHost, pid: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    async def log_tail(self, host: ProcessHost, env_id: str) -> str:
        return ""

    async def find_agents(self, host: ProcessHost) -> list[tuple[str, int]]:
        return []

    async def write_connect(self, host: ProcessHost, env_id: str, token: str) -> None:
        pass

    async def wake(self, host: ProcessHost, pids: Sequence[int]) -> None:
        pass

    def place(self, spec: TrialSpec, host: ProcessHost | None = None) -> TrialSpec:
        return spec

    def output_location(self, spec: TrialSpec, host: ProcessHost | None = None) -> str:
        return f"{host.key}:{spec.output_dir}" if host is not None else str(spec.output_dir)


class ProcessHostsService(ClusterService):
    """The cluster service over :class:`ProcessHostsLauncher` (pass ``launcher=``)."""

    platform = "process"
