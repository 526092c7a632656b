"""Experiment state as a fold over the event log. ``apply`` is the only code that changes it."""

from __future__ import annotations

import heapq
import json
import logging
import math
import threading
from array import array
from collections.abc import Callable, ItemsView, Iterable, Iterator, Mapping, Sequence, ValuesView
from dataclasses import dataclass, field, fields
from itertools import compress, pairwise, repeat
from operator import gt, is_not
from typing import Any, TypeVar

from nnix.model import events as ev
from nnix.model.metrics import scalar_value
from nnix.model.status import CancelReason, ExperimentStatus, MetricType, TrialStatus
from nnix.model.trials import Series, TrialRecord
from nnix.store.base import Part, Snapshot, SnapshotDamaged, Store, Stored

log = logging.getLogger(__name__)
_T = TypeVar("_T")

_METRIC_TYPES = {m.value: m for m in MetricType}
MAX_WARNINGS_KEPT = 20  # messages kept per trial (the count counts them all)
# metrics of ended trials kept in memory where a store serves series (ExperimentState.loader): the series of
# trials ending beyond it are dropped (a small experiment holds all of it, a 10M-metric one a bounded part)
HOLD_ENDED_METRICS = 200_000
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
    limits: dict[str, Any] = field(default_factory=dict)
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
        those trials are built (see :class:`TrialTable`)."""
        trials = self.trials
        ids = list(trials)
        if isinstance(trials, TrialTable):
            values = trials.final_values()
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
        return self.limits.get(name)

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
                                                     else f.value) for t in each_trial(self.trials))
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
            self.limits = {k: e.config.get(k) for k in LIMIT_FIELDS}
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
            self.limits[e.field] = e.value
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


def _totals_ok(tot: Any) -> bool:
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
# of the format below: a snapshot in another one is rebuilt from the log (version 1 was one JSON document of every
# trial, decoded at once; 2 one body checked whole, its records and intermediate values within)
SNAPSHOT_VERSION = 3
_EXPERIMENT_SKIP = ("trials", "loader", "status")
_STATUSES = {s.value: s for s in TrialStatus}


def _metric_out(m: Metric | None) -> list[Any] | None:
    return None if m is None else [m.type.value, m.sequence, m.value, m.ts, m.index]


def _metric_in(x: list[Any] | None) -> Metric | None:
    return None if x is None else Metric(_METRIC_TYPES[x[0]], x[1], x[2], x[3], x[4])


def _record(t: TrialState) -> bytes:
    """One trial of a snapshot (all but its intermediate values), as JSON."""
    return json.dumps([
        t.trial_id, t.sequence_id, t.parameter_id, t.params, t.source, t.created_at, t.status.value,
        t.started_at, t.ended_at, t.environment_id, t.output_dir, t.pid, t.pid_start,
        None if t.gpus is None else list(t.gpus), t.exit_code, t.message,
        None if t.cancel_reason is None else t.cancel_reason.value,
        None if t.held is None or t.status.is_terminal else [_metric_out(m) for m in t.held],
        t.last_index, t.warnings, t.warning_count, _metric_out(t.final_m), _metric_out(t.latest_m),
        t.n_metrics, t.n_inter,
    ], separators=(",", ":")).encode()


def _trial(rec: list[Any], values: array[float], loader: Callable[[str], list[Metric]] | None) -> TrialState:
    (tid, seq_id, pid_, params, source, created, status, started, ended, env, out, pid, pid_start, gpus,
     code, message, cancel, held, last_index, warnings, warning_count, final_m, latest_m, n_metrics, n_inter) = rec
    return TrialState(
        tid, seq_id, pid_, params, source, created, _STATUSES[status], started, ended, env, out, pid, pid_start,
        None if gpus is None else tuple(gpus), code, message, None if cancel is None else CancelReason(cancel),
        None if held is None else [Metric(_METRIC_TYPES[x[0]], x[1], x[2], x[3], x[4]) for x in held],
        last_index, warnings, warning_count, _metric_in(final_m), _metric_in(latest_m), n_metrics, n_inter,
        values, loader)


ROWS_CHUNK = 2048  # records of a snapshot decoded at once where every trial's index row is made from them


def _whole(part: Part) -> bytes:
    return bytes(part[0:len(part)])


class _Source:
    """The undecoded trials of a snapshot: ``records`` is a JSON array of them, record ``i`` its bytes
    ``1 + starts[i]:starts[i + 1]`` (then a comma or the closing bracket); its intermediate values are
    ``values[at[i]:at[i + 1]]`` (``values``: raw doubles, 8 bytes each). ``records`` and ``values`` are the
    snapshot's parts: a store may read them a piece at a time, checking each piece then; a trial whose
    piece is damaged (:class:`SnapshotDamaged`) is rebuilt from its events in the log (``trial_log``)."""

    __slots__ = ("_columns", "_columns_lock", "at", "columns", "encoded", "finals", "ids", "left", "loader", "records",
                 "starts", "trial_log", "values")

    def __init__(self, ids: list[str], records: Part, starts: array[int], finals: array[float], at: array[int],
                 values: Part, loader: Callable[[str], list[Metric]] | None,
                 encoded: dict[str, tuple[bytes, float]], trial_log: Callable[[str], list[Stored]] | None) -> None:
        self.ids, self.records, self.starts, self.finals = ids, records, starts, finals
        self.at, self.values = at, values
        self.loader, self.trial_log = loader, trial_log
        self.encoded = encoded  # (the state's: an ended trial built keeps its record as encoded)
        self.left = len(finals)  # trials not built yet
        self.columns: Part | None = None  # the index columns part, where the snapshot has one
        self._columns: IndexColumns | bool | None = None  # (decoded; False: too many parameter names)
        self._columns_lock = threading.Lock()  # (a warm-up thread reads them while a request may ask)

    def index_columns(self, whole: bool = False) -> IndexColumns | None:
        """The snapshot's index columns (:class:`IndexColumns`); where it has none, or they do not match, made once
        from the trials' records instead (never trusted: a damaged record is rebuilt from the log); None where the
        parameters have more than INDEX_KEYS_MAX names. ``whole``: every column read and checked now (a later read
        of a part the store hands back then cannot fail)."""
        with self._columns_lock:
            return self._index_columns(whole)

    def _index_columns(self, whole: bool) -> IndexColumns | None:
        got = self._columns
        if got is False:
            return None
        try:
            if not isinstance(got, IndexColumns):
                if self.columns is None:
                    raise ValueError("none in the snapshot")
                got = self._columns = IndexColumns(self.columns, len(self.finals))
            if whole:
                got.load()
            return got
        except (SnapshotDamaged, ValueError, TypeError, KeyError) as e:
            if self.columns is not None:
                log.warning("the snapshot's index columns do not match (%s): made again from its records", e)
        made = encode_columns(self.record_rows())
        if made is None:
            self._columns = False
            return None
        self.columns = made
        got = self._columns = IndexColumns(made, len(self.finals))
        return got

    def record_rows(self) -> Iterator[tuple[Any, ...]]:
        """Every trial's :func:`index_row`, from the records (a parse per ROWS_CHUNK records, not of all at once:
        100k decoded records would take ~200 MB; a damaged one from its events)."""
        empty = array("d")
        n = len(self.finals)
        for lo in range(0, n, ROWS_CHUNK):
            hi = min(n, lo + ROWS_CHUNK)
            try:
                recs: list[Any] | None = json.loads(b"[" + bytes(self.records[1 + self.starts[lo]:self.starts[hi]])
                                                    + b"]")
            except (SnapshotDamaged, ValueError):
                recs = None
            if recs is not None and len(recs) != hi - lo:
                recs = None
            for i in range(lo, hi):
                if recs is not None:
                    try:
                        yield index_row(_trial(recs[i - lo], empty, None))
                        continue
                    except (ValueError, TypeError, KeyError, IndexError):
                        pass
                yield index_row(self.build(i, keep=False))

    def record(self, i: int) -> bytes:
        return bytes(self.records[1 + self.starts[i]:self.starts[i + 1]])

    def series(self, i: int) -> bytes:
        return bytes(self.values[self.at[i] * 8:self.at[i + 1] * 8])

    def build(self, i: int, rec: list[Any] | None = None, strict: bool = False, keep: bool = True,
              series: bool = True) -> TrialState:
        """Trial ``i`` (``keep=False``: for a reader only, not counted as built nor kept as encoded; ``series=False``
        too, for a reader of all but its intermediate values: they are not read, ``inter_values`` is empty)."""
        try:
            raw = self.record(i)
            if rec is None:
                rec = json.loads(raw)
            values = array("d")
            if series or keep:
                values.frombytes(self.series(i))
        except SnapshotDamaged as e:
            if strict or self.trial_log is None:
                raise
            self.left -= keep
            return self.rebuild(i, e)
        self.left -= keep
        t = _trial(rec, values, self.loader)
        if keep and t.status.is_terminal:
            self.encoded[t.trial_id] = (raw, self.finals[i])
        return t

    def rebuild(self, i: int, why: Exception) -> TrialState:
        """Trial ``i`` folded from its own events in the log (nothing touched it since the snapshot: it would
        have been built then). Not kept as encoded: the next snapshot encodes it again."""
        tid = self.ids[i]
        log.warning("the snapshot's bytes of trial %s do not match (%s): rebuilt from its events in the log",
                    tid, why)
        assert self.trial_log is not None
        scratch = ExperimentState(loader=self.loader)
        for s in self.trial_log(tid):
            scratch.apply(s)
        t = scratch.trials[tid]
        if self.loader is not None and t.status.is_terminal:
            t.held = None  # (served from the store, as the fold does for an ended trial)
        return t


def _slot(trials: dict[str, TrialState], key: str) -> Any:
    """What a dict holds under ``key``: in a TrialTable, a TrialState or (not built yet) an int."""
    return dict.__getitem__(trials, key)


def _slots(trials: dict[str, TrialState]) -> Iterable[tuple[str, Any]]:
    return dict.items(trials)


class TrialTable(dict[str, TrialState]):
    """The trials of a state decoded from a snapshot. Every trial id is there at once (in order, ``len`` and
    ``in`` answer at once), but a trial is built from the snapshot's bytes only when it is first read: one by
    key, all of them by ``values()``/``items()`` (one JSON parse). A snapshot of 100k trials thus opens in the
    time of reading its ids, and ``nnix view`` answers before any trial is built. Trials running or waiting
    at the snapshot are built at once, so a trial not built yet is an ended one nothing touched since.
    (A trial not built yet is held as its index in the snapshot: an int.)"""

    __slots__ = ("source",)

    def __init__(self, ids: list[str], source: _Source | None) -> None:
        super().__init__(zip(ids, range(len(ids)), strict=True))  # type: ignore[arg-type]
        self.source = source

    @property
    def pending(self) -> bool:
        return self.source is not None

    def _one(self, key: str) -> TrialState:
        t = _slot(self, key)
        if type(t) is int:
            src = self.source
            assert src is not None
            t = src.build(t)
            dict.__setitem__(self, key, t)
            if not src.left:
                self.source = None
        return t  # type: ignore[no-any-return]

    def build_all(self) -> None:
        src = self.source
        if src is None:
            return
        try:
            recs: list[Any] | None = json.loads(_whole(src.records))
        except SnapshotDamaged:  # each trial then, its own piece checked (a damaged one rebuilt from the log)
            recs = None
        for tid, i in list(_slots(self)):
            if type(i) is int:
                dict.__setitem__(self, tid, src.build(i, None if recs is None else recs[i]))
        self.source = None

    def built(self) -> list[TrialState]:
        """The trials built so far (every running or waiting one among them), in order."""
        return [t for _, t in _slots(self) if type(t) is not int]

    def final_values(self) -> list[float]:
        """The final value of every trial (NaN: none), in order, without building any."""
        src = self.source
        nan = math.nan
        if src is None:
            return [nan if (v := t.final_value) is None else v for t in dict.values(self)]
        slots: list[Any] = list(dict.values(self))
        values = src.finals.tolist()
        values.extend([nan] * (len(slots) - len(values)))  # (trials created since the snapshot)
        for i in compress(range(len(slots)), map(is_not, map(type, slots), repeat(int))):  # the built ones (in C)
            values[i] = nan if (v := slots[i].final_value) is None else v
        return values

    def __getitem__(self, key: str) -> TrialState:
        if self.source is None:
            return dict.__getitem__(self, key)
        return self._one(key)

    def get(self, key: str, default: Any = None) -> Any:
        if self.source is None or key not in self:
            return dict.get(self, key, default)
        return self._one(key)

    def __iter__(self) -> Iterator[str]:  # (also keeps dict(table) and {**table} off the raw values)
        return dict.__iter__(self)

    def values(self) -> ValuesView[TrialState]:  # type: ignore[override]
        self.build_all()
        return dict.values(self)

    def items(self) -> ItemsView[str, TrialState]:  # type: ignore[override]
        self.build_all()
        return dict.items(self)

    def pop(self, key: str, *default: Any) -> Any:
        self.build_all()
        return dict.pop(self, key, *default)

    def setdefault(self, key: str, default: Any = None) -> Any:
        self.build_all()
        return dict.setdefault(self, key, default)

    def copy(self) -> dict[str, TrialState]:
        self.build_all()
        return dict(dict.items(self))

    def __eq__(self, other: object) -> bool:
        self.build_all()
        if isinstance(other, TrialTable):
            other.build_all()
        return dict.__eq__(self, other)

    __hash__ = None

    def __repr__(self) -> str:
        self.build_all()
        return dict.__repr__(self)


def each_trial(trials: dict[str, TrialState]) -> Iterator[TrialState]:
    """Every trial of ``trials`` as listed now, in order, without building the ones a snapshot holds into the
    state: each is built for the caller alone and let go (a full list of 100k trials thus holds one at a
    time, not all). Read only: a change goes through the state (``trials[id]``)."""
    return each_trial_or_known(trials, {})


def each_trial_or_known(trials: dict[str, TrialState], known: Mapping[str, _T], series: bool = True
                        ) -> Iterator[TrialState | _T]:
    """:func:`each_trial`, but a trial not built yet whose id is in ``known`` is given as ``known[id]`` (what the
    caller made of it before: nothing changed it since, or it would be built) instead of being read again
    (``series=False``: one read for the caller is read without its intermediate values, see :meth:`_Source.build`)."""
    src = trials.source if isinstance(trials, TrialTable) else None
    if src is None:
        yield from list(trials.values())
        return
    for tid, t in list(_slots(trials)):
        if type(t) is int:
            now = _slot(trials, tid)  # (built meanwhile: a reader runs across awaits)
            if type(now) is not int:
                yield now
            elif (hit := known.get(tid)) is not None:
                yield hit
            else:
                yield src.build(t, keep=False, series=series)
        else:
            yield t


HISTORY_CHUNK = 256  # trials of a snapshot whose records are decoded at once for a tuner's history (~4 ms a chunk)
_NO_SERIES = Series()


def record_of(t: TrialState) -> TrialRecord | None:
    """The tuner's record of trial ``t`` as it is now (None: a trial without parameter id, e.g. customized)."""
    if t.parameter_id is None:
        return None
    return TrialRecord(t.parameter_id, t.params, t.status, t.final_value,
                       Series(t.inter_values) if t.inter_values else _NO_SERIES, t.trial_id)


