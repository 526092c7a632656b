"""Where nnix keeps its files on this machine (a leaf: the algorithm registry below the config and the registry
of experiments in :mod:`nnix.home` both start from here)."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """Where the registry lives: ``$NNIX_HOME`` or ``~/nni-experiments`` (NNI's default root)."""
    return Path(os.environ.get("NNIX_HOME") or "~/nni-experiments").expanduser()
