"""nnix.host.collector: the garbage collector held over a CLI verb's start, and resumed only where it held it."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from nnix.host import collector


@pytest.fixture(autouse=True)
def collector_as_before() -> Iterator[None]:
    was = gc.isenabled()
    yield
    collector.release()
    (gc.enable if was else gc.disable)()


def test_hold_pauses_the_collector_until_release() -> None:
    gc.enable()
    collector.hold()
    assert not gc.isenabled()
    collector.hold()  # (again: still one hold)
    collector.release()
    assert gc.isenabled()
    collector.release()  # nothing held: no change
    assert gc.isenabled()


def test_a_collector_paused_elsewhere_stays_paused() -> None:
    gc.disable()
    collector.hold()
    collector.release()
    assert not gc.isenabled()
