"""The private Ray head's record and keeper without Ray: the keeper runs a stand-in for ``ray start --block`` (a
sleeping Python), so its own rules (a reused pid is never signalled, an ownerless head with no agent stops, a head
whose experiment no longer records it stops) are checked in seconds. Real heads: tests/services/test_ray.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nnix.services import rayhead
from nnix.testing import wait_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the keeper reads /proc")

SLEEPER = "import time; time.sleep(1000)"


@pytest.fixture
def procs() -> Iterator[list[int | str]]:
    """Pids a test started, and keepers' temporary directories (the keeper and its stand-in head name theirs):
    all killed at the end, whatever happens."""
    started: list[int | str] = []
    try:
        yield started
    finally:
        for what in started:
            for pid in rayhead.naming(what) if isinstance(what, str) else [what]:
                for p in [*rayhead.descendants(pid), pid]:
                    if rayhead.proc_start(p) is not None:
                        subprocess.run(["kill", "-9", str(p)], check=False)


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _keeper(tmp_path: Path, procs: list[int | str], owner: int, grace: float = 0.5) -> rayhead.Head:
    temp = tmp_path / "head-tmp"
    temp.mkdir()
    (temp / rayhead.MARKER).write_text(json.dumps({"experiment_id": "exp1", "head_id": "h1"}))
    first = subprocess.Popen([sys.executable, "-m", "nnix.services.rayhead", "--exp-dir", str(tmp_path),
                              "--experiment", "exp1", "--head-id", "h1", "--temp-dir", str(temp),
                              "--address", "127.0.0.1:9", "--owner", str(owner), "--orphan-grace", f"{grace:g}",
                              "--", sys.executable, "-c", SLEEPER, str(temp)],
                             stdout=open(tmp_path / "keeper.log", "ab"), stderr=subprocess.STDOUT,
                             start_new_session=True, env={**os.environ, "RAY_AUTH_TOKEN": "t0k"})
    procs.append(str(temp))
    first.wait()
    wait_until(lambda: rayhead.read(tmp_path) is not None, 30.0)
    head = rayhead.read(tmp_path)
    assert head is not None and head.token == "t0k"
    wait_until(lambda: bool(rayhead.naming(str(temp))), 30.0)  # its stand-in head runs
    return head


def test_unreadable_or_foreign_records_are_not_heads(tmp_path: Path) -> None:
    assert rayhead.read(tmp_path) is None
    for bad in ("{", "[]", json.dumps({"experiment_id": "e"}),
                json.dumps({"experiment_id": "e", "head_id": "h", "address": "127.0.0.1:x", "token": "t",
                            "temp_dir": "/tmp/x", "keeper_pid": 1, "keeper_start": "5"}),
                json.dumps({"experiment_id": "e", "head_id": "h", "address": "127.0.0.1:1", "token": "t",
                            "temp_dir": "/tmp/x", "keeper_pid": "1", "keeper_start": "5"})):
        (tmp_path / rayhead.RECORD).write_text(bad)
        assert rayhead.read(tmp_path) is None, bad
    head = rayhead.Head("e", "h", "127.0.0.1:1", "t", str(tmp_path / "nowhere"), _dead_pid(), "5")
    (tmp_path / rayhead.RECORD).write_text(json.dumps(head.__dict__))
    assert rayhead.read(tmp_path) == head
    assert rayhead.check(head, "other") == "it was recorded for experiment e"
    assert rayhead.check(head, "e") == f"its keeper process {head.keeper_pid} is gone"


def test_a_reused_pid_is_never_signalled(tmp_path: Path, procs: list[int | str]) -> None:
    stranger = subprocess.Popen([sys.executable, "-c", SLEEPER])
    procs.append(stranger.pid)
    start = rayhead.proc_start(stranger.pid)
    assert start is not None
    head = rayhead.Head("e", "h", "127.0.0.1:1", "t", str(tmp_path / "gone"), stranger.pid, str(int(start) - 1))
    (tmp_path / rayhead.RECORD).write_text(json.dumps(head.__dict__))
    assert rayhead.check(head, "e") == f"its keeper process {stranger.pid} is gone"
    assert rayhead.stop(tmp_path, timeout=5)
    assert stranger.poll() is None  # same pid, another process: left alone
    assert rayhead.read(tmp_path) is None  # the stale record is dropped


def test_stop_ends_the_keeper_and_its_head(tmp_path: Path, procs: list[int | str]) -> None:
    head = _keeper(tmp_path, procs, owner=_dead_pid(), grace=600)
    assert rayhead.check(head, "exp1") is not None  # nothing listens at its address: not adopted
    assert rayhead.stop(tmp_path, timeout=30)
    assert rayhead.proc_start(head.keeper_pid) is None and not rayhead.naming(head.temp_dir)
    assert rayhead.read(tmp_path) is None and not Path(head.temp_dir).exists()
    assert "stopping the head: asked to stop (SIGTERM)" in (tmp_path / "keeper.log").read_text()
    assert rayhead.stop_recorded(tmp_path) is None  # nothing left to stop


def test_an_ownerless_head_without_agents_stops_itself_an_owned_one_does_not(tmp_path: Path,
                                                                             procs: list[int | str]) -> None:
    (tmp_path / "owned").mkdir()
    (tmp_path / "orphan").mkdir()
    owned = _keeper(tmp_path / "owned", procs, owner=os.getpid(), grace=0.5)  # started first: checks first
    assert owned.owner_pid == os.getpid() and owned.owner_start == rayhead.proc_start(os.getpid())
    orphan = _keeper(tmp_path / "orphan", procs, owner=_dead_pid(), grace=0.5)
    wait_until(lambda: rayhead.proc_start(orphan.keeper_pid) is None and not rayhead.naming(orphan.temp_dir), 30.0)
    assert rayhead.read(tmp_path / "orphan") is None
    assert "no manager and no agent for 0.5 s" in (tmp_path / "orphan" / "keeper.log").read_text()
    assert rayhead.proc_start(owned.keeper_pid) == owned.keeper_start  # its owner lives: still up
    assert rayhead.naming(owned.temp_dir)
    assert "stopping" not in (tmp_path / "owned" / "keeper.log").read_text()
    (tmp_path / "owned" / rayhead.RECORD).unlink()  # e.g. the experiment's directory was removed
    wait_until(lambda: rayhead.proc_start(owned.keeper_pid) is None and not rayhead.naming(owned.temp_dir), 30.0)
    assert "stopping the head: its experiment no longer records it" in (tmp_path / "owned" / "keeper.log").read_text()
