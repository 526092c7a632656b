"""The experiment configuration: ONE native schema (pydantic v2) and its loader.

Field names are snake_case; the JSON/REST form (:meth:`ExperimentConfig.to_json`) uses NNI's camelCase
keys. NNI's YAML dialects (v2 camelCase or snake_case keys, legacy v1) are translated to this schema at
the edge by :mod:`nnix.compat.nni_config`; nothing else in nnix knows about them.

:func:`load_config` / :func:`parse_config` report every problem of a file at once as a
:class:`~nnix.errors.ConfigError`, each issue with the path the user wrote (``trainingService.gpuIndices``,
``trial.command`` for a v1 file) and a hint.

Built directly in Python, the models validate the same rules; relative paths then resolve against the
current directory (as in NNI's Python API) instead of the config file's directory.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NamedTuple, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from nnix import limits
from nnix.documents import DocumentError, load_json, load_yaml, read_text
from nnix.errors import ConfigError, FieldIssue
from nnix.limits import brief
from nnix.registry import AlgorithmRef, Kind, algorithm_issues

if TYPE_CHECKING:
    from nnix.compat.nni_config import Loc, Translation

__all__ = [
    "AlgorithmConfig",
    "ExperimentConfig",
    "LoadedConfig",
    "LocalConfig",
    "RemoteConfig",
    "RemoteMachineConfig",
    "TrainingServiceConfig",
    "load_config",
    "parse_config",
    "parse_duration",
    "parse_gpu_indices",
    "training_service_platforms",
]

# Validation-context keys. ``base_dir``: what relative paths resolve against. ``_LOADER``: the loader
# runs the cross-field and search-space checks itself (to report them with exact paths, all at once).
_BASE_DIR = "base_dir"
_LOADER = "nnix_loader"

DURATION_HINT = "use a number plus one of d, h, m, s, e.g. 2h"
GPU_INDICES_HINT = 'a GPU index, a list of them, or a comma-separated string, e.g. [0, 1] or "0,1"'


class Problem(NamedTuple):
    """A cross-field problem found on a validated model; ``loc`` is relative to that model (snake_case).

    ``message`` and ``hint`` may name fields as ``{path}`` (the field at ``loc``) or ``{field_name}``
    (a top-level field); :meth:`render` spells them as the user did.
    """

    loc: tuple[str | int, ...]
    message: str
    hint: str | None = None

    def render(self, loc: tuple[str | int, ...], path_of: Callable[[tuple[str | int, ...]], str]) -> FieldIssue:
        """The issue at ``loc`` (this problem's full location), with field names spelled by ``path_of``."""
        names = _FieldNames(path_of, loc)
        hint = self.hint.format_map(names) if self.hint else None
        return FieldIssue(path_of(loc), self.message.format_map(names), hint)


class _FieldNames(dict[str, str]):
    def __init__(self, path_of: Callable[[tuple[str | int, ...]], str], loc: tuple[str | int, ...]) -> None:
        super().__init__()
        self.path_of = path_of
        self.loc = loc

    def __missing__(self, key: str) -> str:
        return self.path_of(self.loc if key == "path" else (key,))


# --------------------------------------------------------------------------------------------------
# Value parsers (also usable on their own)


class BadValue(ValueError):
    """A value that cannot be parsed, with a hint for fixing it."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([dhms]?)\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: Any) -> int:
    """Seconds in an NNI duration: ``number + unit`` (d/h/m/s, any case, float allowed), rounded up.

    A bare number is seconds. Raises :class:`ValueError` on anything else.
    """
    if isinstance(value, bool):
        raise ValueError(f"invalid duration {brief(value)}")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"invalid duration {brief(value)}")
        amount, unit = Decimal(repr(value)), ""
    elif isinstance(value, str):
        match = _DURATION_RE.match(value)
        if match is None:
            raise ValueError(f"invalid duration {brief(value)}")
        try:
            amount = Decimal(match.group(1))
        except InvalidOperation as e:  # pragma: no cover - the regex admits only decimals
            raise ValueError(f"invalid duration {brief(value)}") from e
        unit = match.group(2).lower()
    else:
        raise ValueError(f"invalid duration {brief(value)}")
    return math.ceil(amount * _UNIT_SECONDS[unit])


def parse_gpu_indices(value: Any) -> list[int]:
    """NNI's GPU index forms (``1``, ``[0, 1]``, ``"0,1"``) as a list; negatives and duplicates rejected."""
    items: list[Any]
    if isinstance(value, bool):
        raise ValueError(f"expected GPU indices, got {brief(value)}")
    if isinstance(value, int):
        items = [value]
    elif isinstance(value, str):
        parts = [p.strip() for p in value.split(",")]
        items = []
        for part in parts:
            if not re.fullmatch(r"-?\d+", part):
                raise ValueError(f"{brief(part)} in {brief(value)} is not a GPU index")
            items.append(int(part))
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise ValueError(f"expected GPU indices, got {brief(value)}")
    seen: set[int] = set()
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int):
            raise ValueError(f"{brief(item)} is not a GPU index")
        if item < 0:
            raise BadValue(f"GPU index {item} is negative", "GPU indices start at 0")
        if item in seen:
            raise BadValue(f"GPU index {item} is listed twice", "list each GPU once")
        seen.add(item)
    return items


def _duration(value: Any) -> Any:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as e:
        raise PydanticCustomError("duration", str(e), {"hint": DURATION_HINT}) from None


def _gpu_indices(value: Any) -> Any:
    if value is None:
        return None
    try:
        return parse_gpu_indices(value)
    except ValueError as e:
        hint = e.hint if isinstance(e, BadValue) else GPU_INDICES_HINT
        raise PydanticCustomError("gpu_indices", str(e), {"hint": hint}) from None


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def _base_dir(info: ValidationInfo) -> Path:
    ctx = info.context
    if isinstance(ctx, dict) and ctx.get(_BASE_DIR) is not None:
        return Path(ctx[_BASE_DIR])
    return Path.cwd()


def _from_loader(info: ValidationInfo) -> bool:
    ctx = info.context
    return isinstance(ctx, dict) and bool(ctx.get(_LOADER))


def resolve_path(value: str | Path, base_dir: Path) -> Path:
    """``~`` expanded, relative to ``base_dir``, absolute and normalised (symlinks resolved)."""
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = base_dir / path
    return Path(os.path.realpath(path))


def _resolve(value: Path, info: ValidationInfo) -> Path:
    return resolve_path(value, _base_dir(info))


def _existing_dir(value: Path) -> Path:
    if not value.exists():
        raise PydanticCustomError("path_missing", "directory {path} does not exist", {"path": str(value)})
    if not value.is_dir():
        raise PydanticCustomError("path_not_dir", "{path} is not a directory", {"path": str(value)})
    return value


def _non_empty(value: str) -> str:
    if not value.strip():
        raise PydanticCustomError("empty", "must not be empty", {"hint": "e.g. python3 train.py"})
    return value


def _default_home() -> Path:
    env = os.environ.get("NNIX_HOME")
    if env:
        return Path(os.path.realpath(Path(env).expanduser()))
    return Path.home() / "nni-experiments"


