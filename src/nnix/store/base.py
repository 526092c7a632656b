"""The store protocol: two methods and one invariant.

Invariant: ``append`` returns only after the events are durable against a crash of this process
(not necessarily of the machine), and ``read(since)`` returns every event with ``seq > since`` in
append order. Sequence numbers are positive, strictly increasing and never reused. Several
processes may append to one store (the CLI writes, e.g., STOPPED for a manager that died).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from nnix.model.events import Event


@dataclass(frozen=True)
class Stored:
    seq: int
    ts: float
    event: Event


class Store(Protocol):
    def append(self, events: Sequence[Event]) -> list[Stored]:
        """Append ``events`` atomically (all or none); return them with their seq and timestamp."""
        ...

    def read(self, since: int = 0, kinds: Collection[str] | None = None) -> list[Stored]:
        """Every stored event with ``seq > since`` (only of ``kinds``, if given), oldest first."""
        ...

    def close(self) -> None: ...
