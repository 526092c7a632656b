"""nnix: run NNI hyper-parameter tuning experiments, unchanged, faster and crash-proof.

This module stays import-light on purpose: ``import nnix.trial`` (the trial SDK) must cost
milliseconds, so nothing heavy is imported here. ``nnix.Experiment`` is resolved lazily.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"
__all__ = ["Experiment", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Experiment":
        from nnix.experiment import Experiment

        return Experiment
    raise AttributeError(f"module 'nnix' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), "Experiment"])
