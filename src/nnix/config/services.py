"""The training services' config models, and the ``platform`` table they are chosen from.

Each platform has one model: a ``platform: Literal["name"]`` field, its own fields, and optionally a
``cross_check`` method for rules that need the experiment's ``trial_gpu_number``. Which models exist is
read from the entry points ``nnix.training_services`` (platform name → model class) the first time a
config is validated, so a third-party training service adds its platform by declaring an entry point in
its own package; nothing inside nnix is edited. nnix's own platforms are declared the same way (in its
``pyproject.toml``); :data:`BUILT_IN_PLATFORMS` stands in for them when nnix is installed without its
entry points (an outdated editable install).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol, Union, get_args, runtime_checkable

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    SecretStr,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

from nnix.config.fields import (
    AbsPath,
    Duration,
    ExistingDir,
    GpuIndices,
    NonEmpty,
    NonNegativeInt,
    Port,
    PositiveInt,
    Problem,
    StrictBool,
    _Model,
    parse_duration,
)
from nnix.limits import brief
from nnix.registry import entry_point_group as entry_points  # (one scan of the installed distributions)

__all__ = [
    "BUILT_IN_PLATFORMS",
    "ENTRY_POINT_GROUP",
    "ClusterCommonConfig",
    "FrameworkAttemptCompletionPolicy",
    "FrameworkControllerConfig",
    "FrameworkControllerRoleConfig",
    "HybridConfig",
    "K8sStorageConfig",
    "KubeflowConfig",
    "KubeflowRoleConfig",
    "KubernetesConfig",
    "LocalConfig",
    "OpenpaiConfig",
    "PlatformChoice",
    "RayConfig",
    "RemoteConfig",
    "RemoteMachineConfig",
    "ServiceConfig",
    "SingleServiceConfig",
    "SlurmConfig",
    "TrainingServiceConfig",
    "cross_check",
    "platform_problems",
    "training_service_platforms",
]

log = logging.getLogger("nnix.config")

ENTRY_POINT_GROUP = "nnix.training_services"
"""Entry point group: platform name → its config model (``local = "nnix.config.services:LocalConfig"``)."""


class _Deferred(_Model):
    """A model whose validator is built when it is first used, not at import: an experiment validates only
    its own platform's model (and those nested in it), so the others are never built."""

    model_config = ConfigDict(defer_build=True)


class ServiceConfig(_Deferred):
    """Base of a platform's config model (``extra="forbid"``, snake_case fields with camelCase aliases).

    A subclass adds ``platform: Literal["name"]`` and its fields; it overrides :meth:`cross_check` for rules
    that need the experiment's ``trial_gpu_number``.
    """

    def cross_check(self, trial_gpu_number: int | None) -> list[Problem]:
        """Problems of this service's fields given the experiment's ``trial_gpu_number`` (none by default)."""
        return []


@runtime_checkable
class CrossChecked(Protocol):
    """The optional ability of a platform's config model (every :class:`ServiceConfig`; a plugin's model may lack
    it) to check its fields against the experiment's ``trial_gpu_number``."""

    def cross_check(self, trial_gpu_number: int | None) -> list[Problem]: ...


def cross_check(service: BaseModel, trial_gpu_number: int | None) -> list[Problem]:
    """``service.cross_check(trial_gpu_number)``; a model without that method has no cross-field rules."""
    return list(service.cross_check(trial_gpu_number)) if isinstance(service, CrossChecked) else []


# --------------------------------------------------------------------------------------------------
# nnix's platforms


class LocalConfig(ServiceConfig):
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



class RemoteMachineConfig(_Deferred):
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


class RemoteConfig(ServiceConfig):
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


class ClusterCommonConfig(ServiceConfig):
    """Fields every cluster engine has (environments run the nnix agent; see :mod:`nnix.services.cluster`)."""

    reuse_mode: StrictBool = True
    """One environment (engine job) runs many trials, one after another; False: one job per trial."""
    idle_timeout: Duration = 60
    """Reuse mode: seconds an environment may stay without a trial before it is stopped (its job ends)."""


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


class K8sStorageConfig(_Deferred):
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


class KubeflowRoleConfig(_Deferred):
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


class FrameworkAttemptCompletionPolicy(_Deferred):
    min_failed_task_count: int = 1
    min_succeed_task_count: int = -1
    """NNI's v2 spelling (v1 and FrameworkController write ``minSucceededTaskCount``); -1: never by successes."""


class FrameworkControllerRoleConfig(_Deferred):
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
# The platform table and the unions built from it


class HybridConfig(ServiceConfig):
    """NNI's hybrid mode: ``trainingService`` given as a list of platform configs spreads the trials of
    one experiment over all of them. Written as a list in the config file; ``platform: hybrid`` is how
    nnix stores and shows it."""

    model_config = ConfigDict(defer_build=True)  # its union is read from entry points when first used

    platform: Literal["hybrid"]
    services: Annotated[list[SingleServiceConfig], Field(min_length=1)]

    def cross_check(self, trial_gpu_number: int | None) -> list[Problem]:
        problems = []
        for i, child in enumerate(self.services):
            for p in cross_check(child, trial_gpu_number):
                problems.append(Problem(("services", i, *p.loc), p.message, p.hint))
        return problems


