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
from nnix.tuners.base import TunerArgs, TunerContext
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


class BatchTuner:
    """Issues the listed parameter sets in order, each as many times as it is listed."""

    Args: ClassVar[type[TunerArgs]] = BatchArgs

    def __init__(self, args: BatchArgs | None = None) -> None:
        self.args = args or BatchArgs()
        self._seen = SeenKeys()

    def suggest(self, ctx: TunerContext, parameter_ids: Sequence[int]) -> list[Params]:
        entries = batch_entries(ctx.space)
        self._seen.update(ctx.history)
        issued: Counter[str] = Counter()
        pending: list[Params] = []
        for entry in entries:
            k = key(entry)
            if issued[k] < self._seen.counts[k]:
                issued[k] += 1
            else:
                pending.append(entry)
        if parameter_ids and not pending:
            raise NoMoreTrialsError(
                f"all {len(entries)} parameter sets of the batch have been issued",
                "add more sets to the batch search space or stop the experiment",
            )
        return [copy.deepcopy(p) for p in pending[: len(parameter_ids)]]
