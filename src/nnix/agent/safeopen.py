"""Opening a file a trial wrote: never blocking, never through a link, regular files only.

A trial owns its output directory and its channel: it may replace ``metrics.jsonl``, ``trial.stderr`` or
``exitcode`` with a FIFO (an ``open()`` for reading then waits for a writer, forever: a manager blocked in it
answers nothing more), a symbolic link (to ``/dev/zero``, an endless read; to a FIFO, the same hang in disguise;
to a file of the user's that REST would then serve) or a directory. Every reader of a trial-written file (the
agent's metric reader, the exit code, the stderr tail sent with an exit, the output an agent streams, the
containment's token, the files REST serves, ``nnix log trial``) opens it with :func:`open_regular`:

* ``O_NOFOLLOW``: a symbolic link as the file's last component is refused (ELOOP), wherever it points;
* ``O_NONBLOCK``: opening a FIFO returns at once (nothing waits for a writer);
* then ``fstat`` of the descriptor (not of the path: no race with a swap): only a regular file is kept; a FIFO,
  a device, a socket or a directory is closed and refused. ``single_link`` also refuses a file with several
  hard links (a served file could otherwise be a link to a file from elsewhere).

A refusal is :class:`NotRegularFile` (an ``OSError``, so callers that already treat a missing or unreadable
file as "nothing there" stay safe), whose :attr:`~NotRegularFile.kind` says what the path is, for the warning
the trial gets. Stdlib only; reads are bounded by the callers (``read_at_most``, ``read_tail``).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

__all__ = ["NotRegularFile", "describe", "open_regular", "read_at_most", "read_tail"]

OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


class NotRegularFile(OSError):
    """A trial file that is not read: ``kind`` says what it is ("a FIFO", "a symbolic link", ...)."""

    def __init__(self, path: str | os.PathLike[str] | int, kind: str) -> None:
        self.kind = kind
        shown = os.fspath(path) if not isinstance(path, int) else f"descriptor {path}"
        super().__init__(errno.EINVAL, f"{os.path.basename(shown) or shown} is {kind}, not a regular file")
        self.filename = shown

    def __str__(self) -> str:
        return str(self.strerror)


def describe(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words ("a FIFO", "a directory", ...)."""
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file" if not stat.S_ISREG(mode) else "a regular file"


def open_regular(path: str | os.PathLike[str], *, dir_fd: int | None = None, single_link: bool = False) -> int:
    """A descriptor (blocking again, close-on-exec) of the regular file ``path`` (relative to ``dir_fd`` when
    given); the caller closes it. Raises ``FileNotFoundError`` when it is not there, :class:`NotRegularFile` when
    it is a link, a FIFO, a device, a socket, a directory (or, with ``single_link``, has several hard links), and
    ``OSError`` for the rest (no permission, ...). Never blocks on what the file is."""
    try:
        fd = os.open(path, OPEN_FLAGS, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise NotRegularFile(path, "a symbolic link") from e
        if e.errno == errno.ENXIO:  # a socket (or a device without its driver)
            raise NotRegularFile(path, _kind_of(path, dir_fd, "a socket")) from e
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(path, describe(st.st_mode))
        if single_link and st.st_nlink != 1:
            raise NotRegularFile(path, f"a file with {st.st_nlink} hard links (it may be a file from elsewhere)")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _kind_of(path: str | os.PathLike[str], dir_fd: int | None, default: str) -> str:
    try:
        return describe(os.lstat(path, dir_fd=dir_fd).st_mode)
    except OSError:
        return default


def read_at_most(path: str | os.PathLike[str], limit: int, offset: int = 0) -> bytes:
    """Up to ``limit`` bytes of the regular file ``path`` from ``offset`` (raises as :func:`open_regular`)."""
    fd = open_regular(path)
    try:
        return os.pread(fd, limit, offset)
    finally:
        os.close(fd)


def read_tail(path: str | os.PathLike[str] | Path, max_bytes: int) -> tuple[bytes, int]:
    """The last ``max_bytes`` of the regular file ``path`` and the offset they start at (raises as
    :func:`open_regular`)."""
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - max_bytes)
        return os.pread(fd, size - start, start), start
    finally:
        os.close(fd)
