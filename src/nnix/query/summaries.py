"""The trial summaries of the read side: each trial's summary kept per trial version (:class:`TrialViews`), the
trial-list query (filter, search, sort, page: :class:`TrialQuery` on a :class:`TrialIndex`), columns for charts
(:func:`columns_json`) and a trial's whole series read off the loop (:func:`series_of`). REST and the web UI read the
experiment through these (exported by :mod:`nnix.query`).

A summary is rebuilt only when its trial changed (status, times or metric count), so listing
10,000 trials costs one dict lookup per trial plus joining cached JSON fragments.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import compress, islice, repeat
from operator import is_, is_not
from typing import TYPE_CHECKING, Any

from nnix.core.state import SERIES_KINDS, Metric, TrialState, series
from nnix.model.status import MetricType, TrialStatus
from nnix.query.columns import INDEX_FIELDS, INDEX_STATUSES, IndexColumns, index_row, row_summary
from nnix.query.jsonout import Parts, QueryError, dumps, dumps_exact
from nnix.query.snapshot import TrialTable, each_trial_or_known, one_trial_or_known

if TYPE_CHECKING:
    from nnix.core.manager import ExperimentManager

STOPPED_STATUSES = (TrialStatus.USER_CANCELED, TrialStatus.SYS_CANCELED, TrialStatus.EARLY_STOPPED)


SERIES_ON_LOOP = 10_000  # metrics of a series in the store read on the loop at most (a longer one: in a thread)


async def series_of(manager: ExperimentManager, t: TrialState) -> list[Metric]:
    """A trial's whole series without holding the manager's loop: the list held in memory, else (an ended trial whose
    series the state left in the store) read by a worker thread on a connection of its own when it is long (a
    200,000-metric series read on the loop held it ~1.6 s)."""
    if t.held is not None or t.n_metrics <= SERIES_ON_LOOP:
        return t.metrics
    store = manager.store.snapshot_writer()  # (another connection, for a thread, while the loop appends)

    def read() -> list[Metric]:
        try:
            return series(store.read_trial(t.trial_id, SERIES_KINDS))
        finally:
            store.close()

    return await asyncio.to_thread(read)


def _version(t: TrialState) -> tuple[Any, ...]:
    return (t.status, t.n_metrics if t.held is None else len(t.held), t.started_at, t.ended_at, t.warning_count)


@dataclass(slots=True)
class MetricScan:
    """What a summary needs from a trial's metrics, kept up to date incrementally: a trial reporting
    fast makes each summary cost the new metrics, not all of them. Metrics are appended (rarely
    inserted, or replaced on a retry): a scan that finds its last metric moved starts over."""

    metrics: list[Metric] | None = None  # the list scanned (a retry replaces it)
    scanned: int = 0
    last: Metric | None = None  # metrics[scanned - 1] when scanned
    final: Metric | None = None  # the last FINAL in list order
    latest: Metric | None = None  # the last intermediate result in list order
    n_inter: int = 0

    def update(self, t: TrialState) -> MetricScan:
        if t.held is None:  # the series is in the store: the fold kept its summary
            self.metrics, self.scanned, self.last = None, 0, None
            self.final, self.latest, self.n_inter = t.final_m, t.latest_m, t.n_inter
            return self
        ms_ = t.held
        n = len(ms_)
        if ms_ is not self.metrics or n < self.scanned or (self.scanned and ms_[self.scanned - 1] is not self.last):
            self.metrics, self.scanned, self.last, self.final, self.latest, self.n_inter = ms_, 0, None, None, None, 0
        if n > self.scanned:
            final, latest, n_inter = self.final, self.latest, self.n_inter
            for i in range(self.scanned, n):
                m = ms_[i]
                if m.type is MetricType.FINAL:
                    final = m
                else:
                    latest = m
                    n_inter += 1
            self.final, self.latest, self.n_inter = final, latest, n_inter
            self.scanned, self.last = n, ms_[n - 1]
        return self


@dataclass(slots=True)
class TrialView:
    """A trial's summary (``encoded``: as JSON) and what is made of it. An ended trial's view holds only the JSON
    (``held`` None; :attr:`summary` decodes it when asked): 100k warmed views of a snapshot would hold ~2 KB more
    each as dicts."""

    version: tuple[Any, ...]
    held: dict[str, Any] | None
    encoded: bytes
    compat: bytes | None = None
    fragments: dict[str, tuple[Any, bytes | None]] | None = None
    scan: MetricScan | None = None
    compat_key: tuple[Any, ...] | None = None
    out: str | None = None  # the trial's output directory (with the summary: what NNI's TrialJobInfo needs)

    @property
    def summary(self) -> dict[str, Any]:
        held = self.held
        return held if held is not None else json.loads(self.encoded)


def summarize(t: TrialState, scan: MetricScan | None = None) -> dict[str, Any]:
    """The summary of ``t`` (:func:`~nnix.query.columns.row_summary`), its metrics read through ``scan`` (kept by
    the caller: a trial reporting fast then costs its new metrics, not all of them)."""
    scan = (scan or MetricScan()).update(t)
    return row_summary(t.trial_id, index_row(t, (scan.final, scan.latest, scan.n_inter)))


class TrialViews:
    """Cached per-trial read models of one manager's state."""

    def __init__(self, manager: ExperimentManager) -> None:
        self.manager = manager
        self._cache: dict[str, TrialView] = {}
        self._lists: dict[tuple[str, Any], bytes] = {}
        self._full: dict[str, tuple[Any, bytes | Parts]] = {}  # name -> (key, a full list): see keep()
        self._config: tuple[int, dict[str, Any]] | None = None
        self.overview_key: tuple[Any, ...] | None = None
        self.overview_base: dict[str, Any] | None = None
        self._index: TrialIndex | None = None
        self.asked = 0.0  # (perf_counter) when a page or the index was last asked for: the warm-up stands back

    def config_json(self, config: dict[str, Any]) -> dict[str, Any]:
        if self._config is None or self._config[0] != id(config):
            self._config = (id(config), _config_json(config))
        return self._config[1]

    def curve(self, t: TrialState, key: str = "default") -> tuple[list[int], list[float]]:
        """A trial's intermediate results as (steps, finite values), sorted by step (not cached: callers
        cache what they send, which is much smaller)."""
        points: dict[int, float] = {}
        for m in t.metrics:
            if m.type is MetricType.PERIODICAL:
                value = m.value
                if isinstance(value, dict):
                    value = value.get(key)
                elif key != "default":
                    continue
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    points[m.sequence] = float(value)  # a repeated step keeps its last value
        xs = sorted(points)
        return xs, [points[x] for x in xs]

    def entry(self, t: TrialState) -> TrialView:
        """The current view of ``t`` (made again where ``t`` changed since)."""
        v = _version(t)
        c = self._cache.get(t.trial_id)
        if c is None or c.version != v:
            scan = MetricScan() if c is None or c.scan is None else c.scan
            s = summarize(t, scan)
            exact = dumps_exact(s)  # (None: non-finite numbers in it, which its JSON writes as null)
            encoded = dumps(s) if exact is None else exact
            # an ended trial's summary is decoded when asked, where the state keeps its overview totals (an older
            # snapshot without them: they are counted once from every summary, which then should not be decoded)
            held = s if exact is None or t.is_active or self.manager.state.totals is None else None
            if c is None:
                c = TrialView(v, held, encoded, scan=scan, out=t.output_dir)
                self._cache[t.trial_id] = c
            else:  # what does not depend on intermediate results (NNI's TrialJobInfo) is kept
                c.version, c.held, c.encoded, c.fragments, c.out = v, held, encoded, None, t.output_dir
                if held is None:
                    c.compat = c.compat_key = None  # (an ended trial's is kept with no key: made again here)
        return c

    def summary(self, t: TrialState) -> dict[str, Any]:
        return self.entry(t).summary

    def encoded(self, t: TrialState) -> bytes:
        return self.entry(t).encoded

    def compat(self, c: TrialView, build: Callable[[TrialView, Metric | None], dict[str, Any]]) -> bytes:
        """NNI's TrialJobInfo of the trial whose current view is ``c``, JSON-encoded; ``build(c, final)`` makes it
        from the view. Cached until the trial's status, times, messages or final result change (not at each
        intermediate result)."""
        final = c.scan.final if c.scan is not None else None
        if c.held is None:  # an ended trial's: kept until entry() makes its view again
            if c.compat is None:
                c.compat = dumps(build(c, final))
            return c.compat
        s = c.held
        key = (s["status"], s["start"], s["end"], s["message"], s["env"], c.out, id(final), s["parameterId"],
               s["seq"])
        if c.compat is None or c.compat_key != key:
            c.compat = dumps(build(c, final))
            c.compat_key = key
        return c.compat

    def listing(self, name: str, key: Any, build: Callable[[], bytes]) -> bytes:
        """A whole serialized list, cached per ``key`` (which includes the state's version: the last
        event folded in), so many clients polling the same state share one build. A few keys are kept, none
        over LIST_KEEP bytes (a page is kept; a full list of 100k trials is not held for the next client)."""
        hit = self._lists.get((name, key))
        if hit is not None:
            return hit
        data = build()
        if len(data) > LIST_KEEP:
            return data
        if len(self._lists) >= 16:
            self._lists.pop(next(iter(self._lists)))
        self._lists[(name, key)] = data
        return data

    def kept(self, name: str, key: Any) -> bytes | Parts | None:
        """The full list :meth:`keep` kept under ``name`` for ``key`` (the array's bytes, or its parts), or None."""
        hit = self._full.get(name)
        if hit is not None and hit[0] != key:
            del self._full[name]  # (a list of an older state: let go the parts only it still holds)
            return None
        return hit[1] if hit is not None else None

    def keep(self, name: str, key: Any, current: Callable[[], Any], parts: Iterable[bytes | None]
             ) -> Iterator[bytes | None]:
        """``parts`` (of a streamed JSON array) as they come; once every one was taken, what they make is kept under
        ``name`` for the next client asking for ``key`` (:meth:`kept`: not made again), where ``current()`` still
        gives ``key`` (nothing changed meanwhile); one list per name. ``parts`` are bytes the trials' views hold
        anyway (a kept fragment): an array that fits FULL_KEEP with the other arrays kept is kept joined (older ones
        are let go), sent whole; a larger one (NNI's trial-jobs of 100k trials: 61 MB) as the list of its parts,
        which costs a reference each (not a copy of them), streamed again as a join of those bytes."""
        got: list[bytes] = []
        size = 2
        for part in parts:
            if part is not None:
                size += len(part) + 1
                got.append(part)
            yield part
        full = self._full
        full.pop(name, None)
        if current() != key:
            return
        if size > FULL_KEEP:
            full[name] = (key, Parts(got))
            return
        total = size + sum(len(data) for _, data in full.values() if isinstance(data, bytes))
        for old in [n for n, (_, data) in full.items() if isinstance(data, bytes)]:
            if total <= FULL_KEEP:
                break
            total -= len(full.pop(old)[1])
        full[name] = (key, b"[" + b",".join(got) + b"]")

    async def warm(self, chunk: int = 500) -> None:
        """Build every summary ahead of the first request (a 10,000-trial store takes ~0.5 s), a chunk at a time
        so the loop keeps serving meanwhile (at most ``chunk`` trials and about WARM_SLICE seconds per loop turn:
        a streamed list sent meanwhile is not slowed to the pace of the warm-up)."""
        import asyncio
        import importlib

        # a trial a snapshot holds is read for its summary and let go (not built into the state); one whose view
        # a request made meanwhile is not read again
        trials = self.each()
        clock = time.perf_counter
        big = len(self.manager.state.trials) >= INDEX_AHEAD
        try:
            # a snapshot's index columns: the sort/filter index first (a sorted page right after `nnix view` is then
            # a slice), made from the trials' records in a thread where the snapshot lacks them (not where it lacks
            # the overview totals too: they are counted from the summaries warmed first)
            st = self.manager.state
            src = st.trials.source if isinstance(st.trials, TrialTable) else None
            cols = None
            if big and src is not None and st.totals is not None:  # (numpy's import: 0.1-0.4 s, beside)
                cols, _ = await asyncio.gather(asyncio.to_thread(src.index_columns, True),
                                               asyncio.to_thread(importlib.import_module, "numpy"))
            if cols is not None:
                await self._warm_index()
                big = False
            more = True
            while more:  # (a trial read at a time: a turn ends after `chunk` trials or WARM_SLICE seconds)
                if clock() - self.asked < WARM_BACK_OFF:  # the web UI is in use: its requests first
                    await asyncio.sleep(WARM_BACK_OFF / 10)
                    continue
                deadline, more = clock() + WARM_SLICE, False
                for t in islice(trials, chunk):
                    if not isinstance(t, TrialView):
                        self.entry(t)
                    more = True
                    if clock() >= deadline:
                        break
                await asyncio.sleep(0)
            # what a first look asks for: a sorted or filtered page of 100k trials is then a slice (a small
            # experiment's index is built when first asked: quick, and a run that is never looked at imports no numpy)
            if big:
                src = st.trials.source if isinstance(st.trials, TrialTable) else None
                if src is not None:  # (a snapshot without index columns: made from its records in a thread, not
                    await asyncio.to_thread(src.index_columns, True)  # on the loop: ~2 s at 100k)
                await self._warm_index()
        except Exception:  # only a head start: requests build what is missing
            logging.getLogger("nnix.api").exception("warming the trial summaries failed")

    async def _warm_index(self) -> None:
        import asyncio

        tot = self.totals()
        for _ in self.index().prepare((frozenset(tot["metricKeys"]), frozenset(tot["paramKeys"]))):
            await asyncio.sleep(0)

    def fragment(self, t: TrialState, name: str, param: Any,
                 build: Callable[[TrialState, TrialView], bytes | None]) -> bytes | None:
        """A piece of JSON about ``t`` (an export row, a downsampled curve), cached until the trial
        changes; one per ``name`` (a different ``param`` replaces it)."""
        return self.view_fragment(self.entry(t), name, param, lambda c: build(t, c))

    def view_fragment(self, c: TrialView, name: str, param: Any, build: Callable[[TrialView], bytes | None]
                      ) -> bytes | None:
        """:meth:`fragment` of a trial's current view ``c`` (what ``build(c)`` makes of it)."""
        if c.fragments is None:
            c.fragments = {}
        hit = c.fragments.get(name)
        if hit is not None and hit[0] == param:
            return hit[1]
        data = build(c)
        c.fragments[name] = (param, data)
        return data

    def each(self, ready: Callable[[TrialView], bool] = lambda _: True) -> Iterator[TrialState | TrialView]:
        """Every trial as listed now, in order, one at a time: a trial a snapshot holds whose view is ``ready`` (has
        what the caller needs) is given as that view, not read from the snapshot again (nothing changed it since,
        or it would be built); any other trial as itself (one a snapshot holds, read for this reader alone)."""
        return each_trial_or_known(self.manager.state.trials, _Ready(self._cache, ready), series=False)

    def totals(self) -> dict[str, Any]:
        """The state's overview totals (where an older snapshot lacks them: counted from the trials' views)."""
        return self.manager.state.overview_totals(
            lambda: ((s["status"], s["params"], s["final"]) for s in (v.summary for v in self.all())))

    def index(self) -> TrialIndex:
        """Every trial's view with the sort orders asked for, kept until the state changes."""
        st = self.manager.state
        version = (id(st), st.last_seq)
        self.asked = time.perf_counter()
        if self._index is None or self._index.version != version:
            self._index = None  # (let the old one go first)
            trials = st.trials
            src = trials.source if isinstance(trials, TrialTable) else None
            cols = src.index_columns(whole=True) if src is not None else None  # (read and checked whole)
            if cols is not None and cols.n <= len(trials):  # no trial a snapshot holds is read for it
                ids = list(trials)
                slots: list[Any] = list(dict.values(trials))
                changed = {i: self.entry(slots[i]).summary  # (built: changed since the snapshot, or new)
                           for i in compress(range(len(slots)), map(is_not, map(type, slots), repeat(int)))}
                rows = _ColumnRows(ids, cols, changed)
                cache = self._cache

                def view(i: int) -> TrialView:
                    # a trial the snapshot holds: its view as warmed, else its summary from the columns (not kept)
                    hit = None if i in changed else cache.get(ids[i])
                    if hit is None and i not in changed and (s := rows.summary(i)) is not None:
                        hit = TrialView((), s, dumps(s))
                    return hit if hit is not None else self.view_of(ids[i])

                self._index = TrialIndex(rows, version, view)
            else:
                views = self.all()
                self._index = TrialIndex(_SummaryRows([v.summary for v in views]), version, views.__getitem__)
        return self._index

    def page(self, query: TrialQuery) -> tuple[int, list[TrialView]] | None:
        """A page of the trials in their order, unfiltered, without a view of the others (an index is not built
        for it: the first page of 100k trials a snapshot holds is read at once); None for any other query."""
        self.asked = time.perf_counter()
        if query.statuses is not None or query.search or query.sort != "seq" or query.limit is None:
            return None
        idx = self._index
        if idx is not None and idx.version == (id(self.manager.state), self.manager.state.last_seq):
            return query.run(idx)
        trials = self.manager.state.trials
        n = len(trials)
        lo, hi = (n - query.offset - query.limit, n - query.offset) if query.descending else \
            (query.offset, query.offset + query.limit)
        ids = list(islice(trials, max(0, lo), max(0, hi)))
        if query.descending:
            ids.reverse()
        return n, [self.view_of(tid) for tid in ids]

    def view_of(self, tid: str) -> TrialView:
        """The current view of the trial ``tid`` (one a snapshot holds is not built into the state for it)."""
        t = one_trial_or_known(self.manager.state.trials, tid, self._cache, series=False)
        return t if isinstance(t, TrialView) else self.entry(t)

    def all(self) -> list[TrialView]:
        """Every trial's view, in order. A trial a snapshot holds is not built into the state for it: it is read
        for its first view, which then serves as it is (nothing changed that trial, or it would be built)."""
        return [t if isinstance(t, TrialView) else self.entry(t)
                for t in each_trial_or_known(self.manager.state.trials, self._cache, series=False)]


