"""NNI 3.0's ``nni.experiment.Experiment``: start, watch and steer an experiment from Python.

The manager always runs as a background daemon (the one ``nnix create`` starts), so ``start()`` returns at
once -- a Jupyter kernel is never blocked -- and ``run()`` is ``start()`` plus waiting for the end. Every
query and change goes through the manager's NNI REST routes (:func:`nnix.client.rest_call`).

Stopping: ``stop()``, leaving a ``with`` block, or the end of the Python process (``atexit``, as NNI) stop an
experiment started in the default ``RunMode.Background``. A small watcher process started with it also stops
it when the launcher dies without running ``atexit`` (``kill -9``, a crashed kernel): the watcher holds the
read end of a pipe whose write end only the launcher holds, and the pipe's end-of-file is its signal.
``RunMode.Detach`` leaves the experiment running after the script (stop it with ``nnix stop ID``).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from nnix.client import rest_call, stop_experiment
from nnix.compat.nni_experiment.config import ExperimentConfig, NniConfigError
from nnix.config import ExperimentConfig as NativeConfig
from nnix.config import restore_secrets
from nnix.core.manager_error import manager_error_text, read_manager_error
from nnix.errors import FieldIssue, ManagerUnreachableError, NnixError
from nnix.experiment import launcher_logger, log_failures, port_error
from nnix.home import STORE_NAME, Registry, manager_alive, read_state
from nnix.host.interrupts import sigint_held
from nnix.model.status import ExperimentStatus

__all__ = [
    "Experiment",
    "RunMode",
    "TrialHyperParameters",
    "TrialJob",
    "TrialMetricData",
    "TrialResult",
]

_logger = launcher_logger("nni.experiment")  # NNI prints its progress lines (id, URL) on stdout; so do we

_ID_RE = re.compile(r"^[A-Za-z0-9_\-]{1,32}$")


class RunMode(str, Enum):
    """How a started experiment relates to the launching Python process (NNI's names)."""

    Background = "background"
    """Stopped when the launching process ends (the default)."""
    Foreground = "foreground"
    """As Background, and the manager's log lines are echoed on stdout."""
    Detach = "detach"
    """Left running after the launching process ends."""


# --------------------------------------------------------------------------------------------------
# What the REST wrappers return (NNI's data classes, camelCase attributes as NNI's)


@dataclass
class TrialHyperParameters:
    parameter_id: int | None
    parameter_source: str
    parameters: dict[str, Any]
    parameter_index: int = 0


@dataclass
class TrialMetricData:
    timestamp: int
    trialJobId: str
    parameterId: str | None
    type: str
    sequence: int
    data: Any
    """The metric value, decoded (NNI sends it JSON-encoded twice)."""

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> TrialMetricData:
        data = raw.get("data")
        with contextlib.suppress(TypeError, ValueError):
            data = json.loads(json.loads(data)) if isinstance(data, str) else data
        return cls(raw.get("timestamp", 0), raw.get("trialJobId", ""), raw.get("parameterId"), raw.get("type", ""),
                   raw.get("sequence", 0), data)


@dataclass
class TrialResult:
    parameter: dict[str, Any]
    value: Any
    trialJobId: str


@dataclass
class TrialJob:
    trialJobId: str
    status: str
    hyperParameters: list[TrialHyperParameters]
    sequenceId: int = -1
    logPath: str | None = None
    startTime: int | None = None
    endTime: int | None = None
    stderrPath: str | None = None
    finalMetricData: list[TrialMetricData] | None = None
    message: str | None = None
    """nnix: why the trial ended (FAILED, EARLY_STOPPED, canceled)."""
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> TrialJob:
        params = []
        for record in raw.get("hyperParameters") or []:
            rec = json.loads(record) if isinstance(record, str) else record
            params.append(TrialHyperParameters(rec.get("parameter_id"), rec.get("parameter_source", ""),
                                               rec.get("parameters") or {}, rec.get("parameter_index", 0)))
        finals = raw.get("finalMetricData")
        known = {"trialJobId", "status", "hyperParameters", "sequenceId", "logPath", "startTime", "endTime",
                 "stderrPath", "finalMetricData", "message"}
        return cls(
            trialJobId=raw["trialJobId"], status=raw["status"], hyperParameters=params,
            sequenceId=raw.get("sequenceId", -1), logPath=raw.get("logPath"), startTime=raw.get("startTime"),
            endTime=raw.get("endTime"), stderrPath=raw.get("stderrPath"),
            finalMetricData=[TrialMetricData.from_json(m) for m in finals] if finals is not None else None,
            message=raw.get("message"), extra={k: v for k, v in raw.items() if k not in known},
        )


# --------------------------------------------------------------------------------------------------

class _ClassOrInstance:
    """A method that NNI's users call on the class (``Experiment.view(id, port)``) and on an experiment
    (``Experiment(config, id).view(port)``): the two forms have their own functions."""

    def __init__(self, on_class: Any, on_instance: Any) -> None:
        self.on_class = on_class
        self.on_instance = on_instance
        self.__doc__ = on_class.__doc__

    def __get__(self, obj: Any, owner: type[Any]) -> Any:
        if obj is None:
            return self.on_class.__get__(None, owner)
        return self.on_instance.__get__(obj, owner)


class Experiment:
    """An NNI experiment, launched and controlled from Python (NNI 3.0's API).

    ``Experiment('local')`` / ``Experiment(['local', 'remote'])`` create an empty :class:`ExperimentConfig`
    in ``.config``; ``Experiment(config)`` takes one; ``Experiment(None, id)`` is for ``resume``/``view`` of a
    recorded experiment. ``id`` is drawn at construction (NNI's 8-character form) unless given.
    """

    def __init__(self, config_or_platform: ExperimentConfig | str | list[str] | None = None,
                 id: str | None = None) -> None:
        if config_or_platform is None or isinstance(config_or_platform, ExperimentConfig):
            self.config: ExperimentConfig | None = config_or_platform
        elif isinstance(config_or_platform, NativeConfig):
            self.config = ExperimentConfig.from_native(config_or_platform)
        else:
            self.config = ExperimentConfig(config_or_platform)
        if id is not None and (not isinstance(id, str) or not _ID_RE.match(id)):
            raise NniConfigError([FieldIssue("id", f"bad experiment id {id!r}",
                                             "1 to 32 letters, digits, '_' or '-'")])
        self.id: str | None = id if id is not None else (Registry().new_id() if self.config is not None else None)
        self.port: int | None = None
        self._host = "127.0.0.1"
        self._token: str | None = None
        self._pid: int | None = None  # the manager this object started
        self._watcher: subprocess.Popen[bytes] | None = None
        self._echo: threading.Event | None = None

    # --- properties --------------------------------------------------------------------------------
    @property
    def url(self) -> str | None:
        """The web UI's address while the experiment's manager serves it."""
        if self.port is None:
            return None
        return f"http://{self._host}:{self.port}" + (f"/?token={self._token}" if self._token else "")

    # --- start / stop ------------------------------------------------------------------------------
    def start(self, port: int = 8080, debug: bool = False, run_mode: RunMode = RunMode.Background) -> None:
        """Create the experiment and start its manager in the background; returns once it answers.
        ``port=0`` takes any free port (nnix); ``self.port`` says which."""
        if self.config is None:
            raise NnixError("this Experiment has no config to start",
                            "Experiment('local') or Experiment(config); to continue a recorded experiment: "
                            "Experiment.resume(ID) or Experiment(None, ID).resume()")
        self._refuse_if_started()
        assert self.id is not None
        created = False
        try:
            from nnix.host.build import create

            loaded = self.config._load(debug)
            for warning in loaded.warnings:
                _logger.warning(warning)
            _logger.info("Creating experiment, Experiment ID: %s", self.id)
            with sigint_held():  # not half a directory without its registry entry
                create(loaded, self.id)
                created = True
            self._launch("create", port, run_mode)
        except BaseException as e:  # failed, or Ctrl-C while the manager was starting: stop what may run
            self._undo_launch(e, created)
            if created:
                from nnix.host.build import discard_unstarted

                with sigint_held(), contextlib.suppress(Exception):
                    discard_unstarted(self.id)  # a failed start leaves no experiment behind (unless trials ran)
            raise

    def run(self, port: int = 8080, wait_completion: bool = True, debug: bool = False) -> bool | None:
        """``start()``, then wait until the experiment is DONE or STOPPED (True) or in ERROR (False).
        Ctrl-C stops it (and returns None), whenever it comes: while the manager starts, it is ended and
        the experiment discarded if no trial ran. The manager keeps serving its web UI after the end, until
        ``stop()`` or the end of this process. ``wait_completion=False``: ``start()`` only (None)."""
        try:
            self.start(port, debug)
        except KeyboardInterrupt:  # start() has said so and stopped what it had started
            return None
        return self._until_done() if wait_completion else None

    def _undo_launch(self, error: BaseException, recorded: bool) -> None:
        """After a start that failed or was interrupted (the error): no manager, watcher or exit hook left.
        ``recorded``: the experiment exists (a manager may have been started for it)."""
        with sigint_held():
            if isinstance(error, KeyboardInterrupt):
                _logger.warning("KeyboardInterrupt detected")
            if self._pid is not None:
                with contextlib.suppress(Exception):
                    self._stop()
            else:
                self._forget()
                if recorded:  # a manager that answered just before the interrupt is recorded: stop it by its id
                    with contextlib.suppress(Exception):
                        stop_experiment(self.id or "")
            self._pid = self.port = None

    def _until_done(self) -> bool | None:
        """:meth:`_wait_completion`; Ctrl-C stops the experiment (None). Then the failed trials' reasons are
        logged (INFO), as the CLI prints them."""
        try:
            ended = self._wait_completion()
        except KeyboardInterrupt:
            self._interrupted()
            return None
        self._log_failures()
        return ended

    def _log_failures(self) -> None:
        if self.id is None:
            return
        with contextlib.suppress(NnixError):  # the manager may be gone: the store has the same answer
            stats = {s.get("trialJobStatus"): s.get("trialJobNumber") for s in self.get_job_statistics()}
            if not stats.get("FAILED") and not stats.get("SYS_CANCELED") and stats.get("SUCCEEDED"):
                return  # nothing to say (without reading every trial of a long experiment)
        try:
            state = read_state(Path(Registry().get(self.id).dir))
        except NnixError:
            return
        log_failures(_logger, state)

    def _interrupted(self) -> None:
        _logger.warning("KeyboardInterrupt detected")
        self.stop()

    def stop(self) -> None:
        """Stop the experiment's manager: its running trials are canceled; everything is kept
        (``Experiment.resume(id)`` continues it). A Ctrl-C while it stops is raised once it has stopped."""
        with sigint_held():
            self._stop()

    def _stop(self) -> None:
        self._forget()
        if self.id is None or (self.port is None and self._pid is None):
            return
        _logger.info("Stopping experiment, please wait...")
        try:
            Registry().get(self.id)
        except NnixError:  # connected to a manager of another registry: ask it over REST
            with contextlib.suppress(NnixError):
                self._rest("/experiment", "DELETE")
        else:
            stop_experiment(self.id)
        self._pid = None
        self.port = None
        _logger.info("Experiment stopped")

    def __enter__(self) -> Experiment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @classmethod
    def connect(cls, port: int) -> Experiment:
        """An object for the experiment whose manager serves ``port`` on this machine."""
        from nnix.api.auth import connect_host, read_token
        from nnix.home import live_managers

        exp = cls(None)
        exp.port = port
        for live in live_managers():
            if live.state.manager_port == port:
                exp.id = live.entry.id
                exp._host = connect_host(live.state.manager_host)
                exp._token = read_token(Path(live.entry.dir))
                break
        else:
            exp.id = str(exp.get_experiment_profile()["id"])
        _logger.info("Connected to port %d: experiment %s, status %s", port, exp.id, exp.get_status())
        return exp

    # --- resume / view -----------------------------------------------------------------------------
    @classmethod
    def _resume_cls(cls, experiment_id: str, port: int = 8080, wait_completion: bool = True,
                    debug: bool = False) -> Experiment | None:
        """Continue a stopped experiment: ``Experiment.resume(id, port)``. With ``wait_completion`` (the
        default) it returns None once the experiment is DONE/STOPPED/ERROR; else the running Experiment."""
        exp = cls._recorded(experiment_id)
        exp._start_recorded("resume", port)
        if not wait_completion:
            return exp
        exp._until_done()
        return None

    def _resume_self(self, port: int = 8080, debug: bool = False) -> None:
        """Continue this (recorded) experiment: ``Experiment(None, id).resume(port)``; returns once it runs."""
        self._start_recorded("resume", port)

    resume = _ClassOrInstance(_resume_cls, _resume_self)

    @classmethod
    def _view_cls(cls, experiment_id: str, port: int = 8080, non_blocking: bool = False) -> Experiment | None:
        """Serve a stopped experiment read-only: ``Experiment.view(id, port)``. Blocks until Ctrl-C (or until
        its manager is stopped elsewhere) and stops it, unless ``non_blocking``: then returns the Experiment."""
        exp = cls._recorded(experiment_id)
        return exp._view_self(port, non_blocking)

    def _view_self(self, port: int = 8080, non_blocking: bool = False) -> Experiment | None:
        self._start_recorded("view", port)
        if non_blocking:
            return self
        try:
            delay = 0.1
            while self._manager_running():
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
        except KeyboardInterrupt:
            _logger.warning("KeyboardInterrupt detected")
        finally:
            self.stop()
        return None

    view = _ClassOrInstance(_view_cls, _view_self)

    def run_or_resume(self, port: int = 8080, wait_completion: bool = True, debug: bool = False) -> bool | None:
        """``resume`` when this experiment's id is already recorded (:meth:`has_checkpoint`), else ``run``."""
        if not self.has_checkpoint():
            return self.run(port, wait_completion, debug)
        self._start_recorded("resume", port)
        return self._until_done() if wait_completion else None

    def has_checkpoint(self) -> bool:
        """Whether an experiment with this id is recorded (it can be resumed or viewed)."""
        if self.id is None:
            return False
        try:
            return (Path(Registry().get(self.id).dir) / STORE_NAME).exists()
        except NnixError:
            return False

    def load_checkpoint(self) -> None:
        """Set ``self.config`` from the recorded experiment's config."""
        from nnix.host.build import read_secrets

        if self.id is None:
            raise NnixError("this Experiment has no id", "Experiment(None, 'ID')")
        exp_dir = Path(Registry().get(self.id).dir)
        stored = read_state(exp_dir, summary=True).config
        self.config = ExperimentConfig.from_native(
            NativeConfig.model_validate(restore_secrets(stored, read_secrets(exp_dir))))

    # --- REST wrappers -----------------------------------------------------------------------------
    def get_status(self) -> str:
        """The experiment's status (``RUNNING``, ``DONE``, ``STOPPED``, ``ERROR``, ``VIEWED``, ...)."""
        return str(self._rest("/check-status")["status"])

    def get_experiment_profile(self) -> dict[str, Any]:
        """NNI's experiment profile: ``{params, id, execDuration, logDir, startTime, endTime, ...}``."""
        profile: dict[str, Any] = self._rest("/experiment")
        return profile

    def get_experiment_metadata(self, exp_id: str) -> dict[str, Any] | None:
        """The registry entry of experiment ``exp_id`` (id, port, status, platform, logDir, ...), or None."""
        for entry in self.get_all_experiments_metadata():
            if entry.get("id") == exp_id:
                return entry
        return None

    def get_all_experiments_metadata(self) -> list[dict[str, Any]]:
        """Every experiment of this machine's registry."""
        data = self._rest("/experiments-info")
        return list(json.loads(data) if isinstance(data, str) else data)

    def list_trial_jobs(self) -> list[TrialJob]:
        return [TrialJob.from_json(t) for t in self._rest("/trial-jobs")]

    def get_trial_job(self, trial_job_id: str) -> TrialJob:
        return TrialJob.from_json(self._rest(f"/trial-jobs/{trial_job_id}"))

    def get_job_statistics(self) -> list[dict[str, Any]]:
        """``[{"trialJobStatus": status, "trialJobNumber": n}, ...]``."""
        return list(self._rest("/job-statistics"))

    def get_job_metrics(self, trial_job_id: str | None = None) -> dict[str, list[TrialMetricData]]:
        """Every metric (intermediate and final) of one trial or of all, by trial id."""
        path = "/metric-data" if trial_job_id is None else f"/metric-data/{trial_job_id}"
        out: dict[str, list[TrialMetricData]] = {}
        for raw in self._rest(path):
            metric = TrialMetricData.from_json(raw)
            out.setdefault(metric.trialJobId, []).append(metric)
        return out

    def export_data(self) -> list[TrialResult]:
        """Each trial with a final result: its parameters, value and id."""
        rows = self._rest("/export-data")
        if isinstance(rows, str):
            rows = json.loads(rows)
        out = []
        for row in rows:
            value = row.get("value")
            with contextlib.suppress(TypeError, ValueError):
                value = json.loads(value) if isinstance(value, str) else value
            out.append(TrialResult(row.get("parameter") or {}, value, row.get("trialJobId", "")))
        return out

    def update_trial_concurrency(self, value: int) -> None:
        self._update("trialConcurrency", "TRIAL_CONCURRENCY", value)

    def update_max_trial_number(self, value: int) -> None:
        self._update("maxTrialNumber", "MAX_TRIAL_NUM", value)

    def update_max_experiment_duration(self, value: str | int) -> None:
        """``value``: seconds, or a duration string such as ``'30m'``, ``'2h'``."""
        self._update("maxExperimentDuration", "MAX_EXEC_DURATION", value)

    def update_search_space(self, value: dict[str, Any]) -> None:
        self._update("searchSpace", "SEARCH_SPACE", value)

    def kill_trial_job(self, trial_job_id: str) -> None:
        self._rest(f"/trial-jobs/{trial_job_id}", "DELETE")

    # --- internals ---------------------------------------------------------------------------------
    def _rest(self, path: str, method: str = "GET", body: Any = None) -> Any:
        if self.port is None:
            raise ManagerUnreachableError(
                f"experiment {self.id or ''} is not running in this process".replace("  ", " "),
                "start() or run() it, or attach with Experiment.connect(port)",
            )
        return rest_call(self.port, path, method, body, host=self._host, token=self._token)

    def _update(self, key: str, update_type: str, value: Any) -> None:
        profile = self.get_experiment_profile()
        profile["params"][key] = value
        self._rest(f"/experiment?update_type={update_type}", "PUT", profile)

    def _refuse_if_started(self) -> None:
        if self._pid is not None and self._manager_running():
            raise NnixError(f"experiment {self.id} is already running (port {self.port})",
                            "stop() it first, or use this object to control it")

    @classmethod
    def _recorded(cls, experiment_id: str) -> Experiment:
        exp = cls(None, experiment_id)
        Registry().get(experiment_id)  # a clear error for an unknown id
        with contextlib.suppress(Exception):  # the config is informative here; a bad one does not block
            exp.load_checkpoint()
        return exp

    def _start_recorded(self, action: str, port: int) -> None:
        from nnix.home import shown_status

        if self.id is None:
            raise NnixError(f"no experiment id to {action}", f"Experiment.{action}('ID') or Experiment(None, 'ID')")
        self._refuse_if_started()
        state = read_state(Path(Registry().get(self.id).dir), summary=True)
        if manager_alive(state) and state.manager_action != "view":
            raise NnixError(f"experiment {self.id} has a live manager ({shown_status(state)}, pid "
                            f"{state.manager_pid}, port {state.manager_port})",
                            f"stop it first: nnix stop {self.id}")
        _logger.info("%s experiment %s", "Resuming" if action == "resume" else "Viewing", self.id)
        try:
            self._launch(action, port, RunMode.Background)
        except BaseException as e:
            self._undo_launch(e, True)
            raise

    def _launch(self, action: str, port: int, run_mode: RunMode) -> None:
        from nnix.api.auth import connect_host, read_token
        from nnix.host.run import spawn_daemon

        assert self.id is not None
        try:
            pid = spawn_daemon(self.id, action, port)
        except NnixError as e:
            said = port_error(e, _port_hint(action, self.id))
            if said is None:
                raise
            raise said from None  # (the OSError behind it is noise, and its hint was the CLI's --port)
        exp_dir = Path(Registry().get(self.id).dir)
        state = read_state(exp_dir, summary=True)
        self._pid = pid
        self.port = state.manager_port
        self._host = connect_host(state.manager_host)
        self._token = read_token(exp_dir)
        if run_mode is not RunMode.Detach:
            with sigint_held():  # no watcher started but unknown to this object
                atexit.register(self._stop_at_exit)
                self._watcher = _start_watcher(self.id, pid)
        _logger.info("Web portal URL: %s", self.url)
        if run_mode is RunMode.Foreground:
            self._echo = _echo_log(exp_dir / "log" / "manager.log", pid)

    def _manager_running(self) -> bool:
        if self.id is None:
            return False
        try:
            state = read_state(Path(Registry().get(self.id).dir), summary=True)
        except NnixError:
            return False
        return manager_alive(state) and (self._pid is None or state.manager_pid == self._pid)

    def _wait_completion(self) -> bool:
        """Poll the status: DONE or STOPPED -> True, ERROR -> False (NNI's rule)."""
        delay = 0.1
        while True:
            try:
                status = self.get_status()
            except ManagerUnreachableError:
                return self._ended_without_manager()
            if status in (ExperimentStatus.DONE.value, ExperimentStatus.STOPPED.value):
                return True
            if status == ExperimentStatus.ERROR.value:
                return False
            time.sleep(delay)
            delay = min(delay * 1.5, 2.0)

    def _ended_without_manager(self) -> bool:
        assert self.id is not None
        exp_dir = Path(Registry().get(self.id).dir)
        state = read_state(exp_dir, summary=True)
        if state.status in (ExperimentStatus.DONE, ExperimentStatus.STOPPED):
            return True
        error = read_manager_error(exp_dir)
        why = manager_error_text(error) if error is not None else "it is no longer running"
        _logger.error("The manager of experiment %s ended (%s): %s", self.id, state.status.value, why)
        return False

    def _stop_at_exit(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()

    def _forget(self) -> None:
        """No more stopping at exit, no watcher, no log echo."""
        atexit.unregister(self._stop_at_exit)
        self._release_watcher()
        if self._echo is not None:
            self._echo.set()

    def _release_watcher(self) -> None:
        watcher, self._watcher = self._watcher, None
        if watcher is not None and watcher.stdin is not None:
            with contextlib.suppress(OSError):
                watcher.stdin.write(b"detach\n")
                watcher.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                watcher.wait(5)


def _port_hint(action: str, exp_id: str) -> str:
    """How to pass another port to the call that started ``action`` (this API's terms, not the CLI's)."""
    if action == "create":
        call = "experiment.run(port=8081) or experiment.start(port=8081)"
    else:
        call = f"Experiment.{action}('{exp_id}', port=8081)"
    return f"pass another port, e.g. {call}, or port=0 for any free one (experiment.port then says which)"


def _start_watcher(exp_id: str, manager_pid: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "nnix.compat.nni_watch", exp_id, str(manager_pid)],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )


def _echo_log(path: Path, manager_pid: int) -> threading.Event:
    """RunMode.Foreground: print the manager's log lines as they come, until stopped or the manager ends."""
    from nnix.home import pid_alive

    done = threading.Event()

    def follow() -> None:
        offset = 0
        while not done.is_set():
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    f.seek(offset)
                    chunk = f.read()
                    offset = f.tell()
            except OSError:
                chunk = ""
            for line in chunk.splitlines():
                print(line, flush=True)
            if not chunk and not pid_alive(manager_pid):
                return
            done.wait(0.2)

    threading.Thread(target=follow, name="nnix-manager-log", daemon=True).start()
    return done
