"""Experiments on this machine: ids, directories, the registry, building a manager, and the
Python API (:class:`Experiment`)."""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from nnix.agent.runner import RunnerEvent
from nnix.assessors.base import Assessor
from nnix.config import AlgorithmConfig, ExperimentConfig, LoadedConfig, config_secrets, load_config, restore_secrets
from nnix.core.manager import ExperimentManager
from nnix.core.state import fold
from nnix.errors import NnixError, StoreError, TunerError
from nnix.home import STORE_NAME, Entry, Registry
from nnix.model.events import ExperimentCreated
from nnix.model.trials import Direction
from nnix.registry import Kind, resolve
from nnix.services.base import ServiceContext, TrainingService
from nnix.store.sqlite import SqliteStore
from nnix.tuners.base import Tuner


def create(loaded: LoadedConfig | ExperimentConfig, experiment_id: str | None = None) -> tuple[str, Path]:
    """Record a new experiment: its directory, its store's first event, its registry entry."""
    config = loaded.config if isinstance(loaded, LoadedConfig) else loaded
    registry = Registry()
    exp_id = experiment_id or registry.new_id()
    exp_dir = Path(config.experiment_working_directory) / exp_id
    if (exp_dir / STORE_NAME).exists():
        raise StoreError(f"experiment {exp_id} already exists at {exp_dir}", "choose another --id, or resume it")
    exp_dir.parent.mkdir(parents=True, exist_ok=True)
    exp_dir.mkdir(mode=0o700, exist_ok=True)  # parameters, metrics, secrets: the owner's only
    os.chmod(exp_dir, 0o700)  # an existing (empty) directory given by --id
    (exp_dir / "log").mkdir(exist_ok=True)
    seed = config.tuner.class_args.get("seed")
    if not isinstance(seed, int):
        seed = secrets.randbits(31)
    write_secrets(exp_dir, config_secrets(config))  # the stored config has masks where secrets were
    store = SqliteStore(exp_dir / STORE_NAME)
    try:
        store.append([ExperimentCreated(exp_id, config.model_dump(mode="json"), seed, tuner_direction(config))])
    finally:
        store.close()
    registry.add(
        Entry(exp_id, str(exp_dir), config.experiment_name, config.training_service.platform, time.time())
    )
    return exp_id, exp_dir


def discard_unstarted(exp_id: str) -> bool:
    """Remove an experiment that failed before creating any trial (its directory and registry
    entry), so that a failed ``create`` leaves nothing behind. Returns whether it was removed."""
    import shutil

    from nnix.home import manager_alive, read_state, trial_count

    registry = Registry()
    try:
        entry = registry.get(exp_id)
    except NnixError:
        return False
    exp_dir = Path(entry.dir)
    try:
        state = read_state(exp_dir, summary=True)
        if trial_count(exp_dir) or (manager_alive(state) and state.manager_pid != os.getpid()):
            return False
    except NnixError:
        pass  # no readable store: nothing worth keeping
    shutil.rmtree(exp_dir, ignore_errors=True)
    registry.remove(entry.id)
    return True


SECRETS_FILE = "secrets.json"