INDEX_AHEAD = 2000  # trials from which the warm-up also builds the sort/filter index ahead of the first query
WARM_SLICE = 0.004  # seconds of warming per loop turn at most (about)
WARM_BACK_OFF = 2.0  # seconds after a page or the index was asked for during which the summaries' warm-up waits


LIST_KEEP = 1 << 20  # bytes: a serialized list larger than this is not kept for the next client
# bytes: the streamed full lists (NNI's trial-jobs, export-data) kept joined for the next client, all together (10k
# trials: a repeated list is sent whole; 100k: the 61 MB trial-jobs list is not copied, the manager stays <= 500 MB:
# the references to its parts, which the trials' views hold anyway, are kept instead)
FULL_KEEP = 12 << 20


class _Ready(Mapping[str, TrialView]):
    """The views of ``cache`` that pass ``ready`` (looked up one at a time: no dict of them is built)."""

    def __init__(self, cache: dict[str, TrialView], ready: Callable[[TrialView], bool]) -> None:
        self.cache, self.ready = cache, ready

    def __getitem__(self, key: str) -> TrialView:
        v = self.cache[key]
        if not self.ready(v):
            raise KeyError(key)
        return v

    def get(self, key: str, default: Any = None) -> Any:
        v = self.cache.get(key)
        return v if v is not None and self.ready(v) else default

    def __iter__(self) -> Iterator[str]:
        return (k for k, v in self.cache.items() if self.ready(v))

    def __len__(self) -> int:
        return sum(1 for _ in self)


