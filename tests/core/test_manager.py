"""The manager: its logic (limits, tuner and assessor calls, cancels, stops, resumes) against the scripted
in-process FakeService; what the trial process sees (its environment, GPUs) against the real local service
and real trial processes."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest

from nnix.agent.runner import committed
from nnix.core.events import MetricReported, TrialCreated, TrialStarted
from nnix.core.manager import ServiceEvents
from nnix.core.status import CancelReason, ExperimentStatus, MetricType, TrialStatus
from nnix.home import STORE_NAME
from nnix.model.runs import Metrics
from nnix.query import StoreReader
from nnix.store.sqlite import SqliteStore
from nnix.testing import FakeMachine, FakeService, Outcome, wait_until_async
from nnix.testing.experiments import make_experiment, manager_for, run_experiment
from nnix.testing.fakeservice import Script, params, sequence_id
from nnix.testing.gpu import DescribedInventory
from nnix.testing.spaces import UNIT as SPACE
from nnix.tuners.base import TunerArgs

PY = sys.executable


def _trial(code_dir: Path, body: str) -> str:
    (code_dir / "trial.py").write_text("import nni, os, sys, time, json\np = nni.get_next_parameter()\n" + body)
    return f"{PY} trial.py"


def _fake(script: Script) -> tuple[FakeMachine, dict[str, Any]]:
    """A fake machine running ``script`` and the service option that puts a manager on it."""
    machine = FakeMachine(script)
    return machine, {"service": FakeService.factory(machine)}


def _overlap(state) -> int:  # type: ignore[no-untyped-def]
    points = []
    for t in state.trials.values():
        if t.started_at is not None:
            points += [(t.started_at, 1), (t.ended_at or 1e18, -1)]
    cur = best = 0
    for _, d in sorted(points, key=lambda p: (p[0], p[1])):
        cur += d
        best = max(best, cur)
    return best


def test_concurrency_limit_and_trial_count(tmp_path: Path) -> None:
    machine, fake = _fake(lambda spec: Outcome(intermediate=(0,), final=params(spec)["x"]))
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand="true", trialConcurrency=2, maxTrialNumber=6)
    st = run_experiment(d, **fake)
    assert machine.peak == 2 and len(machine.submitted) == 6
    assert st.status is ExperimentStatus.DONE
    assert len(st.trials) == 6
    assert all(t.status is TrialStatus.SUCCEEDED for t in st.trials.values())
    assert _overlap(st) == 2
    assert sorted(t.sequence_id for t in st.trials.values()) == list(range(6))
    assert all(t.final_value == t.params["x"] for t in st.trials.values())


def test_failed_trial_does_not_stop_the_experiment(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "nnix.manager")
    _, fake = _fake(lambda spec: Outcome(exit_code=4, stderr="boom\n") if sequence_id(spec) == 1 else Outcome(final=1))
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand="true", maxTrialNumber=3)
    st = run_experiment(d, **fake)
    statuses = {t.sequence_id: t.status for t in st.trials.values()}
    assert statuses == {0: TrialStatus.SUCCEEDED, 1: TrialStatus.FAILED, 2: TrialStatus.SUCCEEDED}
    failed = next(t for t in st.trials.values() if t.sequence_id == 1)
    assert failed.exit_code == 4 and failed.message == "boom (exit code 4)"
    assert st.status is ExperimentStatus.DONE
    logged = caplog.text  # manager.log: one line per trial start and end, with the reason
    assert f"trial {failed.trial_id} #1 started on fake-env" in logged  # the environment the service named
    assert f"trial {failed.trial_id} #1 FAILED after " in logged and "s: boom (exit code 4)" in logged
    assert logged.count("SUCCEEDED after") == 2 and "tuner Random" in logged


def test_max_trial_duration_kills_as_early_stopped(tmp_path: Path) -> None:
    machine, fake = _fake(Outcome(hang=True))  # it would run for ever
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand="true", maxTrialNumber=1, maxTrialDuration="1s")
    st = run_experiment(d, **fake)
    (t,) = st.trials.values()
    assert machine.cancelled == [t.trial_id]
    assert t.status is TrialStatus.EARLY_STOPPED
    assert t.cancel_reason is CancelReason.MAX_TRIAL_DURATION
    assert t.message == "stopped: it ran longer than maxTrialDuration (1 s)"


def test_max_experiment_duration_stops_creating_but_lets_trials_finish(tmp_path: Path) -> None:
    machine, fake = _fake(Outcome(final=1, step=0.4))  # 0.8 s a trial
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand="true", maxExperimentDuration="2s")
    st = run_experiment(d, **fake)
    assert machine.cancelled == []
    assert st.status is ExperimentStatus.DONE
    assert 2 <= len(st.trials) <= 4
    assert all(t.status is TrialStatus.SUCCEEDED for t in st.trials.values())  # none killed
    last = max(st.trials.values(), key=lambda t: t.sequence_id)
    assert last.ended_at is not None and last.started_at is not None


def test_grid_exhaustion_ends_the_experiment(tmp_path: Path) -> None:
    _, fake = _fake(lambda spec: Outcome(final=params(spec)["a"]))
    space = {"a": {"_type": "choice", "_value": [1, 2, 3]}}
    _, d = make_experiment(tmp_path, searchSpace=space, trialCommand="true", trialConcurrency=2,
                           tuner={"name": "GridSearch"})
    st = run_experiment(d, **fake)
    assert st.status is ExperimentStatus.DONE
    assert sorted(t.params["a"] for t in st.trials.values()) == [1, 2, 3]


def test_trial_environment_and_params_as_args(tmp_path: Path) -> None:
    cmd = _trial(tmp_path, "nni.report_final_result({'default': 1, 'env': {k: os.environ.get(k) for k in "
                 "['NNI_PLATFORM','NNI_EXP_ID','NNI_TRIAL_JOB_ID','NNI_TRIAL_SEQ_ID','CUDA_VISIBLE_DEVICES']}, "
                 "'argv': sys.argv[1:], 'cwd': os.getcwd()})\n")
    exp_id, d = make_experiment(tmp_path, searchSpace={"lr": {"_type": "choice", "_value": [0.5]}},
                                trialCommand=cmd, maxTrialNumber=1, trialParamsAsArgs=True)
    st = run_experiment(d)
    (t,) = st.trials.values()
    assert t.final is not None
    v = t.final.value
    assert v["env"] == {"NNI_PLATFORM": "local", "NNI_EXP_ID": exp_id, "NNI_TRIAL_JOB_ID": t.trial_id,
                        "NNI_TRIAL_SEQ_ID": "0", "CUDA_VISIBLE_DEVICES": None}
    assert v["argv"] == ["--lr=0.5"]
    assert Path(v["cwd"]) == tmp_path


def test_gpu_scheduling_one_gpu_host_runs_trial_gpu_number_1(tmp_path: Path) -> None:
    """NNI 3.0 refuses this (issue #5776); here the trials share the single GPU one at a time."""
    cmd = _trial(tmp_path, "time.sleep(0.2)\nnni.report_final_result({'default': 1, "
                 "'cuda': os.environ.get('CUDA_VISIBLE_DEVICES')})\n")
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand=cmd, trialConcurrency=2, maxTrialNumber=3,
                           trialGpuNumber=1, trainingService={"platform": "local", "useActiveGpu": False})
    st = run_experiment(d, inventory=DescribedInventory.idle(1))
    assert st.status is ExperimentStatus.DONE
    assert [t.final.value["cuda"] for t in st.trials.values() if t.final] == ["0", "0", "0"]
    assert _overlap(st) == 1  # one GPU, one trial at a time despite concurrency 2
    assert all(t.gpus == (0,) for t in st.trials.values())


