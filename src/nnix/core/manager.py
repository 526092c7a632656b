"""The experiment manager: one asyncio loop that asks the tuner, runs trials through the training
service and records every fact in the store before acting on it.

Lifecycle facts follow NNI (``nni-spec.md`` section 6): limits stop *creating* trials and let
running ones finish; ``maxTrialDuration`` kills a trial as EARLY_STOPPED; a concurrency decrease
never kills a trial. Deviation: when the tuner has nothing left to propose and no trial is active
the experiment is DONE (NNI stays in TUNER_NO_MORE_TRIAL until stopped by hand).
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import math
import os
import secrets
import shlex
import string
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from nnix.agent.channel import REJECT_SAMPLE, metric_problem
from nnix.agent.reason import exit_reason
from nnix.assessors.base import AssessedHistory, Assessor, AssessorContext, Decision
from nnix.config import AlgorithmConfig, ExperimentConfig
from nnix.core.manager_error import apply_manager_error, clear_manager_error, write_manager_error
from nnix.core.metrics import METRIC_CAP, cap_message, keep_line
from nnix.core.state import ExperimentState, TrialState
from nnix.errors import (
    GpuUnavailableError,
    NnixError,
    NoMoreTrialsError,
    ServiceError,
    ServiceUnavailableError,
    StoreError,
    StoreFullError,
)
from nnix.model.events import (
    DataImported,
    Event,
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
from nnix.model.imported import record_problem, validate_import
from nnix.model.runs import Exited, Metrics, Requeued, RunnerEvent, TrialSpec
from nnix.model.status import CancelReason, ExperimentStatus, MetricType, TrialStatus
from nnix.model.trials import Direction, TrialRecord
from nnix.services.base import TakesDemand, TrainingService
from nnix.space import SearchSpace
from nnix.store.base import Snapshot, Store
from nnix.tuners.base import Heavy, History, Tuner, TunerContext

log = logging.getLogger("nnix.manager")

TRIAL_ID_FIRST = string.ascii_letters
TRIAL_ID_REST = string.ascii_letters + string.digits
FINISHED = (ExperimentStatus.DONE, ExperimentStatus.STOPPED, ExperimentStatus.ERROR)


THREAD_FIRST_ASK = 20_000  # records: a tuner's first ask at a history this long runs in a thread (see _ask)
SNAPSHOT_EVERY_EVENTS = 50_000  # a running manager refreshes the store's snapshot after this many events,
SNAPSHOT_MIN_INTERVAL = 60.0  # and at most once a minute (and at every clean exit,
SNAPSHOT_TRIALS_PER_EVENT = 10  # where at least one event per this many trials followed the last one: a view of
# 100k trials adds 2 events, cheaper to replay at the next start than a snapshot of them all is to write)
INGEST_BATCH = 1_000  # metric lines recorded per turn of the loop at most (one store transaction); REST runs between


def new_trial_id(taken: Callable[[str], bool]) -> str:
    """NNI's trial id shape: 5 characters, a letter then letters/digits."""
    while True:
        tid = secrets.choice(TRIAL_ID_FIRST) + "".join(secrets.choice(TRIAL_ID_REST) for _ in range(4))
        if not taken(tid):
            return tid


def params_as_args(params: dict[str, Any]) -> str:
    parts = []
    for k, v in params.items():
        text = v if isinstance(v, str) else json.dumps(v)
        parts.append(shlex.quote(f"--{k}={text}"))
    return " ".join(parts)


class ServiceEvents:
    """The ``emit`` a manager gives its training service: ``emit(event)`` queues a service event, and
    ``await emit.committed()`` returns once every event queued so far is in the store (see
    :func:`nnix.agent.runner.committed`, what an agent endpoint awaits before acknowledging messages)."""

    def __init__(self, manager: ExperimentManager) -> None:
        self._manager = manager

    def __call__(self, event: RunnerEvent) -> None:
        self._manager._on_service_event(event)

    async def committed(self) -> None:
        await self._manager.committed()

    async def caught_up(self) -> None:
        await self._manager.caught_up()


class StateReader(Protocol):
    """How the manager opens its state from the store and keeps it there (the read side's
    :class:`nnix.query.StoreReader`, handed in by the host: ``nnix.core`` sits below ``nnix.query``)."""

    def load(self, store: Store) -> ExperimentState: ...

    def snapshot(self, state: ExperimentState) -> Snapshot: ...

    def history(self, state: ExperimentState, imports: Callable[[], list[TrialRecord]]) -> TunerHistoryKeeper: ...


class TunerHistoryKeeper(Protocol):
    """The tuner's history of a state, kept per trial (the read side's :class:`nnix.query.history.TunerHistory`)."""

    at: dict[str, int]  # trial id -> its record's index in the history

    @property
    def whole(self) -> bool: ...

    def touched(self, trial_id: str) -> None: ...

    def imported(self) -> None: ...

    def records_list(self) -> list[TrialRecord]: ...

    def view(self) -> History: ...

    async def read(self) -> None: ...


