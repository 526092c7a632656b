"""Where experiments live: registry and experiment files are the owner's only; the reason a manager left."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from nnix.core.state import ExperimentState
from nnix.home import STORE_NAME, Registry
from nnix.testing.experiments import make_experiment


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_a_new_experiment_and_the_registry_are_the_owners_only(tmp_path: Path, nnix_home: Path) -> None:
    os.umask(0o022)
    (tmp_path / "t.py").write_text("")
    _, d = make_experiment(tmp_path, searchSpace={"x": {"_type": "choice", "_value": [1]}},
                           trialCommand=f"{sys.executable} t.py")
    assert _mode(d) == 0o700
    assert _mode(d / STORE_NAME) == 0o600
    reg = Registry()
    assert _mode(reg.path) == 0o600 and _mode(reg.path.parent) == 0o700
    assert _mode(reg.path.with_suffix(".lock")) == 0o600


def test_loose_modes_of_an_older_experiment_are_tightened(tmp_path: Path) -> None:
    from nnix.home import tighten_permissions

    d = tmp_path / "exp"
    (d / "db").mkdir(parents=True)
    for name in ("nnix.sqlite", "nnix.sqlite-wal", "nnix.sqlite-shm"):
        (d / "db" / name).write_bytes(b"")
        os.chmod(d / "db" / name, 0o644)
    os.chmod(d / "db", 0o755)
    os.chmod(d, 0o755)
    changed = tighten_permissions(d)
    assert len(changed) == 5 and all("->" in c for c in changed)
    assert _mode(d) == 0o700 and _mode(d / "db") == 0o700
    assert all(_mode(d / "db" / n) == 0o600 for n in ("nnix.sqlite", "nnix.sqlite-wal", "nnix.sqlite-shm"))
    assert tighten_permissions(d) == []


def test_the_reason_file_is_written_in_place_read_and_cleared(tmp_path: Path) -> None:
    from nnix.core.manager_error import (
        apply_manager_error,
        clear_manager_error,
        prepare_manager_error,
        read_manager_error,
        write_manager_error,
    )

    prepare_manager_error(tmp_path)
    path = tmp_path / "manager.error"
    size = path.stat().st_size
    assert size > 0 and read_manager_error(tmp_path) is None and _mode(path) == 0o600
    ino = path.stat().st_ino
    assert write_manager_error(tmp_path, "the disk holding X is full", "free space", pid=42)
    assert path.stat().st_size == size and path.stat().st_ino == ino  # no growth, no new file
    error = read_manager_error(tmp_path)
    assert error is not None and error["message"] == "the disk holding X is full" and error["pid"] == 42
    st = ExperimentState(message="")
    apply_manager_error(st, tmp_path)
    assert "the disk holding X is full" in st.message and "free space" in st.message and len(st.errors) == 1
    clear_manager_error(tmp_path)
    assert read_manager_error(tmp_path) is None and path.stat().st_size == size


def test_read_state_serves_dropped_series_after_its_store_is_closed(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """An ended trial's series beyond the held budget stays in the store: the state read_state returns
    reads it from there when asked, although read_state closed the store it folded."""
    from nnix.core import state as state_mod
    from nnix.core.events import MetricReported, TrialCreated, TrialEnded
    from nnix.core.status import MetricType, TrialStatus
    from nnix.home import STORE_NAME, read_state
    from nnix.store.sqlite import SqliteStore

    monkeypatch.setattr(state_mod, "HOLD_ENDED_METRICS", 0)
    store = SqliteStore(tmp_path / STORE_NAME)
    store.append([TrialCreated("a", 0, 0, {"x": 1})])
    store.append([MetricReported("a", MetricType.PERIODICAL, k, k / 2, k, 0) for k in range(5)])
    store.append([MetricReported("a", MetricType.FINAL, 0, 9.0, 5, 0), TrialEnded("a", TrialStatus.SUCCEEDED, 0)])
    store.close()
    t = read_state(tmp_path).trials["a"]
    assert t.held is None  # not in memory
    assert [m.value for m in t.intermediate] == [0.0, 0.5, 1.0, 1.5, 2.0] and t.final_value == 9.0
    assert t.n_inter == 5 and list(t.inter_values) == [0.0, 0.5, 1.0, 1.5, 2.0]
