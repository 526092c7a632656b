"""Experiment state as a fold over the event log. ``apply`` is the only code that changes it."""

from __future__ import annotations

import heapq
import logging
import math
from array import array
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import compress
from typing import Any, TypedDict

from nnix.model import events as ev
from nnix.model.metrics import scalar_value
from nnix.model.status import CancelReason, ExperimentStatus, MetricType, TrialStatus
from nnix.store.base import Stored

log = logging.getLogger(__name__)

_METRIC_TYPES = {m.value: m for m in MetricType}
MAX_WARNINGS_KEPT = 20  # messages kept per trial (the count counts them all)
# metrics of ended trials kept in memory where a store serves series (ExperimentState.loader): the series of
# trials ending beyond it are dropped (a small experiment holds all of it, a 10M-metric one a bounded part)
HOLD_ENDED_METRICS = 200_000
LIMIT_FIELDS = ("trial_concurrency", "max_trial_number", "max_experiment_duration", "search_space")


class Limits(TypedDict):
    """The limits a running experiment can change (``nnictl update``), typed: as the validated config set them, then
    each LimitsUpdated. A plain dict at run time (the log, the snapshot and JSON readers keep the plain form); the
    fold is the one place that reads them in (:func:`limits_of`, :func:`set_limit`)."""

    trial_concurrency: int  # >= 1
    max_trial_number: int | None  # >= 1; None: no limit
    max_experiment_duration: float | None  # seconds, > 0; None: no limit
    search_space: dict[str, Any] | None  # as the config holds it (JSON)


def _count(value: Any) -> int | None:
    return value if type(value) is int and value >= 1 else None


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        return None
    return value


def limits_of(raw: Mapping[str, Any]) -> Limits:
    """The typed limits of ``raw`` (a validated config's dump, or a snapshot's plain limits): a value that does not
    read as its field (an older or foreign log) is its default: 1 trial at a time, no limit, no search space."""
    space = raw.get("search_space")
    return Limits(trial_concurrency=_count(raw.get("trial_concurrency")) or 1,
                  max_trial_number=_count(raw.get("max_trial_number")),
                  max_experiment_duration=_seconds(raw.get("max_experiment_duration")),
                  search_space=space if isinstance(space, dict) else None)