def tuner_records(state: ExperimentState) -> Iterator[tuple[str, TrialRecord | None]]:
    """(trial id, :func:`record_of` that trial) for every trial, in order, without building the trials a snapshot
    holds into the state: their records come from the snapshot, a chunk of trials at a time (one JSON parse of
    their parameters and statuses, the final values as the body holds them), and their intermediate values stay
    in the store until a reader asks for them (:meth:`Series.lazy`: a chunk of trials is read at once). A trial
    whose piece of the snapshot is damaged is built as a read of ``state.trials`` does (from its events)."""
    trials = state.trials
    src = trials.source if isinstance(trials, TrialTable) else None
    if src is None:
        for tid, t in list(trials.items()):
            yield tid, record_of(t)
        return
    run: list[tuple[str, int]] = []
    for tid, slot in list(_slots(trials)):
        if type(slot) is int:
            if run and (run[-1][1] + 1 != slot or len(run) >= HISTORY_CHUNK):
                yield from _run_records(trials, src, run)
                run = []
            run.append((tid, slot))
            continue
        if run:
            yield from _run_records(trials, src, run)
            run = []
        yield tid, record_of(slot)
    if run:
        yield from _run_records(trials, src, run)


def _run_records(trials: dict[str, TrialState], src: _Source, run: list[tuple[str, int]]
                 ) -> Iterator[tuple[str, TrialRecord | None]]:
    """The records of trials ``run`` (consecutive in the snapshot ``src``, none built)."""
    lo, hi = run[0][1], run[-1][1] + 1
    starts = src.starts
    recs: list[list[Any]] | None = None
    try:
        raw = bytes(src.records[1 + starts[lo]:starts[hi]])
        if raw.isascii():  # (as _record writes them): only the head of each record is decoded
            text, base = raw.decode("ascii"), starts[lo]
            recs = [_record_head(text, starts[i] - base) for i in range(lo, hi)]
        else:
            recs = json.loads(b"[" + raw + b"]")
    except (SnapshotDamaged, ValueError, StopIteration, IndexError):  # a trial at a time, as the state builds it
        recs = None  # (a damaged one from its events in the log)
    if recs is not None and len(recs) != hi - lo:
        recs = None
    values = _SeriesChunk(src, lo, hi)
    finals, at, a0 = src.finals, src.at, src.at[lo]
    for (tid, i), rec in zip(run, recs or repeat(None), strict=False):
        if rec is None:
            yield tid, record_of(trials[tid])
            continue
        pid = rec[2]
        if pid is None:
            yield tid, None
            continue
        v = finals[i]
        a, b = at[i] - a0, at[i + 1] - a0
        yield tid, TrialRecord(pid, rec[3], _STATUSES[rec[6]], None if v != v else v,
                               Series.lazy(values, a, b) if b > a else _NO_SERIES, tid)


_scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_HEAD = 7  # the fields of a snapshot record a tuner's record needs: up to its status (see _record)


def _record_head(text: str, at: int) -> list[Any]:
    """The first fields of the snapshot record at ``text[at:]`` (compact JSON), without decoding the rest."""
    if text[at] != "[":
        raise ValueError(f"no snapshot record at {at}")
    out = []
    at += 1
    for _ in range(_HEAD):
        value, at = _scan(text, at)
        out.append(value)
        if text[at] != ",":
            raise ValueError(f"a snapshot record of fewer than {_HEAD + 1} fields at {at}")
        at += 1
    return out


class _SeriesChunk:
    """The intermediate values of trials ``lo:hi`` of a snapshot, read from its part when first called (once)."""

    __slots__ = ("hi", "lo", "src", "values")

    def __init__(self, src: _Source, lo: int, hi: int) -> None:
        self.src: _Source | None = src
        self.lo, self.hi = lo, hi
        self.values: array[float] | None = None

    def __call__(self) -> array[float]:
        if self.values is not None:
            return self.values
        src = self.src
        assert src is not None
        values = array("d")
        try:
            values.frombytes(bytes(src.values[src.at[self.lo] * 8:src.at[self.hi] * 8]))
        except SnapshotDamaged:  # each trial's own piece (a damaged one folded from its events in the log)
            for i in range(self.lo, self.hi):
                got = src.build(i, keep=False).inter_values
                want = src.at[i + 1] - src.at[i]
                values.extend(got[:want])
                values.extend(repeat(math.nan, want - len(got)))  # (the log disagrees with the snapshot's count)
        self.values, self.src = values, None
        return values


