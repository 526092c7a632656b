"""``from_config``, written once (nnix.services.base.Configured): every built-in service inherits it, and a
service's ``_options_from_config`` says what the config gives it, test options overriding."""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from nnix.config import parse_config
from nnix.services.base import Configured, ServiceContext
from nnix.services.cluster import ClusterService, Engines
from nnix.services.fleet import Fleet
from nnix.services.hosts import Machines
from nnix.services.local import LocalService
from nnix.services.remote import RemoteService
from nnix.services.slurm import SlurmService
from nnix.testing.spaces import UNIT as SPACE

BASE: dict[str, Any] = {"searchSpace": SPACE, "trialCommand": "python3 t.py", "trialConcurrency": 1,
                        "tuner": {"name": "Random"}}


def test_every_built_in_service_has_the_one_from_config() -> None:
    services = {ep.name: ep.load() for ep in entry_points(group="nnix.services")}
    assert {"local", "remote", "slurm", "ray", "kubernetes", "openpai", "hybrid"} <= set(services)
    for name, cls in services.items():
        assert issubclass(cls, Configured), name
        assert [k for k in cls.__mro__ if "from_config" in vars(k)] == [Configured], name  # not written again


def test_options_come_from_the_config_and_the_caller_overrides_them(tmp_path: Path) -> None:
    cfg = parse_config({**BASE, "trialGpuNumber": 0, "trainingService": {
        "platform": "local", "maxTrialNumberPerGpu": 3}}, tmp_path).config
    local = LocalService.from_config(cfg, lambda _: None, kill_grace=0.5)
    assert isinstance(local, LocalService) and local._gpus.max_trial_number_per_gpu == 3
    assert local._runner.kill_grace == 0.5
    ctx = ServiceContext("exp1", tmp_path / "exp")
    slurm = SlurmService.from_config(parse_config({**BASE, "trainingService": {"platform": "slurm",
                                                                              "idleTimeout": 7}}, tmp_path).config,
                                     lambda _: None, ctx)
    assert isinstance(slurm, ClusterService) and slurm.launcher.kind == "slurm"
    assert isinstance(slurm.placement, Engines)  # an engine places its environments
    assert (slurm.placement._engine_poll, slurm.placement._idle_timeout) == (5.0, 7.0)  # Slurm's poll, config's idle
    fast = SlurmService.from_config(parse_config({**BASE, "trainingService": {"platform": "slurm"}}, tmp_path).config,
                                    lambda _: None, ctx, engine_poll_interval=0.1)
    assert isinstance(fast.placement, Engines) and fast.placement._engine_poll == 0.1
    machine = {"host": "127.0.0.1", "user": "u", "password": "p"}
    remote = RemoteService.from_config(parse_config({**BASE, "trainingService": {
        "platform": "remote", "machineList": [machine], "lostHostPolicy": "requeue"}}, tmp_path).config,
        lambda _: None, ctx, connect_timeout=2.0)
    assert isinstance(remote.placement, Machines)  # SSH: a fixed list of machines
    assert not issubclass(ClusterService, Fleet)  # one service holding its placement, not both placements in one class
    assert remote.placement._policy == "requeue" and remote.launcher._connect_timeout == 2.0
    assert remote.machines() == [("u@127.0.0.1:22", "connecting", "")]
