"""Ctrl-C held back over the steps that must not be cut in two.

Python raises ``KeyboardInterrupt`` between any two bytecodes of the main thread. Inside
``subprocess.Popen`` (after the fork, before the object is returned) or between the start of a manager
daemon and the moment its pid is known, that leaves a process nobody can stop: a manager that runs its
trials after its launcher has given up (and, in the Python API, deleted the experiment's directory).
:func:`sigint_held` turns a Ctrl-C that arrives during such a step into one raised right after it, when
the caller can clean up what it started.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


@contextlib.contextmanager
def sigint_held() -> Iterator[None]:
    """Within the block, a SIGINT is recorded instead of raised; it is raised as ``KeyboardInterrupt`` when
    the block ends (unless the block raises: its exception goes on). Only where Python's own Ctrl-C handler
    is in place, on the main thread: a program's own SIGINT handler (or an ignored SIGINT) is left alone.
    Nested blocks hold with the outermost one."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return
    received: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if received:
        raise KeyboardInterrupt