# --- the trial-list query ------------------------------------------------------------------------

SORT_FIELDS = ("seq", "id", "status", "metric", "latest", "duration", "start", "end", "nInter")
MAX_LIMIT = 1_000_000


@dataclass
class TrialQuery:
    statuses: frozenset[str] | None = None
    search: str = ""
    sort: str = "seq"
    descending: bool = False
    offset: int = 0
    limit: int | None = 100
    keys: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())  # (final-result names, parameters)

    @classmethod
    def parse(cls, params: dict[str, str]) -> TrialQuery:
        q = cls()
        status = params.get("status", "")
        if status:
            wanted = frozenset(s.strip().upper() for s in status.split(",") if s.strip())
            bad = sorted(wanted - {s.value for s in TrialStatus})
            if bad:
                known = ", ".join(s.value for s in TrialStatus)
                raise QueryError(f"unknown trial status {', '.join(bad)}; one of {known}")
            q.statuses = wanted
        q.search = params.get("q", "").strip().lower()
        sort = params.get("sort", "seq").strip() or "seq"
        if sort.startswith("-"):
            q.descending, sort = True, sort[1:]
        if sort not in SORT_FIELDS and not sort.startswith(("param:", "metric:")):
            raise QueryError(f"sort must be one of {', '.join(SORT_FIELDS)}, param:NAME or metric:KEY "
                             "(- for descending)")
        q.sort = sort
        order = params.get("order")
        if order is not None:
            if order not in ("asc", "desc"):
                raise QueryError("order must be asc or desc")
            q.descending = order == "desc"
        for name in ("offset", "limit"):
            raw = params.get(name)
            if raw is None or raw == "":
                continue
            if name == "limit" and raw == "all":
                q.limit = None
                continue
            try:
                value = int(raw)
            except ValueError as e:
                what = "an integer or all" if name == "limit" else "an integer"
                raise QueryError(f"{name} must be {what}, got {raw!r}") from e
            if not 0 <= value <= MAX_LIMIT:
                raise QueryError(f"{name} must be between 0 and {MAX_LIMIT}, got {value}")
            if name == "offset":
                q.offset = value
            else:
                q.limit = value
        return q

    def matches(self, s: dict[str, Any]) -> bool:
        if self.statuses is not None and s["status"] not in self.statuses:
            return False
        if self.search:
            return all(c(s) for c in self.conditions())
        return True

    def conditions(self, now_ms: int | None = None) -> list[Callable[[dict[str, Any]], bool]]:
        """``q`` as tests of a summary, all to pass: parts split by ``;``, each free text (part of the id, the
        Trial No., part of the message) or a condition ``NAME OP VALUE`` (OP one of > < >= <= = : != and
        ``NAME:[a, b]`` a closed range; NAME a summary field, ``metric:KEY``, a final-result key or a parameter)."""
        out = []
        now = int(time.time() * 1000) if now_ms is None else now_ms
        for part in (p.strip() for p in self.search.split(";")):
            if part:
                out.append(_condition(part, now, self.keys))
        return out

    def sort_key(self, now_ms: int) -> Callable[[dict[str, Any]], Any]:
        """A key putting missing values last whatever the direction (the direction is applied after)."""
        field = self.sort
        key = self.value_key()
        if field == "duration":
            return lambda s: key(_duration(s, now_ms))
        if field.startswith("param:"):
            name = field[6:]
            return lambda s: key(s["params"].get(name) if isinstance(s["params"], dict) else None)
        if field.startswith("metric:"):
            mkey = field[7:]
            return lambda s: key(_final_key(s, mkey))
        return lambda s: key(s[field])

    def value_key(self) -> Callable[[Any], Any]:
        """:meth:`sort_key` of the sorted field's value (see :meth:`TrialIndex.sort_values`)."""
        desc = self.descending

        def wrap(v: Any) -> tuple[int, Any]:
            if v is None or (isinstance(v, float) and math.isnan(v)):
                return (1 if not desc else -1, 0)
            return (0, v)

        if self.sort.startswith("param:"):
            def pkey(v: Any) -> Any:
                # mixed types (choice of numbers and strings): numbers first, then text
                if isinstance(v, bool) or v is None:
                    return wrap(None if v is None else (1, str(v)))
                return wrap((0, v) if isinstance(v, (int, float)) else (1, json.dumps(v)))
            return pkey
        return wrap

    def run(self, rows: Iterable[TrialView] | TrialIndex) -> tuple[int, list[TrialView]]:
        """Total matching, and the requested page, sorted (from ``rows``' kept orders where it is an index)."""
        end = None if self.limit is None else self.offset + self.limit
        if isinstance(rows, TrialIndex):
            hits = rows.matching(self)
            return len(hits), [rows.view(int(i)) for i in hits[self.offset:end]]
        views = [v for v in rows if self.matches(v.summary)] if self.statuses is not None or self.search else list(rows)
        if self.sort != "seq" or self.descending:
            key = self.sort_key(int(time.time() * 1000))
            views.sort(key=lambda v: key(v.summary), reverse=self.descending)
        return len(views), views[self.offset:end]


