"""Test doubles for nnix's injectable dependencies (fake GPU inventories, clocks, ...).

Imported only by tests and by users writing tests; nothing here touches real hardware.
"""

from nnix.testing.waiting import wait_until, wait_until_async

__all__ = ["wait_until", "wait_until_async"]
