"""The foreground output's failure lines (nnix.host.progress.Progress): each distinct reason once, as it first
appears, looking only at the trials that can change (not every trial of a long experiment at each tick)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from nnix.core.events import ExperimentCreated, StatusChanged, TrialCreated, TrialEnded, TrialStarted
from nnix.core.state import ExperimentState
from nnix.core.status import ExperimentStatus, TrialStatus
from nnix.host.progress import Progress, RunOutcome, summary_lines
from nnix.store.base import Stored


class _Feed:
    def __init__(self) -> None:
        self.state = ExperimentState()
        self.seq = 0
        self.add(ExperimentCreated("e1", {"tuner": {}}, 1), StatusChanged(ExperimentStatus.RUNNING))

    def add(self, *events: Any) -> None:
        for e in events:
            self.seq += 1
            self.state.apply(Stored(self.seq, 1000.0 + self.seq, e))

    def trial(self, tid: str, status: TrialStatus | None, message: str = "") -> None:
        self.add(TrialCreated(tid, self.seq, self.seq, {}), TrialStarted(tid, "env", "/tmp"))
        if status is not None:
            self.add(TrialEnded(tid, status, 1, message))


def _reasons(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("trial ")]


def test_each_failure_reason_is_said_once_and_a_resumed_experiment_says_only_new_ones(
        capsys: pytest.CaptureFixture[str]) -> None:
    feed = _Feed()
    feed.trial("old", TrialStatus.FAILED, "OSError: before the resume")  # ended before this manager: not said
    feed.trial("run", None)
    progress = Progress(SimpleNamespace(state=feed.state, experiment_id="e1"), True)  # type: ignore[arg-type]
    progress.start()
    progress._scan()
    assert _reasons(capsys.readouterr().out) == []
    feed.add(TrialEnded("run", TrialStatus.FAILED, 1, "ValueError: x too large"))  # running at the last look
    feed.trial("quick", TrialStatus.FAILED, "ValueError: x too large")  # created and ended between two looks
    feed.trial("other", TrialStatus.SYS_CANCELED, "host lost")
    feed.trial("fine", TrialStatus.SUCCEEDED)
    progress._scan()
    progress._scan()  # a second look says nothing again
    lines = _reasons(capsys.readouterr().out)
    assert lines == ["trial run FAILED: ValueError: x too large", "trial other SYS_CANCELED: host lost"]
    assert progress._reasons == {"ValueError: x too large": 2, "host lost": 1}
    assert progress._watch == []  # nothing left running: nothing to look at


def test_a_trial_output_is_suggested_only_for_trials_that_started(capsys: pytest.CaptureFixture[str]) -> None:
    feed = _Feed()
    progress = Progress(SimpleNamespace(state=feed.state, experiment_id="e1"), True)  # type: ignore[arg-type]
    progress.start()
    feed.add(TrialCreated("never", 1, 1, {}), TrialEnded("never", TrialStatus.FAILED, None, "cannot submit"))
    feed.trial("ran", TrialStatus.FAILED, "ValueError: x")
    progress._scan()
    out = capsys.readouterr().out
    assert "trial never FAILED: cannot submit" in out and "nnix log trial e1 -T never" not in out
    assert "nnix log trial e1 -T ran" in out
    lines = summary_lines(RunOutcome(feed.state), Path("/x"))
    assert any("nnix log trial e1 -T TRIAL" in line for line in lines)  # one trial started: its output exists
    fresh = _Feed()
    fresh.add(TrialCreated("w", 1, 1, {}), StatusChanged(ExperimentStatus.ERROR, "No GPU found"))
    assert not any("nnix log trial" in line for line in summary_lines(RunOutcome(fresh.state), Path("/x")))
