"""Read models: summaries kept up to date incrementally, serialized lists cached per state version."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from nnix.api.views import MetricScan, summarize
from nnix.core.events import MetricReported, TrialEnded
from nnix.core.state import Metric, TrialState
from nnix.core.status import MetricType, TrialStatus
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

    from nnix.api.views import TrialViews
    from nnix.core.events import ExperimentCreated, TrialCreated, TrialStarted
    from nnix.core.state import TrialTable, fold_store, write_snapshot
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
