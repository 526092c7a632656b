"""``nni.utils`` for trials run by nnix: ``merge_parameter`` (see ``nnix.trial.utils``)."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nnix.trial.utils import merge_parameter
else:
    from . import _utils

    merge_parameter = _utils.merge_parameter

__all__ = ["merge_parameter"]