def test_gpu_number_zero_hides_gpus(tmp_path: Path) -> None:
    cmd = _trial(tmp_path, "nni.report_final_result({'default': 1, 'cuda': os.environ.get('CUDA_VISIBLE_DEVICES')})\n")
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand=cmd, maxTrialNumber=1, trialGpuNumber=0)
    st = run_experiment(d, inventory=DescribedInventory.idle(2))
    (t,) = st.trials.values()
    assert t.final is not None and t.final.value["cuda"] == ""


def test_user_cancel_and_stop(tmp_path: Path) -> None:
    machine, fake = _fake(Outcome(hang=True))
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand="true", trialConcurrency=2)
    manager = manager_for(d, **fake)

    async def main() -> None:
        run = asyncio.ensure_future(manager.run())
        await wait_until_async(lambda: manager.state.count(TrialStatus.RUNNING) >= 2, 60, "two running trials")
        first = next(iter(manager.state.trials))
        assert manager.cancel_trial(first)
        await wait_until_async(lambda: not (manager.state.trials[first].is_active), 60, "the cancelled trial's end")
        manager.request_stop()
        await asyncio.wait_for(run, 15)

    asyncio.run(main())
    st = manager.state
    trials = list(st.trials.values())
    assert trials[0].status is TrialStatus.USER_CANCELED
    assert st.status is ExperimentStatus.STOPPED
    assert all(not t.is_active for t in trials)
    assert all(t.status is TrialStatus.USER_CANCELED for t in trials)
    assert trials[0].message == "canceled by the user"
    assert all(t.message.startswith("canceled: the experiment was stopped") for t in trials[1:])
    assert machine.running() == [] and sorted(machine.cancelled) == sorted(t.trial_id for t in trials)
    manager.store.close()