def _host_name(value: str) -> str:
    from nnix.api.security import check_host_name

    try:
        return check_host_name(value)
    except ValueError as e:
        hint = "e.g. allowedHosts: [myhost.lan]"
        raise PydanticCustomError("host_name", "{why}", {"why": str(e), "hint": hint}) from e


AbsPath = Annotated[Path, AfterValidator(_resolve)]
ExistingDir = Annotated[Path, AfterValidator(_resolve), AfterValidator(_existing_dir)]
def _bounded(name: str) -> Callable[[int], int]:
    """An after-validator holding an int to ``nnix.limits.BOUNDS[name]`` (the bounds REST uses too)."""
    bound = limits.BOUNDS[name]

    def check(value: int) -> int:
        problem = bound.problem(value)
        if problem is not None:
            raise PydanticCustomError("bound", problem, {"hint": bound.hint})
        return value

    return check


_AnyDuration = Annotated[int, BeforeValidator(_duration), Field(strict=True, gt=0)]
Duration = Annotated[_AnyDuration, AfterValidator(_bounded("duration"))]
GpuIndices = Annotated[list[int], BeforeValidator(_gpu_indices)]
PositiveInt = Annotated[int, Field(strict=True, gt=0)]
NonNegativeInt = Annotated[int, Field(strict=True, ge=0)]
StrictBool = Annotated[bool, Field(strict=True)]


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        loc_by_alias=False,
    )


# --------------------------------------------------------------------------------------------------
# Algorithms


class AlgorithmConfig(_Model):
    """A tuner or an assessor: built-in (``name``) or custom (``class_name`` = ``module.Class``).

    Built-in ⇔ ``name`` is set and neither ``class_name`` nor ``code_directory`` is. Custom ⇔
    ``class_name`` is set. Deviation from NNI: a custom algorithm's ``code_directory`` is optional and
    defaults to the config file's directory (the current directory when built in Python); NNI
    requires it for v2 configs.
    """

    name: str | None = None
    class_name: str | None = None
    code_directory: ExistingDir | None = None
    class_args: dict[str, Any] = Field(default_factory=dict)

    @field_validator("class_args", mode="before")
    @classmethod
    def _null_args(cls, value: Any) -> Any:
        return {} if value is None else value

    @model_validator(mode="after")
    def _built_in_or_custom(self, info: ValidationInfo) -> AlgorithmConfig:
        if self.name is not None and self.class_name is not None:
            raise PydanticCustomError(
                "algorithm_kind",
                "set either name (a built-in algorithm) or className (a custom class), not both",
                {"hint": "remove one of them"},
            )
        if self.name is None and self.class_name is None:
            raise PydanticCustomError(
                "algorithm_kind",
                "no algorithm: set name (a built-in algorithm) or className (a custom class)",
                {"hint": "e.g. name: TPE"},
            )
        if self.name is not None and self.code_directory is not None:
            raise PydanticCustomError(
                "algorithm_kind",
                "codeDirectory is only for a custom algorithm (className)",
                {"hint": "remove codeDirectory, or use className instead of name"},
            )
        if self.class_name is not None and self.code_directory is None:
            self.code_directory = _base_dir(info)
        return self

    def ref(self) -> AlgorithmRef:
        """What :mod:`nnix.registry` needs to find the class."""
        return AlgorithmRef(name=self.name, class_name=self.class_name, code_directory=self.code_directory)


# --------------------------------------------------------------------------------------------------
# Training services. Add a platform by writing its model (with a ``platform: Literal[...]`` field and
# a ``cross_check`` method) and adding it to the ``TrainingServiceConfig`` union.


class LocalConfig(_Model):
    """``platform: local``: trials run as processes on this machine."""

    platform: Literal["local"]
    use_active_gpu: StrictBool | None = None
    max_trial_number_per_gpu: PositiveInt = 1
    gpu_indices: GpuIndices | None = None
    reuse_mode: StrictBool = False

    def cross_check(self, trial_gpu_number: int | None) -> list[Problem]:
        """Rules that need the experiment's ``trial_gpu_number``."""
        problems = []
        if trial_gpu_number is not None and trial_gpu_number > 0 and self.use_active_gpu is None:
            problems.append(
                Problem(
                    ("use_active_gpu",),
                    "must be set explicitly when {trial_gpu_number} > 0",
                    "set {path}: false (or true to share GPUs with other processes)",
                )
            )
        if trial_gpu_number is None and self.max_trial_number_per_gpu != 1:
            problems.append(
                Problem(
                    ("max_trial_number_per_gpu",),
                    "must stay 1 unless {trial_gpu_number} is set",
                    "set {trial_gpu_number}, or remove {path}",
                )
            )
        return problems


def _non_empty_text(value: str) -> str:
    if not value.strip():
        raise PydanticCustomError("empty", "must not be empty")
    return value


Port = Annotated[int, Field(strict=True, ge=1, le=65535)]
NonEmpty = Annotated[str, AfterValidator(_non_empty_text)]


class RemoteMachineConfig(_Model):
    """One SSH worker of ``platform: remote``.

    ``password`` and ``ssh_passphrase`` are secrets: they are masked wherever the config is shown or
    stored (the experiment's event log keeps ``**********``; the real values live in the experiment
    directory's ``secrets.json``, mode 0600, so that a resumed experiment can still log in).
    """

    host: NonEmpty
    port: Port = 22
    user: NonEmpty
    password: SecretStr | None = None
    ssh_key_file: AbsPath | None = None
    """Private key; default ``~/.ssh/id_rsa`` when no password is given."""
    ssh_passphrase: SecretStr | None = None
    use_active_gpu: StrictBool = False
    max_trial_number_per_gpu: PositiveInt = 1
    gpu_indices: GpuIndices | None = None
    python_path: str | None = None
    """Directory prepended to ``PATH`` on the worker (where its ``python3`` lives)."""

    @property
    def label(self) -> str:
        """``user@host:port``, to name the machine in messages."""
        return f"{self.user}@{self.host}:{self.port}"


class RemoteConfig(_Model):
    """``platform: remote``: trials run on SSH workers, each running the nnix agent.

    Deviation from NNI 3.0: ``reuse_mode`` defaults to True. In nnix reuse and non-reuse run the same
    agent; reuse keeps one agent per machine for many trials (each trial still gets its own process
    group and output directory), which saves an SSH exec and a Python start per trial. Set it to False
    for one fresh agent per trial.
    """

    platform: Literal["remote"]
    machine_list: Annotated[list[RemoteMachineConfig], Field(min_length=1)]
    reuse_mode: StrictBool = True
    # nnix extensions
    trust_unknown_hosts: StrictBool = False
    """Accept hosts whose key is not in ``known_hosts_file`` (with a warning); a changed key is still refused."""
    known_hosts_file: AbsPath | None = None
    """Default ``~/.ssh/known_hosts``."""
    remote_work_dir: NonEmpty = "~/nnix-experiments"
    """Where experiments live on the workers (``~`` is the login user's home there)."""
    lost_host_policy: Literal["fail", "requeue"] = "fail"
    """What happens to the trials of a host that stops answering: FAILED, or back to the queue."""
    lost_host_timeout: Duration = 60
    """Seconds without any sign of life from a host's agents before the host counts as lost."""

    def cross_check(self, trial_gpu_number: int | None) -> list[Problem]:
        problems = []
        for i, m in enumerate(self.machine_list):
            if trial_gpu_number is None and m.max_trial_number_per_gpu != 1:
                problems.append(
                    Problem(
                        ("machine_list", i, "max_trial_number_per_gpu"),
                        "must stay 1 unless {trial_gpu_number} is set",
                        "set {trial_gpu_number}, or remove {path}",
                    )
                )
        return problems


