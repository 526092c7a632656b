"""The snapshot codec and lazy trial access: a state written as a checked snapshot of the store (a small body checked
whole, the trials' records and intermediate values in parts read a piece at a time, the index columns), read back
with every trial id at once and each trial built when first read (:class:`TrialTable`), and the tuner's records read
from it a chunk at a time. Internal to :mod:`nnix.query`: other packages read through :class:`nnix.query.Query`
(and the manager through :class:`nnix.query.StoreReader`, handed to it by the host)."""

from __future__ import annotations

import json
import logging
import math
import threading
from array import array
from collections.abc import Callable, ItemsView, Iterable, Iterator, Mapping, Sequence, ValuesView
from dataclasses import fields
from itertools import compress, repeat
from operator import is_not
from typing import Any, TypeVar

from nnix.core.state import (
    SERIES_KINDS,
    TRIAL_KINDS,
    ExperimentState,
    Metric,
    TrialState,
    limits_of,
    series,
    totals_ok,
)
from nnix.model.status import CancelReason, ExperimentStatus, MetricType, TrialStatus
from nnix.model.trials import Series, TrialRecord
from nnix.query.columns import INDEX_KEYS_MAX, IndexColumns, encode_columns, index_row
from nnix.store.base import Part, Snapshot, SnapshotDamaged, Store, Stored

log = logging.getLogger(__name__)
_T = TypeVar("_T")
_METRIC_TYPES = {m.value: m for m in MetricType}

# of the format below: a snapshot in another one is rebuilt from the log (version 1 was one JSON document of every
# trial, decoded at once; 2 one body checked whole, its records and intermediate values within)
SNAPSHOT_VERSION = 3
_EXPERIMENT_SKIP = ("trials", "loader", "status")
_STATUSES = {s.value: s for s in TrialStatus}


def _metric_out(m: Metric | None) -> list[Any] | None:
    return None if m is None else [m.type.value, m.sequence, m.value, m.ts, m.index]


def _metric_in(x: list[Any] | None) -> Metric | None:
    return None if x is None else Metric(_METRIC_TYPES[x[0]], x[1], x[2], x[3], x[4])


def _record(t: TrialState) -> bytes:
    """One trial of a snapshot (all but its intermediate values), as JSON."""
    return json.dumps([
        t.trial_id, t.sequence_id, t.parameter_id, t.params, t.source, t.created_at, t.status.value,
        t.started_at, t.ended_at, t.environment_id, t.output_dir, t.pid, t.pid_start,
        None if t.gpus is None else list(t.gpus), t.exit_code, t.message,
        None if t.cancel_reason is None else t.cancel_reason.value,
        None if t.held is None or t.status.is_terminal else [_metric_out(m) for m in t.held],
        t.last_index, t.warnings, t.warning_count, _metric_out(t.final_m), _metric_out(t.latest_m),
        t.n_metrics, t.n_inter,
    ], separators=(",", ":")).encode()


def _trial(rec: list[Any], values: array[float], loader: Callable[[str], list[Metric]] | None) -> TrialState:
    (tid, seq_id, pid_, params, source, created, status, started, ended, env, out, pid, pid_start, gpus,
     code, message, cancel, held, last_index, warnings, warning_count, final_m, latest_m, n_metrics, n_inter) = rec
    return TrialState(
        tid, seq_id, pid_, params, source, created, _STATUSES[status], started, ended, env, out, pid, pid_start,
        None if gpus is None else tuple(gpus), code, message, None if cancel is None else CancelReason(cancel),
        None if held is None else [Metric(_METRIC_TYPES[x[0]], x[1], x[2], x[3], x[4]) for x in held],
        last_index, warnings, warning_count, _metric_in(final_m), _metric_in(latest_m), n_metrics, n_inter,
        values, loader)


ROWS_CHUNK = 2048  # records of a snapshot decoded at once where every trial's index row is made from them
EACH_CHUNK = 256  # records decoded at once for a reader of every trial (each_trial: as fast as 2048, less held)


def _whole(part: Part) -> bytes:
    return bytes(part[0:len(part)])


