"""manager.error: why a manager stopped (a full disk), kept where even a full disk lets it be written; a resumed
manager clears it as the current reason but keeps it as a past one, so that every time the disk filled stays among
the experiment's errors (a second full disk was lost: DONE, ``errors: []``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from nnix.core.manager_error import (
    ERROR_FILE,
    ERROR_FILE_SIZE,
    apply_manager_error,
    clear_manager_error,
    past_manager_errors,
    prepare_manager_error,
    read_manager_error,
    write_manager_error,
)
from nnix.core.state import ExperimentState
from nnix.core.status import ExperimentStatus, TrialStatus
from nnix.errors import StoreFullError
from nnix.home import read_state
from nnix.store import sqlite
from nnix.testing import FakeMachine, FakeService, Outcome, wait_until_async
from nnix.testing.experiments import make_experiment, manager_for, run_experiment
from nnix.testing.spaces import UNIT


def test_each_reason_is_kept_after_it_is_cleared_in_place(tmp_path: Path) -> None:
    prepare_manager_error(tmp_path)
    path = tmp_path / ERROR_FILE
    ino = path.stat().st_ino
    assert write_manager_error(tmp_path, "the disk holding X is full", "free space", pid=7)
    clear_manager_error(tmp_path)
    assert read_manager_error(tmp_path) is None
    assert write_manager_error(tmp_path, "the disk holding X is full", "free space", pid=8)
    st = ExperimentState(message="")
    apply_manager_error(st, tmp_path)
    assert st.message == "the manager stopped: the disk holding X is full (hint: free space)"
    assert len(st.errors) == 2 and st.errors[0].startswith("the manager stopped at ")
    assert st.errors[0].endswith(": the disk holding X is full (resumed since)") and st.errors[1] == st.message
    clear_manager_error(tmp_path)
    st = ExperimentState(message="done")
    apply_manager_error(st, tmp_path)
    assert st.message == "done" and len(st.errors) == 2 and all("(resumed since)" in e for e in st.errors)
    assert [p["message"] for p in past_manager_errors(tmp_path)] == ["the disk holding X is full"] * 2
    assert path.stat().st_size == ERROR_FILE_SIZE and path.stat().st_ino == ino  # in place, never grown


def test_the_file_keeps_the_newest_reasons_that_fit_and_a_huge_one_whole(tmp_path: Path) -> None:
    prepare_manager_error(tmp_path)
    for i in range(40):
        assert write_manager_error(tmp_path, f"reason {i} " + "x" * 300, "hint " * 50)
        clear_manager_error(tmp_path)
    past = past_manager_errors(tmp_path)
    assert 3 <= len(past) < 40 and past[-1]["message"].startswith("reason 39 ")
    assert [int(p["message"].split()[1]) for p in past] == list(range(40 - len(past), 40))
    assert write_manager_error(tmp_path, "y" * 100_000, "z" * 100_000)
    error = read_manager_error(tmp_path)
    assert error is not None and error["message"] == "y" * 1200 and error["hint"] == "z" * 1200
    assert (tmp_path / ERROR_FILE).stat().st_size == ERROR_FILE_SIZE


def test_a_file_of_an_older_nnix_is_read(tmp_path: Path) -> None:
    record = json.dumps({"message": "old reason", "hint": "", "pid": 1, "ts": 1.0}).encode() + b"\n"
    (tmp_path / ERROR_FILE).write_bytes(record.ljust(ERROR_FILE_SIZE, b"\0"))
    assert read_manager_error(tmp_path) == {"message": "old reason", "hint": "", "pid": 1, "ts": 1.0}
    clear_manager_error(tmp_path)
    assert read_manager_error(tmp_path) is None and past_manager_errors(tmp_path)[0]["message"] == "old reason"


def test_two_full_disks_halt_the_manager_twice_and_both_stay_among_the_errors(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills under a running experiment (its store would still take writes: only the free space says
    so), twice, a resume between: each time the manager halts with the reason naming the store, leaves its trial
    running, and the experiment that then runs to DONE still lists both in its errors (REST and readers)."""
    machine = FakeMachine(Outcome(intermediate=range(200), final=1, hang=True, step=0.002))
    _, d = make_experiment(tmp_path, searchSpace=UNIT, trialCommand="true", maxTrialNumber=2, trialConcurrency=1)
    room = {"free": 10**12}
    monkeypatch.setattr(sqlite, "free_bytes", lambda path: room["free"])
    monkeypatch.setattr(sqlite, "SPACE_CHECK_INTERVAL", 0.0)  # (every append looks: the test needs no clock)

    def fill_while_trial_reports(n: int) -> str:
        """Run (create or resume) until trial #n has reported, then fill the disk: the manager must halt."""
        manager = manager_for(d, service=FakeService.factory(machine))

        async def main() -> None:
            task = asyncio.ensure_future(manager.run("resume" if manager.state.trials else "create"))
            await wait_until_async(lambda: any(t.sequence_id == n and len(t.metrics) >= 3
                                               for t in manager.state.trials.values()), 60, f"trial #{n} reporting")
            room["free"] = 0  # the disk is full now
            with pytest.raises(StoreFullError):
                await asyncio.wait_for(task, 60)

        try:
            asyncio.run(main())
        finally:
            manager.store.close()
        error = read_manager_error(d)
        assert error is not None
        room["free"] = 10**12
        (running,) = machine.running()  # left running, as after a crash
        machine.release(running)
        return str(error["message"])

    first = fill_while_trial_reports(0)
    store = d / "db" / "nnix.sqlite"
    assert first == f"the disk holding {store.parent} is full: 0 bytes free, so writing to {store} stopped"
    assert fill_while_trial_reports(1) == first
    st = run_experiment(d, "resume", service=FakeService.factory(machine))
    assert st.status is ExperimentStatus.DONE and st.message == "maxTrialNumber (2) reached"
    assert len(st.errors) == 2 and all(e.endswith(f": {first} (resumed since)") for e in st.errors), st.errors
    assert [t.status for t in st.trials.values()] == [TrialStatus.SUCCEEDED] * 2
    assert read_state(d).errors == st.errors
