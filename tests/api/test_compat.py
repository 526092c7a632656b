"""NNI-compatible routes (/api/v1/nni): NNI's payload shapes, every route, malformed input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nnix import __version__
from nnix.core.events import ManagerStarted, StatusChanged
from nnix.core.status import CancelReason, ExperimentStatus, TrialStatus
from nnix.home import STORE_NAME, read_state
from nnix.store.sqlite import SqliteStore
from nnix.testing.experiments import make_experiment

P = "/api/v1/nni"


def test_read_routes_have_nni_shapes(finished: Path, h: Any) -> None:
    _, app = h.viewer(finished)

    async def go() -> None:
        async with h.client(app) as c:
            r = await c.get(f"{P}/version")
            assert r.status_code == 200 and r.text == __version__

            r = await c.get(f"{P}/check-status")
            assert r.json()["status"] == "VIEWED" and r.json()["errors"] == []

            prof = (await c.get(f"{P}/experiment")).json()
            assert set(prof) >= {"params", "id", "execDuration", "logDir", "startTime", "nextSequenceId", "revision"}
            assert prof["nextSequenceId"] == 5 and prof["params"]["maxTrialNumber"] == 20
            assert prof["params"]["searchSpace"]["opt"]["_value"] == ["a", "b"]
            assert prof["params"]["trialConcurrency"] == 1 and prof["params"]["experimentName"] == "known"

            jobs = (await c.get(f"{P}/trial-jobs")).json()
            assert [j["trialJobId"] for j in jobs] == ["aaaaa", "bbbbb", "ccccc", "ddddd", "eeeee"]
            a = jobs[0]
            assert a["sequenceId"] == 0 and a["status"] == "SUCCEEDED" and a["startTime"] <= a["endTime"]
            record = json.loads(a["hyperParameters"][0])
            assert record == {"parameter_id": 0, "parameter_source": "algorithm", "parameters": {"x": 0.1, "opt": "a"},
                              "parameter_index": 0}
            (final,) = a["finalMetricData"]
            assert json.loads(json.loads(final["data"])) == {"default": 0.5, "acc": 0.9}  # NNI's double encoding
            assert final["type"] == "FINAL" and final["parameterId"] == "0"
            b = jobs[1]
            assert b["status"] == "FAILED" and b["message"] == "exit code 2: boom"
            assert b["stderrPath"].endswith("/bbbbb/trial.stderr") and b["logPath"].startswith("file://localhost:")
            assert "startTime" not in jobs[3] and "finalMetricData" not in jobs[3]

            only = (await c.get(f"{P}/trial-jobs", params={"status": "SUCCEEDED"})).json()
            assert [j["trialJobId"] for j in only] == ["aaaaa", "ccccc"]
            assert (await c.get(f"{P}/trial-jobs/ccccc")).json()["sequenceId"] == 2

            stats = {s["trialJobStatus"]: s["trialJobNumber"] for s in (await c.get(f"{P}/job-statistics")).json()}
            assert stats == {"SUCCEEDED": 2, "FAILED": 1, "WAITING": 1, "USER_CANCELED": 1}

    h.run(go())


def test_metric_routes(finished: Path, h: Any) -> None:
    _, app = h.viewer(finished)

    async def go() -> None:
        async with h.client(app) as c:
            allm = (await c.get(f"{P}/metric-data")).json()
            assert len(allm) == 4 + 1 + 3
            assert set(allm[0]) == {"timestamp", "trialJobId", "parameterId", "type", "sequence", "data"}
            nan = next(m for m in allm
                       if m["trialJobId"] == "ccccc" and m["sequence"] == 0 and m["type"] == "PERIODICAL")
            assert json.loads(nan["data"]) == "NaN"  # NNI's reader uses JSON5 for NaN / Infinity
            mine = (await c.get(f"{P}/metric-data/aaaaa")).json()
            assert [json.loads(json.loads(m["data"])) for m in mine][:3] == [0.1, 0.2, 0.3]
            finals = (await c.get(f"{P}/metric-data", params={"type": "FINAL"})).json()
            assert {m["trialJobId"] for m in finals} == {"aaaaa", "ccccc"}
            per = (await c.get(f"{P}/metric-data/ccccc", params={"type": "PERIODICAL"})).json()
            assert [m["sequence"] for m in per] == [0, 1]

            latest = (await c.get(f"{P}/metric-data-latest/")).json()
            got = {(m["trialJobId"], m["type"]): json.loads(json.loads(m["data"])) for m in latest}
            assert got[("aaaaa", "PERIODICAL")] == 0.3 and got[("aaaaa", "FINAL")] == {"default": 0.5, "acc": 0.9}
            assert got[("bbbbb", "PERIODICAL")] == 0.05 and ("ddddd", "PERIODICAL") not in got
            assert (await c.get(f"{P}/metric-data-latest")).status_code == 200

            rng = (await c.get(f"{P}/metric-data-range/1/2")).json()
            assert {m["trialJobId"] for m in rng} == {"bbbbb", "ccccc"}  # inclusive
            assert (await c.get(f"{P}/metric-data-range/2/1")).json() == []

            export = (await c.get(f"{P}/export-data")).json()  # the body is the JSON array, as NNI sends it
            assert export == [
                {"parameter": {"x": 0.1, "opt": "a"}, "value": json.dumps({"default": 0.5, "acc": 0.9}),
                 "trialJobId": "aaaaa"},
                {"parameter": {"x": 0.9, "opt": "a"}, "value": "0.8", "trialJobId": "ccccc"},
            ]

    h.run(go())


def test_trial_files(finished: Path, h: Any) -> None:
    _, app = h.viewer(finished)

    async def go() -> None:
        async with h.client(app) as c:
            r = await c.get(f"{P}/trial-file/aaaaa/stdout")
            assert r.status_code == 200 and r.text == "hello from a\n"
            assert r.headers["content-type"].startswith("text/plain")
            assert (await c.get(f"{P}/trial-file/aaaaa/trial.log")).text == "log a\n"
            assert (await c.get(f"{P}/trial-file/aaaaa/stderr")).text == "stderr is empty."
            assert "boom" in (await c.get(f"{P}/trial-file/bbbbb/stderr")).text
            assert (await c.get(f"{P}/trial-file/bbbbb/trial.log")).text == "trial.log is empty."  # absent
            assert (await c.get(f"{P}/trial-file/aaaaa/model.onnx")).status_code == 404
            for url, code in [(f"{P}/trial-file/aaaaa/..%2F..%2Fdb%2Fnnix.sqlite", 404),
                              (f"{P}/trial-file/aaaaa/passwd", 400), (f"{P}/trial-file/zzzzz/stdout", 404),
                              (f"{P}/trial-file/ddddd/stdout", 404)]:
                r = await c.get(url)
                assert r.status_code == code, url
                assert "error" in r.json()

    h.run(go())


def test_malformed_and_unknown(finished: Path, h: Any) -> None:
    _, app = h.viewer(finished)

    async def go() -> None:
        async with h.client(app) as c:
            cases = [
                ("GET", f"{P}/trial-jobs?status=BOGUS", 400), ("GET", f"{P}/trial-jobs/nope", 404),
                ("GET", f"{P}/metric-data/nope", 404), ("GET", f"{P}/metric-data?type=SOMETIMES", 400),
                ("GET", f"{P}/metric-data-range/a/b", 400), ("GET", f"{P}/no-such-route", 404),
                ("POST", f"{P}/check-status", 405), ("PATCH", f"{P}/experiment", 405),
                ("GET", "/api/nope", 404),
            ]
            for method, url, code in cases:
                r = await c.request(method, url)
                assert r.status_code == code, (method, url, r.text)
                assert isinstance(r.json()["error"], str)

    h.run(go())


def test_mutations_are_refused_read_only(finished: Path, h: Any) -> None:
    manager, app = h.viewer(finished)
    before = manager.state.last_seq

    async def go() -> None:
        async with h.client(app) as c:
            for method, url, body in [
                ("PUT", f"{P}/experiment?update_type=TRIAL_CONCURRENCY", {"params": {"trialConcurrency": 3}}),
                ("POST", f"{P}/trial-jobs", {"x": 0.5}), ("DELETE", f"{P}/trial-jobs/ddddd", None),
                ("POST", f"{P}/experiment/import-data", [{"parameter": {"x": 1}, "value": 1}]),
            ]:
                r = await c.request(method, url, json=body)
                assert r.status_code == 400 and "readonly" in r.json()["error"], (url, r.text)

    h.run(go())
    assert manager.state.last_seq == before  # nothing recorded


def test_experiments_info_lists_the_registry_crashed_as_stopped(finished: Path, tmp_path: Path, h: Any) -> None:
    (tmp_path / "other").mkdir()
    _, other = make_experiment(tmp_path / "other", searchSpace={"x": {"_type": "uniform", "_value": [0, 1]}},
                               trialCommand="true")
    store = SqliteStore(other / STORE_NAME)
    store.append([ManagerStarted(2**22 + 12345, "create", 9999), StatusChanged(ExperimentStatus.RUNNING)])  # dead pid
    store.close()
    manager, app = h.viewer(finished)

    async def go() -> None:
        async with h.client(app) as c:
            info = (await c.get(f"{P}/experiments-info")).json()
            by_id = {e["id"]: e for e in info}
            assert set(by_id) == {manager.experiment_id, other.name}
            crashed = by_id[other.name]
            assert crashed["status"] == "STOPPED" and crashed["port"] is None and crashed["webuiUrl"] == []
            mine = by_id[manager.experiment_id]
            assert mine["status"] == "STOPPED" and mine["experimentName"] == "known" and mine["platform"] == "local"
            assert set(mine) >= {"id", "port", "startTime", "endTime", "status", "platform", "experimentName", "tag",
                                 "pid", "webuiUrl", "logDir"}
            meta = (await c.get(f"{P}/experiment-metadata")).json()
            assert meta["id"] == manager.experiment_id

    h.run(go())


def test_running_experiment_updates_customized_trial_kill_and_stop(sleeper: Any, h: Any) -> None:
    exp_dir = sleeper(maxTrialNumber=3)

    async def go() -> None:
        async with h.running(exp_dir) as m, h.client(h.create_app(m)) as c:
            await h.until(lambda: m.state.count(TrialStatus.RUNNING) == 1)
            assert (await c.get(f"{P}/check-status")).json()["status"] == "RUNNING"

            # limits: every update type, then malformed ones
            ok = [("TRIAL_CONCURRENCY", "trialConcurrency", 2, "trial_concurrency", 2),
                  ("MAX_TRIAL_NUM", "maxTrialNumber", 4, "max_trial_number", 4),
                  ("MAX_EXEC_DURATION", "maxExperimentDuration", "2h", "max_experiment_duration", 7200),
                  ("SEARCH_SPACE", "searchSpace", {"x": {"_type": "uniform", "_value": [0, 0.5]}}, "search_space",
                   {"x": {"_type": "uniform", "_value": [0, 0.5]}})]
            for kind, camel, value, field, stored in ok:
                r = await c.put(f"{P}/experiment", params={"update_type": kind}, json={"params": {camel: value}})
                assert r.status_code == 200, r.text
                assert m.state.limits[field] == stored
            await h.until(lambda: m.state.count(TrialStatus.RUNNING) == 2)  # concurrency 2 took effect
            seq = m.state.last_seq
            bad: list[tuple[str, Any, int]] = [
                ("TRIAL_CONCURRENCY", {"params": {"trialConcurrency": 0}}, 400),
                ("TRIAL_CONCURRENCY", {"params": {"trialConcurrency": -1}}, 400),
                ("TRIAL_CONCURRENCY", {"params": {"trialConcurrency": "3"}}, 400),
                ("TRIAL_CONCURRENCY", {"params": {"trialConcurrency": True}}, 400),
                ("TRIAL_CONCURRENCY", {"params": {"trialConcurrency": 1.5}}, 400),
                ("TRIAL_CONCURRENCY", {"params": {}}, 400), ("TRIAL_CONCURRENCY", {"trialConcurrency": 2}, 400),
                ("TRIAL_CONCURRENCY", [1, 2], 400), ("MAX_TRIAL_NUM", {"params": {"maxTrialNumber": 2**40}}, 400),
                ("MAX_EXEC_DURATION", {"params": {"maxExperimentDuration": "10x"}}, 400),
                ("MAX_EXEC_DURATION", {"params": {"maxExperimentDuration": -5}}, 400),
                ("MAX_EXEC_DURATION", {"params": {"maxExperimentDuration": None}}, 400),
                ("SEARCH_SPACE", {"params": {"searchSpace": {"x": {"_type": "uniformm", "_value": [0, 1]}}}}, 400),
                ("SEARCH_SPACE", {"params": {"searchSpace": "x"}}, 400),
                ("NOT_A_KIND", {"params": {}}, 400),
            ]
            for kind, body, code in bad:
                r = await c.put(f"{P}/experiment", params={"update_type": kind}, json=body)
                assert r.status_code == code, (kind, body, r.text)
                assert r.json()["error"]
            raw = [(b"{not json", "application/json", 400), (b"", "application/json", 400),
                   (b'{"params": {"trialConcurrency": 3}}', "text/plain", 415),
                   (b'{"params": {"trialConcurrency": 3}}', "application/x-www-form-urlencoded", 415),
                   (b"[" * 100000 + b"]" * 100000, "application/json", 400),
                   (b" " * (9 * 1024 * 1024), "application/json", 413)]
            for body, ctype, code in raw:
                r = await c.put(f"{P}/experiment?update_type=TRIAL_CONCURRENCY", content=body,
                                headers={"content-type": ctype})
                assert r.status_code == code, (body[:20], ctype, r.text)
            assert m.state.last_seq == seq  # nothing bad was recorded
            assert (await c.get(f"{P}/experiment")).json()["params"]["maxExperimentDuration"] == "7200s"

            # a customized trial (NNI posts the parameters themselves)
            r = await c.post(f"{P}/trial-jobs", json={"x": 0.25, "opt": "b", "sleep": 0})
            assert r.status_code == 200, r.text
            n = r.json()["sequenceId"]
            custom = next(t for t in m.state.trials.values() if t.sequence_id == n)
            assert custom.source == "customized" and custom.parameter_id is None
            assert custom.params == {"x": 0.25, "opt": "b", "sleep": 0}
            hp = json.loads((await c.get(f"{P}/trial-jobs/{custom.trial_id}")).json()["hyperParameters"][0])
            assert hp["parameter_source"] == "customized" and hp["parameter_id"] is None
            for body in ([1, 2], "x", 3):
                assert (await c.post(f"{P}/trial-jobs", json=body)).status_code == 400
            assert len(m.state.trials) == 3
            r = await c.put(f"{P}/experiment", params={"update_type": "MAX_TRIAL_NUM"},
                            json={"params": {"maxTrialNumber": 3}})
            assert r.status_code == 200
            r = await c.post(f"{P}/trial-jobs", json={"x": 0.3})
            assert r.status_code == 400 and "maxTrialNumber" in r.json()["error"]

            # import data while running
            r = await c.post(f"{P}/experiment/import-data", json=[{"parameter": {"x": 0.4, "opt": "a"}, "value": 0.7}])
            assert r.status_code == 200
            assert json.loads((await c.get(f"{P}/experiment/imported-data")).json()[0])["value"] == 0.7
            assert (await c.post(f"{P}/experiment/import-data", json={"x": 1})).status_code == 400
            assert (await c.post(f"{P}/experiment/import-data", json=[{"parameter": 1}])).status_code == 400

            # kill
            victim = next(t.trial_id for t in m.state.trials.values() if t.status is TrialStatus.RUNNING)
            assert (await c.delete(f"{P}/trial-jobs/{victim}")).status_code == 200
            await h.until(lambda: m.state.trials[victim].status is TrialStatus.USER_CANCELED)
            assert m.state.trials[victim].cancel_reason is CancelReason.USER
            assert (await c.delete(f"{P}/trial-jobs/{victim}")).status_code == 200  # idempotent
            assert (await c.delete(f"{P}/trial-jobs/zzzzz")).status_code == 404

            # stop
            assert (await c.delete(f"{P}/experiment")).status_code == 200
            await h.until(lambda: m.state.status is ExperimentStatus.STOPPED)

    h.run(go())
    st = read_state(exp_dir)
    assert st.status is ExperimentStatus.STOPPED
    assert all(not t.is_active for t in st.trials.values())
