"""Prior results fed to an experiment (``nnix experiment import``, NNI's ``import-data`` route): the records'
shape, checked the same way by the CLI's client, the REST layer and the manager.

A record is ``{"parameter": {...}, "value": ...}``. Its ``value`` is a trial's final result, so it is checked by
the trial channel's schema of a FINAL metric line (:func:`nnix.agent.channel.metric_problem`, handed in by the
caller: this leaf package imports nothing above it), with the experiment's ``nanPolicy``. Its ``parameter`` is a
JSON object of bounded depth whose numbers a tuner can use (each converts to a float). An import that breaks
either is refused whole, naming the record and the field (:func:`validate_import`); a record that breaks them
and is already stored (an import from before these checks) is left out of the tuner's history by the manager
(:func:`record_problem`), never an error of the experiment."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from nnix.errors import NnixError

__all__ = ["EXAMPLE", "MAX_PARAMETER_DEPTH", "MetricSchema", "record_problem", "validate_import"]

EXAMPLE = '[{"parameter": {"x": 1}, "value": 0.5}]'
MAX_PARAMETER_DEPTH = 100  # nesting of a parameter set: a config document's (nnix.limits.MAX_DEPTH; a test checks)


class MetricSchema(Protocol):
    """The trial channel's schema of one metric line (:func:`nnix.agent.channel.metric_problem`)."""

    def __call__(self, record: Any, *, allow_nan: bool = ...) -> str | None: ...


def _short(value: Any) -> str:
    """A value in a message: short, and never the full repr of something huge."""
    if isinstance(value, (Mapping, list)):
        return f"a JSON {'object' if isinstance(value, Mapping) else 'array'}"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value[:41] if isinstance(value, str) else value)
    return text if len(text) <= 40 else text[:37] + "..."


def _path(path: tuple[str | int, ...]) -> str:
    return "parameter" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def _parameter_problem(parameter: Any) -> str | None:
    """Why ``parameter`` cannot be handed to a tuner, or None. Iterative (any depth is safe to look at)."""
    if not isinstance(parameter, Mapping):
        return f"'parameter' must be a JSON object, not {_short(parameter)}"
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(parameter, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, (Mapping, list)):
            if len(path) >= MAX_PARAMETER_DEPTH:
                return f"'{_path(path)}' is nested deeper than {MAX_PARAMETER_DEPTH} levels"
            items: Any = node.items() if isinstance(node, Mapping) else enumerate(node)
            stack.extend((child, (*path, key if isinstance(key, int) else str(key)[:40])) for key, child in items)
        elif isinstance(node, int) and not isinstance(node, bool):
            try:
                float(node)
            except OverflowError:
                return f"'{_path(path)}' is an integer too large for a float ({_short(node)})"
    return None


def record_problem(record: Any, schema: MetricSchema, *, allow_nan: bool) -> str | None:
    """Why one import record cannot be used (the field named), or None: ``value`` checked by ``schema`` as a
    FINAL metric line's value (``allow_nan``: the experiment's ``nanPolicy: allow``), ``parameter`` as above."""
    if not isinstance(record, Mapping):
        return f"must be an object with 'parameter' and 'value', not {_short(record)}"
    problem = _parameter_problem(record.get("parameter"))
    if problem is not None:
        return problem
    if "value" not in record:
        return "has no 'value'"
    return schema({"type": "FINAL", "value": record["value"]}, allow_nan=allow_nan)


def validate_import(data: Any, schema: MetricSchema, *, allow_nan: bool) -> list[dict[str, Any]]:
    """The records to store (``parameter`` and ``value`` of each), or an :class:`~nnix.errors.NnixError` naming
    the first record that breaks :func:`record_problem`, its index and field (and how many more do)."""
    if not isinstance(data, list):
        raise NnixError(f"import data must be a JSON list of records, not {_short(data)}", f"e.g. {EXAMPLE}")
    out: list[dict[str, Any]] = []
    first: str | None = None
    bad = 0
    for i, rec in enumerate(data):
        problem = record_problem(rec, schema, allow_nan=allow_nan)
        if problem is not None:
            bad += 1
            first = first or f"import record [{i}]: {problem}"
        elif not bad:
            out.append({"parameter": rec["parameter"], "value": rec["value"]})
    if first is not None:
        more = f" ({bad - 1} more record{'s' if bad > 2 else ''} cannot be used either)" if bad > 1 else ""
        raise NnixError(f"{first}{more}; nothing was imported",
                        f"each record is {{\"parameter\": {{...}}, \"value\": <a number, or an object with a "
                        f"numeric \"default\">}}, e.g. {EXAMPLE}")
    return out
