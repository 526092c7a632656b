"""The store protocol: an append-only event log, and one invariant.

Invariant: ``append`` returns only after the events are durable against a crash of this process
(not necessarily of the machine), and ``read(since)`` returns every event with ``seq > since`` in
append order. Sequence numbers are positive, strictly increasing and never reused. Several
processes may append to one store (the CLI writes, e.g., STOPPED for a manager that died).

Besides the log a store keeps at most one *snapshot*: opaque bytes that a reader folded from the log up
to some ``seq``. The log stays the source of truth: ``read_snapshot`` hands a snapshot back only while
its checksum and the event it was taken at still match, and a reader rebuilds from the log otherwise.
A snapshot may have *parts* besides its body (big sections a reader seldom needs whole): a store may hand
them back unread, each read a piece at a time when sliced and checked then (:class:`SnapshotDamaged`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from nnix.model.events import Event


@dataclass(frozen=True)
class Stored:
    seq: int
    ts: float
    event: Event


class SnapshotDamaged(ValueError):
    """A part of a snapshot that does not match its checksum, or is gone, found when that piece was read."""


class Part(Protocol):
    """A part of a snapshot: its size, and its bytes by slice (``part[a:b]``, which may raise
    :class:`SnapshotDamaged`). ``bytes`` is one; a store may hand back one read on demand."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: slice, /) -> bytes: ...


@dataclass(frozen=True)
class Snapshot:
    """State folded from the log up to ``seq`` (inclusive), in a reader-defined ``version`` of format:
    ``body`` (checked whole when read) and ``parts`` (checked a piece at a time when read, where the store
    hands them back unread)."""

    version: int
    seq: int
    body: bytes
    parts: tuple[Part, ...] = ()


class Sink(Protocol):
    """What :meth:`Store.replay` folds events into (an ``ExperimentState``)."""

    def apply(self, stored: Stored) -> None: ...

    def apply_metric_row(self, seq: int, ts: float, row: list[Any]) -> None:
        """A MetricReported event stored as a metric row (:func:`nnix.model.events.metric_row`)."""
        ...


class Store(Protocol):
    def append(self, events: Sequence[Event]) -> list[Stored]:
        """Append ``events`` atomically (all or none); return them with their seq and timestamp."""
        ...

    def read(self, since: int = 0, kinds: Collection[str] | None = None) -> list[Stored]:
        """Every stored event with ``seq > since`` (only of ``kinds``, if given), oldest first."""
        ...

    def replay(self, sink: Sink, since: int = 0) -> None:
        """Fold every event with ``seq > since`` into ``sink``, oldest first, streaming (the same effect
        as ``sink.apply`` of each of ``read(since)``, by the store's fastest way)."""
        ...

    def read_trial(self, trial_id: str, kinds: Collection[str]) -> list[Stored]:
        """The events of ``kinds`` about one trial, oldest first (served by an index: no scan of the log)."""
        ...

    def write_snapshot(self, snapshot: Snapshot) -> None:
        """Replace the snapshot, atomically; ``snapshot.seq`` must be an event of the log."""
        ...

    def read_snapshot(self) -> Snapshot | None:
        """The snapshot, or None when there is none or it does not match (checksum, the event at its seq)."""
        ...

    def snapshot_writer(self) -> Store:
        """A store whose ``write_snapshot`` a thread may call while this one appends (this store itself where
        that is safe); closed by that thread when done."""
        ...

    def close(self) -> None: ...
