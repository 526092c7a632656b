"""The snapshot codec of the read side: a snapshot written by an older nnix still opens."""

from __future__ import annotations

import shutil
from pathlib import Path

from nnix.core.state import ExperimentState
from nnix.core.status import TrialStatus
from nnix.query import Query, open_state
from nnix.query.snapshot import SNAPSHOT_VERSION, TrialTable
from nnix.store.sqlite import SqliteStore

FIXTURE = Path(__file__).parent / "fixtures" / "v3_store.sqlite"


def _open(tmp_path: Path) -> tuple[SqliteStore, ExperimentState]:
    path = tmp_path / "s.sqlite"
    shutil.copyfile(FIXTURE, path)  # (a reader may write beside the file: the fixture stays as it was written)
    store = SqliteStore(path)
    return store, open_state(store)


def test_a_snapshot_written_before_the_read_side_moved_opens_from_its_snapshot(tmp_path: Path) -> None:
    """tests/query/fixtures/v3_store.sqlite was written by nnix e9d72ff (make_v3_store.py): five trials in its
    snapshot, then events after it. It opens from the snapshot (not by folding the whole log), builds no ended
    trial until read, and reads as the log says."""
    store, state = _open(tmp_path)
    try:
        snap = store.read_snapshot()
        assert snap is not None and snap.version == SNAPSHOT_VERSION
        assert state.snapshot_seq == snap.seq > 0 and state.last_seq > snap.seq  # read from it, then the tail
        trials = state.trials
        assert isinstance(trials, TrialTable)
        assert [t.trial_id for t in trials.built()] == ["trial4", "trial5"]  # running at the snapshot; new since
        q = Query(state)
        assert q.ids() == [f"trial{i}" for i in range(6)]
        looked = [(t.trial_id, t.status, t.final_value, t.params["opt"]) for t in q.trials()]
        assert looked == [("trial0", TrialStatus.SUCCEEDED, 0.5, "sgd"), ("trial1", TrialStatus.FAILED, None, "adam"),
                          ("trial2", TrialStatus.USER_CANCELED, None, "sgd"),
                          ("trial3", TrialStatus.SUCCEEDED, 0.25, "adam"),
                          ("trial4", TrialStatus.SUCCEEDED, None, "sgd"),
                          ("trial5", TrialStatus.SUCCEEDED, 0.125, "sgd")]
        assert [t.trial_id for t in trials.built()] == ["trial4", "trial5"]  # (a look builds nothing into the state)
        assert q.counts()["SUCCEEDED"] == 4 and q.counts()["FAILED"] == 1 and q.counts()["RUNNING"] == 0
        best = q.best()
        assert best is not None and best.trial_id == "trial5"  # minimize
        assert [t.trial_id for t in q.ranked(3)] == ["trial5", "trial3", "trial0"]
        assert [m.value for m in q.series("trial0")] == [1.0, 0.5, 1.0 / 3, 0.5]
        assert [m.value for m in q.series("trial4")][-1] == 0.75
        t3 = q.peek("trial3")
        assert t3 is not None and t3.final is not None and t3.final.value == {"default": 0.25, "acc": 0.9}
        history = q.tuner_history()
        assert [(r.parameter_id, r.value) for r in history] == [(0, 0.5), (1, None), (2, None), (3, 0.25),
                                                                  (4, None), (5, 0.125)]
        assert list(history[0].intermediate) == [1.0, 0.5, 1.0 / 3]
        assert state.limit("trial_concurrency") == 3 and state.limit("max_trial_number") == 10
        # the same state as folding the whole log
        whole = ExperimentState()
        store.replay(whole)
        assert [(t.trial_id, t.status, t.final_value, len(t.metrics)) for t in whole.trials.values()] == \
            [(t.trial_id, t.status, t.final_value, len(q.series(t.trial_id))) for t in q.trials()]
    finally:
        store.close()
