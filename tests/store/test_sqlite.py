from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nnix.core.events import StatusChanged, TrialCreated
from nnix.core.status import ExperimentStatus
from nnix.errors import StoreError
from nnix.store.base import Store
from nnix.store.sqlite import SqliteStore
from nnix.testing.stores import StoreContract


class TestSqliteStore(StoreContract):
    def make_store(self, tmp_path: Path) -> Store:
        return SqliteStore(tmp_path / "db" / "nnix.sqlite")


def test_events_survive_reopen(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    s = SqliteStore(path)
    s.append([TrialCreated("a", 0, 0, {"x": 1})])
    s.close()
    again = SqliteStore(path, create=False)
    assert [e.event for e in again.read()] == [TrialCreated("a", 0, 0, {"x": 1})]


def test_missing_store_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no experiment store"):
        SqliteStore(tmp_path / "nope.sqlite", create=False)


def test_append_is_durable_across_kill_9(tmp_path: Path) -> None:
    """A process that appended and was then killed -9 leaves its events readable."""
    path = tmp_path / "s.sqlite"
    code = (
        "import os, signal, sys\n"
        "from nnix.store.sqlite import SqliteStore\n"
        "from nnix.core.events import TrialCreated\n"
        f"s = SqliteStore({str(path)!r})\n"
        "for i in range(50):\n"
        "    s.append([TrialCreated(f't{i}', i, i, {'i': i})])\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=os.environ.copy())
    assert proc.returncode == -9
    events = SqliteStore(path, create=False).read()
    assert len(events) == 50
    assert [s.seq for s in events] == sorted(s.seq for s in events)


def test_two_writers_interleave_without_loss(tmp_path: Path) -> None:
    a = SqliteStore(tmp_path / "s.sqlite")
    b = SqliteStore(tmp_path / "s.sqlite")
    for _ in range(20):
        a.append([StatusChanged(ExperimentStatus.RUNNING)])
        b.append([StatusChanged(ExperimentStatus.DONE)])
    assert len(a.read()) == 40


def test_replay_fast_path_equals_the_plain_fold(tmp_path: Path) -> None:
    from nnix.core.events import ExperimentCreated, MetricReported, TrialEnded
    from nnix.core.state import fold
    from nnix.core.status import MetricType, TrialStatus
    from nnix.query.snapshot import fold_store

    s = SqliteStore(tmp_path / "s.sqlite")
    s.append([ExperimentCreated("e", {"trial_concurrency": 1}, 3), TrialCreated("a", 0, 0, {"x": 1})])
    s.append([MetricReported("a", MetricType.PERIODICAL, i, {"default": i, "k": [1]}, i, 0) for i in range(5)])
    s.append([MetricReported("a", MetricType.FINAL, 0, float("nan"), 5, 0), TrialEnded("a", TrialStatus.SUCCEEDED, 0)])
    slow, fast = fold(s.read()), fold_store(s)
    assert fast.last_seq == slow.last_seq
    fm, sm = fast.trials["a"].metrics, slow.trials["a"].metrics
    assert [(m.type, m.sequence, m.index, m.ts) for m in fm] == [(m.type, m.sequence, m.index, m.ts) for m in sm]
    assert [m.value for m in fm[:5]] == [{"default": i, "k": [1]} for i in range(5)]
    assert fast.trials["a"].last_index == 5 and fast.trials["a"].status is TrialStatus.SUCCEEDED


def _valid_store(path: Path) -> bytes:
    s = SqliteStore(path)
    s.append([TrialCreated(f"t{i}", i, i, {"x": "y" * 200}) for i in range(200)])
    s.close()
    assert not Path(f"{path}-wal").exists()  # closed cleanly: everything is in the main file
    return path.read_bytes()


@pytest.mark.parametrize("damage", ["empty", "garbage", "truncated", "foreign"])
@pytest.mark.parametrize("create", [False, True])
def test_a_damaged_store_is_a_clear_error_and_stays_untouched(tmp_path: Path, damage: str, create: bool) -> None:
    import sqlite3

    path = tmp_path / "db" / "nnix.sqlite"
    path.parent.mkdir()
    if damage == "empty":
        path.write_bytes(b"")
    elif damage == "garbage":
        path.write_bytes(os.urandom(8192))
    elif damage == "truncated":
        path.write_bytes(_valid_store(path)[:8192])
    else:  # an SQLite database, but not an nnix store
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE other(x)")
        db.commit()
        db.close()
    before = path.read_bytes()
    with pytest.raises(StoreError) as info:
        SqliteStore(path, create=create)
    assert str(path) in info.value.message
    assert info.value.hint and "backup" in info.value.hint and "nnix experiment import" in info.value.hint
    assert path.read_bytes() == before  # no schema, no header, nothing written


def test_a_new_store_and_its_wal_are_the_owners_only(tmp_path: Path) -> None:
    path = tmp_path / "exp" / "db" / "nnix.sqlite"
    s = SqliteStore(path)
    s.append([TrialCreated("a", 0, 0, {"x": 1})])
    for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        assert p.stat().st_mode & 0o777 == 0o600, p
    assert path.parent.stat().st_mode & 0o777 == 0o700
    s.close()


def test_a_full_store_raises_store_full_error(tmp_path: Path) -> None:
    from nnix.errors import StoreFullError

    s = SqliteStore(tmp_path / "s.sqlite")
    s.append([TrialCreated("a", 0, 0, {"x": 1})])
    pages = s._db.execute("PRAGMA page_count").fetchone()[0]
    s._db.execute(f"PRAGMA max_page_count = {pages}")  # what a full disk looks like to SQLite
    with pytest.raises(StoreFullError, match="full") as e:
        for i in range(1000):
            s.append([TrialCreated(f"t{i}", i, i, {"x": "y" * 500})])
    s.close()
    # the message names the file (it said "write to failed") and the room left on its file system
    assert f"the disk holding {tmp_path} is full: writing to {s.path} failed (database or disk is full; " in \
        e.value.message and " free)" in e.value.message, e.value.message


def test_an_append_on_a_disk_all_but_full_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store whose WAL has room takes writes long after the trials' writes fail for lack of space: an append
    looks at the free space (once a second at most) and refuses as SQLite would, naming the file."""
    from nnix.errors import StoreFullError
    from nnix.store import sqlite

    looked: list[Path] = []

    def free(path: Path) -> int:
        looked.append(path)
        return 4096

    s = SqliteStore(tmp_path / "s.sqlite")
    try:
        s.append([TrialCreated("a", 0, 0, {"x": 1})])
        monkeypatch.setattr(sqlite, "free_bytes", free)
        s._space_at = -sqlite.SPACE_CHECK_INTERVAL  # (the next append looks)
        with pytest.raises(StoreFullError) as e:
            s.append([TrialCreated("b", 1, 1, {"x": 2})])
        assert e.value.message == (f"the disk holding {tmp_path} is full: 4,096 bytes free, so writing to {s.path} "
                                   "stopped") and e.value.hint == sqlite.FULL_HINT
        assert looked == [tmp_path] and [x.event.trial_id for x in s.read()] == ["a"]  # type: ignore[attr-defined]
        monkeypatch.setattr(sqlite, "free_bytes", lambda path: sqlite.MIN_FREE_BYTES)
        s._space_at = -sqlite.SPACE_CHECK_INTERVAL
        s.append([TrialCreated("b", 1, 1, {"x": 2})])
        assert len(s.read()) == 2
    finally:
        s.close()
    assert sqlite.MIN_FREE_BYTES == 1024 * 1024


def test_a_store_held_open_here_is_never_opened_by_hand(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Closing any descriptor of an SQLite file drops the POSIX locks of every connection of the process to
    it: re-checking (open + close) a store this process holds would expose it to corruption by others."""
    import builtins

    from nnix.store import sqlite as mod

    path = tmp_path / "s.sqlite"
    held = SqliteStore(path)
    held.append([StatusChanged(ExperimentStatus.RUNNING)])
    opened: list[str] = []
    real_open = builtins.open

    def spy(file: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy)
    second = SqliteStore(path, create=False)  # a reader in the same process (read_state of its own experiment)
    assert len(second.read()) == 1
    second.close()
    mod.check_store_file(path)
    assert str(path) not in opened
    held.close()
    mod.check_store_file(path)  # no longer held: checked by hand again
    assert opened.count(str(path)) == 1


def test_a_snapshot_is_written_in_chunks_and_a_write_cut_short_is_never_read(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Each chunk its own transaction (an appender on another connection waits for one chunk, not the whole
    snapshot); the row names the chunks' generation: chunks no row names are not read, and the next write
    deletes them."""
    import sqlite3

    from nnix.store import sqlite as sqlite_mod
    from nnix.store.base import Snapshot

    monkeypatch.setattr(sqlite_mod, "SNAPSHOT_CHUNK", 4)
    store = SqliteStore(tmp_path / "s.sqlite")
    seq = store.append([StatusChanged(ExperimentStatus.RUNNING)])[0].seq
    store.write_snapshot(Snapshot(2, seq, b"0123456789"))
    db = sqlite3.connect(tmp_path / "s.sqlite")
    assert [bytes(b) for (b,) in db.execute("SELECT body FROM snapshot_chunk ORDER BY n")] == [b"0123", b"4567", b"89"]
    db.execute("INSERT INTO snapshot_chunk(gen, n, body) VALUES (99, 0, x'00')")  # a write killed half-way
    db.commit()
    assert store.read_snapshot() == Snapshot(2, seq, b"0123456789")
    store.write_snapshot(Snapshot(2, seq, b"abcdef"))
    assert store.read_snapshot() == Snapshot(2, seq, b"abcdef")
    assert [bytes(b) for (b,) in db.execute("SELECT body FROM snapshot_chunk ORDER BY n")] == [b"abcd", b"ef"]
    db.execute("DELETE FROM snapshot_chunk WHERE n = 1")  # a chunk lost: the snapshot does not match
    db.commit()
    assert store.read_snapshot() is None


def test_a_snapshot_part_slice_across_chunks_some_kept_some_not_reads_every_one(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A slice over chunks of which some are kept (read before) and some not: the ones read then fill the cache,
    which lets the oldest go; those the slice covers are still given back (a KeyError did, writing a snapshot
    again after reading the best trial of a 10k-trial one)."""
    from nnix.store import sqlite as sqlite_mod
    from nnix.store.base import Snapshot

    monkeypatch.setattr(sqlite_mod, "PART_CHUNK", 4)
    monkeypatch.setattr(sqlite_mod, "PART_CACHE", 4)
    store = SqliteStore(tmp_path / "s.sqlite")
    seq = store.append([StatusChanged(ExperimentStatus.RUNNING)])[0].seq
    data = bytes(range(48))
    store.write_snapshot(Snapshot(2, seq, b"head", (data, b"")))
    snap = store.read_snapshot()
    assert snap is not None
    part = snap.parts[0]
    for k in (0, 3, 4, 5):  # chunks kept: the cache is full
        assert part[4 * k:4 * k + 4] == data[4 * k:4 * k + 4]
    assert part[0:48] == data  # 12 chunks: a long read, not kept
    assert part[0:12] == data[0:12]  # chunks 0..2, 0 kept: 1 and 2 read and kept, the cache lets 0 and 3 go
    store.close()


def test_a_snapshot_part_let_go_while_its_thread_holds_the_pin_lock_does_not_deadlock() -> None:
    """A part's finalizer runs wherever the garbage collector does: inside a snapshot write listing the pinned
    generations under the lock, it once took the same lock and deadlocked the manager (seen in a test run)."""
    import threading

    from nnix.store import sqlite as m

    key = (os.path.realpath("/nowhere-nnix"), 7)
    m._pin(key, +1)
    assert m._pinned.get(key) == 1
    done = threading.Event()

    def collected_inside_the_lock() -> None:
        with m._held_lock:  # as write_snapshot listing the pinned generations
            m._close([], key)  # what the part's finalizer runs, if the collector runs just then
        done.set()

    threading.Thread(target=collected_inside_the_lock, daemon=True).start()
    assert done.wait(30), "the finalizer deadlocked on the lock its own thread holds"
    assert 7 not in m._pinned_gens(Path("/nowhere-nnix"))