BUILT_IN_PLATFORMS: dict[str, type[BaseModel]] = {
    "local": LocalConfig,
    "remote": RemoteConfig,
    "slurm": SlurmConfig,
    "ray": RayConfig,
    "kubernetes": KubernetesConfig,
    "kubeflow": KubeflowConfig,
    "frameworkcontroller": FrameworkControllerConfig,
    "openpai": OpenpaiConfig,
}
"""nnix's own platforms, as its ``pyproject.toml`` declares them in :data:`ENTRY_POINT_GROUP` (a test checks
that the two agree). Used for a platform the installed metadata does not declare."""


def _platform_tags(model: type[BaseModel]) -> tuple[Any, ...]:
    info = model.model_fields.get("platform")
    return get_args(info.annotation) if info is not None else ()


@cache
def _discover() -> tuple[dict[str, type[BaseModel]], dict[str, str]]:
    models: dict[str, type[BaseModel]] = {}
    problems: dict[str, str] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        name = ep.name
        if name in models or name == "hybrid":
            problems[name] = f"entry point {ep.value} ignored: platform {name!r} is declared twice"
            continue
        try:
            model = ep.load()
        except Exception as e:  # a broken third-party package must not break every config
            problems[name] = f"entry point {ep.value} cannot be loaded: {type(e).__name__}: {e}"
            continue
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            problems[name] = f"entry point {ep.value} is not a pydantic model"
        elif name not in _platform_tags(model):
            problems[name] = f"entry point {ep.value} has no field platform: Literal[{name!r}]"
        else:
            models[name] = model
    for name, problem in problems.items():
        log.warning("training service platform %r: %s", name, problem)
    for name, model in BUILT_IN_PLATFORMS.items():
        models.setdefault(name, model)
    return models, {name: why for name, why in problems.items() if name not in models}


def training_service_platforms() -> dict[str, type[BaseModel]]:
    """Supported ``platform`` values mapped to their config model: those of the entry points
    ``nnix.training_services`` (read once per process), nnix's built-in ones, and ``hybrid``."""
    return {**_discover()[0], "hybrid": HybridConfig}


def platform_problems() -> dict[str, str]:
    """Platforms declared by an entry point that cannot be used, with the reason (for error messages)."""
    return dict(_discover()[1])


@dataclass(frozen=True)
class PlatformChoice:
    """``Annotated`` marker of a field holding one platform's config, picked by its ``platform`` key among
    :func:`training_service_platforms` (with ``hybrid``: the list form too). The schema is made when a
    model using it is first validated, so entry points are read at load time, not at import."""

    hybrid: bool = False
    discriminator: str = "platform"

    def models(self) -> list[type[BaseModel]]:
        """The models this field may hold, without repeats."""
        table = training_service_platforms()
        if not self.hybrid:
            table.pop("hybrid")
        return list(dict.fromkeys(table.values()))

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        """A union tagged by ``platform`` (the same errors and locations as pydantic's discriminated union),
        whose members are validated by their own model: a platform's model is built only when a config
        uses it (building all of them took most of ``import nnix.config``)."""
        choices: dict[Hashable, CoreSchema] = {}
        for model in self.models():
            validate = _validator_of(model)
            for tag in _platform_tags(model):
                choices.setdefault(tag, core_schema.with_info_plain_validator_function(
                    validate, serialization=core_schema.plain_serializer_function_ser_schema(_dump, info_arg=True)))
        return core_schema.tagged_union_schema(choices, self.discriminator)


def _validator_of(model: type[BaseModel]) -> Callable[[Any, core_schema.ValidationInfo], Any]:
    def validate(value: Any, info: core_schema.ValidationInfo) -> Any:
        return model.model_validate(value, context=info.context)

    return validate


def _dump(value: Any, info: core_schema.SerializationInfo) -> Any:
    """A platform's config dumped by its own model, with the caller's options (a plain validator function has
    no serializer of its own: pydantic would guess, and warn)."""
    if not isinstance(value, BaseModel):
        return value
    return value.model_dump(mode=info.mode, by_alias=bool(info.by_alias), exclude_unset=info.exclude_unset,
                            exclude_defaults=info.exclude_defaults, exclude_none=info.exclude_none,
                            round_trip=info.round_trip)


def _hybrid_from_list(value: Any) -> Any:
    if isinstance(value, list):
        return {"platform": "hybrid", "services": value}
    return value


if TYPE_CHECKING:  # what nnix's own code sees; at run time the entry points decide
    SingleServiceConfig = Union[  # noqa: UP007
        LocalConfig, RemoteConfig, SlurmConfig, RayConfig, KubernetesConfig, KubeflowConfig,
        FrameworkControllerConfig, OpenpaiConfig,
    ]
    TrainingServiceConfig = Union[SingleServiceConfig, HybridConfig]  # noqa: UP007
else:
    SingleServiceConfig = Annotated[ServiceConfig, PlatformChoice()]
    TrainingServiceConfig = Annotated[ServiceConfig, PlatformChoice(hybrid=True), BeforeValidator(_hybrid_from_list)]


def hybrid_loc(loc: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """``training_service.services.<i>.<tag>.x`` (hybrid, as stored) → ``training_service.<i>.x`` (as written)."""
    if len(loc) > 2 and loc[0] == "training_service" and loc[1] == "services" and isinstance(loc[2], int):
        rest = loc[3:]
        if rest and rest[0] in training_service_platforms():
            rest = rest[1:]
        return (loc[0], loc[2], *rest)
    return loc
