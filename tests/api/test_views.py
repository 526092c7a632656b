"""Read models: summaries kept up to date incrementally, serialized lists cached per state version."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from nnix.core.events import MetricReported, TrialEnded
from nnix.core.state import Metric, TrialState
from nnix.core.status import MetricType, TrialStatus
from nnix.query.summaries import MetricScan, summarize
from nnix.store.base import Stored

P, F = MetricType.PERIODICAL, MetricType.FINAL


def test_incremental_summary_equals_a_fresh_one() -> None:
    t = TrialState("t1", 0, 0, {"x": 1}, "algorithm", 1.0)
    scan = MetricScan()
    steps: list[Callable[[], object]] = [
        lambda: t.metrics.append(Metric(P, 0, 0.1, 2.0, 0)),
        lambda: t.metrics.append(Metric(P, 1, 0.2, 3.0, 1)),
        lambda: t.metrics.append(Metric(F, 0, 0.9, 4.0, 3)),
        lambda: t.metrics.insert(2, Metric(P, 2, 0.3, 3.5, 2)),  # out of order: inserted before the end
        lambda: t.metrics.append(Metric(P, 3, 0.4, 5.0, 4)),
        lambda: setattr(t, "metrics", [Metric(P, 0, 7.0, 6.0, 0)]),  # a retry starts over
        lambda: None,
    ]
    for step in steps:
        step()
        assert summarize(t, scan) == summarize(t), step
    assert summarize(t, scan)["nInter"] == 1 and summarize(t, scan)["latest"] == 7.0


def test_an_ended_trials_view_holds_only_its_json_and_answers_as_the_summary_does() -> None:
    """A running trial's view holds its summary; an ended one's only the JSON (decoded when asked: 100k warmed views
    would hold ~2 KB more each), except where the JSON cannot give it back (a non-finite final result); NNI's
    TrialJobInfo of an ended trial is made again when its view is."""
    from types import SimpleNamespace

    from nnix.core.events import ExperimentCreated, TrialCreated, TrialStarted, TrialWarning
    from nnix.core.state import ExperimentState
    from nnix.query.summaries import TrialViews

    state = ExperimentState()
    events: list[Any] = [ExperimentCreated("e1", {}, 1)]
    for tid, final in (("a", 0.5), ("b", None), ("c", float("nan"))):
        events += [TrialCreated(tid, len(events), len(events), {"x": tid}), TrialStarted(tid, "env", "/tmp/" + tid)]
        if final is not None:
            events += [MetricReported(tid, F, 0, final, 0, 0), TrialEnded(tid, TrialStatus.SUCCEEDED, 0)]
    for seq, e in enumerate(events, 1):
        state.apply(Stored(seq, 10.0 + seq, e))
    views = TrialViews(SimpleNamespace(state=state))  # type: ignore[arg-type]
    a, b, c = (views.entry(state.trials[t]) for t in "abc")
    assert a.held is None and a.summary == summarize(state.trials["a"]) and a.summary["final"] == 0.5
    assert b.held is not None and b.held == summarize(state.trials["b"])
    assert c.held is not None and c.held["hasFinal"] and c.held["final"] != c.held["final"]  # (NaN, kept as is)
    made: list[str] = []

    def info(v: Any, final: Any) -> dict[str, Any]:
        made.append(v.summary["id"])
        return {"id": v.summary["id"], "warnings": v.summary["warnings"], "final": final.value}

    assert views.compat(a, info) == views.compat(a, info) == b'{"id":"a","warnings":0,"final":0.5}' and made == ["a"]
    state.apply(Stored(len(events) + 1, 99.0, TrialWarning("a", "metrics", "line 9: bad", 1, 9)))
    a2 = views.entry(state.trials["a"])
    assert a2 is a and a.held is None and a.summary["warnings"] == 1
    assert views.compat(a, info) == b'{"id":"a","warnings":1,"final":0.5}' and made == ["a", "a"]
    state.totals = None  # (an older snapshot's state: the totals are to be counted from every summary)
    assert TrialViews(SimpleNamespace(state=state)).entry(state.trials["a"]).held is not None  # type: ignore[arg-type]


def test_trial_list_follows_the_state(finished: Path, h: Any) -> None:
    manager, app = h.viewer(finished)

    async def go() -> None:
        async with h.client(app) as c:
            first = (await c.get("/api/v1/nni/trial-jobs")).json()
            assert (await c.get("/api/v1/nni/trial-jobs")).json() == first
            page = (await c.get("/api/nnix/v1/trials", params={"sort": "-metric"})).json()
            seq = manager.state.last_seq
            manager.state.apply(Stored(seq + 1, 9.0, MetricReported("ddddd", F, 0, 0.99, 0, 3)))
            manager.state.apply(Stored(seq + 2, 9.5, TrialEnded("ddddd", TrialStatus.SUCCEEDED, 0)))
            after = (await c.get("/api/v1/nni/trial-jobs")).json()
            d = next(x for x in after if x["trialJobId"] == "ddddd")
            assert d["status"] == "SUCCEEDED" and "finalMetricData" in d
            page2 = (await c.get("/api/nnix/v1/trials", params={"sort": "-metric"})).json()
            assert page2["items"][0]["id"] == "ddddd" and page2["seq"] > page["seq"]

    h.run(go())


def test_warming_summarizes_the_trials_of_a_snapshot_a_chunk_at_a_time_without_building_them(tmp_path: Path) -> None:
    """A state read from a snapshot builds a trial at its first read; the warm-up summarizes them a chunk per loop
    turn (the REST server answers meanwhile), not all at once before the first request, and leaves them unbuilt
    in the state (a full list of 100k trials does not hold every trial)."""
    import asyncio
    from types import SimpleNamespace

    from nnix.core.events import ExperimentCreated, TrialCreated, TrialStarted
    from nnix.query.snapshot import TrialTable, fold_store, write_snapshot
    from nnix.query.summaries import TrialViews
    from nnix.store.sqlite import SqliteStore

    store = SqliteStore(tmp_path / "s.sqlite")
    store.append([ExperimentCreated("e1", {}, 1)])
    for i in range(10):
        store.append([TrialCreated(f"t{i}", i, i, {"x": i}), TrialStarted(f"t{i}", "local-env", "/tmp", 1),
                      MetricReported(f"t{i}", F, 0, i * 0.1, 0, i), TrialEnded(f"t{i}", TrialStatus.SUCCEEDED, 0)])
    write_snapshot(store, fold_store(store))
    state = fold_store(store)
    trials = state.trials
    assert isinstance(trials, TrialTable) and trials.built() == []
    views = TrialViews(SimpleNamespace(state=state))  # type: ignore[arg-type]

    async def go() -> list[int]:
        built = []
        task = asyncio.ensure_future(views.warm(chunk=3))
        while not task.done():
            await asyncio.sleep(0)
            built.append(len(views._cache))
        return built

    built = asyncio.run(go())
    assert built[0] <= 3 and built[-1] == 10 and len(set(built)) >= 4  # 3, 6, 9, 10 trials read, a turn apart
    assert trials.built() == []
    assert [views.summary(t)["metric"] for t in state.trials.values()] == [i * 0.1 for i in range(10)]


def test_full_lists_of_a_warmed_snapshot_read_no_trial_again(finished: Path, h: Any, monkeypatch: Any) -> None:
    """Once warmed, NNI's trial-jobs and export-data and the native full list answer from the kept views: no trial
    a snapshot holds is read from it again (a 100k-trial list costs a join, not a decode per trial)."""
    import json

    from nnix.api.app import create_app
    from nnix.api.compat import trial_info
    from nnix.home import STORE_NAME
    from nnix.host.build import build_manager
    from nnix.query import snapshot as snap_mod
    from nnix.query.snapshot import TrialTable, fold_store, write_snapshot
    from nnix.store.sqlite import SqliteStore

    store = SqliteStore(finished / STORE_NAME)
    full = fold_store(store)
    write_snapshot(store, full)
    store.close()
    want_jobs = [trial_info(t, exp_dir=finished) for t in full.trials.values()]
    manager = build_manager(finished)
    assert isinstance(manager.state.trials, TrialTable) and manager.state.trials.pending

    async def go() -> None:
        app = create_app(manager, read_only=True)
        await app.ctx.extra["warm"]

        def read_again(*_: Any, **__: Any) -> Any:
            raise AssertionError("a trial was read from the snapshot again")

        monkeypatch.setattr(snap_mod._Source, "build", read_again)
        async with h.client(app) as c:
            for _ in range(2):
                jobs = await c.get("/api/v1/nni/trial-jobs")
                assert jobs.status_code == 200 and jobs.json() == json.loads(json.dumps(want_jobs)), jobs.text
                export = (await c.get("/api/v1/nni/export-data")).json()
                assert sorted(r["trialJobId"] for r in export) == sorted(
                    t.trial_id for t in full.trials.values() if t.final is not None)
                every = (await c.get("/api/nnix/v1/trials", params={"limit": "all"})).json()
                assert [x["id"] for x in every["items"]] == list(full.trials) and every["total"] == len(full.trials)
            failed = (await c.get("/api/v1/nni/trial-jobs", params={"status": "FAILED"})).json()
            assert [x["trialJobId"] for x in failed] == [t.trial_id for t in full.trials.values()
                                                          if t.status is TrialStatus.FAILED]
        built = manager.state.trials
        assert isinstance(built, TrialTable) and [t.trial_id for t in built.built()] == [
            t.trial_id for t in full.trials.values() if not t.status.is_terminal]  # the others were never built

    h.run(go())


def test_a_repeated_full_list_is_sent_as_kept_until_the_state_moves(finished: Path, h: Any, monkeypatch: Any) -> None:
    """NNI's trial-jobs and export-data, asked again in the same state, are sent as the bytes streamed the first time
    (no trial looked at again: many clients polling share one build); an event makes the next list anew; a list over
    the memory bound (FULL_KEEP) is not kept joined, but as its parts (the trials' views' own bytes, not copied),
    streamed again without a look at any trial."""
    from nnix.query import summaries as views_mod

    manager, app = h.viewer(finished)
    lists = ("/api/v1/nni/trial-jobs", "/api/v1/nni/export-data", "/api/v1/nni/trial-jobs?status=SUCCEEDED")
    each = views_mod.TrialViews.each
    walks: list[int] = []

    def counted(self: Any, *args: Any) -> Any:
        walks.append(1)
        return each(self, *args)

    monkeypatch.setattr(views_mod.TrialViews, "each", counted)

    async def go() -> None:
        async with h.client(app) as c:
            first = {url: (await c.get(url)).content for url in lists}
            assert all(first.values()) and first[lists[0]] != first[lists[2]] and len(walks) == 3
            for url in lists:
                again = await c.get(url)
                assert again.status_code == 200 and again.content == first[url], url
            assert len(walks) == 3  # (sent as kept)
            seq = manager.state.last_seq
            manager.state.apply(Stored(seq + 1, 9.0, MetricReported("ddddd", F, 0, 0.99, 0, 3)))
            manager.state.apply(Stored(seq + 2, 9.5, TrialEnded("ddddd", TrialStatus.SUCCEEDED, 0)))
            jobs = (await c.get(lists[0])).json()
            assert next(x for x in jobs if x["trialJobId"] == "ddddd")["status"] == "SUCCEEDED"
            export = (await c.get(lists[1])).json()
            assert {"parameter": {"x": 0.4, "opt": "b"}, "value": "0.99", "trialJobId": "ddddd"} in export
            assert len(walks) == 5
            monkeypatch.setattr(views_mod, "FULL_KEEP", 64)  # (smaller than either list)
            seq = manager.state.last_seq
            manager.state.apply(Stored(seq + 1, 9.9, MetricReported("ddddd", P, 0, 0.5, 1, 3)))
            big = [(await c.get(lists[0])).content for _ in range(2)]
            assert big[0] == big[1] and len(big[0]) > 64 and len(walks) == 6  # (made once, streamed again)
            kept = app.ctx.views.kept("trial-jobs?", (id(manager.state), manager.state.last_seq))
            assert isinstance(kept, list) and len(kept) == len(manager.state.trials)  # not joined (over the bound):
            held = [app.ctx.views.entry(t).compat for t in manager.state.trials.values()]
            assert all(a is b for a, b in zip(kept, held, strict=True))  # its parts are the views' own bytes (no copy)

    h.run(go())


def test_the_index_answers_every_query_as_a_sort_of_the_whole_list_does(finished: Path, h: Any) -> None:
    """A query answered from the index (orders kept per sort key, conditions tested on arrays of a field) gives the
    same trials in the same order as filtering and sorting the whole list of summaries (the streamed full list)."""
    from nnix.core.events import TrialCreated
    from nnix.query.summaries import TrialQuery, TrialViews

    manager, _ = h.viewer(finished)
    st = manager.state
    seq = st.last_seq
    extra = [TrialCreated("fffff", 5, 5, {"x": True, "opt": 3}), TrialCreated("ggggg", 6, 6, {"x": 0.1, "opt": None}),
             TrialCreated("hhhhh", 7, 7, {"x": float("nan"), "opt": [1, 2]})]
    for k, e in enumerate(extra, 1):  # booleans, numbers among text, lists, a missing value: as the list sorts them
        st.apply(Stored(seq + k, 9.0, e))
    views = TrialViews(manager)
    keys = (frozenset(st.overview_totals()["metricKeys"]), frozenset(st.overview_totals()["paramKeys"]))
    sorts = ["seq", "-seq", "metric", "-metric", "latest", "-latest", "status", "-status", "id", "nInter", "-end",
             "start", "param:x", "-param:x", "param:opt", "-param:opt", "metric:acc", "-metric:acc", "param:none"]
    searches = ["", "x>0.3", "x>=0.2; opt=b", "x:[0.1, 0.4]", "metric>=0.5", "acc>0.5", "metric:acc!=0.9",
                "status=failed", "boom", "opt=a; ccc", "x>abc", "x=true", "opt=3", "opt!=b", "x<0.15", "seq<=2",
                "id=ccccc", "opt:[1, 5]", "x=0.1", "3", "03", "canceled"]
    for sort in sorts:
        for search in searches:
            for status in (None, frozenset({"SUCCEEDED", "WAITING"})):
                q = TrialQuery(statuses=status, search=search.lower(), sort=sort.lstrip("-"),
                               descending=sort.startswith("-"), limit=None, keys=keys)
                whole = [v.summary["id"] for v in q.run(views.all())[1]]
                indexed = [v.summary["id"] for v in q.run(views.index())[1]]
                assert indexed == whole, (sort, search, status)


def _mixed_store(path: Path, n: int, scalar: bool = False) -> Any:
    """A store of ``n`` trials of mixed statuses, dict and scalar (some not finite) final results (``scalar``: all
    floats, none NaN), parameters of several types (some missing), messages; its snapshot written after the first
    ``n - 6`` trials."""
    from nnix.core.events import ExperimentCreated, TrialCreated, TrialStarted
    from nnix.query.snapshot import fold_store, write_snapshot
    from nnix.store.sqlite import SqliteStore

    store = SqliteStore(path)
    store.append([ExperimentCreated("e1", {}, 1)])
    kinds = [TrialStatus.SUCCEEDED, TrialStatus.FAILED, TrialStatus.USER_CANCELED, TrialStatus.EARLY_STOPPED]

    def trial(i: int) -> None:
        tid = f"t{i:03d}"
        params: dict[str, Any] = {"lr": [0.1, 0.01, 1, 0.001][i % 4], "opt": ["adam", "sgd", 'q"x', 3][i % 4]}
        if i % 5:
            params["flag"] = i % 2 == 0
        if i % 7 == 0:
            params["deep"] = {"a": [i]}
        if i % 6:
            params["wd"] = i * 0.25 - 3.5
        store.append([TrialCreated(tid, i + 1, i, params)])
        if i % 11 == 10:
            return  # waiting
        store.append([TrialStarted(tid, "local-env", f"/tmp/{tid}", 1)])
        store.append([MetricReported(tid, MetricType.PERIODICAL, k, {"default": k * 0.5 + i, "acc": k} if k % 2
                                     else float(i % 3), k, i) for k in range(3)])
        if i % 9 == 8:
            return  # running
        final: Any = {"default": (i * 37 % 17) / 3, "acc": (i % 5) / 7, "tag": "x"} if i % 3 else float(i % 6)
        if i % 13 == 12:
            final = float("inf") if i % 2 else float("nan")
        if scalar:
            final = float(i % 6) * 0.5 if isinstance(final, dict) or final != final else final
        if i % 4 != 3:
            store.append([MetricReported(tid, MetricType.FINAL, 0, final, 9, i)])
        store.append([TrialEnded(tid, kinds[i % 4], i % 2, "" if i % 3 else f"oom at step {i}")])

    for i in range(n - 6):
        trial(i)
    write_snapshot(store, fold_store(store))
    for i in range(n - 6, n):  # new trials after the snapshot
        trial(i)
    # trials the snapshot holds change after it: a running one ends, a waiting one starts, an ended one fails late
    store.append([MetricReported("t008", MetricType.FINAL, 0, {"default": 99.0, "acc": 0.9}, 9, 8),
                  TrialEnded("t008", TrialStatus.SUCCEEDED, 0), TrialStarted("t010", "local-env", "/tmp/t010", 1),
                  TrialEnded("t001", TrialStatus.FAILED, 3, "late"), TrialEnded("t002", TrialStatus.FAILED, 3)])
    return store


_QUERIES = [
    *({"sort": f"{d}{f}"} for d in ("", "-") for f in (
        "seq", "id", "status", "metric", "latest", "duration", "start", "end", "nInter", "param:lr", "param:opt",
        "param:flag", "param:deep", "param:none", "param:wd", "metric:acc", "metric:tag", "metric:default")),
    {"status": "FAILED"}, {"status": "SUCCEEDED,RUNNING", "sort": "-metric"}, {"q": "lr>0.005"},
    {"q": "opt=adam; flag=true", "sort": "param:lr"}, {"q": "acc:[0.1, 0.5]"}, {"q": "oom"}, {"q": "t01"}, {"q": "3"},
    {"q": "status=failed", "sort": "-duration"}, {"q": "duration>0"}, {"q": "metric:acc>0.2"}, {"q": "deep!=3"},
    {"q": "metric<2; nInter>=3"}, {"q": "id:t005"}, {"q": "opt=3"}, {"q": "tag=x", "status": "SUCCEEDED"},
    {"q": "wd>=0", "sort": "-param:wd"}, {"q": "wd=-3.25"}, {"q": "default:[1, 4]"},
]


def _indexes(state: Any) -> tuple[Any, Any]:
    """The index of ``state`` a viewer builds, and the one of every trial's summary (the full-summary path)."""
    from types import SimpleNamespace

    from nnix.query.summaries import TrialIndex, TrialViews, _SummaryRows

    got = TrialViews(SimpleNamespace(state=state)).index()  # type: ignore[arg-type]
    every = TrialViews(SimpleNamespace(state=state)).all()  # type: ignore[arg-type]
    return got, TrialIndex(_SummaryRows([v.summary for v in every]), got.version, every.__getitem__)