class ClusterCommonConfig(_Model):
    """Fields every cluster engine has (environments run the nnix agent; see :mod:`nnix.services.cluster`)."""

    reuse_mode: StrictBool = True
    """One environment (engine job) runs many trials, one after another; False: one job per trial."""
    idle_timeout: Duration = 60
    """Reuse mode: seconds an environment may stay without a trial before it is stopped (its job ends)."""

    def cross_check(self, trial_gpu_number: int | None) -> list[Problem]:
        return []


# --- platform: slurm (owned by the Slurm module) --------------------------------------------------

_SLURM_TIME_RE = re.compile(r"^(?:\d+-)?\d+(?::\d+){0,2}$")
_SLURM_TIME_HINT = "e.g. 2h, 90m, or Slurm's own forms: 1:30:00 (H:MM:SS), 2-00:00:00 (D-HH:MM:SS)"


def _slurm_time(value: Any) -> Any:
    """A job time limit in Slurm's syntax: Slurm forms pass as written; an nnix duration with a unit (``2h``,
    ``90m``) becomes ``D-HH:MM:SS``. A bare number is refused: Slurm reads it as minutes, nnix as seconds."""
    if value is None:
        return None
    if isinstance(value, (bool, int, float)) or (
            isinstance(value, str) and re.fullmatch(r"\s*\d+(\.\d*)?\s*", value)):
        raise PydanticCustomError(
            "slurm_time", "{value} is ambiguous: Slurm reads a bare number as minutes, nnix as seconds",
            {"value": brief(value), "hint": f"write the unit, {_SLURM_TIME_HINT}"},
        )
    if not isinstance(value, str):
        raise PydanticCustomError("slurm_time", "{value} is not a time limit",
                                  {"value": brief(value), "hint": _SLURM_TIME_HINT})
    text = value.strip()
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return "UNLIMITED"
    if _SLURM_TIME_RE.match(text):
        if not any(int(n) for n in re.findall(r"\d+", text)):
            raise PydanticCustomError("slurm_time", "a time limit of zero means no limit to Slurm",
                                      {"hint": "remove timeLimit, or write UNLIMITED"})
        return text
    try:
        seconds = parse_duration(text)
    except ValueError:
        raise PydanticCustomError("slurm_time", "{value} is not a time limit",
                                  {"value": brief(value), "hint": _SLURM_TIME_HINT}) from None
    if seconds <= 0:
        raise PydanticCustomError("slurm_time", "the time limit must be positive", {"hint": _SLURM_TIME_HINT})
    days, rest = divmod(seconds, 86400)
    return f"{days}-{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"


_SLURM_MEMORY_RE = re.compile(r"^\s*(\d+)\s*(?:([KMGT])(?:I?B)?)?\s*$", re.IGNORECASE)


def _slurm_memory(value: Any) -> Any:
    """``--mem`` of each environment: a bare number is megabytes (as in Slurm); ``4G``, ``512MB``, ``2GiB``
    are normalised to Slurm's ``4G``, ``512M``, ``2G``."""
    if value is None:
        return None
    match = None
    if isinstance(value, int) and not isinstance(value, bool):
        match = _SLURM_MEMORY_RE.match(str(value))
    elif isinstance(value, str):
        match = _SLURM_MEMORY_RE.match(value)
    if match is None or int(match.group(1)) <= 0:
        raise PydanticCustomError("slurm_memory", "{value} is not an amount of memory",
                                  {"value": brief(value), "hint": "a positive number of megabytes, or e.g. 4G, 512M"})
    return f"{int(match.group(1))}{(match.group(2) or 'M').upper()}"


_SLURM_WORD_RE = re.compile(r"^[A-Za-z0-9_.,:+@=()/\-\[\]]+$")


def _slurm_word(value: str) -> str:
    """A value written into an ``#SBATCH`` line (partition, account, qos, gres): one word."""
    if not _SLURM_WORD_RE.match(value):
        raise PydanticCustomError(
            "slurm_word", "{value} is not a valid Slurm name",
            {"value": brief(value), "hint": "one word without spaces or quotes, as `sinfo` / `sacctmgr` show it"},
        )
    return value


_SBATCH_MANAGED = {
    "--job-name": "nnix names the jobs itself", "-J": "nnix names the jobs itself",
    "--output": "the agent's log goes to the shared working directory", "-o": "the agent's log goes to the "
    "shared working directory", "--error": "the agent's log goes to the shared working directory",
    "-e": "the agent's log goes to the shared working directory",
    "--chdir": "jobs start in their environment's directory", "-D": "jobs start in their environment's directory",
    "--array": "each environment is one job", "-a": "each environment is one job",
    "--wrap": "nnix writes the batch script", "--parsable": "nnix reads the job id itself",
    "--wait": "sbatch must return at once", "-W": "sbatch must return at once",
    "--test-only": "the job must really be submitted",
}


def _sbatch_option(value: str) -> str:
    """One extra ``sbatch`` option: ``--constraint=a100`` or ``#SBATCH --constraint=a100`` (kept as the part
    after ``#SBATCH``)."""
    text = value.strip()
    if "\n" in text or "\r" in text or "\0" in text:
        raise PydanticCustomError("sbatch_option", "must be one line", {"hint": "give each option as its own item"})
    if text.startswith("#SBATCH"):
        rest = text[len("#SBATCH"):]
        if not rest[:1].isspace():
            raise PydanticCustomError("sbatch_option", "{value} is not an #SBATCH line",
                                      {"value": brief(value), "hint": "e.g. #SBATCH --constraint=a100"})
        text = rest.strip()
    if not text.startswith("-") or text in ("-", "--"):
        raise PydanticCustomError(
            "sbatch_option", "{value} is not an sbatch option",
            {"value": brief(value), "hint": "an option as sbatch takes it, e.g. --constraint=a100 or "
                                           "#SBATCH --exclusive"},
        )
    name = re.split(r"[=\s]", text, maxsplit=1)[0]
    if not text.startswith("--") and len(name) > 2:
        name = name[:2]  # -J<name>
    if name in _SBATCH_MANAGED:
        raise PydanticCustomError("sbatch_option", "{name} is set by nnix: {why}",
                                  {"name": name, "why": _SBATCH_MANAGED[name], "hint": "remove it"})
    return text


SlurmTime = Annotated[str, BeforeValidator(_slurm_time)]
SlurmMemory = Annotated[str, BeforeValidator(_slurm_memory)]
SlurmWord = Annotated[NonEmpty, AfterValidator(_slurm_word)]
SbatchOption = Annotated[str, AfterValidator(_sbatch_option)]


