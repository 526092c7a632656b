"""The read side of an experiment: one small typed interface over its folded state (:mod:`nnix.core.state`, the
write side) and its store's snapshot.

:class:`Query` is what REST (``nnix.api``), the registry (``nnix.home``), the manager's host (``nnix.host``) and the
CLI (through ``nnix.client``) read an experiment through: a trial, every trial (lazily, in order), counts by status,
the best and ranked trials, a trial's series, the tuner's history. :class:`StoreReader` is how a state is opened from
a store and written back as a snapshot; the manager (``nnix.core``, a layer below) gets one handed to it by the host
(``nnix.host.build``), so it never imports this package. The snapshot codec, its lazy trial table and its index
columns (:mod:`nnix.query.snapshot`, :mod:`nnix.query.columns`) are internal: no module outside this package imports
them (tests/test_import_layers.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from itertools import islice
from typing import TYPE_CHECKING, Any

from nnix.core.state import ExperimentState, Metric, TrialState
from nnix.model.status import TrialStatus
from nnix.model.trials import TrialRecord
from nnix.query import snapshot as _snapshot
from nnix.query.jsonout import Parts, QueryError, dumps, dumps_exact, ms
from nnix.store.base import Snapshot, Store

if TYPE_CHECKING:
    from nnix.query.history import TunerHistory
    from nnix.query.summaries import (
        MAX_LIMIT,
        MetricScan,
        TrialIndex,
        TrialQuery,
        TrialView,
        TrialViews,
        columns_json,
        parse_columns,
        series_of,
        summarize,
    )

__all__ = ["HISTORY_CHUNK", "MAX_LIMIT", "MetricScan", "Parts", "Query", "QueryError", "StoreReader", "TrialIndex",
           "TrialQuery", "TrialView", "TrialViews", "columns_json", "dumps", "dumps_exact", "ms", "open_state",
           "parse_columns", "series_of", "summarize"]

HISTORY_CHUNK = _snapshot.HISTORY_CHUNK
# what REST and the web UI read (the summaries, the list query, columns for charts): imported when first asked for,
# so a CLI verb that only opens a state does not load them
_SUMMARIES = ("MAX_LIMIT", "MetricScan", "TrialIndex", "TrialQuery", "TrialView", "TrialViews", "columns_json",
              "parse_columns", "series_of", "summarize")


def __getattr__(name: str) -> Any:
    if name in _SUMMARIES:
        value = getattr(importlib.import_module("nnix.query.summaries"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'nnix.query' has no attribute {name!r}")


def open_state(store: Store, state: ExperimentState | None = None,
               loader: Callable[[str], list[Metric]] | None = None) -> ExperimentState:
    """The state of ``store``: from its snapshot where it has one that matches its log, then the log after it (see
    :func:`nnix.query.snapshot.fold_store`); ``state``: fold only what ``store`` holds after it."""
    return _snapshot.fold_store(store, state, loader)


class StoreReader:
    """How the manager opens its state and keeps it (handed to :class:`nnix.core.manager.ExperimentManager` by the
    host): the state of a store, a snapshot of a state, the tuner's records of every trial."""

    history_chunk = HISTORY_CHUNK  # trials whose tuner records the first read of a history takes per loop turn

    def load(self, store: Store) -> ExperimentState:
        return _snapshot.fold_store(store)

    def snapshot(self, state: ExperimentState) -> Snapshot:
        return _snapshot.snapshot_of(state)

    def write(self, store: Store, state: ExperimentState) -> None:
        _snapshot.write_snapshot(store, state)

    def history(self, state: ExperimentState, imports: Callable[[], list[TrialRecord]]) -> TunerHistory:
        """The tuner's history of ``state``, kept per trial (``imports``: the usable imported results)."""
        from nnix.query.history import TunerHistory  # (asyncio: not for a CLI verb that only opens a state)

        return TunerHistory(state, imports, self.history_chunk)


class Query:
    """Reads of one experiment's state. A trial a snapshot holds is built for the reader alone where it is only
    looked at (every trial, a scan for one): a look at 100k trials does not decode them all into the state."""

    __slots__ = ("state",)

    def __init__(self, state: ExperimentState) -> None:
        self.state = state

    def __len__(self) -> int:
        return len(self.state.trials)

    def __contains__(self, trial_id: object) -> bool:
        return trial_id in self.state.trials

    def trial(self, trial_id: str) -> TrialState | None:
        """Trial ``trial_id`` (built into the state: the one a writer changes), None where there is none."""
        return self.state.trials.get(trial_id) if trial_id in self.state.trials else None

    def peek(self, trial_id: str) -> TrialState | None:
        """Trial ``trial_id`` for a reader only (one a snapshot holds is built for the caller and let go)."""
        if trial_id not in self.state.trials:
            return None
        return _snapshot.one_trial_or_known(self.state.trials, trial_id, {})

    def ids(self, start: int = 0) -> list[str]:
        """The trial ids in the order the trials were created, from the ``start``-th on (none read)."""
        trials = self.state.trials
        return list(trials) if not start else list(islice(trials, start, None))

    def trials(self, series: bool = True) -> Iterator[TrialState]:
        """Every trial as listed now, in order, one at a time (``series=False``: a trial read from the snapshot comes
        without its intermediate values)."""
        return _snapshot.each_trial_or_known(self.state.trials, {}, series=series)

    def newest(self, match: Callable[[TrialState], bool]) -> TrialState | None:
        """The last created trial that ``match`` holds for (from the newest back: a trial just created is found at
        once), built into the state; None where none does."""
        trials = self.state.trials
        for tid in reversed(list(trials)):
            t = _snapshot.one_trial_or_known(trials, tid, {}, series=False)
            if match(t):
                return trials[tid]
        return None

    def count(self, *statuses: TrialStatus) -> int:
        """How many trials are in one of ``statuses``."""
        return self.state.count(*statuses)

    def counts(self) -> dict[str, int]:
        """Trials by status value (every status, 0 where none), without reading a trial the fold counted."""
        got = self.state.overview_totals()["counts"]
        return {s.value: int(got.get(s.value, 0)) for s in TrialStatus}

    def best(self) -> TrialState | None:
        """The best trial with a final result (ties: the first created)."""
        return self.state.best_trial()

    def ranked(self, n: int, worst: bool = False) -> list[TrialState]:
        """The ``n`` best trials with a final result, best first (``worst``: the ``n`` worst, worst last)."""
        return self.state.ranked(n, worst)

    def series(self, trial_id: str) -> list[Metric]:
        """Trial ``trial_id``'s whole series (held, or read from the store); KeyError where there is none."""
        return _snapshot.one_trial_or_known(self.state.trials, trial_id, {}).metrics

    def tuner_history(self) -> list[TrialRecord]:
        """The tuner's view of the history: the record of every trial with a parameter id, in order."""
        return [r for _, r in _snapshot.tuner_records(self.state) if r is not None]

    def totals(self) -> dict[str, Any]:
        """The overview's totals (trials by status, the best one, final-result and parameter names seen)."""
        return self.state.overview_totals()
