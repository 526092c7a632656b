"""Logs users read: the manager's ``log/manager.log`` (written by :mod:`nnix.host.logs`) and a trial's output files,
printed by ``nnix log manager`` / ``nnix log trial`` with ``--tail`` and ``--follow``."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

FOLLOW_POLL = 0.25


def tail_lines(path: Path, n: int) -> tuple[str, int]:
    """The last ``n`` lines of a file (read from its end: fast on big files) and the byte offset where the
    file ended when it was read."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        end = f.tell()
        block, data = 64 * 1024, b""
        pos = end
        while pos > 0 and data.count(b"\n") <= n:
            step = min(block, pos)
            pos -= step
            f.seek(pos)
            data = f.read(step) + data
    lines = data.splitlines(keepends=True)[-n:] if n > 0 else []
    return b"".join(lines).decode("utf-8", errors="replace"), end


def print_file(path: Path, tail: int | None, follow: bool, alive: Callable[[], bool],
               write: Callable[[str], None] | None = None) -> None:
    """Print ``path`` (its last ``tail`` lines, or all of it), then with ``follow`` what is appended to it until
    ``alive()`` is false (then what was left), or Ctrl-C. A file rotated or truncated meanwhile is read again
    from its start; a file that does not exist yet is waited for."""
    out = write or _write
    offset = 0
    if path.exists():
        if tail is not None:
            text, offset = tail_lines(path, tail)
        else:
            with open(path, "rb") as f:
                data = f.read()
            text, offset = data.decode("utf-8", errors="replace"), len(data)
        out(text)
    if not follow:
        return
    try:
        while True:
            running = alive()
            offset = _print_new(path, offset, out, whole=not running)
            if not running:
                return
            time.sleep(FOLLOW_POLL)
    except KeyboardInterrupt:
        return


def _print_new(path: Path, offset: int, out: Callable[[str], None], whole: bool = False) -> int:
    try:
        size = path.stat().st_size
    except OSError:
        return offset
    if size < offset:  # rotated or truncated: start again
        offset = 0
    if size == offset:
        return offset
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(size - offset)
    # whole lines only while the writer may be mid-line
    cut = len(data) if whole else data.rfind(b"\n") + 1
    if cut:
        out(data[:cut].decode("utf-8", errors="replace"))
    return offset + cut


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()
