from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def nnix_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test gets its own experiments root: nothing touches ~/nni-experiments."""
    home = tmp_path / "nnix-home"
    home.mkdir()
    monkeypatch.setenv("NNIX_HOME", str(home))
    yield home


# tests that need an engine lab (real sshd hosts, Slurm, Ray, a kube-apiserver, Chromium) carry the `lab` marker:
# `pytest -m "not lab"` is the unit suite
LAB_FIXTURES = frozenset({"ssh_lab", "ssh_lab_session", "ssh_host", "slurm_lab", "ray_env", "ray_lab", "kube_lab",
                          "browser"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if LAB_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.lab)
