"""The assessor protocol.

An assessor is called each time a running trial's intermediate results grow (only the contiguous
prefix of sequence numbers counts, as NNI). It sees that trial and every other trial's record
and answers :class:`Decision`. Like tuners, assessors are pure: no I/O, no clock, state
rebuildable from the history they are given. A BAD decision makes the manager stop the trial as
EARLY_STOPPED; the tuner then sees it in its history with that status.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from itertools import chain, islice
from typing import ClassVar, Protocol, overload, runtime_checkable

from nnix.model.args import TunerArgs
from nnix.model.history import History
from nnix.model.trials import Direction, TrialRecord


class Decision(str, Enum):
    GOOD = "Good"
    BAD = "Bad"


@dataclass(frozen=True)
class AssessorContext:
    direction: Direction
    history: Sequence[TrialRecord] = field(default_factory=tuple)  # every trial, incl. the assessed one


@runtime_checkable
class Assessor(Protocol):
    Args: ClassVar[type[TunerArgs]]

    def assess(self, ctx: AssessorContext, trial: TrialRecord) -> Decision:
        """``trial.intermediate`` holds its scalar intermediate results, in sequence order."""
        ...


class AssessedHistory(Sequence[TrialRecord]):
    """``ctx.history`` as the manager hands it to an assessor, made in O(1): the records of ``history`` (the
    tuner's :class:`~nnix.tuners.base.History`: one lineage, with its log of replaced records) but the
    assessed trial's own (at index ``at``, None where it has none), then ``trial`` (the assessed trial, with
    the contiguous run of its results). Equal to the tuple of those records. A built-in assessor follows
    ``history`` from call to call (:class:`CountedRecords`) instead of reading every record each time."""

    __slots__ = ("at", "history", "trial")

    def __init__(self, history: History, at: int | None, trial: TrialRecord) -> None:
        self.history, self.at, self.trial = history, at, trial

    def __len__(self) -> int:
        return len(self.history) + (0 if self.at is None else -1) + 1

    @overload
    def __getitem__(self, index: int) -> TrialRecord: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[TrialRecord, ...]: ...

    def __getitem__(self, index: int | slice) -> TrialRecord | tuple[TrialRecord, ...]:
        if isinstance(index, slice):
            return tuple(self)[index]
        n = len(self)
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError("history index out of range")
        if i == n - 1:
            return self.trial
        return self.history[i if self.at is None or i < self.at else i + 1]

    def __iter__(self) -> Iterator[TrialRecord]:
        h, at = self.history, self.at
        others = iter(h) if at is None else chain(islice(h, at), islice(h, at + 1, None))
        return chain(others, (self.trial,))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (AssessedHistory, tuple)):
            return len(self) == len(other) and tuple(self) == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


class CountedRecords:
    """The records of a history that count for an assessor (:meth:`counts`), followed from call to call: a
    History of the lineage of the previous call is read in O(new + replaced records) where it logs its
    replaced records (the manager's do), else in full. Subclasses keep what they derive in :meth:`added` and
    :meth:`removed` (an O(1) answer per assessment, whatever the length of the history)."""

    def __init__(self) -> None:
        self._lineage: object | None = None
        self._n = 0
        self._mark: int | None = None
        self.records: dict[int, TrialRecord] = {}  # index in the history -> the record counted there
        self.pids: Counter[int] = Counter()  # the parameter ids of the records counted

    def counts(self, record: TrialRecord) -> bool:
        raise NotImplementedError

    def added(self, record: TrialRecord) -> None:
        raise NotImplementedError

    def removed(self, record: TrialRecord) -> None:
        raise NotImplementedError

    def clear(self) -> None:
        """Forget every record (a subclass clears what it derived, then calls this)."""
        self.records.clear()
        self.pids.clear()

    def rebuilt(self, records: Iterable[TrialRecord]) -> None:
        """After :meth:`clear`, add ``records`` (those that count) at once: :meth:`added` one by one, unless a
        subclass does it in bulk."""
        for record in records:
            self.added(record)

    def follow(self, history: History) -> None:
        """Catch up with ``history``."""
        n, n_old = len(history), self._n
        replaced = None
        if history.lineage is self._lineage and n >= n_old and self._mark is not None:
            replaced = history.replaced_since(self._mark)
        records, pids = self.records, self.pids
        self._lineage, self._n, self._mark = history.lineage, n, history.mark
        if replaced is None:  # read in full
            self.clear()
            for i, record in enumerate(history):
                if self.counts(record):
                    records[i] = record
                    pids[record.parameter_id] += 1
            self.rebuilt(records.values())
            return
        indices = chain((i for i in replaced if i < n_old), range(n_old, n))
        for i in indices:
            old = records.pop(i, None)
            if old is not None:
                pids[old.parameter_id] -= 1
                if not pids[old.parameter_id]:
                    del pids[old.parameter_id]
                self.removed(old)
            record = history[i]
            if self.counts(record):
                records[i] = record
                pids[record.parameter_id] += 1
                self.added(record)
