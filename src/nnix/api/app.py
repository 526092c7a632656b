"""REST routes served by an experiment's manager.

``/api/v1/nni/...`` keeps NNI's paths and payload shapes (metric values double-encoded as JSON
strings, times in milliseconds) so tools written against NNI keep working. Every handler reads
the manager's folded state; every change goes through the manager, which records it first.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from nnix import __version__
from nnix.config import ExperimentConfig
from nnix.core.manager import ExperimentManager
from nnix.core.state import Metric, TrialState
from nnix.core.status import TrialStatus
from nnix.errors import InputError, NnixError

PREFIX = "/api/v1/nni"


def _ms(ts: float | None) -> int | None:
    return None if ts is None else int(ts * 1000)


def _dumps(value: Any) -> str:
    return json.dumps(value, allow_nan=True)


def metric_record(t: TrialState, m: Metric) -> dict[str, Any]:
    return {
        "timestamp": _ms(m.ts),
        "trialJobId": t.trial_id,
        "parameterId": None if t.parameter_id is None else str(t.parameter_id),
        "type": m.type.value,
        "sequence": m.sequence,
        "data": json.dumps(_dumps(m.value)),
    }


def trial_info(t: TrialState) -> dict[str, Any]:
    record = {"parameter_id": t.parameter_id, "parameter_source": t.source, "parameters": t.params,
              "parameter_index": 0}
    info: dict[str, Any] = {
        "trialJobId": t.trial_id,
        "sequenceId": t.sequence_id,
        "status": t.status.value,
        "hyperParameters": [_dumps(record)],
    }
    if t.started_at is not None:
        info["startTime"] = _ms(t.started_at)
    if t.ended_at is not None:
        info["endTime"] = _ms(t.ended_at)
    if t.output_dir:
        info["logPath"] = f"file://localhost:{t.output_dir}"
        if t.status is TrialStatus.FAILED:
            info["stderrPath"] = f"file://localhost:{t.output_dir}/trial.stderr"
    if t.environment_id:
        info["envId"] = t.environment_id
    if t.message:
        info["message"] = t.message
    final = t.final
    if final is not None:
        info["finalMetricData"] = [metric_record(t, final)]
    return info


def profile(manager: ExperimentManager) -> dict[str, Any]:
    st = manager.state
    params = ExperimentConfig.model_validate(st.config).to_json()
    limits = st.limits
    params["trialConcurrency"] = limits.get("trial_concurrency")
    for key, name in (("max_trial_number", "maxTrialNumber"), ("max_experiment_duration", "maxExperimentDuration")):
        if limits.get(key) is None:
            params.pop(name, None)
        else:
            params[name] = limits[key] if key == "max_trial_number" else f"{limits[key]}s"
    params["searchSpace"] = limits.get("search_space")
    prof: dict[str, Any] = {
        "params": params,
        "id": st.experiment_id,
        "execDuration": int(st.elapsed(manager.clock())),
        "logDir": str(manager.exp_dir),
        "startTime": _ms(st.created_at),
        "nextSequenceId": st.next_sequence_id,
        "revision": st.last_seq,
    }
    if st.end_time is not None:
        prof["endTime"] = _ms(st.end_time)
    return prof


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _duration(value: Any) -> int:
    from nnix.config import parse_duration

    return parse_duration(value)


UPDATES = {
    "TRIAL_CONCURRENCY": ("trial_concurrency", "trialConcurrency"),
    "MAX_TRIAL_NUM": ("max_trial_number", "maxTrialNumber"),
    "MAX_EXEC_DURATION": ("max_experiment_duration", "maxExperimentDuration"),
    "SEARCH_SPACE": ("search_space", "searchSpace"),
}


def create_app(manager: ExperimentManager, *, read_only: bool = False) -> Starlette:
    async def version(_: Request) -> Response:
        return JSONResponse(__version__)

    async def check_status(_: Request) -> Response:
        st = manager.state
        status = "VIEWED" if read_only else st.status.value
        return JSONResponse({"status": status, "errors": st.errors, "message": st.message,
                             "waitingReason": manager.waiting_reason})

    async def get_experiment(_: Request) -> Response:
        return JSONResponse(profile(manager))

    async def put_experiment(request: Request) -> Response:
        if read_only:
            return _error(400, "readonly mode: the experiment is only viewed")
        kind = request.query_params.get("update_type", "")
        if kind not in UPDATES:
            return _error(400, f"update_type must be one of {', '.join(UPDATES)}")
        field, camel = UPDATES[kind]
        try:
            body = await request.json()
            value = body["params"][camel]
        except (ValueError, KeyError, TypeError):
            return _error(400, f"body must be the experiment profile with params.{camel}")
        try:
            if field == "max_experiment_duration":
                value = _duration(value)
            elif field in ("trial_concurrency", "max_trial_number") and (
                isinstance(value, bool) or not isinstance(value, int) or value <= 0
            ):
                return _error(400, f"{camel} must be a positive integer, got {value!r}")
            manager.update_limit(field, value)
        except InputError as e:
            return _error(400, str(e))
        except NnixError as e:
            return _error(400, str(e))
        return Response(status_code=200)

    async def delete_experiment(_: Request) -> Response:
        manager.request_stop()
        return Response(status_code=200)

    async def trial_jobs(request: Request) -> Response:
        status = request.query_params.get("status")
        trials = manager.state.trials.values()
        if status:
            trials = [t for t in trials if t.status.value == status]  # type: ignore[assignment]
        return JSONResponse([trial_info(t) for t in trials])

    async def trial_job(request: Request) -> Response:
        t = manager.state.trials.get(request.path_params["id"])
        if t is None:
            return _error(404, f"trial {request.path_params['id']} not found")
        return JSONResponse(trial_info(t))

    async def kill_trial(request: Request) -> Response:
        if read_only:
            return _error(400, "readonly mode: the experiment is only viewed")
        tid = request.path_params["id"]
        if tid not in manager.state.trials:
            return _error(404, f"trial {tid} not found")
        manager.cancel_trial(tid)
        return Response(status_code=200)

    async def metric_data(request: Request) -> Response:
        tid = request.path_params.get("id")
        mtype = request.query_params.get("type")
        out: list[dict[str, Any]] = []
        for t in manager.state.trials.values():
            if tid and t.trial_id != tid:
                continue
            out.extend(metric_record(t, m) for m in t.metrics if not mtype or m.type.value == mtype)
        if tid and tid not in manager.state.trials:
            return _error(404, f"trial {tid} not found")
        return JSONResponse(out)

    async def job_statistics(_: Request) -> Response:
        counts: dict[str, int] = {}
        for t in manager.state.trials.values():
            counts[t.status.value] = counts.get(t.status.value, 0) + 1
        return JSONResponse([{"trialJobStatus": k, "trialJobNumber": v} for k, v in counts.items()])

    async def export_data(_: Request) -> Response:
        rows = []
        for t in manager.state.trials.values():
            final = t.final
            if final is not None:
                rows.append({"parameter": t.params, "value": _dumps(final.value), "trialJobId": t.trial_id})
        return JSONResponse(json.dumps(rows))

    async def import_data(request: Request) -> Response:
        if read_only:
            return _error(400, "readonly mode: the experiment is only viewed")
        from nnix.cli.control import validate_import

        try:
            records = validate_import(await request.json())
        except ValueError:
            return _error(400, "body must be a JSON list of {parameter, value}")
        except NnixError as e:
            return _error(400, str(e))
        manager.import_data(records)
        return Response(status_code=200)

    async def trial_file(request: Request) -> Response:
        tid, name = request.path_params["id"], request.path_params["name"]
        t = manager.state.trials.get(tid)
        if t is None or not t.output_dir:
            return _error(404, f"trial {tid} not found or not started")
        mapped = {"stdout": "trial.stdout", "stderr": "trial.stderr", "trial.log": "trial.log"}.get(name)
        if mapped is None:
            return _error(400, "filename must be stdout, stderr or trial.log")
        from pathlib import Path

        path = Path(t.output_dir) / mapped
        text = path.read_text(errors="replace") if path.exists() else ""
        return PlainTextResponse(text or f"{name} is empty.")

    routes = [
        Route(f"{PREFIX}/version", version),
        Route(f"{PREFIX}/check-status", check_status),
        Route(f"{PREFIX}/experiment", get_experiment, methods=["GET"]),
        Route(f"{PREFIX}/experiment", put_experiment, methods=["PUT"]),
        Route(f"{PREFIX}/experiment", delete_experiment, methods=["DELETE"]),
        Route(f"{PREFIX}/trial-jobs", trial_jobs, methods=["GET"]),
        Route(f"{PREFIX}/trial-jobs/{{id}}", trial_job, methods=["GET"]),
        Route(f"{PREFIX}/trial-jobs/{{id}}", kill_trial, methods=["DELETE"]),
        Route(f"{PREFIX}/metric-data", metric_data),
        Route(f"{PREFIX}/metric-data/{{id}}", metric_data),
        Route(f"{PREFIX}/job-statistics", job_statistics),
        Route(f"{PREFIX}/export-data", export_data),
        Route(f"{PREFIX}/experiment/import-data", import_data, methods=["POST"]),
        Route(f"{PREFIX}/trial-file/{{id}}/{{name}}", trial_file),
    ]
    return Starlette(routes=routes)