class ExperimentManager:
    """Drives one experiment. Build it with :func:`nnix.host.build.build_manager`."""

    def __init__(
        self,
        *,
        store: Store,
        exp_dir: Path,
        tuner: Tuner,
        direction: Direction,
        service_factory: Callable[[Callable[[RunnerEvent], None]], TrainingService],
        reader: StateReader,
        settings: ExperimentConfig,
        assessor: Assessor | None = None,
        clock: Callable[[], float] = time.time,
        heartbeat: float = 10.0,
        exit_when_done: bool = True,
    ) -> None:
        self.store = store
        self.exp_dir = exp_dir
        self.tuner = tuner
        self.assessor = assessor
        self.direction = direction
        self.clock = clock
        self.reader = reader
        self.settings = settings  # the validated config (the log keeps its plain dump: ``config``)
        self.state: ExperimentState = reader.load(store)
        self._snapshot_seq, self._snapshot_at = self.state.snapshot_seq, clock()  # (0: the store has none)
        # the tuner's history, kept per trial and rebuilt only for the trials an event touched (the read side's, see
        # nnix.query.history): read from the state at the first ask, a chunk per loop turn (see _read_records)
        self._tuner_history: TunerHistoryKeeper = reader.history(self.state, self._usable_imports)
        # the imported results a tuner can use, read from state.imported[:_imports_read] (a record that cannot be
        # used, stored before imports were checked, is left out with a warning: see _usable_imports)
        self._imports: list[TrialRecord] = []
        self._imports_read = 0
        self._asked = False  # the tuner was asked once (its first ask catches up with the whole history)
        # The first read of the history runs beside the loop (a task started by run(), see _load_history): a resumed
        # manager serves REST meanwhile, and asks the tuner and starts trials only once it is whole. ``history_after``
        # (set by the host before run()): that read waits for it first (the REST server up).
        self.history_after: asyncio.Future[Any] | None = None
        self._history_load: asyncio.Task[None] | None = None
        self.service = service_factory(ServiceEvents(self))
        self._heartbeat = heartbeat
        self._exit_when_done = exit_when_done
        self._inbox: list[RunnerEvent] = []
        self._inbox_lines = 0  # metric lines in the inbox
        self._taken = asyncio.Event()  # set each time the inbox was (partly) taken in: see caught_up
        # results of one type a trial keeps whole; beyond, they are thinned out (nnix.core.metrics)
        self.metric_cap = METRIC_CAP
        self._wake = asyncio.Event()
        self._space: SearchSpace | None = None
        self._space_raw: Any = None
        self._tuner_exhausted = False
        self._stop_requested = False
        self._kills: set[asyncio.Task[None]] = set()
        self._listeners: list[Callable[[], None]] = []
        self._waiting_note = ""
        self._logged_wait = ""
        self._assessed: dict[str, int] = {}
        self._failure: StoreError | None = None
        self._snapshot_job: asyncio.Future[None] | None = None  # a periodic snapshot being written by a thread

    # --- recording ---------------------------------------------------------------------------
    def record(self, *events: Event) -> None:
        """Append to the store, then fold into the in-memory state (the only way state changes).
        A failed append halts the manager (see :meth:`halt`) and raises."""
        if self._failure is not None:
            raise self._failure
        try:
            stored_events = self.store.append(events)
        except StoreError as e:
            self.halt(e)
            raise
        for stored in stored_events:
            self.state.apply(stored)
            trial_id = getattr(stored.event, "trial_id", None)
            if trial_id is not None:
                self._tuner_history.touched(trial_id)
            elif isinstance(stored.event, DataImported):
                self._tuner_history.imported()
        for listener in self._listeners:
            listener()

    @property
    def failure(self) -> StoreError | None:
        """Why the manager halted (a store write failed, e.g. a full disk), or None."""
        return self._failure

    def halt(self, error: StoreError) -> None:
        """A write failed (full disk, ...): record nothing more, act no more, and let :meth:`run` end
        without killing any trial (as after a crash, ``nnix resume`` re-attaches them). The reason goes
        to ``<exp>/manager.error``, which status, ``trial ls`` and the UI show, since the store may not
        take it."""
        if self._failure is not None:
            return
        hint = (error.hint or "").replace("<id>", self.experiment_id or "<id>")
        self._failure = type(error)(error.message, hint or None)
        write_manager_error(self.exp_dir, error.message, hint)
        log.error("halting: %s (%s); running trials are left running", error.message, hint)
        self._wake.set()
        self._taken.set()

    def subscribe(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def _set_status(self, status: ExperimentStatus, message: str = "") -> None:
        if self.state.status is not status or (message and message != self.state.message):
            before = self.state.status
            self.record(StatusChanged(status, message))
            level = logging.ERROR if status is ExperimentStatus.ERROR else logging.INFO
            log.log(level, "experiment %s -> %s%s", before.value, status.value, f": {message}" if message else "")

    @property
    def experiment_id(self) -> str:
        return self.state.experiment_id

    @property
    def config(self) -> dict[str, Any]:
        """The config as the log keeps it (its plain dump: what REST shows); typed: :attr:`settings`."""
        return self.state.config

    @property
    def resuming(self) -> bool:
        """The tuner's history is still being read (a resumed manager of many trials): REST answers meanwhile,
        but no trial is asked for or started before it is whole."""
        return not self._tuner_history.whole and self._history_load is not None and not self._history_load.done()

    @property
    def waiting_reason(self) -> str:
        if self.resuming:
            return (f"resuming: reading the tuner's history of {len(self.state.trials):,} trials "
                    "(no trial starts before it is whole)")
        return self._waiting_note

    # --- commands (from the CLI/REST, same loop) ---------------------------------------------
    def update_limit(self, name: str, value: Any) -> None:
        if name == "search_space":
            SearchSpace.from_json(value)  # raises SearchSpaceError with every problem
        self.record(LimitsUpdated(name, value))
        log.info("update: %s = %s", name, "(new search space)" if name == "search_space" else value)
        if name == "search_space":
            self._space = None
        self._tuner_exhausted = False
        if self.state.status in (ExperimentStatus.DONE, ExperimentStatus.NO_MORE_TRIAL,
                                 ExperimentStatus.TUNER_NO_MORE_TRIAL):
            self._set_status(ExperimentStatus.RUNNING, f"{name} updated")
        self._wake.set()

    def cancel_trial(self, trial_id: str, reason: CancelReason = CancelReason.USER) -> bool:
        t = self.state.trials.get(trial_id)
        if t is None or not t.is_active:
            return False
        self.record(TrialCancelRequested(trial_id, reason))
        if reason is CancelReason.USER:
            log.info("trial %s: cancel requested by the user", trial_id)
        if t.status is TrialStatus.WAITING:
            self.record(TrialEnded(trial_id, reason.status, None, f"{self._cancel_message(t)} before it started"))
            self._log_end(self.state.trials[trial_id])
        else:
            task = asyncio.ensure_future(self.service.cancel(trial_id))
            self._kills.add(task)
            task.add_done_callback(self._kills.discard)
        self._wake.set()
        return True

    def add_customized_trial(self, params: dict[str, Any]) -> int:
        """NNI's customized trial (the web UI's "re-run with edited parameters"): a trial whose
        parameters come from the user, not the tuner. Counts against ``maxTrialNumber`` and is
        rejected once it is reached. Returns the new trial's sequence id."""
        if self._stop_requested or self.state.status in (ExperimentStatus.STOPPING, ExperimentStatus.STOPPED):
            raise NnixError("the experiment is stopping or stopped: no trial can be added")
        if self.state.status is ExperimentStatus.ERROR:
            raise NnixError("the experiment is in ERROR: no trial can be added", "stop it, then resume it")
        max_n = self.state.limits["max_trial_number"]
        if max_n is not None and len(self.state.trials) >= max_n:
            raise NnixError(
                f"maxTrialNumber ({max_n}) reached: no more trials can be added",
                "raise it first (nnix update trialnum)",
            )
        seq = self.state.next_sequence_id
        taken = self.state.trials
        self.record(TrialCreated(new_trial_id(lambda x: x in taken), seq, None, dict(params), "customized"))
        if self.state.status is ExperimentStatus.DONE:
            self._set_status(ExperimentStatus.RUNNING, "customized trial added")
        self._wake.set()
        return seq

    def import_data(self, records: Any) -> int:
        """Prior results for the tuner (``experiment import``); they enter its history. Untrusted: checked whole
        first (:func:`nnix.model.imported.validate_import`, a value by the trial channel's schema of a final
        result, with this experiment's nanPolicy); an NnixError naming the first bad record, and nothing recorded,
        otherwise. Returns how many records were imported."""
        checked = validate_import(records, metric_problem, allow_nan=self.allow_nan)
        self.record(DataImported(checked))
        self._wake.set()
        return len(checked)

    @property
    def allow_nan(self) -> bool:
        """``nanPolicy: allow``: NaN and infinite results are recorded (as no value for the tuner)."""
        return self.settings.nan_policy == "allow"

    def request_stop(self) -> None:
        if not self._stop_requested:
            self._stop_requested = True
            self._wake.set()

    # --- service events ----------------------------------------------------------------------
    def _on_service_event(self, event: RunnerEvent) -> None:
        self._inbox.append(event)
        if isinstance(event, Metrics):
            self._inbox_lines += len(event.items)
        self._wake.set()

    async def committed(self) -> None:
        """Return once every event the service gave so far is recorded (committed to the store), so that an
        agent is acknowledged only for what survives a kill -9 of this process. Deliveries of the same moment
        share one group commit; what is still in the inbox is recorded here, not at the loop's next turn (the
        loop may itself be waiting for the agent that waits for this answer), INGEST_BATCH lines at a time with
        the loop running between. Raises when the manager has halted (nothing more is recorded: nothing more is
        acknowledged)."""
        await asyncio.sleep(0)
        while self._failure is None and self._inbox:
            self._process_inbox(INGEST_BATCH)
            if self._inbox:
                await asyncio.sleep(0)
        if self._failure is not None:
            raise self._failure

    async def caught_up(self) -> None:
        """Return once at most INGEST_BATCH metric lines wait in the inbox (or the manager halted): what a service
        reading a trial's channel awaits before it reads more (see :class:`~nnix.agent.runner.Paced`), so that a
        trial writing faster than its lines are recorded waits in its file, not in this process's memory."""
        while self._inbox_lines > INGEST_BATCH and self._failure is None:
            self._taken.clear()
            await self._taken.wait()

    def _process_inbox(self, lines: int | None = None) -> int:
        """Record what the services reported. Metrics are group-committed: the metric lines of every trial in
        the inbox (up to the next event of another kind, or a second batch of the same trial) go to the store
        in ONE append, then into the state. Nothing changes for durability: a line counts as recorded (the
        trial's ``last_index``, what a resumed manager continues from) only once the append that holds it has
        committed, and the append is atomic, so a kill -9 keeps a whole group or none of it. ``lines``: take in
        the events up to about that many metric lines (whole messages), the rest stays for the next call (the
        loop runs between: a flood of metrics never holds it for long); None: everything. Returns how many metric
        lines it took."""
        inbox = self._inbox
        n = 0
        if lines is not None:
            taken = 0
            while taken < len(inbox) and n < lines:
                ev = inbox[taken]
                n += len(ev.items) if isinstance(ev, Metrics) else 0
                taken += 1
            inbox, self._inbox = inbox[:taken], inbox[taken:]
        else:
            n = self._inbox_lines
            self._inbox = []
        try:
            self._take_in(inbox)
        finally:
            self._inbox_lines = sum(len(ev.items) for ev in self._inbox if isinstance(ev, Metrics))
            self._taken.set()
        return n

    def _take_in(self, inbox: list[RunnerEvent]) -> None:
        pending: list[Event] = []
        grouped: set[str] = set()
        assess: list[str] = []
        for ev in _coalesced(inbox):
            if isinstance(ev, Metrics):
                if ev.trial_id in grouped:  # its dedupe reads the state: commit the group first
                    self._commit_group(pending, assess)
                    grouped.clear()
                grouped.add(ev.trial_id)
                if self._metric_events(ev, pending):
                    assess.append(ev.trial_id)
                continue
            self._commit_group(pending, assess)
            grouped.clear()
            if isinstance(ev, Exited):
                self._record_exit(ev)
            elif isinstance(ev, Requeued):
                self._record_requeue(ev)
        self._commit_group(pending, assess)

    def _commit_group(self, pending: list[Event], assess: list[str]) -> None:
        """One store transaction for ``pending`` (then emptied), then the assessor on the trials in ``assess``."""
        if pending:
            events = tuple(pending)
            pending.clear()
            self.record(*events)
        for trial_id in assess:
            self._assess(trial_id)
        assess.clear()

    def _record_metrics(self, ev: Metrics) -> None:
        """Record one batch of a trial's metric lines on its own (see :meth:`_metric_events`)."""
        pending: list[Event] = []
        assess = self._metric_events(ev, pending)
        self._commit_group(pending, [ev.trial_id] if assess else [])

    def _metric_events(self, ev: Metrics, out: list[Event]) -> bool:
        """Append to ``out`` the events that record a batch of a trial's metric lines; True when the assessor
        should look at the trial once they are committed. Each line is untrusted: checked against the
        channel's schema (with the experiment's nanPolicy); what fails, here or at the agent, is skipped and
        recorded as one TrialWarning per batch, never raised. The trial must have no uncommitted events in
        ``out`` (its dedupe reads the state). Beyond ``metric_cap`` results of a type, lines are thinned out
        (:mod:`nnix.core.metrics`; the trial is warned when it reaches the cap); a ``notice`` (one of the trial's
        files could not be read) is a warning on the trial, recorded once."""
        t = self.state.trials.get(ev.trial_id)
        if t is None:
            return False
        if ev.notice and ev.notice[:300] not in t.warnings and not any(
                isinstance(w, TrialWarning) and w.trial_id == ev.trial_id and w.message == ev.notice[:300]
                for w in out):
            log.warning("trial %s: %s", ev.trial_id, ev.notice[:300])
            out.append(TrialWarning(ev.trial_id, "files", ev.notice[:300]))
        first = len(out)
        seen = last = t.last_index
        recorded: set[int] | None = None
        allow_nan = self.allow_nan
        bad: list[tuple[int, str]] = []
        bad_count, bad_last = 0, -1
        if ev.rejected_count > 0 and ev.rejected_last > seen:  # not reported before (re-read after a resume)
            bad, bad_count, bad_last = list(ev.rejected), ev.rejected_count, ev.rejected_last
        periodical = False
        cap = self.metric_cap
        # per type: results kept (recorded, and in this batch) and the channel line of the last one kept
        kept = {MetricType.PERIODICAL: t.n_inter, MetricType.FINAL: t.n_metrics - t.n_inter}
        kept_at = {MetricType.PERIODICAL: -1 if t.latest_m is None else t.latest_m.index,
                   MetricType.FINAL: -1 if t.final_m is None else t.final_m.index}
        for index, msg in ev.items:
            if index <= last:
                # a line sent again (re-attach after a crash): recorded never twice, but recorded once even
                # when it comes after later ones (a crashed manager acknowledged lines it did not record)
                if recorded is None:
                    recorded = {m.index for m in t.metrics} | {
                        m.index for m in out[first:] if isinstance(m, MetricReported)}
                if index in recorded:
                    continue
                recorded.add(index)
            else:
                last = index
            problem = metric_problem(msg, allow_nan=allow_nan)
            if problem is not None:
                if index > seen:
                    bad.append((index, problem))
                    bad_count += 1
                    bad_last = max(bad_last, index)
                continue
            mtype = MetricType(msg["type"])
            have = kept[mtype]
            if have >= cap and not keep_line(index, kept_at[mtype], have, cap):
                continue  # thinned out (said on the trial when it reached the cap)
            kept[mtype], kept_at[mtype] = have + 1, max(kept_at[mtype], index)
            periodical = periodical or mtype is MetricType.PERIODICAL
            out.append(MetricReported(ev.trial_id, mtype, msg.get("sequence", 0), msg["value"], index, t.parameter_id))
            if have + 1 == cap:  # (recorded with the result that reaches it: said once, whatever a resume re-reads)
                said = cap_message("intermediate" if mtype is MetricType.PERIODICAL else "final", cap)
                log.warning("trial %s: %s", ev.trial_id, said)
                out.append(TrialWarning(ev.trial_id, "metrics", said))
        if bad_count:
            lines = "; ".join(f"line {i}: {why}" for i, why in sorted(bad)[:3])
            n = "1 metric line" if bad_count == 1 else f"{bad_count} metric lines"
            message = f"{n} not recorded ({lines}{'; ...' if bad_count > 3 else ''})"
            log.warning("trial %s: %s", ev.trial_id, message)
            out.append(TrialWarning(ev.trial_id, "metrics", message, bad_count, bad_last))
        return periodical and self.assessor is not None

    def _assess(self, trial_id: str) -> None:
        t = self.state.trials[trial_id]
        if not t.is_active or t.cancel_reason is not None or self.assessor is None:
            return
        # NNI: only the contiguous prefix of sequence numbers (0, 1, 2, ...) is assessed
        by_seq = {m.sequence: m for m in t.intermediate}
        prefix: list[float] = []
        while len(prefix) in by_seq:
            v = _scalar(by_seq[len(prefix)].value)
            if v is None:
                break
            prefix.append(v)
        if len(prefix) <= self._assessed.get(trial_id, 0):
            return  # the contiguous prefix did not grow
        self._assessed[trial_id] = len(prefix)
        record = TrialRecord(t.parameter_id if t.parameter_id is not None else -1, t.params, t.status,
                             t.final_value, tuple(prefix), trial_id)
        view = self._history_view()  # every other record as the tuner sees them, then this one: made in O(1)
        history = AssessedHistory(view, self._tuner_history.at.get(trial_id), record)
        try:
            decision = self.assessor.assess(AssessorContext(self.direction, history), record)
        except Exception as e:  # an assessor bug must not kill the experiment
            log.exception("assessor crashed on trial %s", trial_id)
            self._set_status(ExperimentStatus.ERROR, f"assessor crashed: {type(e).__name__}: {e}")
            return
        if decision is Decision.BAD:
            log.info("assessor: trial %s is hopeless after %d results: early stop", trial_id, len(prefix))
            self.cancel_trial(trial_id, CancelReason.EARLY_STOP)

    def _record_exit(self, ev: Exited) -> None:
        t = self.state.trials.get(ev.trial_id)
        if t is None:
            return
        if ev.leftovers > 0:
            n = ev.leftovers
            message = f"killed {n} leftover process{'' if n == 1 else 'es'}"
            log.warning("trial %s: %s", ev.trial_id, message)
            self.record(TrialWarning(ev.trial_id, "processes", message, n))
        if t.status.is_terminal:
            return
        if ev.exit_code == 0:
            status, message = TrialStatus.SUCCEEDED, ""
        elif t.cancel_reason is not None:
            status, message = t.cancel_reason.status, self._cancel_message(t)
        else:  # it ended by itself: why, from its exit status and the end of its stderr (nnix.agent.reason)
            status, message = TrialStatus.FAILED, exit_reason(ev.exit_code, ev.signal, ev.stderr_tail, ev.message)
        self.record(TrialEnded(ev.trial_id, status, ev.exit_code, message))
        self._log_end(self.state.trials[ev.trial_id])

    def _cancel_message(self, t: TrialState) -> str:
        """Why nnix stopped a trial, in words (its TrialEnded message)."""
        reason = t.cancel_reason
        if reason is CancelReason.EARLY_STOP:
            assessor = self.settings.assessor
            name = (assessor.name or assessor.class_name if assessor is not None else None) or "the assessor"
            return f"early stopped by the assessor ({name}) after {t.n_inter} intermediate results"
        if reason is CancelReason.MAX_TRIAL_DURATION:
            max_d = self.settings.max_trial_duration
            limit = "-" if max_d is None else f"{max_d:g} s"
            return f"stopped: it ran longer than maxTrialDuration ({limit})"
        if reason is CancelReason.EXPERIMENT_STOP:
            return "canceled: the experiment was stopped"
        return "canceled by the user"

    def _log_end(self, t: TrialState) -> None:
        took = "" if t.started_at is None or t.ended_at is None else f" after {t.ended_at - t.started_at:.1f} s"
        if t.status is TrialStatus.SUCCEEDED:
            final = t.final
            result = "no final result" if final is None else f"final {json.dumps(final.value)[:120]}"
            log.info("trial %s #%d SUCCEEDED%s: %s", t.trial_id, t.sequence_id, took, result)
        else:
            level = logging.WARNING if t.status is TrialStatus.FAILED else logging.INFO
            log.log(level, "trial %s #%d %s%s: %s", t.trial_id, t.sequence_id, t.status.value, took, t.message)

    def _record_requeue(self, ev: Requeued) -> None:
        t = self.state.trials.get(ev.trial_id)
        if t is None or t.status.is_terminal:
            return
        if t.cancel_reason is not None:  # it was being stopped anyway: it ends here
            self.record(TrialEnded(ev.trial_id, t.cancel_reason.status, None,
                                   f"{self._cancel_message(t)} ({ev.reason})"))
            self._log_end(self.state.trials[ev.trial_id])
            return
        log.warning("trial %s goes back to the queue: %s", ev.trial_id, ev.reason)
        self._assessed.pop(ev.trial_id, None)
        self.record(TrialRequeued(ev.trial_id, ev.reason))

    # --- tuner -------------------------------------------------------------------------------
    def _search_space(self) -> SearchSpace:
        raw = self.state.limits["search_space"]
        if self._space is None or raw is not self._space_raw:
            self._space = SearchSpace.from_json(raw)
            self._space_raw = raw
        return self._space

    def _history(self) -> list[TrialRecord]:
        """Imported results first (negative parameter ids), then one record per trial with a parameter id,
        in the order the trials were created. The manager's own list: callers copy it, never change it."""
        return self._tuner_history.records_list()

    def _usable_imports(self) -> list[TrialRecord]:
        """The imported results, as tuner records (parameter id -1 for the first import record, -2 ...), read on
        from where the last call stopped. A record that cannot be used (it breaks the import schema: stored by an
        nnix that did not check imports) is left out, and said once in the manager log: one bad record must not
        stop the tuner, at this start or any later one."""
        imported, start = self.state.imported, self._imports_read
        skipped: list[str] = []
        allow_nan = self.allow_nan
        for i in range(start, len(imported)):
            rec = imported[i]
            problem = record_problem(rec, metric_problem, allow_nan=allow_nan)
            if problem is None:
                self._imports.append(TrialRecord(-(i + 1), rec["parameter"], TrialStatus.SUCCEEDED,
                                                 _scalar(rec["value"])))
            else:
                skipped.append(f"record [{i}]: {problem}")
        self._imports_read = len(imported)
        if skipped:
            n = len(skipped)
            log.warning("%s left out of the tuner's history (%s%s)",
                        "1 imported record is" if n == 1 else f"{n} imported records are", "; ".join(skipped[:3]),
                        "; ..." if n > 3 else "")
        return self._imports

    def _history_view(self) -> History:
        """The history as handed to the tuner: a view of the manager's list (O(1), see nnix.query.history)."""
        return self._tuner_history.view()

    async def _read_records(self) -> None:
        """The first read of every trial's record, a chunk per loop turn (see nnix.query.history)."""
        await self._tuner_history.read()

    async def _load_history(self) -> None:
        """The first read of the history (run()'s task), after ``history_after``; the loop is woken when done."""
        try:
            if self.history_after is not None:
                await asyncio.wait({self.history_after})  # (how it ended is the host's business)
            await self._read_records()
        finally:
            self._wake.set()

    async def history_read(self) -> None:
        """Return once the first read of the tuner's history has ended (at once where none is under way): what
        can wait for it (the web UI's warm-up) does not slow it down."""
        if self._history_load is not None and not self._history_load.done():
            await asyncio.wait({self._history_load})

    def _history_ready(self) -> bool:
        """Whether the tuner's history is whole (asks and trial starts wait for it). Where its read ended without
        it (failed: the error is then the loop's), it is read here, at once."""
        if not self._tuner_history.whole and (self._history_load is None or self._history_load.done()):
            self._history()
        return self._tuner_history.whole

    async def _ask(self, n: int) -> list[dict[str, Any]]:
        await self._read_records()
        ids = list(range(self.state.next_parameter_id, self.state.next_parameter_id + n))
        ctx = TunerContext(self._search_space(), self.direction, self.state.seed, self._history_view())
        first, self._asked = not self._asked, True
        # a tuner's first ask catches up with the whole history (a resumed Random counts 100k keys): in a thread
        # where that is long, so that the loop goes on serving (the history handed is a view that never changes)
        if (isinstance(self.tuner, Heavy) and self.tuner.heavy) or (first and len(ctx.history) >= THREAD_FIRST_ASK):
            proposed = (await asyncio.to_thread(self.tuner.suggest, ctx, ids))[:n]
        else:
            proposed = self.tuner.suggest(ctx, ids)[:n]
        if ids and log.isEnabledFor(logging.DEBUG):
            log.debug("tuner asked for %d (parameter ids %d..%d, %d in history): %d proposed", n, ids[0], ids[-1],
                      len(ctx.history), len(proposed))
        return proposed

    # --- scheduling --------------------------------------------------------------------------
    def _limit_reached(self) -> str | None:
        max_n = self.state.limits["max_trial_number"]
        if max_n is not None and len(self.state.trials) >= max_n:
            return f"maxTrialNumber ({max_n}) reached"
        max_d = self.state.limits["max_experiment_duration"]
        if max_d is not None and self.state.elapsed(self.clock()) >= max_d:
            return f"maxExperimentDuration ({max_d} s) reached"
        return None

    async def _create_trials(self) -> None:
        if self._tuner_exhausted or self._limit_reached() or self.state.status not in (
            ExperimentStatus.RUNNING, ExperimentStatus.TUNER_NO_MORE_TRIAL
        ):
            return
        active = len(self.state.active_trials)
        n = self.state.limits["trial_concurrency"] - active
        max_n = self.state.limits["max_trial_number"]
        if max_n is not None:
            n = min(n, max_n - len(self.state.trials))
        if n <= 0:
            return
        try:
            proposals = await self._ask(n)
        except NoMoreTrialsError as e:
            self._tuner_exhausted = True
            log.info("tuner: %s", e.message)
            return
        except NnixError as e:
            self._set_status(ExperimentStatus.ERROR, f"tuner failed: {e}")
            return
        except Exception as e:  # a tuner bug must not kill the manager
            log.exception("tuner crashed")
            self._set_status(ExperimentStatus.ERROR, f"tuner crashed: {type(e).__name__}: {e}")
            return
        events: list[Event] = []
        seq, pid = self.state.next_sequence_id, self.state.next_parameter_id
        taken: set[str] = set()  # (not a copy of every trial id: 100k of them per ask)
        trials = self.state.trials
        for params in proposals:
            tid = new_trial_id(lambda x: x in taken or x in trials)
            taken.add(tid)
            events.append(TrialCreated(tid, seq, pid, params, "algorithm"))
            seq += 1
            pid += 1
        if events:
            self.record(*events)
        if not proposals and not self.state.active_trials:
            # "not now" with nothing running: nothing can ever change the tuner's mind
            self._tuner_exhausted = True

    def spec_for(self, t: TrialState) -> TrialSpec:
        cfg = self.settings
        out = self.exp_dir / "environments" / "local-env" / "trials" / t.trial_id
        out.mkdir(parents=True, exist_ok=True)
        command = cfg.trial_command
        if cfg.trial_params_as_args and isinstance(t.params, dict):
            command = f"{command} {params_as_args(t.params)}"
        # location-dependent variables (NNI_SYS_DIR, NNI_OUTPUT_DIR, NNI_CODE_DIR, PYTHONPATH with the
        # nni shim) are set by the agent that runs the trial, which knows where things are
        env = {
            "NNI_PLATFORM": self.service.platform,
            "NNI_EXP_ID": self.experiment_id,
            "NNI_TRIAL_JOB_ID": t.trial_id,
            "NNI_TRIAL_SEQ_ID": str(t.sequence_id),
            "NNIX_NAN_POLICY": cfg.nan_policy,
        }
        record = {
            "parameter_id": t.parameter_id,
            "parameter_source": t.source,
            "parameters": t.params,
            "parameter_index": 0,
        }
        return TrialSpec(t.trial_id, command, Path(cfg.trial_code_directory), out, record, env)

    async def _launch_waiting(self) -> None:
        if self._stop_requested:
            return
        self._waiting_note = ""
        # every trial, whatever its source (tuner, customized, requeued), waits for a slot: never more
        # RUNNING than trialConcurrency (a decrease kills nothing: the excess just ends on its own)
        active = self.state.active_trials  # (not every trial: an ended one a snapshot holds is not built)
        running = sum(1 for t in active if t.status is TrialStatus.RUNNING)
        slots = self.state.limits["trial_concurrency"] - running
        waiting = [t for t in active if t.status is TrialStatus.WAITING and t.cancel_reason is None]
        if isinstance(self.service, TakesDemand):
            self.service.set_demand(max(0, min(len(waiting), slots)))
        for t in waiting:
            if slots <= 0:
                return
            if t.status is not TrialStatus.WAITING or t.cancel_reason is not None:
                continue  # canceled while an earlier one started
            if self._inbox:  # a long round of starts (1,000 trials) does not hold back the metrics of the first
                self._process_inbox(INGEST_BATCH)
            try:
                started = await self.service.submit(self.spec_for(t))
            except (ServiceUnavailableError, GpuUnavailableError) as e:  # no host can run anything, or never the
                # GPUs asked for (no GPU): stop; the waiting trials stay WAITING, as NNI's (a resume starts them)
                self._set_status(ExperimentStatus.ERROR, str(e))
                return
            except ServiceError as e:
                log.error("trial %s could not be started: %s", t.trial_id, e)
                self.record(TrialEnded(t.trial_id, TrialStatus.FAILED, None, str(e)))
                self._set_status(ExperimentStatus.ERROR, str(e))
                return
            if started is None:
                self._waiting_note = self.service.waiting_reason()
                if self._waiting_note and self._waiting_note != self._logged_wait:
                    log.info("trials wait: %s", self._waiting_note)
                self._logged_wait = self._waiting_note
                return  # keep creation order: later trials wait too
            self._logged_wait = ""
            self.record(
                TrialStarted(t.trial_id, started.environment_id, started.output_dir, started.pid, started.pid_start,
                             started.gpus)
            )
            slots -= 1
            gpus = "" if started.gpus is None else f", GPUs {','.join(map(str, started.gpus)) or 'none'}"
            log.info("trial %s #%d started on %s (pid %s%s): %s", t.trial_id, t.sequence_id, started.environment_id,
                     started.pid, gpus, _short_json(t.params))

    def _enforce_trial_duration(self) -> float | None:
        """Cancel over-time trials; return seconds until the next deadline."""
        max_d = self.settings.max_trial_duration
        if not max_d:
            return None
        now = self.clock()
        nxt: float | None = None
        for t in self.state.active_trials:
            if t.status is not TrialStatus.RUNNING or t.started_at is None or t.cancel_reason is not None:
                continue
            left = t.started_at + max_d - now
            if left <= 0:
                log.info("trial %s exceeded maxTrialDuration (%s s): stopping it", t.trial_id, max_d)
                self.cancel_trial(t.trial_id, CancelReason.MAX_TRIAL_DURATION)
            else:
                nxt = left if nxt is None else min(nxt, left)
        return nxt

    def _update_status(self) -> None:
        st = self.state.status
        if st in FINISHED or st is ExperimentStatus.STOPPING:
            return
        active = len(self.state.active_trials)
        reason = self._limit_reached()
        if reason is not None:
            self._set_status(ExperimentStatus.DONE if active == 0 else ExperimentStatus.NO_MORE_TRIAL, reason)
        elif self._tuner_exhausted:
            if active == 0:
                self._set_status(ExperimentStatus.DONE, "the tuner has no more trials to propose")
            else:
                self._set_status(ExperimentStatus.TUNER_NO_MORE_TRIAL, "the tuner has no more trials to propose")
        elif st is not ExperimentStatus.RUNNING:
            self._set_status(ExperimentStatus.RUNNING)

    def _next_timeout(self, trial_deadline: float | None) -> float:
        timeout = self._heartbeat
        if trial_deadline is not None:
            timeout = min(timeout, trial_deadline)
        max_d = self.state.limits["max_experiment_duration"]
        if max_d is not None and self.state.status is ExperimentStatus.RUNNING:
            timeout = min(timeout, max(0.0, max_d - self.state.elapsed(self.clock())) + 0.01)
        if self._waiting_note:
            timeout = min(timeout, 1.0)  # resources may free up without an event (GPU used elsewhere)
        return max(timeout, 0.0)

    # --- the loop ----------------------------------------------------------------------------
    async def run(self, action: str = "create", port: int | None = None, host: str = "127.0.0.1") -> ExperimentStatus:
        """Run until the experiment is finished (or stopped). Returns the final status."""
        self.record(ManagerStarted(os.getpid(), action, port, host))
        clear_manager_error(self.exp_dir, self.state)  # the store takes writes again: the last halt's reason is history
        self._log_start(action, port, host)
        if not self._tuner_history.whole and self._history_load is None:
            self._history_load = asyncio.ensure_future(self._load_history())
        try:
            await self.service.start()
        except NnixError as e:  # e.g. no remote machine reachable: say so where users look, then fail
            self._set_status(ExperimentStatus.ERROR, e.message)
            raise
        if action == "resume":
            await self._reattach()
        if self.state.status is not ExperimentStatus.ERROR or action == "resume":
            self._set_status(ExperimentStatus.RUNNING)
        last_beat = self.clock()
        try:
            while True:
                if self._failure is not None:
                    break
                taken = self._process_inbox(INGEST_BATCH)
                if self._stop_requested:
                    await self._stop()
                    break
                if self.state.status is not ExperimentStatus.ERROR and self._history_ready():
                    await self._create_trials()
                    await self._launch_waiting()
                deadline = self._enforce_trial_duration()
                self._process_inbox(max(0, INGEST_BATCH - taken))  # (one batch a turn in all)
                self._update_status()
                st = self.state.status
                # in ERROR no trial starts: waiting ones stay WAITING (a resume starts them), running ones end
                if self._exit_when_done and (st is ExperimentStatus.DONE or (
                    st is ExperimentStatus.ERROR and not self.state.count(TrialStatus.RUNNING)
                )):
                    break
                now = self.clock()
                if now - last_beat >= self._heartbeat and self.state.counting:
                    self.record(ManagerHeartbeat())
                    last_beat = now
                    self.snapshot(periodic=True)
                if self._inbox:  # more to take in: the loop (REST, the services) runs first
                    await asyncio.sleep(0)
                    continue
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), self._next_timeout(deadline))
                except TimeoutError:
                    pass
        except StoreError:
            if self._failure is None:
                raise
        except OSError as e:  # e.g. a trial directory or channel file the manager writes
            if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            self.halt(StoreFullError(f"the disk is full: {e}", "free space on that file system: the trials keep "
                                     f"running, and `nnix resume {self.experiment_id}` re-attaches them"))
        finally:
            if self._history_load is not None and not self._history_load.done():
                self._history_load.cancel()
            await self.service.close(kill_trials=False)
        if self._failure is not None:
            raise self._failure
        if self._snapshot_job is not None:
            await self._snapshot_job
        self.snapshot()
        return self.state.status

    def snapshot(self, periodic: bool = False) -> None:
        """Keep the folded state in the store (the next manager or CLI replays only what follows it);
        ``periodic``: only when enough happened since the last one, encoded here (only the trials changed since
        the last one) and written to the store by a thread (on its own connection, a chunk per transaction:
        the loop goes on meanwhile). A failure only costs the next reader a longer fold: logged, never raised."""
        st = self.state
        since = st.last_seq - self._snapshot_seq
        if since <= 0 or self._failure is not None or (periodic and (
                since < SNAPSHOT_EVERY_EVENTS or self.clock() - self._snapshot_at < SNAPSHOT_MIN_INTERVAL
                or (self._snapshot_job is not None and not self._snapshot_job.done()))) or (
                self._snapshot_seq and since * SNAPSHOT_TRIALS_PER_EVENT < len(st.trials)):
            return
        snap = self.reader.snapshot(st)
        if periodic:
            self._snapshot_at = self.clock()
            self._snapshot_job = asyncio.ensure_future(asyncio.to_thread(self._write_snapshot, snap, True))
        else:
            self._write_snapshot(snap, False)

    def _write_snapshot(self, snap: Snapshot, other_thread: bool) -> None:
        try:
            store = self.store.snapshot_writer() if other_thread else self.store
            try:
                store.write_snapshot(snap)
            finally:
                if store is not self.store:
                    store.close()
        except Exception as e:  # (a snapshot is only a head start for the next reader)
            log.warning("snapshot of the state not written (%s): the next start folds more of the log",
                        e.message if isinstance(e, StoreError) else repr(e))
            return
        self._snapshot_seq, self._snapshot_at = snap.seq, self.clock()

    def _log_start(self, action: str, port: int | None, host: str) -> None:
        """What this experiment is, in a few lines at the top of each manager session in manager.log."""
        cfg, st = self.settings, self.state
        log.info("experiment %s: %s by manager pid %d, REST on %s:%s", self.experiment_id, action, os.getpid(), host,
                 port)

        def algo(section: AlgorithmConfig | None) -> str:
            if section is None:
                return "none"
            name = section.name or section.class_name or "?"
            args = section.class_args
            return f"{name} {_short_json(args)}" if args else name

        log.info("tuner %s (seed %d, %s); assessor %s", algo(cfg.tuner), st.seed, self.direction.value,
                 algo(cfg.assessor))
        limits = {"trialConcurrency": st.limits["trial_concurrency"],
                  "maxTrialNumber": st.limits["max_trial_number"],
                  "maxExperimentDuration": st.limits["max_experiment_duration"],
                  "maxTrialDuration": cfg.max_trial_duration}
        log.info("limits: %s; %d trials so far", ", ".join(f"{k} {v if v is not None else '-'}"
                                                          for k, v in limits.items()), len(st.trials))
        log.info("training service %s; trial command %r in %s", self.service.platform,
                 cfg.trial_command, str(cfg.trial_code_directory))

    async def view(self, port: int | None = None, host: str = "127.0.0.1") -> ExperimentStatus:
        """Serve the experiment read-only (no tuner, no trials) until a stop is requested."""
        self.record(ManagerStarted(os.getpid(), "view", port, host))
        apply_manager_error(self.state, self.exp_dir)  # why the last manager stopped (a full disk...), for the UI
        while not self._stop_requested:
            self._wake.clear()
            await self._wake.wait()
        self.snapshot()
        return self.state.status

    async def _reattach(self) -> None:
        for t in self.state.active_trials:
            if t.status is TrialStatus.RUNNING and t.output_dir:
                await self.service.reattach(
                    t.trial_id, Path(t.output_dir), t.pid, t.pid_start, t.last_index, t.gpus
                )

    async def _stop(self) -> None:
        if self.state.status is ExperimentStatus.DONE and not self.state.active_trials:
            return  # a finished experiment stays DONE
        if self.state.status is ExperimentStatus.ERROR and not self.state.count(TrialStatus.RUNNING):
            return  # and one in ERROR keeps its reason (its waiting trials stay for a resume)
        log.info("stop requested: canceling %d active trials", len(self.state.active_trials))
        self._set_status(ExperimentStatus.STOPPING, "stop requested")
        for t in self.state.active_trials:
            if t.cancel_reason is None:
                self.cancel_trial(t.trial_id, CancelReason.EXPERIMENT_STOP)
        # wait for every running trial to report its exit (kill has a grace period)
        deadline = self.clock() + 30.0
        while self.state.active_trials and self.clock() < deadline:
            self._wake.clear()
            self._process_inbox(INGEST_BATCH)
            if not self.state.active_trials:
                break
            if self._inbox:
                await asyncio.sleep(0)
                continue
            try:
                await asyncio.wait_for(self._wake.wait(), 0.5)
            except TimeoutError:
                pass
        self._process_inbox()
        for t in self.state.active_trials:  # still there after the deadline: give up on it
            log.warning("trial %s did not stop within 30 s of the stop request: given up", t.trial_id)
            self.record(TrialEnded(t.trial_id, TrialStatus.SYS_CANCELED, None, "did not stop in time"))
        if self._kills:
            await asyncio.gather(*self._kills, return_exceptions=True)
        self._set_status(ExperimentStatus.STOPPED)
        log.info("stopped")


