"""The index columns of a snapshot: every field of a trial's summary, column by column (what a sorted, filtered or
searched list of every trial, and the web UI's charts, read as arrays), and the one function that says what a summary
holds (:func:`row_summary`). Internal to :mod:`nnix.query`: other packages read through :class:`nnix.query.Query`."""

from __future__ import annotations

import json
import math
from array import array
from collections.abc import Iterable, Sequence
from itertools import pairwise, repeat
from operator import gt
from typing import Any

from nnix.core.state import Metric, TrialState, finite_scalar
from nnix.model.status import MetricType, TrialStatus
from nnix.store.base import Part

INDEX_KEYS_MAX = 256  # parameter names at most in a snapshot's index columns (more: the part is not written)
INDEX_STATUSES = tuple(s.value for s in TrialStatus)  # a status code of the index columns: its position here
_STATUS_CODE = {s: i for i, s in enumerate(TrialStatus)}
# the columns (name, kind): d doubles (NaN: none), q 64-bit integers, b bytes (a status code), j a JSON array
_INDEX_FIXED = (("seq", "q"), ("status", "b"), ("started", "d"), ("ended", "d"), ("duration", "d"), ("metric", "d"),
                ("latest", "d"), ("nInter", "q"), ("final", "o"), ("message", "j"), ("hasFinal", "b"), ("source", "o"),
                ("parameterId", "o"), ("created", "d"), ("env", "o"), ("exitCode", "o"), ("warnings", "q"),
                ("shape", "q"))  # (shape: the position of the trial's parameter names among the head's "shapes")
INDEX_FIELDS = _INDEX_FIXED[:-1]  # an index_row's fields but its parameters, in its order (see row_summary)
# o: a JSON value per trial, each decoded alone where a page shows it (offsets of 8 bytes, then the values joined
# by commas: all of them decode at once as an array too); j: one JSON array (or doubles, where all are floats)


def index_row(t: TrialState, metrics: tuple[Metric | None, Metric | None, int] | None = None) -> tuple[Any, ...]:
    """What the index columns hold of trial ``t`` (all a summary of it shows: :func:`row_summary`): its Trial No.,
    status, start and end times, duration (ms precision), finite final and latest intermediate values (NaN: none),
    intermediate count, final result (as reported), message, whether it has a final result, source, parameter id,
    creation time, environment, exit code, warning count, parameters. ``metrics``: its final and latest intermediate
    result and intermediate count where the caller keeps them (else found in its series)."""
    if metrics is not None:
        fm, lm, n_inter = metrics
    elif t.held is None:
        fm, lm, n_inter = t.final_m, t.latest_m, t.n_inter
    else:
        fm = lm = None
        n_inter = 0
        for m in t.held:
            if m.type is MetricType.FINAL:
                fm = m
            else:
                lm, n_inter = m, n_inter + 1
    nan = math.nan
    metric = None if fm is None else finite_scalar(fm.value)
    latest = None if lm is None else finite_scalar(lm.value)
    a, b = t.started_at, t.ended_at
    return (t.sequence_id, _STATUS_CODE[t.status], nan if a is None else a, nan if b is None else b,
            nan if a is None or b is None else round(b - a, 3), nan if metric is None else metric,
            nan if latest is None else latest, n_inter, None if fm is None else fm.value, t.message, fm is not None,
            t.source, t.parameter_id, t.created_at, t.environment_id, t.exit_code, t.warning_count, t.params)


def row_summary(trial_id: str, row: Sequence[Any]) -> dict[str, Any]:
    """A trial's summary (what REST's trial lists and the web UI's table show of it) from its :func:`index_row`,
    made from the trial or read from a snapshot's index columns: the one place that says what a summary holds."""
    (seq, status, started, ended, duration, metric, latest, n_inter, final, message, has_final, source, pid, created,
     env, code, warnings, params) = row
    return {
        "id": trial_id,
        "seq": seq,
        "status": INDEX_STATUSES[status],
        "source": source,
        "parameterId": pid,
        "params": params,
        "created": None if created is None else int(created * 1000),
        "start": None if started != started else int(started * 1000),
        "end": None if ended != ended else int(ended * 1000),
        "duration": None if duration != duration else duration,
        "final": final,
        "hasFinal": bool(has_final),
        "metric": None if metric != metric else metric,
        "latest": None if latest != latest else latest,
        "nInter": n_inter,
        "message": message,
        "env": env,
        "exitCode": code,
        "warnings": warnings,
    }


