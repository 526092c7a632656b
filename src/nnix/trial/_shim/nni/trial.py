"""``nni.trial`` for trials run by nnix: the trial SDK functions, the same objects as ``nni.*``."""

from __future__ import annotations

from . import (
    NoMoreTrialError,
    get_current_parameter,
    get_experiment_id,
    get_next_parameter,
    get_next_parameters,
    get_sequence_id,
    get_trial_id,
    report_final_result,
    report_intermediate_result,
)

__all__ = [
    "NoMoreTrialError",
    "get_current_parameter",
    "get_experiment_id",
    "get_next_parameter",
    "get_next_parameters",
    "get_sequence_id",
    "get_trial_id",
    "report_final_result",
    "report_intermediate_result",
]
