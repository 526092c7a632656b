"""Why the last manager of an experiment stopped: ``<experiment>/manager.error``, a file prepared at start so
that even a full disk lets the manager write its reason there. The manager writes and clears it; readers
(:func:`nnix.home.read_state`, the CLI, the Python APIs) show it as the experiment's message."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from nnix.core.state import ExperimentState

ERROR_FILE = "manager.error"
ERROR_FILE_SIZE = 4096  # written once when a manager starts, overwritten in place (no new block needed)


def prepare_manager_error(exp_dir: Path) -> None:
    """Make sure ``<exp>/manager.error`` exists with its blocks written (NUL bytes: no error), so that a
    manager can still write its reason there when the disk is full. An existing reason is kept."""
    path = exp_dir / ERROR_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    except OSError:
        return
    try:
        size = os.fstat(fd).st_size
        if size < ERROR_FILE_SIZE:
            os.pwrite(fd, b"\0" * (ERROR_FILE_SIZE - size), size)
            os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_manager_error(exp_dir: Path, message: str, hint: str | None = None, pid: int | None = None) -> bool:
    """Record why the manager stopped, in place (no truncation, no new file when it was prepared).
    Returns False when even that failed."""
    record = {"message": message, "hint": hint or "", "pid": pid or os.getpid(), "ts": time.time()}
    data = json.dumps(record).encode()[: ERROR_FILE_SIZE - 1] + b"\n"
    try:
        fd = os.open(exp_dir / ERROR_FILE, os.O_WRONLY | os.O_CREAT, 0o600)
    except OSError:
        return False
    try:
        os.pwrite(fd, data.ljust(ERROR_FILE_SIZE, b"\0"), 0)
        with contextlib.suppress(OSError):
            os.fsync(fd)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def clear_manager_error(exp_dir: Path) -> None:
    """A manager that recorded its start has space again: forget the previous one's reason."""
    path = exp_dir / ERROR_FILE
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return
    try:
        if os.pread(fd, 1, 0) not in (b"", b"\0"):
            os.pwrite(fd, b"\0" * ERROR_FILE_SIZE, 0)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_manager_error(exp_dir: Path) -> dict[str, Any] | None:
    """The reason the last manager left (``message``, ``hint``, ``pid``, ``ts``), or None."""
    try:
        with open(exp_dir / ERROR_FILE, "rb") as f:
            raw = f.read(ERROR_FILE_SIZE).split(b"\0", 1)[0].strip()
    except OSError:
        return None
    if not raw:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return {"message": raw.decode(errors="replace")[:500], "hint": "", "pid": None, "ts": None}
    if not isinstance(data, dict) or not isinstance(data.get("message"), str):
        return None
    return data


def manager_error_text(error: dict[str, Any]) -> str:
    text = f"the manager stopped: {error['message']}"
    return text + (f" (hint: {error['hint']})" if error.get("hint") else "")


def apply_manager_error(state: ExperimentState, exp_dir: Path) -> None:
    error = read_manager_error(exp_dir)
    if error is None:
        return
    text = manager_error_text(error)
    state.message = text
    if text not in state.errors:
        state.errors.append(text)
