from __future__ import annotations

from pathlib import Path

from nnix.store.base import Store
from nnix.store.memory import MemoryStore
from nnix.testing.stores import StoreContract


class TestMemoryStore(StoreContract):
    def make_store(self, tmp_path: Path) -> Store:
        return MemoryStore()
