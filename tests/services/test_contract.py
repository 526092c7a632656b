"""The training-service contract (nnix.testing.servicecontract) on every service: the scripted FakeService, the
local service, hybrid lists, and the agent services through their labs (real SSH hosts, a real Slurm): the lab
rows carry the `lab` marker and skip loudly where the lab cannot start."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from nnix.testing.gpu import DescribedInventory
from nnix.testing.servicecontract import FakeServiceContract, ServiceContract
from nnix.testing.slurm import SlurmLab
from nnix.testing.sshhosts import SshLab

LOCAL_FAST: dict[str, Any] = {"poll_interval": 0.02, "kill_grace": 1.0}


class TestFakeService(FakeServiceContract):
    pass


class TestLocalService(ServiceContract):
    training_service: ClassVar[dict[str, Any]] = {"platform": "local"}
    service_options: ClassVar[dict[str, Any]] = LOCAL_FAST
    # one GPU, one trial per GPU: a second trial waits for the first
    busy_service: ClassVar[dict[str, Any]] = {"platform": "local", "useActiveGpu": False}
    busy_options: ClassVar[dict[str, Any]] = {**LOCAL_FAST, "trialGpuNumber": 1,
                                              "inventory": DescribedInventory.idle(1)}


class TestHybridService(ServiceContract):
    training_service: ClassVar[list[dict[str, Any]]] = [{"platform": "local"}, {"platform": "local"}]
    service_options: ClassVar[dict[str, Any]] = LOCAL_FAST
    busy_service: ClassVar[list[dict[str, Any]]] = [{"platform": "local", "useActiveGpu": False}]
    busy_options: ClassVar[dict[str, Any]] = TestLocalService.busy_options


@pytest.mark.lab
class TestRemoteService(ServiceContract):
    """Real SSH hosts (network namespaces with their own sshd, tests/services/conftest.py): one host."""

    lab: SshLab

    @pytest.fixture(autouse=True)
    def _on_lab(self, ssh_lab: SshLab) -> Iterator[None]:
        self.lab = ssh_lab
        yield

    def workdir(self, tmp_path: Path) -> Path:
        root = self.lab.home / "contract" / tmp_path.name  # the lab user's trials see it
        root.mkdir(parents=True, exist_ok=True)
        return root

    def service_section(self, busy: bool) -> Any:
        return {"platform": "remote", "knownHostsFile": str(self.lab.known_hosts),
                "remoteWorkDir": str(self.lab.home / "work"), "machineList": [self.lab.hosts[0].machine()]}


@pytest.mark.lab
class TestSlurmService(ServiceContract):
    """A private single-node Slurm (tests/services/conftest.py); environments are Slurm jobs running the agent."""

    training_service: ClassVar[dict[str, Any]] = {"platform": "slurm"}
    service_options: ClassVar[dict[str, Any]] = {"engine_poll_interval": 0.5, "end_grace": 0.5,
                                                 "poll_interval": 0.05, "kill_grace": 1.0}

    @pytest.fixture(autouse=True)
    def _on_lab(self, slurm_lab: SlurmLab) -> Iterator[None]:
        yield
        ids = slurm_lab.run("squeue", "-h", "-t", "PD,R,CG,CF,S", "-o", "%i", check=False).stdout.split()
        if ids:  # a failed test leaves no job behind to hold the node
            slurm_lab.run("scancel", *ids, check=False)
