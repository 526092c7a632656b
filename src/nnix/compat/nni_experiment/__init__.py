"""NNI 3.0's launcher API (``nni.experiment``) on nnix: ``Experiment``, ``RunMode``, the config classes and
the data classes its methods return.

With nnix installed and NNI not, ``from nni.experiment import Experiment`` imports this (nnix's ``nni`` shim
re-exports it). Where a real NNI is installed, ``nni`` is NNI's own; this module is then reached by its own
name: ``from nnix.compat.nni_experiment import Experiment``.
"""

from __future__ import annotations

from nnix.compat.nni_experiment import config, experiment
from nnix.compat.nni_experiment.config import *  # noqa: F403
from nnix.compat.nni_experiment.experiment import *  # noqa: F403

# what the two modules export, each listed once there
__all__: list[str] = []
__all__ += experiment.__all__
__all__ += config.__all__