def one_trial_or_known(trials: dict[str, TrialState], tid: str, known: Mapping[str, _T], series: bool = True
                       ) -> TrialState | _T:
    """The trial ``tid`` as :func:`each_trial_or_known` gives it (one a snapshot holds: ``known[tid]``, or read for
    the caller alone); KeyError where there is none."""
    src = trials.source if isinstance(trials, TrialTable) else None
    if src is None:
        return trials[tid]
    t = _slot(trials, tid)
    if type(t) is not int:
        return t  # type: ignore[no-any-return]
    hit = known.get(tid)
    return hit if hit is not None else src.build(t, keep=False, series=series)


# --- the index columns: what a sorted, filtered or searched list of every trial reads, as arrays -------------

INDEX_KEYS_MAX = 256  # parameter names at most in a snapshot's index columns (more: the part is not written)
INDEX_STATUSES = tuple(s.value for s in TrialStatus)  # a status code of the index columns: its position here
_STATUS_CODE = {s: i for i, s in enumerate(TrialStatus)}
# the columns (name, kind): d doubles (NaN: none), q 64-bit integers, b bytes (a status code), j a JSON array
_INDEX_FIXED = (("seq", "q"), ("status", "b"), ("started", "d"), ("ended", "d"), ("duration", "d"), ("metric", "d"),
                ("latest", "d"), ("nInter", "q"), ("final", "o"), ("message", "j"), ("hasFinal", "b"), ("source", "o"),
                ("parameterId", "o"), ("created", "d"), ("env", "o"), ("exitCode", "o"), ("warnings", "q"),
                ("shape", "q"))  # (shape: the position of the trial's parameter names among the head's "shapes")
INDEX_FIELDS = _INDEX_FIXED[:-1]  # an index_row's fields but its parameters, in its order (see row_summary)
# o: a JSON value per trial, each decoded alone where a page shows it (offsets of 8 bytes, then the values joined
# by commas: all of them decode at once as an array too); j: one JSON array (or doubles, where all are floats)


