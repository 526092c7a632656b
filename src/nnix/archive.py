"""Portable experiment archives: ``nnix experiment save`` / ``nnix experiment load`` (NNI's verbs).

An archive is a zip file::

    nnix-archive.json        what was saved: id, where the experiment and its code lived, nnix version
    experiment/...           the experiment directory: the store (a consistent snapshot), logs, trial outputs
    code/...                 the trial code directory (``save -s`` only)

Left out: the config's secrets (``secrets.json``: SSH passwords and the like), the REST token, symbolic
links and anything that is not a regular file.

Loading puts the experiment under a new root (``-l``, default ``$NNIX_HOME``) with its code in ``-c``, and
rewrites the paths its store recorded so that every read resolves there: the config's experiment
directory, trial code directory and any path under them (a custom tuner's ``codeDirectory`` inside the
code, PBT's checkpoint directory inside the experiment...), and each trial's output directory. The store is
never changed in place: the archive's copy is read (read-only, immutable) and a fresh store is written with
the same events (sequence numbers and times kept), only those paths rewritten. Members are checked before
anything is written (no absolute paths, no ``..``, no links, only known top-level folders, no name twice, the
sizes their headers declare within :mod:`nnix.limits`' bounds and the room the file systems have), files are
created with ``O_EXCL | O_NOFOLLOW`` under directories this code made, so an archive cannot write outside
its targets, and the bytes are counted while extracting (a header may lie). Every OS error (a full disk
first) is an :class:`ArchiveError` naming the file.

A save writes ``.<archive name>.XXXXXXXX`` temporary files beside the archive, each locked (``flock``) by the
saving process while it lives; a save or load of that archive removes those of a process that is gone (killed
during a save). A load stages the experiment in ``<root>/.<id>.loading-XXXXXXXX`` (locked the same way, by its
``.lock`` file), removed by a later load of the same id when its loader is gone.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import sqlite3
import stat
import tempfile
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from nnix.errors import NnixError
from nnix.limits import (
    ARCHIVE_RATIO_FLOOR,
    MAX_ARCHIVE_BYTES,
    MAX_ARCHIVE_MEMBERS,
    MAX_ARCHIVE_RATIO,
    MAX_MANIFEST_BYTES,
)
from nnix.version import __version__

MANIFEST = "nnix-archive.json"
FORMAT = 1
EXP_PREFIX = "experiment/"
CODE_PREFIX = "code/"
STORE_MEMBER = EXP_PREFIX + "db/nnix.sqlite"
# never saved: secrets of the config, the REST token, the store's live files (a snapshot is saved instead)
SKIPPED = {"secrets.json", "api.token", "manager.error", "db/nnix.sqlite", "db/nnix.sqlite-wal",
           "db/nnix.sqlite-shm"}
MAX_MEMBERS = MAX_ARCHIVE_MEMBERS
TAMPERED = "this is not an archive written by `nnix experiment save` (or it was tampered with)"
DAMAGED = "the archive is damaged (an incomplete download or copy?)"
COPY_CHUNK = 1024 * 1024
_TEMP_SUFFIX = re.compile(r"[a-z0-9_]{8}(\.store)?")  # mkstemp's 8 random characters (and the store's copy)
_STAGE_SUFFIX = re.compile(r"[a-z0-9_]{8}")
LOCK_NAME = ".lock"
_ID_OK = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


class ArchiveError(NnixError):
    """A bad archive or a load that would overwrite something."""


@dataclass
class SaveResult:
    path: Path
    files: int
    code_files: int
    skipped: list[str]
    secrets_left_out: bool


@dataclass
class LoadResult:
    experiment_id: str
    exp_dir: Path
    code_dir: Path
    code_extracted: int
    rewritten: int


# --- sizes, space, OS errors, temporary files ----------------------------------------------------


def _size(n: int | None) -> str:
    if n is None:
        return "an unknown amount"
    for unit, scale in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def _free_bytes(path: Path) -> int | None:
    """Free bytes (for this user) on the file system holding ``path`` or its nearest existing parent."""
    for p in (path, *path.parents):
        try:
            return shutil.disk_usage(p).free
        except OSError:
            continue
    return None


def _os_error(e: OSError, path: Path | str | None, doing: str) -> ArchiveError:
    """An OS error as an ArchiveError that names the file; a full disk says how much room is left."""
    where = Path(path if path is not None else e.filename or ".")
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return ArchiveError(f"the disk holding {where} is full: {doing} failed ({_size(_free_bytes(where))} free "
                            "on that file system)", "free space there, or choose another place")
    return ArchiveError(f"{doing} failed: {where}: {e.strerror or e}")


@contextlib.contextmanager
def _os_errors(doing: str) -> Iterator[None]:
    """Any OSError in the block (one not already named where it happened) as an ArchiveError naming its file."""
    try:
        yield
    except OSError as e:
        raise _os_error(e, e.filename, doing) from e


def _locked_temp(folder: Path, prefix: str, suffix: str = "") -> tuple[Path, int]:
    """A new temporary file in ``folder`` and its descriptor, holding an exclusive ``flock`` on it until closed:
    what tells :func:`clean_stale` that its writer is alive."""
    while True:
        fd, name = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=folder)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            same = os.stat(name).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:  # (removed by a cleaner that locked it first: make another)
            same = False
        if same:
            return Path(name), fd
        os.close(fd)


def _writer_gone(path: Path, is_dir: bool = False) -> bool:
    """Whether ``path`` (a regular file of this user, or the lock file of a directory) is not locked by a living
    process. Nothing is followed; an unreadable file counts as alive."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # its writer holds it
        return os.stat(path, follow_symlinks=False).st_ino == st.st_ino
    except OSError:
        return False
    finally:
        os.close(fd)


