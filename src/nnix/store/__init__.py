"""Stores: append-only event logs. State is always a fold over what a store returns. The names below are
imported on first use."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nnix.lazy import lazy_exports

if TYPE_CHECKING:
    from nnix.store.base import Store as Store
    from nnix.store.base import Stored as Stored
    from nnix.store.memory import MemoryStore as MemoryStore
    from nnix.store.sqlite import SqliteStore as SqliteStore

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "nnix.store.base": ("Store", "Stored"),
        "nnix.store.memory": ("MemoryStore",),
        "nnix.store.sqlite": ("SqliteStore",),
    },
)