def index_row(t: TrialState, metrics: tuple[Metric | None, Metric | None, int] | None = None) -> tuple[Any, ...]:
    """What the index columns hold of trial ``t`` (all a summary of it shows: :func:`row_summary`): its Trial No.,
    status, start and end times, duration (ms precision), finite final and latest intermediate values (NaN: none),
    intermediate count, final result (as reported), message, whether it has a final result, source, parameter id,
    creation time, environment, exit code, warning count, parameters. ``metrics``: its final and latest intermediate
    result and intermediate count where the caller keeps them (else found in its series)."""
    if metrics is not None:
        fm, lm, n_inter = metrics
    elif t.held is None:
        fm, lm, n_inter = t.final_m, t.latest_m, t.n_inter
    else:
        fm = lm = None
        n_inter = 0
        for m in t.held:
            if m.type is MetricType.FINAL:
                fm = m
            else:
                lm, n_inter = m, n_inter + 1
    nan = math.nan
    metric = None if fm is None else finite_scalar(fm.value)
    latest = None if lm is None else finite_scalar(lm.value)
    a, b = t.started_at, t.ended_at
    return (t.sequence_id, _STATUS_CODE[t.status], nan if a is None else a, nan if b is None else b,
            nan if a is None or b is None else round(b - a, 3), nan if metric is None else metric,
            nan if latest is None else latest, n_inter, None if fm is None else fm.value, t.message, fm is not None,
            t.source, t.parameter_id, t.created_at, t.environment_id, t.exit_code, t.warning_count, t.params)


def row_summary(trial_id: str, row: Sequence[Any]) -> dict[str, Any]:
    """A trial's summary (what REST's trial lists and the web UI's table show of it) from its :func:`index_row`,
    made from the trial or read from a snapshot's index columns: the one place that says what a summary holds."""
    (seq, status, started, ended, duration, metric, latest, n_inter, final, message, has_final, source, pid, created,
     env, code, warnings, params) = row
    return {
        "id": trial_id,
        "seq": seq,
        "status": INDEX_STATUSES[status],
        "source": source,
        "parameterId": pid,
        "params": params,
        "created": None if created is None else int(created * 1000),
        "start": None if started != started else int(started * 1000),
        "end": None if ended != ended else int(ended * 1000),
        "duration": None if duration != duration else duration,
        "final": final,
        "hasFinal": bool(has_final),
        "metric": None if metric != metric else metric,
        "latest": None if latest != latest else latest,
        "nInter": n_inter,
        "message": message,
        "env": env,
        "exitCode": code,
        "warnings": warnings,
    }


class IndexColumns:
    """A snapshot's index columns (see :func:`encode_columns`), each decoded when first asked for (and kept).
    Raises :class:`SnapshotDamaged` (a piece not matching its checksum) or ValueError (not as the head says)."""

    __slots__ = ("_at", "_kept", "n", "param_keys", "part", "shapes")

    def __init__(self, part: Part, n: int) -> None:
        size = int.from_bytes(bytes(part[0:8]), "little")
        if not 2 <= size <= len(part) - 8:
            raise ValueError(f"index columns head of {size} bytes in a part of {len(part)}")
        head = json.loads(bytes(part[8:8 + size]))
        if not isinstance(head, dict) or head.get("n") != n or not isinstance(head.get("sections"), list) \
                or not isinstance(head.get("paramKeys"), list):
            raise ValueError(f"index columns of {head.get('n') if isinstance(head, dict) else '?'} trials, not {n}")
        self.part, self.n, self.param_keys = part, n, [str(k) for k in head["paramKeys"]]
        shapes = head.get("shapes")
        if not isinstance(shapes, list) or not all(isinstance(x, list) and all(isinstance(k, str) and k in
                                                                                self.param_keys for k in x)
                                                    for x in shapes):
            raise ValueError("index columns' parameter shapes not as their head says")
        self.shapes: list[tuple[str, ...]] = [tuple(x) for x in shapes]
        self._at: dict[str, tuple[str, int, int]] = {}
        pos = 8 + size
        for name, kind, length in head["sections"]:
            if kind not in ("d", "q", "b", "j", "o") or not isinstance(length, int) or length < 0:
                raise ValueError(f"index column {name!r} of kind {kind!r} and size {length!r}")
            self._at[str(name)] = (kind, pos, pos + length)
            pos += length
        if pos != len(part) or any(name not in self._at or self._at[name][0] not in ((kind, "d") if kind == "j"
                                                                                     else (kind,))
                                   for name, kind in _INDEX_FIXED) \
                or any(f"param:{k}" not in self._at for k in self.param_keys):
            raise ValueError("index columns not as their head says")
        self._kept: dict[str, Any] = {}

    def column(self, name: str) -> Any:
        """Column ``name`` (an array, or a list for a JSON one) of ``n`` values; a parameter not among
        ``param_keys``: None (no trial of the snapshot has it)."""
        hit = self._kept.get(name)
        if hit is not None:
            return hit
        where = self._at.get(name)
        if where is None:
            if name.startswith("param:"):
                return None
            raise KeyError(name)
        kind, a, b = where
        kept = self._kept.get(f"items:{name}")
        raw = b"" if kept is not None else bytes(self.part[a:b])
        if kind == "o":
            _, text = kept if kept is not None else self._items(name, raw)
            hit = json.loads(b"[" + text + b"]")
            if not isinstance(hit, list):
                raise ValueError(f"index column {name!r} is not an array")
        elif kind == "j":
            hit = json.loads(raw)
            if not isinstance(hit, list):
                raise ValueError(f"index column {name!r} is not an array")
        else:
            hit = array(kind)
            hit.frombytes(raw)
        if len(hit) != self.n:
            raise ValueError(f"index column {name!r} of {len(hit)} values, not {self.n}")
        if name == "shape" and self.n and not -1 <= min(hit) <= max(hit) < len(self.shapes):
            raise ValueError("index column 'shape' not among the head's shapes")
        self._kept[name] = hit
        return hit

    def _items(self, name: str, raw: bytes) -> tuple[array[int], bytes]:
        """The offsets and text of the ``o`` column ``name`` (its bytes ``raw``), checked."""
        n = self.n
        if len(raw) < 8 * (n + 1):
            raise ValueError(f"index column {name!r} of {len(raw)} bytes for {n} offsets")
        offsets = array("q")
        offsets.frombytes(raw[:8 * (n + 1)])
        text = raw[8 * (n + 1):]
        if offsets[0] != 0 or offsets[n] != len(text) + 1 or any(map(gt, offsets, offsets[1:])):
            raise ValueError(f"index column {name!r}: offsets not as its values")
        self._kept[f"items:{name}"] = (offsets, text)
        return offsets, text

    def item(self, name: str, i: int) -> Any:
        """Trial ``i``'s value of column ``name`` (an ``o`` column: only that value decoded)."""
        got = self._kept.get(f"items:{name}")
        if got is None:
            return self.column(name)[i]
        offsets, text = got
        return json.loads(text[offsets[i]:offsets[i + 1] - 1])

    def items(self, name: str) -> list[bytes]:
        """The ``o`` column ``name`` as each trial's JSON bytes."""
        if f"items:{name}" not in self._kept:
            self.column(name)
        offsets, text = self._kept[f"items:{name}"]
        return [text[a:b - 1] for a, b in pairwise(offsets)]

    def kind(self, name: str) -> str | None:
        """How column ``name`` is kept: ``d`` doubles (a JSON column: its values all floats, NaN for None), ``q``,
        ``b`` or ``j`` (JSON); None: no such column."""
        where = self._at.get(name)
        return None if where is None else where[0]

    def values(self, name: str) -> list[Any] | None:
        """Column ``name`` of a JSON field (``final``, ``message``, ``param:NAME``) as its values (None: a parameter
        no trial of the snapshot has)."""
        got = self.column(name)
        if got is None or isinstance(got, list):
            return got
        return [None if v != v else v for v in got]

    def load(self) -> None:
        """Every column read (and checked) now (an ``o`` column's values are decoded when asked for)."""
        for name, kind in _INDEX_FIXED:
            if kind == "o" and f"items:{name}" not in self._kept:
                _, a, b = self._at[name]
                self._items(name, bytes(self.part[a:b]))
            elif kind != "o":
                self.column(name)
        for k in self.param_keys:
            self.column(f"param:{k}")