def test_resume_continues_sequence_ids_and_keeps_history(tmp_path: Path) -> None:
    _, fake = _fake(lambda spec: Outcome(final=params(spec)["x"]))
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand="true", maxTrialNumber=3)
    first = run_experiment(d, **fake)
    assert first.status is ExperimentStatus.DONE
    store = SqliteStore(d / STORE_NAME)
    from nnix.core.events import LimitsUpdated

    store.append([LimitsUpdated("max_trial_number", 5)])
    store.close()
    second = run_experiment(d, action="resume", **fake)
    assert second.status is ExperimentStatus.DONE
    assert sorted(t.sequence_id for t in second.trials.values()) == [0, 1, 2, 3, 4]
    assert len({t.trial_id for t in second.trials.values()}) == 5
    param_sets = [json.dumps(t.params, sort_keys=True) for t in second.trials.values()]
    assert len(set(param_sets)) == 5  # the tuner continued, it did not restart its sequence
    started = [s for s in SqliteStore(d / STORE_NAME).read() if isinstance(s.event, TrialStarted)]
    assert len(started) == 5


def test_a_manager_leaves_a_snapshot_and_the_next_one_starts_from_it(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from nnix.core.events import LimitsUpdated
    from nnix.query import snapshot as snap_mod

    cmd = _trial(tmp_path, "nni.report_intermediate_result(0.5)\nnni.report_final_result(p['x'])\n")
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand=cmd, maxTrialNumber=2)
    assert run_experiment(d).status is ExperimentStatus.DONE
    store = SqliteStore(d / STORE_NAME)
    snap = store.read_snapshot()
    assert snap is not None and snap.seq == store.read()[-1].seq  # taken at its exit, of everything
    store.append([LimitsUpdated("max_trial_number", 3)])
    store.close()
    loaded: list[int | None] = []
    real = snap_mod.load_snapshot

    def spy(store: Any, loader: Any) -> Any:
        got = real(store, loader)
        loaded.append(None if got is None else got.last_seq)
        return got

    monkeypatch.setattr(snap_mod, "load_snapshot", spy)
    second = run_experiment(d, action="resume")
    assert loaded[:1] == [snap.seq]  # the resume replayed only what followed the snapshot
    assert second.status is ExperimentStatus.DONE and len(second.trials) == 3
    assert all(t.n_inter == 1 and t.final_value == t.params["x"] for t in second.trials.values())
    store = SqliteStore(d / STORE_NAME)
    again = store.read_snapshot()
    assert again is not None and again.seq == store.read()[-1].seq > snap.seq


