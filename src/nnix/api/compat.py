"""NNI-compatible routes under ``/api/v1/nni`` (``nni-spec.md`` section 8).

Paths and payload shapes are NNI's so that tools written against NNI keep working: times in
milliseconds, metric ``data`` double-encoded (a JSON string of the JSON of the value), parameter
records as JSON strings. Every handler reads the manager's folded state; every change goes through
the manager, which records it first.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from nnix.api.common import JSON, ApiContext, ApiError, RouteTable, dumps, ms, read_json
from nnix.api.files import open_trial_file_async, serve_file
from nnix.api.jsonstream import JSONStream
from nnix.config import ExperimentConfig
from nnix.core.manager import ExperimentManager
from nnix.core.state import Metric, TrialState
from nnix.errors import NnixError, StoreError
from nnix.home import trial_files_dir
from nnix.model.status import MetricType, TrialStatus
from nnix.query import Query, TrialView, series_of
from nnix.version import __version__

PREFIX = "/api/v1/nni"

# NNI's v3 local service names (the web UI asks for stdout/stderr/trial.log)
TRIAL_FILES = {"stdout": "trial.stdout", "stderr": "trial.stderr", "trial.log": "trial.log",
               "trial.stdout": "trial.stdout", "trial.stderr": "trial.stderr", "model.onnx": "model.onnx"}


def value_json(value: Any) -> str:
    """The JSON text of a metric value as NNI stores it (NaN/Infinity kept, as NNI's JSON5 reader expects)."""
    return json.dumps(value, allow_nan=True)


def metric_record(t: TrialState, m: Metric) -> dict[str, Any]:
    return _metric_record(t.trial_id, t.parameter_id, m)


def _metric_record(trial_id: str, parameter_id: Any, m: Metric) -> dict[str, Any]:
    return {
        "timestamp": ms(m.ts),
        "trialJobId": trial_id,
        "parameterId": None if parameter_id is None else str(parameter_id),
        "type": m.type.value,
        "sequence": m.sequence,
        "data": json.dumps(value_json(m.value)),
    }


def metric_records(t: TrialState, metrics: Iterable[Metric], mtype: str | None = None) -> Iterator[bytes]:
    """``dumps(metric_record(t, m))`` of each metric (of type ``mtype``), encoded faster: the trial's
    part once, the rest by hand (what NNI's ``metric-data`` sends, 400,000 records at a time)."""
    pid = "null" if t.parameter_id is None else json.dumps(str(t.parameter_id))
    mid = f',"trialJobId":{json.dumps(t.trial_id)},"parameterId":{pid},"type":"'
    encode = json.dumps
    for m in metrics:
        if mtype is not None and m.type.value != mtype:
            continue
        ts = m.ts
        if type(m.sequence) is not int or type(ts) is not float or not -1e15 < ts < 1e15:  # not from the fold
            rec = metric_record(t, m) if isinstance(ts, (int, float)) and math.isfinite(ts) else \
                {**metric_record(t, Metric(m.type, m.sequence, m.value, 0.0, m.index)), "timestamp": None}
            yield dumps(rec)
            continue
        data = encode(encode(encode(m.value, allow_nan=True)))  # NNI's data: JSON text of JSON text
        yield (f'{{"timestamp":{int(ts * 1000)}{mid}{m.type.value}","sequence":{m.sequence},'
               f'"data":{data}}}').encode()


def parameter_record(t: TrialState) -> str:
    return _parameter_record(t.parameter_id, t.source, t.params)


def _parameter_record(parameter_id: Any, source: str, params: Any) -> str:
    return value_json({"parameter_id": parameter_id, "parameter_source": source, "parameters": params,
                       "parameter_index": 0})


_SCAN: Any = object()


def trial_info(t: TrialState, final: Metric | None = _SCAN, exp_dir: Path | None = None) -> dict[str, Any]:
    """NNI's TrialJobInfo. ``final``: the trial's final result (None: it has none) when the caller knows it,
    which saves a scan of its metrics. ``message``: why it ended (FAILED, EARLY_STOPPED, canceled);
    ``stderrPath`` (FAILED): its stderr on this machine, the manager's copy for a trial that ran elsewhere when
    ``exp_dir`` is given."""
    return _job_info(t.trial_id, t.sequence_id, t.status.value, t.parameter_id, t.source, t.params, ms(t.started_at),
                     ms(t.ended_at), t.output_dir, t.environment_id, t.message,
                     t.final if final is _SCAN else final, exp_dir)


def view_info(v: TrialView, final: Metric | None, exp_dir: Path | None = None) -> dict[str, Any]:
    """:func:`trial_info` of the trial whose current view is ``v`` (its summary, output directory and final
    result: a trial a snapshot holds is not read again for it)."""
    s = v.summary
    return _job_info(s["id"], s["seq"], s["status"], s["parameterId"], s["source"], s["params"], s["start"], s["end"],
                     v.out, s["env"], s["message"], final, exp_dir)


def _job_info(tid: str, seq: int, status: str, pid: Any, source: str, params: Any, start: int | None,
              end: int | None, out: str | None, env: str | None, message: str | None, final: Metric | None,
              exp_dir: Path | None) -> dict[str, Any]:
    info: dict[str, Any] = {
        "trialJobId": tid,
        "sequenceId": seq,
        "status": status,
        "hyperParameters": [_parameter_record(pid, source, params)],
    }
    if start is not None:
        info["startTime"] = start
    if end is not None:
        info["endTime"] = end
    if out:
        local = os.path.isabs(out)  # (not pathlib: a full list asks this of every trial)
        info["logPath"] = f"file://localhost:{out}" if local else out  # NNI: host:path remotely
        if status == "FAILED":
            here = Path(out) if local else None if exp_dir is None else trial_files_dir(exp_dir, tid, out)
            if here is not None:
                info["stderrPath"] = f"file://localhost:{here}/trial.stderr"
    if env:
        info["envId"] = env
    if message:
        info["message"] = message
    if final is not None:
        info["finalMetricData"] = [_metric_record(tid, pid, final)]
    return info


def profile(manager: ExperimentManager) -> dict[str, Any]:
    """NNI's ExperimentProfile."""
    st = manager.state
    try:
        params = ExperimentConfig.model_validate(st.config).to_json()
    except Exception:  # a config this version cannot read: show what is stored
        params = dict(st.config)
    limits = st.limits
    params["trialConcurrency"] = limits["trial_concurrency"]
    max_n, max_d = limits["max_trial_number"], limits["max_experiment_duration"]
    for name, value in (("maxTrialNumber", max_n), ("maxExperimentDuration", None if max_d is None else f"{max_d}s")):
        if value is None:
            params.pop(name, None)
        else:
            params[name] = value
    params["searchSpace"] = limits["search_space"]
    prof: dict[str, Any] = {
        "params": params,
        "id": st.experiment_id,
        "execDuration": int(st.elapsed(manager.clock() if st.counting else None)),
        "logDir": str(manager.exp_dir),
        "startTime": ms(st.created_at),
        "nextSequenceId": st.next_sequence_id,
        "revision": st.last_seq,
    }
    if st.end_time is not None:
        prof["endTime"] = ms(st.end_time)
    return prof


UPDATES = {
    "TRIAL_CONCURRENCY": ("trial_concurrency", "trialConcurrency"),
    "MAX_TRIAL_NUM": ("max_trial_number", "maxTrialNumber"),
    "MAX_EXEC_DURATION": ("max_experiment_duration", "maxExperimentDuration"),
    "SEARCH_SPACE": ("search_space", "searchSpace"),
}


def check_limit(field: str, camel: str, value: Any) -> Any:
    """Validate a runtime limit change; returns the value to record (durations in seconds)."""
    from nnix.config import parse_duration
    from nnix.limits import BOUNDS
    from nnix.space import validate

    if field == "max_experiment_duration":
        try:
            value = parse_duration(value)
        except ValueError as e:
            raise ApiError(400, f"{camel}: {e} (a number of seconds or e.g. 30m, 2h, 1d)") from e
    if field in BOUNDS:  # the same bounds as the config file's
        problem = BOUNDS[field].problem(value)
        if problem is not None:
            raise ApiError(400, f"{camel} {problem} ({BOUNDS[field].hint})")
        return value
    if field == "search_space":
        if not isinstance(value, dict):
            raise ApiError(400, f"{camel} must be a JSON object")
        issues = validate(value)
        if issues:
            raise ApiError(400, "invalid search space: " + "; ".join(i.render() for i in issues))
        return value
    raise ApiError(400, f"unknown limit {camel}")  # pragma: no cover - UPDATES is closed


def apply_limit(ctx: ApiContext, field: str, camel: str, value: Any) -> None:
    value = check_limit(field, camel, value)
    try:
        ctx.manager.update_limit(field, value)
    except NnixError as e:
        raise ApiError(400, e.message) from e


def add_customized(ctx: ApiContext, params: Any) -> int:
    ctx.require_writable()
    if not isinstance(params, dict):
        raise ApiError(400, "the parameters must be a JSON object, e.g. {\"lr\": 0.01}")
    try:
        return ctx.manager.add_customized_trial(params)
    except NnixError as e:
        raise ApiError(400, e.message) from e


def trial_or_404(ctx: ApiContext, tid: str) -> TrialState:
    t = Query(ctx.manager.state).trial(tid)
    if t is None:
        raise ApiError(404, f"trial {tid} not found")
    return t


def kill(ctx: ApiContext, tid: str) -> bool:
    ctx.require_writable()
    trial_or_404(ctx, tid)
    return ctx.manager.cancel_trial(tid)


def experiments_info(self_id: str) -> list[dict[str, Any]]:
    """The registry of this machine in NNI's shape; a crashed experiment reads STOPPED."""
    from nnix.home import Registry, manager_alive, read_state, shown_status

    out = []
    for e in sorted(Registry().all(), key=lambda e: e.created):
        try:
            st = read_state(Path(e.dir), summary=True)
        except Exception:  # a deleted, unreadable or foreign experiment: not listed, never a failure
            continue
        status = shown_status(st)
        serving = manager_alive(st)  # any status: a finished experiment's manager still serves its port
        host = st.manager_host if st.manager_host not in ("0.0.0.0", "") else "127.0.0.1"
        out.append({
            "id": e.id,
            "port": st.manager_port if serving else None,
            "startTime": ms(st.created_at),
            "endTime": ms(st.end_time) if st.end_time is not None else "N/A",
            "status": status,
            "platform": e.platform,
            "experimentName": e.name or "",
            "tag": [],
            "pid": st.manager_pid if serving else None,
            "webuiUrl": [f"http://{host}:{st.manager_port}"] if serving and st.manager_port else [],
            "logDir": e.dir,
            "prefixUrl": None,
        })
    return out


def routes(ctx: ApiContext) -> list[Route]:
    route = RouteTable(PREFIX)
    m = ctx.manager

    @route.get("/version")
    async def version(_: Request) -> Response:
        return PlainTextResponse(__version__)  # NNI sends the bare version text

    @route.get("/check-status")
    async def check_status(_: Request) -> Response:
        st = m.state
        return JSON({"status": "VIEWED" if ctx.read_only else st.status.value, "errors": st.errors,
                     "message": st.message, "waitingReason": m.waiting_reason, "resuming": m.resuming})

    @route.get("/experiment")
    async def get_experiment(_: Request) -> Response:
        return JSON(profile(m))

    @route.put("/experiment")
    async def put_experiment(request: Request) -> Response:
        ctx.require_writable()
        kind = request.query_params.get("update_type", "")
        if kind not in UPDATES:
            raise ApiError(400, f"update_type must be one of {', '.join(UPDATES)}")
        field, camel = UPDATES[kind]
        body = await read_json(request)
        if not isinstance(body, dict) or not isinstance(body.get("params"), dict) or camel not in body["params"]:
            raise ApiError(400, f"the body must be the experiment profile with params.{camel}")
        apply_limit(ctx, field, camel, body["params"][camel])
        return Response(status_code=200)

    @route.delete("/experiment")
    async def delete_experiment(_: Request) -> Response:
        m.request_stop()
        return Response(status_code=200)

    @route.get("/experiment-metadata")
    async def experiment_metadata(_: Request) -> Response:
        info = await asyncio.to_thread(experiments_info, m.experiment_id)
        for e in info:
            if e["id"] == m.experiment_id:
                return JSON(e)
        raise ApiError(404, f"experiment {m.experiment_id} is not in the registry")

    @route.get("/experiments-info")
    async def all_experiments(_: Request) -> Response:
        return JSON(await asyncio.to_thread(experiments_info, m.experiment_id))

    @route.get("/trial-jobs")
    async def trial_jobs(request: Request) -> Response:
        status = request.query_params.get("status")
        if status and status not in TrialStatus.__members__:
            raise ApiError(400, f"status must be one of {', '.join(TrialStatus.__members__)}")

        def info(v: TrialView, final: Metric | None) -> dict[str, Any]:
            return view_info(v, final, m.exp_dir)

        def jobs() -> Iterator[bytes | None]:
            # each trial's TrialJobInfo made from its view (a trial a snapshot holds is not read again where it has
            # one) and kept until the trial changes; encoded a slice at a time (100k trials are not held whole)
            views = ctx.views
            for x in views.each():
                v = x if isinstance(x, TrialView) else views.entry(x)
                yield views.compat(v, info) if not status or v.summary["status"] == status else None

        return _kept(f"trial-jobs?{status or ''}", jobs())

    @route.get("/trial-jobs/{id}")
    async def trial_job(request: Request) -> Response:
        return JSON(trial_info(trial_or_404(ctx, request.path_params["id"]), exp_dir=m.exp_dir))

    @route.post("/trial-jobs")
    async def add_trial(request: Request) -> Response:
        ctx.require_writable()
        body = await read_json(request)
        # NNI's web UI posts the parameters themselves; accept {parameters: {...}} too
        if isinstance(body, dict) and set(body) == {"parameters"} and isinstance(body["parameters"], dict):
            body = body["parameters"]
        return JSON({"sequenceId": add_customized(ctx, body)})

    @route.delete("/trial-jobs/{id}")
    async def kill_trial(request: Request) -> Response:
        kill(ctx, request.path_params["id"])
        return Response(status_code=200)

    def _mtype(request: Request) -> str | None:
        mtype = request.query_params.get("type") or None
        if mtype is not None and mtype not in MetricType.__members__:
            raise ApiError(400, "type must be PERIODICAL or FINAL")
        return mtype

    def _records(snapshot: Iterable[tuple[TrialState, list[Metric]]], mtype: str | None) -> Iterator[bytes | None]:
        for t, metrics in snapshot:
            yield from metric_records(t, metrics, mtype)
            yield None  # a trial without metrics of the type still lets the loop run

    @route.get("/metric-data")
    @route.get("/metric-data/{id}")
    async def metric_data(request: Request) -> Response:
        tid = request.path_params.get("id")
        mtype = _mtype(request)
        if tid:  # one trial: a long series left in the store is read by a thread, not on the loop
            t = trial_or_404(ctx, tid)
            return JSONStream(_records([(t, list(await series_of(m, t)))], mtype))
        trials: Iterable[TrialState] = Query(m.state).trials()
        # the trials are listed now, each series copied when the stream reaches it (it grows meanwhile; an
        # ended trial's is read from the store then), encoded a slice at a time
        return JSONStream(_records(((t, list(t.metrics)) for t in trials), mtype))

    @route.get("/metric-data-latest")
    @route.get("/metric-data-latest/")
    async def metric_data_latest(_: Request) -> Response:
        def latest(snapshot: Iterable[tuple[TrialState, list[Metric]]]) -> Iterator[bytes | None]:
            for t, metrics in snapshot:
                last = None
                picked: list[Metric] = []
                for x in metrics:
                    if x.type is MetricType.FINAL:
                        picked.append(x)
                    elif last is None or x.sequence >= last.sequence:
                        last = x
                if last is not None:
                    picked.append(last)
                yield from metric_records(t, picked)
                yield None

        return JSONStream(latest((t, list(t.metrics)) for t in Query(m.state).trials()))

    @route.get("/metric-data-range/{min}/{max}")
    async def metric_data_range(request: Request) -> Response:
        try:
            lo, hi = int(request.path_params["min"]), int(request.path_params["max"])
        except ValueError as e:
            raise ApiError(400, "min_seq_id and max_seq_id must be integers") from e
        trials = (t for t in Query(m.state).trials() if lo <= t.sequence_id <= hi)
        return JSONStream(_records(((t, list(t.metrics)) for t in trials), None))

    @route.get("/job-statistics")
    async def job_statistics(_: Request) -> Response:
        counts: dict[str, int] = {}
        for t in Query(m.state).trials():
            counts[t.status.value] = counts.get(t.status.value, 0) + 1
        return JSON([{"trialJobStatus": k, "trialJobNumber": v} for k, v in counts.items()])

    @route.get("/export-data")
    async def export_data(_: Request) -> Response:
        def row(v: TrialView) -> bytes | None:
            s = v.summary
            if not s["hasFinal"]:
                return None
            return dumps({"parameter": s["params"], "value": value_json(s["final"]), "trialJobId": s["id"]})

        def rows() -> Iterator[bytes | None]:
            # from each trial's view (a trial a snapshot holds is not read again where it has one), streamed
            views = ctx.views
            for x in views.each():
                yield views.view_fragment(x if isinstance(x, TrialView) else views.entry(x), "export", None, row)

        return _kept("export-data", rows())

    def _kept(name: str, parts: Iterator[bytes | None]) -> Response:
        """A full list streamed, and kept (under a memory bound) for the next client asking in the same state (one
        build per state version, as many clients polling it share; see TrialViews.keep)."""
        def version() -> tuple[int, int]:
            return id(m.state), m.state.last_seq

        key = version()
        hit = ctx.views.kept(name, key)
        if isinstance(hit, bytes):
            return JSON(hit)
        if hit is not None:  # (too large to be kept joined: its parts, streamed again)
            return JSONStream(hit)
        return JSONStream(ctx.views.keep(name, key, version, parts))

    @route.post("/experiment/import-data")
    async def import_data(request: Request) -> Response:
        ctx.require_writable()
        body = await read_json(request)
        try:
            m.import_data(body)  # (checked there: one schema, whoever imports)
        except StoreError:
            raise
        except NnixError as e:
            raise ApiError(400, e.message + (f" ({e.hint})" if e.hint else "")) from e
        return Response(status_code=200)

    @route.get("/experiment/imported-data")
    async def imported_data(_: Request) -> Response:
        return JSON([value_json(r) for r in m.state.imported])

    @route.get("/trial-file/{id}/{name}")
    async def trial_file(request: Request) -> Response:
        tid, name = request.path_params["id"], request.path_params["name"]
        mapped = TRIAL_FILES.get(name)
        if mapped is None:
            raise ApiError(400, f"filename must be one of {', '.join(TRIAL_FILES)}")
        t = trial_or_404(ctx, tid)
        folder = trial_files_dir(ctx.manager.exp_dir, t.trial_id, t.output_dir)
        if folder is None:
            raise ApiError(404, f"trial {tid} has not started: it has no files yet")
        file = await open_trial_file_async(folder, ctx.manager.exp_dir, mapped, f"trial {tid}'s {name}")
        if mapped == "model.onnx":
            if file is None:
                raise ApiError(404, f"trial {tid} has no {name}")
            return serve_file(file, request.headers.get("range"), "application/octet-stream")
        if file is None or file.size == 0:  # NNI's answer for an empty (or absent) log
            if file is not None:
                file.close()
            return PlainTextResponse(f"{name} is empty.")
        return serve_file(file, request.headers.get("range"), "text/plain; charset=utf-8")

    return route.routes