def _same_answers(got: Any, want: Any, state: Any) -> None:
    from nnix.query.summaries import TrialQuery, columns_json

    tot = state.overview_totals()
    keys = (frozenset(tot["metricKeys"]), frozenset(tot["paramKeys"]))
    names = ("seq", "status", "metric", "latest", "duration", "start", "end", "nInter", "param:lr", "param:opt",
             "param:wd", "metric:acc", "metric:default")
    for n in ("id", "seq", "status", "metric", "latest", "duration", "start", "end", "nInter", "message", "final",
              "param:lr", "param:opt", "param:flag", "param:deep", "param:none", "param:wd"):
        assert got.rows.get(n) == want.rows.get(n), n
    for params in _QUERIES:
        q = TrialQuery.parse({"limit": "all", **params})
        q.keys = keys
        assert got.matching(q).tolist() == want.matching(q).tolist(), params
        a, b = q.run(got), q.run(want)
        assert a[0] == b[0] and [v.encoded for v in a[1]] == [v.encoded for v in b[1]], params
        assert columns_json(got, names, q, 1, 7) == columns_json(want, names, q, 1, 7), params


def test_the_index_from_a_snapshots_columns_answers_as_every_summary(tmp_path: Path, monkeypatch: Any) -> None:
    """Sorted, filtered and searched lists from the snapshot's index columns (and the summaries of the trials
    changed or created after it) equal those of every trial's summary; building that index reads no trial the
    snapshot holds (a sorted page right after `nnix view` of 100k trials is then a slice)."""
    from nnix.query import snapshot as snap_mod
    from nnix.query import summaries as views_mod
    from nnix.query.snapshot import TrialTable, fold_store
    from nnix.query.summaries import TrialViews, _ColumnRows

    monkeypatch.setattr("time.time", lambda: 2e9)  # (running trials' durations: one clock for both)
    store = _mixed_store(tmp_path / "s.sqlite", 60)
    state = fold_store(store)
    trials = state.trials
    assert isinstance(trials, TrialTable) and trials.pending
    real = snap_mod._Source.build

    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("a trial the snapshot holds was read to build the index")

    monkeypatch.setattr(snap_mod._Source, "build", refuse)
    from types import SimpleNamespace

    idx = TrialViews(SimpleNamespace(state=state)).index()  # type: ignore[arg-type]
    assert isinstance(idx.rows, _ColumnRows)
    assert idx.order(views_mod.TrialQuery(sort="param:opt", descending=True)).size == 60
    total, page = views_mod.TrialQuery(sort="metric", descending=True, limit=20).run(idx)  # (summaries: columns)
    assert total == 60 and len(page) == 20
    monkeypatch.setattr(snap_mod._Source, "build", real)
    got, want = _indexes(state)
    assert isinstance(got.rows, _ColumnRows)
    assert got.rows.cols.kind("final") == "o" and got.rows.cols.kind("param:wd") == "d"
    _same_answers(got, want, state)


