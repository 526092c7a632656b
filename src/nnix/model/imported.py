"""Prior results fed to an experiment (``nnix experiment import``, NNI's ``import-data`` route): the records'
shape, checked the same way by the CLI's client and the REST layer."""

from __future__ import annotations

from typing import Any

from nnix.errors import NnixError


def validate_import(data: Any) -> list[dict[str, Any]]:
    if not isinstance(data, list):
        raise NnixError("import data must be a JSON list", 'e.g. [{"parameter": {"x": 1}, "value": 0.5}]')
    out = []
    for i, rec in enumerate(data):
        if not isinstance(rec, dict) or not isinstance(rec.get("parameter"), dict) or "value" not in rec:
            raise NnixError(
                f"record [{i}] must be an object with 'parameter' (object) and 'value'", f"got {rec!r}"[:200]
            )
        out.append({"parameter": rec["parameter"], "value": rec["value"]})
    return out