def test_a_manager_leaves_the_snapshot_as_it_is_when_few_events_followed_it_for_its_trials(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rewriting a snapshot of 100k trials costs seconds, replaying a view's few events nothing: at exit a
    manager writes one only where at least one event per SNAPSHOT_TRIALS_PER_EVENT trials followed it."""
    from nnix.core import manager as manager_mod
    from nnix.query import snapshot as snap_mod

    cmd = _trial(tmp_path, "nni.report_final_result(p['x'])\n")
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand=cmd, maxTrialNumber=2)
    assert run_experiment(d).status is ExperimentStatus.DONE
    store = SqliteStore(d / STORE_NAME)
    snap = store.read_snapshot()
    assert snap is not None
    monkeypatch.setattr(manager_mod, "SNAPSHOT_TRIALS_PER_EVENT", 0.01)  # 2 trials: < 200 events is few
    second = run_experiment(d, action="resume")
    assert second.status is ExperimentStatus.DONE and store.read()[-1].seq > snap.seq
    assert store.read_snapshot() == snap  # kept: the next reader replays what followed it
    assert snap_mod.fold_store(store).last_seq == store.read()[-1].seq
    monkeypatch.setattr(manager_mod, "SNAPSHOT_TRIALS_PER_EVENT", 10)
    run_experiment(d, action="resume")
    again = store.read_snapshot()
    assert again is not None and again.seq == store.read()[-1].seq  # enough followed it now: written


def test_a_running_manager_writes_its_periodic_snapshot_from_another_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from nnix.core import manager as manager_mod
    from nnix.core import state as state_mod
    from nnix.query import snapshot as snap_mod

    monkeypatch.setattr(manager_mod, "SNAPSHOT_EVERY_EVENTS", 1)
    monkeypatch.setattr(manager_mod, "SNAPSHOT_MIN_INTERVAL", 0.0)
    writers: list[tuple[bool, int]] = []
    real = SqliteStore.snapshot_writer

    def spy(self: SqliteStore) -> SqliteStore:
        other = real(self)
        write = other.write_snapshot
        def spied(snapshot: Any) -> None:
            writers.append((threading.current_thread() is threading.main_thread(), snapshot.seq))
            write(snapshot)

        other.write_snapshot = spied  # type: ignore[method-assign]
        return other

    monkeypatch.setattr(SqliteStore, "snapshot_writer", spy)
    cmd = _trial(tmp_path, "import time\ntime.sleep(0.3)\nnni.report_final_result(p['x'])\n")
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand=cmd, maxTrialNumber=3, trialConcurrency=1)
    m = manager_for(d)
    m._heartbeat = 0.05

    async def main() -> ExperimentStatus:
        return await asyncio.wait_for(m.run("create"), 60)

    assert asyncio.run(main()) is ExperimentStatus.DONE
    m.store.close()
    assert writers and not any(main_thread for main_thread, _ in writers)  # periodic: off the loop's thread
    store = SqliteStore(d / STORE_NAME)
    snap = store.read_snapshot()
    assert snap is not None and snap.seq == store.read()[-1].seq  # and the one at exit, of everything
    assert snap_mod.fold_store(store).trials.keys() == state_mod.fold(store.read()).trials.keys()

ALGOS = '''
from nnix.tuners.base import TunerArgs
from nnix.assessors.base import Decision


class SerialTuner:
    """Proposes only when nothing runs: exercises the "not now" answer."""

    Args = TunerArgs

    def __init__(self, args):
        pass

    def suggest(self, ctx, ids):
        if any(r.status.value in ("WAITING", "RUNNING") for r in ctx.history):
            return []
        return [{"x": len(ctx.history)}][: len(ids)]


class AboveFive:
    Args = TunerArgs

    def __init__(self, args):
        pass

    def assess(self, ctx, trial):
        return Decision.BAD if trial.intermediate[-1] > 5 else Decision.GOOD
'''


def test_tuner_not_now_waits_instead_of_ending(tmp_path: Path) -> None:
    (tmp_path / "algos.py").write_text(ALGOS)
    machine, fake = _fake(lambda spec: Outcome(final=params(spec)["x"]))
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand="true", trialConcurrency=3, maxTrialNumber=3,
                           tuner={"className": "algos.SerialTuner", "codeDirectory": str(tmp_path)})
    st = run_experiment(d, **fake)
    assert machine.peak == 1
    assert st.status is ExperimentStatus.DONE
    assert sorted(t.params["x"] for t in st.trials.values()) == [0, 1, 2]
    assert _overlap(st) == 1


def test_assessor_early_stops_hopeless_trials(tmp_path: Path) -> None:
    (tmp_path / "algos.py").write_text(ALGOS)
    machine, fake = _fake(lambda spec: Outcome(
        intermediate=range(100) if sequence_id(spec) == 0 else [0] * 100, final=1, step=0.001))
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand="true", trialConcurrency=2, maxTrialNumber=2,
                           assessor={"className": "algos.AboveFive", "codeDirectory": str(tmp_path)})
    st = run_experiment(d, **fake)
    by_seq = {t.sequence_id: t for t in st.trials.values()}
    assert by_seq[0].status is TrialStatus.EARLY_STOPPED
    assert by_seq[0].cancel_reason is CancelReason.EARLY_STOP
    assert 6 <= len(by_seq[0].intermediate) < 100
    assert by_seq[0].message == (f"early stopped by the assessor (algos.AboveFive) after "
                                 f"{len(by_seq[0].intermediate)} intermediate results")
    assert by_seq[1].status is TrialStatus.SUCCEEDED and len(by_seq[1].intermediate) == 100
    assert machine.cancelled == [by_seq[0].trial_id]


NNI_STYLE = '''
class CountingTuner:
    """Written the way NNI users write custom tuners (no nnix imports)."""

    def __init__(self, optimize_mode="maximize"):
        self.results = {}

    def update_search_space(self, search_space):
        self.space = search_space

    def generate_parameters(self, parameter_id, **kwargs):
        return {"x": parameter_id % 3}

    def receive_trial_result(self, parameter_id, parameters, value, **kwargs):
        self.results[parameter_id] = value
'''


def test_nni_style_custom_tuner_runs_unchanged(tmp_path: Path) -> None:
    (tmp_path / "my_tuner.py").write_text(NNI_STYLE)
    _, fake = _fake(lambda spec: Outcome(final=params(spec)["x"]))
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand="true", maxTrialNumber=4,
                           tuner={"className": "my_tuner.CountingTuner", "codeDirectory": str(tmp_path),
                                  "classArgs": {"optimize_mode": "minimize"}})
    st = run_experiment(d, **fake)
    assert st.status is ExperimentStatus.DONE
    assert [t.params["x"] for t in sorted(st.trials.values(), key=lambda t: t.sequence_id)] == [0, 1, 2, 0]
    assert st.direction == "minimize"


def test_a_full_store_halts_the_manager_without_killing_trials_and_resume_loses_nothing(tmp_path: Path) -> None:
    """SQLite says "database or disk is full": the manager stops recording and acting, leaves its reason
    where status readers look, and its trial keeps running; a resume once there is room records the rest."""
    from nnix.core.status import MetricType
    from nnix.errors import StoreError
    from nnix.home import read_state

    # 400 results, then it waits to be released before its final result
    machine, fake = _fake(Outcome(intermediate=range(400), final=1, hang=True, step=0.0005))
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand="true", maxTrialNumber=1)
    manager = manager_for(d, **fake)
    failure: list[BaseException] = []

    async def main() -> None:
        task = asyncio.ensure_future(manager.run("create"))
        deadline = time.monotonic() + 60
        while not any(len(t.metrics) >= 5 for t in manager.state.trials.values()):
            assert time.monotonic() < deadline and not task.done()
            await asyncio.sleep(0.02)
        db = manager.store._db  # type: ignore[attr-defined]
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        db.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full now
        try:
            await asyncio.wait_for(task, 60)
        except StoreError as e:
            failure.append(e)

    try:
        asyncio.run(main())
    finally:
        manager.store.close()
    assert failure and "full" in str(failure[0])
    (t,) = read_state(d).trials.values()
    assert machine.running() == [t.trial_id]  # not killed: it goes on reporting into its channel
    st = read_state(d)
    assert "full" in st.message and any("full" in e for e in st.errors)
    machine.release(t.trial_id)
    done = run_experiment(d, action="resume", **fake)
    assert done.status is ExperimentStatus.DONE
    (t,) = done.trials.values()
    assert t.status is TrialStatus.SUCCEEDED
    assert [m.sequence for m in t.metrics if m.type is MetricType.PERIODICAL] == list(range(400))
    assert "full" not in done.message  # the resumed manager cleared the reason


def test_view_shows_why_the_last_manager_stopped(tmp_path: Path) -> None:
    from nnix.core.manager_error import write_manager_error

    cmd = _trial(tmp_path, "nni.report_final_result(1)\n")
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand=cmd, maxTrialNumber=1)
    write_manager_error(d, "the disk holding X is full", "free space")
    manager = manager_for(d)

    async def main() -> str:
        task = asyncio.ensure_future(manager.view())
        deadline = time.monotonic() + 30
        while manager.state.manager_action != "view" or "full" not in manager.state.message:
            assert time.monotonic() < deadline and not task.done()
            await asyncio.sleep(0.02)
        manager.request_stop()
        await asyncio.wait_for(task, 30)
        return manager.state.message

    try:
        message = asyncio.run(main())
    finally:
        manager.store.close()
    assert "the disk holding X is full" in message and "free space" in message


def test_metrics_of_many_trials_are_group_committed_before_the_agent_is_acknowledged(tmp_path: Path) -> None:
    """The inbox's metric batches of every trial go to the store in one append (one transaction), and the
    barrier an agent endpoint awaits before acknowledging returns only once they are in the store."""
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand="true", maxTrialNumber=3)
    m = manager_for(d)
    appends: list[int] = []
    append = m.store.append

    def counting(events):  # type: ignore[no-untyped-def]
        appends.append(len(events))
        return append(events)

    m.store.append = counting  # type: ignore[method-assign]
    try:
        ids = ["abcde", "fghij", "klmno"]
        for i, tid in enumerate(ids):
            m.record(TrialCreated(tid, i, i, {"x": 0.1}), TrialStarted(tid, "remote-env", str(tmp_path)))
        appends.clear()
        emit = ServiceEvents(m)
        for tid in ids:
            emit(Metrics(tid, [(k, {"type": "PERIODICAL", "sequence": k, "value": k}) for k in range(5)]))
        emit(Metrics("abcde", [(5, {"type": "PERIODICAL", "sequence": 5, "value": 5})]))  # its second batch
        asyncio.run(committed(emit))
        assert appends == [16]  # one transaction for the three trials (a trial's second batch merged with its first)
        stored = SqliteStore(d / STORE_NAME, create=False)
        try:
            metrics = [s.event for s in stored.read(kinds=["MetricReported"])]
            rows = [(e.trial_id, e.index) for e in metrics if isinstance(e, MetricReported)]
        finally:
            stored.close()
        assert sorted(rows) == sorted([(t, k) for t in ids for k in range(5)] + [("abcde", 5)])
        assert [m.state.trials[t].last_index for t in ids] == [5, 4, 4]
    finally:
        m.store.close()


def _full_history(state: Any) -> list[Any]:
    """The tuner's history rebuilt from the whole state (what the manager computed on every ask before)."""
    from nnix.model.trials import TrialRecord

    out = [TrialRecord(-(i + 1), rec["parameter"], TrialStatus.SUCCEEDED, rec.get("value"))
           for i, rec in enumerate(state.imported)]
    out += [TrialRecord(t.parameter_id, t.params, t.status, t.final_value, tuple(t.inter_values), t.trial_id)
            for t in state.trials.values() if t.parameter_id is not None]
    return out


def test_the_tuner_history_kept_per_trial_equals_a_full_rebuild(tmp_path: Path) -> None:
    """The manager rebuilds only the records of trials an event touched since the last ask; after every kind
    of change (new trials, metrics, ends, a requeue, imported results, a trial without parameter id) the
    history is the full rebuild, in the same order; a second manager on the same store starts equal too."""
    from nnix.core.events import DataImported, TrialEnded, TrialRequeued

    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand="true", maxTrialNumber=3)
    m = manager_for(d)
    try:
        assert m._history() == _full_history(m.state) == []
        m.record(TrialCreated("t0", 0, 0, {"x": 0.1}), TrialCreated("t1", 1, 1, {"x": 0.2}))
        assert m._history() == _full_history(m.state)
        m.record(TrialStarted("t0", "env", str(tmp_path)), TrialCreated("t2", 2, None, {}),
                 TrialCreated("t3", 3, 2, {"x": 0.3}))
        m.record(MetricReported("t0", MetricType.PERIODICAL, 0, 0.5, 0),
                 MetricReported("t0", MetricType.FINAL, 0, 0.7, 1))
        assert m._history() == _full_history(m.state)
        m.record(TrialEnded("t0", TrialStatus.SUCCEEDED, 0), DataImported([{"parameter": {"x": 0.9}, "value": 1.5}]))
        first = m._history()
        assert first == _full_history(m.state)
        assert [r.parameter_id for r in first] == [-1, 0, 1, 2]
        assert first[1].status is TrialStatus.SUCCEEDED and first[1].value == 0.7 and first[1].intermediate == (0.5,)
        m.record(TrialStarted("t1", "env", str(tmp_path)), MetricReported("t1", MetricType.PERIODICAL, 0, 0.1, 0),
                 TrialRequeued("t1", "host lost"))
        assert m._history() == _full_history(m.state)
        assert m._history()[2].status is TrialStatus.WAITING and m._history()[2].intermediate == ()
    finally:
        m.store.close()
    again = manager_for(d)
    try:
        assert again._history() == _full_history(again.state)
        assert len(again._history()) == 4
    finally:
        again.store.close()


