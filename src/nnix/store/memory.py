"""An in-memory store, for tests and throw-away experiments."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence

from nnix.model.events import Event
from nnix.store.base import Sink, Snapshot, Stored


class MemoryStore:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._events: list[Stored] = []
        self._clock = clock
        self._snapshot: Snapshot | None = None

    def append(self, events: Sequence[Event]) -> list[Stored]:
        now = self._clock()
        out = [Stored(len(self._events) + i + 1, now, e) for i, e in enumerate(events)]
        self._events.extend(out)
        return out

    def read(self, since: int = 0, kinds: Collection[str] | None = None) -> list[Stored]:
        return [s for s in self._events[since:] if kinds is None or s.event.kind in kinds]

    def replay(self, sink: Sink, since: int = 0) -> None:
        for s in self._events[since:]:
            sink.apply(s)

    def read_trial(self, trial_id: str, kinds: Collection[str]) -> list[Stored]:
        return [s for s in self._events if s.event.kind in kinds and s.event.trial_ref == trial_id]

    def write_snapshot(self, snapshot: Snapshot) -> None:
        if not 0 < snapshot.seq <= len(self._events):
            raise ValueError(f"no event {snapshot.seq} to take a snapshot at")
        self._snapshot = snapshot

    def read_snapshot(self) -> Snapshot | None:
        return self._snapshot

    def snapshot_writer(self) -> MemoryStore:
        return self  # (one assignment: safe from another thread)

    def close(self) -> None:
        pass
