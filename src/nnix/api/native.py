"""The native, versioned API under ``/api/nnix/v1`` (documented in :mod:`nnix.api.openapi`).

What the web UI uses: an experiment overview, trial lists with filtering, search, sorting and
paging, per-trial detail, metrics and log files, downsampled intermediate curves, live updates as
server-sent events, and the experiments of this machine. Errors are ``{"error": message}`` with a
4xx status. Values that are not finite numbers are sent as ``null`` (strict JSON).
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from nnix.api.common import JSON, ApiContext, ApiError, RouteTable, dumps, int_param, ms, read_json
from nnix.api.compat import (
    TRIAL_FILES,
    UPDATES,
    add_customized,
    check_limit,
    experiments_info,
    kill,
    parameter_record,
    trial_or_404,
)
from nnix.api.files import open_trial_file, open_trial_file_async, serve_file
from nnix.api.jsonstream import JSONStream
from nnix.api.openapi import document
from nnix.api.sse import EventStreamResponse
from nnix.api.views import overview
from nnix.core.state import Metric, TrialState
from nnix.errors import NnixError
from nnix.home import trial_files_dir
from nnix.model.status import MetricType
from nnix.query import MAX_LIMIT, Query, TrialQuery, columns_json, parse_columns, series_of

PREFIX = "/api/nnix/v1"
LOG_NAMES = ("stdout", "stderr", "trial.log")
LOG_TAIL_DEFAULT = 256 * 1024
LOG_TAIL_MAX = 64 * 1024 * 1024
DETAIL_METRICS = 1_000  # metrics in a trial's detail at most: a longer series is sampled (the whole: /metrics, paged)
PATCHABLE = {camel: field for field, camel in UPDATES.values()}


def metric_json(m: Metric) -> dict[str, Any]:
    return {"type": m.type.value, "sequence": m.sequence, "value": m.value, "index": m.index, "ts": ms(m.ts)}


def sample_series(metrics: list[Metric], final: Metric | None, most: int = DETAIL_METRICS) -> list[Metric]:
    """At most about ``most`` of a trial's metrics, evenly spread over the series (every k-th, and the last), in
    channel order; ``final`` (the trial's final result) is always among them."""
    n = len(metrics)
    if n <= most:
        return metrics
    stride = math.ceil(n / (most - 1))
    picked = metrics[::stride]
    if (n - 1) % stride:
        picked.append(metrics[-1])
    if final is not None and not any(m.index == final.index and m.type is final.type for m in picked):
        at = next((i for i, m in enumerate(picked) if m.index > final.index), len(picked))
        picked.insert(at, final)
    return picked


def downsample(xs: list[int], ys: list[float], max_points: int) -> tuple[list[int], list[float]]:
    """At most ``max_points`` points: every k-th one, and always the last."""
    n = len(xs)
    if n <= max_points:
        return xs, ys
    stride = math.ceil(n / (max_points - 1))
    ox, oy = xs[::stride], ys[::stride]
    if (n - 1) % stride:
        ox.append(xs[-1])
        oy.append(ys[-1])
    return ox, oy


def curve_json(tid: str, xs: list[int], ys: list[float]) -> bytes:
    """One trial's curve as JSON; values with 6 significant digits (what a plot can show; half the bytes)."""
    return (f'{{"id":{json.dumps(tid)},"x":[{",".join(map(str, xs))}],'
            f'"y":[{",".join(map("%.6g".__mod__, ys))}]}}').encode()


def log_files(exp_dir: Path, t: TrialState) -> dict[str, int | None]:
    """Each log's size in bytes; None when absent or refused (a link, not a regular file)."""
    out: dict[str, int | None] = {}
    folder = trial_files_dir(exp_dir, t.trial_id, t.output_dir)
    for name in LOG_NAMES:
        size = None
        if folder is not None:
            try:
                file = open_trial_file(folder, exp_dir, TRIAL_FILES[name], name)
            except ApiError:
                file = None
            if file is not None:
                size = file.size
                file.close()
        out[name] = size
    return out


def routes(ctx: ApiContext) -> list[Route]:
    m = ctx.manager
    route = RouteTable(PREFIX)

    @route.get("/openapi.json")
    async def openapi(_: Request) -> Response:
        return JSON(document())

    @route.get("/experiment")
    async def get_experiment(_: Request) -> Response:
        return JSON(overview(m, ctx.views, ctx.read_only))

    @route.patch("/experiment")
    async def patch_experiment(request: Request) -> Response:
        ctx.require_writable()
        body = await read_json(request)
        if not isinstance(body, dict) or not body:
            raise ApiError(400, f"the body must be a JSON object with some of {', '.join(PATCHABLE)}")
        unknown = sorted(set(body) - set(PATCHABLE))
        if unknown:
            raise ApiError(400, f"cannot change {', '.join(unknown)}; only {', '.join(PATCHABLE)}")
        checked = [(PATCHABLE[k], check_limit(PATCHABLE[k], k, v)) for k, v in body.items()]  # all or none
        for field, value in checked:
            try:
                m.update_limit(field, value)
            except NnixError as e:
                raise ApiError(400, e.message) from e
        return JSON(overview(m, ctx.views, ctx.read_only))

    @route.post("/experiment/stop")
    async def stop_experiment(_: Request) -> Response:
        m.request_stop()
        return JSON({"stopping": True}, status_code=202)

    def trial_query(request: Request) -> TrialQuery:
        query = TrialQuery.parse(dict(request.query_params))
        if query.search:  # a condition's name: a final-result key or a parameter
            tot = ctx.views.totals()
            query.keys = (frozenset(tot["metricKeys"]), frozenset(tot["paramKeys"]))
        return query

    @route.get("/trials")
    async def list_trials(request: Request) -> Response:
        query = trial_query(request)

        def build() -> bytes:
            got = ctx.views.page(query)  # (the first pages in trial order: no index needed)
            total, page = got if got is not None else query.run(ctx.views.index())
            head = (f'{{"total":{total},"offset":{query.offset},"limit":'
                    f'{"null" if query.limit is None else query.limit},"seq":{m.state.last_seq},"items":[').encode()
            return head + b",".join(v.encoded for v in page) + b"]}"

        if query.limit is None:  # a full list: streamed a slice at a time (not joined whole, nor kept)
            plain = query.statuses is None and not query.search and query.sort == "seq" and not query.descending
            total, page = query.run(ctx.views.all() if plain else ctx.views.index())  # (filtered, sorted: as pages)
            head = f'{{"total":{total},"offset":{query.offset},"limit":null,"seq":{m.state.last_seq},"items":['
            return JSONStream((v.encoded for v in page), head=head.encode(), tail=b"]}")
        if query.sort == "duration":  # running trials' durations grow with the clock
            return JSON(build())
        key = (id(m.state), m.state.last_seq, query.statuses, query.search, query.sort, query.descending,
               query.offset, query.limit)
        return JSON(ctx.views.listing("trials", key, build))  # one build per state version and query

    @route.get("/columns")
    async def trial_columns(request: Request) -> Response:
        names = parse_columns(request.query_params.get("fields", ""))
        query = trial_query(request)
        most = int_param(request, "max", MAX_LIMIT, 1, MAX_LIMIT)
        return JSON(columns_json(ctx.views.index(), names, query, m.state.last_seq, most))

    @route.post("/trials")
    async def add_trial(request: Request) -> Response:
        body = await read_json(request)
        if not isinstance(body, dict) or not isinstance(body.get("parameters"), dict):
            raise ApiError(400, 'the body must be {"parameters": {...}}')
        seq = add_customized(ctx, body["parameters"])
        t = Query(m.state).newest(lambda t: t.sequence_id == seq)
        assert t is not None  # (the trial add_customized just created)
        return JSON(ctx.views.summary(t), status_code=201)

    @route.get("/trials/{id}")
    async def get_trial(request: Request) -> Response:
        t = trial_or_404(ctx, request.path_params["id"])
        logs = await asyncio.to_thread(log_files, ctx.manager.exp_dir, t)
        detail = dict(ctx.views.summary(t))
        metrics = await series_of(m, t)
        shown = sample_series(metrics, t.final)
        detail.update({
            # a long series is sampled here (the whole of it, a page at a time: /trials/{id}/metrics)
            "metrics": [metric_json(x) for x in shown],
            "metricCount": len(metrics),
            "metricsSampled": len(shown) < len(metrics),
            "hyperParameters": parameter_record(t),
            "outputDir": t.output_dir,
            "logs": logs,
            "cancelReason": None if t.cancel_reason is None else t.cancel_reason.value,
            "gpus": None if t.gpus is None else list(t.gpus),
            "warningMessages": list(t.warnings),
        })
        return JSON(detail)

    @route.get("/trials/{id}/metrics")
    async def trial_metrics(request: Request) -> Response:
        """The trial's series (of one ``type``), ``limit`` metrics from ``offset`` (default: all of it), streamed a
        slice at a time; ``X-Total-Count`` says how many there are (of the type)."""
        t = trial_or_404(ctx, request.path_params["id"])
        mtype = request.query_params.get("type") or None
        if mtype is not None and mtype not in MetricType.__members__:
            raise ApiError(400, "type must be PERIODICAL or FINAL")
        offset = int_param(request, "offset", 0, 0, 1 << 40)
        limit = int_param(request, "limit", 0, 1, 1 << 40) or None  # (absent: all of it)
        metrics = await series_of(m, t)
        if mtype is not None:
            metrics = [x for x in metrics if x.type.value == mtype]
        total = len(metrics)
        end = total if limit is None else min(total, offset + limit)
        page = metrics[offset:end]  # a copy: the series grows while the response is sent
        return JSONStream((dumps(metric_json(x)) for x in page), headers={"X-Total-Count": str(total)})

    @route.get("/trials/{id}/logs/{name}")
    async def trial_log(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in LOG_NAMES:
            raise ApiError(400, f"log name must be one of {', '.join(LOG_NAMES)}")
        t = trial_or_404(ctx, request.path_params["id"])
        limit = int_param(request, "tail", LOG_TAIL_DEFAULT, 1, LOG_TAIL_MAX)
        folder = trial_files_dir(ctx.manager.exp_dir, t.trial_id, t.output_dir)
        missing = {"X-Nnix-Skipped": "0", "X-Nnix-Missing": "1"}
        if folder is None:
            return PlainTextResponse("", headers=missing)
        what = f"trial {t.trial_id}'s {name}"
        file = await open_trial_file_async(folder, ctx.manager.exp_dir, TRIAL_FILES[name], what)
        if file is None:
            return PlainTextResponse("", headers=missing)
        skipped = max(0, file.size - limit)
        return serve_file(file, request.headers.get("range"), "text/plain; charset=utf-8",
                          {"X-Nnix-Skipped": str(skipped)}, start=skipped)

    @route.post("/trials/{id}/cancel")
    async def cancel_trial(request: Request) -> Response:
        tid = request.path_params["id"]
        canceled = kill(ctx, tid)
        t = Query(m.state).trial(tid)
        return JSON({"id": tid, "canceled": canceled, "status": None if t is None else t.status.value})

    @route.get("/intermediate")
    async def intermediate(request: Request) -> Response:
        max_points = int_param(request, "maxPoints", 200, 2, 100_000)
        key = request.query_params.get("key") or "default"
        ids = request.query_params.get("trials")
        if ids:
            wanted = list(dict.fromkeys(i for i in ids.split(",") if i))
            q = Query(m.state)
            missing = [i for i in wanted if i not in q]
            if missing:
                raise ApiError(404, f"no trial {', '.join(missing[:5])}")
            trials: Iterable[TrialState] = [t for i in wanted if (t := q.trial(i)) is not None]
        else:
            trials = Query(m.state).trials()  # (one at a time)
        def build(t: TrialState, _: Any) -> bytes | None:
            xs, ys = ctx.views.curve(t, key)
            return curve_json(t.trial_id, *downsample(xs, ys, max_points)) if xs else None

        parts = [ctx.views.fragment(t, "curve", (key, max_points), build) for t in trials]
        body = b",".join(p for p in parts if p is not None)
        return JSON(b'{"key":' + json.dumps(key).encode() + b',"trials":[' + body + b"]}")

    @route.get("/events")
    async def events(request: Request) -> Response:
        return EventStreamResponse(ctx.hub)  # type: ignore[return-value]  # an ASGI response

    @route.get("/experiments")
    async def experiments(_: Request) -> Response:
        info = await asyncio.to_thread(experiments_info, m.experiment_id)
        out = []
        for e in info:
            out.append({
                "id": e["id"], "name": e["experimentName"], "status": e["status"], "port": e["port"],
                "platform": e["platform"], "startTime": e["startTime"],
                "endTime": None if e["endTime"] == "N/A" else e["endTime"],
                "url": e["webuiUrl"][0] + "/" if e["webuiUrl"] else None,
                "current": e["id"] == m.experiment_id, "dir": e["logDir"],
            })
        return JSON(out)

    return route.routes
