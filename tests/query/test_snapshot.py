"""The snapshot codec and lazy trial table of the read side: a fold from a snapshot plus the events after it is the
full fold, a bad one is rebuilt, a snapshot opens without building its trials, an older nnix's snapshot still opens."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, cast

import pytest

from nnix.core.events import (
    ExperimentCreated,
    ManagerStarted,
    MetricReported,
    StatusChanged,
    TrialEnded,
)
from nnix.core.state import ExperimentState, fold
from nnix.core.status import ExperimentStatus, MetricType, TrialStatus
from nnix.query import Query, open_state
from nnix.query.snapshot import SNAPSHOT_VERSION, TrialTable
from nnix.store.base import Store, Stored
from nnix.store.sqlite import SqliteStore
from nnix.testing.experiments import busy_log

FIXTURE = Path(__file__).parent / "fixtures" / "v3_store.sqlite"
CONFIG = {"trial_concurrency": 2, "max_trial_number": 5, "search_space": {"x": {"_type": "choice", "_value": [1]}},
          "tuner": {"class_args": {"optimize_mode": "minimize"}}}


# --- the snapshot: a fold from it plus the events after it is the full fold, and a bad one is rebuilt ----------

def _canon(state: object) -> dict[str, object]:
    """Everything a reader sees of a state (series read from the store where it is not held)."""
    from dataclasses import fields

    from nnix.core.state import ExperimentState

    assert isinstance(state, ExperimentState)
    out: dict[str, object] = {f.name: getattr(state, f.name) for f in fields(state)
                              if f.name not in ("trials", "loader", "held_ended")}
    out["trials"] = {tid: (t.sequence_id, t.parameter_id, t.params, t.status, t.started_at, t.ended_at, t.pid, t.gpus,
                           t.exit_code, t.message, t.cancel_reason, t.last_index, t.warnings, t.warning_count,
                           [(m.type, m.sequence, m.value, m.ts, m.index) for m in t.metrics], t.final, t.final_value,
                           t.latest_m, t.n_metrics, t.n_inter, list(t.inter_values), t.intermediate)
                     for tid, t in state.trials.items()}
    return out


def _started(store: Store) -> None:
    store.append([ExperimentCreated("e1", CONFIG, 7), ManagerStarted(1, "create", 8080),
                  StatusChanged(ExperimentStatus.RUNNING)])


def test_a_snapshot_plus_the_events_after_it_is_the_full_fold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nnix.core import state as state_mod
    from nnix.query import snapshot as snap_mod
    from nnix.store.sqlite import SqliteStore

    monkeypatch.setattr(state_mod, "HOLD_ENDED_METRICS", 10)  # most ended trials' series go to the store
    store = SqliteStore(f"{tmp_path}/s.sqlite")
    _started(store)
    busy_log(store, range(0, 12))
    first = snap_mod.fold_store(store)
    assert sum(t.held is None for t in first.trials.values()) >= 5  # dropped, served by the store
    snap_mod.write_snapshot(store, first)
    busy_log(store, range(12, 20))
    store.append([TrialEnded("t1", TrialStatus.FAILED, 1, "late")])  # a trial held in the snapshot ends after it

    replayed: list[int] = []
    apply = state_mod.ExperimentState.apply

    def counting(self: state_mod.ExperimentState, s: Stored) -> None:
        replayed.append(s.seq)
        apply(self, s)

    monkeypatch.setattr(state_mod.ExperimentState, "apply", counting)
    again = snap_mod.fold_store(store)
    assert replayed and min(replayed) > first.last_seq  # from the snapshot on, not the whole log
    full = state_mod.fold(store.read())
    assert _canon(again) == _canon(full)
    assert again.trials["t1"].status is TrialStatus.FAILED and again.trials["t1"].metrics == full.trials["t1"].metrics


@pytest.mark.parametrize("damage", ["body", "checksum", "version", "other log", "seq"])
def test_a_snapshot_that_does_not_match_is_rebuilt_from_the_log(tmp_path: Path, damage: str) -> None:
    import sqlite3

    from nnix.core import state as state_mod
    from nnix.query import snapshot as snap_mod
    from nnix.store.base import Snapshot
    from nnix.store.sqlite import SqliteStore

    store = SqliteStore(tmp_path / "s.sqlite")
    _started(store)
    busy_log(store, range(0, 6))
    good = snap_mod.fold_store(store)
    lie = state_mod.fold(store.read()[:-8])  # an older state: trusting it at the head's seq would lose events
    lie.last_seq = good.last_seq
    if damage == "version":
        store.write_snapshot(Snapshot(snap_mod.SNAPSHOT_VERSION + 1, good.last_seq, snap_mod.encode_snapshot(lie)))
    elif damage == "seq":  # a valid snapshot whose body says another seq than its row
        lie.last_seq = good.last_seq - 3
        store.write_snapshot(Snapshot(snap_mod.SNAPSHOT_VERSION, good.last_seq, snap_mod.encode_snapshot(lie)))
    else:
        snap_mod.write_snapshot(store, lie)
        db = sqlite3.connect(tmp_path / "s.sqlite")
        if damage == "body":  # bytes changed on disk, the checksum not
            body = db.execute("SELECT body FROM snapshot_chunk WHERE n = 0").fetchone()[0]
            assert b'"trial_concurrency":2' in body
            db.execute("UPDATE snapshot_chunk SET body = ? WHERE n = 0",
                       (body.replace(b'"trial_concurrency":2', b'"trial_concurrency":7'),))
        elif damage == "checksum":
            db.execute("UPDATE snapshot SET checksum = checksum + 1")
        else:  # the event the snapshot was taken at is not the one there now (another log under it)
            db.execute("UPDATE events SET ts = ts + 1 WHERE seq = ?", (good.last_seq,))
        db.commit()
        db.close()
    assert store.read_snapshot() is None or damage in ("version", "seq")
    assert _canon(snap_mod.fold_store(store)) == _canon(state_mod.fold(store.read()))


@pytest.mark.parametrize("part", ["records", "series", "gone"])
def test_a_damaged_piece_of_a_snapshot_part_is_found_when_read_and_its_trials_rebuilt_from_the_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, part: str) -> None:
    """The records and intermediate values are parts checked a chunk at a time when read: the snapshot still
    opens, and a trial whose chunk is damaged (or gone) is folded from its own events in the log when read."""
    import sqlite3

    from nnix.query import snapshot as snap_mod
    from nnix.store import sqlite as sqlite_mod
    from nnix.store.sqlite import SqliteStore

    monkeypatch.setattr(sqlite_mod, "PART_CHUNK", 64)
    store = SqliteStore(tmp_path / "s.sqlite")
    _started(store)
    busy_log(store, range(0, 12))
    snap_mod.write_snapshot(store, snap_mod.fold_store(store))
    db = sqlite3.connect(tmp_path / "s.sqlite")
    chunks = db.execute("SELECT n, body FROM snapshot_chunk ORDER BY n").fetchall()
    if part == "records":  # a chunk of t8's record: a byte changed, its CRC not
        snap = store.read_snapshot()
        assert snap is not None
        records = snap.parts[0]
        n = records.first + records[0:len(records)].index(b'["t8",') // 64  # type: ignore[attr-defined]
        body = dict(chunks)[n]
        db.execute("UPDATE snapshot_chunk SET body = ? WHERE n = ?", (body[:-1] + bytes([body[-1] ^ 1]), n))
    else:  # the chunk of the last intermediate values (t11's among them)
        snap = store.read_snapshot()
        assert snap is not None
        series = snap.parts[1]
        assert isinstance(series, sqlite_mod._Part)
        n = series.first + len(series.crcs) - 1
        if part == "series":
            db.execute("UPDATE snapshot_chunk SET body = ? WHERE n = ?", (b"\x01" * len(dict(chunks)[n]), n))
        else:
            db.execute("DELETE FROM snapshot_chunk WHERE n = ?", (n,))
    db.commit()
    db.close()
    full = fold(store.read())
    state = snap_mod.fold_store(store)
    assert state.snapshot_seq == state.last_seq  # opened from the snapshot: its body is whole
    assert _canon(state) == _canon(full)  # every trial read: the damaged ones from the log
    assert "rebuilt from its events in the log" in caplog.text
    snap_mod.write_snapshot(store, state)  # the next snapshot is whole again
    caplog.clear()
    again = snap_mod.fold_store(store)
    assert _canon(again) == _canon(full) and "rebuilt" not in caplog.text


def test_a_snapshot_part_is_read_only_where_a_trial_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening a snapshot of ended trials reads its body only: ranking them reads the ranked trials' chunks."""
    from nnix.query import snapshot as snap_mod
    from nnix.store import sqlite as sqlite_mod
    from nnix.store.sqlite import SqliteStore

    monkeypatch.setattr(sqlite_mod, "PART_CHUNK", 256)
    store = SqliteStore(tmp_path / "s.sqlite")
    _started(store)
    busy_log(store, range(0, 40))
    store.append([TrialEnded(f"t{i}", TrialStatus.FAILED, 1) for i in range(1, 40, 4)])
    snap_mod.write_snapshot(store, snap_mod.fold_store(store))
    read: list[int] = []
    real = sqlite_mod._Part._read

    def spy(self: Any, a: int, b: int) -> list[bytes]:
        read.extend(self.first + k for k in range(a, b + 1) if k not in self._cache)
        return real(self, a, b)

    monkeypatch.setattr(sqlite_mod._Part, "_read", spy)
    snap = store.read_snapshot()
    assert snap is not None and len(snap.parts) == 3  # (records, intermediate values, index columns)
    total = sum(len(p.crcs) for p in snap.parts if isinstance(p, sqlite_mod._Part))
    state = snap_mod.fold_store(store)
    assert read == [] and total > 30
    assert [t.trial_id for t in state.ranked(2)] == ["t0", "t2"]
    assert 0 < len(read) <= 8  # two records and two series, each in one chunk or two
    assert _canon(state) == _canon(fold(store.read()))