def clean_stale(folder: Path, archive_name: str) -> list[str]:
    """Remove the temporary files that saves of ``folder/archive_name`` killed on the way left there
    (``.<archive_name>.XXXXXXXX``, its store copy ``...XXXXXXXX.store`` and that copy's journal): only regular
    files of this user that no living process holds locked. Returns the names removed."""
    prefix = f".{archive_name}."
    removed: list[str] = []
    try:
        names = [n for n in os.listdir(folder) if n.startswith(prefix) and _TEMP_SUFFIX.fullmatch(n[len(prefix):])]
    except OSError:
        return removed
    for name in sorted(names):
        path = folder / name
        if _writer_gone(path):
            with contextlib.suppress(OSError):
                path.unlink()
                Path(f"{path}-journal").unlink(missing_ok=True)
                removed.append(name)
    return removed


def _clean_stale_stages(root: Path, exp_id: str) -> None:
    """Remove the staging folders that loads of ``exp_id`` killed on the way left in ``root`` (their ``.lock``
    no longer held; one without a lock file is left alone: it cannot be told apart from a live one)."""
    prefix = f".{exp_id}.loading-"
    try:
        names = [n for n in os.listdir(root) if n.startswith(prefix) and _STAGE_SUFFIX.fullmatch(n[len(prefix):])]
    except OSError:
        return
    for name in names:
        stage = root / name
        try:
            st = os.lstat(stage)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and _writer_gone(stage / LOCK_NAME):
            shutil.rmtree(stage, ignore_errors=True)


# --- save ------------------------------------------------------------------------------------------


