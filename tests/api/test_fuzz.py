"""Fuzz the REST API of a real running manager (local service, real trial processes): thousands of
generated requests over every routed NNI and native path (``nnix.testing.fuzz``). No answer is a 5xx,
the manager is still running and serving afterwards, and its state still folds from the store.

Deterministic: hypothesis derandomized, no example database. ``NNIX_FUZZ_CASES`` sets the count
(default 2000); ``bench/fuzz.py`` runs the same with many more.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

hypothesis = pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from nnix.api.app import create_app  # noqa: E402
from nnix.host.build import build_manager  # noqa: E402
from nnix.query.snapshot import fold_store  # noqa: E402
from nnix.testing import wait_until_async  # noqa: E402
from nnix.testing.fuzz import FuzzRequest, requests, route_specs  # noqa: E402

CASES = int(os.environ.get("NNIX_FUZZ_CASES", "2000"))


def fuzz_manager(exp_dir: Path, cases: int, report: Callable[[str], None] = print) -> Counter[int]:
    """Run a manager for ``exp_dir`` in a thread, fuzz its app with ``cases`` requests, check it after.
    Returns the count of answers by status code; raises AssertionError on a 5xx or a broken manager."""
    loop = asyncio.new_event_loop()
    manager = build_manager(exp_dir, exit_when_done=False, kill_grace=1.0)
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        box["app"] = create_app(manager)
        box["task"] = asyncio.ensure_future(manager.run())
        box["client"] = httpx.AsyncClient(transport=httpx.ASGITransport(app=box["app"]),
                                          base_url="http://127.0.0.1", timeout=60)
        ready.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(main(), loop).result(60)
    ready.wait(60)

    def call(coro: Any, timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)

    async def until_running() -> list[str]:
        await wait_until_async(lambda: any(t.status.value == "RUNNING" for t in manager.state.trials.values()), 60,
                               "a running trial")
        return list(manager.state.trials)

    codes: Counter[int] = Counter()
    try:
        ids = call(asyncio.wait_for(until_running(), 60))
        specs = route_specs(box["app"].ctx)

        @settings(max_examples=cases, derandomize=True, database=None, deadline=None, print_blob=False,
                  suppress_health_check=list(HealthCheck))
        @given(req=requests(specs, ids))
        def check(req: FuzzRequest) -> None:
            c: httpx.AsyncClient = box["client"]
            r = call(c.request(req.method, req.url, headers=req.headers, content=req.content))
            codes[r.status_code] += 1
            assert r.status_code < 500, f"{req} -> {r.status_code} {r.text[:300]}"

        t0 = time.perf_counter()
        check()

        assert not box["task"].done(), "the manager stopped during the fuzzing"
        assert call(box["client"].get("/api/v1/nni/version")).status_code == 200

        async def folds() -> tuple[dict[str, str], dict[str, str]]:  # atomic on the manager's loop
            folded = fold_store(manager.store)
            return ({t: s.status.value for t, s in manager.state.trials.items()},
                    {t: s.status.value for t, s in folded.trials.items()})

        live, folded = call(folds())
        assert live == folded and len(live) >= len(ids)
        report(f"fuzzed {sum(codes.values())} requests over {len(specs)} routes in {time.perf_counter() - t0:.0f} s: "
               f"{dict(sorted(codes.items()))}; 5xx: {sum(n for c, n in codes.items() if c >= 500)}; "
               f"{len(live)} trials, state folds from the store")
    finally:
        async def close() -> None:
            manager.request_stop()
            try:
                await asyncio.wait_for(box["task"], 60)
            finally:
                await box["client"].aclose()
                manager.store.close()

        if "task" in box:
            call(close(), 120)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
    return codes


def test_fuzzed_requests_never_fail_the_server(sleeper: Any, capsys: Any) -> None:
    exp_dir = sleeper(trialConcurrency=1, maxTrialNumber=3)
    codes = fuzz_manager(exp_dir, CASES)
    with capsys.disabled():
        fivexx = sum(n for c, n in codes.items() if c >= 500)
        sys.stdout.write(f"\n  fuzz: {sum(codes.values())} requests, 5xx: {fivexx}\n")
    assert sum(codes.values()) >= CASES and 200 in codes and 400 in codes and 404 in codes


# --- hostile import data (NNI's import-data route): refused whole, naming the record and field -------------------

HOSTILE_IMPORTS: list[tuple[bytes, str]] = [
    (b'[{"parameter": {"x": 0.5}, "value": 1' + b"0" * 400 + b"}]", "import record [0]: 'value'"),
    (b'[{"parameter": {"x": 0.5}, "value": 0.5}, {"parameter": {"x": 0.5}, "value": "nan"}]',
     "import record [1]: 'value'"),
    (b'[{"parameter": {"x": 0.5}, "value": null}]', "import record [0]: 'value'"),
    (b'[{"parameter": {"x": 0.5}, "value": [1, 2]}]', "import record [0]: 'value'"),
    (b'[{"parameter": {"x": 0.5}, "value": true}]', "import record [0]: 'value'"),
    (b'[{"parameter": {"x": 0.5}, "value": NaN}]', "import record [0]: 'value'"),
    (b'[{"parameter": {"x": 0.5}, "value": -Infinity}]', "import record [0]: 'value'"),
    (b'[{"parameter": {"x": 0.5}, "value": {"default": 1' + b"0" * 400 + b"}}]", "import record [0]: 'value'"),
    (b'[{"parameter": {"x": 1' + b"0" * 400 + b'}, "value": 0.5}]', "import record [0]: 'parameter.x'"),
    (b'[{"parameter": {"x": ' + b"[" * 200 + b"]" * 200 + b'}, "value": 0.5}]', "nested deeper"),
    (b'[{"parameter": {"x": 0.5}}]', "import record [0]: has no 'value'"),
    (b'[{"parameter": "x", "value": 1}]', "import record [0]: 'parameter' must be a JSON object"),
    (b'[7]', "import record [0]: must be an object"),
    (b'{"parameter": {"x": 0.5}, "value": 0.5}', "must be a JSON list"),
    (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
]


@pytest.mark.parametrize("body,expected", HOSTILE_IMPORTS)
def test_hostile_import_data_is_refused_and_nothing_is_recorded(finished: Path, h: Any, body: bytes,
                                                                expected: str) -> None:
    manager, app = h.viewer(finished, read_only=False)
    before = manager.state.last_seq

    async def go() -> httpx.Response:
        async with h.client(app) as c:
            r: httpx.Response = await c.post("/api/v1/nni/experiment/import-data", content=body,
                                             headers={"Content-Type": "application/json"})
            return r

    try:
        r = h.run(go())
        assert r.status_code == 400 and expected in r.json()["error"], r.text[:500]
        assert len(r.text) < 1000
        assert manager.state.last_seq == before and manager.state.imported == []
    finally:
        manager.store.close()


# --- Host headers (DNS rebinding): only host[:port] with a loopback host passes a loopback bind --------------------

LOOPBACK_HOST = re.compile(r"((localhost|127(\.[0-9]{1,3}){3})\.?|\[[0-9a-f:.]+\])(:[0-9]{1,5})?")


@settings(max_examples=3000, derandomize=True, database=None, deadline=None)
@given(value=st.one_of(
    st.text(max_size=40),
    st.builds(lambda host, sep, tail: host + sep + tail,
              st.sampled_from(["127.0.0.1", "localhost", "[::1]", "127.1.2.3", "LOCALHOST"]),
              st.sampled_from([":", "@", ".", "", "]", ":1", " ", "%"]), st.text(max_size=20))))
def test_a_loopback_bind_allows_only_a_strict_loopback_host(value: str) -> None:
    from nnix.api.security import HostPolicy

    if HostPolicy("127.0.0.1").allows(value):
        assert LOOPBACK_HOST.fullmatch(value.strip().lower()), repr(value)


@pytest.mark.parametrize("host", ["127.0.0.1:18301@evil.test", "127.0.0.1:abc", "localhost:80@evil.test",
                                  "127.0.0.1:80/evil", "[::1]:80@evil.test", "::1", "127.0.0.1%2f", "127.0.0.1:-1"])
def test_a_host_header_that_is_not_host_port_is_refused(finished: Path, h: Any, host: str) -> None:
    manager, app = h.viewer(finished, read_only=False)

    async def go() -> httpx.Response:
        async with h.client(app) as c:
            r: httpx.Response = await c.get("/api/v1/nni/trial-jobs", headers={"Host": host})
            return r

    try:
        r = h.run(go())
        assert r.status_code == 403 and "rebinding" in r.json()["error"], (host, r.status_code)
    finally:
        manager.store.close()
