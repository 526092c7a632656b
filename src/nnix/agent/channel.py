"""The agent's end of the trial file channel.

Layout of a channel directory (its absolute path is given to the trial as ``NNIX_TRIAL_CHANNEL``):

* ``parameter.json``: NNI's parameter record, ``{"parameter_id": 0, "parameter_source": "algorithm",
  "parameters": {...}, "parameter_index": 0}``, written atomically by :func:`write_parameter`
  before the trial starts.
* ``metrics.jsonl``: one JSON object per line, appended by the trial SDK with one ``os.write`` per line:
  ``{"type": "PERIODICAL"|"FINAL", "sequence": k, "value": <number or dict>, "ts": <unix time>}``.
  :class:`MetricReader` tails it; its ``offset``/``line_index`` let a restarted manager continue where
  the previous one stopped.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from nnix.trial import CHANNEL_ENV, METRICS_FILE, PARAMETER_FILE

__all__ = [
    "CHANNEL_ENV",
    "METRICS_FILE",
    "PARAMETER_FILE",
    "MetricReader",
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


class MetricReader:
    """Reads the complete lines appended to a ``metrics.jsonl`` since the previous call.

    ``offset`` is the byte offset just past the last complete line consumed and ``line_index`` the number
    of complete lines consumed; both are what a resumed reader is constructed with. A trailing line
    without its newline is still being written: it is left for the next call. Every complete line counts
    towards ``line_index`` (so an index is the line's 0-based number in the file), but blank lines and
    lines that are not a JSON object are skipped, the latter with a logged warning: a corrupt line must not
    stop the metrics that follow it.
    """

    def __init__(self, path: Path, offset: int = 0, line_index: int = 0) -> None:
        if offset < 0 or line_index < 0:
            raise ValueError(f"offset and line_index must be >= 0, got {offset} and {line_index}")
        self._path = Path(path)
        self._offset = offset
        self._line_index = line_index
        self.more = False  # the last read_new(max_bytes) stopped at max_bytes

    @property
    def path(self) -> Path:
        return self._path

    @property
    def offset(self) -> int:
        return self._offset

    @property
    def line_index(self) -> int:
        return self._line_index

    def read_new(self, max_bytes: int | None = None) -> list[tuple[int, dict[str, Any]]]:
        """``(line_index, record)`` for each complete line appended since the previous call; with
        ``max_bytes``, of about that many bytes at most (``more`` then says whether there may be more)."""
        self.more = False
        try:
            with open(self._path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < self._offset:
                    _log.warning(
                        "%s is shorter (%d bytes) than the offset already read (%d); ignoring it",
                        self._path,
                        size,
                        self._offset,
                    )
                    return []
                f.seek(self._offset)
                data = f.read() if max_bytes is None else f.read(max_bytes)
                if max_bytes is not None and len(data) == max_bytes:
                    self.more = True
                    if b"\n" not in data:  # one line longer than max_bytes: read it whole
                        data += f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []
        results: list[tuple[int, dict[str, Any]]] = []
        for raw in data[:end].split(b"\n"):
            index = self._line_index
            self._line_index += 1
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except (ValueError, RecursionError) as e:
                _log.warning("%s line %d is not valid JSON, skipped: %s", self._path, index, e)
                continue
            if not isinstance(record, dict):
                _log.warning("%s line %d is not a JSON object, skipped", self._path, index)
                continue
            results.append((index, record))
        self._offset += end + 1
        return results
