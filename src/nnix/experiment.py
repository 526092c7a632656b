"""The Python API: :class:`Experiment` runs an experiment in this process or starts it as a daemon, through the
same manager host (:mod:`nnix.host`) and client (:mod:`nnix.client`) as the CLI."""

from __future__ import annotations

import errno
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from nnix.client import stop_experiment
from nnix.config import ExperimentConfig, LoadedConfig, load_config
from nnix.core.state import ExperimentState
from nnix.errors import NnixError
from nnix.host.build import create, discard_unstarted
from nnix.host.interrupts import sigint_held
from nnix.host.progress import failure_report
from nnix.host.run import run_manager, spawn_daemon
from nnix.model.status import ExperimentStatus, TrialStatus

__all__ = ["Experiment"]

T = TypeVar("T")


def port_error(error: NnixError, hint: str) -> NnixError | None:
    """A busy port said with a launcher's own ``hint`` (how to pass another port in its API, not the CLI's
    ``--port``), or None when ``error`` is not about a busy port. Raise it ``from None``: the OSError behind it
    is noise to a user."""
    cause = error.__cause__
    if not (isinstance(cause, OSError) and cause.errno == errno.EADDRINUSE):
        return None
    return NnixError(error.message, hint)


PORT_HINT = "pass another port, e.g. run(port=8081) or start(port=8081), or port=0 for any free one"


class _StdoutHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to the ``sys.stdout`` of the moment (a notebook cell's, a test's capture), never failing."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stdout
        super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        pass  # e.g. stdout closed at interpreter exit: the message is not worth a traceback


def launcher_logger(name: str) -> logging.Logger:
    """A Python launcher's logger: its INFO lines on stdout, as NNI's launcher prints its own, unless the logger
    was configured already (it has a handler)."""
    logger = logging.getLogger(name)
    if not logger.handlers:
        handler = _StdoutHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("[%(asctime)s] %(levelname)s (%(name)s) %(message)s",
                                               "%Y-%m-%d %H:%M:%S"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger


def log_failures(logger: logging.Logger, state: ExperimentState) -> None:
    """As the CLI prints them at the end of a run: the distinct reasons of the failed trials and that no trial
    succeeded (INFO), and an ERROR's reason (ERROR)."""
    eid = state.experiment_id
    lines = failure_report(state)
    if lines:
        logger.info("Failed trials of experiment %s (each trial's reason: nnix trial ls %s):", eid, eid)
        for line in lines:
            logger.info("  %s", line)
    if state.status is ExperimentStatus.ERROR and state.message:
        logger.error("Experiment %s is in ERROR: %s", eid, state.message)
    elif state.trials and not state.count(TrialStatus.SUCCEEDED):
        logger.info("Experiment %s is %s, but no trial succeeded", eid, state.status.value)


class Experiment:
    """NNI's Python API: ``Experiment(config).run()``; ``.start()`` / ``.stop()`` for a daemon."""

    def __init__(self, config: ExperimentConfig | LoadedConfig | str | Path, id: str | None = None) -> None:
        if isinstance(config, (str, Path)):
            config = load_config(config)
        self.config = config.config if isinstance(config, LoadedConfig) else config
        self.id = id
        self._daemon_pid: int | None = None
        self.exit_code: int | None = None

    def run(self, port: int = 8080, wait_completion: bool = True, debug: bool = False) -> bool | None:
        """Run in this process until the experiment ends. True when it ended normally with at least one
        succeeded trial; ``self.exit_code`` says more, with the values of ``nnix create --foreground``:
        0 that success, 3 ERROR, 4 no trial succeeded, 130 Ctrl-C, 143 stopped from elsewhere
        (NNI returns True for a stopped run and for one whose every trial failed).
        ``wait_completion=False``: start it in the background (as :meth:`start`) and return None at once.
        ``debug``: a new experiment's manager logs at DEBUG level (``log/manager.log``)."""
        if not wait_completion:
            self.start(port, debug)
            return None
        self._debug(debug)
        created = self.id is None
        try:
            exp_id = self._create()
            outcome = self._host(lambda: run_manager(exp_id, "create", port=port, live=False))
        except BaseException:  # an error, or Ctrl-C before the manager took over SIGINT
            self._discard(created)
            raise
        self.exit_code = outcome.exit_code
        log_failures(launcher_logger("nnix.experiment"), outcome.state)
        return self.exit_code == 0

    def start(self, port: int = 8080, debug: bool = False) -> str:
        """Start a background manager (a daemon) and return the experiment id (``debug``: as :meth:`run`)."""
        self._debug(debug)
        created = self.id is None
        try:
            exp_id = self._create()
            self._daemon_pid = self._host(lambda: spawn_daemon(exp_id, "create", port))  # (Ctrl-C while it
            # starts: it is ended)
        except BaseException:
            self._discard(created)
            raise
        return exp_id

    @staticmethod
    def _host(start: Callable[[], T]) -> T:
        """``start()``, with a busy port said in this API's terms."""
        try:
            return start()
        except NnixError as e:
            said = port_error(e, PORT_HINT)
            if said is None:
                raise
            raise said from None

    def _create(self) -> str:
        """Record the experiment unless it has an id already; its id."""
        if self.id is None:
            with sigint_held():  # a Ctrl-C leaves a whole experiment to discard, not half a directory
                self.id, _ = create(self.config, None)
        return self.id

    def _discard(self, created: bool) -> None:
        """After a failed or interrupted start: an experiment created here that ran no trial is removed."""
        with sigint_held():
            if created and self.id is not None and discard_unstarted(self.id):
                self.id = None

    def _debug(self, debug: bool) -> None:
        if debug and self.id is None:  # an experiment already created keeps the level it was created with
            self.config = self.config.model_copy(update={"debug": True, "log_level": "debug"})

    def stop(self) -> None:
        if self.id is not None:
            stop_experiment(self.id)