class IndexColumns:
    """A snapshot's index columns (see :func:`encode_columns`), each decoded when first asked for (and kept).
    Raises :class:`SnapshotDamaged` (a piece not matching its checksum) or ValueError (not as the head says)."""

    __slots__ = ("_at", "_kept", "n", "param_keys", "part", "shapes")

    def __init__(self, part: Part, n: int) -> None:
        size = int.from_bytes(bytes(part[0:8]), "little")
        if not 2 <= size <= len(part) - 8:
            raise ValueError(f"index columns head of {size} bytes in a part of {len(part)}")
        head = json.loads(bytes(part[8:8 + size]))
        if not isinstance(head, dict) or head.get("n") != n or not isinstance(head.get("sections"), list) \
                or not isinstance(head.get("paramKeys"), list):
            raise ValueError(f"index columns of {head.get('n') if isinstance(head, dict) else '?'} trials, not {n}")
        self.part, self.n, self.param_keys = part, n, [str(k) for k in head["paramKeys"]]
        shapes = head.get("shapes")
        if not isinstance(shapes, list) or not all(isinstance(x, list) and all(isinstance(k, str) and k in
                                                                                self.param_keys for k in x)
                                                    for x in shapes):
            raise ValueError("index columns' parameter shapes not as their head says")
        self.shapes: list[tuple[str, ...]] = [tuple(x) for x in shapes]
        self._at: dict[str, tuple[str, int, int]] = {}
        pos = 8 + size
        for name, kind, length in head["sections"]:
            if kind not in ("d", "q", "b", "j", "o") or not isinstance(length, int) or length < 0:
                raise ValueError(f"index column {name!r} of kind {kind!r} and size {length!r}")
            self._at[str(name)] = (kind, pos, pos + length)
            pos += length
        if pos != len(part) or any(name not in self._at or self._at[name][0] not in ((kind, "d") if kind == "j"
                                                                                     else (kind,))
                                   for name, kind in _INDEX_FIXED) \
                or any(f"param:{k}" not in self._at for k in self.param_keys):
            raise ValueError("index columns not as their head says")
        self._kept: dict[str, Any] = {}

    def column(self, name: str) -> Any:
        """Column ``name`` (an array, or a list for a JSON one) of ``n`` values; a parameter not among
        ``param_keys``: None (no trial of the snapshot has it)."""
        hit = self._kept.get(name)
        if hit is not None:
            return hit
        where = self._at.get(name)
        if where is None:
            if name.startswith("param:"):
                return None
            raise KeyError(name)
        kind, a, b = where
        kept = self._kept.get(f"items:{name}")
        raw = b"" if kept is not None else bytes(self.part[a:b])
        if kind == "o":
            _, text = kept if kept is not None else self._items(name, raw)
            hit = json.loads(b"[" + text + b"]")
            if not isinstance(hit, list):
                raise ValueError(f"index column {name!r} is not an array")
        elif kind == "j":
            hit = json.loads(raw)
            if not isinstance(hit, list):
                raise ValueError(f"index column {name!r} is not an array")
        else:
            hit = array(kind)
            hit.frombytes(raw)
        if len(hit) != self.n:
            raise ValueError(f"index column {name!r} of {len(hit)} values, not {self.n}")
        if name == "shape" and self.n and not -1 <= min(hit) <= max(hit) < len(self.shapes):
            raise ValueError("index column 'shape' not among the head's shapes")
        self._kept[name] = hit
        return hit

    def _items(self, name: str, raw: bytes) -> tuple[array[int], bytes]:
        """The offsets and text of the ``o`` column ``name`` (its bytes ``raw``), checked."""
        n = self.n
        if len(raw) < 8 * (n + 1):
            raise ValueError(f"index column {name!r} of {len(raw)} bytes for {n} offsets")
        offsets = array("q")
        offsets.frombytes(raw[:8 * (n + 1)])
        text = raw[8 * (n + 1):]
        if offsets[0] != 0 or offsets[n] != len(text) + 1 or any(map(gt, offsets, offsets[1:])):
            raise ValueError(f"index column {name!r}: offsets not as its values")
        self._kept[f"items:{name}"] = (offsets, text)
        return offsets, text

    def item(self, name: str, i: int) -> Any:
        """Trial ``i``'s value of column ``name`` (an ``o`` column: only that value decoded)."""
        got = self._kept.get(f"items:{name}")
        if got is None:
            return self.column(name)[i]
        offsets, text = got
        return json.loads(text[offsets[i]:offsets[i + 1] - 1])

    def items(self, name: str) -> list[bytes]:
        """The ``o`` column ``name`` as each trial's JSON bytes."""
        if f"items:{name}" not in self._kept:
            self.column(name)
        offsets, text = self._kept[f"items:{name}"]
        return [text[a:b - 1] for a, b in pairwise(offsets)]

    def kind(self, name: str) -> str | None:
        """How column ``name`` is kept: ``d`` doubles (a JSON column: its values all floats, NaN for None), ``q``,
        ``b`` or ``j`` (JSON); None: no such column."""
        where = self._at.get(name)
        return None if where is None else where[0]

    def values(self, name: str) -> list[Any] | None:
        """Column ``name`` of a JSON field (``final``, ``message``, ``param:NAME``) as its values (None: a parameter
        no trial of the snapshot has)."""
        got = self.column(name)
        if got is None or isinstance(got, list):
            return got
        return [None if v != v else v for v in got]

    def load(self) -> None:
        """Every column read (and checked) now (an ``o`` column's values are decoded when asked for)."""
        for name, kind in _INDEX_FIXED:
            if kind == "o" and f"items:{name}" not in self._kept:
                _, a, b = self._at[name]
                self._items(name, bytes(self.part[a:b]))
            elif kind != "o":
                self.column(name)
        for k in self.param_keys:
            self.column(f"param:{k}")


