"""nnix.archive (``nnix experiment save`` / ``load``) against hostile and damaged archives and full disks: every one
refused with a clear ArchiveError before anything is written (or, where it shows only while extracting, with
nothing left behind), never a traceback; and the temporary files of a killed save cleaned by the next save or load.
(Saving and loading real experiments across machines: tests/cli/test_nnictl.py.)"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import pytest

from nnix import archive, limits
from nnix.archive import MANIFEST, STORE_MEMBER, ArchiveError, load, save
from nnix.home import Registry
from nnix.testing.experiments import make_experiment
from nnix.testing.faults import small_tmpfs
from nnix.testing.spaces import UNIT

MiB = 1024 * 1024
NNIX = [sys.executable, "-c", "from nnix.cli.main import main; main()"]
GOOD_MANIFEST = json.dumps({"format": 1, "experimentId": "evil0001"})


def _noise(n: int) -> bytes:
    """``n`` bytes deflate cannot shrink (deterministic)."""
    out = bytearray()
    x = 0x9E3779B97F4A7C15
    while len(out) < n:
        x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
        out += x.to_bytes(8, "little")
    return bytes(out[:n])


def _zip(path: Path, members: list[tuple[str, bytes]], manifest: str = GOOD_MANIFEST,
         compression: int = zipfile.ZIP_DEFLATED) -> Path:
    with warnings.catch_warnings(), zipfile.ZipFile(path, "w", compression) as zf:
        warnings.simplefilter("ignore")  # (zipfile warns of a duplicate name: that is the point)
        zf.writestr(MANIFEST, manifest)
        for name, data in members:
            zf.writestr(name, data)
    return path


def _load(tmp_path: Path, path: Path) -> ArchiveError:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    with pytest.raises(ArchiveError) as e:
        load(path, code, tmp_path / "root")
    assert not (tmp_path / "root").exists() or not any((tmp_path / "root").iterdir()), "something was left"
    return e.value


def _lie_about_size(path: Path, member: str, size: int) -> None:
    """Rewrite the uncompressed size the local and central headers of ``member`` declare."""
    with zipfile.ZipFile(path) as zf:
        offset = zf.getinfo(member).header_offset
    data = bytearray(path.read_bytes())
    struct.pack_into("<I", data, offset + 22, size)
    at = 0
    while (at := data.find(b"PK\x01\x02", at)) >= 0:
        n = struct.unpack_from("<H", data, at + 28)[0]
        if data[at + 46:at + 46 + n] == member.encode():
            struct.pack_into("<I", data, at + 24, size)
        at += 4
    path.write_bytes(bytes(data))


# --- refused before anything is written ---------------------------------------------------------------------------


def test_a_zip_bomb_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    bomb = _zip(tmp_path / "bomb.zip", [("experiment/log/big", bytes(64 * MiB)), (STORE_MEMBER, b"x")])
    assert bomb.stat().st_size < MiB
    e = _load(tmp_path, bomb)
    assert "experiment/log/big" in e.message and "64.0 MiB" in e.message and "ratio above 200" in e.message, e.message


def test_an_archive_over_the_size_limit_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert limits.MAX_ARCHIVE_BYTES >= 1024**4 and archive.MAX_MEMBERS == limits.MAX_ARCHIVE_MEMBERS
    monkeypatch.setattr(archive, "MAX_ARCHIVE_BYTES", 3 * MiB)  # (the real one is 1 TiB: the same check)
    path = _zip(tmp_path / "big.zip", [(f"experiment/log/{i}", _noise(MiB)) for i in range(4)])
    e = _load(tmp_path, path)
    assert "4.0 MiB uncompressed (at most 3.0 MiB)" in e.message, e.message


@pytest.mark.parametrize("members,expected", [
    ([(STORE_MEMBER, b"a"), (STORE_MEMBER, b"b")], "holds that name twice"),
    ([("experiment/log/x", b"a"), ("experiment/log/x/", b"")], "holds that name twice"),
    ([("experiment/log/x", b"a"), ("experiment/log/x/y", b"b")], "a file and a folder"),
    ([("code/a.py", b"a"), ("code/a.py", b"b")], "holds that name twice"),
])
def test_duplicate_and_clashing_members_are_refused(tmp_path: Path, members: list[tuple[str, bytes]],
                                                    expected: str) -> None:
    e = _load(tmp_path, _zip(tmp_path / "dup.zip", members))
    assert expected in e.message and "refusing archive member" in e.message, e.message


def test_a_duplicate_manifest_is_refused(tmp_path: Path) -> None:
    path = _zip(tmp_path / "dup.zip", [(MANIFEST, json.dumps({"format": 1, "experimentId": "other01"}).encode())])
    assert "holds that name twice" in _load(tmp_path, path).message


@pytest.mark.parametrize("manifest,expected", [
    ("[" * 100_000 + "]" * 100_000, "not valid JSON"),
    (json.dumps({"format": 1, "experimentId": "x", "pad": _noise(MiB).hex()}), "at most 1.0 MiB"),
    ("{", "not valid JSON"),
])
def test_a_hostile_manifest_is_refused(tmp_path: Path, manifest: str, expected: str) -> None:
    e = _load(tmp_path, _zip(tmp_path / "m.zip", [(STORE_MEMBER, b"x")], manifest=manifest))
    assert expected in e.message, e.message


def test_no_room_is_said_before_anything_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _zip(tmp_path / "a.zip", [("experiment/log/big", _noise(3 * MiB)), (STORE_MEMBER, _noise(MiB))])
    monkeypatch.setattr(archive, "_free_bytes", lambda where: 2 * MiB)
    e = _load(tmp_path, path)
    assert f"needs 5.0 MiB on the file system of {tmp_path / 'root'}; 2.0 MiB free there" in e.message, e.message


# --- shown only while extracting: refused, nothing left -------------------------------------------------------------


def test_a_member_longer_than_its_header_says_is_refused(tmp_path: Path) -> None:
    path = _zip(tmp_path / "liar.zip", [("experiment/log/liar", _noise(4 * MiB)), (STORE_MEMBER, b"x")],
                compression=zipfile.ZIP_STORED)
    _lie_about_size(path, "experiment/log/liar", 100)
    e = _load(tmp_path, path)
    assert "experiment/log/liar" in e.message and ("cannot be read" in e.message or "its header says" in e.message)


def test_damaged_member_data_is_a_clear_error(tmp_path: Path) -> None:
    path = _zip(tmp_path / "bad.zip", [("experiment/log/x", b"hello " * 10_000), (STORE_MEMBER, b"x")])
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("experiment/log/x")
    data = bytearray(path.read_bytes())
    start = info.header_offset + 30 + len(info.filename)
    data[start + 10:start + 20] = bytes(10)
    path.write_bytes(bytes(data))
    e = _load(tmp_path, path)
    assert "archive member 'experiment/log/x' cannot be read" in e.message and e.hint and "damaged" in e.hint


def test_the_bytes_written_are_counted_against_the_header(tmp_path: Path) -> None:
    """What zipfile yields past a member's declared size (a reader that trusts the data) is refused."""
    info = zipfile.ZipInfo("experiment/log/x")
    info.file_size = 10
    out = tmp_path / "out"
    with pytest.raises(ArchiveError, match="holds more than the 10 bytes its header says"), open(out, "wb") as f:
        archive._copy(_Chunks([b"x" * 8, b"x" * 8]), f, info)  # type: ignore[arg-type]
    assert out.stat().st_size == 8


