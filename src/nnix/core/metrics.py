"""Moved to :mod:`nnix.model.metrics`; this shim keeps old imports working."""

from nnix.model.metrics import scalar_value as scalar_value