def _json_column(values: list[Any]) -> tuple[str, bytes]:
    """A JSON field's column: doubles where its values are all floats (none NaN) or None (read at once), else JSON."""
    if all(v is None or (type(v) is float and v == v) for v in values):
        return "d", array("d", [math.nan if v is None else v for v in values]).tobytes()
    return "j", json.dumps(values, separators=(",", ":")).encode()


def encode_columns(segments: Iterable[tuple[IndexColumns, int, int] | tuple[Any, ...]]) -> bytes | None:
    """The index columns part of the trials in ``segments`` (rows of :func:`index_row`, or runs ``lo:hi`` of an
    older snapshot's columns): a JSON head (trial count, parameter names, each column's kind and size), then the
    columns; None where the parameters have more than INDEX_KEYS_MAX names."""
    fixed = INDEX_FIELDS  # (the shape is made here)
    cols: list[Any] = [array(kind) if kind not in ("j", "o") else [] for _, kind in fixed]  # (o: each one's JSON)
    pcols: dict[str, list[Any]] = {}  # (in the order the names first appear; a new one: None for the rows before)
    shapes: dict[tuple[str, ...], int] = {}
    shape = array("q")
    n = 0
    for seg in segments:  # (one pass: 100k rows are not held at once)
        names = seg[0].param_keys if isinstance(seg[0], IndexColumns) else seg[-1] if isinstance(seg[-1], dict) else ()
        for k in names:
            if k not in pcols and isinstance(k, str):
                if len(pcols) == INDEX_KEYS_MAX:
                    return None
                pcols[k] = [None] * n
        if isinstance(seg[0], IndexColumns):
            old, lo, hi = seg[0], seg[1], seg[2]
            for (name, kind), col in zip(fixed, cols, strict=True):
                got = old.items(name) if kind == "o" else old.values(name) if kind == "j" else old.column(name)
                col.extend(got[lo:hi])  # type: ignore[index]
            for k, pcol in pcols.items():
                got = old.values(f"param:{k}")
                pcol.extend(got[lo:hi] if got is not None else repeat(None, hi - lo))
            ids = [shapes.setdefault(x, len(shapes)) for x in old.shapes]
            shape.extend(-1 if j < 0 else ids[j] for j in old.column("shape")[lo:hi])
            n += hi - lo
            continue
        for value, col, (_, kind) in zip(seg[:-1], cols, fixed, strict=True):
            col.append(json.dumps(value, separators=(",", ":")).encode() if kind == "o" else value)
        params = seg[-1]
        for k, pcol in pcols.items():
            pcol.append(params.get(k) if isinstance(params, dict) else None)
        shape.append(shapes.setdefault(tuple(params), len(shapes)) if isinstance(params, dict)
                     and all(type(k) is str for k in params) else -1)
        n += 1
    sections: list[tuple[str, str, bytes]] = []
    for (name, kind), col in zip(fixed, cols, strict=True):
        if kind == "o":
            offsets = array("q", [0])
            for x in col:
                offsets.append(offsets[-1] + len(x) + 1)
            sections.append((name, "o", offsets.tobytes() + b",".join(col)))
        else:
            sections.append((name, *_json_column(col)) if kind == "j" else (name, kind, col.tobytes()))
    sections.append(("shape", "q", shape.tobytes()))
    for k, pcol in pcols.items():
        sections.append((f"param:{k}", *_json_column(pcol)))
    head = json.dumps({"n": n, "paramKeys": list(pcols), "shapes": [list(x) for x in shapes],
                       "sections": [[a, b, len(c)] for a, b, c in sections]}, separators=(",", ":")).encode()
    return b"".join([len(head).to_bytes(8, "little"), head, *(c for _, _, c in sections)])


