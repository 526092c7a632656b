from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nnix.core.events import (
    ExperimentCreated,
    LimitsUpdated,
    ManagerStarted,
    MetricReported,
    StatusChanged,
    TrialCancelRequested,
    TrialCreated,
    TrialEnded,
    TrialStarted,
)
from nnix.core.state import fold
from nnix.core.status import CancelReason, ExperimentStatus, MetricType, TrialStatus
from nnix.store.base import Store, Stored
from nnix.testing.experiments import busy_log


def _log(*pairs: tuple[float, object]) -> list[Stored]:
    return [Stored(i + 1, ts, ev) for i, (ts, ev) in enumerate(pairs)]  # type: ignore[arg-type]


CONFIG = {"trial_concurrency": 2, "max_trial_number": 5, "search_space": {"x": {"_type": "choice", "_value": [1]}},
          "tuner": {"class_args": {"optimize_mode": "minimize"}}}


def test_fold_builds_trials_metrics_and_best() -> None:
    state = fold(_log(
        (100.0, ExperimentCreated("e1", CONFIG, 7)),
        (100.0, ManagerStarted(1, "create", 8080)),
        (100.5, StatusChanged(ExperimentStatus.RUNNING)),
        (101.0, TrialCreated("a", 0, 0, {"x": 1})),
        (101.0, TrialCreated("b", 1, 1, {"x": 2})),
        (101.1, TrialStarted("a", "local-env", "/tmp/a", 10, "1")),
        (101.2, MetricReported("a", MetricType.PERIODICAL, 0, 3.0, 0)),
        (101.3, MetricReported("a", MetricType.FINAL, 0, {"default": 2.0, "acc": 0.1}, 1)),
        (101.4, TrialEnded("a", TrialStatus.SUCCEEDED, 0)),
        (101.5, TrialStarted("b", "local-env", "/tmp/b", 11, "1")),
        (101.6, MetricReported("b", MetricType.FINAL, 0, 1.5, 0)),
        (101.7, TrialCancelRequested("b", CancelReason.USER)),
        (101.8, TrialEnded("b", TrialStatus.USER_CANCELED, None)),
    ))
    assert state.experiment_id == "e1" and state.seed == 7
    assert state.next_sequence_id == 2 and state.next_parameter_id == 2
    a, b = state.trials["a"], state.trials["b"]
    assert a.final_value == 2.0 and [m.value for m in a.intermediate] == [3.0]
    assert b.status is TrialStatus.USER_CANCELED and b.cancel_reason is CancelReason.USER
    assert state.best_trial() is b  # minimize
    assert state.count(TrialStatus.SUCCEEDED) == 1
    assert state.limits["trial_concurrency"] == 2


def test_limits_are_typed_by_the_fold_and_a_bad_recorded_value_leaves_them() -> None:
    """The fold reads the limits in once (a config without trial concurrency: 1 at a time; a bool is not a count), and
    a recorded update that is not a value of its field (a foreign or older log) leaves the limit as it was, no crash;
    the limits stay a plain dict (what the log, the snapshot and JSON readers hold)."""
    config = {"trial_concurrency": None, "max_trial_number": True, "max_experiment_duration": 3600, "search_space": 7}
    state = fold(_log((0.0, ExperimentCreated("e", config, 1)), (1.0, LimitsUpdated("trial_concurrency", 3))))
    assert state.limits == {"trial_concurrency": 3, "max_trial_number": None, "max_experiment_duration": 3600,
                            "search_space": None}
    for field, value in (("trial_concurrency", "lots"), ("trial_concurrency", 0), ("max_trial_number", -1),
                         ("max_experiment_duration", float("nan")), ("search_space", [1]), ("no_such_limit", 1)):
        state.apply(Stored(9, 2.0, LimitsUpdated(field, value)))
    assert state.limits == {"trial_concurrency": 3, "max_trial_number": None, "max_experiment_duration": 3600,
                            "search_space": None}
    state.apply(Stored(10, 3.0, LimitsUpdated("max_experiment_duration", None)))
    assert state.limits["max_experiment_duration"] is None and type(state.limits) is dict


def test_limits_updates_and_status_end_time() -> None:
    state = fold(_log(
        (0.0, ExperimentCreated("e", CONFIG, 1)),
        (0.0, ManagerStarted(1, "create")),
        (1.0, LimitsUpdated("max_trial_number", 9)),
        (2.0, StatusChanged(ExperimentStatus.DONE, "limit")),
    ))
    assert state.limits["max_trial_number"] == 9
    assert state.end_time == 2.0
    state.apply(Stored(5, 3.0, LimitsUpdated("max_trial_number", 20)))
    state.apply(Stored(6, 3.0, StatusChanged(ExperimentStatus.RUNNING)))
    assert state.end_time is None