class _Source:
    """The undecoded trials of a snapshot: ``records`` is a JSON array of them, record ``i`` its bytes
    ``1 + starts[i]:starts[i + 1]`` (then a comma or the closing bracket); its intermediate values are
    ``values[at[i]:at[i + 1]]`` (``values``: raw doubles, 8 bytes each). ``records`` and ``values`` are the
    snapshot's parts: a store may read them a piece at a time, checking each piece then; a trial whose
    piece is damaged (:class:`SnapshotDamaged`) is rebuilt from its events in the log (``trial_log``)."""

    __slots__ = ("_columns", "_columns_lock", "at", "columns", "encoded", "finals", "ids", "left", "loader", "records",
                 "starts", "trial_log", "values")

    def __init__(self, ids: list[str], records: Part, starts: array[int], finals: array[float], at: array[int],
                 values: Part, loader: Callable[[str], list[Metric]] | None,
                 encoded: dict[str, tuple[bytes, float]], trial_log: Callable[[str], list[Stored]] | None) -> None:
        self.ids, self.records, self.starts, self.finals = ids, records, starts, finals
        self.at, self.values = at, values
        self.loader, self.trial_log = loader, trial_log
        self.encoded = encoded  # (the state's: an ended trial built keeps its record as encoded)
        self.left = len(finals)  # trials not built yet
        self.columns: Part | None = None  # the index columns part, where the snapshot has one
        self._columns: IndexColumns | bool | None = None  # (decoded; False: too many parameter names)
        self._columns_lock = threading.Lock()  # (a warm-up thread reads them while a request may ask)

    def index_columns(self, whole: bool = False) -> IndexColumns | None:
        """The snapshot's index columns (:class:`IndexColumns`); where it has none, or they do not match, made once
        from the trials' records instead (never trusted: a damaged record is rebuilt from the log); None where the
        parameters have more than INDEX_KEYS_MAX names. ``whole``: every column read and checked now (a later read
        of a part the store hands back then cannot fail)."""
        with self._columns_lock:
            return self._index_columns(whole)

    def _index_columns(self, whole: bool) -> IndexColumns | None:
        got = self._columns
        if got is False:
            return None
        try:
            if not isinstance(got, IndexColumns):
                if self.columns is None:
                    raise ValueError("none in the snapshot")
                got = self._columns = IndexColumns(self.columns, len(self.finals))
            if whole:
                got.load()
            return got
        except (SnapshotDamaged, ValueError, TypeError, KeyError) as e:
            if self.columns is not None:
                log.warning("the snapshot's index columns do not match (%s): made again from its records", e)
        made = encode_columns(self.record_rows())
        if made is None:
            self._columns = False
            return None
        self.columns = made
        got = self._columns = IndexColumns(made, len(self.finals))
        return got

    def record_rows(self) -> Iterator[tuple[Any, ...]]:
        """Every trial's :func:`index_row`, from the records (a parse per ROWS_CHUNK records, not of all at once:
        100k decoded records would take ~200 MB; a damaged one from its events)."""
        empty = array("d")
        n = len(self.finals)
        for lo in range(0, n, ROWS_CHUNK):
            hi = min(n, lo + ROWS_CHUNK)
            try:
                recs: list[Any] | None = json.loads(b"[" + bytes(self.records[1 + self.starts[lo]:self.starts[hi]])
                                                    + b"]")
            except (SnapshotDamaged, ValueError):
                recs = None
            if recs is not None and len(recs) != hi - lo:
                recs = None
            for i in range(lo, hi):
                if recs is not None:
                    try:
                        yield index_row(_trial(recs[i - lo], empty, None))
                        continue
                    except (ValueError, TypeError, KeyError, IndexError):
                        pass
                yield index_row(self.build(i, keep=False))

    def records_of(self, lo: int, hi: int) -> list[Any] | None:
        """The decoded records of trials ``lo:hi`` (one parse); None where their piece does not read or decode (each
        is then built alone: a damaged one from its events)."""
        try:
            recs = json.loads(b"[" + bytes(self.records[1 + self.starts[lo]:self.starts[hi]]) + b"]")
        except (SnapshotDamaged, ValueError):
            return None
        return recs if isinstance(recs, list) and len(recs) == hi - lo else None

    def record(self, i: int) -> bytes:
        return bytes(self.records[1 + self.starts[i]:self.starts[i + 1]])

    def series(self, i: int) -> bytes:
        return bytes(self.values[self.at[i] * 8:self.at[i + 1] * 8])

    def build(self, i: int, rec: list[Any] | None = None, strict: bool = False, keep: bool = True,
              series: bool = True) -> TrialState:
        """Trial ``i`` (``keep=False``: for a reader only, not counted as built nor kept as encoded; ``series=False``
        too, for a reader of all but its intermediate values: they are not read, ``inter_values`` is empty)."""
        try:
            raw = self.record(i)
            if rec is None:
                rec = json.loads(raw)
            values = array("d")
            if series or keep:
                values.frombytes(self.series(i))
        except SnapshotDamaged as e:
            if strict or self.trial_log is None:
                raise
            self.left -= keep
            return self.rebuild(i, e)
        self.left -= keep
        t = _trial(rec, values, self.loader)
        if keep and t.status.is_terminal:
            self.encoded[t.trial_id] = (raw, self.finals[i])
        return t

    def rebuild(self, i: int, why: Exception) -> TrialState:
        """Trial ``i`` folded from its own events in the log (nothing touched it since the snapshot: it would
        have been built then). Not kept as encoded: the next snapshot encodes it again."""
        tid = self.ids[i]
        log.warning("the snapshot's bytes of trial %s do not match (%s): rebuilt from its events in the log",
                    tid, why)
        assert self.trial_log is not None
        scratch = ExperimentState(loader=self.loader)
        for s in self.trial_log(tid):
            scratch.apply(s)
        t = scratch.trials[tid]
        if self.loader is not None and t.status.is_terminal:
            t.held = None  # (served from the store, as the fold does for an ended trial)
        return t


