"""The embedded default store: one SQLite file per experiment, WAL mode, append-only.

``synchronous=NORMAL`` in WAL mode makes a committed append durable against a crash of any
process (kill -9 included); a power loss may drop the last few commits. Set ``durable=True`` to
fsync every commit (``synchronous=FULL``).
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import threading
import time
import weakref
import zlib
from collections import deque
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from nnix.errors import StoreCorruptError, StoreError, StoreFullError
from nnix.model.events import Event, decode, encode
from nnix.store.base import Part, Sink, Snapshot, SnapshotDamaged, Stored

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    trial_id TEXT,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_trial ON events(trial_id);
CREATE INDEX IF NOT EXISTS events_kind ON events(kind);
"""

# One row at most: the snapshot (see nnix.store.base), made in the first write of one (a store from before
# snapshots simply has none). ``anchor`` fingerprints the event at ``seq`` and ``checksum`` the body: a
# snapshot whose log was changed or replaced, or whose bytes were damaged, is not handed back.
SNAPSHOT_SCHEMA = """
CREATE TABLE IF NOT EXISTS snapshot (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    anchor INTEGER NOT NULL,
    checksum INTEGER NOT NULL,
    body BLOB NOT NULL
)
"""


# The snapshot's bytes, written a chunk at a time (each its own short transaction: a manager appending on another
# connection waits for one chunk at most, not for 100 MB), under a new generation number; the snapshot row then
# names that generation (its body is CHUNKED, the generation and the chunk count) in the transaction that
# checks the anchor, and the other generations' chunks are deleted. A write cut short leaves chunks that no
# row names: never read, deleted by the next write.
CHUNK_SCHEMA = """
CREATE TABLE IF NOT EXISTS snapshot_chunk (
    gen INTEGER NOT NULL,
    n INTEGER NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (gen, n)
)
"""
CHUNKED = b"\0nnix snapshot chunks\0"
SNAPSHOT_CHUNK = 4 << 20  # bytes
# A snapshot with parts (see nnix.store.base): its row's body is PARTS then a JSON descriptor: the generation,
# the body's chunk count, and per part its first chunk number, size and the CRC-32 of each of its chunks
# (PART_CHUNK bytes each, after the body's in the same generation). The row's checksum covers the body and the
# descriptor; a part is handed back unread, and each chunk is checked against its CRC when it is first read.
PARTS = b"\0nnix snapshot parts\0"
PART_CHUNK = 256 << 10  # bytes
PART_CACHE = 8  # chunks a part keeps once read (a trial at a time reads the same chunk many times)


def _anchor(ts: float, kind: str, body: str) -> int:
    return zlib.crc32(f"{ts!r}\0{kind}\0{body}".encode())


HEADER = b"SQLite format 3\x00"
CORRUPT_HINT = (
    "nnix never rewrites an experiment's store: restore {path} from a backup, or create a new experiment and "
    "give it the old results with `nnix experiment import` (from an `nnix experiment export` file)"
)
FULL_HINT = (
    "free space on that file system: the trials keep running, and `nnix resume <id>` re-attaches them "
    "and records what they reported meanwhile"
)
MIN_FREE_BYTES = 1024 * 1024  # an append refuses to write where less is free (the disk is full for the trials)
SPACE_CHECK_INTERVAL = 1.0  # seconds between two looks at the free space, per store (a statvfs)
_GERUNDS = {"write to": "writing to", "open": "opening", "read": "reading"}


