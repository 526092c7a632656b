"""``nni.experiment`` (NNI 3.0's launcher API) served by nnix: see :mod:`nnix.compat.nni_experiment`.

Only for a Python where nnix is installed (a launcher script, a notebook); ``import nni`` alone does not load it.
"""

from __future__ import annotations

try:
    from nnix.compat.nni_experiment import *  # noqa: F403
    from nnix.compat.nni_experiment import __all__ as __all__
except ImportError as e:  # a trial's interpreter without nnix: the trial SDK works, the launcher API cannot
    raise ImportError(
        f"nni.experiment (nnix's) needs nnix installed in this Python ({e}); `pip install nnix` here, or launch "
        "the experiment from the Python where nnix is installed"
    ) from e