def _slot(trials: dict[str, TrialState], key: str) -> Any:
    """What a dict holds under ``key``: in a TrialTable, a TrialState or (not built yet) an int."""
    return dict.__getitem__(trials, key)


def _slots(trials: dict[str, TrialState]) -> Iterable[tuple[str, Any]]:
    return dict.items(trials)


class TrialTable(dict[str, TrialState]):
    """The trials of a state decoded from a snapshot. Every trial id is there at once (in order, ``len`` and
    ``in`` answer at once), but a trial is built from the snapshot's bytes only when it is first read: one by
    key, all of them by ``values()``/``items()`` (one JSON parse). A snapshot of 100k trials thus opens in the
    time of reading its ids, and ``nnix view`` answers before any trial is built. Trials running or waiting
    at the snapshot are built at once, so a trial not built yet is an ended one nothing touched since.
    (A trial not built yet is held as its index in the snapshot: an int.)"""

    __slots__ = ("source",)

    def __init__(self, ids: list[str], source: _Source | None) -> None:
        super().__init__(zip(ids, range(len(ids)), strict=True))  # type: ignore[arg-type]
        self.source = source

    @property
    def pending(self) -> bool:
        return self.source is not None

    def _one(self, key: str) -> TrialState:
        t = _slot(self, key)
        if type(t) is int:
            src = self.source
            assert src is not None
            t = src.build(t)
            dict.__setitem__(self, key, t)
            if not src.left:
                self.source = None
        return t  # type: ignore[no-any-return]

    def build_all(self) -> None:
        src = self.source
        if src is None:
            return
        try:
            recs: list[Any] | None = json.loads(_whole(src.records))
        except SnapshotDamaged:  # each trial then, its own piece checked (a damaged one rebuilt from the log)
            recs = None
        for tid, i in list(_slots(self)):
            if type(i) is int:
                dict.__setitem__(self, tid, src.build(i, None if recs is None else recs[i]))
        self.source = None

    def built(self) -> list[TrialState]:
        """The trials built so far (every running or waiting one among them), in order."""
        return [t for _, t in _slots(self) if type(t) is not int]

    def final_values(self) -> list[float]:
        """The final value of every trial (NaN: none), in order, without building any."""
        src = self.source
        nan = math.nan
        if src is None:
            return [nan if (v := t.final_value) is None else v for t in dict.values(self)]
        slots: list[Any] = list(dict.values(self))
        values = src.finals.tolist()
        values.extend([nan] * (len(slots) - len(values)))  # (trials created since the snapshot)
        for i in compress(range(len(slots)), map(is_not, map(type, slots), repeat(int))):  # the built ones (in C)
            values[i] = nan if (v := slots[i].final_value) is None else v
        return values

    def __getitem__(self, key: str) -> TrialState:
        if self.source is None:
            return dict.__getitem__(self, key)
        return self._one(key)

    def get(self, key: str, default: Any = None) -> Any:
        if self.source is None or key not in self:
            return dict.get(self, key, default)
        return self._one(key)

    def __iter__(self) -> Iterator[str]:  # (also keeps dict(table) and {**table} off the raw values)
        return dict.__iter__(self)

    def values(self) -> ValuesView[TrialState]:  # type: ignore[override]
        """Every trial, in order, each built for the reader alone where the snapshot holds it (:func:`each_trial`):
        a look at every trial does not decode them all into the state."""
        return _EachValue(self)

    def items(self) -> ItemsView[str, TrialState]:  # type: ignore[override]
        return _EachItem(self)

    def pop(self, key: str, *default: Any) -> Any:
        self.build_all()
        return dict.pop(self, key, *default)

    def setdefault(self, key: str, default: Any = None) -> Any:
        self.build_all()
        return dict.setdefault(self, key, default)

    def copy(self) -> dict[str, TrialState]:
        self.build_all()
        return dict(dict.items(self))

    def __eq__(self, other: object) -> bool:
        self.build_all()
        if isinstance(other, TrialTable):
            other.build_all()
        return dict.__eq__(self, other)

    __hash__ = None

    def __repr__(self) -> str:
        self.build_all()
        return dict.__repr__(self)


