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
