"""The manager's own log, ``<experiment>/log/manager.log``: written by the manager process (rotated) and,
for its first lines, by ``create`` (where the config came from, its warnings). :mod:`nnix.cli.logs` prints it."""

from __future__ import annotations

import logging
import logging.handlers
from pathlib import Path

MANAGER_LOG = "manager.log"
LOG_MAX_BYTES = 10 * 1024 * 1024  # rotated at 10 MB, three old files kept (manager.log.1 .. .3)
LOG_BACKUPS = 3
LOG_FORMAT = "[%(asctime)s] %(levelname)s %(name)s: %(message)s"


def setup_manager_logging(exp_dir: Path, level: str) -> None:
    """Send the ``nnix`` loggers of this (manager) process to ``<exp>/log/manager.log``, rotated."""
    (exp_dir / "log").mkdir(parents=True, exist_ok=True)
    handler = logging.handlers.RotatingFileHandler(
        exp_dir / "log" / MANAGER_LOG, maxBytes=LOG_MAX_BYTES, backupCount=LOG_BACKUPS, encoding="utf-8"
    )
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger("nnix")
    root.handlers[:] = [handler]
    root.setLevel({"trace": "DEBUG", "fatal": "CRITICAL"}.get(level, level.upper()))
    root.propagate = False


def note_created(exp_dir: Path, exp_id: str, config_file: Path, warnings: list[str]) -> None:
    """The first lines of a new experiment's manager.log: where its config came from, and its warnings
    (written by the CLI, which knows the file; the manager appends from then on)."""
    (exp_dir / "log").mkdir(parents=True, exist_ok=True)
    logger = logging.getLogger("nnix.cli.create")
    handler = logging.FileHandler(exp_dir / "log" / MANAGER_LOG, encoding="utf-8")
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    record = logger.makeRecord(logger.name, logging.INFO, __file__, 0, "experiment %s created from %s",
                               (exp_id, config_file.expanduser().resolve()), None)
    try:
        handler.emit(record)
        for w in warnings:
            handler.emit(logger.makeRecord(logger.name, logging.WARNING, __file__, 0, "config: %s", (w,), None))
    finally:
        handler.close()
