"""The tuner's history as the manager hands it out: kept per trial and rebuilt only for the trials an event touched
since the last ask (every change of state goes through the manager's ``record``, which says which: :meth:`touched`),
so that an ask costs O(changed), not O(history).

Read from the state at the first ask (None until then), without building the trials a snapshot holds (see
:func:`nnix.query.snapshot.tuner_records`). The list handed to the tuner is kept too (a record replaced in place, a new
trial appended), as one History lineage while the parameter sets already in it stay where they are; the tuner gets a
view of it (no copy), and the list is copied before a record is replaced while a view handed out still lives (a tuner
that keeps one, or runs in a thread meanwhile, sees it unchanged)."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from itertools import islice

from nnix.core.state import ExperimentState
from nnix.model.history import History, ReplacedLog
from nnix.model.trials import TrialRecord
from nnix.query.snapshot import HISTORY_CHUNK, record_of, tuner_records


class TunerHistory:
    """The tuner's history of ``state``: imported results first (``imports()``: the usable ones as tuner records, with
    negative parameter ids), then one record per trial with a parameter id, in the order the trials were created."""

    def __init__(self, state: ExperimentState, imports: Callable[[], list[TrialRecord]],
                 chunk: int = HISTORY_CHUNK) -> None:
        self.state = state
        self.imports = imports
        self.chunk = chunk  # trials whose records the first read takes per loop turn
        self.records: dict[str, TrialRecord | None] | None = None  # every trial's record, once read
        self._stale: dict[str, None] = {}
        self._imported: list[TrialRecord] | None = None
        self._list: list[TrialRecord] = []
        self.at: dict[str, int] = {}  # trial id -> its record's index in the list
        self._lineage = object()
        self._replaced = ReplacedLog()  # where the list had a record replaced, this lineage (see History)
        self._views: list[weakref.ref[History]] = []  # the views of the list handed out
        self.reading = False  # the first read of every trial's record is under way (see read)

    @property
    def whole(self) -> bool:
        """Whether every trial's record has been read."""
        return self.records is not None

    def touched(self, trial_id: str) -> None:
        """An event about ``trial_id`` was folded: its record is read again at the next ask."""
        if self.records is not None or self.reading:
            self._stale[trial_id] = None

    def imported(self) -> None:
        """Results were imported: the list is made anew at the next ask."""
        self._imported = None

    def records_list(self) -> list[TrialRecord]:
        """The history now (the keeper's own list: callers copy it, never change it)."""
        rebuild = self._imported is None
        if rebuild:
            self._imported = self.imports()
        if self.records is None:  # every trial, at once (see read)
            self.records = dict(tuner_records(self.state))
            self._stale.clear()
            rebuild = True
        if self._stale:
            trials, records = self.state.trials, self.records
            history, at = self._list, self.at
            for trial_id in self._stale:  # in event order: a new trial is the state's newest
                t = trials.get(trial_id)
                new = None if t is None else record_of(t)
                known, old = trial_id in records, records.get(trial_id)
                records[trial_id] = new
                if rebuild:
                    continue
                i = at.get(trial_id)
                if new is None:
                    rebuild = i is not None  # a record gone
                elif i is None:
                    if known:  # a known trial got its record: its place is not the end
                        rebuild = True
                    else:
                        at[trial_id] = len(history)
                        history.append(new)
                elif old is not None and old.parameter_id == new.parameter_id and (
                        old.params is new.params or old.params == new.params):
                    if self._views and any(view() is not None for view in self._views):
                        history = self._list = list(history)  # (a view handed out stays as it was)
                    self._views = []
                    history[i] = new
                    self._replaced.append(i)
                    if self._replaced.kept() > 2 * len(history) + 4096:  # (bounded: a tuner behind reads it all)
                        self._replaced.trim(len(history) + 2048)
                else:
                    rebuild = True
            self._stale.clear()
        if rebuild:  # imported results arrived, or a trial's parameters changed: a new lineage
            assert self._imported is not None
            self._list = list(self._imported)
            self.at = {}
            for trial_id, record in self.records.items():
                if record is not None:
                    self.at[trial_id] = len(self._list)
                    self._list.append(record)
            self._lineage, self._replaced = object(), ReplacedLog()
            self._views = []
        return self._list

    def view(self) -> History:
        """The history as handed to the tuner: a view of the kept list (O(1))."""
        history = self.records_list()
        view = History.view(history, self._lineage, self._replaced)
        self._views = [ref for ref in self._views if ref() is not None]
        self._views.append(weakref.ref(view))
        return view

    async def read(self) -> None:
        """The first read of every trial's record, a chunk per loop turn: a resumed manager of 100k trials answers
        REST meanwhile. The trials an event touches meanwhile are noted (and read again by :meth:`records_list`);
        where :meth:`records_list` read them all itself meanwhile, this read is dropped."""
        if self.records is not None:
            return
        self.reading = True
        try:
            got: dict[str, TrialRecord | None] = {}
            them = tuner_records(self.state)
            while chunk := list(islice(them, self.chunk)):
                got.update(chunk)
                await asyncio.sleep(0)
                if self.records is not None:
                    return
            self.records = got
            self._imported = None  # (the list is made anew)
        finally:
            self.reading = False
