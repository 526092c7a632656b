"""Experiments on this machine, before and around their manager: creating one (its directory, its store's
first event, its registry entry, its secrets), removing one that never started, and building the manager of
an existing one (tuner, assessor, training service) for :mod:`nnix.host.run`."""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

from nnix.assessors.base import Assessor
from nnix.config import AlgorithmConfig, ExperimentConfig, LoadedConfig, config_secrets, restore_secrets
from nnix.core.manager import ExperimentManager
from nnix.core.state import fold
from nnix.errors import NnixError, StoreError, TunerError
from nnix.home import STORE_NAME, Entry, Registry
from nnix.model.events import ExperimentCreated
from nnix.model.trials import Direction
from nnix.query import StoreReader
from nnix.registry import Kind, resolve
from nnix.services.base import ServiceContext, TrainingService
from nnix.services.factory import ServiceFactory, service_factory
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


def build_manager(
    exp_dir: Path,
    *,
    exit_when_done: bool = True,
    service_class: type[TrainingService] | None = None,
    service: ServiceFactory | None = None,
    **service_options: Any,
) -> ExperimentManager:
    """The manager of the experiment in ``exp_dir``, with its tuner, assessor and training service (``service_class``
    and ``service_options``: see :func:`nnix.services.factory.service_factory`; ``service``: a ready training
    service factory used instead of the configured one, e.g. tests' :class:`nnix.testing.FakeService`)."""
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
        service_factory=service or service_factory(
            config, ServiceContext(state.experiment_id, exp_dir), service_class=service_class, **service_options
        ),
        reader=StoreReader(),
        settings=config,
        assessor=assessor,
        exit_when_done=exit_when_done,
    )
