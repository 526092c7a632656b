"""Deduplication for model-based and evolutionary tuners (NNI's ``Deduplicator`` semantics).

When every top-level parameter of the space is categorical or quantised, two proposals may
coincide; then a proposal is checked against every point of the history (whatever its status) and
the proposals made earlier in the same batch. A tuner first retries its own method a few times
(:meth:`Deduplicator.is_new`), and when that keeps repeating, takes the first grid point not yet used
(:meth:`Deduplicator.next_unseen`); when none is left the space is exhausted. With a continuous
top-level parameter, coincidences are taken as impossible and nothing is checked (as NNI).
:meth:`Deduplicator.first_new` is that whole sequence, for every tuner.

Also home of the helpers: :class:`SeenKeys` (the keys of a history, kept up to date incrementally),
:class:`GridCursor` (the first grid point not yet seen) and :class:`GridIndex` (an all-categorical
grid by index, never a list).

A cache only: the answers are a pure function of the history handed to :meth:`Deduplicator.begin`.
"""

from __future__ import annotations

import copy
import math
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Container, Iterator, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, cast

from nnix.errors import NoMoreTrialsError
from nnix.model.trials import TrialRecord
from nnix.space import Key, Param, Params, SearchSpace, duplicates_possible, grid, key, sample
from nnix.tuners.base import History, TunerContext, rng_for

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "RANDOM_DRAWS",
    "REDRAWS",
    "Deduplicator",
    "GridCursor",
    "GridIndex",
    "SeenKeys",
    "exhausted",
    "extends_records",
]

REDRAWS = 3  # extra draws of a tuner's own method (fresh random streams) when a discrete space repeats a point
RANDOM_DRAWS = 8  # then random draws, then the grid


_ID_PARAMS = attrgetter("parameter_id", "params")


def extends_records(old: tuple[TrialRecord, ...], history: Sequence[TrialRecord]) -> bool:
    """Whether ``history`` starts with ``old`` (the same records, or equal ones): one pass at C speed.

    Records are frozen, so equal records carry the same facts. The same objects (a caller that keeps
    its records) compare by identity; rebuilt ones field by field.
    """
    n = len(old)
    if len(history) < n:
        return False
    if n == 0:
        return True
    prefix = history[:n] if isinstance(history, tuple) else tuple(history[:n])
    return prefix == old


def same_params(old: tuple[TrialRecord, ...], history: Sequence[TrialRecord]) -> bool:
    """Whether ``history`` starts with records of the same parameter ids and parameter sets as ``old``
    (statuses and values may have changed): the records themselves first, then their (id, params)."""
    n = len(old)
    if len(history) < n:
        return False
    if n == 0 or (history[n - 1] is old[-1] and extends_records(old, history)):
        return True
    return list(map(_ID_PARAMS, history[:n])) == list(map(_ID_PARAMS, old))


class SeenKeys:
    """How often each :func:`~nnix.space.key` occurs in a history, maintained incrementally.

    A cache only: :meth:`update` gives the same counts as a fresh instance would, whatever history
    it is handed; it just does less work when the history merely grew since the last call: a key per
    new record, and one C-level comparison of the old prefix.
    """

    def __init__(self) -> None:
        self._records: tuple[TrialRecord, ...] | None = ()  # None: not kept (a History was counted)
        self._n = 0
        self._lineage: object | None = None
        self.counts: Counter[str] = Counter()
        self.added: list[str] = []  # the keys the last update counted, in history order

    def update(self, history: Sequence[TrialRecord]) -> bool:
        """Catch up with ``history``. True if it extends the previous one (the counts only grew).

        A :class:`~nnix.tuners.base.History` is taken at its word: a longer one of the same lineage costs
        O(new records), and nothing of it is kept (neither compared, nor copied, nor freed here); a new lineage
        is counted afresh. Another sequence is compared with the previous one (one C-level pass)."""
        n_old = self._n
        if isinstance(history, History):
            extends = history.lineage is self._lineage and len(history) >= n_old
            self._lineage, records = history.lineage, None
        else:
            extends = self._records is not None and same_params(self._records, history)
            self._lineage, records = None, history if isinstance(history, tuple) else tuple(history)
        if not extends:
            self.counts = Counter()
            n_old = 0
        counts = self.counts
        self.added = [key(record.params) for record in (history[n_old:] if n_old else history)]
        for k in self.added:
            counts[k] += 1
        self._records, self._n = records, len(history)
        return extends

    def __contains__(self, k: object) -> bool:
        return k in self.counts