def _walk(root: Path) -> Iterator[tuple[Path, str]]:
    """Regular files under ``root`` (links neither followed nor saved) as (path, relative posix name);
    what is skipped is yielded with an empty name."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        d = Path(dirpath)
        for name in sorted(dirnames):
            if (d / name).is_symlink():
                yield d / name, ""
        dirnames[:] = sorted(n for n in dirnames if not (d / n).is_symlink())
        for name in sorted(filenames):
            p = d / name
            st = os.lstat(p)
            yield p, (p.relative_to(root).as_posix() if stat.S_ISREG(st.st_mode) else "")


def _snapshot_store(store: Path, into: Path) -> None:
    """A consistent copy of a (possibly live, WAL) store as one self-contained file."""
    from nnix.store.sqlite import check_store_file

    check_store_file(store)
    src = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=30.0)
    try:
        src.execute("SELECT 1 FROM events LIMIT 1")
    except sqlite3.Error:  # a read-only open of a WAL store needs its -shm file: open it normally (reads only)
        src.close()
        src = sqlite3.connect(str(store), timeout=30.0)
    dst = sqlite3.connect(str(into))
    with _copying(src, dst, f"cannot copy the experiment store {store} to {into}"):
        src.backup(dst)
        dst.execute("PRAGMA journal_mode=DELETE")


@contextlib.contextmanager
def _copying(src: sqlite3.Connection, dst: sqlite3.Connection, what: str) -> Iterator[None]:
    """A copy from one store to another: both closed at the end; an SQLite error becomes ``what: error``."""
    try:
        yield
    except sqlite3.Error as e:
        full = getattr(e, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_FULL or "disk is full" in str(e)
        raise ArchiveError(f"{what}: {e}", "free space on that file system" if full else None) from e
    finally:
        src.close()
        dst.close()


def save(exp_id: str, exp_dir: Path, out_dir: Path, code_dir: Path | None) -> SaveResult:
    """Write ``<out_dir>/nnix_experiment_<id>.zip``; with ``code_dir`` the trial code goes in too."""
    from nnix.home import STORE_NAME

    target = out_dir / f"nnix_experiment_{exp_id}.zip"
    with _os_errors(f"making {out_dir}"):
        out_dir.mkdir(parents=True, exist_ok=True)
    clean_stale(out_dir, target.name)
    if target.exists():
        raise ArchiveError(f"{target} already exists", "remove it, or save to another directory with -p")
    skipped: list[str] = []
    files = code_files = 0
    secrets_left_out = (exp_dir / "secrets.json").exists()
    config = _stored_config(exp_dir / STORE_NAME)
    manifest = {
        "format": FORMAT, "experimentId": exp_id, "experimentDir": str(exp_dir),
        "codeDir": str(config.get("trial_code_directory") or ""), "hasCode": code_dir is not None,
        "nnixVersion": __version__, "savedAt": time.time(),
    }
    # (temporary files beside the target, locked while this process lives: a killed save's are removed by the
    # next save or load of the target, see clean_stale)
    with _os_errors(f"creating a temporary file in {out_dir}"):
        tmp, tmp_fd = _locked_temp(out_dir, f".{target.name}.")
        try:
            snap, snap_fd = _locked_temp(out_dir, f".{target.name}.", ".store")
        except BaseException:
            tmp.unlink(missing_ok=True)
            os.close(tmp_fd)
            raise
    source: Path | None = None
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            _snapshot_store(exp_dir / STORE_NAME, snap)
            zf.writestr(MANIFEST, json.dumps(manifest, indent=1))
            source = snap
            zf.write(snap, STORE_MEMBER)
            for path, rel in _walk(exp_dir):
                if not rel:
                    skipped.append(str(path))
                elif rel not in SKIPPED:
                    source = path
                    zf.write(path, EXP_PREFIX + rel)
                    files += 1
            if code_dir is not None:
                for path, rel in _walk(code_dir):
                    if not rel:
                        skipped.append(str(path))
                    elif "__pycache__" not in rel.split("/"):
                        source = path
                        zf.write(path, CODE_PREFIX + rel)
                        code_files += 1
            source = None
        os.replace(tmp, target)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        writing = e.filename is None or e.errno in (errno.ENOSPC, errno.EDQUOT)  # (zipfile names no file it writes)
        raise _os_error(e, tmp if writing else e.filename,
                        f"writing {target}" + (f" (saving {source})" if source is not None else "")) from e
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        snap.unlink(missing_ok=True)
        Path(f"{snap}-journal").unlink(missing_ok=True)
        os.close(snap_fd)
        os.close(tmp_fd)
    return SaveResult(target, files, code_files, skipped, secrets_left_out)


def _stored_config(store: Path) -> dict[str, Any]:
    con = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=30.0)
    try:
        row = con.execute("SELECT body FROM events WHERE kind = 'ExperimentCreated' ORDER BY seq LIMIT 1").fetchone()
    except sqlite3.Error as e:
        raise ArchiveError(f"cannot read the experiment store {store}: {e}") from e
    finally:
        con.close()
    if row is None:
        raise ArchiveError(f"{store} holds no experiment")
    config: dict[str, Any] = json.loads(row[0]).get("config") or {}
    return config


# --- load ------------------------------------------------------------------------------------------


def _member_name(info: zipfile.ZipInfo) -> str:
    """The member's checked relative name, or an ArchiveError naming the member and the rule."""
    name = info.filename
    bad = None
    if not name or "\\" in name or "\0" in name or name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        bad = "an absolute or malformed path"
    else:
        parts = PurePosixPath(name.rstrip("/")).parts
        if any(p in ("..", ".", "") for p in parts) or not parts:
            bad = "a path with '..' or empty parts"
    mode = (info.external_attr >> 16) & 0xFFFF
    if bad is None and mode and stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
        bad = "a link or special file"
    if bad is None and not (name == MANIFEST or name.startswith((EXP_PREFIX, CODE_PREFIX))):
        bad = f"outside {MANIFEST}, {EXP_PREFIX} and {CODE_PREFIX}"
    if bad is not None:
        raise ArchiveError(f"refusing archive member {name!r}: {bad}", TAMPERED)
    return name