class SlurmConfig(ClusterCommonConfig):
    """``platform: slurm`` (new in nnix): environments are ``sbatch`` jobs running the nnix agent.

    The manager runs where the Slurm commands work (a login node) and the nodes share its file system:
    trials run in ``trial_code_directory`` and write under ``shared_working_directory`` at the same paths
    on every node, and the manager reads their output there. Each job asks for the resources of one trial.
    In reuse mode a job runs trial after trial, so ``time_limit`` bounds the job, not each trial
    (``maxTrialDuration`` does that): when it is reached the running trial fails with Slurm's reason and new
    jobs are submitted for the trials left.
    """

    platform: Literal["slurm"]
    partition: SlurmWord | None = None
    """``--partition``; default the cluster's default partition."""
    account: SlurmWord | None = None
    """``--account`` to charge."""
    qos: SlurmWord | None = None
    """``--qos``."""
    time_limit: SlurmTime | None = None
    """``--time`` of each job: ``2h``, ``90m`` or Slurm's forms (``1:30:00``, ``2-00:00:00``, ``UNLIMITED``).
    Slurm rounds it up to whole minutes."""
    cpus_per_trial: PositiveInt = 1
    """``--cpus-per-task`` of each job."""
    memory: SlurmMemory | None = None
    """``--mem`` of each job: megabytes, or ``4G``, ``512M``; default the cluster's (``DefMemPerCPU``)."""
    gres: SlurmWord | None = None
    """``--gres`` of each job, e.g. ``gpu:a100:1``; default ``gpu:<trialGpuNumber>`` when that is above 0."""
    sbatch_options: list[SbatchOption] = Field(default_factory=list)
    """More ``sbatch`` options, one per item (``--constraint=a100``, ``#SBATCH --exclusive``); written as
    ``#SBATCH`` lines after nnix's own, so they win over ``partition``, ``timeLimit`` and the like."""
    setup_commands: list[str] = Field(default_factory=list)
    """Shell lines the job runs before the agent (``module load python/3.11``, ``source ~/venv/bin/activate``)."""
    python_executable: NonEmpty | None = None
    """The Python that runs the agent on the nodes (nnix importable there); default the manager's interpreter
    (a shared file system is assumed)."""
    shared_working_directory: AbsPath | None = None
    """Where job scripts, agent logs and trial outputs go (``envs/``, ``trials/``); it must be visible at the same
    path from the nodes. Default ``<experiment dir>/slurm``."""

    def cross_check(self, trial_gpu_number: int | None) -> list[Problem]:
        problems = []
        if self.gres is not None and "gpu" in self.gres.lower() and trial_gpu_number:
            problems.append(Problem(
                ("gres",), "asks for GPUs, and so does {trial_gpu_number}",
                "keep one: {path} (e.g. gpu:a100:1) or {trial_gpu_number} (becomes --gres=gpu:N)",
            ))
        return problems


# --- platform: ray (owned by the Ray module) ------------------------------------------------------


def _ray_resources(value: Any) -> Any:
    for name in value if isinstance(value, dict) else ():
        if name in ("CPU", "GPU"):
            raise PydanticCustomError(
                "ray_resource", "{name} is not a custom resource",
                {"name": name, "hint": "use numCpus / numGpus for CPUs and GPUs"},
            )
    return value


_RAY_ADDRESS_RE = re.compile(r"^(auto|(ray://)?(\[[0-9A-Fa-f:.]+\]|[^\s/:\[\]]+)(:\d{1,5})?)$")


def _ray_address(value: str) -> str:
    if not _RAY_ADDRESS_RE.match(value.strip()):
        raise PydanticCustomError(
            "ray_address", "{value} is not a Ray cluster address",
            {"value": brief(value), "hint": "host:port of the head (e.g. 10.0.0.5:6379), auto, or ray://host:10001"},
        )
    return value.strip()


RayAmount = Annotated[float, Field(strict=True, ge=0)]


class RayConfig(ClusterCommonConfig):
    """``platform: ray`` (new in nnix): environments are Ray actors running the nnix agent.

    Each environment is one actor holding ``num_cpus`` / ``num_gpus`` / ``resources`` of the cluster for as
    long as it lives (one trial at a time); its agent connects back to the manager. Trials run in
    ``trial_code_directory`` and write to ``working_directory`` at the same paths on every node: with more than
    one machine both must be on shared storage (NFS...).
    """

    platform: Literal["ray"]
    address: Annotated[NonEmpty, AfterValidator(_ray_address)] | None = None
    """The cluster to use: ``host:port`` of its head (the manager's machine must be a node of it), ``auto``
    (the cluster this machine belongs to), or ``ray://host:10001`` (Ray Client, needs ``ray[client]``).
    None: a private single-node Ray is started for the experiment on 127.0.0.1 and stopped with it."""
    num_cpus: RayAmount = 1
    """CPUs each environment (so each running trial) holds; fractions allowed."""
    num_gpus: RayAmount | None = None
    """GPUs each environment holds; default ``trialGpuNumber`` (0 when unset)."""
    resources: Annotated[dict[NonEmpty, RayAmount], BeforeValidator(_ray_resources)] = Field(default_factory=dict)
    """Custom Ray resources each environment holds, e.g. ``{"TPU": 1}`` or ``{"node:10.0.0.5": 0.01}``."""
    runtime_env: dict[str, Any] | None = None
    """Ray runtime environment of the actors (``env_vars``, ``pip``, ``conda``...), passed through as is."""
    python_executable: NonEmpty | None = None
    """The Python that runs the agent on the nodes (nnix importable); default the manager's interpreter."""
    working_directory: AbsPath | None = None
    """Where agents and trials write (``envs/``, ``trials/``); default ``<experiment dir>/ray``. Must be
    shared storage when the cluster has more than one machine."""
    connect_timeout: Duration = 60
    """Seconds to wait for the cluster (or the private Ray) to answer."""


# --- platform: kubernetes, kubeflow, frameworkcontroller (owned by the Kubernetes module) ---------


def _memory_mb(value: Any) -> Any:
    """NNI's ``trialMemorySize``: MB as a number, or a size with a unit (``512mb``, ``8gb``, ``8g``)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", value.lower())
        if m:
            factor = {"k": 1 / 1024, "": 1, "m": 1, "g": 1024, "t": 1024 * 1024}[m.group(2)]
            return int(float(m.group(1)) * factor)
    raise PydanticCustomError("memory", "{value} is not a memory size",
                              {"value": brief(value), "hint": "MB as a number, or e.g. 512mb, 8gb"})


def _container_path(value: str) -> str:
    if not value.startswith("/"):
        raise PydanticCustomError("container_path", "must be an absolute path inside the containers",
                                  {"hint": "e.g. /mnt/nni"})
    return value.rstrip("/") or "/"


_K8S_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_K8S_QUANTITY_RE = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


def _k8s_name(value: str) -> str:
    if len(value) > 63 or not _K8S_NAME_RE.match(value):
        raise PydanticCustomError("k8s_name", "{value} is not a Kubernetes name",
                                  {"value": brief(value), "hint": "lowercase letters, digits and '-', at most 63"})
    return value


def _k8s_quantity(value: Any) -> Any:
    """A Kubernetes quantity (``2``, ``500m``, ``4Gi``); numbers become strings."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        value = f"{value:g}"
    if isinstance(value, str) and _K8S_QUANTITY_RE.match(value.strip()):
        return value.strip()
    raise PydanticCustomError("k8s_quantity", "{value} is not a Kubernetes quantity",
                              {"value": brief(value), "hint": "e.g. 2, 500m (CPUs) or 4Gi, 512Mi (memory)"})


