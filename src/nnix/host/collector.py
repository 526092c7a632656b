"""The cyclic garbage collector held over a CLI verb's start.

Importing nnix, pydantic and numpy makes hundreds of thousands of objects and almost no reference cycles, yet
each few hundred allocations start a collection that walks them: about a tenth of ``nnix create``'s way to its
first trial. :func:`hold` pauses the collector (reference counting still frees nearly everything);
:func:`release` resumes it, where the manager host has started its first trial (or serves, for a daemon), so
that a long-running manager collects as usual. Only a collector paused by :func:`hold` is resumed.
"""

from __future__ import annotations

import gc

_held = False


def hold() -> None:
    """Pause the collector until :func:`release` (a no-op where it is paused already)."""
    global _held
    if gc.isenabled():
        gc.disable()
        _held = True


def release() -> None:
    """Resume the collector if :func:`hold` paused it."""
    global _held
    if _held:
        _held = False
        gc.enable()