class _EachValue(ValuesView[TrialState]):
    _mapping: TrialTable

    def __iter__(self) -> Iterator[TrialState]:
        return each_trial(self._mapping)


class _EachItem(ItemsView[str, TrialState]):
    _mapping: TrialTable

    def __iter__(self) -> Iterator[tuple[str, TrialState]]:
        return ((t.trial_id, t) for t in each_trial(self._mapping))


def each_trial(trials: dict[str, TrialState]) -> Iterator[TrialState]:
    """Every trial of ``trials`` as listed now, in order, without building the ones a snapshot holds into the
    state: each is built for the caller alone and let go (a full list of 100k trials thus holds one at a
    time, not all). Read only: a change goes through the state (``trials[id]``)."""
    return each_trial_or_known(trials, {})


def each_trial_or_known(trials: dict[str, TrialState], known: Mapping[str, _T], series: bool = True
                        ) -> Iterator[TrialState | _T]:
    """:func:`each_trial`, but a trial not built yet whose id is in ``known`` is given as ``known[id]`` (what the
    caller made of it before: nothing changed it since, or it would be built) instead of being read again
    (``series=False``: one read for the caller is read without its intermediate values, see :meth:`_Source.build`)."""
    src = trials.source if isinstance(trials, TrialTable) else None
    if src is None:
        yield from list(dict.values(trials))
        return
    recs: list[Any] | None = None
    lo = hi = 0
    for tid, t in list(_slots(trials)):
        if type(t) is int:
            now = _slot(trials, tid)  # (built meanwhile: a reader runs across awaits)
            if type(now) is not int:
                yield now
            elif (hit := known.get(tid)) is not None:
                yield hit
            else:
                if not known and not lo <= t < hi:  # (a look at every trial: EACH_CHUNK records parsed at once)
                    lo, hi = t, min(len(src.finals), t + EACH_CHUNK)
                    recs = src.records_of(lo, hi)
                rec = recs[t - lo] if recs is not None and lo <= t < hi else None
                yield src.build(t, rec, keep=False, series=series)
        else:
            yield t


