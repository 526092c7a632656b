"""The engine labs of the service tests, shared by each service's own tests and its contract row
(test_contract.py): real SSH hosts (:mod:`nnix.testing.sshhosts`, every lab process killed after each test) and a
private single-node Slurm (:mod:`nnix.testing.slurm`), one per test session; a real Ray head
(:mod:`nnix.testing.ray`) and a real Kubernetes control plane (:mod:`nnix.testing.kube`, with its stand-in
operators), one per test module; the fake OpenPAI REST server (:mod:`nnix.testing.openpai`), one per test."""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from nnix.testing.kube import FakeOperators, KubeLab, kube_available
from nnix.testing.openpai import FakePai
from nnix.testing.ray import RayLab
from nnix.testing.ray import unavailable as ray_unavailable
from nnix.testing.slurm import SlurmLab
from nnix.testing.slurm import unavailable as slurm_unavailable
from nnix.testing.sshhosts import SshLab, unavailable

L = TypeVar("L")


def _lab_or_skip(name: str, tests: str, reason: str | None, up: Callable[[], L]) -> L:
    """The lab ``up()`` builds, or a loud skip saying why it cannot run here."""
    if reason:
        pytest.skip(f"!!! REAL {name} UNAVAILABLE: {reason} — the {tests} tests did NOT run !!!")
    try:
        return up()
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        detail = getattr(e, "stderr", "") or ""
        pytest.skip(f"!!! REAL {name} COULD NOT BE STARTED HERE: {e} {detail} — the {tests} tests did NOT run !!!")


@pytest.fixture(scope="session")
def ssh_lab_session() -> Iterator[SshLab]:
    lab = _lab_or_skip("SSH HOSTS", "remote-service", unavailable(), lambda: SshLab(n_hosts=3).up())
    try:
        yield lab
    finally:
        lab.down()


@pytest.fixture
def ssh_lab(ssh_lab_session: SshLab) -> Iterator[SshLab]:
    yield ssh_lab_session
    ssh_lab_session.restore_links()
    ssh_lab_session.kill_user_processes()


@pytest.fixture(scope="session")
def slurm_lab() -> Iterator[SlurmLab]:
    """A private single-node Slurm (nnix.testing.slurm) for the session: the Slurm tests and the contract row."""
    lab = _lab_or_skip("SLURM", "Slurm-service", slurm_unavailable(), lambda: SlurmLab(cpus=2).up())
    try:
        with pytest.MonkeyPatch.context() as mp:
            for k, v in lab.env.items():
                mp.setenv(k, v)
            yield lab
    finally:
        lab.down()


@pytest.fixture(scope="session")
def _ray_token() -> str:
    """One Ray token for the whole session: Ray caches the token of a process, so every Ray it talks to has this."""
    return secrets.token_hex(32)


@pytest.fixture(scope="module")
def ray_env(_ray_token: str) -> Iterator[dict[str, str]]:
    """Ray's token authentication on (the session's token) for the tests of a module."""
    reason = ray_unavailable()
    if reason:
        pytest.skip(f"!!! REAL RAY UNAVAILABLE: {reason} — the Ray-service tests did NOT run !!!")
    env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": _ray_token, "RAY_USAGE_STATS_ENABLED": "0"}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        yield env


@pytest.fixture(scope="module")
def ray_lab(ray_env: dict[str, str]) -> Iterator[RayLab]:
    """A real Ray head on 127.0.0.1 (2 CPUs), a separate process, for the tests of a module."""
    try:
        lab = RayLab(num_cpus=2, token=ray_env["RAY_AUTH_TOKEN"]).up()
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        pytest.skip(f"!!! A REAL RAY HEAD COULD NOT BE STARTED HERE: {e} — the Ray-service tests did NOT run !!!")
    try:
        yield lab
    finally:
        lab.down()


@pytest.fixture(scope="module")
def kube_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeLab]:
    """A real Kubernetes control plane with nnix's process kubelet (nnix.testing.kube) for the tests of a module;
    ``$KUBECONFIG`` names it meanwhile."""
    reason = kube_available()
    if reason:
        pytest.skip(f"!!! REAL KUBERNETES UNAVAILABLE: {reason} — the Kubernetes-service tests did NOT run !!!")
    lab = KubeLab(tmp_path_factory.mktemp("kube"))
    try:
        lab.start()
    except (OSError, RuntimeError) as e:
        lab.stop()
        pytest.skip(f"!!! A REAL KUBERNETES CONTROL PLANE COULD NOT BE STARTED HERE: {e} "
                    "— the Kubernetes-service tests did NOT run !!!")
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("KUBECONFIG", str(lab.kubeconfig))
            yield lab
    finally:
        lab.stop()


@pytest.fixture(scope="module")
def kube_operators(kube_lab: KubeLab) -> Iterator[FakeOperators]:
    """nnix.testing.kube's stand-ins for tf-operator, pytorch-operator and FrameworkController on the module's
    lab: pods from the objects' templates, status patched as the operators do."""
    with FakeOperators(kube_lab) as ops:
        yield ops


@pytest.fixture
def pai() -> Iterator[FakePai]:
    """A fake OpenPAI REST server (nnix.testing.openpai) for one test."""
    fake = FakePai()
    yield fake
    fake.close()