class _Recording:
    """A tuner that proposes x = 0.05 * (id % 20) and keeps every history it was handed (not copied)."""

    Args: ClassVar[type[TunerArgs]] = TunerArgs

    def __init__(self) -> None:
        self.asks: list[Any] = []

    def suggest(self, ctx: Any, ids: Any) -> list[dict[str, Any]]:
        self.asks.append(ctx.history)
        return [{"x": round(0.05 * (i % 20), 2)} for i in ids]


def _outcome(spec: Any) -> Outcome:
    x = params(spec)["x"]
    if sequence_id(spec) % 4 == 3:  # some fail, without a final result
        return Outcome(intermediate=(x,), exit_code=1)
    return Outcome(intermediate=(x, x / 2, 0.25), final=x + 1)


def _ran(tmp_path: Path, n: int) -> tuple[FakeMachine, dict[str, Any], Path, list[Any]]:
    """An experiment that ran n trials (on a fake machine, a snapshot written at its end): the machine, its service
    option, the experiment directory, and the records of its trials as a tuner is handed them."""
    from nnix.home import read_state
    from nnix.model.trials import TrialRecord

    machine, fake = _fake(_outcome)
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand="true", maxTrialNumber=n)
    first = manager_for(d, **fake)
    first.tuner = _Recording()
    try:
        assert asyncio.run(asyncio.wait_for(first.run(), 60)) is ExperimentStatus.DONE
    finally:
        first.store.close()
    expected = [TrialRecord(t.parameter_id, t.params, t.status, t.final_value, tuple(t.inter_values), t.trial_id)
                for t in read_state(d).trials.values() if t.parameter_id is not None]
    return machine, fake, d, expected