def free_bytes(path: Path) -> int | None:
    """The bytes an unprivileged writer may still use on the file system holding ``path`` (None: unknown)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _amount(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB" if n >= 1024 * 1024 else f"{n:,} bytes"


def _wal_has_frames(path: Path) -> bool:
    try:
        return Path(f"{path}-wal").stat().st_size > 0
    except OSError:
        return False


# Stores this process holds open (real path -> count). SQLite's locks are POSIX advisory locks, which the
# kernel drops for the whole process when *any* descriptor of the file is closed: reading the header of a
# store that a connection of this process holds (a manager listing experiments, its own among them) would
# silently take that connection's locks away, and another process could then corrupt it. So a store held
# open here is not read by hand: it was checked when it was opened.
_held: dict[str, int] = {}
_held_lock = threading.Lock()


def _count(counts: dict[Any, int], key: Any, delta: int) -> None:
    with _held_lock:
        n = counts.get(key, 0) + delta
        if n > 0:
            counts[key] = n
        else:
            counts.pop(key, None)


def _hold(path: Path, delta: int) -> None:
    _count(_held, os.path.realpath(path), delta)


def _is_held(path: Path) -> bool:
    with _held_lock:
        return os.path.realpath(path) in _held


# Snapshot generations whose parts this process still reads ((real path, gen) -> count): a snapshot written
# meanwhile keeps their chunks (the next write after they are let go deletes them).
_pinned: dict[tuple[str, int], int] = {}


# Generations let go by a part's finalizer, counted down by the next _pin/_pinned_gens: a finalizer runs wherever
# the garbage collector does, possibly in a thread holding _held_lock (a snapshot write listing the pinned ones):
# taking the lock there deadlocked a manager. A deque's append takes no lock.
_unpinned: deque[tuple[str, int]] = deque()


def _settle_unpinned() -> None:
    """Count down what finalizers let go (the caller holds _held_lock)."""
    while _unpinned:
        key = _unpinned.popleft()
        n = _pinned.get(key, 0) - 1
        if n > 0:
            _pinned[key] = n
        else:
            _pinned.pop(key, None)


def _pin(key: tuple[str, int], delta: int) -> None:
    with _held_lock:
        _settle_unpinned()
    _count(_pinned, key, delta)


def _pinned_gens(path: Path) -> set[int]:
    """The snapshot generations of the store at ``path`` that parts of this process still read."""
    real = os.path.realpath(path)
    with _held_lock:
        _settle_unpinned()
        return {g for p, g in list(_pinned) if p == real}


class _Mismatch(Exception):
    """A snapshot row or its chunks that do not match (the snapshot is not handed back)."""


def _close(box: list[sqlite3.Connection], key: tuple[str, int]) -> None:
    for db in box:
        db.close()
    box.clear()
    _unpinned.append(key)  # (no lock here: see _unpinned)


class _Part:
    """A part of the snapshot (see PARTS), read from the store when sliced: only the chunks the slice covers,
    each checked against its CRC (:class:`SnapshotDamaged` where one does not match or is gone), on a
    connection of its own (the store that read the snapshot may be closed by then)."""

    def __init__(self, path: Path, gen: int, first: int, size: int, chunk: int, crcs: list[int]) -> None:
        if chunk <= 0 or size < 0 or len(crcs) != -(-size // chunk):
            raise ValueError(f"snapshot part of {size} bytes with {len(crcs)} chunks of {chunk}")
        self.path, self.gen, self.first, self.size, self.chunk, self.crcs = path, gen, first, size, chunk, crcs
        self._cache: dict[int, bytes] = {}
        self._lock = threading.Lock()
        self._box: list[sqlite3.Connection] = []
        key = (os.path.realpath(path), gen)
        _pin(key, +1)
        weakref.finalize(self, _close, self._box, key)

    def __len__(self) -> int:
        return self.size

    def __eq__(self, other: object) -> bool:  # (the same chunks of the same store: the same bytes)
        return isinstance(other, _Part) and (self.path, self.gen, self.first, self.size, self.chunk, self.crcs) == (
            other.path, other.gen, other.first, other.size, other.chunk, other.crcs)

    __hash__ = None  # type: ignore[assignment]

    def __getitem__(self, index: slice, /) -> bytes:
        start, stop, _ = index.indices(self.size)
        if start >= stop:
            return b""
        a, b = start // self.chunk, (stop - 1) // self.chunk
        pieces = self._read(a, b)
        off = a * self.chunk
        if len(pieces) == 1:
            return pieces[0][start - off:stop - off]
        return b"".join(pieces)[start - off:stop - off]

    def _read(self, a: int, b: int) -> list[bytes]:
        with self._lock:
            cache = self._cache
            missing = [k for k in range(a, b + 1) if k not in cache]
            got: dict[int, bytes] = {}
            if missing:
                lo, hi = missing[0], missing[-1]
                try:
                    if not self._box:
                        self._box.append(sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None,
                                                         check_same_thread=False))
                    rows = self._box[0].execute(
                        "SELECT n, body FROM snapshot_chunk WHERE gen = ? AND n BETWEEN ? AND ?",
                        (self.gen, self.first + lo, self.first + hi)).fetchall()
                except sqlite3.Error as e:
                    raise SnapshotDamaged(f"snapshot chunks of {self.path} unreadable: {e}") from e
                got = {int(n) - self.first: bytes(body) for n, body in rows}
                for k in missing:
                    data = got.get(k)
                    if data is None or zlib.crc32(data) != self.crcs[k] \
                            or len(data) != min(self.chunk, self.size - k * self.chunk):
                        raise SnapshotDamaged(f"snapshot chunk {self.first + k} of generation {self.gen} in "
                                              f"{self.path} is {'gone' if data is None else 'damaged'}")
            out = [cache[k] if k in cache else got[k] for k in range(a, b + 1)]  # (before the cache lets any go)
            if missing and len(missing) <= PART_CACHE // 2:  # (a long read is not kept)
                for k in missing:
                    cache[k] = got[k]
                while len(cache) > PART_CACHE:
                    cache.pop(next(iter(cache)))
            return out


def check_store_file(path: Path) -> None:
    """Raise a clear :class:`StoreError` unless ``path`` exists and looks like an SQLite database that is
    whole: not empty, SQLite's header, and (when no write-ahead log holds newer pages) not shorter than
    its header says. Reads only: nothing is written to a file that fails. A store this process holds open
    is not read again (closing a descriptor would drop its connection's locks; see ``_held``)."""
    if _is_held(path):
        return
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(100)
    except FileNotFoundError as e:
        raise StoreError(f"no experiment store at {path}", "check the experiment id and directory") from e
    except OSError as e:
        raise StoreError(f"cannot read experiment store {path}: {e}", "check the file's owner and mode") from e
    hint = CORRUPT_HINT.format(path=path)
    if size == 0:
        raise StoreCorruptError(f"experiment store {path} is empty (0 bytes): it holds no experiment", hint)
    if len(head) < 100 or not head.startswith(HEADER):
        raise StoreCorruptError(f"experiment store {path} is not an SQLite database (corrupt or overwritten)", hint)
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        raise StoreCorruptError(f"experiment store {path} has a corrupt header (page size {page_size})", hint)
    pages = int.from_bytes(head[28:32], "big")
    header_size_valid = head[24:28] == head[92:96]  # SQLite: the page count is valid when these match
    if header_size_valid and pages and size < pages * page_size and not _wal_has_frames(path):
        raise StoreCorruptError(
            f"experiment store {path} is truncated: {size} bytes where its header says {pages * page_size}", hint
        )


def store_error(e: sqlite3.Error, path: Path, doing: str) -> StoreError:
    """The typed error for an SQLite failure: full disk, corrupt file, or anything else."""
    code = getattr(e, "sqlite_errorcode", 0) & 0xFF
    text = str(e)
    if code == sqlite3.SQLITE_FULL or "disk is full" in text:
        free = free_bytes(path.parent)
        room = "" if free is None else f"; {_amount(free)} free"
        return StoreFullError(
            f"the disk holding {path.parent} is full: {_GERUNDS.get(doing, doing)} {path} failed ({text}{room})",
            FULL_HINT)
    if code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB) or "malformed" in text or "not a database" in text:
        return StoreCorruptError(f"experiment store {path} is corrupt: {doing} failed ({text})",
                                 CORRUPT_HINT.format(path=path))
    return StoreError(f"cannot {doing} experiment store {path}: {text}")