def test_kill_9_during_a_snapshot_write_keeps_the_last_one_and_loses_no_event(tmp_path: Path) -> None:
    """A manager killed -9 after a snapshot, after more events, and in the middle of the next snapshot's
    transaction: the store hands back the first snapshot and the fold from it is the full fold."""
    import os
    import subprocess
    import sys

    from nnix.core import state as state_mod
    from nnix.query import snapshot as snap_mod
    from nnix.store.sqlite import SqliteStore

    path = tmp_path / "s.sqlite"
    code = (
        "import os, signal, sys\n"
        "sys.path.insert(0, sys.argv[2])\n"
        "from test_snapshot import _started\n"
        "from nnix.testing.experiments import busy_log\n"
        "from nnix.query.snapshot import fold_store, write_snapshot\n"
        "from nnix.store.sqlite import SqliteStore\n"
        "s = SqliteStore(sys.argv[1])\n"
        "_started(s); busy_log(s, range(0, 5))\n"
        "write_snapshot(s, fold_store(s))\n"
        "busy_log(s, range(5, 9))\n"
        "s._db.execute('BEGIN IMMEDIATE')\n"
        "s._db.execute('UPDATE snapshot SET seq = seq + 1, body = x\\'00\\'')\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(path), str(Path(__file__).parent)], env=os.environ.copy())
    assert proc.returncode == -9
    store = SqliteStore(path, create=False)
    snap = store.read_snapshot()
    assert snap is not None and snap.seq < store.read()[-1].seq
    assert len(store.read(kinds=("TrialCreated",))) == 9
    assert _canon(snap_mod.fold_store(store)) == _canon(state_mod.fold(store.read()))


# --- a snapshot opens without building its trials; one written again encodes only what changed ---------------

def _snapshotted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Store, list[str]]:
    """A store with a snapshot of 20 trials (some running), and a list that records each trial built from it."""
    from nnix.query import snapshot as snap_mod
    from nnix.store.sqlite import SqliteStore

    store = SqliteStore(tmp_path / "s.sqlite")
    _started(store)
    busy_log(store, range(0, 20))
    snap_mod.write_snapshot(store, snap_mod.fold_store(store))
    built: list[str] = []
    real = snap_mod._trial
    def spy(rec: Any, *a: Any) -> Any:
        built.append(rec[0])
        return real(rec, *a)

    monkeypatch.setattr(snap_mod, "_trial", spy)
    return store, built