class GridIndex:
    """The grid of a space whose parameters are all categorical (choice, randint, nested choice), as an
    index: point ``i`` of :func:`nnix.space.grid`'s order, computed by mixed radix, never a list.

    Such a grid is one epoch: the cartesian product in lexicographic order (first parameter slowest,
    options in order), a nested choice contributing, per option, the product of that option's
    sub-parameters. :meth:`of` gives None for other spaces (numeric parameters are refined in epochs)
    and for choices with repeated options (the grid skips repeats); :func:`nnix.space.grid` walks those.
    """

    def __init__(self, space: SearchSpace) -> None:
        self._size: dict[Key, int] = {}
        self._starts: dict[Key, list[int]] = {}  # nested choice: where each option's points start
        self._levels: dict[Key, tuple[tuple[Param, int, int], ...]] = {}  # (param, size, stride) per level
        self._top = self._level(space.params, ())
        self.size = math.prod(size for _, size, _ in self._levels[()]) if space.params else 1

    @classmethod
    def of(cls, space: SearchSpace) -> GridIndex | None:
        for p in space.parameters:
            if not p.is_categorical:
                return None
            if p.type == "choice":
                options = [p.choices[i] if p.nested else p.choice_value(i) for i in range(len(p.choices))]
                if len({key({"v": v}) for v in options}) < len(options):
                    return None
        return cls(space)

    def _count(self, p: Param) -> int:
        if not p.nested:
            return len(p.choices) if p.type == "choice" else int(cast(float, p.high)) - int(cast(float, p.low))
        starts = [0]
        for b, branch in enumerate(p.branches):
            self._level(branch, (*p.key, b))
            starts.append(starts[-1] + math.prod(size for _, size, _ in self._levels[(*p.key, b)]))
        self._starts[p.key] = starts
        return starts[-1]

    def _level(self, params: tuple[Param, ...], level: Key) -> Key:
        sizes = [self._count(p) for p in params]
        strides = [math.prod(sizes[j + 1 :]) for j in range(len(sizes))]
        self._levels[level] = tuple(zip(params, sizes, strides, strict=True))
        return level

    def __len__(self) -> int:
        return self.size

    def point(self, i: int) -> Params:
        """Point ``i`` (0 <= i < len) of the grid."""
        if not 0 <= i < self.size:
            raise IndexError(i)
        return self._point(self._top, i)

    def _point(self, level: Key, i: int) -> Params:
        out: Params = {}
        for p, size, stride in self._levels[level]:
            digit = (i // stride) % size
            if p.nested:
                starts = self._starts[p.key]
                b = bisect_right(starts, digit) - 1
                out[p.name] = {"_name": p.choices[b], **self._point((*p.key, b), digit - starts[b])}
            elif p.type == "choice":
                out[p.name] = p.choice_value(digit)
            else:
                out[p.name] = int(cast(float, p.low)) + digit
        return out


class GridCursor:
    """The first points of ``grid(space)`` not yet seen, without re-walking the grid every time.

    Correct as long as the ``seen`` set handed to :meth:`next_unseen` only grows between calls; call
    :meth:`reset` when it did not (see :meth:`SeenKeys.update`).
    """

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self._index = GridIndex.of(space)
        self.reset()

    def reset(self) -> None:
        index = self._index
        self._points: Iterator[Params] = (
            grid(self.space) if index is None else (index.point(i) for i in range(len(index)))
        )
        # points taken from the iterator that were not seen when taken, in grid order
        self._pending: list[tuple[str, Params]] = []

    def next_unseen(self, seen: Container[str], taken: Container[str] = ()) -> tuple[str, Params] | None:
        """``(key, point)`` of the first grid point in neither ``seen`` nor ``taken``; None if none is left.

        ``seen`` must only grow between calls; ``taken`` (e.g. the keys proposed earlier in the same
        batch) may be anything.
        """
        self._pending = [(k, p) for k, p in self._pending if k not in seen]
        for k, p in self._pending:
            if k not in taken:
                return k, p
        for p in self._points:
            k = key(p)
            if k in seen:
                continue
            self._pending.append((k, p))
            if k not in taken:
                return k, p
        return None


def exhausted() -> NoMoreTrialsError:
    """The error of a tuner whose discrete search space has no new point left."""
    return NoMoreTrialsError(
        "search space fully explored",
        "every point of this discrete search space has been tried; widen the search space or stop the experiment",
    )


class Deduplicator:
    """The keys seen in a history plus those taken in the current batch, and a grid to fall back on."""

    def __init__(self) -> None:
        self._seen = SeenKeys()
        self._cursor: GridCursor | None = None
        self._taken: set[str] = set()
        self._space: SearchSpace | None = None
        self._possible = False
        self.active = False

    def begin(self, ctx: TunerContext, always: bool = False) -> None:
        """Start a batch for ``ctx``: catch up with its history, forget the previous batch. ``always``:
        check even where coincidences are taken as impossible (grid search)."""
        space = ctx.space
        self._taken = set()
        if self._space is not space:
            self._space = space
            self._possible = space.is_empty or duplicates_possible(space)
        self.active = always or self._possible
        if not self.active:
            return
        extends = self._seen.update(ctx.history)
        if self._cursor is None or (self._cursor.space is not space and self._cursor.space != space):
            self._cursor = GridCursor(space)
        elif not extends:
            self._cursor.reset()

    def is_new(self, params: Params) -> bool:
        """Whether ``params`` is neither in the history nor taken in this batch (always, if inactive)."""
        if not self.active:
            return True
        k = key(params)
        return k not in self._seen and k not in self._taken

    def take(self, params: Params) -> None:
        """Record ``params`` as proposed in this batch."""
        if self.active:
            self._taken.add(key(params))

    def first_new(
        self,
        space: SearchSpace,
        seed: int,
        pid: int,
        draw: Callable[[np.random.Generator], Params] | None = None,
        redraws: int = REDRAWS,
    ) -> Params | None:
        """The first new proposal for ``pid`` among: ``draw`` from streams ``0 .. redraws`` of
        ``rng_for(seed, pid, stream)`` (when given), then ``RANDOM_DRAWS`` random points from the next
        stream, then the first grid point not yet used (None when none is left)."""
        stream = 0
        if draw is not None:
            for stream in range(1 + redraws):
                params = draw(rng_for(seed, pid, stream))
                if self.is_new(params):
                    return params
            stream = 1 + redraws
        rng = rng_for(seed, pid, stream)
        for _ in range(RANDOM_DRAWS):
            params = sample(space, rng)
            if self.is_new(params):
                return params
        return self.next_unseen()

    def accept(self, out: list[Params], params: Params | None) -> bool:
        """Add ``params`` to the batch ``out`` (and take it). None means the space is exhausted: False,
        to end the batch, or :class:`~nnix.errors.NoMoreTrialsError` when the batch is still empty."""
        if params is None:
            if not out:
                raise exhausted()
            return False
        self.take(params)
        out.append(params)
        return True

    def next_unseen(self) -> Params | None:
        """The first grid point neither seen nor taken (not yet taken: call :meth:`take`); None if none."""
        if self._cursor is None:
            return None
        found = self._cursor.next_unseen(self._seen, self._taken)
        return None if found is None else copy.deepcopy(found[1])