def encode_sections(state: ExperimentState) -> tuple[bytes, ...]:
    """``state`` as snapshot bytes: the body, a small JSON head (the experiment, its trial ids, section sizes) then
    the trial ids, the byte offsets of their records, their final values and the offsets of their intermediate
    values (raw); and the parts, read only where needed: the trials' records (a JSON array: one can be decoded
    alone), their finite intermediate values as raw doubles, and (where the parameters have at most INDEX_KEYS_MAX
    names) the index columns (:func:`encode_columns`: what a sorted or filtered list of all trials reads). Only
    running and waiting trials take their series with them: an ended trial's is read from the store when asked
    for (``loader``). A trial not changed since it was last encoded or decoded is not encoded again (nor, not built
    yet, read: its bytes are copied)."""
    head: dict[str, Any] = {f.name: getattr(state, f.name) for f in fields(state) if f.name not in _EXPERIMENT_SKIP}
    head["status"] = state.status.value
    trials = state.trials
    src = trials.source if isinstance(trials, TrialTable) else None
    cache = state.encoded
    ids: list[str] = []
    active: list[int] = []
    pieces: list[bytes] = []
    starts, finals, at, values = array("q", [0]), array("d"), array("q", [0]), array("d")
    pos, nan = 0, math.nan
    run: list[tuple[str, int]] = []  # trials not built yet, one after the other in the snapshot: copied at once
    tot = state.totals
    old_cols = None
    if src is not None and (tot is None or len(tot["paramKeys"]) <= INDEX_KEYS_MAX):
        old_cols = src.index_columns(whole=True)
    rows: list[Any] | None = [] if src is None or old_cols is not None else None  # (None: no index columns)

    def old_rows(lo: int, hi: int) -> None:
        if rows is not None:
            assert old_cols is not None
            rows.append((old_cols, lo, hi))

    def put(rec: bytes, final: float, series: Iterable[float] | bytes) -> None:
        nonlocal pos
        pieces.append(rec)
        pos += len(rec) + 1
        starts.append(pos)
        finals.append(final)
        if isinstance(series, bytes):
            values.frombytes(series)
        else:
            values.extend(series)
        at.append(len(values))

    def built(tid: str, t: TrialState) -> None:
        hit = cache.get(tid)
        if hit is None:
            value = t.final_value
            hit = (_record(t), nan if value is None else value)
            if t.status.is_terminal:
                cache[tid] = hit
            else:
                active.append(len(ids) - 1)
        put(hit[0], hit[1], t.inter_values)
        if rows is not None:
            rows.append(index_row(t))

    def flush() -> None:
        nonlocal pos
        if not run:
            return
        assert src is not None
        lo, hi = run[0][1], run[-1][1] + 1
        s0, a0 = src.starts[lo], src.at[lo]
        try:
            recs, series = src.records[1 + s0:src.starts[hi]], src.values[a0 * 8:src.at[hi] * 8]
        except SnapshotDamaged:  # a trial at a time: a damaged one is rebuilt (see _Source.rebuild)
            for tid, i in run:
                try:
                    put(src.record(i), src.finals[i], src.series(i))
                except SnapshotDamaged:
                    built(tid, trials[tid])
                else:
                    old_rows(i, i + 1)
            run.clear()
            return
        pieces.append(bytes(recs))
        base, n = len(values), len(at)
        starts.extend(array("q", [pos + x - s0 for x in src.starts[lo + 1:hi + 1]]))
        pos += len(recs) + 1
        finals.extend(src.finals[lo:hi])
        values.frombytes(series)
        at.extend(array("q", [base + x - a0 for x in src.at[lo + 1:hi + 1]]))
        assert len(at) == n + hi - lo
        old_rows(lo, hi)
        run.clear()

    for tid, t in _slots(trials):
        ids.append(tid)
        if type(t) is int:  # not built yet: its bytes as the snapshot holds them
            if run and run[-1][1] + 1 != t:
                flush()
            run.append((tid, t))
            continue
        flush()
        built(tid, t)
    flush()
    head["active"] = active
    sections = [json.dumps(ids, separators=(",", ":")).encode(), starts.tobytes(), finals.tobytes(), at.tobytes()]
    records = b"[" + b",".join(pieces) + b"]"
    series = values.tobytes()
    columns = None
    if rows is not None and len(rows) == 1 and old_cols is not None and rows[0] == (old_cols, 0, old_cols.n):
        columns = _whole(old_cols.part)  # (no trial built since: the part as it was read, checked whole)
    elif rows is not None:
        columns = encode_columns(rows)
    parts = [records, series] if columns is None else [records, series, columns]
    head["sections"] = [len(s) for s in sections]
    head["parts"] = [len(p) for p in parts]
    text = json.dumps({"experiment": head}, separators=(",", ":")).encode()
    return b"".join([len(text).to_bytes(8, "little"), text, *sections]), *parts


def encode_snapshot(state: ExperimentState) -> bytes:
    """:func:`encode_sections` in one piece: the body, then its parts."""
    return b"".join(encode_sections(state))


