"""A conformance suite every store inherits (pytest): subclass and implement ``make_store``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nnix.model.events import MetricReported, StatusChanged, TrialCreated, TrialEnded
from nnix.model.status import ExperimentStatus, MetricType, TrialStatus
from nnix.store.base import Store


class StoreContract:
    def make_store(self, tmp_path: Path) -> Store:
        raise NotImplementedError

    def test_append_then_read_in_order(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path)
        a = store.append([TrialCreated("t1", 0, 0, {"x": 1})])
        b = store.append([MetricReported("t1", MetricType.FINAL, 0, {"default": 0.5, "acc": 1}, 0, 0)])
        got = store.read()
        assert [s.seq for s in got] == [a[0].seq, b[0].seq]
        assert a[0].seq < b[0].seq
        assert got[0].event == TrialCreated("t1", 0, 0, {"x": 1})
        assert got[1].event == MetricReported("t1", MetricType.FINAL, 0, {"default": 0.5, "acc": 1}, 0, 0)

    def test_read_since_returns_only_newer(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path)
        first = store.append([StatusChanged(ExperimentStatus.RUNNING), StatusChanged(ExperimentStatus.DONE, "x")])
        store.append([TrialEnded("t", TrialStatus.FAILED, 3, "boom")])
        rest = store.read(since=first[-1].seq)
        assert [s.event for s in rest] == [TrialEnded("t", TrialStatus.FAILED, 3, "boom")]
        assert store.read(since=rest[-1].seq) == []

    def test_enums_and_special_floats_round_trip(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path)
        store.append([MetricReported("t", MetricType.PERIODICAL, 3, float("inf"), 7)])
        ev: Any = store.read()[0].event
        assert ev.type is MetricType.PERIODICAL
        assert ev.value == float("inf")
        assert ev.index == 7

    def test_read_trial_gives_that_trials_events_of_the_kinds(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path)
        store.append([TrialCreated("a", 0, 0, {}), TrialCreated("b", 1, 1, {})])
        store.append([MetricReported(t, MetricType.PERIODICAL, i, i, i, 0) for i in range(3) for t in "ab"])
        got = store.read_trial("a", ("MetricReported",))
        assert [(s.event.trial_ref, getattr(s.event, "index", None)) for s in got] == [("a", 0), ("a", 1), ("a", 2)]
        assert [s.seq for s in got] == sorted(s.seq for s in got)

    def test_snapshot_round_trips_and_is_taken_at_an_event(self, tmp_path: Path) -> None:
        import pytest

        from nnix.store.base import Snapshot

        store = self.make_store(tmp_path)
        assert store.read_snapshot() is None
        with pytest.raises(Exception):  # noqa: B017  (no event 1 yet: each store says so its way)
            store.write_snapshot(Snapshot(1, 1, b"x"))
        seq = store.append([StatusChanged(ExperimentStatus.RUNNING)])[0].seq
        store.write_snapshot(Snapshot(3, seq, b"\x00state"))
        store.write_snapshot(Snapshot(3, seq, b"\x00state2"))
        assert store.read_snapshot() == Snapshot(3, seq, b"\x00state2")
