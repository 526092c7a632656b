"""Hypothesis strategies that fuzz the REST API: every routed path of NNI's API and the native API
(query parameters of the native routes from the OpenAPI document), with path parameters, query
strings and JSON bodies that are sometimes well-formed, sometimes almost, sometimes nonsense.

Requests are made as a non-browser client would (no ``Origin``; bodies sent as
``application/json``). Routes that end the experiment (``DELETE /experiment``,
``POST /experiment/stop``) and the endless event stream are left out, so that a fuzzed manager
stays up to be checked afterwards. Numbers that a limit change would accept are kept small
(at most 3): the API is fuzzed, not the machine (a concurrency of 2**31 - 1 would start trials
until it falls over).

Needs ``hypothesis`` (a test dependency).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from hypothesis import strategies as st

from nnix.api import compat, native
from nnix.api.common import ApiContext
from nnix.api.openapi import document

SKIP = {("DELETE", "/api/v1/nni/experiment"), ("POST", "/api/nnix/v1/experiment/stop"),
        ("GET", "/api/nnix/v1/events")}
KEYS = ["parameters", "params", "trialConcurrency", "maxTrialNumber", "maxExperimentDuration", "searchSpace",
        "parameter", "value", "x", "opt", "_type", "_value", "type", "sequence", "id", "status", ""]
NNI_QUERY = {"update_type": ["TRIAL_CONCURRENCY", "MAX_TRIAL_NUM", "MAX_EXEC_DURATION", "SEARCH_SPACE", "X"],
             "status": ["RUNNING", "WAITING", "SUCCEEDED", "FAILED", "running", ""],
             "type": ["PERIODICAL", "FINAL", "final"]}


@dataclass(frozen=True)
class RouteSpec:
    method: str
    path: str  # with {param} placeholders
    query: dict[str, list[str]]  # known query names -> sample values


@dataclass(frozen=True)
class FuzzRequest:
    method: str
    url: str
    headers: dict[str, str]
    content: bytes | None

    def __str__(self) -> str:
        body = "" if self.content is None else f" body={self.content[:200]!r}"
        return f"{self.method} {self.url}{body}"


def _native_query() -> dict[tuple[str, str], dict[str, list[str]]]:
    out: dict[tuple[str, str], dict[str, list[str]]] = {}
    for path, ops in document()["paths"].items():
        for method, op in ops.items():
            names: dict[str, list[str]] = {}
            for p in op.get("parameters", []):
                if p["in"] != "query":
                    continue
                schema = p.get("schema", {})
                samples = [str(v) for v in schema.get("enum", [])]
                if schema.get("type") == "integer" or "oneOf" in schema:
                    samples += ["0", "1", "2", "-1", "100000000000000000000", "all", "1.5"]
                names[p["name"]] = samples or ["RUNNING,WAITING", "-metric", "param:x", "metric:acc", "0a"]
            out[(method.upper(), native.PREFIX + path)] = names
    return out


def route_specs(ctx: ApiContext) -> list[RouteSpec]:
    """Every API route of an app (as routed, so a new route is fuzzed without being listed here)."""
    documented = _native_query()
    specs: list[RouteSpec] = []
    for r in compat.routes(ctx) + native.routes(ctx):
        for method in sorted((r.methods or {"GET"}) - {"HEAD"}):
            if (method, r.path) in SKIP:
                continue
            query = documented.get((method, r.path)) if r.path.startswith(native.PREFIX) else dict(NNI_QUERY)
            specs.append(RouteSpec(method, r.path, query or {}))
    return specs


# characters that matter to parsers and paths, plus some non-ASCII (cheaper to draw than any code point)
_text = st.text(st.sampled_from([*"aZ0_-.,:;/\\%?#&=+ \t\n\"'{}[]<>", "\x00", "é", "😀", "\u202e", "\ufffd"]),
                max_size=10)
_small = st.integers(-3, 3)
_edge_ints = st.sampled_from([0, -1, 2**31, 2**31 + 1, 2**63, -(2**63), 10**30])
_floats = st.floats(allow_nan=True, allow_infinity=True)


def _leaf() -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), st.booleans(), _small, _edge_ints, _floats, _text,
                     st.sampled_from(["uniform", "choice", "1h", "30m", "-5s", "1e999", "NaN", "2d"]))


def json_values() -> st.SearchStrategy[Any]:
    return st.recursive(
        _leaf(),
        lambda inner: st.one_of(st.lists(inner, max_size=4),
                                st.dictionaries(st.one_of(st.sampled_from(KEYS), _text), inner, max_size=4)),
        max_leaves=6,
    )


def _bodies() -> st.SearchStrategy[Any]:
    space = st.one_of(
        st.dictionaries(st.sampled_from(["x", "opt", "y"]), st.fixed_dictionaries(
            {"_type": st.sampled_from(["uniform", "choice", "randint", "normal", "bogus"]),
             "_value": st.lists(st.one_of(_small, _floats, _text), max_size=3)}), max_size=2),
        json_values())
    limit = st.one_of(_small, _edge_ints, _floats, _text, st.sampled_from(["1h", "0s", "-1", "10"]))
    return st.one_of(
        json_values(),
        st.fixed_dictionaries({"parameters": st.one_of(json_values(), st.dictionaries(
            st.sampled_from(["x", "opt"]), _leaf(), max_size=2))}),
        st.dictionaries(st.sampled_from(["trialConcurrency", "maxTrialNumber", "maxExperimentDuration",
                                         "searchSpace", "bogus"]), st.one_of(limit, space), min_size=1, max_size=3),
        st.fixed_dictionaries({"params": st.dictionaries(
            st.sampled_from(["trialConcurrency", "maxTrialNumber", "maxExperimentDuration", "searchSpace"]),
            st.one_of(limit, space), max_size=2)}),
        st.lists(st.fixed_dictionaries({"parameter": json_values(), "value": st.one_of(_leaf(), json_values())}),
                 max_size=3),
    )


def _encode(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True).encode()


_NAMES = st.one_of(st.sampled_from(["stdout", "stderr", "trial.log", "model.onnx", "trial.stdout", "passwd",
                                     "../../db/nnix.sqlite"]), _text)
_NUMBERS = st.one_of(_small.map(str), _edge_ints.map(str), _text)
_RANGES = st.sampled_from(["bytes=0-3", "bytes=-2", "bytes=99999999-", "bytes=x", "bytes=5-1"])
_PARAM = re.compile(r"\{(\w+)\}")


def requests(specs: list[RouteSpec], trial_ids: list[str]) -> st.SearchStrategy[FuzzRequest]:
    """Requests to ``specs``; path ids drawn mostly from ``trial_ids`` (the trials that exist)."""
    ids = st.one_of(st.sampled_from(trial_ids or ["aaaaa"]), _text, st.sampled_from(["..", "../db", "%00", " "]))
    bodies = _bodies()
    queries = {id(spec): {q: (st.one_of(st.sampled_from(v), _text) if v else _text) for q, v in spec.query.items()}
               for spec in specs}
    by_param = {"id": ids, "name": _NAMES}

    @st.composite
    def one(draw: st.DrawFn) -> FuzzRequest:
        spec = draw(st.sampled_from(specs))

        def fill(m: re.Match[str]) -> str:
            return quote(draw(by_param.get(m.group(1), _NUMBERS)), safe="") or "x"

        path = _PARAM.sub(fill, spec.path)
        query: dict[str, str] = {}
        for qname, strategy in queries[id(spec)].items():
            if draw(_COIN):
                query[qname] = draw(strategy)
        if draw(_D10) == 0:
            query[draw(_text) or "q"] = draw(_text)
        url = path + ("?" + urlencode(query) if query else "")
        headers = {"accept": "application/json"}
        content: bytes | None = None
        if spec.method in ("POST", "PUT", "PATCH"):
            kind = draw(_D10)
            if kind == 1:
                content = draw(_BINARY)
            elif kind > 1:
                content = _encode(draw(bodies))
            if content is not None:
                headers["content-type"] = "application/json"
        if draw(_D10) == 0:
            headers["range"] = draw(_RANGES)
        return FuzzRequest(spec.method, url, headers, content)

    return one()


_COIN = st.booleans()
_D10 = st.integers(0, 9)
_BINARY = st.binary(max_size=40)
