"""The engine labs of the service tests, one per test session: real SSH hosts (:mod:`nnix.testing.sshhosts`,
every lab process killed after each test) and a private single-node Slurm (:mod:`nnix.testing.slurm`)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

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
