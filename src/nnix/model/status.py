"""Trial and experiment statuses, with NNI's names on the wire and in the REST API."""

from __future__ import annotations

from enum import Enum


class TrialStatus(str, Enum):
    WAITING = "WAITING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    USER_CANCELED = "USER_CANCELED"
    SYS_CANCELED = "SYS_CANCELED"
    EARLY_STOPPED = "EARLY_STOPPED"
    UNKNOWN = "UNKNOWN"

    @property
    def is_terminal(self) -> bool:
        return self not in (TrialStatus.WAITING, TrialStatus.RUNNING, TrialStatus.UNKNOWN)


class ExperimentStatus(str, Enum):
    INITIALIZED = "INITIALIZED"
    RUNNING = "RUNNING"
    TUNER_NO_MORE_TRIAL = "TUNER_NO_MORE_TRIAL"
    NO_MORE_TRIAL = "NO_MORE_TRIAL"
    DONE = "DONE"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
    ERROR = "ERROR"
    VIEWED = "VIEWED"

    @property
    def is_active(self) -> bool:
        """True while a manager drives the experiment."""
        return self in (
            ExperimentStatus.INITIALIZED,
            ExperimentStatus.RUNNING,
            ExperimentStatus.TUNER_NO_MORE_TRIAL,
            ExperimentStatus.NO_MORE_TRIAL,
            ExperimentStatus.STOPPING,
        )


class MetricType(str, Enum):
    PERIODICAL = "PERIODICAL"
    FINAL = "FINAL"


class CancelReason(str, Enum):
    """Why the manager asked a trial to stop; decides its terminal status."""

    USER = "user"  # -> USER_CANCELED
    EARLY_STOP = "early_stop"  # assessor said Bad -> EARLY_STOPPED
    MAX_TRIAL_DURATION = "max_trial_duration"  # -> EARLY_STOPPED (as NNI)
    EXPERIMENT_STOP = "experiment_stop"  # -> USER_CANCELED (as NNI)

    @property
    def status(self) -> TrialStatus:
        if self in (CancelReason.EARLY_STOP, CancelReason.MAX_TRIAL_DURATION):
            return TrialStatus.EARLY_STOPPED
        return TrialStatus.USER_CANCELED
