"""Why the last manager of an experiment stopped: ``<experiment>/manager.error``, a file prepared at start so
that even a full disk lets the manager write its reason there. The manager writes and clears it; readers
(:func:`nnix.home.read_state`, the CLI, the Python APIs) show it as the experiment's message.

Clearing keeps the reason as a past one (the file holds the latest few, oldest dropped first): the experiment's
``errors`` (NNI's check-status, the web UI) list every time a manager stopped for it, e.g. each of two full disks,
after a resume that ran to DONE too. The file never grows: every write is one in-place write of its size."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

from nnix.core.state import ExperimentState

ERROR_FILE = "manager.error"
ERROR_FILE_SIZE = 4096  # written once when a manager starts, overwritten in place (no new block needed)
MAX_MESSAGE = 1200  # characters of a message (and of a hint) kept: the latest reason always fits the file


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


def _encode(current: dict[str, Any] | None, past: list[dict[str, Any]]) -> bytes:
    """The file's content: the current reason (if any) and as many past ones as fit, newest kept."""
    past = list(past)
    while True:
        record: dict[str, Any] = dict(current or {})
        if past:
            record["past"] = past
        data = json.dumps(record).encode() + b"\n"
        if len(data) <= ERROR_FILE_SIZE or not past:
            return data[:ERROR_FILE_SIZE]
        past = past[1:]


def _write(exp_dir: Path, data: bytes, create: bool) -> bool:
    try:
        fd = os.open(exp_dir / ERROR_FILE, os.O_WRONLY | (os.O_CREAT if create else 0), 0o600)
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


def _read(exp_dir: Path) -> dict[str, Any] | None:
    """The file's record as written (``message``... and ``past``), or None for none."""
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
    return data if isinstance(data, dict) else None


def _past(data: dict[str, Any] | None) -> list[dict[str, Any]]:
    past = (data or {}).get("past")
    return [p for p in past if isinstance(p, dict) and isinstance(p.get("message"), str)] \
        if isinstance(past, list) else []


def write_manager_error(exp_dir: Path, message: str, hint: str | None = None, pid: int | None = None) -> bool:
    """Record why the manager stopped, in place (no truncation, no new file when it was prepared), the past
    reasons kept. Returns False when even that failed."""
    record = {"message": message[:MAX_MESSAGE], "hint": (hint or "")[:MAX_MESSAGE], "pid": pid or os.getpid(),
              "ts": time.time()}
    return _write(exp_dir, _encode(record, _past(_read(exp_dir))), create=True)


def clear_manager_error(exp_dir: Path, state: ExperimentState | None = None) -> None:
    """A manager that recorded its start has space again: the previous one's reason is no longer the current
    one; it is kept as a past reason (see the module's docstring), and every past reason is among ``state``'s
    errors (the running manager's: what its REST API shows)."""
    data = _read(exp_dir)
    current = read_manager_error(exp_dir)
    past = _past(data)
    if current is not None:
        past.append({k: current.get(k) for k in ("message", "hint", "ts")})
        _write(exp_dir, _encode(None, past), create=False)
    if state is not None:
        _apply_past(state, past)


def read_manager_error(exp_dir: Path) -> dict[str, Any] | None:
    """The reason the last manager left (``message``, ``hint``, ``pid``, ``ts``), or None."""
    data = _read(exp_dir)
    if data is None or not isinstance(data.get("message"), str):
        return None
    return {k: v for k, v in data.items() if k != "past"}


def past_manager_errors(exp_dir: Path) -> list[dict[str, Any]]:
    """The reasons earlier managers left that a later one cleared (``message``, ``hint``, ``ts``), oldest first."""
    return _past(_read(exp_dir))


def manager_error_text(error: dict[str, Any]) -> str:
    text = f"the manager stopped: {error['message']}"
    return text + (f" (hint: {error['hint']})" if error.get("hint") else "")


def _past_text(error: dict[str, Any]) -> str:
    ts = error.get("ts")
    when = ""
    if isinstance(ts, (int, float)):
        with contextlib.suppress(OverflowError, OSError, ValueError):
            when = f" at {datetime.fromtimestamp(ts).isoformat(sep=' ', timespec='seconds')}"
    return f"the manager stopped{when}: {error['message']} (resumed since)"


def _apply_past(state: ExperimentState, past: list[dict[str, Any]]) -> None:
    """Each past reason among ``state.errors`` once (two alike twice: each time counts), where the state does not
    hold it already (a manager's snapshot of its state holds those it was started with)."""
    have = Counter(state.errors)
    for error in past:
        text = _past_text(error)
        if have[text]:
            have[text] -= 1
        else:
            state.errors.append(text)


def apply_manager_error(state: ExperimentState, exp_dir: Path) -> None:
    """The reasons in ``manager.error`` as the state's: each past one among its errors, the current one (if
    any) its message and an error too."""
    _apply_past(state, past_manager_errors(exp_dir))
    error = read_manager_error(exp_dir)
    if error is None:
        return
    text = manager_error_text(error)
    state.message = text
    if text not in state.errors:
        state.errors.append(text)
