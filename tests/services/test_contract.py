"""The training-service contract (nnix.testing.servicecontract) on every service: the scripted FakeService, the
local service, hybrid lists, and the agent services through their labs (real SSH hosts, a real Slurm, a real Ray
head, a real Kubernetes control plane: tests/services/conftest.py); Kubeflow's TFJob and PyTorchJob and
FrameworkController's Framework run on the same control plane with nnix.testing.kube's stand-in operators. The lab
rows carry the `lab` marker and skip loudly where the lab cannot start. OpenPAI runs against the fake OpenPAI REST
server of nnix.testing.openpai (jobs run as local processes), which needs no lab."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from nnix.testing import wait_until
from nnix.testing.gpu import DescribedInventory
from nnix.testing.kube import FakeOperators, KubeLab
from nnix.testing.openpai import TOKEN, FakePai
from nnix.testing.ray import RayLab
from nnix.testing.servicecontract import FakeServiceContract, ServiceContract
from nnix.testing.slurm import SlurmLab
from nnix.testing.sshhosts import SshLab

LOCAL_FAST: dict[str, Any] = {"poll_interval": 0.02, "kill_grace": 1.0}
# cluster services (an engine starts environments running the agent): short engine polls, agents that poll often,
# and the agent endpoint on loopback (what nniManagerIp: 127.0.0.1 does)
CLUSTER_FAST: dict[str, Any] = {"engine_poll_interval": 0.2, "end_grace": 0.5, "poll_interval": 0.05,
                                "kill_grace": 1.0, "advertise_host": "127.0.0.1"}


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


@pytest.mark.lab
class TestRayService(ServiceContract):
    """A real Ray head on 127.0.0.1 (tests/services/conftest.py); environments are Ray actors running the agent."""

    service_options: ClassVar[dict[str, Any]] = CLUSTER_FAST
    lab: RayLab

    @pytest.fixture(autouse=True)
    def _on_lab(self, ray_lab: RayLab) -> Iterator[None]:
        self.lab = ray_lab
        yield

    def service_section(self, busy: bool) -> Any:
        return {"platform": "ray", "address": self.lab.address}


class _KubeRow(ServiceContract):
    """A row on the real Kubernetes control plane (tests/services/conftest.py) with nnix's process kubelet: each
    environment is one object whose (primary) pod runs the agent; storage is a hostPath seen at the same path here
    and in the pods. ``platform``: the trainingService section without its storage."""

    service_options: ClassVar[dict[str, Any]] = CLUSTER_FAST
    platform: ClassVar[dict[str, Any]] = {}

    @pytest.fixture(autouse=True)
    def _on_lab(self, kube_lab: KubeLab) -> Iterator[None]:
        yield
        # every test ends with close(kill_trials=True): nothing of the experiment stays (objects, their pods, their
        # token Secrets), whichever kind of object and however many roles it had
        wait_until(lambda: not kube_lab.experiment_objects(self.experiment_id), 120,
                   "the experiment's objects gone", interval=0.2,
                   show=lambda: kube_lab.experiment_objects(self.experiment_id))

    def service_section(self, busy: bool) -> Any:
        store = self.root / "storage"
        store.mkdir(exist_ok=True)
        return {**self.platform, "storage": {"storageType": "hostPath", "path": str(store),
                                             "containerMountPoint": str(store)}}


@pytest.mark.lab
class TestKubernetesService(_KubeRow):
    """Kubernetes Jobs (``platform: kubernetes``), one pod each."""

    platform: ClassVar[dict[str, Any]] = {"platform": "kubernetes", "cpu": "100m", "memory": "256Mi"}


# a small pod for every role of the operator rows (the process kubelet runs it as a local process)
SMALL_ROLE: dict[str, Any] = {"cpuNumber": 0.1, "memorySize": "256Mi"}


class _OperatorRow(_KubeRow):
    """Objects of an operator's CRD, with nnix.testing.kube.FakeOperators playing the operator (pods from the
    object's templates, status patched as the operator does); a second role's pods run a command that waits."""

    @pytest.fixture(autouse=True)
    def _operators(self, kube_operators: FakeOperators) -> Iterator[None]:
        yield


@pytest.mark.lab
class TestKubeflowTFJobService(_OperatorRow):
    """Kubeflow TFJobs (``platform: kubeflow``, tf-operator): worker 0 runs the agent, the PS its command."""

    platform: ClassVar[dict[str, Any]] = {
        "platform": "kubeflow", "operator": "tf-operator", "apiVersion": "v1",
        "worker": {"replicas": 1, **SMALL_ROLE}, "ps": {"command": "sleep 600", **SMALL_ROLE}}


@pytest.mark.lab
class TestKubeflowPyTorchJobService(_OperatorRow):
    """Kubeflow PyTorchJobs (``platform: kubeflow``, pytorch-operator): the master runs the agent, the worker its
    command."""

    platform: ClassVar[dict[str, Any]] = {
        "platform": "kubeflow", "operator": "pytorch-operator", "apiVersion": "v1",
        "master": SMALL_ROLE, "worker": {"command": "sleep 600", **SMALL_ROLE}}


@pytest.mark.lab
class TestFrameworkControllerService(_OperatorRow):
    """FrameworkController Frameworks (``platform: frameworkcontroller``): task 0 of the first role runs the agent,
    the second role's task its command."""

    platform: ClassVar[dict[str, Any]] = {
        "platform": "frameworkcontroller", "taskRoles": [
            {"name": "worker", **SMALL_ROLE,
             "frameworkAttemptCompletionPolicy": {"minFailedTaskCount": 1, "minSucceedTaskCount": 1}},
            {"name": "ps", "command": "sleep 600", **SMALL_ROLE}]}


class TestOpenpaiService(ServiceContract):
    """The fake OpenPAI REST server of nnix.testing.openpai (one per test): each environment is an OpenPAI job whose
    command runs as a local process, the storage mounted at the same path here and in the job."""

    service_options: ClassVar[dict[str, Any]] = {**CLUSTER_FAST, "trialGpuNumber": 0}  # OpenPAI needs it said
    pai: FakePai

    @pytest.fixture(autouse=True)
    def _on_pai(self, pai: FakePai) -> Iterator[None]:
        self.pai = pai
        yield
        assert not pai.problems, f"requests outside OpenPAI's protocol: {pai.problems}"

    def service_section(self, busy: bool) -> Any:
        mount = self.root / "mount"
        mount.mkdir(exist_ok=True)
        return {"platform": "openpai", "host": self.pai.url, "username": self.pai.user, "token": TOKEN,
                "trialCpuNumber": 1, "trialMemorySize": "1gb", "storageConfigName": "confs",
                "dockerImage": "python:3.11", "localStorageMountPoint": str(mount),
                "containerStorageMountPoint": str(mount)}