def test_elapsed_counts_sessions_not_downtime() -> None:
    state = fold(_log(
        (0.0, ExperimentCreated("e", CONFIG, 1)),
        (0.0, ManagerStarted(1, "create")),
        (0.0, StatusChanged(ExperimentStatus.RUNNING)),
        (30.0, TrialCreated("a", 0, 0, {})),  # last sign of life of session 1 (then a crash)
        (1000.0, ManagerStarted(2, "resume")),
        (1000.0, StatusChanged(ExperimentStatus.RUNNING)),
        (1010.0, TrialCreated("b", 1, 1, {})),
    ))
    assert state.elapsed() == 40.0
    assert state.elapsed(now=1020.0) == 50.0


# --- helpers of the fold's tests below (the snapshot's tests: tests/query/test_snapshot.py) ----------------

def _started(store: Store) -> None:
    store.append([ExperimentCreated("e1", CONFIG, 7), ManagerStarted(1, "create", 8080),
                  StatusChanged(ExperimentStatus.RUNNING)])


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_ranked_is_the_head_or_tail_of_the_trials_sorted_best_first_ties_in_trial_order(
        tmp_path: Path, direction: str) -> None:
    from nnix.query import snapshot as snap_mod
    from nnix.store.sqlite import SqliteStore

    finals = [0.5, None, 0.1, 0.5, float("nan"), 0.9, 0.1, 0.3, 0.5]
    store = SqliteStore(tmp_path / "s.sqlite")
    store.append([ExperimentCreated("e1", {**CONFIG, "tuner": {"class_args": {"optimize_mode": direction}}}, 7)])
    for i, v in enumerate(finals):
        tid = f"t{i}"
        store.append([TrialCreated(tid, i, i, {"x": i}), TrialStarted(tid, "local-env", f"/tmp/{tid}", 100 + i)])
        if v is not None:
            store.append([MetricReported(tid, MetricType.FINAL, 0, v, 0, i)])
        store.append([TrialEnded(tid, TrialStatus.SUCCEEDED, 0)])
    scored = [(f"t{i}", v) for i, v in enumerate(finals) if v is not None and v == v]
    best_first = [tid for tid, _ in sorted(scored, key=lambda x: x[1], reverse=direction == "maximize")]
    snap_mod.write_snapshot(store, snap_mod.fold_store(store))
    for state in (fold(store.read()), snap_mod.fold_store(store)):  # all built / read from the snapshot
        for n in (0, 1, 3, 7, 20):
            assert [t.trial_id for t in state.ranked(n)] == best_first[:n]
            assert [t.trial_id for t in state.ranked(n, worst=True)] == best_first[max(0, len(best_first) - n):]
        best = state.best_trial()
        assert best is not None and best.trial_id == best_first[0]


# --- the overview totals: kept by the fold, held in the snapshot, counted where an older snapshot lacks them ---------

def _counted(state: Any) -> dict[str, Any]:
    """The totals counted from the trials themselves (what the fold keeps as it goes)."""
    from collections import Counter

    trials = list(state.trials.values())
    scored = [t for t in trials if t.final_value is not None]
    sign = 1 if state.direction == "minimize" else -1
    best = min(scored, key=lambda t: (sign * t.final_value, t.sequence_id), default=None)
    metric_keys = {k for t in trials if t.final is not None and isinstance(t.final.value, dict) for k in t.final.value}
    return {"counts": {k: v for k, v in Counter(t.status.value for t in trials).items()},
            "best": None if best is None else [best.trial_id, best.sequence_id, best.final_value],
            "metricKeys": metric_keys, "paramKeys": {k for t in trials for k in t.params}}


def _totals(state: Any) -> dict[str, Any]:
    tot = state.overview_totals()
    return {"counts": {k: v for k, v in tot["counts"].items() if v}, "best": tot["best"],
            "metricKeys": set(tot["metricKeys"]), "paramKeys": set(tot["paramKeys"])}


def test_the_overview_totals_kept_by_the_fold_are_those_counted_from_its_trials(tmp_path: Path) -> None:
    from nnix.core.events import TrialRequeued
    from nnix.query import snapshot as snap_mod
    from nnix.store.sqlite import SqliteStore

    store = SqliteStore(f"{tmp_path}/s.sqlite")
    _started(store)
    busy_log(store, range(0, 14))
    store.append([TrialCreated("d", 50, 50, {"x": 1, "y": 2}), TrialStarted("d", "local-env", "/tmp/d"),
                  MetricReported("d", MetricType.FINAL, 0, {"default": 5.5, "acc": 0.1}, 0, 50)])
    state = snap_mod.fold_store(store)
    assert state.totals is not None and not state.totals["dirty"]
    assert _totals(state) == _counted(state) and state.overview_totals()["best"][0] == "t0"  # (minimize)
    # the best trial loses its final result (a retry): the next best is found again
    store.append([TrialRequeued("t0", "host lost")])
    state = snap_mod.fold_store(store, state)
    assert _totals(state) == _counted(state) and state.overview_totals()["best"][0] == "t2"
    # a trial reaching the same value later than the best one does not take its place (trial order breaks ties)
    store.append([TrialStarted("t0", "local-env", "/tmp/t0"), MetricReported("t0", MetricType.FINAL, 0, 2.0, 20, 0)])
    state = snap_mod.fold_store(store, state)
    assert _totals(state) == _counted(state) and state.overview_totals()["best"][0] == "t0"
    assert state.best_trial() is state.ranked(1)[0] is state.trials["t0"]