def test_a_resumed_manager_hands_the_tuner_every_trial_without_building_them(tmp_path: Path) -> None:
    """A manager resumed from a store with a snapshot of N ended trials: its tuner's first history is exactly
    the N records, in creation order, with their parameters, statuses, final values and intermediate values;
    and none of those trials is built into the manager's state for it (only the trials it creates are)."""
    from nnix.core.events import LimitsUpdated
    from nnix.query.snapshot import TrialTable

    n = 9
    _, fake, d, expected = _ran(tmp_path, n)
    assert [r.parameter_id for r in expected] == list(range(n))
    assert {r.status for r in expected} == {TrialStatus.SUCCEEDED, TrialStatus.FAILED}
    assert expected[0].intermediate == (0.0, 0.0, 0.25) and expected[1].value == 1.05 and expected[3].value is None
    store = SqliteStore(d / STORE_NAME)
    store.append([LimitsUpdated("max_trial_number", n + 2)])
    store.close()

    m = manager_for(d, **fake)
    tuner = _Recording()
    m.tuner = tuner
    try:
        assert isinstance(m.state.trials, TrialTable) and m.state.trials.built() == []  # (read from the snapshot)
        assert asyncio.run(asyncio.wait_for(m.run("resume"), 60)) is ExperimentStatus.DONE
        seen = list(tuner.asks[0])
        assert seen == expected
        assert [(r.trial_id, r.parameter_id, r.params, r.status, r.value, tuple(r.intermediate)) for r in seen] == [
            (r.trial_id, r.parameter_id, r.params, r.status, r.value, r.intermediate) for r in expected]
        assert [r.parameter_id for r in tuner.asks[-1]][:n + 1] == list(range(n + 1))  # (the new ones after them)
        built = {t.trial_id for t in m.state.trials.built()}  # (before anything here reads a trial)
        new = set(list(m.state.trials)[n:])
        assert len(new) == 2 and built == new  # the N ended trials were never built
    finally:
        m.store.close()


