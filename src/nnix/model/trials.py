"""What a tuner or assessor may know about one trial, and which way the objective goes."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, overload

from nnix.model.status import TrialStatus

__all__ = ["Direction", "Params", "Series", "TrialRecord"]

Params = dict[str, Any]


class Direction(str, Enum):
    MAXIMIZE = "maximize"
    MINIMIZE = "minimize"


class Series(Sequence[float]):
    """A trial's scalar intermediate results as a tuner sees them: a read-only sequence of floats, equal to the
    tuple of its values (and hashed like it), held as raw doubles (8 bytes a value, not a float object each:
    100k trials x 100 results is 80 MB, not 320). ``Series(values)`` copies ``values``; :meth:`lazy` reads
    them only when first asked for (from a snapshot in the store)."""

    __slots__ = ("_hi", "_lo", "_values")

    def __init__(self, values: Iterable[float] = ()) -> None:
        self._values: array[float] | Callable[[], array[float]] = array("d", values)
        self._lo, self._hi = 0, len(self._values)

    @classmethod
    def lazy(cls, load: Callable[[], array[float]], lo: int, hi: int) -> Series:
        """Values ``lo:hi`` of the array ``load()`` returns, called when one is first read (``load`` caches its
        array: series of neighbouring trials share it)."""
        self = cls.__new__(cls)
        self._values, self._lo, self._hi = load, lo, hi
        return self

    def _array(self) -> array[float]:
        values = self._values
        if not isinstance(values, array):
            values = self._values = values()
        return values

    def __len__(self) -> int:
        return self._hi - self._lo

    @overload
    def __getitem__(self, index: int) -> float: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[float, ...]: ...

    def __getitem__(self, index: int | slice) -> float | tuple[float, ...]:
        n = self._hi - self._lo
        if isinstance(index, slice):
            a, b, step = index.indices(n)
            return tuple(self._array()[self._lo + a:self._lo + b]) if step == 1 else tuple(self)[index]
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError("Series index out of range")
        return self._array()[self._lo + i]

    def __iter__(self) -> Iterator[float]:
        if self._hi == self._lo:
            return iter(())
        return iter(self._array()[self._lo:self._hi])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Series):
            return len(self) == len(other) and (not len(self) or self._slice() == other._slice())
        if isinstance(other, tuple):
            return tuple(self) == other
        return NotImplemented

    def _slice(self) -> array[float]:
        values = self._array()
        return values if self._lo == 0 and self._hi == len(values) else values[self._lo:self._hi]

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))

    def __reduce__(self) -> tuple[type[Series], tuple[tuple[float, ...]]]:
        return Series, (tuple(self),)


class _Intermediate:
    """``TrialRecord.intermediate``: holds the sequence it is given (the manager gives a :class:`Series`, read
    from the store when first asked for; any sequence will do) and reads as a tuple of it, as it always did:
    a tuner or assessor of one's own may concatenate it (``+ (x,)``), ``json.dumps`` it, compare it with a
    tuple. The tuple is built at each read and not kept (100k trials x 100 results stay raw doubles);
    :attr:`TrialRecord.series` reads the sequence as held, without a copy."""

    def __get__(self, record: TrialRecord | None, owner: type[TrialRecord] | None = None) -> tuple[float, ...]:
        if record is None:
            return ()  # (the field's default)
        held: Sequence[float] = record.__dict__["series"]
        return held if type(held) is tuple else tuple(held)

    def __set__(self, record: TrialRecord, values: Sequence[float]) -> None:
        record.__dict__["series"] = values


@dataclass(frozen=True)
class TrialRecord:
    """What a tuner may know about one trial."""

    parameter_id: int
    params: Params
    status: TrialStatus
    value: float | None = None  # scalar final result (``default`` of a dict), None if none yet
    # its finite scalar intermediate results in channel order: given as any sequence (the manager gives a lazy
    # Series), read as a tuple (see _Intermediate); ``series`` is the sequence as given
    intermediate: _Intermediate = _Intermediate()
    trial_id: str | None = None  # None for imported results

    def __init__(  # (as dataclass writes it, one C call for all fields: records are built by the 100k)
        self, parameter_id: int, params: Params, status: TrialStatus, value: float | None = None,
        intermediate: Sequence[float] = (), trial_id: str | None = None,
    ) -> None:
        self.__dict__.update(parameter_id=parameter_id, params=params, status=status, value=value,
                             series=intermediate, trial_id=trial_id)

    if TYPE_CHECKING:
        @property
        def series(self) -> Sequence[float]:
            """The intermediate results as held (a :class:`Series` from the manager): no copy."""
            ...