class SqliteStore:
    """``create=True`` makes a fresh store when the file does not exist (mode 0600, its directory 0700);
    an existing file, whatever ``create`` says, is opened only if it is a valid nnix store: a schema is
    never written into a file that is already there (a 0-byte or corrupt file is a clear error)."""

    def __init__(
        self,
        path: Path | str,
        *,
        create: bool = True,
        durable: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path)
        self._clock = clock
        fresh = False
        if create and not self.path.exists():
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
                fresh = True
            except FileExistsError:
                pass  # created meanwhile by another process: check it like any existing file
            except OSError as e:
                if e.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise StoreFullError(f"the disk holding {self.path.parent} is full: creating {self.path} failed",
                                         "free space on that file system and try again") from e
                raise StoreError(f"cannot create experiment store {self.path}: {e}") from e
        if not fresh:
            check_store_file(self.path)
        try:
            self._db = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            raise store_error(e, self.path, "open") from e
        try:
            if fresh:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.executescript(SCHEMA)
            else:
                found = self._db.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'events'"
                ).fetchone()
                if found is None:
                    raise StoreCorruptError(f"{self.path} is an SQLite database but not an nnix experiment store "
                                            "(no events table)", CORRUPT_HINT.format(path=self.path))
                self._db.execute("SELECT seq, ts, kind, trial_id, body FROM events LIMIT 0")
                self._db.execute("PRAGMA journal_mode=WAL")  # already WAL: a no-op
            self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
        except (sqlite3.Error, StoreError) as e:
            self._db.close()
            if fresh:  # never leave a half-made store behind
                for p in (self.path, Path(f"{self.path}-wal"), Path(f"{self.path}-shm")):
                    p.unlink(missing_ok=True)
            if isinstance(e, StoreError):
                raise
            raise store_error(e, self.path, "open") from e
        _hold(self.path, +1)
        self._held = True
        self._space_at = -SPACE_CHECK_INTERVAL  # (time.monotonic of the last look at the free space)

    def _check_space(self) -> None:
        """Refuse to append where the disk is (all but) full, as SQLite would once it needs a new page: a store
        whose WAL has room left takes writes long after the trials' and the log's writes fail for lack of space
        (they failed "with nothing on stderr", the experiment went on to DONE and nothing said why). A look per
        :data:`SPACE_CHECK_INTERVAL` at most."""
        now = time.monotonic()
        if now - self._space_at < SPACE_CHECK_INTERVAL:
            return
        self._space_at = now
        free = free_bytes(self.path.parent)
        if free is not None and free < MIN_FREE_BYTES:
            raise StoreFullError(f"the disk holding {self.path.parent} is full: {_amount(free)} free, so writing to "
                                 f"{self.path} stopped", FULL_HINT)

    def append(self, events: Sequence[Event]) -> list[Stored]:
        if not events:
            return []
        self._check_space()
        now = self._clock()
        rows = [(now, e.kind, e.trial_ref, encode(e)) for e in events]
        try:
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            out = []
            for row, event in zip(rows, events, strict=True):
                cur.execute("INSERT INTO events(ts, kind, trial_id, body) VALUES (?, ?, ?, ?)", row)
                seq = cur.lastrowid
                assert seq is not None
                out.append(Stored(seq, now, event))
            cur.execute("COMMIT")
        except sqlite3.Error as e:
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            raise store_error(e, self.path, "write to") from e
        return out

    def read(self, since: int = 0, kinds: Collection[str] | None = None) -> list[Stored]:
        query = "SELECT seq, ts, kind, body FROM events WHERE seq > ?"
        args: list[Any] = [since]
        if kinds is not None:
            query += f" AND kind IN ({','.join('?' * len(kinds))})"
            args.extend(kinds)
        try:
            cur = self._db.execute(query + " ORDER BY seq", args)
            out: list[Stored] = []
            while rows := cur.fetchmany(4096):  # decode in batches: never two copies of a big log
                out.extend(Stored(seq, ts, decode(kind, body)) for seq, ts, kind, body in rows)
        except sqlite3.Error as e:
            raise store_error(e, self.path, "read") from e
        return out

    def replay(self, sink: Sink, since: int = 0) -> None:
        """Streams the log; metric rows take a fast path that skips building event objects (a 1M-metric
        log folds in seconds)."""
        try:
            cur = self._db.execute("SELECT seq, ts, kind, body FROM events WHERE seq > ? ORDER BY seq", (since,))
            loads = json.loads
            while rows := cur.fetchmany(4096):
                for seq, ts, kind, body in rows:
                    if kind == "MetricReported" and body[0] == "[":
                        sink.apply_metric_row(seq, ts, loads(body))
                    else:
                        sink.apply(Stored(seq, ts, decode(kind, body)))
        except sqlite3.Error as e:
            raise store_error(e, self.path, "read") from e

    def read_trial(self, trial_id: str, kinds: Collection[str]) -> list[Stored]:
        query = (f"SELECT seq, ts, kind, body FROM events WHERE trial_id = ? AND kind IN ({','.join('?' * len(kinds))})"
                 " ORDER BY seq")
        try:
            rows = self._db.execute(query, (trial_id, *kinds)).fetchall()
        except sqlite3.Error as e:
            raise store_error(e, self.path, "read") from e
        return [Stored(seq, ts, decode(kind, body)) for seq, ts, kind, body in rows]

    def write_snapshot(self, snapshot: Snapshot) -> None:
        """In chunks (see CHUNK_SCHEMA; parts after the body, see PARTS), then the row that names them, in one
        transaction with the anchor."""
        db, body = self._db, memoryview(snapshot.body)
        try:
            def event_at() -> Any:
                at = db.execute("SELECT ts, kind, body FROM events WHERE seq = ?", (snapshot.seq,)).fetchone()
                if at is None:
                    raise StoreError(f"cannot take a snapshot of {self.path} at event {snapshot.seq}: no such event")
                return at

            event_at()
            db.execute(SNAPSHOT_SCHEMA)
            db.execute(CHUNK_SCHEMA)
            gen = int(db.execute("SELECT COALESCE(MAX(gen), 0) + 1 FROM snapshot_chunk").fetchone()[0])
            k = 0

            def put(data: memoryview, size: int) -> list[int]:
                nonlocal k
                crcs = []
                for at in range(0, len(data), size):  # (autocommit: one transaction each)
                    piece = data[at:at + size]
                    db.execute("INSERT INTO snapshot_chunk(gen, n, body) VALUES (?, ?, ?)", (gen, k, piece))
                    crcs.append(zlib.crc32(piece))
                    k += 1
                return crcs

            put(body, SNAPSHOT_CHUNK)
            n, descs, chunk = k, [], PART_CHUNK
            for part in snapshot.parts:
                first = k
                data = memoryview(part[0:len(part)])
                descs.append([first, len(data), put(data, chunk)])
            if snapshot.parts:
                row = PARTS + json.dumps({"gen": gen, "n": n, "chunk": chunk, "parts": descs},
                                         separators=(",", ":")).encode()
                checksum = zlib.crc32(body, zlib.crc32(row))
            else:
                row, checksum = CHUNKED + gen.to_bytes(8, "little") + n.to_bytes(8, "little"), zlib.crc32(body)
            cur = db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                cur.execute("INSERT OR REPLACE INTO snapshot(id, version, seq, anchor, checksum, body) "
                            "VALUES (1, ?, ?, ?, ?, ?)",
                            (snapshot.version, snapshot.seq, _anchor(*event_at()), checksum, row))
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            keep = _pinned_gens(self.path) | {gen}  # (a generation a part still reads is deleted by a later write)
            for old, j in db.execute("SELECT gen, n FROM snapshot_chunk").fetchall():
                if old not in keep:
                    db.execute("DELETE FROM snapshot_chunk WHERE gen = ? AND n = ?", (old, j))  # (one at a time too)
        except sqlite3.Error as e:
            raise store_error(e, self.path, "write to") from e

    def snapshot_writer(self) -> SqliteStore:
        """Another connection to this store, for a thread that writes a snapshot while this one appends."""
        return SqliteStore(self.path, create=False)

    def read_snapshot(self) -> Snapshot | None:
        parts: tuple[Part, ...] = ()
        try:
            if self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'snapshot'").fetchone() \
                    is None:
                return None
            row = self._db.execute("SELECT version, seq, anchor, checksum, body FROM snapshot WHERE id = 1").fetchone()
            if row is None:
                return None
            version, seq, anchor, checksum, body = row
            at = self._db.execute("SELECT ts, kind, body FROM events WHERE seq = ?", (seq,)).fetchone()
            if at is None or _anchor(*at) != anchor or not isinstance(body, bytes):
                return None
            if body.startswith(PARTS):
                try:
                    desc = json.loads(body[len(PARTS):])
                    gen, n, chunk = int(desc["gen"]), int(desc["n"]), int(desc["chunk"])
                    parts = tuple(_Part(self.path, gen, int(first), int(size), chunk, [int(c) for c in crcs])
                                  for first, size, crcs in desc["parts"])
                except (ValueError, TypeError, KeyError) as e:
                    raise _Mismatch from e
                seed = zlib.crc32(body)
                body = self._chunks(gen, n)
            elif body.startswith(CHUNKED) and len(body) == len(CHUNKED) + 16:
                gen = int.from_bytes(body[len(CHUNKED):-8], "little")
                seed, body = 0, self._chunks(gen, int.from_bytes(body[-8:], "little"))
            else:
                seed = 0
        except _Mismatch:
            return None
        except sqlite3.Error as e:
            raise store_error(e, self.path, "read") from e
        if zlib.crc32(body, seed) != checksum:
            return None
        return Snapshot(int(version), int(seq), body, parts)

    def _chunks(self, gen: int, n: int) -> bytes:
        """The first ``n`` chunks of generation ``gen``, joined (raises _Mismatch where one is missing)."""
        chunks = self._db.execute("SELECT n, body FROM snapshot_chunk WHERE gen = ? AND n < ? ORDER BY n",
                                  (gen, n)).fetchall()
        if [k for k, _ in chunks] != list(range(n)):
            raise _Mismatch
        return b"".join(c for _, c in chunks)

    def count(self, kind: str) -> int:
        """How many events of ``kind`` the log holds (a fast query for listings)."""
        try:
            row = self._db.execute("SELECT COUNT(*) FROM events WHERE kind = ?", (kind,)).fetchone()
        except sqlite3.Error as e:
            raise store_error(e, self.path, "read") from e
        return int(row[0])

    def close(self) -> None:
        self._db.close()
        if self._held:
            self._held = False
            _hold(self.path, -1)