def test_a_history_the_tuner_keeps_never_changes(tmp_path: Path) -> None:
    """The tuner is handed a view of the manager's history, not a copy; one it keeps (or reads from a thread)
    still holds what it held when handed, after the manager replaced a record (a trial ended) or appended
    one; the next ask sees the change, in the same lineage."""
    from nnix.core.events import TrialEnded
    from nnix.tuners.base import History

    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand="true", maxTrialNumber=3)
    m = manager_for(d)
    try:
        m.record(TrialCreated("t0", 0, 0, {"x": 0.1}), TrialCreated("t1", 1, 1, {"x": 0.2}))
        kept = m._history_view()
        assert isinstance(kept, History) and [r.status for r in kept] == [TrialStatus.WAITING] * 2
        assert kept[0] is m._history()[0]  # (the manager's own records: nothing copied)
        m.record(TrialStarted("t0", "env", str(tmp_path)), MetricReported("t0", MetricType.FINAL, 0, 0.7, 0),
                 TrialEnded("t0", TrialStatus.SUCCEEDED, 0), TrialCreated("t2", 2, 2, {"x": 0.3}))
        after = m._history_view()
        assert [r.status for r in kept] == [TrialStatus.WAITING] * 2 and len(kept) == 2 and kept[0].value is None
        assert [r.status for r in after] == [TrialStatus.SUCCEEDED, TrialStatus.WAITING, TrialStatus.WAITING]
        assert after[0].value == 0.7 and after.lineage is kept.lineage
        assert tuple(after[:2]) == (after[0], after[1]) and after[-1].params == {"x": 0.3}
        del kept
        m.record(TrialStarted("t1", "env", str(tmp_path)))
        assert [r.status for r in after] == [TrialStatus.SUCCEEDED, TrialStatus.WAITING, TrialStatus.WAITING]
        assert m._history_view()[1].status is TrialStatus.RUNNING
    finally:
        m.store.close()


