"""Large JSON answers (NNI's metric-data) are streamed a slice at a time: exact content, bounded pieces,
other requests served while one is in flight."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from nnix.api.compat import metric_record
from nnix.api.jsonstream import SLICE_BYTES, json_array
from nnix.core.state import Metric
from nnix.core.status import MetricType
from nnix.testing.asgi import paused_get

P = "/api/v1/nni"
N = "/api/nnix/v1"


def test_fast_records_equal_the_plain_ones(finished: Path, h: Any) -> None:
    from nnix.api.compat import metric_records

    manager, _ = h.viewer(finished)
    t = manager.state.trials["aaaaa"]
    odd = [Metric(MetricType.PERIODICAL, 7, float("nan"), 1.5, 9),
           Metric(MetricType.PERIODICAL, 8, float("inf"), 2.0, 10),
           Metric(MetricType.FINAL, 0, {"default": 1, "s": "é\"\\"}, 1234567.891, 11),
           Metric(MetricType.PERIODICAL, 9, [1, None, True], float("nan"), 12),  # not from the fold: still JSON
           Metric(MetricType.PERIODICAL, 10, 0.5, 3, 13)]
    assert [json.loads(b) for b in metric_records(t, t.metrics)] == [metric_record(t, m) for m in t.metrics]
    assert [json.loads(b) for b in metric_records(t, odd[2:3])] == [metric_record(t, odd[2])]
    got = [json.loads(b) for b in metric_records(t, odd)]
    assert [json.loads(r["data"]) for r in got] == ["NaN", "Infinity", '{"default": 1, "s": "\\u00e9\\"\\\\"}',
                                                     "[1, null, true]", "0.5"]
    assert got[3]["timestamp"] is None and got[4]["timestamp"] == 3000 and got[0]["timestamp"] == 1500
    assert [json.loads(b)["type"] for b in metric_records(t, odd, "FINAL")] == ["FINAL"]


def test_json_array() -> None:
    async def collect(parts: list[bytes | None]) -> bytes:
        return b"".join([piece async for piece in json_array(parts)])

    assert json.loads(asyncio.run(collect([]))) == []
    assert json.loads(asyncio.run(collect([None, b"1", None, b"2", None]))) == [1, 2]


def test_metric_data_is_streamed_while_others_are_served(finished: Path, h: Any) -> None:
    manager, app = h.viewer(finished)
    t = manager.state.trials["aaaaa"]
    for i in range(40_000):  # the API reads the folded state: grow it as a fast trial would
        t.metrics.append(Metric(MetricType.PERIODICAL, 100 + i, i / 7, 1000.0 + i, 100 + i))
    expected = [metric_record(x, m) for x in manager.state.trials.values() for m in x.metrics]

    async def go() -> None:
        for path in (f"{P}/metric-data", f"{P}/metric-data/aaaaa", f"{N}/trials/aaaaa/metrics"):
            resp = paused_get(app, path)
            await asyncio.wait_for(resp.first.wait(), 60)
            assert resp.status == 200 and resp.headers["content-type"].startswith("application/json")
            assert not resp.done.is_set(), f"{path}: the whole answer was sent at once"
            assert len(resp.body) <= 2 * SLICE_BYTES
            t.metrics.append(Metric(MetricType.PERIODICAL, 10**6, 0.0, 1.0, 10**6))  # arrives meanwhile
            async with h.client(app) as c:
                r = await asyncio.wait_for(c.get(f"{P}/version"), 60)
                assert r.status_code == 200
            assert not resp.done.is_set()
            resp.resume()
            await asyncio.wait_for(resp.done.wait(), 120)
            got = json.loads(resp.body)
            t.metrics.pop()
            if path == f"{P}/metric-data":
                assert got == json.loads(json.dumps(expected))  # the snapshot taken when the request came
            elif path.endswith("aaaaa"):
                assert got == json.loads(json.dumps([r for r in expected if r["trialJobId"] == "aaaaa"]))
            else:
                assert len(got) == len(t.metrics) and got[-1]["sequence"] == 100 + 39_999

    h.run(go())


def test_a_stream_fitting_one_slice_is_sent_whole_and_a_long_one_in_pieces() -> None:
    """A short answer goes out as any other response (its length known: a client that half-closes after its request
    still gets it); a long one in slices of its own (no length)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from nnix.api.jsonstream import JSONStream
    from nnix.testing.asgi import paused_get

    async def short(_: Request) -> Response:
        return JSONStream([b"1", None, b"2"], head=b'{"a":[', tail=b"]}", headers={"x-kept": "yes"})

    async def long(_: Request) -> Response:
        return JSONStream(json.dumps("x" * 1000).encode() for _ in range(3 * SLICE_BYTES // 1000))

    app = Starlette(routes=[Route("/short", short), Route("/long", long)])

    async def go() -> None:
        resp = paused_get(app, "/short")
        await asyncio.wait_for(resp.done.wait(), 60)
        assert resp.status == 200 and resp.headers["content-length"] == str(len(b'{"a":[1,2]}'))
        assert resp.headers["x-kept"] == "yes" and resp.headers["content-type"].startswith("application/json")
        assert json.loads(resp.body) == {"a": [1, 2]}
        resp = paused_get(app, "/long")
        await asyncio.wait_for(resp.first.wait(), 60)
        assert "content-length" not in resp.headers and not resp.done.is_set()
        resp.resume()
        await asyncio.wait_for(resp.done.wait(), 60)
        assert len(json.loads(resp.body)) == 3 * SLICE_BYTES // 1000

    asyncio.run(go())


def test_parts_given_whole_make_the_same_array_a_slice_of_parts_at_a_time(monkeypatch: Any) -> None:
    """Parts given whole (a kept list) are joined LIST_STEP at a time: the same bytes as one at a time."""
    from nnix.api import jsonstream
    from nnix.query import Parts

    monkeypatch.setattr(jsonstream, "LIST_STEP", 3)

    async def collect(parts: Any) -> list[bytes]:
        return [chunk async for chunk in json_array(parts)]

    for n in (0, 1, 3, 4, 7):
        parts = [str(i).encode() for i in range(n)]
        slices = asyncio.run(collect(Parts(parts)))
        want = f"[{','.join(map(str, range(n)))}]".encode()
        assert b"".join(slices) == b"".join(asyncio.run(collect(iter(parts)))) == want
        assert len(slices) == ((n + 2) // 3 + 1 if n else 1)
