"""The native API (/api/nnix/v1): OpenAPI document, overview, trial queries, detail, logs, curves,
customized trials, cancel, limits, experiments; malformed input gets 4xx JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from starlette.routing import Route

from nnix.api import native
from nnix.api.common import ApiContext
from nnix.api.native import downsample
from nnix.api.openapi import document
from nnix.core.status import ExperimentStatus, TrialStatus

N = "/api/nnix/v1"


def _strict(text: str) -> Any:
    def refuse(token: str) -> Any:
        raise AssertionError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=refuse)


def test_openapi_documents_every_native_route(finished: Path, h: Any) -> None:
    _, app = h.viewer(finished)
    ctx: ApiContext = app.ctx
    routed = {(r.path[len(N):], m.lower()) for r in native.routes(ctx) if isinstance(r, Route)
              for m in (r.methods or set()) - {"HEAD"}}
    doc = document()
    documented = {(path, method) for path, ops in doc["paths"].items() for method in ops}
    assert routed == documented
    assert doc["openapi"].startswith("3.") and doc["info"]["title"]

    async def go() -> None:
        async with h.client(app) as c:
            served = (await c.get(f"{N}/openapi.json")).json()
            assert served["paths"].keys() == doc["paths"].keys()

    h.run(go())


def test_overview(finished: Path, h: Any) -> None:
    manager, app = h.viewer(finished)

    async def go() -> None:
        async with h.client(app) as c:
            r = await c.get(f"{N}/experiment")
            o = _strict(r.text)
            assert o["id"] == manager.experiment_id and o["name"] == "known"
            assert o["status"] == "VIEWED" and o["recordedStatus"] == "STOPPED" and o["readOnly"] is True
            assert o["counts"]["SUCCEEDED"] == 2 and o["counts"]["WAITING"] == 1 and o["total"] == 5
            assert o["best"] == {"id": "ccccc", "seq": 2, "metric": 0.8} and o["direction"] == "maximize"
            assert o["metricKeys"] == ["default", "acc"] and o["paramKeys"] == ["x", "opt"]
            assert o["limits"]["maxTrialNumber"] == 20 and o["limits"]["trialConcurrency"] == 1
            assert o["config"]["trialCommand"].endswith("trial.py") and o["config"]["searchSpace"]["x"]["_type"]
            assert o["seq"] == manager.state.last_seq and o["platform"] == "local"
            # a state without the totals (an older snapshot): counted from the trials' summaries, the same
            def nonzero(tot: dict[str, Any]) -> dict[str, Any]:
                return {**tot, "counts": {k: v for k, v in tot["counts"].items() if v}}

            kept = nonzero(manager.state.overview_totals())
            manager.state.totals = None
            assert nonzero(app.ctx.views.totals()) == kept and manager.state.totals is not None

    h.run(go())


def test_trial_list_filter_search_sort_page(finished: Path, h: Any) -> None:
    _, app = h.viewer(finished)

    async def ids(c: Any, **params: Any) -> list[str]:
        r = await c.get(f"{N}/trials", params=params)
        assert r.status_code == 200, r.text
        return [t["id"] for t in _strict(r.text)["items"]]

    async def go() -> None:
        async with h.client(app) as c:
            page = _strict((await c.get(f"{N}/trials", params={"limit": 2, "offset": 1})).text)
            assert page["total"] == 5 and page["offset"] == 1 and page["limit"] == 2
            assert [t["seq"] for t in page["items"]] == [1, 2]
            a = _strict((await c.get(f"{N}/trials", params={"q": "aaaaa"})).text)["items"][0]
            assert a["final"] == {"default": 0.5, "acc": 0.9} and a["metric"] == 0.5 and a["latest"] == 0.3
            assert a["nInter"] == 3 and a["params"] == {"x": 0.1, "opt": "a"} and a["duration"] >= 0
            assert a["status"] == "SUCCEEDED" and a["source"] == "algorithm" and a["hasFinal"] is True

            assert await ids(c) == ["aaaaa", "bbbbb", "ccccc", "ddddd", "eeeee"]
            assert await ids(c, limit="all") == ["aaaaa", "bbbbb", "ccccc", "ddddd", "eeeee"]
            assert await ids(c, status="SUCCEEDED") == ["aaaaa", "ccccc"]
            assert await ids(c, status="failed,waiting") == ["bbbbb", "ddddd"]
            assert await ids(c, q="CCC") == ["ccccc"]
            assert await ids(c, q="3") == ["ddddd"]  # Trial No.
            assert await ids(c, sort="-metric") == ["ccccc", "aaaaa", "bbbbb", "ddddd", "eeeee"]  # missing last
            assert await ids(c, sort="metric") == ["aaaaa", "ccccc", "bbbbb", "ddddd", "eeeee"]
            assert await ids(c, sort="metric", order="desc") == ["ccccc", "aaaaa", "bbbbb", "ddddd", "eeeee"]
            assert await ids(c, sort="-param:x") == ["ccccc", "eeeee", "ddddd", "bbbbb", "aaaaa"]
            for query in ({"status": "failed,waiting"}, {"q": "CCC"}, {"sort": "-metric"}, {"sort": "-param:x"},
                          {"order": "desc"}, {"sort": "metric", "status": "SUCCEEDED"}):  # full lists answer as pages
                assert await ids(c, limit="all", **query) == await ids(c, **query), query
            assert (await ids(c, sort="param:opt"))[:2] == ["aaaaa", "ccccc"]
            assert await ids(c, sort="-metric:acc") == ["aaaaa", "bbbbb", "ccccc", "ddddd", "eeeee"]
            assert (await ids(c, sort="-seq"))[0] == "eeeee"
            assert (await ids(c, sort="duration"))[-1] == "ddddd"  # never started: last
            assert await ids(c, sort="-latest", limit=1) == ["ccccc"]
            assert await ids(c, status="SUCCEEDED", sort="-metric", limit=1) == ["ccccc"]

            # pages of a sorted list are slices of one order, whatever the page size and the direction
            for sort in ("-metric", "metric", "param:x", "-param:opt", "status", "-seq", "nInter"):
                whole = await ids(c, sort=sort)
                assert [i for k in range(5) for i in await ids(c, sort=sort, offset=k, limit=1)] == whole, sort
                assert await ids(c, sort=sort, offset=1, limit=3) == whole[1:4], sort
            # a search of conditions (what the web UI sends): all parts must match
            assert await ids(c, q="x>0.3") == ["ccccc", "ddddd", "eeeee"]
            assert await ids(c, q="x>0.3; opt=b") == ["ddddd", "eeeee"]
            assert await ids(c, q="x:[0.1, 0.4]", sort="-param:x") == ["ddddd", "bbbbb", "aaaaa"]
            assert await ids(c, q="metric>=0.5") == ["aaaaa", "ccccc"]
            assert await ids(c, q="acc>0.5") == ["aaaaa"]  # a final-result key
            assert await ids(c, q="metric:acc!=0.9") == ["bbbbb", "ccccc", "ddddd", "eeeee"]  # (missing: not equal)
            assert await ids(c, q="status=failed") == ["bbbbb"]
            assert await ids(c, q="boom") == ["bbbbb"]  # free text: the message too
            assert await ids(c, q="opt=a; ccc") == ["ccccc"]
            assert await ids(c, q="x>abc") == []

            for params in ({"status": "BOGUS"}, {"sort": "nope"}, {"limit": "-1"}, {"limit": "x"}, {"offset": "1.5"},
                           {"order": "sideways"}, {"limit": str(10**9)}):
                r = await c.get(f"{N}/trials", params=params)
                assert r.status_code == 400 and r.json()["error"], params

    h.run(go())


def test_columns_of_every_trial_a_query_matches(finished: Path, h: Any) -> None:
    _, app = h.viewer(finished)

    async def go() -> None:
        async with h.client(app) as c:
            r = await c.get(f"{N}/columns", params={"fields": "seq,status,metric,param:opt,metric:acc,nInter"})
            col = _strict(r.text)
            assert col["total"] == 5 and col["id"] == ["aaaaa", "bbbbb", "ccccc", "ddddd", "eeeee"]
            assert col["seq"] == [0, 1, 2, 3, 4] and col["status"][1] == "FAILED"
            assert col["metric"] == [0.5, None, 0.8, None, None] and col["param:opt"] == ["a", "b", "a", "b", "b"]
            assert col["metric:acc"] == [0.9, None, None, None, None] and col["nInter"] == [3, 1, 2, 0, 0]
            best = _strict((await c.get(f"{N}/columns", params={"fields": "metric", "status": "SUCCEEDED",
                                                                 "sort": "-metric"})).text)
            assert best["id"] == ["ccccc", "aaaaa"] and best["metric"] == [0.8, 0.5]
            # at most max trials, evenly spaced in the query's order (the first and the last kept)
            few = _strict((await c.get(f"{N}/columns", params={"fields": "seq", "sort": "-seq", "max": 3})).text)
            assert few["total"] == 5 and few["seq"] == [4, 2, 0]
            got = _strict((await c.get(f"{N}/columns", params={"fields": "duration", "q": "x>0.5"})).text)
            assert got["id"] == ["ccccc", "eeeee"] and all(d is not None and d >= 0 for d in got["duration"])
            for params in ({}, {"fields": "bogus"}, {"fields": "seq", "max": "0"}, {"fields": "seq", "status": "X"}):
                r = await c.get(f"{N}/columns", params=params)
                assert r.status_code == 400 and r.json()["error"], params

    h.run(go())


def test_trial_detail_metrics_logs_and_curves(finished: Path, h: Any) -> None:
    _, app = h.viewer(finished)

    async def go() -> None:
        async with h.client(app) as c:
            d = _strict((await c.get(f"{N}/trials/ccccc")).text)
            assert [m["value"] for m in d["metrics"]] == [None, 0.7, 0.8]  # NaN sent as null (strict JSON)
            assert d["logs"]["stdout"] == 11 and d["logs"]["trial.log"] is None
            assert json.loads(d["hyperParameters"])["parameters"] == {"x": 0.9, "opt": "a"}
            assert d["outputDir"].endswith("ccccc") and d["cancelReason"] is None
            assert _strict((await c.get(f"{N}/trials/eeeee")).text)["cancelReason"] == "user"
            assert (await c.get(f"{N}/trials/zzzzz")).status_code == 404

            fin = (await c.get(f"{N}/trials/aaaaa/metrics", params={"type": "FINAL"})).json()
            assert [m["value"] for m in fin] == [{"default": 0.5, "acc": 0.9}]
            assert len((await c.get(f"{N}/trials/aaaaa/metrics")).json()) == 4
            assert (await c.get(f"{N}/trials/aaaaa/metrics", params={"type": "X"})).status_code == 400
            assert (await c.get(f"{N}/trials/zzzzz/metrics")).status_code == 404

            r = await c.get(f"{N}/trials/ccccc/logs/stdout")
            assert r.text == "0123456789\n" and r.headers["x-nnix-skipped"] == "0"
            r = await c.get(f"{N}/trials/ccccc/logs/stdout", params={"tail": 4})
            assert r.text == "789\n" and r.headers["x-nnix-skipped"] == "7"
            r = await c.get(f"{N}/trials/ddddd/logs/stderr")
            assert r.status_code == 200 and r.text == "" and r.headers["x-nnix-missing"] == "1"
            for url, code in ((f"{N}/trials/ccccc/logs/passwd", 400), (f"{N}/trials/zzzzz/logs/stdout", 404),
                              (f"{N}/trials/ccccc/logs/stdout?tail=0", 400),
                              (f"{N}/trials/ccccc/logs/stdout?tail=x", 400)):
                assert (await c.get(url)).status_code == code, url

            cur = (await c.get(f"{N}/intermediate")).json()
            by = {t["id"]: t for t in cur["trials"]}
            assert set(by) == {"aaaaa", "bbbbb", "ccccc"}
            assert by["aaaaa"] == {"id": "aaaaa", "x": [0, 1, 2], "y": [0.1, 0.2, 0.3]}
            assert by["ccccc"]["x"] == [1]  # the NaN point is left out
            two = (await c.get(f"{N}/intermediate", params={"trials": "aaaaa", "maxPoints": 2})).json()
            assert two["trials"] == [{"id": "aaaaa", "x": [0, 2], "y": [0.1, 0.3]}]
            assert (await c.get(f"{N}/intermediate", params={"trials": "aaaaa,zzzzz"})).status_code == 404
            assert (await c.get(f"{N}/intermediate", params={"maxPoints": 1})).status_code == 400
            assert (await c.get(f"{N}/intermediate", params={"key": "acc"})).json()["trials"] == []

    h.run(go())


def test_a_long_series_is_sampled_in_the_detail_and_paged_by_the_metrics_route(finished: Path, h: Any) -> None:
    """A trial with 5,000 results: its detail holds an evenly spread sample of at most about DETAIL_METRICS (its final
    result and its last one among them) and says how many there are; /metrics pages the whole series (offset,
    limit, X-Total-Count), of one type or all; a short series is sent whole, as before."""
    from nnix.core.events import MetricReported, TrialCreated, TrialEnded, TrialStarted
    from nnix.core.status import MetricType
    from nnix.home import STORE_NAME
    from nnix.store.sqlite import SqliteStore

    n = 5_000
    store = SqliteStore(finished / STORE_NAME)
    P, F = MetricType.PERIODICAL, MetricType.FINAL
    store.append([TrialCreated("fffff", 5, 5, {"x": 0.5, "opt": "a"}),
                  TrialStarted("fffff", "local-env", str(finished / "fffff"))]
                 + [MetricReported("fffff", P, k, k / n, k, 5) for k in range(n // 2)]
                 + [MetricReported("fffff", F, 0, 0.75, n // 2, 5)]
                 + [MetricReported("fffff", P, k, k / n, k + 1, 5) for k in range(n // 2, n - 1)]
                 + [TrialEnded("fffff", TrialStatus.SUCCEEDED, 0)])
    store.close()
    _, app = h.viewer(finished)

    async def go() -> None:
        async with h.client(app) as c:
            d = _strict((await c.get(f"{N}/trials/fffff")).text)
            assert d["metricCount"] == n and d["metricsSampled"] is True
            shown = d["metrics"]
            assert native.DETAIL_METRICS // 2 <= len(shown) <= native.DETAIL_METRICS + 2
            assert [m["index"] for m in shown] == sorted(m["index"] for m in shown)
            assert shown[0]["index"] == 0 and shown[-1]["index"] == n - 1  # the ends
            assert [m["value"] for m in shown if m["type"] == "FINAL"] == [0.75]  # the final result is there
            small = _strict((await c.get(f"{N}/trials/aaaaa")).text)
            assert small["metricCount"] == len(small["metrics"]) == 4 and small["metricsSampled"] is False

            r = await c.get(f"{N}/trials/fffff/metrics", params={"offset": 100, "limit": 50})
            page = r.json()
            assert r.headers["x-total-count"] == str(n)
            assert [m["index"] for m in page] == list(range(100, 150))
            r = await c.get(f"{N}/trials/fffff/metrics", params={"offset": n - 10, "limit": 50})
            assert len(r.json()) == 10
            r = await c.get(f"{N}/trials/fffff/metrics", params={"type": "FINAL", "limit": 5})
            assert r.headers["x-total-count"] == "1" and [m["value"] for m in r.json()] == [0.75]
            r = await c.get(f"{N}/trials/fffff/metrics", params={"type": "PERIODICAL", "offset": n})
            assert r.json() == [] and r.headers["x-total-count"] == str(n - 1)
            assert len((await c.get(f"{N}/trials/fffff/metrics")).json()) == n  # no limit: all of it, streamed
            for bad in ({"limit": 0}, {"offset": -1}, {"limit": "x"}):
                assert (await c.get(f"{N}/trials/fffff/metrics", params=bad)).status_code == 400, bad

    h.run(go())


def test_downsample_keeps_the_ends() -> None:
    xs = list(range(1000))
    ys = [math.sin(x / 50) for x in xs]
    ox, oy = downsample(xs, ys, 40)
    assert len(ox) <= 41 and ox[0] == 0 and ox[-1] == 999 and oy[-1] == ys[-1]
    assert downsample(xs[:10], ys[:10], 40) == (xs[:10], ys[:10])


def test_experiments_list(finished: Path, h: Any) -> None:
    manager, app = h.viewer(finished)

    async def go() -> None:
        async with h.client(app) as c:
            (e,) = (await c.get(f"{N}/experiments")).json()
            assert e["id"] == manager.experiment_id and e["current"] is True and e["name"] == "known"
            assert e["status"] == "STOPPED" and e["url"] is None and e["platform"] == "local"

    h.run(go())


def test_read_only_refuses_changes(finished: Path, h: Any) -> None:
    manager, app = h.viewer(finished)
    seq = manager.state.last_seq

    async def go() -> None:
        async with h.client(app) as c:
            for method, url, body in (("PATCH", f"{N}/experiment", {"trialConcurrency": 2}),
                                      ("POST", f"{N}/trials", {"parameters": {"x": 0.5}}),
                                      ("POST", f"{N}/trials/ddddd/cancel", None)):
                r = await c.request(method, url, json=body)
                assert r.status_code == 400 and "readonly" in r.json()["error"], url

    h.run(go())
    assert manager.state.last_seq == seq


def test_running_patch_customized_cancel(sleeper: Any, h: Any) -> None:
    exp_dir = sleeper(maxTrialNumber=4)

    async def go() -> None:
        async with h.running(exp_dir) as m, h.client(h.create_app(m)) as c:
            await h.until(lambda: m.state.count(TrialStatus.RUNNING) == 1)
            r = await c.patch(f"{N}/experiment", json={"trialConcurrency": 2, "maxExperimentDuration": "1h"})
            assert r.status_code == 200, r.text
            o = r.json()
            assert o["limits"]["trialConcurrency"] == 2 and o["limits"]["maxExperimentDuration"] == 3600
            assert o["status"] == "RUNNING" and o["readOnly"] is False
            seq = m.state.last_seq
            body: Any
            for body in ({}, [], {"trialConcurrency": 3, "maxTrialNumber": 0}, {"maxTrialDuration": 5},
                         {"searchSpace": {"x": {"_type": "nope"}}}, {"maxExperimentDuration": "soon"}):
                r = await c.patch(f"{N}/experiment", json=body)
                assert r.status_code == 400 and r.json()["error"], body
            assert m.state.last_seq == seq and m.state.limits["trial_concurrency"] == 2  # all or none

            r = await c.post(f"{N}/trials", json={"parameters": {"x": 0.3, "opt": "a", "sleep": 30}})
            assert r.status_code == 201, r.text
            t = r.json()
            assert t["source"] == "customized" and t["parameterId"] is None and t["status"] == "WAITING"
            for body in ({"x": 1}, {"parameters": [1]}, {"parameters": "x"}):
                assert (await c.post(f"{N}/trials", json=body)).status_code == 400
            await h.until(lambda: m.state.trials[t["id"]].status is TrialStatus.RUNNING)

            r = await c.post(f"{N}/trials/{t['id']}/cancel")
            assert r.status_code == 200 and r.json()["canceled"] is True
            await h.until(lambda: m.state.trials[t["id"]].status is TrialStatus.USER_CANCELED)
            r = await c.post(f"{N}/trials/{t['id']}/cancel")
            assert r.json() == {"id": t["id"], "canceled": False, "status": "USER_CANCELED"}
            assert (await c.post(f"{N}/trials/zzzzz/cancel")).status_code == 404

            r = await c.post(f"{N}/experiment/stop")
            assert r.status_code == 202
            await h.until(lambda: m.state.status is ExperimentStatus.STOPPED)

    h.run(go())