def _duration(s: dict[str, Any], now_ms: int) -> float | None:
    if s["duration"] is not None:
        return s["duration"]  # type: ignore[no-any-return]
    return None if s["start"] is None else (now_ms - s["start"]) / 1000


def _final_key(s: dict[str, Any], key: str) -> float | None:
    return _final_of(s["final"], key)


def _final_of(f: Any, key: str) -> float | None:
    v = f.get(key) if isinstance(f, dict) else (f if key == "default" else None)
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


_CONDITION = re.compile(r"^([\w.\-:]+)\s*(>=|<=|!=|≠|>|<|=|:)\s*(.+)$")
_RANGE = re.compile(r"^\[\s*([^,]+),\s*([^\]]+)\]$")


def _getter(name: str, now_ms: int, keys: tuple[frozenset[str], frozenset[str]]) -> Callable[[dict[str, Any]], Any]:
    n = name.lower()
    if n in ("metric", "default"):
        return lambda s: s["metric"]
    if n == "status":
        return lambda s: s["status"]
    if n in ("no", "seq", "trial"):
        return lambda s: s["seq"]
    if n == "id":
        return lambda s: s["id"]
    if n == "duration":
        return lambda s: _duration(s, now_ms)
    if name.startswith("metric:"):
        return lambda s: _final_key(s, name[7:])
    if name in keys[0] and name not in keys[1]:
        return lambda s: _final_key(s, name)
    return lambda s: s["params"].get(name) if isinstance(s["params"], dict) else None