def check_members(infos: list[zipfile.ZipInfo], names: list[str]) -> None:
    """Before anything is extracted: no name twice (nor a file where another member needs a folder), and the
    sizes the headers declare within :data:`~nnix.limits.MAX_ARCHIVE_BYTES` and, member by member,
    :data:`~nnix.limits.MAX_ARCHIVE_RATIO`."""
    files: set[str] = set()
    folders: set[str] = set()
    seen: set[str] = set()
    total = 0
    for info, name in zip(infos, names, strict=True):
        key = name.rstrip("/")
        if key in seen:
            raise ArchiveError(f"refusing archive member {name!r}: the archive holds that name twice", TAMPERED)
        seen.add(key)
        (folders if info.is_dir() else files).add(key)
        parts = key.split("/")
        folders.update("/".join(parts[:i]) for i in range(1, len(parts)))
        size = info.file_size
        total += size
        if size > ARCHIVE_RATIO_FLOOR and size > MAX_ARCHIVE_RATIO * max(info.compress_size, 1):
            raise ArchiveError(
                f"refusing archive member {name!r}: {_size(size)} compressed into {_size(info.compress_size)}, "
                f"a ratio above {MAX_ARCHIVE_RATIO} (a zip bomb?)", TAMPERED)
    if total > MAX_ARCHIVE_BYTES:
        raise ArchiveError(f"refusing archive: its members hold {_size(total)} uncompressed (at most "
                           f"{_size(MAX_ARCHIVE_BYTES)})", TAMPERED)
    clash = files & folders
    if clash:
        name = min(clash)
        raise ArchiveError(f"refusing archive member {name!r}: a file and a folder of the archive share that name",
                           TAMPERED)


def _check_room(needs: dict[Path, int]) -> None:
    """Refuse a load the file systems have no room for (the sizes the members declare), before writing."""
    by_fs: dict[int, tuple[Path, int]] = {}
    for where, n in needs.items():
        dev = -1
        for p in (where, *where.parents):
            with contextlib.suppress(OSError):
                dev = os.stat(p).st_dev
                break
        first, total = by_fs.get(dev, (where, 0))
        by_fs[dev] = (first, total + n)
    for where, n in by_fs.values():
        free = _free_bytes(where)
        if free is not None and n > free:
            raise ArchiveError(f"loading this archive needs {_size(n)} on the file system of {where}; {_size(free)} "
                               "free there", "free space there, or load elsewhere (-l for the experiment, -c for "
                               "its code)")


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> bytes:
    """A small member, whole (at most ``limit`` bytes, counted)."""
    if info.file_size > limit:
        raise ArchiveError(f"{info.filename} is {_size(info.file_size)} (at most {_size(limit)})", TAMPERED)
    with _reading(info), zf.open(info) as src:
        data = src.read(limit + 1)
    if len(data) > limit:
        raise ArchiveError(f"{info.filename} holds more than the {info.file_size} bytes its header says", TAMPERED)
    return data


@contextlib.contextmanager
def _reading(info: zipfile.ZipInfo) -> Iterator[None]:
    """What reading a member may raise (bad CRC, damaged deflate data, encryption...) as an ArchiveError."""
    try:
        yield
    except (zipfile.BadZipFile, zlib.error, EOFError, RuntimeError, NotImplementedError, ValueError) as e:
        raise ArchiveError(f"archive member {info.filename!r} cannot be read: {e}", DAMAGED) from e


