"""Experiment state as a fold over the event log. ``apply`` is the only code that changes it."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from nnix.model.events import (
    DataImported,
    Event,
    ExperimentCreated,
    LimitsUpdated,
    ManagerHeartbeat,
    ManagerStarted,
    MetricReported,
    StatusChanged,
    TrialCancelRequested,
    TrialCreated,
    TrialEnded,
    TrialRequeued,
    TrialStarted,
    TrialWarning,
)
from nnix.model.metrics import scalar_value
from nnix.model.status import CancelReason, ExperimentStatus, MetricType, TrialStatus
from nnix.store.base import Store, Stored

_METRIC_TYPES = {m.value: m for m in MetricType}
MAX_WARNINGS_KEPT = 20  # messages kept per trial (the count counts them all)
LIMIT_FIELDS = ("trial_concurrency", "max_trial_number", "max_experiment_duration", "search_space")


@dataclass(slots=True)
class Metric:
    type: MetricType
    sequence: int
    value: Any
    ts: float
    index: int


@dataclass(slots=True)
class TrialState:
    trial_id: str
    sequence_id: int
    parameter_id: int | None
    params: dict[str, Any]
    source: str
    created_at: float
    status: TrialStatus = TrialStatus.WAITING
    started_at: float | None = None
    ended_at: float | None = None
    environment_id: str | None = None
    output_dir: str | None = None
    pid: int | None = None
    pid_start: str | None = None
    gpus: tuple[int, ...] | None = None
    exit_code: int | None = None
    message: str = ""
    cancel_reason: CancelReason | None = None
    metrics: list[Metric] = field(default_factory=list)
    last_index: int = -1  # highest channel line index recorded (or rejected: see TrialWarning)
    warnings: list[str] = field(default_factory=list)  # the latest MAX_WARNINGS_KEPT TrialWarning messages
    warning_count: int = 0  # sum of the TrialWarning counts (lines rejected, processes killed)

    @property
    def final(self) -> Metric | None:
        for m in reversed(self.metrics):
            if m.type is MetricType.FINAL:
                return m
        return None

    @property
    def final_value(self) -> float | None:
        """The scalar final result (dict metrics: their ``default``), None if missing or not finite."""
        m = self.final
        if m is None:
            return None
        v = scalar_value(m.value)
        return v if v is not None and math.isfinite(v) else None

    @property
    def intermediate(self) -> list[Metric]:
        return [m for m in self.metrics if m.type is MetricType.PERIODICAL]

    @property
    def is_active(self) -> bool:
        return not self.status.is_terminal


@dataclass
class ExperimentState:
    experiment_id: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    recorded_direction: str = ""
    status: ExperimentStatus = ExperimentStatus.INITIALIZED
    message: str = ""
    errors: list[str] = field(default_factory=list)
    created_at: float | None = None
    end_time: float | None = None
    limits: dict[str, Any] = field(default_factory=dict)
    trials: dict[str, TrialState] = field(default_factory=dict)
    imported: list[dict[str, Any]] = field(default_factory=list)
    next_sequence_id: int = 0
    next_parameter_id: int = 0
    last_seq: int = 0
    manager_pid: int | None = None
    manager_port: int | None = None
    manager_host: str = "127.0.0.1"
    manager_action: str | None = None
    manager_started_at: float | None = None  # when the last manager recorded its start (pid reuse check)
    # elapsed time: closed sessions plus the open one (start, last event time)
    closed_elapsed: float = 0.0
    session_start: float | None = None
    session_last: float | None = None
    counting: bool = False

    # --- derived views -----------------------------------------------------------------------
    def elapsed(self, now: float | None = None) -> float:
        """Seconds the experiment has been running, over all manager sessions (NNI's execDuration)."""
        total = self.closed_elapsed
        if self.session_start is not None and self.counting:
            end = now if now is not None else (self.session_last or self.session_start)
            total += max(0.0, end - self.session_start)
        return total

    def count(self, *statuses: TrialStatus) -> int:
        return sum(1 for t in self.trials.values() if t.status in statuses)

    @property
    def active_trials(self) -> list[TrialState]:
        return [t for t in self.trials.values() if t.is_active]

    @property
    def direction(self) -> str:
        if self.recorded_direction:
            return self.recorded_direction
        tuner = self.config.get("tuner") or {}
        mode = (tuner.get("class_args") or {}).get("optimize_mode")
        return str(mode) if mode in ("maximize", "minimize") else "maximize"

    def best_trial(self) -> TrialState | None:
        scored = [t for t in self.trials.values() if t.final_value is not None]
        if not scored:
            return None
        key = (lambda t: t.final_value) if self.direction == "maximize" else (lambda t: -(t.final_value or 0.0))
        return max(scored, key=key)

    def limit(self, name: str) -> Any:
        return self.limits.get(name)

    # --- the fold ----------------------------------------------------------------------------
    def apply(self, stored: Stored) -> None:
        e: Event = stored.event
        ts = stored.ts
        self.last_seq = stored.seq
        self._apply(e, ts)
        if self.session_start is not None:
            self.session_last = ts

    def _apply(self, e: Event, ts: float) -> None:
        if isinstance(e, ExperimentCreated):
            self.experiment_id = e.experiment_id
            self.config = e.config
            self.seed = e.seed
            self.recorded_direction = e.direction
            self.created_at = ts
            self.limits = {k: e.config.get(k) for k in LIMIT_FIELDS}
        elif isinstance(e, ManagerStarted):
            self._close_session()
            self.manager_pid, self.manager_port, self.manager_host = e.pid, e.port, e.host
            self.manager_action = e.action
            self.manager_started_at = ts
            self.session_start = self.session_last = ts
            self.counting = e.action != "view"
        elif isinstance(e, ManagerHeartbeat):
            pass
        elif isinstance(e, StatusChanged):
            self._set_status(e.status, e.message, ts)
        elif isinstance(e, LimitsUpdated):
            self.limits[e.field] = e.value
        elif isinstance(e, TrialCreated):
            self.trials[e.trial_id] = TrialState(
                trial_id=e.trial_id,
                sequence_id=e.sequence_id,
                parameter_id=e.parameter_id,
                params=e.params,
                source=e.source,
                created_at=ts,
            )
            self.next_sequence_id = max(self.next_sequence_id, e.sequence_id + 1)
            if e.parameter_id is not None:
                self.next_parameter_id = max(self.next_parameter_id, e.parameter_id + 1)
        elif isinstance(e, TrialStarted):
            t = self.trials[e.trial_id]
            t.status = TrialStatus.RUNNING
            t.started_at = ts
            t.environment_id, t.output_dir, t.pid, t.pid_start = e.environment_id, e.output_dir, e.pid, e.pid_start
            t.gpus = e.gpus
        elif isinstance(e, MetricReported):
            self.add_metric(e.trial_id, e.type, e.sequence, e.value, e.index, ts)
        elif isinstance(e, TrialCancelRequested):
            self.trials[e.trial_id].cancel_reason = e.reason
        elif isinstance(e, TrialEnded):
            t = self.trials[e.trial_id]
            t.status, t.exit_code, t.message, t.ended_at = e.status, e.exit_code, e.message, ts
        elif isinstance(e, TrialRequeued):
            t = self.trials[e.trial_id]
            t.status, t.message = TrialStatus.WAITING, e.reason
            t.started_at = t.environment_id = t.output_dir = t.pid = t.pid_start = t.gpus = None
            t.metrics, t.last_index = [], -1  # the new attempt's channel counts lines from 0 again
            # (its warnings stay: they happened)
        elif isinstance(e, TrialWarning):
            t = self.trials[e.trial_id]
            t.warnings.append(e.message)
            del t.warnings[:-MAX_WARNINGS_KEPT]
            t.warning_count += e.count
            t.last_index = max(t.last_index, e.index)
        elif isinstance(e, DataImported):
            self.imported.extend(e.records)

    def add_metric(
        self, trial_id: str, mtype: MetricType, sequence: int, value: Any, index: int, ts: float
    ) -> None:
        """One metric of a trial (its parameter id is the trial's: not repeated per metric)."""
        t = self.trials[trial_id]
        if index > t.last_index:
            t.metrics.append(Metric(mtype, sequence, value, ts, index))
            t.last_index = index
        else:  # a line sent again after a crash, behind later ones: keep the channel's order
            at = len(t.metrics)
            while at > 0 and t.metrics[at - 1].index > index:
                at -= 1
            t.metrics.insert(at, Metric(mtype, sequence, value, ts, index))

    def apply_metric_row(self, seq: int, ts: float, row: list[Any]) -> None:
        """Fold a stored metric row (see :func:`nnix.model.events.metric_row`) without building the
        event object: the same effect as ``apply`` of that MetricReported, several times faster."""
        tid, mtype, sequence, index, _parameter_id, value = row
        self.last_seq = seq
        self.add_metric(tid, _METRIC_TYPES[mtype], sequence, value, index, ts)
        if self.session_start is not None:
            self.session_last = ts

    def _set_status(self, status: ExperimentStatus, message: str, ts: float) -> None:
        self.status = status
        self.message = message
        if status is ExperimentStatus.ERROR and message:
            self.errors.append(message)
        if status in (ExperimentStatus.DONE, ExperimentStatus.STOPPED, ExperimentStatus.ERROR):
            self.end_time = ts
        elif status in (ExperimentStatus.RUNNING, ExperimentStatus.NO_MORE_TRIAL):
            self.end_time = None
        counting = status in (
            ExperimentStatus.RUNNING,
            ExperimentStatus.NO_MORE_TRIAL,
            ExperimentStatus.TUNER_NO_MORE_TRIAL,
            ExperimentStatus.INITIALIZED,
        )
        if counting != self.counting and self.session_start is not None:
            # close the counted stretch and open a new one
            if self.counting:
                self.closed_elapsed += max(0.0, ts - self.session_start)
            self.session_start = ts
        self.counting = counting

    def _close_session(self) -> None:
        if self.session_start is not None and self.counting:
            self.closed_elapsed += max(0.0, (self.session_last or self.session_start) - self.session_start)
        self.session_start = None
        self.session_last = None


def fold(events: Iterable[Stored], state: ExperimentState | None = None) -> ExperimentState:
    state = state or ExperimentState()
    for s in events:
        state.apply(s)
    return state


def fold_store(store: Store, state: ExperimentState | None = None) -> ExperimentState:
    """Fold everything in ``store`` after ``state.last_seq``, by the store's fastest way."""
    state = state or ExperimentState()
    replay = getattr(store, "replay", None)
    if replay is not None:
        replay(state)
        return state
    return fold(store.read(state.last_seq), state)