def _k8s_memory(value: Any) -> Any:
    """NNI's ``memorySize``: megabytes as a number, ``8gb``-style sizes, or a Kubernetes quantity (``4Gi``)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{int(value)}Mi"
    if isinstance(value, str) and _K8S_QUANTITY_RE.match(value.strip()) and not value.strip().isdigit():
        return value.strip()
    try:
        return f"{_memory_mb(value)}Mi"
    except PydanticCustomError:
        raise PydanticCustomError("k8s_memory", "{value} is not a memory size",
                                  {"value": brief(value),
                                   "hint": "e.g. 4Gi, 512Mi (Kubernetes), 8gb, or MB as a number"}
                                  ) from None


def _no_registry_auth(value: Any) -> Any:
    if value is not None:
        raise PydanticCustomError(
            "unsupported", "privateRegistryAuthPath is not supported by nnix",
            {"hint": "create a docker-registry Secret in the namespace (kubectl create secret docker-registry ...); "
                     "the nodes pull with it"})
    return value


RegistryAuthPath = Annotated[Any, AfterValidator(_no_registry_auth)]
K8sName = Annotated[str, AfterValidator(_k8s_name)]
K8sQuantity = Annotated[str, BeforeValidator(_k8s_quantity)]
K8sMemory = Annotated[str, BeforeValidator(_k8s_memory)]


class K8sStorageConfig(_Model):
    """Where code, nnix itself and trial outputs live: a volume every environment mounts at
    ``containerMountPoint`` and the manager reads at ``localMountPoint``.

    NNI's ``nfs`` and ``azureStorage``, plus nnix's ``pvc`` (a PersistentVolumeClaim) and ``hostPath`` (a
    directory of the nodes: single-node clusters, or a path every node mounts)."""

    storage_type: Literal["nfs", "azureStorage", "pvc", "hostPath"]
    server: NonEmpty | None = None
    """nfs: the NFS server."""
    path: NonEmpty | None = None
    """nfs: the exported directory; hostPath: the directory on the nodes."""
    claim_name: K8sName | None = None
    """pvc: the PersistentVolumeClaim (ReadWriteMany, in the experiment's namespace)."""
    azure_account: NonEmpty | None = None
    azure_share: NonEmpty | None = None
    key_vault_name: NonEmpty | None = None
    key_vault_key: NonEmpty | None = None
    """azureStorage: the Key Vault secret holding the storage account key (read with ``az keyvault``)."""
    local_mount_point: AbsPath | None = None
    """Where this storage is mounted on the manager's machine. nfs without it: nnix mounts the export under
    the experiment directory (``mount -t nfs``, through ``sudo`` when not root; NNI does the same). hostPath:
    defaults to ``path`` (the manager runs on a node). pvc and azureStorage: required."""
    container_mount_point: Annotated[NonEmpty, AfterValidator(_container_path)] = "/tmp/mount"
    """Where the containers mount it (NNI's ``/tmp/mount``)."""

    @model_validator(mode="after")
    def _fields(self) -> K8sStorageConfig:
        need = {"nfs": ("server", "path"), "azureStorage": ("azure_account", "azure_share", "key_vault_name",
                                                            "key_vault_key"),
                "pvc": ("claim_name",), "hostPath": ("path",)}[self.storage_type]
        other = {"server", "path", "claim_name", "azure_account", "azure_share", "key_vault_name",
                 "key_vault_key"} - set(need)
        missing = [to_camel(f) for f in need if getattr(self, f) is None]
        extra = sorted(to_camel(f) for f in other if getattr(self, f) is not None)
        if missing:
            raise PydanticCustomError("storage", "storageType {kind} needs {fields}",
                                      {"kind": self.storage_type, "fields": ", ".join(missing),
                                       "hint": f"add {', '.join(missing)}"})
        if extra:
            raise PydanticCustomError("storage", "{fields} do not apply to storageType {kind}",
                                      {"kind": self.storage_type, "fields": ", ".join(extra), "hint": "remove them"})
        if self.storage_type == "hostPath" and not str(self.path).startswith("/"):
            raise PydanticCustomError("storage", "hostPath path must be absolute", {"hint": "e.g. /data/nnix"})
        if self.storage_type in ("pvc", "azureStorage") and self.local_mount_point is None:
            raise PydanticCustomError(
                "storage", "storageType {kind} needs localMountPoint",
                {"kind": self.storage_type,
                 "hint": "mount the volume on this machine and give its path: the manager reads trial outputs there"})
        return self


class _K8sCommon(ClusterCommonConfig):
    namespace: K8sName = "default"
    storage: K8sStorageConfig
    python_executable: NonEmpty = "python3"
    """nnix extension: the Python (>= 3.10) of the image that runs the agent; nnix itself comes from the storage."""
    kubeconfig: AbsPath | None = None
    """nnix extension: the kubeconfig to use; default ``$KUBECONFIG``, ``~/.kube/config``, then in-cluster."""
    context: NonEmpty | None = None
    """nnix extension: the kubeconfig context; default its current one."""


class KubernetesConfig(_K8sCommon):
    """``platform: kubernetes`` (new in nnix): environments are ``batch/v1`` Jobs running the nnix agent, one pod
    each, asking for the resources of one trial."""

    platform: Literal["kubernetes"]
    image: NonEmpty = "python:3.11-slim"
    """Any image with ``pythonExecutable`` (>= 3.10) and what the trials import; nnix comes from the storage."""
    cpu: K8sQuantity = "1"
    """CPU request and limit of each pod."""
    memory: K8sMemory = "2Gi"
    """Memory request and limit of each pod (``4Gi``; a number is MB)."""
    service_account_name: K8sName | None = None
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    """As in a pod spec, e.g. ``[{key: gpu, operator: Exists, effect: NoSchedule}]``."""
    image_pull_secrets: list[K8sName] = Field(default_factory=list)
    """Names of docker-registry Secrets of the namespace."""
    labels: dict[str, str] = Field(default_factory=dict)
    """More labels on the Jobs and their pods."""


class KubeflowRoleConfig(_Model):
    replicas: PositiveInt = 1
    command: str = ""
    """The primary role's command is the trial's (``trialCommand`` when empty); other roles run theirs as is."""
    gpu_number: NonNegativeInt = 0
    cpu_number: Annotated[float, Field(strict=False, gt=0)] = 1
    memory_size: K8sMemory = "2Gi"
    docker_image: NonEmpty = "msranni/nni:latest"
    code_directory: AbsPath | None = None
    private_registry_auth_path: RegistryAuthPath = None
    """Not supported by nnix (create a docker-registry Secret and reference it instead); refused with a hint."""


class KubeflowConfig(_K8sCommon):
    """``platform: kubeflow`` (NNI): environments are TFJob (tf-operator) or PyTorchJob (pytorch-operator)
    objects. The primary replica (TFJob worker 0, PyTorchJob master) runs the nnix agent and so the trials;
    the other replicas run their role's command."""

    platform: Literal["kubeflow"]
    operator: Literal["tf-operator", "pytorch-operator"]
    api_version: Literal["v1alpha2", "v1beta1", "v1beta2", "v1"]
    worker: KubeflowRoleConfig | None = None
    ps: KubeflowRoleConfig | None = None
    master: KubeflowRoleConfig | None = None

    @model_validator(mode="after")
    def _roles(self) -> KubeflowConfig:
        if self.operator == "tf-operator":
            if self.worker is None:
                raise PydanticCustomError("roles", "tf-operator needs a worker role", {"hint": "add worker: {...}"})
            if self.master is not None:
                raise PydanticCustomError("roles", "tf-operator has no master role",
                                          {"hint": "use worker (and ps)"})
        else:
            if self.master is None:
                raise PydanticCustomError("roles", "pytorch-operator needs a master role",
                                          {"hint": "add master: {...}"})
            if self.ps is not None:
                raise PydanticCustomError("roles", "pytorch-operator has no ps role",
                                          {"hint": "use master (and worker)"})
            if self.master.replicas != 1:
                raise PydanticCustomError("roles", "a PyTorchJob has exactly one master replica",
                                          {"hint": "set master.replicas: 1"})
        return self


class FrameworkAttemptCompletionPolicy(_Model):
    min_failed_task_count: int = 1
    min_succeed_task_count: int = -1
    """NNI's v2 spelling (v1 and FrameworkController write ``minSucceededTaskCount``); -1: never by successes."""


class FrameworkControllerRoleConfig(_Model):
    name: K8sName
    docker_image: NonEmpty = "msranni/nni:latest"
    task_number: PositiveInt = 1
    command: str = ""
    """The first role's command is the trial's (``trialCommand`` when empty); other tasks run theirs as is."""
    gpu_number: NonNegativeInt = 0
    cpu_number: Annotated[float, Field(strict=False, gt=0)] = 1
    memory_size: K8sMemory = "2Gi"
    framework_attempt_completion_policy: FrameworkAttemptCompletionPolicy = Field(
        default_factory=FrameworkAttemptCompletionPolicy)
    private_registry_auth_path: RegistryAuthPath = None


class FrameworkControllerConfig(_K8sCommon):
    """``platform: frameworkcontroller`` (NNI): environments are FrameworkController ``Framework`` objects.
    Task 0 of the first task role runs the nnix agent and so the trials; the other tasks run their command."""

    platform: Literal["frameworkcontroller"]
    service_account_name: K8sName | None = None
    task_roles: Annotated[list[FrameworkControllerRoleConfig], Field(min_length=1)]

    @model_validator(mode="after")
    def _unique(self) -> FrameworkControllerConfig:
        names = [r.name for r in self.task_roles]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise PydanticCustomError("roles", "task role names must be unique: {dup}",
                                      {"dup": ", ".join(dup), "hint": "rename one"})
        return self


# --- platform: openpai (owned by the OpenPAI module) ----------------------------------------------


class OpenpaiConfig(ClusterCommonConfig):
    """``platform: openpai`` (NNI): environments are OpenPAI jobs submitted through its REST API (job
    protocol v2). Code, the agent's nnix and the trials' outputs travel through the OpenPAI storage
    ``storageConfigName``, mounted here at ``localStorageMountPoint`` and in the containers at
    ``containerStorageMountPoint``. Not tested against a live OpenPAI cluster (see the README)."""

    platform: Literal["openpai"]
    host: NonEmpty
    """OpenPAI's address; ``https://`` is put in front when no scheme is given."""
    username: NonEmpty
    token: SecretStr
    trial_cpu_number: PositiveInt
    trial_memory_size: Annotated[PositiveInt, BeforeValidator(_memory_mb)]
    """Per trial, in MB (``8gb`` and the like are converted)."""
    storage_config_name: NonEmpty
    docker_image: NonEmpty = "msranni/nni:latest"
    """Any image with ``python3`` (>= 3.10): nnix itself comes from the shared storage."""
    virtual_cluster: str | None = None
    local_storage_mount_point: ExistingDir
    container_storage_mount_point: Annotated[NonEmpty, AfterValidator(_container_path)]
    openpai_config: dict[str, Any] | None = None
    """A full job protocol to start from (prerequisites, task role resources...); its task roles' commands
    run before the agent."""
    openpai_config_file: AbsPath | None = None

    @model_validator(mode="after")
    def _one_protocol(self) -> OpenpaiConfig:
        if self.openpai_config is not None and self.openpai_config_file is not None:
            raise PydanticCustomError("exclusive", "openpaiConfig and openpaiConfigFile are mutually exclusive",
                                      {"hint": "keep one of them"})
        return self

    def cross_check(self, trial_gpu_number: int | None) -> list[Problem]:
        if trial_gpu_number is None:
            return [Problem(("platform",), "platform openpai needs {trial_gpu_number}",
                            "set {trial_gpu_number} (0 for CPU-only trials)")]
        return []


# --------------------------------------------------------------------------------------------------

SingleServiceConfig = Annotated[
    Union[  # noqa: UP007
        LocalConfig, RemoteConfig, SlurmConfig, RayConfig, KubernetesConfig, KubeflowConfig,
        FrameworkControllerConfig, OpenpaiConfig,
    ],
    Field(discriminator="platform"),
]


class HybridConfig(_Model):
    """NNI's hybrid mode: ``trainingService`` given as a list of platform configs spreads the trials of
    one experiment over all of them. Written as a list in the config file; ``platform: hybrid`` is how
    nnix stores and shows it."""

    platform: Literal["hybrid"]
    services: Annotated[list[SingleServiceConfig], Field(min_length=1)]

    def cross_check(self, trial_gpu_number: int | None) -> list[Problem]:
        problems = []
        for i, child in enumerate(self.services):
            for p in child.cross_check(trial_gpu_number):
                problems.append(Problem(("services", i, *p.loc), p.message, p.hint))
        return problems


def _hybrid_from_list(value: Any) -> Any:
    if isinstance(value, list):
        return {"platform": "hybrid", "services": value}
    return value


TrainingServiceConfig = Annotated[
    Union[  # noqa: UP007
        LocalConfig, RemoteConfig, SlurmConfig, RayConfig, KubernetesConfig, KubeflowConfig,
        FrameworkControllerConfig, OpenpaiConfig, HybridConfig,
    ],
    Field(discriminator="platform"),
    BeforeValidator(_hybrid_from_list),
]


def training_service_platforms() -> dict[str, type[BaseModel]]:
    """Supported ``platform`` values mapped to their config model."""
    info = ExperimentConfig.model_fields["training_service"]
    annotation = info.annotation
    members = getattr(annotation, "__args__", None) or (annotation,)
    table: dict[str, type[BaseModel]] = {}
    for member in members:
        if isinstance(member, type) and issubclass(member, BaseModel):
            for tag in getattr(member.model_fields["platform"].annotation, "__args__", ()):
                table[str(tag)] = member
    return table


# --------------------------------------------------------------------------------------------------
# The experiment


class ExperimentConfig(_Model):
    """One HPO experiment. Durations are seconds; paths are absolute."""

    experiment_name: str | None = None
    search_space: dict[str, Any]
    search_space_file: AbsPath | None = None
    trial_command: Annotated[str, AfterValidator(_non_empty)]
    trial_code_directory: ExistingDir = Field(default=Path("."), validate_default=True)
    trial_concurrency: Annotated[PositiveInt, AfterValidator(_bounded("trial_concurrency"))]
    trial_gpu_number: Annotated[NonNegativeInt, AfterValidator(_bounded("trial_gpu_number"))] | None = None
    max_experiment_duration: Annotated[_AnyDuration, AfterValidator(_bounded("max_experiment_duration"))] | None = None
    max_trial_number: Annotated[PositiveInt, AfterValidator(_bounded("max_trial_number"))] | None = None
    max_trial_duration: Annotated[_AnyDuration, AfterValidator(_bounded("max_trial_duration"))] | None = None
    experiment_working_directory: AbsPath = Field(default_factory=_default_home, validate_default=True)
    log_level: Annotated[Literal["trace", "debug", "info", "warning", "error", "fatal"], BeforeValidator(_lower)] = (
        "info"
    )
    debug: StrictBool = False
    tuner: AlgorithmConfig
    assessor: AlgorithmConfig | None = None
    training_service: TrainingServiceConfig
    tuner_gpu_indices: GpuIndices | None = None
    nni_manager_ip: str | None = None
    # nnix extensions
    trial_params_as_args: StrictBool = False
    """Also append the parameters to the trial command as ``--name=value``."""
    nan_policy: Literal["error", "allow"] = "error"
    """What a NaN metric does: fail the trial (``error``) or be recorded as is (``allow``)."""
    allowed_hosts: list[Annotated[str, AfterValidator(_host_name)]] | None = None
    """More ``Host`` names the REST server answers besides its own (DNS-rebinding check); ``*``: any."""

    @model_validator(mode="after")
    def _checks(self, info: ValidationInfo) -> ExperimentConfig:
        if self.debug and "log_level" not in self.model_fields_set:
            self.log_level = "debug"
        if _from_loader(info):
            return self
        problems = self.training_service.cross_check(self.trial_gpu_number)
        lines = [p.render(_hybrid_loc(("training_service", *p.loc)), _camel_path).render() for p in problems]
        from nnix.space import validate as validate_space

        lines += [issue.render() for issue in validate_space(self.search_space, "searchSpace")]
        if lines:
            raise PydanticCustomError("experiment", "; ".join(lines))
        return self

    def to_json(self) -> dict[str, Any]:
        """NNI-style camelCase JSON (for display and REST); unset optional fields are left out."""
        data: dict[str, Any] = self.model_dump(by_alias=True, mode="json", exclude_none=True)
        return data


def config_secrets(model: BaseModel) -> dict[str, str]:
    """Every secret (``SecretStr``) value set in ``model``, by dotted snake_case path
    (``training_service.machine_list.0.password``). Stored configs hold masks instead; see
    :func:`restore_secrets`."""
    found: dict[str, str] = {}

    def walk(value: Any, path: str) -> None:
        if isinstance(value, SecretStr):
            found[path] = value.get_secret_value()
        elif isinstance(value, BaseModel):
            for name in type(value).model_fields:
                walk(getattr(value, name), f"{path}.{name}" if path else name)
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                walk(item, f"{path}.{i}")

    walk(model, "")
    return found


def restore_secrets(data: dict[str, Any], secrets: dict[str, str]) -> dict[str, Any]:
    """A copy of a stored (JSON) config with the secrets of :func:`config_secrets` put back."""
    out: Any = json.loads(json.dumps(data))
    for path, value in secrets.items():
        node = out
        *parents, last = path.split(".")
        try:
            for part in parents:
                node = node[int(part)] if isinstance(node, list) else node[part]
            if isinstance(node, list):
                node[int(last)] = value
            elif isinstance(node, dict):
                node[last] = value
        except (KeyError, IndexError, ValueError, TypeError):
            continue  # the config changed shape: that secret no longer applies
    result: dict[str, Any] = out
    return result


def _camel_path(loc: tuple[str | int, ...]) -> str:
    return ".".join(to_camel(p) if isinstance(p, str) else str(p) for p in loc)


# --------------------------------------------------------------------------------------------------
# Loading


@dataclass
class LoadedConfig:
    """A validated config, the warnings met on the way, and which NNI format the file was in."""

    config: ExperimentConfig
    warnings: list[str] = field(default_factory=list)
    format: Literal["v1", "v2"] = "v2"


def load_config(path: Path | str) -> LoadedConfig:
    """Read and validate a YAML (or JSON) config file. Raises :class:`ConfigError` with every problem."""
    file = Path(path).expanduser()
    source = str(file)
    try:
        text = read_text(file, "config file")
        data = load_yaml(text)
    except DocumentError as e:
        if e.message.endswith("is a directory, not a config file"):
            e.hint = "give the path of the YAML file, e.g. config.yml"
        raise ConfigError([_document_issue(e)], source=source) from None
    if data is None:
        raise ConfigError([FieldIssue("", "the file is empty")], source=source)
    return parse_config(data, Path(os.path.realpath(file.parent)), source=source)


def _document_issue(error: DocumentError, path: str = "", prefix: str = "") -> FieldIssue:
    """A reading problem as a field issue: the document's own key path after ``path``, and the line."""
    where = ".".join(p for p in (path, error.path) if p)
    line = f"at line {error.line}: " if error.line is not None else ""
    return FieldIssue(where, f"{prefix}{line}{error.message}", error.hint)


_MISSING_HINTS: dict[str, str] = {
    "trial_command": "the shell command that runs one trial, e.g. trialCommand: python3 train.py",
    "trial_concurrency": "how many trials may run at once, e.g. trialConcurrency: 2",
    "tuner": "e.g. tuner: {name: TPE, classArgs: {optimize_mode: maximize}}",
    "training_service": "e.g. trainingService: {platform: local}",
}


def parse_config(
    data: Any, base_dir: Path, source: str | None = None, style: Literal["camel", "snake"] | None = None
) -> LoadedConfig:
    """Validate an already-parsed config (v1 or v2, any key spelling); relative paths resolve against ``base_dir``.
    ``style``: how to spell the fields that errors name but the data does not (default: as most keys are).

    Raises :class:`ConfigError` listing every problem found.
    """
    from nnix.compat.nni_config import translate

    if not isinstance(data, dict):
        raise ConfigError(
            [FieldIssue("", f"a config is a mapping of keys to values, not a {type(data).__name__}")],
            source=source,
        )
    base_dir = Path(os.path.realpath(Path(base_dir).expanduser()))
    tr = translate(data)
    if style is not None:
        tr.style = style
    native = tr.data
    issues = list(tr.issues)
    context = {_BASE_DIR: base_dir, _LOADER: True}
    skip: set[tuple[str | int, ...]] = set(tr.suggested)  # 'missing' errors already explained

    issues += _load_search_space(native, tr, base_dir)
    skip.add(("search_space",))

    model: ExperimentConfig | None = None
    try:
        model = ExperimentConfig.model_validate(native, context=context)
    except ValidationError as e:
        for err in e.errors():
            loc = _strip_tags(tuple(err["loc"]))
            if loc[:1] in (("search_space",), ("search_space_file",)):
                continue  # checked above (and by nnix.space), with better messages
            if err["type"] == "missing" and loc in skip:
                continue
            issues.append(_issue_from_error(err, loc, tr))

    issues += _algorithm_issues(native, tr, context)
    issues += _cross_issues(native, tr, context)
    if issues:
        raise ConfigError(issues, source=source)
    assert model is not None
    warnings = list(tr.warnings)
    if model.tuner_gpu_indices is not None:
        from nnix.compat.nni_config import _remap, format_path

        key = format_path(_remap(tr.key_map.get(("tuner_gpu_indices",), ("tunerGpuIndices",)), tr.origins))
        warnings.append(
            f"{key} has no effect in nnix: the tuner runs in the manager process and nnix's tuners compute on "
            "the CPU (NNI set CUDA_VISIBLE_DEVICES of its tuner process); a custom tuner that uses a GPU "
            "chooses its device itself")
    return LoadedConfig(model, warnings, tr.format)


def _load_search_space(native: dict[str, Any], tr: Translation, base_dir: Path) -> list[FieldIssue]:
    """Fill ``search_space`` from ``search_space_file``; return every search-space problem."""
    from nnix.space import validate as validate_space

    has_inline = "search_space" in native
    has_file = "search_space_file" in native
    file_path = tr.path(("search_space_file",))
    if has_inline and has_file:
        return [
            FieldIssue(
                file_path,
                f"give the search space either inline ({tr.path(('search_space',))}) or as a file, not both",
                f"remove {tr.path(('search_space',))} or {file_path}",
            )
        ]
    if has_inline:
        return validate_space(native["search_space"], tr.path(("search_space",)))
    if not has_file:
        inline_path = tr.path(("search_space",))
        if inline_path == file_path:  # v1: only a file is possible
            hint = f"set {file_path} to a JSON or YAML file"
        else:
            hint = f"set {inline_path} (inline) or {file_path} (a JSON or YAML file)"
        return [FieldIssue(inline_path, "no search space", hint)]
    raw = native["search_space_file"]
    if not isinstance(raw, (str, Path)):
        return [FieldIssue(file_path, f"must be a file path, got {brief(raw)}")]
    path = resolve_path(raw, base_dir)
    native["search_space_file"] = str(path)
    try:
        text = read_text(path, "search space file")
    except DocumentError as e:
        if e.message.endswith("does not exist"):
            e.hint = "paths are relative to the config file"
        return [_document_issue(e, file_path)]
    try:
        space: Any = load_json(text)
    except DocumentError as e:
        return [_document_issue(e, file_path, f"in {path}: ")]
    except ValueError:
        try:
            space = load_yaml(text)
        except DocumentError as e:
            return [_document_issue(e, file_path, f"{path} is neither JSON nor YAML; ")]
    native["search_space"] = space
    return validate_space(space, f"{file_path}({raw})")


def _strip_tags(loc: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """Drop the union tag pydantic inserts after a discriminated field (``training_service.local.x``)."""
    if len(loc) > 1 and loc[0] == "training_service" and loc[1] in training_service_platforms():
        loc = (loc[0], *loc[2:])
    return _hybrid_loc(loc)


def _hybrid_loc(loc: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """``training_service.services.<i>.<tag>.x`` (hybrid, as stored) → ``training_service.<i>.x`` (as written)."""
    if len(loc) > 2 and loc[0] == "training_service" and loc[1] == "services" and isinstance(loc[2], int):
        rest = loc[3:]
        if rest and rest[0] in training_service_platforms():
            rest = rest[1:]
        return (loc[0], loc[2], *rest)
    return loc


def _issue_from_error(err: Any, loc: Loc, tr: Translation) -> FieldIssue:
    from nnix.compat.nni_config import NNI_PLATFORMS

    kind: str = err["type"]
    ctx: dict[str, Any] = err.get("ctx") or {}
    hint: str | None = ctx.get("hint")
    supported = ", ".join(sorted(p for p in training_service_platforms() if p != "hybrid"))
    hybrid_item = len(loc) == 2 and loc[0] == "training_service" and isinstance(loc[1], int)
    if kind in ("union_tag_invalid", "union_tag_not_found") and (loc == ("training_service",) or hybrid_item):
        path = tr.path((*loc, "platform"))
        if kind == "union_tag_not_found":
            return FieldIssue(path, "missing required field", f"supported platforms: {supported}")
        tag = str(ctx.get("tag"))
        if tag == "hybrid":
            return FieldIssue(path, "hybrid mode is written as a list of training services, not as a platform",
                              "trainingService: [{platform: local}, {platform: remote, machineList: [...]}]")
        if tag in NNI_PLATFORMS:
            what = f"platform {brief(tag)} is not supported by this nnix version yet"
        else:
            what = f"unknown platform {brief(tag)}"
        close = difflib.get_close_matches(tag.lower(), list(training_service_platforms()), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return FieldIssue(path, what, f"{hint}supported platforms: {supported}")
    path = tr.path(loc)
    if kind == "missing":
        return FieldIssue(path, "missing required field", _MISSING_HINTS.get(str(loc[-1])) if loc else None)
    if kind == "extra_forbidden":
        return FieldIssue(path, "unknown key")
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        hint = hint or (_MISSING_HINTS.get(str(loc[-1])) if len(loc) == 1 else None)
        return FieldIssue(path, f"must be a mapping of keys to values, got {_short(err.get('input'))}", hint)
    message: str = err["msg"]
    if kind in ("int_type", "bool_type", "string_type", "list_type", "literal_error") or (
        kind.startswith(("greater_than", "less_than")) or kind.endswith("_parsing")
    ):
        message = f"{message[0].lower()}{message[1:]}, got {_short(err.get('input'))}"
    return FieldIssue(path, message, hint)


def _short(value: Any) -> str:
    return brief(value, 60)


_ALGORITHM_FIELDS = {"name": "name", "className": "class_name", "classArgs": "class_args"}


def _algorithm_issues(native: dict[str, Any], tr: Translation, context: dict[str, Any]) -> list[FieldIssue]:
    """Registry checks (name, classArgs) of each algorithm section that is otherwise well-formed."""
    issues = []
    sections: tuple[Kind, ...] = ("tuner", "assessor")
    for section in sections:
        raw = native.get(section)
        if raw is None:
            continue
        try:
            algo = AlgorithmConfig.model_validate(raw, context=context)
        except ValidationError:
            continue  # already reported
        for issue in algorithm_issues(section, algo.ref(), algo.class_args, section):
            head, _, rest = issue.path.partition(".")
            field_name, _, tail = rest.partition(".")
            if head == section and field_name in _ALGORITHM_FIELDS:
                loc: Loc = (section, _ALGORITHM_FIELDS[field_name], *([p for p in tail.split(".")] if tail else []))
                issues.append(FieldIssue(tr.path(loc), issue.message, issue.hint))
            else:
                issues.append(issue)
    return issues


_SERVICE_ADAPTER: TypeAdapter[Any] = TypeAdapter(TrainingServiceConfig)


def _cross_issues(native: dict[str, Any], tr: Translation, context: dict[str, Any]) -> list[FieldIssue]:
    """Rules spanning the experiment and its training service, checked when both parts are well-formed."""
    gpus = native.get("trial_gpu_number")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0):
        return []
    try:
        service = _SERVICE_ADAPTER.validate_python(native.get("training_service"), context=context)
    except ValidationError:
        return []
    return [p.render(_hybrid_loc(("training_service", *p.loc)), tr.path) for p in service.cross_check(gpus)]
