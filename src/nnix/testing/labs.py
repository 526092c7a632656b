"""What the test labs (:mod:`nnix.testing.ray`, :mod:`nnix.testing.slurm`, :mod:`nnix.testing.sshhosts`) share:
a free loopback port, and a numbered slot for a lab's network, claimed by creating its bridge.

Processes are found and compared with :func:`nnix.services.rayhead.proc_start` and
:func:`nnix.services.rayhead.descendants` (start times detect a reused pid).
"""

from __future__ import annotations

import fcntl
import os
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

__all__ = ["SLOTS", "claim_bridge_slot", "free_port"]

SLOTS = 200  # labs of one kind that may run at once on a machine


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on at ``host`` right now (the kernel's choice)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _ip(*args: str, check: bool) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=60).stdout


def claim_bridge_slot(lock: Path, prefix: str, what: str, *, before: Callable[[], None] | None = None) -> int:
    """The first slot ``k`` (1 to :data:`SLOTS`) with no bridge ``<prefix><k>``, claimed by adding that bridge.

    Chosen while holding the lock file ``lock`` (``before`` runs first under it), so that labs starting at
    once take different slots; the lab deletes its bridge when it stops. Needs root and ``ip``.
    """
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if before is not None:
            before()
        taken = _ip("-o", "link", "show", "type", "bridge", check=False)
        for k in range(1, SLOTS + 1):
            if f"{prefix}{k}:" not in taken and f"{prefix}{k}@" not in taken:
                break
        else:
            raise RuntimeError(f"no free {what} lab slot ({SLOTS} labs running?)")
        _ip("link", "add", f"{prefix}{k}", "type", "bridge", check=True)
        return k
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