def write_secrets(exp_dir: Path, values: dict[str, str]) -> None:
    """Keep the config's secrets (SSH passwords, ...) beside the store, readable by the owner only."""
    if not values:
        return
    fd = os.open(exp_dir / SECRETS_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(values, f)


def read_secrets(exp_dir: Path) -> dict[str, str]:
    try:
        data = json.loads((exp_dir / SECRETS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def build_algorithm(kind: Kind, algo: AlgorithmConfig) -> tuple[Any, Direction]:
    """Instantiate a tuner or assessor from its config section; its direction from ``optimize_mode``."""
    cls = resolve(kind, algo.ref())
    args_model = getattr(cls, "Args", None)
    if args_model is None:  # an NNI-style class (generate_parameters / assess_trial), run unchanged
        from nnix.tuners.nni_adapter import adapt

        adapted = adapt(kind, cls, dict(algo.class_args))
        if adapted is None:
            raise TunerError(
                f"{algo.class_name or algo.name} is neither an nnix {kind} (no Args model) nor an NNI-style one",
                "an nnix tuner has `Args` + `suggest`; an NNI-style tuner has `generate_parameters` "
                "(an assessor: `assess_trial`), built as cls(**classArgs)",
            )
        return adapted
    args = args_model.model_validate(algo.class_args)
    mode = getattr(args, "optimize_mode", None)
    direction = Direction(mode) if mode in ("maximize", "minimize") else Direction.MAXIMIZE
    return cls(args), direction


def tuner_direction(config: ExperimentConfig) -> str:
    """The direction the tuner optimises: its ``optimize_mode``, its own default included (TPE and
    Anneal minimise by default, most others maximise), so that "best" means what the tuner means."""
    try:
        cls = resolve("tuner", config.tuner.ref())
        args_model = getattr(cls, "Args", None)
        args = args_model.model_validate(config.tuner.class_args) if args_model else None
        mode = getattr(args, "optimize_mode", None) if args else config.tuner.class_args.get("optimize_mode")
    except Exception:  # the config was validated already; never fail creation over a display detail
        mode = config.tuner.class_args.get("optimize_mode")
    return str(mode) if mode in ("maximize", "minimize") else "maximize"


def build_tuner(config: ExperimentConfig) -> tuple[Tuner, Direction]:
    tuner, direction = build_algorithm("tuner", config.tuner)
    return tuner, direction


ServiceFactory = Callable[[Callable[[RunnerEvent], None]], TrainingService]


def service_factory(
    config: ExperimentConfig, context: ServiceContext | None = None, **options: Any
) -> ServiceFactory:
    """The training service for ``config``, found by platform name in entry points ``nnix.services``.
    ``context`` (experiment id and directory) is passed to services that need it (remote ones do)."""
    platform = config.training_service.platform
    cls = options.pop("service_class", None)  # tests: the shared part of a service family with a fake engine
    if cls is None:
        eps = {ep.name: ep for ep in entry_points(group="nnix.services")}
        if platform not in eps:
            raise TunerError(f"training service {platform!r} is not installed", f"installed: {', '.join(eps)}")
        cls = eps[platform].load()

    def make(emit: Callable[[RunnerEvent], None]) -> TrainingService:
        extra = {"context": context} if context is not None else {}
        service: TrainingService = cls.from_config(config, emit, **extra, **options)
        return service

    return make


def build_manager(
    exp_dir: Path, *, exit_when_done: bool = True, service: ServiceFactory | None = None, **service_options: Any
) -> ExperimentManager:
    """The manager of the experiment in ``exp_dir``; ``service``: a training service of the caller's instead of
    the configured one (tests: :class:`nnix.testing.FakeService`)."""
    store = SqliteStore(exp_dir / STORE_NAME, create=False)
    state = fold(store.read(kinds=("ExperimentCreated",)))
    config = ExperimentConfig.model_validate(restore_secrets(state.config, read_secrets(exp_dir)))
    tuner, direction = build_tuner(config)
    assessor: Assessor | None = None
    if config.assessor is not None:
        assessor, _ = build_algorithm("assessor", config.assessor)
    return ExperimentManager(
        store=store,
        exp_dir=exp_dir,
        tuner=tuner,
        direction=direction,
        service_factory=service or service_factory(config, ServiceContext(state.experiment_id, exp_dir),
                                                   **service_options),
        assessor=assessor,
        exit_when_done=exit_when_done,
    )


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
        from nnix.cli.run import run_manager

        if not wait_completion:
            self.start(port, debug)
            return None
        self._debug(debug)
        created = self.id is None
        if self.id is None:
            self.id, _ = create(self.config, None)
        try:
            outcome = run_manager(self.id, "create", port=port, live=False)
        except NnixError:
            if created and discard_unstarted(self.id):
                self.id = None
            raise
        self.exit_code = outcome.exit_code
        return self.exit_code == 0

    def start(self, port: int = 8080, debug: bool = False) -> str:
        """Start a background manager (a daemon) and return the experiment id (``debug``: as :meth:`run`)."""
        from nnix.cli.run import spawn_daemon

        self._debug(debug)
        created = self.id is None
        if self.id is None:
            self.id, _ = create(self.config, None)
        try:
            self._daemon_pid = spawn_daemon(self.id, "create", port)
        except NnixError:
            if created and discard_unstarted(self.id):
                self.id = None
            raise
        return self.id

    def _debug(self, debug: bool) -> None:
        if debug and self.id is None:  # an experiment already created keeps the level it was created with
            self.config = self.config.model_copy(update={"debug": True, "log_level": "debug"})

    def stop(self) -> None:
        from nnix.cli.control import stop_experiment

        if self.id is not None:
            stop_experiment(self.id)
