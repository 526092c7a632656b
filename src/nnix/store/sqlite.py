"""The embedded default store: one SQLite file per experiment, WAL mode, append-only.

``synchronous=NORMAL`` in WAL mode makes a committed append durable against a crash of any
process (kill -9 included); a power loss may drop the last few commits. Set ``durable=True`` to
fsync every commit (``synchronous=FULL``).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nnix.core.events import Event, decode, encode
from nnix.errors import StoreError
from nnix.store.base import Stored

if TYPE_CHECKING:
    from nnix.core.state import ExperimentState

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


class SqliteStore:
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
        if not create and not self.path.exists():
            raise StoreError(f"no experiment store at {self.path}", "check the experiment id and directory")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            self._db.executescript(SCHEMA)
        except sqlite3.Error as e:
            raise StoreError(f"cannot open experiment store {self.path}: {e}") from e

    def append(self, events: Sequence[Event]) -> list[Stored]:
        if not events:
            return []
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
            raise StoreError(f"cannot write to experiment store {self.path}: {e}") from e
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
            raise StoreError(f"cannot read experiment store {self.path}: {e}") from e
        return out

    def replay(self, state: ExperimentState) -> None:
        """Fold every event after ``state.last_seq`` into ``state``, streaming; metric rows take a
        fast path that skips building event objects (a 1M-metric log folds in seconds)."""
        try:
            cur = self._db.execute(
                "SELECT seq, ts, kind, body FROM events WHERE seq > ? ORDER BY seq", (state.last_seq,)
            )
            loads = json.loads
            while rows := cur.fetchmany(4096):
                for seq, ts, kind, body in rows:
                    if kind == "MetricReported" and body[0] == "[":
                        state.apply_metric_row(seq, ts, loads(body))
                    else:
                        state.apply(Stored(seq, ts, decode(kind, body)))
        except sqlite3.Error as e:
            raise StoreError(f"cannot read experiment store {self.path}: {e}") from e

    def count(self, kind: str) -> int:
        """How many events of ``kind`` the log holds (a fast query for listings)."""
        try:
            row = self._db.execute("SELECT COUNT(*) FROM events WHERE kind = ?", (kind,)).fetchone()
        except sqlite3.Error as e:
            raise StoreError(f"cannot read experiment store {self.path}: {e}") from e
        return int(row[0])

    def close(self) -> None:
        self._db.close()