class _Chunks:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def read(self, n: int = -1) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""


def test_a_disk_that_fills_while_extracting_names_the_file_and_the_room(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    path = _zip(tmp_path / "a.zip", [("experiment/log/big", _noise(3 * MiB)), (STORE_MEMBER, b"x")])
    with small_tmpfs(tmp_path / "disk", "1m") as disk:
        monkeypatch.setattr(archive, "_check_room", lambda needs: None)  # (as if the disk filled meanwhile)
        (tmp_path / "code").mkdir()
        with pytest.raises(ArchiveError) as e:
            load(path, tmp_path / "code", disk / "root")
        message = e.value.message
        assert message.startswith(f"the disk holding {disk / 'root'}/.evil0001.loading-"), message
        assert message.endswith("/experiment/log/big is full: extracting experiment/log/big (3.0 MiB) failed "
                                "(0 bytes free on that file system)"), message
        assert list((disk / "root").iterdir()) == []  # the staging folder is gone


def test_a_disk_too_small_is_refused_by_the_cli_without_a_traceback(tmp_path: Path) -> None:
    path = _zip(tmp_path / "a.zip", [("experiment/log/big", _noise(3 * MiB)), (STORE_MEMBER, b"x")])
    with small_tmpfs(tmp_path / "disk", "1m") as disk:
        (tmp_path / "code").mkdir()
        r = subprocess.run([*NNIX, "experiment", "load", "-p", str(path), "-c", str(tmp_path / "code"),
                            "-l", str(disk / "root")], capture_output=True, text=True, timeout=60)
        assert r.returncode == 1 and "needs 3.0 MiB on the file system" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr


def test_a_duplicate_member_through_the_cli_is_a_clear_error(tmp_path: Path) -> None:
    path = _zip(tmp_path / "dup.zip", [(STORE_MEMBER, b"a"), ("experiment/log/x", b"1"), ("experiment/log/x", b"2")])
    (tmp_path / "code").mkdir()
    r = subprocess.run([*NNIX, "experiment", "load", "-p", str(path), "-c", str(tmp_path / "code"),
                        "-l", str(tmp_path / "root")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "'experiment/log/x': the archive holds that name twice" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "root").exists()


def test_a_disk_that_fills_while_saving_names_the_file(tmp_path: Path) -> None:
    exp_id, d = make_experiment(tmp_path, searchSpace=UNIT, trialCommand="true")
    (d / "log" / "big").write_bytes(_noise(3 * MiB))
    with small_tmpfs(tmp_path / "disk", "1m") as disk:
        with pytest.raises(ArchiveError) as e:
            save(exp_id, d, disk, None)
        assert e.value.message.startswith(f"the disk holding {disk}/.nnix_experiment_{exp_id}.zip."), e.value.message
        assert f"is full: writing {disk}/nnix_experiment_{exp_id}.zip (saving {d}/log/big) failed" in e.value.message
        assert list(disk.iterdir()) == []


# --- a killed save's temporary files --------------------------------------------------------------------------------

KILLED_SAVE = """
import sys
from pathlib import Path
from nnix import archive
real = archive._walk
def stuck(root):
    print("writing", flush=True)
    sys.stdin.read()  # until killed
    return real(root)
archive._walk = stuck
archive.save(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), None)
"""

HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


def test_a_killed_saves_temporary_files_are_cleaned_by_the_next_save_and_load(tmp_path: Path) -> None:
    exp_id, d = make_experiment(tmp_path, searchSpace=UNIT, trialCommand="true")
    out = tmp_path / "out"
    out.mkdir()
    name = f"nnix_experiment_{exp_id}.zip"
    killed = subprocess.Popen([sys.executable, "-c", KILLED_SAVE, exp_id, str(d), str(out)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert killed.stdout is not None and killed.stdout.readline() == "writing\n"
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait(30)
    left = sorted(p.name for p in out.iterdir())
    assert len(left) == 2 and all(n.startswith(f".{name}.") for n in left), left  # the zip and the store copy
    live = out / f".{name}.live0001"  # a save still running: locked by its (living) writer
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(live)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        old = out / f".{name}.abcd_123"  # an older nnix's temporary file (never locked) of a killed save
        old.write_bytes(b"PK")
        others = [out / f".{name}.not-ours", out / f".{name}.abcdefgh.txt", out / ".other.zip.abcdefgh"]
        for p in others:
            p.write_bytes(b"")
        link = out / f".{name}.link0001"
        link.symlink_to(tmp_path / "elsewhere")
        result = save(exp_id, d, out, None)
        assert result.path == out / name and zipfile.ZipFile(result.path).testzip() is None
        assert sorted(p.name for p in out.iterdir()) == sorted([name, live.name, link.name, *(p.name for p in others)])
        # a load of the archive cleans beside it too (here: a save killed after the first one was written)
        stale = out / f".{name}.zzzzzzzz.store"
        stale.write_bytes(b"")
        Path(f"{stale}-journal").write_bytes(b"")
        (tmp_path / "code").mkdir()
        Registry().remove(exp_id)
        loaded = load(out / name, tmp_path / "code", tmp_path / "root")
        assert loaded.experiment_id == exp_id
        assert not stale.exists() and not Path(f"{stale}-journal").exists() and live.exists()
    finally:
        holder.kill()
        holder.wait(30)
    archive.clean_stale(out, name)  # its writer gone now
    assert not live.exists()


def test_a_killed_loads_staging_folder_is_cleaned_by_the_next_load(tmp_path: Path) -> None:
    exp_id, d = make_experiment(tmp_path, searchSpace=UNIT, trialCommand="true")
    result = save(exp_id, d, tmp_path / "out", None)
    root = tmp_path / "root"
    stale = root / f".{exp_id}.loading-abcdefgh"  # a killed load's: its lock file held by nobody
    (stale / "experiment").mkdir(parents=True)
    (stale / archive.LOCK_NAME).write_bytes(b"")
    unknown = root / f".{exp_id}.loading-ijklmnop"  # no lock file: cannot be told from a live one
    unknown.mkdir()
    (tmp_path / "code").mkdir()
    Registry().remove(exp_id)
    load(result.path, tmp_path / "code", root)
    assert not stale.exists() and unknown.exists() and (root / exp_id).is_dir()


def test_a_forced_load_never_replaces_an_experiment_a_manager_holds(tmp_path: Path) -> None:
    """`experiment load --force` over an experiment whose manager lock is held (a manager runs or serves it) is
    refused with the holder's pid, and nothing is replaced; once the lock is free the load replaces it. The check
    holds even where the holder took the lock after the load's first look (the replacing step takes the lock)."""
    from nnix.errors import ExperimentBusyError
    from nnix.home import ManagerLock

    exp_id, d = make_experiment(tmp_path, searchSpace=UNIT, trialCommand="true")
    result = save(exp_id, d, tmp_path / "out", None)
    (tmp_path / "code").mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom pathlib import Path\n"
                               "from nnix.home import ManagerLock\n"
                               "lock = ManagerLock.acquire(Path(sys.argv[1]), 'x', 'resume')\nlock.record(port=4321)\n"
                               "print('held', flush=True)\nsys.stdin.read()\n", str(d)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(ExperimentBusyError, match=rf"pid {holder.pid}, port 4321"):
            load(result.path, tmp_path / "code", d.parent, force=True)
        assert (d / "db" / "nnix.sqlite").exists()
        real = archive._refuse_live
        try:  # the holder starts after the first look: the replacing step still finds it
            archive._refuse_live = lambda *a: None
            with pytest.raises(ExperimentBusyError):
                load(result.path, tmp_path / "code", d.parent, force=True)
        finally:
            archive._refuse_live = real
        assert (d / "db" / "nnix.sqlite").exists() and Registry().get(exp_id).dir == str(d)
    finally:
        holder.kill()
        holder.wait(30)
    loaded = load(result.path, tmp_path / "code", d.parent, force=True)
    assert loaded.experiment_id == exp_id and (d / "db" / "nnix.sqlite").exists()
    with ManagerLock.acquire(d, exp_id, "resume"):
        pass
