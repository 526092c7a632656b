"""Moved to :mod:`nnix.model.events`; this shim keeps old imports working."""

from nnix.model.events import DataImported as DataImported
from nnix.model.events import Event as Event
from nnix.model.events import ExperimentCreated as ExperimentCreated
from nnix.model.events import LimitsUpdated as LimitsUpdated
from nnix.model.events import ManagerHeartbeat as ManagerHeartbeat
from nnix.model.events import ManagerStarted as ManagerStarted
from nnix.model.events import MetricReported as MetricReported
from nnix.model.events import StatusChanged as StatusChanged
from nnix.model.events import TrialCancelRequested as TrialCancelRequested
from nnix.model.events import TrialCreated as TrialCreated
from nnix.model.events import TrialEnded as TrialEnded
from nnix.model.events import TrialRequeued as TrialRequeued
from nnix.model.events import TrialStarted as TrialStarted
from nnix.model.events import TrialWarning as TrialWarning
from nnix.model.events import decode as decode
from nnix.model.events import encode as encode
from nnix.model.events import is_finite_number as is_finite_number
from nnix.model.events import metric_row as metric_row
