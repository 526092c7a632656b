"""The manager's copy of the stdout/stderr of trials that run where the manager cannot read files (SSH
workers, engines without shared storage).

Agents stream each trial's ``trial.stdout`` / ``trial.stderr`` as :class:`~nnix.model.runs.Output`
chunks at byte offsets; a service hands them to :meth:`OutputMirror.write`, which writes each at its
offset into ``<experiment dir>/trials/<trial id>/``, so a chunk sent twice (after a reconnect or a
re-attach) changes nothing. Readers find a trial's files with :func:`nnix.home.trial_files_dir`: the
trial's own directory when it is a path here, else this copy. Past the agent's cap only the tail of a
stream is sent; the copy then notes how many bytes it skipped.

Call from a service's message handler::

    if isinstance(message, Output):
        self._mirror.write(message)
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import re
from pathlib import Path

from nnix.model.runs import Output

__all__ = ["OutputMirror", "mirror_dir"]

log = logging.getLogger("nnix.services.mirror")
_SAFE = re.compile(r"^[A-Za-z0-9._-]+$")


def mirror_dir(experiment_dir: Path, trial_id: str) -> Path:
    return experiment_dir / "trials" / trial_id


class OutputMirror:
    def __init__(self, experiment_dir: Path) -> None:
        self._root = experiment_dir
        self._gaps: dict[tuple[str, str], tuple[int, int]] = {}  # (trial, stream) -> (where skipped, shift)

    def write(self, chunk: Output) -> None:
        if chunk.stream not in ("stdout", "stderr") or not _SAFE.match(chunk.trial_id) or chunk.offset < 0:
            log.warning("ignoring a malformed output chunk of trial %r", chunk.trial_id)
            return
        try:
            data = base64.b64decode(chunk.data, validate=True)
        except (binascii.Error, ValueError):
            log.warning("ignoring an undecodable output chunk of trial %s", chunk.trial_id)
            return
        folder = mirror_dir(self._root, chunk.trial_id)
        path = folder / f"trial.{chunk.stream}"
        key = (chunk.trial_id, chunk.stream)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                at = chunk.offset
                gap = self._gaps.get(key)
                if gap is not None and at >= gap[0]:
                    at += gap[1]
                elif gap is None:
                    size = os.fstat(fd).st_size
                    if at > size:  # the agent skipped the middle of a long output: say so, keep the tail
                        note = (f"\n[nnix: {at - size} bytes of {chunk.stream} skipped here; the whole file is "
                                "where the trial ran]\n").encode()
                        os.pwrite(fd, note, size)
                        self._gaps[key] = (at, size + len(note) - at)
                        at = size + len(note)
                os.pwrite(fd, data, at)
            finally:
                os.close(fd)
        except OSError as e:
            log.warning("cannot keep the output of trial %s in %s: %s", chunk.trial_id, path, e)
