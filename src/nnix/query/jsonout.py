"""JSON as the read side writes it (strict: no NaN tokens), the kept parts of a JSON array, and the error a query
that cannot be answered raises (REST answers it with 400)."""

from __future__ import annotations

import json
import math
from typing import Any


class QueryError(ValueError):
    """A query the read side refuses (an unknown status, sort field or column, a bad page): its message says which
    parameter and what it takes."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Parts(list[bytes]):
    """The parts of a JSON array, all there (none ``None``): a stream joins them a slice at a time."""


def _finite(obj: Any) -> Any:
    """A copy of ``obj`` with NaN/inf floats replaced by None (browsers' JSON.parse rejects them)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def dumps(obj: Any) -> bytes:
    """Strict JSON (no NaN tokens): non-finite floats become null."""
    exact = dumps_exact(obj)
    return exact if exact is not None else json.dumps(_finite(obj), allow_nan=False, separators=(",", ":")).encode()


def dumps_exact(obj: Any) -> bytes | None:
    """:func:`dumps` of ``obj`` where it has no non-finite float (its JSON then decodes to what it was), else None."""
    try:
        return json.dumps(obj, allow_nan=False, separators=(",", ":")).encode()
    except ValueError:
        return None


def ms(ts: float | None) -> int | None:
    return None if ts is None else int(ts * 1000)
