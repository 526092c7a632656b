"""Why a trial ended, in one short line: the exception of a Python traceback (or the last lines of stderr)
plus the exit code or the signal's name.

One function, :func:`exit_reason`, serves every training service: the local runner and the remote and
cluster agents send the *tail* of the trial's stderr (:func:`read_tail`, at most :data:`TAIL_BYTES`) in
their ``Exited`` message, and the manager turns it into the message users see (REST ``message``, ``trial
ls``, the web UI, ``manager.log``). Stdlib only; never raises on any input (stderr is untrusted text).

How the detail is chosen, from the tail of stderr:

1. The *last* traceback wins: with chained exceptions ("During handling of the above exception, another
   exception occurred:", "The above exception was the direct cause of ...") Python prints the final
   exception last, and that is the one that ended the program. Its exception line (``Type: message``)
   is the first line after the frames that is not indented; lines printed after it (a chained context,
   a ``<urlopen error ...>`` from a worker, progress bars, logging at shutdown) are not the reason.
2. A bare exception (``AssertionError`` with no message) gets the failing source line: ``AssertionError
   (trial.py, line 12: assert x > 0)``.
3. No traceback: the last non-empty line that is not noise (progress bars, bash's own "Killed" report);
   a very short last line is preceded by the one before it.
"""

from __future__ import annotations

import os
import re
import signal as _signal

from nnix.agent.safeopen import read_tail as safe_tail

TAIL_BYTES = 16 * 1024  # how much of the end of trial.stderr is read and sent with an exit
MAX_DETAIL = 240  # characters of stderr detail kept in the one-line reason
SHORT_LINE = 24  # a last line shorter than this is shown with the line before it

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")
_HEADER = re.compile(r"(?:Exception Group )?Traceback \(most recent call last\):")
_FRAME = re.compile(r'^\s*(?:[|│]\s*)*File "(?P<file>[^"]*)", line (?P<line>\d+)')
_EXC = re.compile(r"^(?P<type>[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*)(?::(?P<msg>.*))?$")
_GROUP_PREFIX = re.compile(r"^\s*(?:[|+]\s?)+")
_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")
# bash reports a child that died of a signal: "bash: line 1: 4321 Killed   python3 trial.py"
_SHELL_REPORT = re.compile(r"^\S*sh: (?:line \d+: )? *\d+ ")  # the pid is right-aligned: "line 1:  812 Killed"
_PROGRESS = re.compile(r"\d+%\|.*\||\d+(?:\.\d+)?\s*(?:it|s)/(?:s|it)\b")
_BOX = "│╭╮╰╯─┃━┏┓┗┛"


def read_tail(path: str | os.PathLike[str], max_bytes: int = TAIL_BYTES) -> str:
    """The last ``max_bytes`` of a file as text (starting at a line boundary when it was cut), or "" (also when
    it is not a regular file: a trial's FIFO or link is never opened, see :mod:`nnix.agent.safeopen`)."""
    try:
        data, start = safe_tail(path, max_bytes)
    except OSError:
        return ""
    if start > 0:
        cut = data.find(b"\n")
        data = data[cut + 1 :] if 0 <= cut < len(data) - 1 else data
    return data.decode("utf-8", errors="replace")


def signal_name(number: int) -> str:
    """``SIGKILL`` for 9; ``signal 77`` for a number that is no signal here."""
    try:
        return _signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _clean(text: str) -> list[str]:
    """Lines as a terminal would show them: ANSI codes removed, a carriage return overwrites its line."""
    out = []
    for raw in _ANSI.sub("", text).replace("\r\n", "\n").split("\n"):
        if "\r" in raw:
            parts = [p for p in raw.split("\r") if p.strip()]
            raw = parts[-1] if parts else ""
        out.append(raw.rstrip())
    return out


def _short(text: str, limit: int = MAX_DETAIL) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _exception_after(lines: list[str], start: int) -> tuple[str, int] | None:
    """The exception line of the traceback whose header is ``lines[start]``, and its index."""
    grouped = "Exception Group" in lines[start] or lines[start].lstrip().startswith(("|", "+"))
    for i in range(start + 1, len(lines)):
        line = lines[i]
        if not line.strip():
            continue
        if grouped:
            line = _GROUP_PREFIX.sub("", line)
            if not line or line[0].isspace() or line.startswith(("File ", "Traceback", "-")):
                continue
        elif line[0].isspace() or line[0] in _BOX:
            continue
        if _EXC.match(line.split(" ", 1)[0].rstrip(":")) and not line.startswith(_CHAIN):
            return line.strip(), i
        return None  # not a traceback after all (or a cut one)
    return None