def set_limit(limits: Limits, name: str, value: Any) -> None:
    """``limits`` with field ``name`` set to ``value`` (a LimitsUpdated: checked before it was recorded); one that does
    not read as its field leaves the limit as it was (said in the log), and an unknown name changes nothing."""
    if name == "trial_concurrency" and (n := _count(value)) is not None:
        limits["trial_concurrency"] = n
    elif name == "max_trial_number" and (value is None or _count(value) is not None):
        limits["max_trial_number"] = value
    elif name == "max_experiment_duration" and (value is None or _seconds(value) is not None):
        limits["max_experiment_duration"] = value
    elif name == "search_space" and (value is None or isinstance(value, dict)):
        limits["search_space"] = value
    else:
        log.warning("a recorded update of %s to %r is not a value it takes: left as it was", name, value)


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
    # the whole series in channel order while held in memory; None once the trial ended in a state that
    # serves series from its store (``loader``): only the summary below stays (see ExperimentState.loader)
    held: list[Metric] | None = field(default_factory=list)
    last_index: int = -1  # highest channel line index recorded (or rejected: see TrialWarning)
    warnings: list[str] = field(default_factory=list)  # the latest MAX_WARNINGS_KEPT TrialWarning messages
    warning_count: int = 0  # sum of the TrialWarning counts (lines rejected, processes killed)
    # the summary of the series, kept by the fold whether the series is held or not
    final_m: Metric | None = None  # the last FINAL in channel order
    latest_m: Metric | None = None  # the last intermediate result in channel order
    n_metrics: int = 0
    n_inter: int = 0
    inter_values: array[float] = field(default_factory=lambda: array("d"))  # finite scalar intermediates
    loader: Callable[[str], list[Metric]] | None = field(default=None, repr=False, compare=False)

    @property
    def metrics(self) -> list[Metric]:
        """The trial's whole series: held in memory, or read from the store (by its trial index)."""
        if self.held is not None:
            return self.held
        assert self.loader is not None, "a trial's series is dropped only where a loader serves it"
        return self.loader(self.trial_id)

    @metrics.setter
    def metrics(self, value: list[Metric]) -> None:
        self.held = value

    @property
    def final(self) -> Metric | None:
        if self.held is None:
            return self.final_m
        for m in reversed(self.held):
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

    def add_metric(self, m: Metric) -> None:
        """One metric in channel order (a line sent again after a crash, behind later ones, is inserted
        at its place), with the summary kept current."""
        periodical = m.type is MetricType.PERIODICAL
        held = self.held
        v = finite_scalar(m.value) if periodical else None
        if m.index > self.last_index or held is None:
            self.last_index = max(self.last_index, m.index)
            if held is not None:
                held.append(m)
            if v is not None:  # (a dropped series: a late resent line goes last; its place is in the store)
                self.inter_values.append(v)
        else:
            at = len(held)
            while at > 0 and held[at - 1].index > m.index:
                at -= 1
            held.insert(at, m)
            if v is not None:
                kept = sum(1 for x in held[:at] if x.type is MetricType.PERIODICAL
                           and finite_scalar(x.value) is not None)
                self.inter_values.insert(kept, v)
        self.n_metrics += 1
        if periodical:
            self.n_inter += 1
            if self.latest_m is None or m.index >= self.latest_m.index:
                self.latest_m = m
        elif self.final_m is None or m.index >= self.final_m.index:
            self.final_m = m

    def reset_series(self) -> None:
        self.held, self.last_index = [], -1
        self.final_m = self.latest_m = None
        self.n_metrics = self.n_inter = 0
        self.inter_values = array("d")

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
    limits: Limits = field(default_factory=lambda: limits_of({}))
    trials: dict[str, TrialState] = field(default_factory=dict)
    # set (by fold_store) where a store can serve a trial's series by its index: an ended trial's series
    # is then dropped from memory and read on demand (100k trials x 100 results do not fit otherwise)
    loader: Callable[[str], list[Metric]] | None = field(default=None, repr=False, compare=False)
    held_ended: int = 0  # metrics held by ended trials (see HOLD_ENDED_METRICS)
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
    # the overview's totals kept as the fold goes (see Totals); None: not kept (a snapshot older than them) until
    # first asked for (:meth:`overview_totals` counts them then)
    totals: dict[str, Any] | None = field(default_factory=lambda: new_totals())

    def __post_init__(self) -> None:
        # the snapshot records (and final values) of ended trials as last encoded (see encode_snapshot),
        # dropped when one changes
        self.encoded: dict[str, tuple[bytes, float]] = {}
        self.snapshot_seq = 0  # the seq of the store's snapshot this state was read from or last written at
        # a trial's events in the store (set by fold_store): rebuilds a trial whose snapshot bytes are damaged
        self.trial_log: Callable[[str], list[Stored]] | None = None
        # the trials not ended (waiting, running, unknown), in the order they were created: kept by the fold, so
        # the manager's many looks at them per loop turn cost their number, not the experiment's
        self.live: dict[str, TrialState] = {}

    # --- derived views -----------------------------------------------------------------------
    def elapsed(self, now: float | None = None) -> float:
        """Seconds the experiment has been running, over all manager sessions (NNI's execDuration)."""
        total = self.closed_elapsed
        if self.session_start is not None and self.counting:
            end = now if now is not None else (self.session_last or self.session_start)
            total += max(0.0, end - self.session_start)
        return total

    def count(self, *statuses: TrialStatus) -> int:
        if not any(s.is_terminal for s in statuses):
            return sum(1 for t in self.live.values() if t.status in statuses)
        if self.totals is not None:  # (kept by the fold as the statuses change)
            counts = self.totals["counts"]
            return sum(counts.get(s.value, 0) for s in set(statuses))
        return sum(1 for t in self.trials.values() if t.status in statuses)

    @property
    def active_trials(self) -> list[TrialState]:
        """The trials not ended, in the order they were created (``live``, kept by the fold)."""
        return list(self.live.values())

    @property
    def direction(self) -> str:
        if self.recorded_direction:
            return self.recorded_direction
        tuner = self.config.get("tuner") or {}
        mode = (tuner.get("class_args") or {}).get("optimize_mode")
        return str(mode) if mode in ("maximize", "minimize") else "maximize"

    def best_trial(self) -> TrialState | None:
        """The best trial with a final result (ties: the first): the one the fold keeps in the totals where it
        knows it, else found by :meth:`ranked` (the foreground progress asks five times a second)."""
        tot = self.totals
        if tot is not None and not tot["dirty"]:
            kept = tot["best"]
            if kept is None:
                return None
            t = self.trials.get(kept[0])
            if t is not None and t.final_value is not None:
                return t
        best = self.ranked(1)
        return best[0] if best else None

    def ranked(self, n: int, worst: bool = False) -> list[TrialState]:
        """The ``n`` best trials with a final result, best first (``worst``: the ``n`` worst, worst last):
        the head (or tail) of the trials with a final result sorted best first, ties in trial order. Only
        those trials are built (see :class:`nnix.query.snapshot.TrialTable`)."""
        trials = self.trials
        ids = list(trials)
        lazy = getattr(trials, "final_values", None)  # (a lazy table of the read side: none built, see nnix.query)
        if lazy is not None:
            values: list[float] = lazy()
        else:
            values = [math.nan if (v := t.final_value) is None else v for t in trials.values()]
        # the n-th value first (floats only: no tuple per trial), then the trials up to it, in order (in C: a
        # 100k-trial experiment ranks in milliseconds)
        scored = [v for v in values if v == v]  # (NaN: no final result)
        if n <= 0 or not scored:
            return []
        maximize = self.direction == "maximize"
        low = maximize == worst  # the values picked are the lowest
        cut = float((heapq.nsmallest if low else heapq.nlargest)(n, scored)[-1])
        everyone = range(len(values))
        inside = list(compress(everyone, map(cut.__gt__ if low else cut.__lt__, values)))
        ties = list(compress(everyone, map(cut.__eq__, values)))
        take = n - len(inside)  # ties at the cut: the first ones (best), the last ones (worst)
        picked = inside + (ties[max(0, len(ties) - take):] if worst else ties[:take])
        picked.sort(key=lambda i: (-values[i] if maximize else values[i], i))  # best first (worst: worst last)
        return [trials[ids[i]] for i in picked]

    def limit(self, name: str) -> Any:
        return self.limits.get(name)  # (any name: None where it is none of Limits)

    def overview_totals(self, rows: Callable[[], Iterable[tuple[str, Any, Any]]] | None = None) -> dict[str, Any]:
        """Trials by status, the best one, the final-result and parameter names seen: kept by the fold (and in the
        snapshot), so a viewer reads no trial for them; counted once from the trials where the state does not keep
        them yet (an older snapshot): from ``rows()`` where given (every trial's status value, parameters and final
        result, as a reader keeps them), else by reading every trial; the best found again where the best trial
        lost its final result."""
        tot = self.totals
        if tot is None:
            tot = new_totals()
            counts = tot["counts"]
            each = rows() if rows is not None else ((t.status.value, t.params, None if (f := t.final) is None
                                                     else f.value) for t in self.trials.values())
            for status, params, final in each:
                counts[status] = counts.get(status, 0) + 1
                self._keys(params, tot["paramKeys"])
                self._keys(final, tot["metricKeys"])
            tot["best"], tot["dirty"] = None, True
            self.totals = tot
        if tot["dirty"]:
            best = self.best_trial()
            tot["best"] = None if best is None else [best.trial_id, best.sequence_id, best.final_value]
            tot["dirty"] = False
        return tot

    def _count(self, old: TrialStatus | None, new: TrialStatus) -> None:
        tot = self.totals
        if tot is None or old is new:
            return
        counts = tot["counts"]
        if old is not None:
            counts[old.value] = counts.get(old.value, 0) - 1
        counts[new.value] = counts.get(new.value, 0) + 1

    @staticmethod
    def _keys(value: Any, into: dict[str, None]) -> None:
        if isinstance(value, dict) and len(into) < MAX_TOTAL_KEYS:
            for k in value:
                if k not in into and isinstance(k, str):
                    into[k] = None

    def _final_seen(self, t: TrialState, before: float | None) -> None:
        """``t`` got a final result (its scalar value before it: ``before``): the best one kept current."""
        tot = self.totals
        if tot is None:
            return
        f = t.final
        if f is not None:
            self._keys(f.value, tot["metricKeys"])
        if tot["dirty"]:
            return
        v, best = t.final_value, tot["best"]
        if best is not None and best[0] == t.trial_id and (v is None or v != before):
            tot["dirty"] = True  # the best one changed its result: found again when asked
        elif v is not None and (best is None or self._better(v, t.sequence_id, best[2], best[1])):
            tot["best"] = [t.trial_id, t.sequence_id, v]

    def _better(self, v: float, seq: int, than: float, than_seq: int) -> bool:
        if v == than:
            return seq < than_seq
        return v > than if self.direction == "maximize" else v < than

    def _lost_final(self, t: TrialState) -> None:
        tot = self.totals
        if tot is not None and tot["best"] is not None and tot["best"][0] == t.trial_id:
            tot["dirty"] = True

    # --- the fold ----------------------------------------------------------------------------
    def apply(self, stored: Stored) -> None:
        e: ev.Event = stored.event
        ts = stored.ts
        self.last_seq = stored.seq
        if self.encoded and (ref := e.trial_ref) is not None:
            self.encoded.pop(ref, None)
        self._apply(e, ts)
        if self.session_start is not None:
            self.session_last = ts

    def _apply(self, e: ev.Event, ts: float) -> None:
        if isinstance(e, ev.ExperimentCreated):
            self.experiment_id = e.experiment_id
            self.config = e.config
            self.seed = e.seed
            self.recorded_direction = e.direction
            self.created_at = ts
            self.limits = limits_of(e.config)
        elif isinstance(e, ev.ManagerStarted):
            self._close_session()
            self.manager_pid, self.manager_port, self.manager_host = e.pid, e.port, e.host
            self.manager_action = e.action
            self.manager_started_at = ts
            self.session_start = self.session_last = ts
            self.counting = e.action != "view"
        elif isinstance(e, ev.ManagerHeartbeat):
            pass
        elif isinstance(e, ev.StatusChanged):
            self._set_status(e.status, e.message, ts)
        elif isinstance(e, ev.LimitsUpdated):
            set_limit(self.limits, e.field, e.value)
        elif isinstance(e, ev.TrialCreated):
            self.trials[e.trial_id] = self.live[e.trial_id] = TrialState(
                trial_id=e.trial_id,
                sequence_id=e.sequence_id,
                parameter_id=e.parameter_id,
                params=e.params,
                source=e.source,
                created_at=ts,
                loader=self.loader,
            )
            if self.totals is not None:
                self._count(None, TrialStatus.WAITING)
                self._keys(e.params, self.totals["paramKeys"])
            self.next_sequence_id = max(self.next_sequence_id, e.sequence_id + 1)
            if e.parameter_id is not None:
                self.next_parameter_id = max(self.next_parameter_id, e.parameter_id + 1)
        elif isinstance(e, ev.TrialStarted):
            t = self.trials[e.trial_id]
            self._count(t.status, TrialStatus.RUNNING)
            t.status = TrialStatus.RUNNING
            t.started_at = ts
            t.environment_id, t.output_dir, t.pid, t.pid_start = e.environment_id, e.output_dir, e.pid, e.pid_start
            t.gpus = e.gpus
        elif isinstance(e, ev.MetricReported):
            self.add_metric(e.trial_id, e.type, e.sequence, e.value, e.index, ts)
        elif isinstance(e, ev.TrialCancelRequested):
            self.trials[e.trial_id].cancel_reason = e.reason
        elif isinstance(e, ev.TrialEnded):
            t = self.trials[e.trial_id]
            self._count(t.status, e.status)
            t.status, t.exit_code, t.message, t.ended_at = e.status, e.exit_code, e.message, ts
            if not t.is_active:
                self.live.pop(e.trial_id, None)
            if self.loader is not None and t.held is not None:
                if self.held_ended + len(t.held) > HOLD_ENDED_METRICS:
                    t.held = None
                else:
                    self.held_ended += len(t.held)
        elif isinstance(e, ev.TrialRequeued):
            t = self.trials[e.trial_id]
            self._count(t.status, TrialStatus.WAITING)
            if t.final_m is not None or t.held:
                self._lost_final(t)
            t.status, t.message = TrialStatus.WAITING, e.reason
            if e.trial_id not in self.live:  # (a trial requeued after it ended: live again, in its place)
                self.live[e.trial_id] = t
                self.live = dict(sorted(self.live.items(), key=lambda kv: kv[1].sequence_id))
            t.started_at = t.environment_id = t.output_dir = t.pid = t.pid_start = t.gpus = None
            t.reset_series()  # the new attempt's channel counts lines from 0 again
            # (its warnings stay: they happened)
        elif isinstance(e, ev.TrialWarning):
            t = self.trials[e.trial_id]
            t.warnings.append(e.message)
            del t.warnings[:-MAX_WARNINGS_KEPT]
            t.warning_count += e.count
            t.last_index = max(t.last_index, e.index)
        elif isinstance(e, ev.DataImported):
            self.imported.extend(e.records)

    def add_metric(
        self, trial_id: str, mtype: MetricType, sequence: int, value: Any, index: int, ts: float
    ) -> None:
        """One metric of a trial (its parameter id is the trial's: not repeated per metric)."""
        if self.encoded:
            self.encoded.pop(trial_id, None)
        t = self.trials[trial_id]
        if mtype is MetricType.FINAL and self.totals is not None:
            before = t.final_value
            t.add_metric(Metric(mtype, sequence, value, ts, index))
            self._final_seen(t, before)
        else:
            t.add_metric(Metric(mtype, sequence, value, ts, index))

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


