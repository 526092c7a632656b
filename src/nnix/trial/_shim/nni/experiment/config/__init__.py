"""``nni.experiment.config``: NNI 3.0's config classes, served by nnix (:mod:`nnix.compat.nni_experiment.config`)."""

from __future__ import annotations

from nnix.compat.nni_experiment.config import *  # noqa: F403
from nnix.compat.nni_experiment.config import __all__ as __all__
