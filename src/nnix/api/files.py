"""Serving files a trial wrote (``trial.stdout``, ``trial.stderr``, ``trial.log``, ``model.onnx``).

Whatever is in a trial's directory was written by the trial, so it is untrusted: a trial may replace
``trial.log`` with a symbolic link to ``/etc/shadow``, a hard link to the user's SSH key, a FIFO (that
would block a reader forever) or a device. The rules, applied by :func:`open_trial_file`:

- The trial's directory is reached from the experiment's directory one component at a time with
  ``O_NOFOLLOW`` (like ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)``), so no link anywhere between
  the experiment's directory and the file is followed, and a path swapped while it is opened cannot
  escape. A trial directory outside the experiment's directory (a shared file system configured as the
  trial's output) is opened with ``O_NOFOLLOW`` on its last component.
- The file itself is opened relative to that directory by :func:`nnix.agent.safeopen.open_regular` (the one
  helper every reader of a trial-written file uses: ``O_NOFOLLOW | O_NONBLOCK``, then ``fstat``), and served
  only if the opened descriptor is a regular file with a single hard link: a FIFO never blocks the reader, it
  is refused like a device or a socket. **Every symbolic link is refused, even one pointing at a file inside
  the trial's directory** (what it points at can change between any check and the read; a trial that wants a
  file served writes it under the served name).
- A refusal is a 403 naming the file and the rule; an absent file is ``None`` (each route says what
  that means for it).

Files are then streamed (:class:`FileStream`): bounded chunks read with ``pread`` in a worker thread,
never more than one chunk in memory per response, single HTTP ranges (``Range: bytes=a-b``), and the
size is the size when the request came (a file still growing is served up to that point).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.responses import Response, StreamingResponse

from nnix.agent.safeopen import NotRegularFile, open_regular
from nnix.api.common import JSON, ApiError

CHUNK = 256 * 1024  # bytes read and sent at once

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class OpenFile:
    """An open, checked trial file: the descriptor (the caller closes it) and its size when opened."""

    fd: int
    size: int

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _refuse(what: str, why: str) -> ApiError:
    return ApiError(403, f"{what} {why}: not served (a trial's files are served only when they are regular "
                         "files inside its directory, never through a link)")


def _within(folder: Path, root: Path) -> tuple[str, ...] | None:
    """``folder``'s components below ``root`` (lexically), None when it is not below it."""
    try:
        rel = folder.relative_to(root)
    except ValueError:
        return None
    parts = rel.parts
    if any(p in ("..", ".", "") for p in parts):
        return None
    return parts


def _open_dir(folder: Path, exp_dir: Path, what: str) -> int | None:
    """A descriptor of the trial's directory, reached without following links (None: it does not exist)."""
    parts = _within(Path(os.path.abspath(folder)), Path(os.path.abspath(exp_dir)))
    try:
        if parts is None:  # configured elsewhere (shared storage): only its last component is the trial's
            return os.open(folder, _DIR_FLAGS)
        fd = os.open(exp_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise _refuse(f"{what}'s directory", "is a link or not a directory") from e
    try:
        for part in parts:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except FileNotFoundError:
        os.close(fd)
        return None
    except OSError as e:
        os.close(fd)
        raise _refuse(f"{what}'s directory", f"has a link or a non-directory in its path ({part})") from e
    return fd


def open_trial_file(folder: Path, exp_dir: Path, name: str, what: str) -> OpenFile | None:
    """Open ``folder/name`` by the rules above. ``what`` names the file in errors (e.g. "trial abc's
    trial.log"). None when the file (or the trial's directory) does not exist; ApiError(403) when
    refused. Blocking (cheap system calls only): call it in a worker thread."""
    if "/" in name or name in ("", ".", ".."):
        raise ApiError(400, f"bad file name {name!r}")
    dfd = _open_dir(folder, exp_dir, what)
    if dfd is None:
        return None
    try:
        fd = open_regular(name, dir_fd=dfd, single_link=True)
    except FileNotFoundError:
        return None
    except NotRegularFile as e:
        raise _refuse(what, f"is {e.kind}") from e
    except OSError as e:  # no permission...
        raise _refuse(what, f"cannot be opened ({e.strerror})") from e
    finally:
        os.close(dfd)
    try:
        size = os.fstat(fd).st_size
    except BaseException:
        os.close(fd)
        raise
    return OpenFile(fd, size)


async def open_trial_file_async(folder: Path, exp_dir: Path, name: str, what: str) -> OpenFile | None:
    return await asyncio.to_thread(open_trial_file, folder, exp_dir, name, what)


def parse_range(header: str | None, size: int) -> tuple[int, int] | str | None:
    """The byte range ``[start, end)`` asked by a ``Range`` header; None: the whole file (no header, a
    header this server ignores, e.g. several ranges); ``"unsatisfiable"``: 416."""
    if not header:
        return None
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, dash, last = spec.strip().partition("-")
    if not dash:
        return None
    first, last = first.strip(), last.strip()
    if (first and not first.isdigit()) or (last and not last.isdigit()) or not (first or last):
        return None
    if not first:  # the last N bytes
        n = int(last)
        if n == 0:
            return "unsatisfiable"
        return max(0, size - n), size
    start = int(first)
    end = size if not last else min(size, int(last) + 1)
    if last and int(last) < start:
        return None  # invalid: ignored, as RFC 9110 says
    if start >= size:
        return "unsatisfiable"
    return start, end


class FileStream(StreamingResponse):
    """A streamed response of bytes ``[start, end)`` of an open file; closes the file when done (also
    when the client hangs up or the response is never sent)."""

    def __init__(self, file: OpenFile, start: int, end: int, *, status_code: int = 200,
                 headers: Mapping[str, str] | None = None, media_type: str | None = None) -> None:
        self.file = file
        hdrs = {"Accept-Ranges": "bytes", "Content-Length": str(end - start), **(headers or {})}
        super().__init__(self._chunks(start, end), status_code=status_code, headers=hdrs, media_type=media_type)

    async def _chunks(self, start: int, end: int) -> AsyncIterator[bytes]:
        at = start
        while at < end:
            data = await asyncio.to_thread(os.pread, self.file.fd, min(CHUNK, end - at), at)
            if not data:  # truncated meanwhile: nothing more to send
                return
            at += len(data)
            yield data

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.file.close()


def serve_file(file: OpenFile, range_header: str | None, media_type: str,
               headers: Mapping[str, str] | None = None, start: int = 0) -> Response:
    """``file`` from ``start`` (a tail), honouring a single ``Range`` (relative to the whole file)."""
    size = file.size
    asked = parse_range(range_header, size)
    if asked == "unsatisfiable":
        file.close()
        resp = JSON({"error": f"the range {range_header} is outside the file ({size} bytes)"}, status_code=416)
        resp.headers["Content-Range"] = f"bytes */{size}"
        return resp
    if asked is None:
        return FileStream(file, start, size, headers=headers, media_type=media_type)
    assert not isinstance(asked, str)
    lo, hi = asked
    extra = {**(headers or {}), "Content-Range": f"bytes {lo}-{hi - 1}/{size}"}
    return FileStream(file, lo, hi, status_code=206, headers=extra, media_type=media_type)
