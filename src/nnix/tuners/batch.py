"""Batch (NNI ``Batch``/``BatchTuner``): run a given list of complete parameter sets, in order.

The search space has exactly one parameter, a ``choice`` whose options are the parameter sets::

    {"combination": {"_type": "choice", "_value": [{"lr": 0.1, "bs": 16}, {"lr": 0.01, "bs": 64}]}}

Each trial receives one option as its *whole* parameter set (not wrapped under the key). What was
already issued is read off the history: an option counts as issued once for each history trial with
exactly those parameters, so a list may repeat a set on purpose, and trials that did not come from the
list (imported or added by hand) do not use up an entry.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from nnix.errors import FieldIssue, NoMoreTrialsError, SearchSpaceError
from nnix.space import Params, SearchSpace, key
from nnix.tuners.base import ArgsTuner, TunerArgs, TunerContext
from nnix.tuners.dedup import SeenKeys

_EXAMPLE = '{"combination": {"_type": "choice", "_value": [{"lr": 0.1, "bs": 16}, {"lr": 0.01, "bs": 64}]}}'


class BatchArgs(TunerArgs):
    """Batch takes no arguments."""


def batch_entries(space: SearchSpace, path: str = "searchSpace") -> list[Params]:
    """The parameter sets listed by a Batch search space; :class:`SearchSpaceError` if it is not one."""
    raw = space.raw
    if len(raw) != 1:
        raise SearchSpaceError(
            [
                FieldIssue(
                    path,
                    f"Batch needs exactly one parameter whose choices are the parameter sets, got {len(raw)}",
                    f"e.g. {_EXAMPLE}",
                )
            ]
        )
    ((name, spec),) = raw.items()
    issues: list[FieldIssue] = []
    if spec["_type"] != "choice":
        issues.append(
            FieldIssue(f"{path}.{name}._type", f"Batch needs a choice, got {spec['_type']!r}", f"e.g. {_EXAMPLE}")
        )
        raise SearchSpaceError(issues)
    entries: list[Any] = list(spec["_value"])
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            issues.append(
                FieldIssue(
                    f"{path}.{name}._value[{i}]",
                    "each Batch choice must be a complete parameter set (an object)",
                    'e.g. {"lr": 0.1, "bs": 16}',
                )
            )
    if issues:
        raise SearchSpaceError(issues)
    return [dict(e) for e in entries]


class BatchTuner(ArgsTuner[BatchArgs]):
    """Issues the listed parameter sets in order, each as many times as it is listed."""

    Args: ClassVar[type[TunerArgs]] = BatchArgs

    def __init__(self, args: BatchArgs | None = None) -> None:
        super().__init__(args)
        self._seen = SeenKeys()
        self._space: SearchSpace | None = None
        self._entries: list[Params] = []
        self._at: dict[str, list[int]] = {}  # key -> the indexes of the entries with that key, in order
        self._reset()

    def _reset(self) -> None:
        self._issued: list[bool] = [False] * len(self._entries)
        self._issued_of: Counter[str] = Counter()  # key -> how many of its entries are issued (its first ones)
        self._first = 0  # every entry before this one is issued

    def suggest(self, ctx: TunerContext, parameter_ids: Sequence[int]) -> list[Params]:
        """O(new history records + proposals) per ask: an entry is issued once for each history record with
        its parameters (the first entries of a repeated set first); the pending ones are proposed in order."""
        if ctx.space is not self._space:
            self._entries = batch_entries(ctx.space)
            self._at = {}
            for i, entry in enumerate(self._entries):
                self._at.setdefault(key(entry), []).append(i)
            self._space, self._seen = ctx.space, SeenKeys()
            self._reset()
        if not self._seen.update(ctx.history):
            self._reset()
        for k in self._seen.added:
            at, n = self._at.get(k), self._issued_of[k]
            if at is not None and n < len(at):
                self._issued[at[n]] = True
                self._issued_of[k] = n + 1
        issued, size = self._issued, len(self._entries)
        while self._first < size and issued[self._first]:
            self._first += 1
        if parameter_ids and self._first == size:
            raise NoMoreTrialsError(
                f"all {size} parameter sets of the batch have been issued",
                "add more sets to the batch search space or stop the experiment",
            )
        pending: list[Params] = []
        i = self._first
        while i < size and len(pending) < len(parameter_ids):
            if not issued[i]:
                pending.append(copy.deepcopy(self._entries[i]))
            i += 1
        return pending
