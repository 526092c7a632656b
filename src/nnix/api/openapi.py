"""The OpenAPI 3.1 document of the native API (served at ``/api/nnix/v1/openapi.json``).

Hand-written, so it says what the routes promise rather than what a framework infers; a test
checks that every native route is documented and every documented path is routed.
"""

from __future__ import annotations

from typing import Any

from nnix.version import __version__

_ERR = {"description": "Refused", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


def _json(ref: str, description: str = "OK") -> dict[str, Any]:
    schema = {"$ref": f"#/components/schemas/{ref}"}
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _param(name: str, where: str, description: str, schema: dict[str, Any] | None = None,
           required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": where, "description": description, "required": required or where == "path",
            "schema": schema or {"type": "string"}}


TRIAL_ID = _param("id", "path", "Trial id (NNI's 5-character id).")
SEARCH = _param("q", "query", "Search, parts split by ';' all to match: free text (part of a trial id or its message, "
                              "or a Trial No.) or NAME OP VALUE (OP: > < >= <= = : !=; NAME:[a, b] a range; NAME: "
                              "metric, status, seq, id, duration, metric:KEY, a final-result key or a parameter)")
SORT = _param("sort", "query", "seq, id, status, metric, latest, duration, start, end, nInter, param:NAME or "
                               "metric:KEY; prefix - for descending")
ORDER = _param("order", "query", "asc or desc (overrides the - prefix)", {"enum": ["asc", "desc"]})

SCHEMAS: dict[str, Any] = {
    "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}},
    "Limits": {
        "type": "object",
        "properties": {
            "trialConcurrency": {"type": "integer", "minimum": 1},
            "maxTrialNumber": {"type": ["integer", "null"], "minimum": 1},
            "maxExperimentDuration": {"type": ["integer", "null"], "description": "seconds"},
            "maxTrialDuration": {"type": ["integer", "null"], "description": "seconds"},
        },
    },
    "Overview": {
        "type": "object",
        "properties": {
            "id": {"type": "string"}, "name": {"type": "string"},
            "status": {"type": "string", "description": "NNI's experiment status; VIEWED when read-only"},
            "recordedStatus": {"type": "string"}, "readOnly": {"type": "boolean"},
            "message": {"type": "string"}, "errors": {"type": "array", "items": {"type": "string"}},
            "startTime": {"type": ["integer", "null"], "description": "ms since the epoch"},
            "endTime": {"type": ["integer", "null"]}, "now": {"type": "integer"},
            "elapsed": {"type": "number", "description": "seconds of running time (NNI's execDuration)"},
            "limits": {"$ref": "#/components/schemas/Limits"},
            "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
            "total": {"type": "integer"},
            "best": {"type": ["object", "null"], "properties": {
                "id": {"type": "string"}, "seq": {"type": "integer"}, "metric": {"type": "number"}}},
            "direction": {"enum": ["maximize", "minimize"]},
            "config": {"type": "object", "description": "NNI v2 camelCase config"},
            "searchSpace": {"type": ["object", "null"]},
            "metricKeys": {"type": "array", "items": {"type": "string"}},
            "paramKeys": {"type": "array", "items": {"type": "string"}},
            "waitingReason": {"type": "string"}, "platform": {"type": "string"},
            "resuming": {"type": "boolean", "description": "a resumed manager still reads its tuner's history "
                         "(no trial starts meanwhile; waitingReason says so)"},
            "trialCommand": {"type": "string"}, "logDir": {"type": "string"},
            "seq": {"type": "integer", "description": "last event sequence number folded in"},
            "version": {"type": "string"},
        },
    },
    "Trial": {
        "type": "object",
        "properties": {
            "id": {"type": "string"}, "seq": {"type": "integer", "description": "Trial No."},
            "status": {"enum": ["WAITING", "RUNNING", "SUCCEEDED", "FAILED", "USER_CANCELED", "SYS_CANCELED",
                                "EARLY_STOPPED", "UNKNOWN"]},
            "source": {"enum": ["algorithm", "customized"]},
            "parameterId": {"type": ["integer", "null"]}, "params": {"type": "object"},
            "created": {"type": "integer"}, "start": {"type": ["integer", "null"]},
            "end": {"type": ["integer", "null"]}, "duration": {"type": ["number", "null"], "description": "seconds"},
            "final": {"description": "the final result as reported (a number or a dict with 'default')"},
            "hasFinal": {"type": "boolean", "description": "whether a final result was reported"},
            "metric": {"type": ["number", "null"], "description": "the default metric of the final result"},
            "latest": {"type": ["number", "null"], "description": "the latest intermediate result"},
            "nInter": {"type": "integer"}, "message": {"type": "string"},
            "env": {"type": ["string", "null"]}, "exitCode": {"type": ["integer", "null"]},
            "warnings": {"type": "integer", "description": "metric lines not recorded + leftover processes killed"},
        },
    },
    "Metric": {
        "type": "object",
        "properties": {
            "type": {"enum": ["PERIODICAL", "FINAL"]}, "sequence": {"type": "integer"}, "value": {},
            "index": {"type": "integer"}, "ts": {"type": "integer"},
        },
    },
    "TrialDetail": {
        "allOf": [{"$ref": "#/components/schemas/Trial"}, {"type": "object", "properties": {
            "metrics": {"type": "array", "items": {"$ref": "#/components/schemas/Metric"}},
            "hyperParameters": {"type": "string", "description": "NNI's parameter record (JSON text)"},
            "outputDir": {"type": ["string", "null"]},
            "logs": {"type": "object", "additionalProperties": {"type": ["integer", "null"]},
                     "description": "log name -> size in bytes (null: absent)"},
            "cancelReason": {"type": ["string", "null"]},
            "gpus": {"type": ["array", "null"], "items": {"type": "integer"}},
            "warningMessages": {"type": "array", "items": {"type": "string"},
                                "description": "the latest warnings about the trial (bad metric lines, leftovers)"},
        }}],
    },
    "TrialPage": {
        "type": "object",
        "properties": {
            "total": {"type": "integer", "description": "trials matching the filter"},
            "offset": {"type": "integer"}, "limit": {"type": ["integer", "null"]},
            "seq": {"type": "integer"},
            "items": {"type": "array", "items": {"$ref": "#/components/schemas/Trial"}},
        },
    },
    "Curves": {
        "type": "object",
        "properties": {
            "key": {"type": "string"},
            "trials": {"type": "array", "items": {"type": "object", "properties": {
                "id": {"type": "string"}, "x": {"type": "array", "items": {"type": "integer"}},
                "y": {"type": "array", "items": {"type": "number"}}}}},
        },
    },
    "ExperimentEntry": {
        "type": "object",
        "properties": {
            "id": {"type": "string"}, "name": {"type": "string"}, "status": {"type": "string"},
            "port": {"type": ["integer", "null"]}, "platform": {"type": "string"},
            "startTime": {"type": ["integer", "null"]}, "endTime": {"type": ["integer", "null"]},
            "url": {"type": ["string", "null"]}, "current": {"type": "boolean"}, "dir": {"type": "string"},
        },
    },
    "LimitsPatch": {
        "type": "object", "minProperties": 1, "additionalProperties": False,
        "properties": {
            "trialConcurrency": {"type": "integer", "minimum": 1},
            "maxTrialNumber": {"type": "integer", "minimum": 1},
            "maxExperimentDuration": {"type": ["integer", "string"], "description": "seconds, or e.g. '2h'"},
            "searchSpace": {"type": "object"},
        },
    },
}


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "nnix experiment API",
            "version": __version__,
            "description": (
                "The native API of one experiment's manager. Bound to a non-loopback address it requires "
                "'Authorization: Bearer <token>' (or the nnix_token cookie, or ?token=). NNI's own routes are "
                "served under /api/v1/nni with NNI's payloads."
            ),
        },
        "servers": [{"url": "/api/nnix/v1"}],
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{}, {"bearer": []}],
        "paths": {
            "/openapi.json": {"get": {"summary": "This document", "responses": {"200": {"description": "OK"}}}},
            "/experiment": {
                "get": {"summary": "Experiment overview", "responses": {"200": _json("Overview")}},
                "patch": {
                    "summary": "Change limits (all or none); refused when read-only",
                    "requestBody": {"required": True, "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/LimitsPatch"}}}},
                    "responses": {"200": _json("Overview"), "400": _ERR, "415": _ERR},
                },
            },
            "/experiment/stop": {"post": {"summary": "Stop the experiment (or end a read-only view)",
                                          "responses": {"202": {"description": "Stopping"}}}},
            "/trials": {
                "get": {
                    "summary": "Trials: filter, search, sort, page",
                    "parameters": [
                        _param("status", "query", "Comma-separated statuses, e.g. RUNNING,WAITING"),
                        SEARCH, SORT, ORDER,
                        _param("offset", "query", "Skip this many", {"type": "integer", "minimum": 0}),
                        _param("limit", "query", "Page size (default 100), or 'all'",
                               {"oneOf": [{"type": "integer", "minimum": 0}, {"const": "all"}]}),
                    ],
                    "responses": {"200": _json("TrialPage"), "400": _ERR},
                },
                "post": {
                    "summary": "Add a customized trial (NNI's re-run with edited parameters)",
                    "requestBody": {"required": True, "content": {"application/json": {"schema": {
                        "type": "object", "required": ["parameters"],
                        "properties": {"parameters": {"type": "object"}}}}}},
                    "responses": {"201": _json("Trial", "Created"), "400": _ERR, "415": _ERR},
                },
            },
            "/columns": {"get": {
                "summary": "Fields of every trial a query matches, one array per field (what a chart needs)",
                "description": ("The trials as /trials finds and sorts them (status, q, sort, order), all of them or "
                                "at most max evenly spaced in that order (the first and last kept); numbers with 7 "
                                "significant digits, a missing value as null."),
                "parameters": [
                    _param("fields", "query", "Comma-separated: seq, status, metric, latest, duration, start, end, "
                                              "nInter, param:NAME, metric:KEY", required=True),
                    _param("status", "query", "Comma-separated statuses, e.g. SUCCEEDED"), SEARCH, SORT, ORDER,
                    _param("max", "query", "At most this many trials", {"type": "integer", "minimum": 1}),
                ],
                "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {
                    "type": "object", "required": ["seq", "total", "id"],
                    "properties": {"seq": {"type": "integer"}, "total": {"type": "integer"},
                                   "id": {"type": "array", "items": {"type": "string"}}},
                    "additionalProperties": {"type": "array"}}}}}, "400": _ERR}}},
            "/trials/{id}": {"get": {"summary": "One trial with its metrics and log files",
                                     "parameters": [TRIAL_ID],
                                     "responses": {"200": _json("TrialDetail"), "404": _ERR}}},
            "/trials/{id}/metrics": {"get": {
                "summary": "A trial's metrics", "parameters": [
                    TRIAL_ID, _param("type", "query", "PERIODICAL or FINAL", {"enum": ["PERIODICAL", "FINAL"]})],
                "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {
                    "type": "array", "items": {"$ref": "#/components/schemas/Metric"}}}}}, "404": _ERR}}},
            "/trials/{id}/logs/{name}": {"get": {
                "summary": "The tail of a trial's log file (X-Nnix-Skipped: bytes left out before it), streamed",
                "description": ("A single 'Range: bytes=a-b' (of the whole file) is honoured (206). A file that is a "
                                "link, not a regular file, or has several hard links is refused (403)."),
                "parameters": [TRIAL_ID, _param("name", "path", "stdout, stderr or trial.log",
                                                {"enum": ["stdout", "stderr", "trial.log"]}),
                               _param("tail", "query", "At most this many bytes (default 262144)",
                                      {"type": "integer", "minimum": 1})],
                "responses": {"200": {"description": "Text", "content": {"text/plain": {}}},
                              "206": {"description": "The range asked", "content": {"text/plain": {}}},
                              "400": _ERR, "403": _ERR, "404": _ERR, "416": _ERR}}},
            "/trials/{id}/cancel": {"post": {
                "summary": "Kill a trial (USER_CANCELED); refused when read-only", "parameters": [TRIAL_ID],
                "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {
                    "type": "object", "properties": {"id": {"type": "string"}, "canceled": {"type": "boolean"},
                                                     "status": {"type": "string"}}}}}},
                              "400": _ERR, "404": _ERR}}},
            "/intermediate": {"get": {
                "summary": "Intermediate-result curves, downsampled (min/max per bucket)",
                "parameters": [
                    _param("trials", "query", "Comma-separated trial ids (default: all)"),
                    _param("maxPoints", "query", "At most this many points per trial (default 200)",
                           {"type": "integer", "minimum": 2}),
                    _param("key", "query", "Key of dict metrics (default: 'default')"),
                ],
                "responses": {"200": _json("Curves"), "400": _ERR, "404": _ERR}}},
            "/events": {"get": {
                "summary": "Live changes (server-sent events)",
                "description": (
                    "Events: 'hello' {seq, experiment} on connect; 'update' {seq, experiment, trials: [Trial] "
                    "(changed ones, whole), metrics: [{trial, type, sequence, value, index, ts}]}; 'tick' {seq, "
                    "experiment} (time passes); 'resync' (the client fell behind: reload a snapshot). Reload a "
                    "snapshot on every (re)connect and apply updates whose seq is newer."
                ),
                "responses": {"200": {"description": "An event stream", "content": {"text/event-stream": {}}}}}},
            "/experiments": {"get": {
                "summary": "The experiments of this machine (crashed ones read STOPPED)",
                "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {
                    "type": "array", "items": {"$ref": "#/components/schemas/ExperimentEntry"}}}}}}}},
        },
    }