def _number(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return v if isinstance(v, str) else json.dumps(v)


def _condition(part: str, now_ms: int, keys: tuple[frozenset[str], frozenset[str]]
               ) -> Callable[[dict[str, Any]], bool]:
    """One part of a search (see :meth:`TrialQuery.conditions`), as the web UI reads it."""
    m = _CONDITION.match(part)
    if m is None:
        q = part.lower()
        return lambda s: q in s["id"].lower() or q == str(s["seq"]) or q in (s["message"] or "").lower()
    name, op, raw = m.groups()
    get = _getter(name, now_ms, keys)
    rng = _RANGE.match(raw)
    if rng is not None:
        lo, hi = _number(rng[1]), _number(rng[2])
        if lo is None or hi is None:
            return lambda s: False
        return lambda s: _is_num(v := get(s)) and lo <= v <= hi
    num = _number(raw.strip())
    low = raw.strip().lower()

    def eq(v: Any) -> bool:
        return v == num if num is not None and _is_num(v) else _text(v).lower() == low

    def test(s: dict[str, Any]) -> bool:
        v = get(s)
        if v is None:
            return op in ("!=", "≠")
        if op in ("!=", "≠"):
            return not eq(v)
        if op in ("=", ":"):
            return eq(v)
        if num is None or not _is_num(v):
            return False
        return bool(v > num if op == ">" else v < num if op == "<" else v >= num if op == ">=" else v <= num)
    return test


class _Column:
    """One field of every trial of an index, as arrays: its numbers (NaN where it is not one), which are numbers
    (not booleans), which are missing, and (made when first needed) its values and their text in lower case."""

    __slots__ = ("_raw", "isnone", "isnum", "nums", "texts")

    def __init__(self, raw: list[Any] | Callable[[], list[Any]], arrays: tuple[Any, Any, Any] | None = None) -> None:
        import numpy as np

        self._raw = raw
        self.texts: Any = None
        if arrays is not None:  # (numbers, which are missing, which are numbers) made by the caller
            self.nums, self.isnone, self.isnum = arrays
            return
        assert isinstance(raw, list)
        n, nan = len(raw), math.nan
        if set(map(type, raw)) <= _NUMBER_TYPES:  # (numbers and None: at once)
            self.isnone = np.fromiter(map(is_, raw, repeat(None)), bool, n)
            self.isnum = ~self.isnone
            self.nums = np.array(raw, float)
            return
        self.isnone = np.fromiter((v is None for v in raw), bool, n)
        self.isnum = np.fromiter((type(v) is float or type(v) is int or _is_num(v) for v in raw), bool, n)
        self.nums = np.fromiter((v if type(v) is float else float(v) if self.isnum[i] else nan
                                 for i, v in enumerate(raw)), float, n)

    @property
    def raw(self) -> list[Any]:
        if not isinstance(self._raw, list):
            self._raw = self._raw()
        return self._raw

    def text(self) -> Any:
        import numpy as np

        if self.texts is None:
            self.texts = np.array([None if v is None else _text(v).lower() for v in self.raw], dtype=object)
        return self.texts


_NUMBER_TYPES = {int, float, type(None)}
_STATUS_CODES = {s.value: i for i, s in enumerate(TrialStatus)}
_STATUS_RANKS: Any = None  # a status code's rank among the statuses' names (a numpy array, made with the first index)
_NUMERIC_SORTS = ("seq", "metric", "latest", "duration", "start", "end", "nInter")


class _Rows:
    """Every trial's fields a query of an index reads, one list each in trial order (made when first asked for):
    ``id``, a summary's fields, ``final`` and ``param:NAME``."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._kept: dict[str, list[Any]] = {}

    def get(self, name: str) -> list[Any]:
        hit = self._kept.get(name)
        if hit is None:
            hit = self._kept[name] = self._make(name)
        return hit

    def _make(self, name: str) -> list[Any]:
        raise NotImplementedError

    @staticmethod
    def value(s: dict[str, Any], name: str) -> Any:
        """Field ``name`` of the summary ``s``."""
        if name.startswith("param:"):
            return s["params"].get(name[6:]) if isinstance(s["params"], dict) else None
        return s[name]

    def column(self, name: str, now_ms: int = 0) -> _Column:
        """Field ``name`` (``duration``: until ``now_ms`` for a running trial) as a :class:`_Column`."""
        return _Column(self.durations(now_ms) if name == "duration" else self.get(name))

    def status_codes(self) -> Any:
        """Every trial's status as its code (an array)."""
        import numpy as np

        return np.fromiter((_STATUS_CODES[s] for s in self.get("status")), np.int8, self.n)

    def durations(self, now_ms: int) -> list[float | None]:
        """Each trial's duration in seconds (a running one: until ``now_ms``), as :func:`_duration`."""
        return [d if d is not None else None if st is None else (now_ms - st) / 1000
                for d, st in zip(self.get("duration"), self.get("start"), strict=True)]

    def finals(self, key: str) -> list[float | None]:
        """Each trial's final result ``key``, as :func:`_final_key`."""
        return [_final_of(f, key) for f in self.get("final")]


class _SummaryRows(_Rows):
    """The fields of every trial's summary."""

    def __init__(self, summaries: list[dict[str, Any]]) -> None:
        super().__init__(len(summaries))
        self.summaries = summaries

    def _make(self, name: str) -> list[Any]:
        value = self.value
        return [value(s, name) for s in self.summaries]


class _ColumnRows(_Rows):
    """The fields of every trial from a snapshot's index columns (no trial a snapshot holds is read), but those of
    the trials built since (changed or new: ``changed``, position -> summary), taken from their summaries."""

    def __init__(self, ids: list[str], cols: IndexColumns, changed: dict[int, dict[str, Any]]) -> None:
        super().__init__(len(ids))
        self.ids, self.cols, self.changed = ids, cols, changed

    def _make(self, name: str) -> list[Any]:
        if name == "id":
            return self.ids
        out = self._base(name)
        out.extend(repeat(None, self.n - len(out)))
        value = self.value
        for i, s in self.changed.items():
            out[i] = value(s, name)
        return out

    _NUMBERS = ("seq", "nInter", "metric", "latest", "start", "end", "duration")

    def summary(self, i: int) -> dict[str, Any] | None:
        """The summary of trial ``i`` (one the snapshot holds, not changed since) from the columns, as
        :func:`summarize` makes it; None where its parameters are not a dict of names (read the trial)."""
        cols = self.cols
        col = cols.column
        j = col("shape")[i]
        if j < 0:
            return None
        get = self.get
        try:  # (the fields of an index_row, in its order: each column by its kind)
            row = [cols.item(name, i) if kind == "o" else get(name)[i] if kind == "j" else col(name)[i]
                   for name, kind in INDEX_FIELDS]
        except ValueError:  # (not as written: the trial is read instead)
            return None
        row.append({k: get(f"param:{k}")[i] for k in cols.shapes[j]})
        return row_summary(self.ids[i], row)

    def column(self, name: str, now_ms: int = 0) -> _Column:
        """:meth:`_Rows.column` of a numeric field from the snapshot's arrays at once (those of the changed trials
        from their summaries)."""
        import numpy as np

        if name not in self._NUMBERS and not (name.startswith("param:") and self.cols.kind(name) == "d"):
            return super().column(name, now_ms)
        col, k, n = self.cols.column, self.cols.n, self.n
        nan = math.nan
        if name in ("start", "end"):
            nums = np.trunc(np.frombuffer(col("started" if name == "start" else "ended"), float) * 1000)
        elif name == "duration":
            nums = np.frombuffer(col("duration"), float).copy()
            start = np.trunc(np.frombuffer(col("started"), float) * 1000)
            running = np.isnan(nums) & ~np.isnan(start)
            nums[running] = (now_ms - start[running]) / 1000
        else:
            nums = np.frombuffer(col(name), np.int64 if name in ("seq", "nInter") else float).astype(float)
        if n > k or self.changed:
            nums = np.concatenate([nums, np.full(n - k, nan)])
            value = self.value
            for i, s in self.changed.items():
                v = _duration(s, now_ms) if name == "duration" else value(s, name)
                nums[i] = nan if v is None else v
        isnum = ~np.isnan(nums)
        if name == "duration":
            return _Column(lambda: self.durations(now_ms), (nums, ~isnum, isnum))
        return _Column(lambda: self.get(name), (nums, ~isnum, isnum))

    def status_codes(self) -> Any:
        import numpy as np

        codes = np.frombuffer(self.cols.column("status"), np.int8).copy()
        if self.n > len(codes) or self.changed:
            codes = np.concatenate([codes, np.zeros(self.n - len(codes), np.int8)])
            for i, s in self.changed.items():
                codes[i] = _STATUS_CODES[s["status"]]
        return codes

    def _base(self, name: str) -> list[Any]:
        col = self.cols.column
        if name in ("seq", "nInter"):
            return col(name).tolist()  # type: ignore[no-any-return]
        if name == "status":
            return [INDEX_STATUSES[c] for c in col("status")]
        if name in ("metric", "latest", "duration"):
            return [None if v != v else v for v in col(name)]
        if name in ("start", "end"):
            return [None if v != v else int(v * 1000) for v in col("started" if name == "start" else "ended")]
        if name in ("message", "final", "source", "parameterId", "env", "exitCode") or name.startswith("param:"):
            got = self.cols.values(name)
            return [None] * self.cols.n if got is None else list(got)
        raise KeyError(name)


def _field_column(rows: _Rows, name: str, now_ms: int, keys: tuple[frozenset[str], frozenset[str]]) -> _Column:
    """:func:`_getter` of every trial of ``rows``, as a :class:`_Column`."""
    n = name.lower()
    if n in ("metric", "default"):
        return rows.column("metric")
    if n == "status":
        return rows.column("status")
    if n in ("no", "seq", "trial"):
        return rows.column("seq")
    if n == "id":
        return rows.column("id")
    if n == "duration":
        return rows.column("duration", now_ms)
    if name.startswith("metric:"):
        return _Column(rows.finals(name[7:]))
    if name in keys[0] and name not in keys[1]:
        return _Column(rows.finals(name))
    return rows.column(f"param:{name}")


class TrialIndex:
    """Every trial of one state version, in order (their fields as :class:`_Rows`; a trial's view made when a page
    shows it: ``view(position)``), with what a query of them needs kept: the orders asked for (per sort key and
    direction: a page of a sorted list of 100k trials is a slice, not a sort), the fields a search tested (as arrays:
    a condition is tested on every trial at once) and the last few filtered lists."""

    def __init__(self, rows: _Rows, version: Any, view: Callable[[int], TrialView]) -> None:
        global _STATUS_RANKS
        import numpy as np

        if _STATUS_RANKS is None:
            names = sorted(_STATUS_CODES)
            _STATUS_RANKS = np.array([names.index(v) for v in _STATUS_CODES], np.int8)
        self.rows, self.version, self.view, self.n = rows, version, view, rows.n
        self.orders: dict[tuple[str, bool], Any] = {}
        self.hits: dict[tuple[Any, ...], Any] = {}
        self.columns: dict[tuple[Any, ...], bytes] = {}
        self._fields: dict[tuple[str, bool], _Column] = {}
        self._status: Any = None
        self._text: Any = None

    def statuses(self) -> Any:
        """Every trial's status code (an array)."""

        if self._status is None:
            self._status = self.rows.status_codes()
        return self._status

    def prepare(self, keys: tuple[frozenset[str], frozenset[str]]) -> Iterator[None]:
        """Make ahead (a step per field: the caller may yield between them) what the first look at a big
        experiment asks for: the orders by metric both ways, the trials' statuses, the parameters' and final
        results' fields."""

        for desc in (False, True):
            self.order(TrialQuery(sort="metric", descending=desc))
            yield
        self.statuses()
        yield
        now = int(time.time() * 1000)
        for name in [*keys[1], *keys[0]]:
            self.field(name, now, keys)
            yield

    def field(self, name: str, now_ms: int, keys: tuple[frozenset[str], frozenset[str]]) -> _Column:
        """The field ``name`` of a search condition (see :func:`_getter`) as arrays (kept, but for durations)."""
        final = name in keys[0] and name not in keys[1]
        hit = self._fields.get((name, final))
        if hit is None:
            hit = _field_column(self.rows, name, now_ms, keys)
            if name.lower() != "duration":
                self._fields[(name, final)] = hit
        return hit

    def order(self, query: TrialQuery) -> Any:
        """The positions of every trial in the order of ``query`` (an array; missing values last both ways)."""
        import numpy as np

        if query.sort == "seq" and not query.descending:
            return np.arange(self.n)
        key = (query.sort, query.descending)
        hit = self.orders.get(key)
        if hit is None:
            now = int(time.time() * 1000)
            col = None
            if query.sort in _NUMERIC_SORTS or query.sort.startswith("metric:"):
                field = query.sort if query.sort.startswith("metric:") or query.sort == "duration" else ""
                col = self.field(field, now, query.keys) if field else self.rows.column(query.sort)
            elif query.sort.startswith("param:"):
                col = self.field(query.sort[6:], now, (frozenset(), frozenset()))
                if not bool((col.isnum | col.isnone).all()):
                    col = None  # text among them: sorted as text after the numbers (below)
            if col is not None:  # (stable: ties in trial order, NaN last)
                hit = np.argsort(-col.nums if query.descending else col.nums, kind="stable")
            else:
                hit = self._sorted(query, now)
            if query.sort != "duration":  # (running trials' durations grow with the clock)
                self.orders[key] = hit
        return hit

    def sort_values(self, query: TrialQuery, now_ms: int) -> list[Any]:
        """The value of ``query``'s sort field of every trial (what :meth:`TrialQuery.value_key` ranks)."""
        sort = query.sort
        if sort == "duration":
            return self.rows.durations(now_ms)
        if sort.startswith("metric:"):
            return self.rows.finals(sort[7:])
        return self.rows.get(sort)

    def _sorted(self, query: TrialQuery, now_ms: int) -> Any:
        """The order of ``query`` where its values are not all numbers: by :meth:`TrialQuery.value_key`, as
        ``sorted`` gives it (stable both ways); values all text (ids, statuses, a text parameter) ranked at once."""
        import numpy as np

        if query.sort == "status":  # (by the status's name, from the codes)
            ranks = _STATUS_RANKS[self.statuses()]
            return np.argsort(-ranks if query.descending else ranks, kind="stable")
        values = self.sort_values(query, now_ms)
        texts = None
        if all(type(v) is str for v in values):
            texts = values if not query.sort.startswith("param:") else [json.dumps(v) for v in values]
        if texts is not None and texts:
            ranks = np.unique(np.array(texts), return_inverse=True)[1].reshape(-1)
            return np.argsort(-ranks if query.descending else ranks, kind="stable")
        vk = query.value_key()
        return np.array(sorted(range(len(values)), key=lambda i: vk(values[i]), reverse=query.descending),
                        dtype=np.int64)

    def mask(self, query: TrialQuery) -> Any:
        """Which trials (by position) ``query``'s status filter and search let through."""
        import numpy as np

        out = np.ones(self.n, bool)
        if query.statuses is not None:
            out &= np.isin(self.statuses(), [_STATUS_CODES[x] for x in query.statuses])
        now = int(time.time() * 1000)
        for part in (p.strip() for p in query.search.split(";")):
            if part:
                out &= self._condition(part, now, query.keys)
        return out

    def _condition(self, part: str, now_ms: int, keys: tuple[frozenset[str], frozenset[str]]) -> Any:
        """:func:`_condition` tested on every trial at once."""
        import numpy as np

        n = self.n
        m = _CONDITION.match(part)
        if m is None:  # free text: part of the id or the message, or the Trial No.
            q = part.lower()
            if self._text is None:
                rows = self.rows
                self._text = (np.array([x.lower() for x in rows.get("id")], dtype=str),
                              np.array([(x or "").lower() for x in rows.get("message")], dtype=str),
                              np.fromiter(rows.get("seq"), np.int64, n))
            ids, messages, seqs = self._text
            out = (np.char.find(ids, q) >= 0) | (np.char.find(messages, q) >= 0)
            if q.isdigit() and q == str(int(q)):
                out |= seqs == int(q)
            return out
        name, op, raw = m.groups()
        col = self.field(name, now_ms, keys)
        rng = _RANGE.match(raw)
        if rng is not None:
            lo, hi = _number(rng[1]), _number(rng[2])
            if lo is None or hi is None:
                return np.zeros(n, bool)
            return col.isnum & (col.nums >= lo) & (col.nums <= hi)
        num = _number(raw.strip())
        if op in ("=", ":", "!=", "≠"):
            if num is None:
                eq = col.text() == raw.strip().lower()
            else:
                eq = np.where(col.isnum, col.nums == num, col.text() == raw.strip().lower())
            eq &= ~col.isnone
            return eq if op in ("=", ":") else ~eq
        if num is None:
            return np.zeros(n, bool)
        test = {">": np.greater, "<": np.less, ">=": np.greater_equal, "<=": np.less_equal}[op]
        return col.isnum & test(col.nums, num)

    def matching(self, query: TrialQuery) -> Any:
        """The positions of the trials ``query`` matches, in its order."""
        order = self.order(query)
        if query.statuses is None and not query.search:
            return order
        key = (query.sort, query.descending, query.statuses, query.search)
        hit = self.hits.get(key)
        if hit is None:
            hit = order[self.mask(query)[order]]
            if query.sort != "duration" and not (query.search and "duration" in query.search.lower()):
                if len(self.hits) >= 8:
                    self.hits.pop(next(iter(self.hits)))
                self.hits[key] = hit
        return hit


# --- columns (what a chart of every trial needs) -------------------------------------------------------

COLUMN_FIELDS = ("seq", "status", "metric", "latest", "duration", "start", "end", "nInter")
MAX_COLUMNS = 64


def parse_columns(raw: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(x.strip() for x in raw.split(",") if x.strip()))
    if not names or len(names) > MAX_COLUMNS:
        raise QueryError(f"fields must name 1 to {MAX_COLUMNS} of {', '.join(COLUMN_FIELDS)}, param:NAME or "
                            "metric:KEY (comma-separated)")
    bad = [n for n in names if n not in COLUMN_FIELDS and not n.startswith(("param:", "metric:"))]
    if bad:
        raise QueryError(f"unknown field {bad[0]!r}: one of {', '.join(COLUMN_FIELDS)}, param:NAME or metric:KEY")
    return names


def _column(values: list[Any]) -> bytes:
    """A JSON array; numbers with 7 significant digits (what a chart shows), non-finite ones as null."""
    out = []
    for v in values:
        if v is None or v is True or v is False:
            out.append("null" if v is None else ("true" if v else "false"))
        elif type(v) is int:
            out.append(str(v))
        elif type(v) is float:
            out.append(format(v, ".7g") if math.isfinite(v) else "null")
        else:
            out.append(dumps(v).decode())
    return ("[" + ",".join(out) + "]").encode()


def columns_json(index: TrialIndex, names: tuple[str, ...], query: TrialQuery, seq: int, most: int | None = None
                 ) -> bytes:
    """The ids and the named fields of the trials ``query`` matches, in its order, one array per field (a chart of
    100k trials needs these, not their whole summaries); ``most``: at most that many, evenly spaced in that order
    (the first and the last kept; ``total`` says how many matched)."""
    key = ("columns", names, query.sort, query.descending, query.statuses, query.search, most)
    hit = index.columns.get(key)
    if hit is not None:
        return hit
    order = index.matching(query)
    total = len(order)
    if most is not None and total > most:
        order = [order[round(k * (total - 1) / (most - 1))] for k in range(most)] if most > 1 else [order[0]]
    now = int(time.time() * 1000)
    rows = index.rows
    ids = rows.get("id")
    parts = [b'{"seq":', str(seq).encode(), b',"total":', str(total).encode(), b',"id":',
             dumps([ids[i] for i in order])]
    for name in names:
        if name == "duration":
            values = rows.durations(now)
        elif name.startswith("metric:"):
            values = rows.finals(name[7:])
        else:
            values = rows.get(name)
        parts += [b",", dumps(name), b":", _column([values[i] for i in order])]
    data = b"".join(parts) + b"}"
    if "duration" not in names and query.sort != "duration":
        if len(index.columns) >= 4:
            index.columns.pop(next(iter(index.columns)))
        index.columns[key] = data
    return data


# --- overview --------------------------------------------------------------------------------------


def _config_json(config: dict[str, Any]) -> dict[str, Any]:
    from nnix.config import ExperimentConfig

    try:
        return ExperimentConfig.model_validate(config).to_json()
    except Exception:  # an old or foreign config: show what is stored
        return dict(config)
