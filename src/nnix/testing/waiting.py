"""Waiting for a condition in tests: always with a deadline, failing with the name of what was awaited.

A test that waits for an event polls a condition; it never sleeps a fixed time and never polls without a
deadline (a hang then fails one test with a clear message instead of stalling the whole suite).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def _failure(what: str | None, cond: Callable[[], object], timeout: float,
             show: Callable[[], object] | None) -> AssertionError:
    if what is None:  # a named condition function names itself; a lambda is shown by the traceback
        name = getattr(cond, "__name__", "<lambda>")
        what = "the condition" if name == "<lambda>" else name
    detail = ""
    if show is not None:
        try:
            detail = f" (last seen: {show()!r})"
        except Exception as exc:  # the description must not hide the timeout
            detail = f" (could not describe the state: {exc!r})"
    return AssertionError(f"timed out after {timeout:g} s waiting for {what}{detail}")


def _poller(cond: Callable[[], T], timeout: float, what: str | None,
            show: Callable[[], object] | None) -> Callable[[], T | None]:
    """One look at ``cond`` per call: its value when truthy, None to look again later, and the AssertionError
    once ``timeout`` seconds have passed (``cond`` is always checked at the deadline)."""
    deadline = time.monotonic() + timeout

    def check() -> T | None:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise _failure(what, cond, timeout, show)
        return None

    return check


def wait_until(
    cond: Callable[[], T],
    timeout: float = 30.0,
    what: str | None = None,
    *,
    interval: float = 0.05,
    show: Callable[[], object] | None = None,
) -> T:
    """Call ``cond`` every ``interval`` seconds until it returns a truthy value, and return that value.

    Raises AssertionError naming ``what`` (by default the name of ``cond``), with ``show()``'s description of
    the state if given, once ``timeout`` seconds have passed; ``cond`` is always checked at the deadline.
    """
    check = _poller(cond, timeout, what, show)
    while (value := check()) is None:
        time.sleep(interval)
    return value


async def wait_until_async(
    cond: Callable[[], T],
    timeout: float = 30.0,
    what: str | None = None,
    *,
    interval: float = 0.02,
    show: Callable[[], object] | None = None,
) -> T:
    """:func:`wait_until` inside an event loop: sleeps with ``asyncio.sleep`` so the loop keeps running."""
    check = _poller(cond, timeout, what, show)
    while (value := check()) is None:
        await asyncio.sleep(interval)
    return value


__all__ = ["wait_until", "wait_until_async"]
