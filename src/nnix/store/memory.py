"""An in-memory store, for tests and throw-away experiments."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence

from nnix.model.events import Event
from nnix.store.base import Stored


class MemoryStore:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._events: list[Stored] = []
        self._clock = clock

    def append(self, events: Sequence[Event]) -> list[Stored]:
        now = self._clock()
        out = [Stored(len(self._events) + i + 1, now, e) for i, e in enumerate(events)]
        self._events.extend(out)
        return out

    def read(self, since: int = 0, kinds: Collection[str] | None = None) -> list[Stored]:
        return [s for s in self._events[since:] if kinds is None or s.event.kind in kinds]

    def close(self) -> None:
        pass