HISTORY_CHUNK = 256  # trials of a snapshot whose records are decoded at once for a tuner's history (~4 ms a chunk)
_NO_SERIES = Series()


def record_of(t: TrialState) -> TrialRecord | None:
    """The tuner's record of trial ``t`` as it is now (None: a trial without parameter id, e.g. customized)."""
    if t.parameter_id is None:
        return None
    return TrialRecord(t.parameter_id, t.params, t.status, t.final_value,
                       Series(t.inter_values) if t.inter_values else _NO_SERIES, t.trial_id)


def tuner_records(state: ExperimentState) -> Iterator[tuple[str, TrialRecord | None]]:
    """(trial id, :func:`record_of` that trial) for every trial, in order, without building the trials a snapshot
    holds into the state: their records come from the snapshot, a chunk of trials at a time (one JSON parse of
    their parameters and statuses, the final values as the body holds them), and their intermediate values stay
    in the store until a reader asks for them (:meth:`Series.lazy`: a chunk of trials is read at once). A trial
    whose piece of the snapshot is damaged is built as a read of ``state.trials`` does (from its events)."""
    trials = state.trials
    src = trials.source if isinstance(trials, TrialTable) else None
    if src is None:
        for tid, t in list(dict.items(trials)):
            yield tid, record_of(t)
        return
    run: list[tuple[str, int]] = []
    for tid, slot in list(_slots(trials)):
        if type(slot) is int:
            if run and (run[-1][1] + 1 != slot or len(run) >= HISTORY_CHUNK):
                yield from _run_records(trials, src, run)
                run = []
            run.append((tid, slot))
            continue
        if run:
            yield from _run_records(trials, src, run)
            run = []
        yield tid, record_of(slot)
    if run:
        yield from _run_records(trials, src, run)


def _run_records(trials: dict[str, TrialState], src: _Source, run: list[tuple[str, int]]
                 ) -> Iterator[tuple[str, TrialRecord | None]]:
    """The records of trials ``run`` (consecutive in the snapshot ``src``, none built)."""
    lo, hi = run[0][1], run[-1][1] + 1
    starts = src.starts
    recs: list[list[Any]] | None = None
    try:
        raw = bytes(src.records[1 + starts[lo]:starts[hi]])
        if raw.isascii():  # (as _record writes them): only the head of each record is decoded
            text, base = raw.decode("ascii"), starts[lo]
            recs = [_record_head(text, starts[i] - base) for i in range(lo, hi)]
        else:
            recs = json.loads(b"[" + raw + b"]")
    except (SnapshotDamaged, ValueError, StopIteration, IndexError):  # a trial at a time, as the state builds it
        recs = None  # (a damaged one from its events in the log)
    if recs is not None and len(recs) != hi - lo:
        recs = None
    values = _SeriesChunk(src, lo, hi)
    finals, at, a0 = src.finals, src.at, src.at[lo]
    for (tid, i), rec in zip(run, recs or repeat(None), strict=False):
        if rec is None:
            yield tid, record_of(trials[tid])
            continue
        pid = rec[2]
        if pid is None:
            yield tid, None
            continue
        v = finals[i]
        a, b = at[i] - a0, at[i + 1] - a0
        yield tid, TrialRecord(pid, rec[3], _STATUSES[rec[6]], None if v != v else v,
                               Series.lazy(values, a, b) if b > a else _NO_SERIES, tid)


_scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_HEAD = 7  # the fields of a snapshot record a tuner's record needs: up to its status (see _record)


def _record_head(text: str, at: int) -> list[Any]:
    """The first fields of the snapshot record at ``text[at:]`` (compact JSON), without decoding the rest."""
    if text[at] != "[":
        raise ValueError(f"no snapshot record at {at}")
    out = []
    at += 1
    for _ in range(_HEAD):
        value, at = _scan(text, at)
        out.append(value)
        if text[at] != ",":
            raise ValueError(f"a snapshot record of fewer than {_HEAD + 1} fields at {at}")
        at += 1
    return out