def _coalesced(inbox: list[RunnerEvent]) -> list[RunnerEvent]:
    """The inbox with the metric messages of a trial up to its next event of another kind (an exit...) merged into
    one, in their order: a trial read a slice at a time costs one store transaction per batch, not one per slice.
    A message with a notice stays on its own."""
    out: list[RunnerEvent] = []
    at: dict[str, int] = {}  # trial -> where its merged message is in ``out``
    for ev in inbox:
        if not isinstance(ev, Metrics):
            at.clear()
        elif ev.notice:
            at.pop(ev.trial_id, None)
        elif (i := at.get(ev.trial_id)) is not None:
            a = out[i]
            assert isinstance(a, Metrics)
            out[i] = Metrics(a.trial_id, a.items + ev.items, (a.rejected + ev.rejected)[:REJECT_SAMPLE],
                             a.rejected_count + ev.rejected_count, max(a.rejected_last, ev.rejected_last))
            continue
        else:
            at[ev.trial_id] = len(out)
        out.append(ev)
    return out


def _short_json(value: Any, limit: int = 200) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _scalar(value: Any) -> float | None:
    if isinstance(value, dict):
        value = value.get("default")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        v = float(value)
    except OverflowError:  # (an integer beyond a float's range: no usable value)
        return None
    return v if math.isfinite(v) else None

