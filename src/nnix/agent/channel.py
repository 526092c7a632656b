"""The agent's end of the trial file channel.

Layout of a channel directory (its absolute path is given to the trial as ``NNIX_TRIAL_CHANNEL``):

* ``parameter.json``: NNI's parameter record, ``{"parameter_id": 0, "parameter_source": "algorithm",
  "parameters": {...}, "parameter_index": 0}``, written atomically by :func:`write_parameter`
  before the trial starts.
* ``metrics.jsonl``: one JSON object per line, appended by the trial SDK with one ``os.write`` per line:
  ``{"type": "PERIODICAL"|"FINAL", "sequence": k, "value": <number or dict>, "ts": <unix time>}``.
  :class:`MetricReader` tails it; its ``offset``/``line_index`` let a restarted manager continue where
  the previous one stopped.

Everything in the channel is written by the trial and is untrusted: :func:`metric_problem` is the one
schema of a metric line, applied by the reader (agent side) and again by the manager (whatever an agent
sends). A line that breaks it is skipped and reported (never raised), lines are at most
:data:`MAX_LINE_BYTES` long, and the reader reads a bounded chunk per call. The file is opened by
:func:`nnix.agent.safeopen.open_regular` (never blocking, never through a link): a channel file the trial
made a FIFO, a link or a directory is not read, and said once (:meth:`MetricReader.take_notice`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import stat
from pathlib import Path
from typing import Any

from nnix.agent.safeopen import NotRegularFile, open_regular
from nnix.trial import CHANNEL_ENV, MAX_METRIC_BYTES, METRICS_FILE, PARAMETER_FILE

__all__ = [
    "CHANNEL_ENV",
    "MAX_LINE_BYTES",
    "METRICS_FILE",
    "PARAMETER_FILE",
    "MetricReader",
    "metric_problem",
    "metrics_path",
    "parameter_path",
    "write_parameter",
]

_log = logging.getLogger(__name__)


def parameter_path(channel_dir: Path) -> Path:
    return Path(channel_dir) / PARAMETER_FILE


def metrics_path(channel_dir: Path) -> Path:
    return Path(channel_dir) / METRICS_FILE


def write_parameter(channel_dir: Path, record: dict[str, Any]) -> None:
    """Write ``record`` as the channel's ``parameter.json``, atomically (temporary file + ``os.replace``).

    The channel directory is created if missing. A trial polling for the file never sees a partial one.
    """
    channel_dir = Path(channel_dir)
    channel_dir.mkdir(parents=True, exist_ok=True)
    target = channel_dir / PARAMETER_FILE
    tmp = channel_dir / f".{PARAMETER_FILE}.{os.getpid()}.tmp"
    try:
        tmp.write_text(json.dumps(record), encoding="utf-8")
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


MAX_LINE_BYTES = MAX_METRIC_BYTES  # a line, its newline included (the SDK refuses to write a longer one)
READ_CHUNK = 2 * 1024 * 1024  # bytes read per call at most (more than one longest line)
MAX_SEQUENCE = 2**31 - 1
MAX_VALUE_DEPTH = 32  # nesting of lists/dicts inside a metric's value
REJECT_SAMPLE = 5  # reasons kept per batch of rejected lines (all are counted)
METRIC_TYPES = ("PERIODICAL", "FINAL")


def _short(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return f"a JSON {'object' if isinstance(value, dict) else 'array'}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _number_problem(value: Any, allow_nan: bool) -> str | None:
    """None for a number nnix can store and compare (a non-finite float only with ``allow_nan``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "not a number"
    if isinstance(value, int):
        return None if value.bit_length() <= 1000 else "an integer too large for a float"
    if not math.isfinite(value) and not allow_nan:
        return f"{value!r}, not a finite number (nanPolicy: error)"
    return None


def _tree_problem(value: Any, allow_nan: bool) -> str | None:
    """Depth and number checks of a whole JSON value, without recursion."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            if isinstance(item, (int, float)) and not isinstance(item, bool):
                problem = _number_problem(item, allow_nan)
                if problem is not None:
                    return f"a number in 'value' is {problem}"
            continue
        if depth >= MAX_VALUE_DEPTH:
            return f"'value' is nested deeper than {MAX_VALUE_DEPTH} levels"
        stack.extend((child, depth + 1) for child in children)
    return None


def metric_problem(record: Any, *, allow_nan: bool = True) -> str | None:
    """The schema of one metric line: None when ``record`` is valid, else a short reason.

    ``type`` is PERIODICAL or FINAL; ``sequence`` (default 0) an integer in [0, 2**31-1]; ``value`` a
    number or an object with a numeric ``default`` (other keys: any JSON, numbers finite), nested at most
    :data:`MAX_VALUE_DEPTH` levels; ``ts`` (optional) a finite number. NaN and infinities are accepted only
    with ``allow_nan`` (``nanPolicy: allow``). Other keys are ignored.
    """
    if not isinstance(record, dict):
        return f"not a JSON object ({_short(record)})"
    mtype = record.get("type")
    if mtype not in METRIC_TYPES:
        return f"'type' must be PERIODICAL or FINAL, not {_short(mtype)}"
    seq = record.get("sequence", 0)
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= MAX_SEQUENCE:
        return f"'sequence' must be an integer from 0 to {MAX_SEQUENCE}, not {_short(seq)}"
    if "value" not in record:
        return "no 'value'"
    value = record["value"]
    if isinstance(value, dict):
        problem = _number_problem(value.get("default"), allow_nan)
        if problem is not None:
            return f"'value' is an object whose 'default' is {problem}"
    else:
        problem = _number_problem(value, allow_nan)
        if problem is not None:
            return f"'value' must be a number or an object with a numeric 'default': {problem} ({_short(value)})"
    problem = _tree_problem(value, allow_nan)
    if problem is not None:
        return problem
    ts = record.get("ts")
    if ts is not None and (_number_problem(ts, False) is not None or (isinstance(ts, int) and ts.bit_length() > 64)):
        return f"'ts' must be a finite number, not {_short(ts)}"
    return None


class MetricReader:
    """Reads the complete lines appended to a ``metrics.jsonl`` since the previous call.

    ``offset`` is the byte offset just past the last line consumed and ``line_index`` the number of lines
    consumed; both are what a resumed reader is constructed with. A trailing line without its newline is
    still being written: it is left for the next call, unless ``final`` (the trial has exited: it is read
    as a line). Every line counts towards ``line_index`` (so an index is the line's 0-based number in the
    file); blank lines are skipped; lines that break :func:`metric_problem`, are not JSON, or are longer
    than :data:`MAX_LINE_BYTES` are skipped, logged and kept for :meth:`take_rejected` (a corrupt line
    must not stop the metrics that follow it). A longer line is never buffered: its first bytes are
    rejected and the rest of it, up to its newline, skipped as it comes. One call reads at most
    ``limit`` bytes; :attr:`at_eof` says whether it reached the end of the file.
    """

    def __init__(self, path: Path, offset: int = 0, line_index: int = 0) -> None:
        if offset < 0 or line_index < 0:
            raise ValueError(f"offset and line_index must be >= 0, got {offset} and {line_index}")
        self.path = Path(path)  # the channel file (given; never changes)
        self._offset = offset
        self._line_index = line_index
        self._skipping = False  # inside a too-long line: drop bytes up to its newline
        self._at_eof = True
        self._rejected: list[tuple[int, str]] = []
        self._rejected_count = 0
        self._rejected_last = -1
        self._notice = ""  # what is wrong with the file, not yet taken
        self._refused: tuple[int, int, int] | None = None  # (device, inode, mode) of the file refused last

    @property
    def offset(self) -> int:
        return self._offset

    @property
    def line_index(self) -> int:
        return self._line_index

    @property
    def at_eof(self) -> bool:
        return self._at_eof

    def take_rejected(self) -> tuple[list[tuple[int, str]], int, int]:
        """``(sample, count, last)`` of the lines rejected since the previous call: up to
        :data:`REJECT_SAMPLE` ``(line index, reason)``, how many in all, the highest index (-1: none)."""
        out = (self._rejected, self._rejected_count, self._rejected_last)
        self._rejected, self._rejected_count, self._rejected_last = [], 0, -1
        return out

    def take_notice(self) -> str:
        """Why the channel file was not read ("metrics.jsonl is a FIFO, not a regular file: ..."), once per
        refused file; "" when there is nothing new to say."""
        out, self._notice = self._notice, ""
        return out

    def has_news(self) -> bool:
        """Whether :meth:`read_new` may find something: one ``lstat``, no open. False when the file is absent, a
        regular file no longer than what was read, or the same non-regular file that was refused already."""
        try:
            st = os.lstat(self.path)
        except OSError:
            return False
        if stat.S_ISREG(st.st_mode):
            return st.st_size != self._offset
        return (st.st_dev, st.st_ino, st.st_mode) != self._refused

    def _refuse(self, e: NotRegularFile) -> None:
        try:
            st = os.lstat(self.path)
            key: tuple[int, int, int] | None = (st.st_dev, st.st_ino, st.st_mode)
        except OSError:
            key = None
        if key is not None and key == self._refused:
            return
        self._refused = key
        self._notice = f"{e}: its metrics are not read (the channel file must stay the file the trial appends to)"
        _log.warning("%s: %s", self.path, self._notice)

    def _reject(self, index: int, reason: str) -> None:
        if self._rejected_count < REJECT_SAMPLE:
            _log.warning("%s line %d skipped: %s", self.path, index, reason)
        if len(self._rejected) < REJECT_SAMPLE:
            self._rejected.append((index, reason))
        self._rejected_count += 1
        self._rejected_last = max(self._rejected_last, index)

    def read_new(self, *, final: bool = False, limit: int = READ_CHUNK) -> list[tuple[int, dict[str, Any]]]:
        """``(line_index, record)`` for each valid line appended since the previous call (at most
        ``limit`` bytes read, or up to :data:`MAX_LINE_BYTES` + 1 when one line is longer than ``limit``).
        Never raises for what the file contains."""
        try:
            with open(open_regular(self.path), "rb") as f:
                self._refused = None
                size = os.fstat(f.fileno()).st_size
                if size < self._offset:
                    _log.warning(
                        "%s is shorter (%d bytes) than the offset already read (%d); ignoring it",
                        self.path,
                        size,
                        self._offset,
                    )
                    self._at_eof = True
                    return []
                f.seek(self._offset)
                data = f.read(limit)
                if len(data) == limit and b"\n" not in data and limit <= MAX_LINE_BYTES:
                    # a small slice that holds no whole line: read on, as far as the longest line allowed
                    data += f.read(MAX_LINE_BYTES + 1 - limit)
        except FileNotFoundError:
            self._at_eof = True
            return []
        except NotRegularFile as e:  # a FIFO, a link, a directory: the trial broke its own channel
            self._refuse(e)
            self._at_eof = True
            return []
        except OSError as e:  # no permission...: the trial broke its own channel
            _log.warning("cannot read %s: %s", self.path, e)
            self._at_eof = True
            return []
        self._at_eof = self._offset + len(data) >= size
        pos = 0
        if self._skipping:
            nl = data.find(b"\n")
            if nl < 0:
                if final and self._at_eof:
                    self._skipping = False
                self._offset += len(data)
                return []
            pos = nl + 1
            self._skipping = False
        results: list[tuple[int, dict[str, Any]]] = []
        while pos < len(data):
            nl = data.find(b"\n", pos)
            if nl < 0:
                rest = len(data) - pos
                if rest >= MAX_LINE_BYTES:
                    self._reject(self._line_index, f"longer than {MAX_LINE_BYTES:,} bytes")
                    self._line_index += 1
                    self._skipping = not (final and self._at_eof)
                    pos = len(data)
                    break
                if not (final and self._at_eof):
                    break  # still being written
                end = len(data)
            else:
                end = nl
            raw = data[pos:end]
            pos = end + 1 if nl >= 0 else end
            index = self._line_index
            self._line_index += 1
            if len(raw) >= MAX_LINE_BYTES:
                self._reject(index, f"longer than {MAX_LINE_BYTES:,} bytes")
                continue
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except (ValueError, RecursionError) as e:
                self._reject(index, f"not valid JSON ({str(e)[:80]})")
                continue
            problem = metric_problem(record)
            if problem is not None:
                self._reject(index, problem)
                continue
            results.append((index, record))
        self._offset += min(pos, len(data))
        return results