def test_the_history_handed_to_the_tuner_logs_the_records_replaced_since_the_last_view(tmp_path: Path) -> None:
    """A tuner catches up with the values and statuses of a history of its lineage through the manager's log of
    replaced records (TPE reads those alone): every record the manager replaced is in it."""
    from nnix.core.events import TrialEnded

    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand="true", maxTrialNumber=3)
    m = manager_for(d)
    try:
        m.record(TrialCreated("t0", 0, 0, {"x": 0.1}), TrialCreated("t1", 1, 1, {"x": 0.2}))
        first = m._history_view()
        assert first.mark is not None
        m.record(TrialStarted("t1", "env", str(tmp_path)), MetricReported("t1", MetricType.FINAL, 0, 0.5, 0),
                 TrialEnded("t1", TrialStatus.SUCCEEDED, 0), TrialCreated("t2", 2, 2, {"x": 0.3}))
        second = m._history_view()
        assert second.lineage is first.lineage and second[1].value == 0.5
        assert set(second.replaced_since(first.mark) or ()) == {1}  # t1's record; t2's is new, t0's unchanged
        assert second.mark is not None and list(m._history_view().replaced_since(second.mark) or ()) == []
    finally:
        m.store.close()


def test_the_first_read_of_every_record_lets_the_loop_run_and_misses_nothing(tmp_path: Path, monkeypatch: Any) -> None:
    """A resumed manager reads its trials' records for the tuner a chunk per loop turn; what is recorded meanwhile
    (a new trial, a trial changed) is in the history it then hands out, in order, as a full rebuild has it."""
    from nnix.core.events import TrialEnded

    _, fake = _fake(_outcome)
    _, d = make_experiment(tmp_path, searchSpace=SPACE, trialCommand="true", maxTrialNumber=7)
    first = manager_for(d, **fake)
    first.tuner = _Recording()
    try:
        asyncio.run(asyncio.wait_for(first.run(), 60))
    finally:
        first.store.close()
    monkeypatch.setattr(StoreReader, "history_chunk", 2)  # (the manager's reader, see nnix.query)
    m = manager_for(d)
    try:
        async def go() -> int:
            task = asyncio.ensure_future(m._read_records())
            turns = 0
            while not task.done():
                if turns == 1:  # mid-read: a new trial, and one read already changed
                    m.record(TrialCreated("late1", 7, 7, {"x": 0.5}), TrialStarted("late1", "env", str(tmp_path)),
                             TrialEnded("late1", TrialStatus.SUCCEEDED, 0))
                    m.record(MetricReported(next(iter(m.state.trials)), MetricType.FINAL, 1, 9.5, 99))
                turns += 1
                await asyncio.sleep(0)
            await task
            return turns

        assert asyncio.run(go()) >= 4  # (7 trials, 2 a turn)
        history = m._history()
        assert history == _full_history(m.state) and len(history) == 8
        assert history[0].value == 9.5 and history[-1].trial_id == "late1"
    finally:
        m.store.close()


def test_a_resumed_manager_asks_and_starts_nothing_before_its_history_is_whole(tmp_path: Path,
                                                                             monkeypatch: Any) -> None:
    """A resumed manager reads its tuner's history beside its loop, a chunk per loop turn, once the host's gate
    (``history_after``: its REST server up) is open. Until the history is whole it says it is resuming, and neither
    asks its tuner nor starts a trial (not even one left waiting); its first ask then holds all N records."""
    from nnix.core.events import LimitsUpdated

    n = 9
    machine, fake, d, expected = _ran(tmp_path, n)
    store = SqliteStore(d / STORE_NAME)
    store.append([LimitsUpdated("max_trial_number", n + 2), TrialCreated("left", n, n, {"x": 0.5}, "customized")])
    store.close()
    machine.submitted.clear()
    monkeypatch.setattr(StoreReader, "history_chunk", 2)  # (the manager's reader, see nnix.query)
    m = manager_for(d, **fake)
    tuner = _Recording()
    m.tuner = tuner

    async def go() -> tuple[int, ExperimentStatus]:
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        m.history_after = gate
        run = asyncio.ensure_future(m.run("resume"))
        await wait_until_async(lambda: m.state.status is ExperimentStatus.RUNNING, 60.0, "the resumed manager running")
        for _ in range(20):  # held at the gate: the loop turns, nothing is asked or started
            await asyncio.sleep(0)
        assert m.resuming and m.waiting_reason.startswith("resuming: reading the tuner's history of 10 trials")
        assert tuner.asks == [] and machine.submitted == []
        gate.set_result(None)
        turns = 0
        while m.resuming:
            assert tuner.asks == [] and machine.submitted == []
            turns += 1
            await asyncio.sleep(0)
        return turns, await asyncio.wait_for(run, 60)

    try:
        turns, status = asyncio.run(go())
        assert status is ExperimentStatus.DONE and turns >= 2  # (10 records, 2 a turn)
        seen = list(tuner.asks[0])
        assert len(seen) == n + 1 and seen[:n] == expected and seen[n].trial_id == "left"
        assert [s.trial_id for s in machine.submitted] == ["left", machine.submitted[1].trial_id]
        assert not m.resuming and m.waiting_reason == ""
    finally:
        m.store.close()