def test_a_snapshot_opens_building_only_its_running_trials_and_each_other_at_its_first_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nnix.query import snapshot as snap_mod

    store, built = _snapshotted(tmp_path, monkeypatch)
    running = sorted(f"t{i}" for i in range(20) if i % 4 == 1)
    state = snap_mod.fold_store(store)
    assert sorted(built) == running  # the running ones (the manager needs them at once), no ended one
    assert len(state.trials) == 20 and "t7" in state.trials and list(state.trials)[:3] == ["t0", "t1", "t2"]
    assert sorted(t.trial_id for t in state.active_trials) == running and state.count(TrialStatus.RUNNING) == 5
    assert sorted(built) == running
    assert state.trials["t8"].final_value == 8.0 and state.trials.get("t10") is not None  # one at a time
    assert built[-2:] == ["t8", "t10"] and len(built) == 7
    assert [t.trial_id for t in state.ranked(2)] == ["t0", "t2"] and len(built) == 9  # minimize: 0.0 then 2.0
    assert state.count(TrialStatus.SUCCEEDED) == 15 and len(built) == 9  # counted by the fold: none built
    assert len(list(state.trials.values())) == 20 and len(built) == 20  # every trial: all built, once
    assert _canon(state) == _canon(fold(store.read()))


def test_each_trial_lists_every_trial_without_building_the_snapshots_into_the_state(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full list (the API's) reads each trial a snapshot holds for the reader alone: the state keeps it unbuilt
    (not held in memory), and what the reader sees is what a built trial says."""
    from nnix.query import snapshot as snap_mod

    store, _ = _snapshotted(tmp_path, monkeypatch)
    state = snap_mod.fold_store(store)
    state.trials["t3"]  # one built: listed as it is
    listed = list(snap_mod.each_trial(state.trials))
    assert [t.trial_id for t in listed] == [f"t{i}" for i in range(20)]
    table = state.trials
    assert isinstance(table, snap_mod.TrialTable) and table.pending
    unbuilt = [tid for tid in table if isinstance(cast(Any, dict.__getitem__(table, tid)), int)]
    assert len(unbuilt) == 14 and "t3" not in unbuilt and "t0" in unbuilt  # 20 less 5 running and t3
    assert sorted(state.encoded) == ["t3"]  # nothing of the listed ones kept
    assert listed[3] is table["t3"]
    full = fold(store.read())
    assert [(t.trial_id, t.status, t.params, t.final_value, t.metrics, list(t.inter_values)) for t in listed] == [
        (t.trial_id, t.status, t.params, t.final_value, t.metrics, list(t.inter_values)) for t in full.trials.values()]


def test_a_snapshot_written_again_encodes_only_the_trials_changed_since(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nnix.query import snapshot as snap_mod

    store, _ = _snapshotted(tmp_path, monkeypatch)
    encoded: list[str] = []
    real = snap_mod._record
    def spy(t: Any) -> Any:
        encoded.append(t.trial_id)
        return real(t)

    monkeypatch.setattr(snap_mod, "_record", spy)
    state = snap_mod.fold_store(store)
    body = snap_mod.encode_snapshot(state)
    assert sorted(encoded) == sorted(f"t{i}" for i in range(20) if i % 4 == 1)  # the running ones only
    state.trials["t3"]  # read, not changed: its bytes stay the snapshot's
    store.append([MetricReported("t1", MetricType.FINAL, 0, 0.5, 9, 1), TrialEnded("t1", TrialStatus.SUCCEEDED, 0),
                  TrialEnded("t5", TrialStatus.FAILED, 1, "killed")])
    store.replay(state, state.last_seq)
    encoded.clear()
    snap_mod.encode_snapshot(state)
    assert sorted(encoded) == ["t1", "t13", "t17", "t5", "t9"]  # changed or running (t3 keeps its bytes)
    encoded.clear()
    again = snap_mod.encode_snapshot(state)
    assert sorted(encoded) == ["t13", "t17", "t9"]  # only the running ones: ended ones are kept as encoded
    assert again != body and snap_mod.decode_snapshot(again, None).trials["t1"].final_value == 0.5
    snap_mod.write_snapshot(store, state)
    assert _canon(snap_mod.fold_store(store)) == _canon(fold(store.read()))


# --- a snapshot written by an older nnix -------------------------------------------------------------------

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
        assert [t.trial_id for t in state.trials.values()] == q.ids()  # nor does the mapping's values()/items()
        assert [tid for tid, _ in state.trials.items()] == q.ids()
        assert [t.trial_id for t in trials.built()] == ["trial4", "trial5"]
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