class _SeriesChunk:
    """The intermediate values of trials ``lo:hi`` of a snapshot, read from its part when first called (once)."""

    __slots__ = ("hi", "lo", "src", "values")

    def __init__(self, src: _Source, lo: int, hi: int) -> None:
        self.src: _Source | None = src
        self.lo, self.hi = lo, hi
        self.values: array[float] | None = None

    def __call__(self) -> array[float]:
        if self.values is not None:
            return self.values
        src = self.src
        assert src is not None
        values = array("d")
        try:
            values.frombytes(bytes(src.values[src.at[self.lo] * 8:src.at[self.hi] * 8]))
        except SnapshotDamaged:  # each trial's own piece (a damaged one folded from its events in the log)
            for i in range(self.lo, self.hi):
                got = src.build(i, keep=False).inter_values
                want = src.at[i + 1] - src.at[i]
                values.extend(got[:want])
                values.extend(repeat(math.nan, want - len(got)))  # (the log disagrees with the snapshot's count)
        self.values, self.src = values, None
        return values


def one_trial_or_known(trials: dict[str, TrialState], tid: str, known: Mapping[str, _T], series: bool = True
                       ) -> TrialState | _T:
    """The trial ``tid`` as :func:`each_trial_or_known` gives it (one a snapshot holds: ``known[tid]``, or read for
    the caller alone); KeyError where there is none."""
    src = trials.source if isinstance(trials, TrialTable) else None
    if src is None:
        return trials[tid]
    t = _slot(trials, tid)
    if type(t) is not int:
        return t  # type: ignore[no-any-return]
    hit = known.get(tid)
    return hit if hit is not None else src.build(t, keep=False, series=series)


def encode_sections(state: ExperimentState) -> tuple[bytes, ...]:
    """``state`` as snapshot bytes: the body, a small JSON head (the experiment, its trial ids, section sizes) then
    the trial ids, the byte offsets of their records, their final values and the offsets of their intermediate
    values (raw); and the parts, read only where needed: the trials' records (a JSON array: one can be decoded
    alone), their finite intermediate values as raw doubles, and (where the parameters have at most INDEX_KEYS_MAX
    names) the index columns (:func:`encode_columns`: what a sorted or filtered list of all trials reads). Only
    running and waiting trials take their series with them: an ended trial's is read from the store when asked
    for (``loader``). A trial not changed since it was last encoded or decoded is not encoded again (nor, not built
    yet, read: its bytes are copied)."""
    head: dict[str, Any] = {f.name: getattr(state, f.name) for f in fields(state) if f.name not in _EXPERIMENT_SKIP}
    head["status"] = state.status.value
    trials = state.trials
    src = trials.source if isinstance(trials, TrialTable) else None
    cache = state.encoded
    ids: list[str] = []
    active: list[int] = []
    pieces: list[bytes] = []
    starts, finals, at, values = array("q", [0]), array("d"), array("q", [0]), array("d")
    pos, nan = 0, math.nan
    run: list[tuple[str, int]] = []  # trials not built yet, one after the other in the snapshot: copied at once
    tot = state.totals
    old_cols = None
    if src is not None and (tot is None or len(tot["paramKeys"]) <= INDEX_KEYS_MAX):
        old_cols = src.index_columns(whole=True)
    rows: list[Any] | None = [] if src is None or old_cols is not None else None  # (None: no index columns)

    def old_rows(lo: int, hi: int) -> None:
        if rows is not None:
            assert old_cols is not None
            rows.append((old_cols, lo, hi))

    def put(rec: bytes, final: float, series: Iterable[float] | bytes) -> None:
        nonlocal pos
        pieces.append(rec)
        pos += len(rec) + 1
        starts.append(pos)
        finals.append(final)
        if isinstance(series, bytes):
            values.frombytes(series)
        else:
            values.extend(series)
        at.append(len(values))

    def built(tid: str, t: TrialState) -> None:
        hit = cache.get(tid)
        if hit is None:
            value = t.final_value
            hit = (_record(t), nan if value is None else value)
            if t.status.is_terminal:
                cache[tid] = hit
            else:
                active.append(len(ids) - 1)
        put(hit[0], hit[1], t.inter_values)
        if rows is not None:
            rows.append(index_row(t))

    def flush() -> None:
        nonlocal pos
        if not run:
            return
        assert src is not None
        lo, hi = run[0][1], run[-1][1] + 1
        s0, a0 = src.starts[lo], src.at[lo]
        try:
            recs, series = src.records[1 + s0:src.starts[hi]], src.values[a0 * 8:src.at[hi] * 8]
        except SnapshotDamaged:  # a trial at a time: a damaged one is rebuilt (see _Source.rebuild)
            for tid, i in run:
                try:
                    put(src.record(i), src.finals[i], src.series(i))
                except SnapshotDamaged:
                    built(tid, trials[tid])
                else:
                    old_rows(i, i + 1)
            run.clear()
            return
        pieces.append(bytes(recs))
        base, n = len(values), len(at)
        starts.extend(array("q", [pos + x - s0 for x in src.starts[lo + 1:hi + 1]]))
        pos += len(recs) + 1
        finals.extend(src.finals[lo:hi])
        values.frombytes(series)
        at.extend(array("q", [base + x - a0 for x in src.at[lo + 1:hi + 1]]))
        assert len(at) == n + hi - lo
        old_rows(lo, hi)
        run.clear()

    for tid, t in _slots(trials):
        ids.append(tid)
        if type(t) is int:  # not built yet: its bytes as the snapshot holds them
            if run and run[-1][1] + 1 != t:
                flush()
            run.append((tid, t))
            continue
        flush()
        built(tid, t)
    flush()
    head["active"] = active
    sections = [json.dumps(ids, separators=(",", ":")).encode(), starts.tobytes(), finals.tobytes(), at.tobytes()]
    records = b"[" + b",".join(pieces) + b"]"
    series = values.tobytes()
    columns = None
    if rows is not None and len(rows) == 1 and old_cols is not None and rows[0] == (old_cols, 0, old_cols.n):
        columns = _whole(old_cols.part)  # (no trial built since: the part as it was read, checked whole)
    elif rows is not None:
        columns = encode_columns(rows)
    parts = [records, series] if columns is None else [records, series, columns]
    head["sections"] = [len(s) for s in sections]
    head["parts"] = [len(p) for p in parts]
    text = json.dumps({"experiment": head}, separators=(",", ":")).encode()
    return b"".join([len(text).to_bytes(8, "little"), text, *sections]), *parts


