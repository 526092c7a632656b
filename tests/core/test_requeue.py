"""A trial re-queued because its environment was lost (remote ``lostHostPolicy: requeue``): back to
WAITING, earlier metrics dropped from the state (kept in the log), the next attempt's metrics counted
from line 0 again; stored and read back through SQLite."""

from __future__ import annotations

from pathlib import Path

from nnix.core.events import (
    ExperimentCreated,
    MetricReported,
    TrialCreated,
    TrialEnded,
    TrialRequeued,
    TrialStarted,
)
from nnix.core.state import fold
from nnix.core.status import MetricType, TrialStatus
from nnix.store.sqlite import SqliteStore

CONFIG = {"trial_concurrency": 1, "search_space": {"x": {"_type": "choice", "_value": [1]}}}


def test_requeue_resets_the_attempt(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.sqlite")
    try:
        store.append([
            ExperimentCreated("e1", CONFIG, 1),
            TrialCreated("a", 0, 0, {"x": 1}),
            TrialStarted("a", "m1-r1", "h1:/w/a", 10, "1", (0,)),
            MetricReported("a", MetricType.PERIODICAL, 0, 1.0, 0),
            MetricReported("a", MetricType.PERIODICAL, 1, 2.0, 1),
            TrialRequeued("a", "host h1 lost"),
        ])
        st = fold(store.read())
        t = st.trials["a"]
        assert (t.status, t.message, t.output_dir, t.pid, t.gpus) == (TrialStatus.WAITING, "host h1 lost", None, None,
                                                                       None)
        assert t.metrics == [] and t.last_index == -1 and t.is_active
        store.append([
            TrialStarted("a", "m2-r1", "h2:/w/a", 20, "2"),
            MetricReported("a", MetricType.PERIODICAL, 0, 5.0, 0),
            MetricReported("a", MetricType.FINAL, 0, 6.0, 1),
            TrialEnded("a", TrialStatus.SUCCEEDED, 0),
        ])
        t = fold(store.read()).trials["a"]
        assert [m.value for m in t.metrics] == [5.0, 6.0] and t.final_value == 6.0
        assert t.status is TrialStatus.SUCCEEDED and t.output_dir == "h2:/w/a"
    finally:
        store.close()