def decode_snapshot(body: bytes, loader: Callable[[str], list[Metric]] | None, parts: Sequence[Part] | None = None,
                    trial_log: Callable[[str], list[Stored]] | None = None) -> ExperimentState:
    """The state :func:`encode_sections` wrote (raises on anything malformed): ``parts`` as the store handed them
    back, or (None) following the body as :func:`encode_snapshot` wrote them. Only the body and the trials running
    or waiting are decoded here: the others are built when first read (:class:`TrialTable`)."""
    view = memoryview(body)
    n = int.from_bytes(view[:8], "little")
    head = json.loads(bytes(view[8:8 + n]))["experiment"]
    sizes, part_sizes, active = head.pop("sections"), head.pop("parts"), head.pop("active")
    pos, sections = 8 + n, []
    for size in [*sizes, *part_sizes]:
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"snapshot section size {size!r}")
    for size in sizes:
        sections.append(view[pos:pos + size])
        pos += size
    if parts is None:
        parts = []
        for size in part_sizes:
            parts.append(view[pos:pos + size])  # type: ignore[arg-type]  # (a memoryview slices to memoryviews)
            pos += size
    if pos != len(view) or len(parts) not in (2, 3) or [len(p) for p in parts] != part_sizes:
        raise ValueError(f"snapshot of {len(view)} bytes and parts {[len(p) for p in parts]} where its head says "
                         f"{pos} and {part_sizes}")
    ids_raw, starts_raw, finals_raw, at_raw = sections
    records, values = parts[0], parts[1]
    ids = json.loads(bytes(ids_raw))
    starts, finals, at = array("q"), array("d"), array("q")
    starts.frombytes(starts_raw)
    finals.frombytes(finals_raw)
    at.frombytes(at_raw)
    k = len(ids)
    if not isinstance(ids, list) or len(starts) != k + 1 or len(finals) != k \
            or len(at) != k + 1 or starts[0] != 0 or (k and starts[k] != len(records) - 1) or at[0] != 0 \
            or at[k] * 8 != len(values) or len(records) < 2:
        raise ValueError(f"snapshot of {k} trials with {len(starts)} offsets, {len(finals)} finals, {len(at)} series, "
                         f"{len(values) / 8:.0f} values")
    state = ExperimentState(**{key: v for key, v in head.items() if key != "status"})
    state.status = ExperimentStatus(head["status"])
    if not _totals_ok(head.get("totals")):  # a snapshot older than them: counted when first asked for
        state.totals = None
    state.loader, state.trial_log = loader, trial_log
    source = _Source(ids, records, starts, finals, at, values, loader, state.encoded, trial_log)
    source.columns = parts[2] if len(parts) == 3 else None  # (checked when first read)
    table = TrialTable(ids, source if k else None)
    if len(table) != k:
        raise ValueError("snapshot with a trial id twice")
    for i in active:  # built at once (see TrialTable); a damaged piece: the snapshot is not used
        t = source.build(i, strict=True)
        dict.__setitem__(table, ids[i], t)
        if t.is_active:
            state.live[ids[i]] = t
    if source.left == 0:
        table.source = None
    state.trials = table
    return state


def snapshot_of(state: ExperimentState) -> Snapshot:
    """``state`` as a snapshot (immutable: a thread may write it to the store while the state moves on)."""
    body, *parts = encode_sections(state)
    return Snapshot(SNAPSHOT_VERSION, state.last_seq, body, tuple(parts))


def write_snapshot(store: Store, state: ExperimentState) -> None:
    """Keep ``state`` (folded from ``store`` up to ``state.last_seq``) as the store's snapshot."""
    if state.last_seq > 0:
        store.write_snapshot(snapshot_of(state))
        state.snapshot_seq = state.last_seq


def load_snapshot(store: Store, loader: Callable[[str], list[Metric]] | None) -> ExperimentState | None:
    """The state of the store's snapshot, or None when it has none that matches its log (then the
    whole log is folded: a snapshot is never trusted blindly). Its parts are checked when read: a trial
    whose piece is damaged is folded then from its events in the log, read by the ``loader``'s ``read_trial``
    method where it has one (like :meth:`Store.read_trial`), else by ``store`` (which must then stay open)."""
    snap = store.read_snapshot()
    if snap is None or snap.version != SNAPSHOT_VERSION:
        return None
    read_trial = getattr(loader, "read_trial", None) or store.read_trial

    def trial_log(trial_id: str) -> list[Stored]:
        return list(read_trial(trial_id, TRIAL_KINDS))

    try:
        state = decode_snapshot(snap.body, loader, snap.parts or None, trial_log)
    except (ValueError, TypeError, KeyError, IndexError) as e:
        log.warning("the snapshot of this experiment does not decode (%s): folding its whole log", e)
        return None
    if state.last_seq != snap.seq:
        return None
    state.snapshot_seq = snap.seq
    return state


def fold_store(store: Store, state: ExperimentState | None = None,
               loader: Callable[[str], list[Metric]] | None = None) -> ExperimentState:
    """Fold everything in ``store`` after ``state.last_seq``, by the store's fastest way. Without a state,
    start from the store's snapshot where it has one that matches, and serve ended trials' series from
    the store (``ExperimentState.loader``; by default, ``store`` itself) rather than hold them all."""
    if state is None:
        def from_store(trial_id: str) -> list[Metric]:
            return series(store.read_trial(trial_id, SERIES_KINDS))

        loader = loader or from_store
        state = load_snapshot(store, loader) or ExperimentState(loader=loader)
    store.replay(state, state.last_seq)
    return state