def test_a_snapshot_holds_the_totals_and_an_older_one_without_them_still_opens(tmp_path: Path) -> None:
    from nnix.query import snapshot as snap_mod
    from nnix.store.sqlite import SqliteStore

    store = SqliteStore(f"{tmp_path}/s.sqlite")
    _started(store)
    busy_log(store, range(0, 12))
    full = snap_mod.fold_store(store)
    snap_mod.write_snapshot(store, full)
    loaded = snap_mod.fold_store(store)
    table = loaded.trials
    assert isinstance(table, snap_mod.TrialTable) and table.source is not None
    left = table.source.left
    assert _totals(loaded) == _counted(full)
    assert table.source.left == left  # no trial was built for them
    # an older snapshot (no totals in its head): opened all the same, the totals counted when first asked for
    full.totals = None
    snap_mod.write_snapshot(store, full)
    old = snap_mod.fold_store(store)
    assert old.totals is None
    assert _totals(old) == _counted(full)
    # and kept from then on
    store.append([TrialCreated("n", 99, 99, {"z": 1})])
    old = snap_mod.fold_store(store, old)
    assert old.totals is not None and old.totals["counts"]["WAITING"] == _counted(old)["counts"]["WAITING"]
    assert "z" in old.totals["paramKeys"]


def _scan(state: Any) -> tuple[list[str], dict[TrialStatus, int]]:
    """The trials not ended (in creation order) and the count of each status, read off every trial."""
    trials = list(state.trials.values())
    return ([t.trial_id for t in trials if not t.status.is_terminal],
            {s: sum(t.status is s for t in trials) for s in TrialStatus})


def _kept(state: Any) -> tuple[list[str], dict[TrialStatus, int]]:
    return [t.trial_id for t in state.active_trials], {s: state.count(s) for s in TrialStatus}


def test_the_live_trials_and_status_counts_kept_by_the_fold_are_those_of_its_trials(tmp_path: Path) -> None:
    from nnix.core import state as state_mod
    from nnix.core.events import TrialRequeued
    from nnix.query import snapshot as snap_mod
    from nnix.store.sqlite import SqliteStore

    store = SqliteStore(f"{tmp_path}/s.sqlite")
    _started(store)
    busy_log(store, range(0, 14))  # t1, t5, t9, t13 stay running; the others succeed
    store.append([TrialCreated("w", 40, 40, {"x": 0}),  # waits
                  TrialCreated("f", 41, 41, {"x": 1}), TrialStarted("f", "local-env", "/tmp/f"),
                  TrialEnded("f", TrialStatus.FAILED, 1), TrialEnded("t5", TrialStatus.USER_CANCELED, None),
                  TrialRequeued("t9", "host lost"),  # running again later: waiting, in its place
                  TrialEnded("t2", TrialStatus.SUCCEEDED, 0)])  # (a second end of an ended trial changes nothing)
    full = state_mod.fold(store.read())
    live, counts = _scan(full)
    assert live == ["t1", "t9", "t13", "w"] and counts[TrialStatus.WAITING] == 2 and counts[TrialStatus.FAILED] == 1
    folded = snap_mod.fold_store(store)
    assert _kept(folded) == (live, counts)
    assert folded.count(TrialStatus.RUNNING, TrialStatus.WAITING) == 4
    assert folded.count(TrialStatus.SUCCEEDED, TrialStatus.FAILED) == counts[TrialStatus.SUCCEEDED] + 1

    # from a snapshot, before any ended trial is built, then with events after it
    snap_mod.write_snapshot(store, folded)
    loaded = snap_mod.fold_store(store)
    assert isinstance(loaded.trials, snap_mod.TrialTable) and loaded.trials.pending
    assert _kept(loaded) == (live, counts)
    store.append([TrialEnded("t1", TrialStatus.SUCCEEDED, 0), TrialStarted("w", "local-env", "/tmp/w"),
                  TrialCreated("n", 42, 42, {"x": 2}), TrialRequeued("t3", "retried after it ended")])
    loaded = snap_mod.fold_store(store, loaded)
    again = state_mod.fold(store.read())
    assert _kept(loaded) == _scan(again)
    assert [t.trial_id for t in loaded.active_trials] == ["t3", "t9", "t13", "w", "n"]  # (in creation order)
    # an older snapshot without totals counts its ended statuses from the trials
    loaded.totals = None
    assert _kept(loaded) == _scan(again)