def encode_snapshot(state: ExperimentState) -> bytes:
    """:func:`encode_sections` in one piece: the body, then its parts."""
    return b"".join(encode_sections(state))


def decode_snapshot(body: bytes, loader: Callable[[str], list[Metric]] | None, parts: Sequence[Part] | None = None,
                    trial_log: Callable[[str], list[Stored]] | None = None) -> ExperimentState:
    """The state :func:`encode_sections` wrote (raises on anything malformed): ``parts`` as the store handed them
    back, or (None) following the body as :func:`encode_snapshot` wrote them. Only the body and the trials running
    or waiting are decoded here: the others are built when first read (:class:`TrialTable`)."""
    view = memoryview(body)
    n = int.from_bytes(view[:8], "little")
    head = json.loads(bytes(view[8:8 + n]))["experiment"]
    sizes, part_sizes, active = head.pop("sections"), head.pop("parts"), head.pop("active")
    pos, sections = 8 + n, []
    for size in [*sizes, *part_sizes]:
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"snapshot section size {size!r}")
    for size in sizes:
        sections.append(view[pos:pos + size])
        pos += size
    if parts is None:
        parts = []
        for size in part_sizes:
            parts.append(view[pos:pos + size])  # type: ignore[arg-type]  # (a memoryview slices to memoryviews)
            pos += size
    if pos != len(view) or len(parts) not in (2, 3) or [len(p) for p in parts] != part_sizes:
        raise ValueError(f"snapshot of {len(view)} bytes and parts {[len(p) for p in parts]} where its head says "
                         f"{pos} and {part_sizes}")
    ids_raw, starts_raw, finals_raw, at_raw = sections
    records, values = parts[0], parts[1]
    ids = json.loads(bytes(ids_raw))
    starts, finals, at = array("q"), array("d"), array("q")
    starts.frombytes(starts_raw)
    finals.frombytes(finals_raw)
    at.frombytes(at_raw)
    k = len(ids)
    if not isinstance(ids, list) or len(starts) != k + 1 or len(finals) != k \
            or len(at) != k + 1 or starts[0] != 0 or (k and starts[k] != len(records) - 1) or at[0] != 0 \
            or at[k] * 8 != len(values) or len(records) < 2:
        raise ValueError(f"snapshot of {k} trials with {len(starts)} offsets, {len(finals)} finals, {len(at)} series, "
                         f"{len(values) / 8:.0f} values")
    state = ExperimentState(**{key: v for key, v in head.items() if key != "status"})
    state.status = ExperimentStatus(head["status"])
    state.limits = limits_of(state.limits)  # (the plain form, as written: typed again)
    if not totals_ok(head.get("totals")):  # a snapshot older than them: counted when first asked for
        state.totals = None
    state.loader, state.trial_log = loader, trial_log
    source = _Source(ids, records, starts, finals, at, values, loader, state.encoded, trial_log)
    source.columns = parts[2] if len(parts) == 3 else None  # (checked when first read)
    table = TrialTable(ids, source if k else None)
    if len(table) != k:
        raise ValueError("snapshot with a trial id twice")
    for i in active:  # built at once (see TrialTable); a damaged piece: the snapshot is not used
        t = source.build(i, strict=True)
        dict.__setitem__(table, ids[i], t)
        if t.is_active:
            state.live[ids[i]] = t
    if source.left == 0:
        table.source = None
    state.trials = table
    return state