def read_manifest(zf: zipfile.ZipFile) -> dict[str, Any]:
    try:
        data = json.loads(_read_member(zf, zf.getinfo(MANIFEST), MAX_MANIFEST_BYTES))
    except KeyError as e:
        raise ArchiveError(f"no {MANIFEST} in the archive", "was it written by `nnix experiment save`?") from e
    except RecursionError as e:
        raise ArchiveError(f"{MANIFEST} is not valid JSON: nested too deep", TAMPERED) from e
    except ValueError as e:
        raise ArchiveError(f"{MANIFEST} is not valid JSON: {e}") from e
    if not isinstance(data, dict) or not isinstance(data.get("experimentId"), str):
        raise ArchiveError(f"{MANIFEST} has no experimentId")
    if data.get("format") != FORMAT:
        raise ArchiveError(f"archive format {data.get('format')!r} is not supported (this nnix reads {FORMAT})",
                           "load it with the nnix version that saved it")
    exp_id = data["experimentId"]
    if not (1 <= len(exp_id) <= 32 and set(exp_id) <= _ID_OK):
        raise ArchiveError(f"bad experiment id {exp_id!r} in {MANIFEST}")
    return data


def _extract(zf: zipfile.ZipFile, info: zipfile.ZipInfo, root: Path, rel: str) -> None:
    """Write one member under ``root`` without following any link (directories are made here), at most the
    bytes its header declares (counted: the room was checked for those); an OS error names the file."""
    parts = PurePosixPath(rel).parts
    d = root
    target = d
    try:
        for part in parts[:-1]:
            d = target = d / part
            try:
                d.mkdir(mode=0o700)
            except FileExistsError:
                if d.is_symlink() or not d.is_dir():
                    raise ArchiveError(f"refusing to extract {info.filename}: {d} is not a plain directory",
                                       TAMPERED) from None
        target = d / parts[-1]
        if info.is_dir():
            target.mkdir(mode=0o700, exist_ok=True)
            return
        mode = 0o700 if (info.external_attr >> 16) & 0o100 else 0o600  # an executable script stays executable
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        except FileExistsError:
            raise ArchiveError(f"refusing to extract {info.filename}: {target} already exists", TAMPERED) from None
        with os.fdopen(fd, "wb") as out, _reading(info), zf.open(info) as src:
            _copy(src, out, info)
    except OSError as e:
        raise _os_error(e, target, f"extracting {info.filename} ({_size(info.file_size)})") from e


def _copy(src: IO[bytes], out: IO[bytes], info: zipfile.ZipInfo) -> None:
    written = 0
    while chunk := src.read(COPY_CHUNK):
        written += len(chunk)
        if written > info.file_size:
            raise ArchiveError(f"archive member {info.filename!r} holds more than the {info.file_size} bytes its "
                               "header says", TAMPERED)
        out.write(chunk)


def _rewriter(pairs: list[tuple[str, str]]) -> Callable[[str], str]:
    """Replace a leading old directory (whole path components only) by the new one; longest first."""
    ordered = sorted(((o.rstrip("/"), n.rstrip("/")) for o, n in pairs if o and o.rstrip("/")),
                     key=lambda p: -len(p[0]))

    def rewrite(value: str) -> str:
        for old, new in ordered:
            if value == old or value.startswith(old + "/"):
                return new + value[len(old):]
        return value

    return rewrite


