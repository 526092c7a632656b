"""Test doubles for nnix's injectable dependencies (fake GPU inventories, clocks, a scripted training service...).

Imported only by tests and by users writing tests; nothing here touches real hardware. The waiting helpers are
imported at once, the fake service on first use (`import nnix.testing` stays light).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nnix.lazy import lazy_exports
from nnix.testing.waiting import wait_until as wait_until
from nnix.testing.waiting import wait_until_async as wait_until_async

if TYPE_CHECKING:
    from nnix.testing.fakeservice import FakeMachine as FakeMachine
    from nnix.testing.fakeservice import FakeService as FakeService
    from nnix.testing.fakeservice import Outcome as Outcome

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "nnix.testing.fakeservice": ("FakeMachine", "FakeService", "Outcome"),
        "nnix.testing.waiting": ("wait_until", "wait_until_async"),
    },
)