def test_damaged_or_missing_index_columns_are_made_again_from_the_records(tmp_path: Path, caplog: Any,
                                                                          monkeypatch: Any) -> None:
    """Index columns whose chunk does not match its checksum, or that the snapshot lacks (an older one), are not
    trusted: they are made from the trials' records, and the answers are those of every summary."""
    import sqlite3

    from nnix.query import columns as cols_mod
    from nnix.query import snapshot as snap_mod
    from nnix.query.snapshot import fold_store
    from nnix.query.summaries import _ColumnRows
    from nnix.store import sqlite as sqlite_mod

    monkeypatch.setattr("time.time", lambda: 2e9)
    monkeypatch.setattr(snap_mod, "ROWS_CHUNK", 7)  # the records decoded 7 at a time: 6 chunks, the last short
    store = _mixed_store(tmp_path / "s.sqlite", 40, scalar=True)
    snap = store.read_snapshot()
    assert snap is not None and len(snap.parts) == 3
    cols = snap.parts[2]
    assert isinstance(cols, sqlite_mod._Part)
    db = sqlite3.connect(tmp_path / "s.sqlite")
    n = cols.first + len(cols.crcs) - 1
    body = db.execute("SELECT body FROM snapshot_chunk WHERE n = ?", (n,)).fetchone()[0]
    db.execute("UPDATE snapshot_chunk SET body = ? WHERE n = ?", (body[:-1] + bytes([body[-1] ^ 1]), n))
    db.commit()
    db.close()
    state = fold_store(store)
    got, want = _indexes(state)
    assert isinstance(got.rows, _ColumnRows) and "index columns do not match" in caplog.text
    assert got.rows.cols.kind("param:wd") == "d"  # (floats: kept as doubles)
    _same_answers(got, want, state)
    # a snapshot without them (as an older nnix wrote it): made from the records
    body2, records, series, _ = snap_mod.encode_sections(fold_store(store))
    old = snap_mod.decode_snapshot(body2[:0] + _two_parts(body2, records, series), None)
    src = old.trials.source  # type: ignore[attr-defined]
    want_rows = [cols_mod.index_row(src.build(i, keep=False)) for i in range(len(src.finals))]
    built: dict[int, int] = {}
    for chunk in (7, 10**6):  # the records decoded 7 at a time or all at once: the same rows, the same trials built
        with monkeypatch.context() as m:
            m.setattr(snap_mod, "ROWS_CHUNK", chunk)
            build = snap_mod._Source.build

            def counted(*a: Any, chunk: int = chunk, build: Any = build, **k: Any) -> Any:
                built[chunk] = built.get(chunk, 0) + 1
                return build(*a, **k)

            m.setattr(snap_mod._Source, "build", counted)
            assert list(src.record_rows()) == want_rows
    assert built.get(7, 0) == built.get(10**6, 0) < len(want_rows) // 2, built
    got, want = _indexes(old)
    assert isinstance(got.rows, _ColumnRows)
    _same_answers(got, want, old)