MAX_TOTAL_KEYS = 1000  # final-result and parameter names kept in the totals at most


def new_totals() -> dict[str, Any]:
    """Empty overview totals (JSON: they go in the snapshot's head): trials by status, the best trial as
    [id, sequence id, value] (``dirty``: to be found again), the final-result and parameter names seen."""
    return {"counts": {}, "best": None, "dirty": False, "metricKeys": {}, "paramKeys": {}}


def totals_ok(tot: Any) -> bool:
    if not isinstance(tot, dict) or set(tot) != {"counts", "best", "dirty", "metricKeys", "paramKeys"}:
        return False
    best = tot["best"]
    return (isinstance(tot["counts"], dict) and all(isinstance(v, int) for v in tot["counts"].values())
            and isinstance(tot["metricKeys"], dict) and isinstance(tot["paramKeys"], dict)
            and isinstance(tot["dirty"], bool)
            and (best is None or (isinstance(best, list) and len(best) == 3 and isinstance(best[0], str))))


def finite_scalar(value: Any) -> float | None:
    """A metric's scalar (see :func:`scalar_value`) when it is finite: what tuners and assessors see."""
    v = scalar_value(value)
    return v if v is not None and math.isfinite(v) else None


def series(events: Iterable[Stored]) -> list[Metric]:
    """A trial's series from its MetricReported and TrialRequeued events (what the fold keeps in ``held``)."""
    t = TrialState("", 0, None, {}, "", 0.0)
    for s in events:
        e = s.event
        if isinstance(e, ev.MetricReported):
            t.add_metric(Metric(e.type, e.sequence, e.value, s.ts, e.index))
        elif isinstance(e, ev.TrialRequeued):
            t.reset_series()
    return t.held or []


def fold(events: Iterable[Stored], state: ExperimentState | None = None) -> ExperimentState:
    state = state or ExperimentState()
    for s in events:
        state.apply(s)
    return state


SERIES_KINDS = ("MetricReported", "TrialRequeued")
TRIAL_KINDS = ("TrialCreated", "TrialStarted", "MetricReported", "TrialCancelRequested", "TrialEnded", "TrialRequeued",
               "TrialWarning")  # every event about one trial
