"""``nni.trial`` for trials run by nnix: the trial SDK functions, the same objects as ``nni.*``."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    import nnix.trial as _sdk
else:
    from . import _sdk  # nnix.trial, or its files loaded by path (see the package)

get_next_parameter = _sdk.get_next_parameter
get_next_parameters = _sdk.get_next_parameters
get_current_parameter = _sdk.get_current_parameter
report_intermediate_result = _sdk.report_intermediate_result
report_final_result = _sdk.report_final_result
get_experiment_id = _sdk.get_experiment_id
get_trial_id = _sdk.get_trial_id
get_sequence_id = _sdk.get_sequence_id
NoMoreTrialError = _sdk.NoMoreTrialError

__all__ = [name for name in _sdk.__all__ if name in globals()]  # the SDK's names that NNI's nni.trial has
