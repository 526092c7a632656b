"""Test doubles for nnix's injectable dependencies (fake GPU inventories, clocks, a scripted training service...).

Imported only by tests and by users writing tests; nothing here touches real hardware.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nnix.testing.waiting import wait_until, wait_until_async

if TYPE_CHECKING:
    from nnix.testing.fakeservice import FakeMachine, FakeService, Outcome

__all__ = ["FakeMachine", "FakeService", "Outcome", "wait_until", "wait_until_async"]


def __getattr__(name: str) -> Any:  # the fake service on first use: `import nnix.testing` stays light
    if name in ("FakeMachine", "FakeService", "Outcome"):
        from nnix.testing import fakeservice

        return getattr(fakeservice, name)
    raise AttributeError(f"module 'nnix.testing' has no attribute {name!r}")