def _json_column(values: list[Any]) -> tuple[str, bytes]:
    """A JSON field's column: doubles where its values are all floats (none NaN) or None (read at once), else JSON."""
    if all(v is None or (type(v) is float and v == v) for v in values):
        return "d", array("d", [math.nan if v is None else v for v in values]).tobytes()
    return "j", json.dumps(values, separators=(",", ":")).encode()


def encode_columns(segments: Iterable[tuple[IndexColumns, int, int] | tuple[Any, ...]]) -> bytes | None:
    """The index columns part of the trials in ``segments`` (rows of :func:`index_row`, or runs ``lo:hi`` of an
    older snapshot's columns): a JSON head (trial count, parameter names, each column's kind and size), then the
    columns; None where the parameters have more than INDEX_KEYS_MAX names."""
    fixed = INDEX_FIELDS  # (the shape is made here)
    cols: list[Any] = [array(kind) if kind not in ("j", "o") else [] for _, kind in fixed]  # (o: each one's JSON)
    pcols: dict[str, list[Any]] = {}  # (in the order the names first appear; a new one: None for the rows before)
    shapes: dict[tuple[str, ...], int] = {}
    shape = array("q")
    n = 0
    for seg in segments:  # (one pass: 100k rows are not held at once)
        names = seg[0].param_keys if isinstance(seg[0], IndexColumns) else seg[-1] if isinstance(seg[-1], dict) else ()
        for k in names:
            if k not in pcols and isinstance(k, str):
                if len(pcols) == INDEX_KEYS_MAX:
                    return None
                pcols[k] = [None] * n
        if isinstance(seg[0], IndexColumns):
            old, lo, hi = seg[0], seg[1], seg[2]
            for (name, kind), col in zip(fixed, cols, strict=True):
                got = old.items(name) if kind == "o" else old.values(name) if kind == "j" else old.column(name)
                col.extend(got[lo:hi])  # type: ignore[index]
            for k, pcol in pcols.items():
                got = old.values(f"param:{k}")
                pcol.extend(got[lo:hi] if got is not None else repeat(None, hi - lo))
            ids = [shapes.setdefault(x, len(shapes)) for x in old.shapes]
            shape.extend(-1 if j < 0 else ids[j] for j in old.column("shape")[lo:hi])
            n += hi - lo
            continue
        for value, col, (_, kind) in zip(seg[:-1], cols, fixed, strict=True):
            col.append(json.dumps(value, separators=(",", ":")).encode() if kind == "o" else value)
        params = seg[-1]
        for k, pcol in pcols.items():
            pcol.append(params.get(k) if isinstance(params, dict) else None)
        shape.append(shapes.setdefault(tuple(params), len(shapes)) if isinstance(params, dict)
                     and all(type(k) is str for k in params) else -1)
        n += 1
    sections: list[tuple[str, str, bytes]] = []
    for (name, kind), col in zip(fixed, cols, strict=True):
        if kind == "o":
            offsets = array("q", [0])
            for x in col:
                offsets.append(offsets[-1] + len(x) + 1)
            sections.append((name, "o", offsets.tobytes() + b",".join(col)))
        else:
            sections.append((name, *_json_column(col)) if kind == "j" else (name, kind, col.tobytes()))
    sections.append(("shape", "q", shape.tobytes()))
    for k, pcol in pcols.items():
        sections.append((f"param:{k}", *_json_column(pcol)))
    head = json.dumps({"n": n, "paramKeys": list(pcols), "shapes": [list(x) for x in shapes],
                       "sections": [[a, b, len(c)] for a, b, c in sections]}, separators=(",", ":")).encode()
    return b"".join([len(head).to_bytes(8, "little"), head, *(c for _, _, c in sections)])
