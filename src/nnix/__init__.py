"""nnix: run NNI hyper-parameter tuning experiments, unchanged, faster and crash-proof.

This module stays import-light on purpose: ``import nnix.trial`` (the trial SDK) must cost
milliseconds, so nothing heavy is imported here. ``nnix.Experiment`` is resolved lazily.
"""

from __future__ import annotations

from nnix.version import __version__

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Experiment", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Experiment":
        from nnix.experiment import Experiment

        return Experiment
    raise AttributeError(f"module 'nnix' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), "Experiment"])