def _two_parts(body: bytes, records: bytes, series: bytes) -> bytes:
    """A snapshot's body and parts as written before the index columns (two parts)."""
    import json

    n = int.from_bytes(body[:8], "little")
    head = json.loads(body[8:8 + n])
    head["experiment"]["parts"] = head["experiment"]["parts"][:2]
    text = json.dumps(head, separators=(",", ":")).encode()
    return len(text).to_bytes(8, "little") + text + body[8 + n:] + records + series


def test_a_long_series_left_in_the_store_is_read_by_a_thread(finished: Path, h: Any, monkeypatch: Any) -> None:
    """An ended trial whose series the state left in the store (beyond what it holds): the routes that send it (the
    native detail and its pages, NNI's metric-data/<id>) read it in a worker thread on a connection of its own,
    not on the manager's loop, and send it whole and right (its final result once)."""
    import threading

    import nnix.core.state as state_mod
    from nnix.core.events import TrialCreated, TrialStarted
    from nnix.home import STORE_NAME
    from nnix.query.summaries import SERIES_ON_LOOP
    from nnix.store.sqlite import SqliteStore

    n = SERIES_ON_LOOP + 2_000
    store = SqliteStore(finished / STORE_NAME)
    store.append([TrialCreated("fffff", 5, 5, {"x": 0.5, "opt": "a"}),
                  TrialStarted("fffff", "local-env", str(finished / "fffff"))]
                 + [MetricReported("fffff", P, k, k / n, k, 5) for k in range(n - 1)]
                 + [MetricReported("fffff", F, 0, 0.75, n - 1, 5), TrialEnded("fffff", TrialStatus.SUCCEEDED, 0)])
    store.close()
    monkeypatch.setattr(state_mod, "HOLD_ENDED_METRICS", 0)  # every ended trial's series stays in the store
    readers: list[str] = []
    read_trial = SqliteStore.read_trial

    def spying(self: SqliteStore, trial_id: str, kinds: Any) -> Any:
        readers.append(threading.current_thread().name)
        return read_trial(self, trial_id, kinds)

    monkeypatch.setattr(SqliteStore, "read_trial", spying)
    manager, app = h.viewer(finished)
    assert manager.state.trials["fffff"].held is None

    async def go() -> None:
        async with h.client(app) as c:
            d = (await c.get("/api/nnix/v1/trials/fffff")).json()
            assert d["metricCount"] == n and [m["value"] for m in d["metrics"] if m["type"] == "FINAL"] == [0.75]
            page = (await c.get("/api/nnix/v1/trials/fffff/metrics", params={"offset": n - 2})).json()
            assert [m["index"] for m in page] == [n - 2, n - 1]
            nni = (await c.get("/api/v1/nni/metric-data/fffff")).json()
            assert len(nni) == n and nni[-1]["type"] == "FINAL"

    loop_thread = threading.current_thread().name
    h.run(go())
    assert len(readers) == 3 and loop_thread not in readers  # never on the loop's thread