def _walk_json(value: Any, fn: Callable[[str], str], skip: frozenset[str] = frozenset()) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, list):
        return [_walk_json(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: (v if k in skip else _walk_json(v, fn)) for k, v in value.items()}
    return value


def _copy_store(src: Path, dst: Path, rewrite_config: Callable[[dict[str, Any]], dict[str, Any]],
                rewrite_path: Callable[[str], str]) -> int:
    """A fresh store at ``dst`` with ``src``'s events (same seq and ts); the config and trials' output
    directories rewritten. ``src`` is opened read-only and immutable. Returns how many events changed."""
    from nnix.store.sqlite import SCHEMA

    ro = sqlite3.connect(f"file:{src}?mode=ro&immutable=1", uri=True)
    dst.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.close(os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    out = sqlite3.connect(str(dst), isolation_level=None)
    changed = 0
    with _copying(ro, out, "cannot copy the archive's store"):
        try:
            rows = ro.execute("SELECT seq, ts, kind, trial_id, body FROM events ORDER BY seq")
        except sqlite3.Error as e:
            raise ArchiveError(f"the archive's store is not an nnix experiment store: {e}") from e
        out.execute("PRAGMA journal_mode=WAL")
        out.executescript(SCHEMA)
        out.execute("BEGIN IMMEDIATE")
        for seq, ts, kind, trial_id, body in rows:
            new_body = body
            if kind == "ExperimentCreated":
                data = json.loads(body)
                data["config"] = rewrite_config(data.get("config") or {})
                new_body = json.dumps(data, separators=(",", ":"), allow_nan=True)
            elif kind == "TrialStarted":
                data = json.loads(body)
                if isinstance(data.get("output_dir"), str):
                    data["output_dir"] = rewrite_path(data["output_dir"])
                new_body = json.dumps(data, separators=(",", ":"), allow_nan=True)
            changed += new_body != body
            out.execute("INSERT INTO events(seq, ts, kind, trial_id, body) VALUES (?, ?, ?, ?, ?)",
                        (seq, ts, kind, trial_id, new_body))
        out.execute("COMMIT")
    return changed


def load(archive: Path, code_dir: Path, root: Path, search_space_path: Path | None = None,
         force: bool = False) -> LoadResult:
    """Load an archive under ``root`` (its experiment directory becomes ``root/<id>``) with its trial code
    in ``code_dir`` (extracted there when the archive has it; else the code must already be there).
    ``search_space_path``: write the search space there and record it as the config's searchSpaceFile.
    An experiment with the same id is refused unless ``force`` (and never while its manager runs)."""
    from nnix.home import STORE_NAME, Entry, ManagerLock, Registry

    archive = Path(os.path.abspath(archive.expanduser()))
    clean_stale(archive.parent, archive.name)  # (what a save of this archive, killed on the way, left beside it)
    try:
        zf = zipfile.ZipFile(archive)
    except (OSError, zipfile.BadZipFile, EOFError, ValueError) as e:
        raise ArchiveError(f"cannot read {archive}: {e}", "give the .zip written by `nnix experiment save`") from e
    with zf, _os_errors(f"loading {archive}"):
        infos = zf.infolist()
        if len(infos) > MAX_MEMBERS:
            raise ArchiveError(f"the archive has {len(infos)} members (at most {MAX_MEMBERS})")
        names = [_member_name(i) for i in infos]  # every member checked before anything is written
        check_members(infos, names)
        manifest = read_manifest(zf)
        if STORE_MEMBER not in names:
            raise ArchiveError(f"the archive has no {STORE_MEMBER}")
        exp_id = manifest["experimentId"]
        has_code = any(n.startswith(CODE_PREFIX) and n != CODE_PREFIX for n in names)
        root = Path(os.path.abspath(root.expanduser()))
        code_dir = Path(os.path.abspath(code_dir.expanduser()))
        exp_dir = root / exp_id
        registry = Registry()
        existing = {e.id: e for e in registry.all()}.get(exp_id)
        if (existing is not None or exp_dir.exists()) and not force:
            where = existing.dir if existing is not None else str(exp_dir)
            raise ArchiveError(f"experiment {exp_id} already exists here ({where})",
                               f"delete it first (nnix experiment delete {exp_id}), or pass --force to replace it")
        if existing is not None:
            _refuse_live(existing.dir, exp_id)
        if has_code:
            if code_dir.exists() and (not code_dir.is_dir() or any(code_dir.iterdir())):
                raise ArchiveError(f"{code_dir} is not an empty directory: the archive's code is extracted there",
                                   "give a new or empty directory with -c")
        elif not code_dir.is_dir():
            raise ArchiveError(f"the code directory {code_dir} does not exist",
                               "the archive has no code (saved without -s): give the directory holding the "
                               "trial code with -c")
        store_size = next(i.file_size for i, n in zip(infos, names, strict=True) if n == STORE_MEMBER)
        exp_bytes = sum(i.file_size for i, n in zip(infos, names, strict=True) if n.startswith(EXP_PREFIX)
                        and n[len(EXP_PREFIX):].rstrip("/") not in SKIPPED)
        code_bytes = sum(i.file_size for i, n in zip(infos, names, strict=True) if n.startswith(CODE_PREFIX))
        # the store is extracted, then copied (its paths rewritten): twice its size, and the rest
        _check_room({root: 2 * store_size + exp_bytes, **({code_dir: code_bytes} if has_code else {})})
        root.mkdir(parents=True, exist_ok=True)
        _clean_stale_stages(root, exp_id)
        stage = Path(tempfile.mkdtemp(prefix=f".{exp_id}.loading-", dir=root))
        lock = -1
        made_code = False
        try:
            lock = os.open(stage / LOCK_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            fcntl.flock(lock, fcntl.LOCK_EX)  # (held while this load lives: see _clean_stale_stages)
            new_exp = stage / "experiment"
            new_exp.mkdir(mode=0o700)
            raw_store = stage / "archive.sqlite"
            for info, name in zip(infos, names, strict=True):
                if name == STORE_MEMBER:
                    _extract(zf, info, stage, "archive.sqlite")
                elif name.startswith(EXP_PREFIX) and name != EXP_PREFIX:
                    rel = name[len(EXP_PREFIX):]
                    if rel.rstrip("/") in SKIPPED:
                        continue
                    _extract(zf, info, new_exp, rel)
            code_count = 0
            if has_code:
                made_code = not code_dir.exists()
                code_dir.mkdir(parents=True, exist_ok=True)
                for info, name in zip(infos, names, strict=True):
                    if name.startswith(CODE_PREFIX) and name != CODE_PREFIX:
                        _extract(zf, info, code_dir, name[len(CODE_PREFIX):])
                        code_count += not info.is_dir()
            old_exp = str(manifest.get("experimentDir") or "")
            old_code = str(manifest.get("codeDir") or "")
            path_fn = _rewriter([(old_exp, str(exp_dir)), (old_code, str(code_dir))])
            space_holder: dict[str, Any] = {}

            def rewrite_config(config: dict[str, Any]) -> dict[str, Any]:
                out: dict[str, Any] = _walk_json(config, path_fn, frozenset({"search_space"}))
                out["experiment_working_directory"] = str(root)
                out["trial_code_directory"] = str(code_dir)
                space_holder["space"] = out.get("search_space")
                ssf = out.get("search_space_file")
                if search_space_path is not None:
                    out["search_space_file"] = str(Path(os.path.abspath(search_space_path.expanduser())))
                elif isinstance(ssf, str) and not Path(ssf).is_file():
                    out["search_space_file"] = None  # a file of the old machine: the space is stored inline
                return out

            changed = _copy_store(raw_store, new_exp / STORE_NAME, rewrite_config, path_fn)
            raw_store.unlink()
            if search_space_path is not None:
                target = Path(os.path.abspath(search_space_path.expanduser()))
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(json.dumps(space_holder.get("space") or {}, indent=2))
            with contextlib.ExitStack() as owned:
                # --force: replace what was there, holding its manager lock, so that no manager starts on it
                # meanwhile (one that runs it now fails the load with its pid, as a second manager would)
                for old in {Path(d).resolve() for d in (existing.dir if existing else None, exp_dir) if d}:
                    if old.is_dir():
                        owned.enter_context(ManagerLock.acquire(old, exp_id, "load"))
                if existing is not None or exp_dir.exists():
                    if existing is not None:
                        shutil.rmtree(existing.dir, ignore_errors=True)
                        registry.remove(exp_id)
                    shutil.rmtree(exp_dir, ignore_errors=True)
                os.chmod(new_exp, 0o700)
                new_exp.rename(exp_dir)
        except BaseException:
            if made_code:
                shutil.rmtree(code_dir, ignore_errors=True)
            raise
        finally:
            shutil.rmtree(stage, ignore_errors=True)
            if lock >= 0:
                os.close(lock)
    cfg = _stored_config(exp_dir / STORE_NAME)
    platform = (cfg.get("training_service") or {}).get("platform", "local") if isinstance(
        cfg.get("training_service"), dict) else "hybrid"
    with _os_errors(f"registering experiment {exp_id}"):
        registry.add(Entry(exp_id, str(exp_dir), cfg.get("experiment_name"), str(platform), time.time()))
    return LoadResult(exp_id, exp_dir, code_dir, code_count, changed)


def _refuse_live(exp_dir: str, exp_id: str) -> None:
    from nnix.home import busy_error, manager_alive, read_lock_holder, read_state

    holder = read_lock_holder(Path(exp_dir))
    if holder is not None:
        raise busy_error(exp_id, holder)

    try:
        state = read_state(Path(exp_dir), summary=True)
    except NnixError:
        return
    if manager_alive(state):
        raise ArchiveError(f"experiment {exp_id} has a live manager (pid {state.manager_pid})",
                           f"stop it first: nnix stop {exp_id}")
