"""Real SSH hosts for the remote-service tests (see :mod:`nnix.testing.sshhosts`): one lab per test
session, every lab process killed after each test."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from nnix.testing.slurm import SlurmLab
from nnix.testing.slurm import unavailable as slurm_unavailable
from nnix.testing.sshhosts import SshLab, unavailable


@pytest.fixture(scope="session")
def ssh_lab_session() -> Iterator[SshLab]:
    reason = unavailable()
    if reason:
        pytest.skip(f"!!! REAL SSH HOSTS UNAVAILABLE: {reason} — the remote-service tests did NOT run !!!")
    try:
        lab = SshLab(n_hosts=3).up()
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        detail = getattr(e, "stderr", "") or ""
        pytest.skip(f"!!! REAL SSH HOSTS COULD NOT BE BUILT HERE: {e} {detail} "
                    "— the remote-service tests did NOT run !!!")
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
    reason = slurm_unavailable()
    if reason:
        pytest.skip(f"!!! REAL SLURM UNAVAILABLE: {reason} — the Slurm-service tests did NOT run !!!")
    try:
        lab = SlurmLab(cpus=2).up()
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        detail = getattr(e, "stderr", "") or ""
        pytest.skip(f"!!! A REAL SLURM COULD NOT BE STARTED HERE: {e} {detail} "
                    "— the Slurm-service tests did NOT run !!!")
    try:
        with pytest.MonkeyPatch.context() as mp:
            for k, v in lab.env.items():
                mp.setenv(k, v)
            yield lab
    finally:
        lab.down()