def exception_line(text: str) -> str | None:
    """The final exception of the last Python traceback in ``text`` (type and message), or None."""
    lines = _clean(text)
    for start in range(len(lines) - 1, -1, -1):
        m = _HEADER.search(lines[start])
        if m is None:
            continue
        prefix = lines[start][: m.start()]
        if prefix.strip() and prefix.strip() not in "+|":  # every line tagged, e.g. torchrun's "[rank0]: "
            lines = [ln[len(prefix):] if ln.startswith(prefix) else ln for ln in lines]
        found = _exception_after(lines, start)
        if found is None:
            continue
        exc, at = found
        if ":" not in exc:  # a bare exception: say where it was raised
            where = _last_frame(lines[start:at])
            if where:
                exc = f"{exc} ({where})"
        return _short(exc)
    return None


def _last_frame(lines: list[str]) -> str:
    for i in range(len(lines) - 1, -1, -1):
        m = _FRAME.match(lines[i])
        if m is None:
            continue
        code = ""
        if i + 1 < len(lines) and not _FRAME.match(lines[i + 1]):
            code = lines[i + 1].strip().strip("│|").strip()
            if set(code) <= set("^~ "):
                code = ""
        where = f"{os.path.basename(m.group('file'))}, line {m.group('line')}"
        return f"{where}: {code}" if code else where
    return ""


def last_lines(text: str) -> str:
    """The last meaningful line of ``text`` (with the one before it when it is very short), or ""."""
    kept = [ln.strip() for ln in _clean(text) if ln.strip() and not _noise(ln)]
    if not kept:
        return ""
    if len(kept[-1]) < SHORT_LINE and len(kept) > 1:
        return _short(f"{kept[-2]} | {kept[-1]}")
    return _short(kept[-1])


def _noise(line: str) -> bool:
    s = line.strip()
    return bool(_SHELL_REPORT.match(s) or _PROGRESS.search(s) or s in _SIGNAL_WORDS)


_SIGNAL_WORDS = frozenset({"Killed", "Terminated", "Aborted", "Hangup", "Interrupt", "Segmentation fault",
                           "Aborted (core dumped)", "Segmentation fault (core dumped)", "Bus error",
                           "Bus error (core dumped)", "User defined signal 1", "User defined signal 2"})


def stderr_detail(text: str) -> str:
    """What the tail of stderr says about the end: the traceback's exception, else its last lines."""
    return exception_line(text) or last_lines(text)


def exit_status(exit_code: int | None, signal: int | None) -> str:
    """``exit code 1``, ``killed by SIGKILL``, ``killed by SIGKILL, exit code 137`` (a shell reports a
    child killed by signal N as 128 + N), or "" when neither is known."""
    if signal is not None:
        return f"killed by {signal_name(signal)}"
    if exit_code is None:
        return ""
    if exit_code > 128 and exit_code - 128 in _signal.valid_signals():
        return f"killed by {signal_name(exit_code - 128)}, exit code {exit_code}"
    return f"exit code {exit_code}"


def exit_reason(exit_code: int | None, signal: int | None, stderr_tail: str = "", message: str = "") -> str:
    """The one-line reason of a trial that ended by itself (not one nnix canceled).

    ``RuntimeError: Error downloading x.gz (exit code 1)``, ``killed by SIGKILL, exit code 137``,
    ``exit code 3 (nothing on stderr)``; ``message`` (what the environment knows, e.g. "host h lost")
    comes first when given. "" for exit code 0."""
    if exit_code == 0 and signal is None:
        return ""
    status = exit_status(exit_code, signal)
    detail = stderr_detail(stderr_tail) if stderr_tail else ""
    if message:
        head = _short(message, 2 * MAX_DETAIL)
        return f"{head} ({status})" if status and status not in head else head
    if not status:
        return detail or "the trial ended; its exit status is unknown"
    if detail:
        return f"{detail} ({status})"
    if exit_code is not None and signal is None and not status.startswith("killed"):
        return f"{status} (nothing on stderr)"
    return status
