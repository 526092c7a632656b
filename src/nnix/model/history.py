"""The history a tuner (and an assessor) reads: the trials created so far, oldest first, as a read-only view of the
manager's list, with its lineage and the log of the records replaced in it (see :mod:`nnix.tuners.base`). Kept
here, beside :class:`~nnix.model.trials.TrialRecord`, so that both tuners and assessors read it without one package
importing the other."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import overload

from nnix.model.trials import TrialRecord

__all__ = ["History", "ReplacedLog"]


class ReplacedLog:
    """An owner's log of the records it replaced in one lineage of its history (their indices, in order): only
    ever appended to, and its oldest entries may be dropped (:meth:`trim`: a consumer that fell that far behind
    reads the history in full). ``len`` counts every entry ever appended."""

    __slots__ = ("_base", "_entries")

    def __init__(self) -> None:
        self._entries: array[int] = array("q")
        self._base = 0  # entries dropped

    def __len__(self) -> int:
        return self._base + len(self._entries)

    def append(self, index: int) -> None:
        self._entries.append(index)

    def kept(self) -> int:
        """How many entries are kept."""
        return len(self._entries)

    def trim(self, keep: int) -> None:
        """Drop all but the newest ``keep`` entries."""
        drop = len(self._entries) - keep
        if drop > 0:
            del self._entries[:drop]
            self._base += drop

    def since(self, start: int, stop: int) -> Sequence[int] | None:
        """Entries ``start:stop`` (counted from the first ever appended); None where some were dropped."""
        if start < self._base:
            return None
        return self._entries[start - self._base:stop - self._base]


class History(Sequence[TrialRecord]):
    """A tuner's history as the manager hands it: a read-only sequence of records, oldest first, that also vouches
    for its past. Every History of one ``lineage`` starts with the parameter ids and parameter sets of every
    earlier History of that lineage (records are only appended, or replaced by a record of the same trial with a
    new status or value); its owner starts a new lineage when that stops holding. A tuner's caches may then
    catch up with a longer History of their lineage in O(new records), without comparing the old ones. Any
    other sequence is a history too, compared record by record.

    ``History(records)`` copies ``records``; the manager hands out :meth:`view` s of its own list instead (no copy:
    an ask costs nothing per record already in the history). A History never changes: it equals the tuple of
    its records, and its slices are tuples.

    An owner that also logs where it replaced a record (``replaced``, see :meth:`view`) lets a cache of
    statuses and values catch up in O(new + replaced records) too: :meth:`replaced_since`."""

    __slots__ = ("__weakref__", "_items", "_mark", "_n", "_replaced", "lineage")

    def __init__(self, records: Iterable[TrialRecord] = (), lineage: object | None = None) -> None:
        self._items: Sequence[TrialRecord] = tuple(records)
        self._n = len(self._items)
        self.lineage: object = object() if lineage is None else lineage
        self._replaced: ReplacedLog | Sequence[int] | None = None
        self._mark = 0

    @classmethod
    def view(
        cls, records: list[TrialRecord], lineage: object, replaced: ReplacedLog | Sequence[int] | None = None,
    ) -> History:
        """The records ``records`` holds now, not copied: its owner may append to it, but must not change
        what is there while the view lives (the manager copies its list first where a view it handed out is
        still referenced: it keeps a weak reference to each).

        ``replaced``, when given, is the owner's log of this lineage: the index of every record it replaced
        (a new status or value of the same trial), in order, only ever appended to (a new lineage gets a new
        log; a :class:`ReplacedLog` may drop its oldest entries). The view notes how long it is now
        (:attr:`mark`)."""
        self = cls.__new__(cls)
        self._items, self._n, self.lineage = records, len(records), lineage
        self._replaced, self._mark = replaced, 0 if replaced is None else len(replaced)
        return self

    @property
    def mark(self) -> int | None:
        """How many replacements this lineage had logged when this view was made (None: no log kept)."""
        return None if self._replaced is None else self._mark

    def replaced_since(self, mark: int) -> Sequence[int] | None:
        """The indices of the records replaced after an earlier view of this lineage whose :attr:`mark` was
        ``mark``, up to this view (repeats possible; None where no log is kept, or no longer that far back).
        Records past the earlier view's length are new to it anyway."""
        log = self._replaced
        if log is None or not 0 <= mark <= self._mark:
            return None
        if isinstance(log, ReplacedLog):
            return log.since(mark, self._mark)
        return log[mark:self._mark]

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> TrialRecord: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[TrialRecord, ...]: ...

    def __getitem__(self, index: int | slice) -> TrialRecord | tuple[TrialRecord, ...]:
        n = self._n
        if isinstance(index, slice):
            a, b, step = index.indices(n)
            items = self._items
            return tuple(items[a:b]) if step == 1 else tuple(map(items.__getitem__, range(a, b, step)))
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError("History index out of range")
        return self._items[i]

    def __iter__(self) -> Iterator[TrialRecord]:
        return islice(self._items, self._n)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (History, tuple)):
            return len(self) == len(other) and tuple(self) == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"History({list(self)!r})"
