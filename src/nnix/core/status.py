"""Moved to :mod:`nnix.model.status`; this shim keeps old imports working."""

from nnix.model.status import CancelReason as CancelReason
from nnix.model.status import ExperimentStatus as ExperimentStatus
from nnix.model.status import MetricType as MetricType
from nnix.model.status import TrialStatus as TrialStatus