def snapshot_of(state: ExperimentState) -> Snapshot:
    """``state`` as a snapshot (immutable: a thread may write it to the store while the state moves on)."""
    body, *parts = encode_sections(state)
    return Snapshot(SNAPSHOT_VERSION, state.last_seq, body, tuple(parts))


def write_snapshot(store: Store, state: ExperimentState) -> None:
    """Keep ``state`` (folded from ``store`` up to ``state.last_seq``) as the store's snapshot."""
    if state.last_seq > 0:
        store.write_snapshot(snapshot_of(state))
        state.snapshot_seq = state.last_seq


def load_snapshot(store: Store, loader: Callable[[str], list[Metric]] | None) -> ExperimentState | None:
    """The state of the store's snapshot, or None when it has none that matches its log (then the
    whole log is folded: a snapshot is never trusted blindly). Its parts are checked when read: a trial
    whose piece is damaged is folded then from its events in the log, read by the ``loader``'s ``read_trial``
    method where it has one (like :meth:`Store.read_trial`), else by ``store`` (which must then stay open)."""
    snap = store.read_snapshot()
    if snap is None or snap.version != SNAPSHOT_VERSION:
        return None
    read_trial = getattr(loader, "read_trial", None) or store.read_trial

    def trial_log(trial_id: str) -> list[Stored]:
        return list(read_trial(trial_id, TRIAL_KINDS))

    try:
        state = decode_snapshot(snap.body, loader, snap.parts or None, trial_log)
    except (ValueError, TypeError, KeyError, IndexError) as e:
        log.warning("the snapshot of this experiment does not decode (%s): folding its whole log", e)
        return None
    if state.last_seq != snap.seq:
        return None
    state.snapshot_seq = snap.seq
    return state


def fold_store(store: Store, state: ExperimentState | None = None,
               loader: Callable[[str], list[Metric]] | None = None) -> ExperimentState:
    """Fold everything in ``store`` after ``state.last_seq``, by the store's fastest way. Without a state,
    start from the store's snapshot where it has one that matches, and serve ended trials' series from
    the store (``ExperimentState.loader``; by default, ``store`` itself) rather than hold them all."""
    if state is None:
        def from_store(trial_id: str) -> list[Metric]:
            return series(store.read_trial(trial_id, SERIES_KINDS))

        loader = loader or from_store
        state = load_snapshot(store, loader) or ExperimentState(loader=loader)
    store.replay(state, state.last_seq)
    return state
