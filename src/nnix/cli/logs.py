"""Logs users read: the manager's ``log/manager.log`` (written by :mod:`nnix.host.logs`) and a trial's output files,
printed by ``nnix log manager`` / ``nnix log trial`` with ``--tail`` and ``--follow``."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from nnix.agent.safeopen import NotRegularFile, open_regular
from nnix.errors import NnixError

FOLLOW_POLL = 0.25


def _open(path: Path) -> BinaryIO:
    """A log or trial output file, opened as every reader of a trial's files opens them (no blocking, no link,
    regular files only): a trial that made its ``trial.stderr`` a FIFO or a link to ``/dev/zero`` hung
    ``nnix log trial`` (a FIFO: for good)."""
    try:
        return os.fdopen(open_regular(path), "rb")
    except NotRegularFile as e:
        raise NnixError(f"{path} is {e.kind}, not a regular file: nnix does not read it",
                        "the trial replaced its output file; its REST and web UI views say the same") from None


def tail_lines(path: Path, n: int) -> tuple[str, int]:
    """The last ``n`` lines of a file (read from its end: fast on big files) and the byte offset where the
    file ended when it was read."""
    with _open(path) as f:
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
    if os.path.lexists(path):
        if tail is not None:
            text, offset = tail_lines(path, tail)
        else:
            with _open(path) as f:
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
        size = path.lstat().st_size  # (a link or a FIFO put there meanwhile is refused by _open below)
    except OSError:
        return offset
    if size < offset:  # rotated or truncated: start again
        offset = 0
    if size == offset:
        return offset
    with _open(path) as f:
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
