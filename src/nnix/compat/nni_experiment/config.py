"""NNI 3.0's Python config objects (``nni.experiment.config``), built attribute by attribute.

``ExperimentConfig('local')`` gives an object whose fields have NNI's snake_case names and NNI's defaults;
nested objects exist before they are touched (``config.tuner.name = 'TPE'``,
``config.tuner.class_args['optimize_mode'] = 'maximize'``, ``config.training_service.use_active_gpu = False``,
``config.training_service.machine_list.append(RemoteMachineConfig(...))``). Nothing is checked while it is
built; :meth:`ExperimentConfig.validate` (called by ``Experiment.start``) turns the fields the user set into
an NNI v2 config dict and gives it to the one native loader (:func:`nnix.config.parse_config`), so every
rule, default and message is the YAML path's, and errors name fields as written here (snake_case).

Fields the user never set are left out of that dict: they take nnix's defaults, which are NNI's except where
nnix documents a deviation (``RemoteConfig.reuse_mode`` is True in nnix; it is shown so here). Each platform
class also takes nnix's own fields of that platform (e.g. ``RemoteConfig.trust_unknown_hosts``), and
``SlurmConfig``/``RayConfig``/``KubernetesConfig`` exist for nnix's extra platforms.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from nnix import config as native
from nnix.config import LoadedConfig, parse_config
from nnix.config.nni import norm_key
from nnix.errors import ConfigError, FieldIssue

__all__ = [
    "AlgorithmConfig",
    "AmlConfig",
    "AzureBlobConfig",
    "ConfigBase",
    "CustomAlgorithmConfig",
    "DlcConfig",
    "ExperimentConfig",
    "FrameworkAttemptCompletionPolicy",
    "FrameworkControllerConfig",
    "FrameworkControllerRoleConfig",
    "K8sAzureStorageConfig",
    "K8sNfsConfig",
    "K8sStorageConfig",
    "KubeflowConfig",
    "KubeflowRoleConfig",
    "KubernetesConfig",
    "LocalConfig",
    "NfsConfig",
    "NniConfigError",
    "NotSupportedByNnixError",
    "OpenpaiConfig",
    "RayConfig",
    "RemoteConfig",
    "RemoteMachineConfig",
    "SharedStorageConfig",
    "SlurmConfig",
    "TrainingServiceConfig",
    "UnknownFieldError",
]


class NniConfigError(ConfigError, ValueError):
    """An invalid config built with the Python API (a ``ValueError``, as NNI's validation errors are)."""


class UnknownFieldError(NniConfigError, AttributeError):
    """A field name that the config class does not have (an ``AttributeError``, as in NNI)."""

    title = "unknown config field"


class NotSupportedByNnixError(NniConfigError):
    """An NNI feature that nnix does not provide (a platform, NAS)."""

    title = "not supported by nnix"


_UNSUPPORTED_PLATFORMS = {
    "aml": "Azure ML",
    "dlc": "Alibaba PAI-DLC",
    "adl": "AdaptDL (removed in NNI 3.0 too)",
    "dlts": "DLTS (removed in NNI 3.0 too)",
}


def _unsupported_platform(platform: str, where: str = "training_service.platform") -> NotSupportedByNnixError:
    return NotSupportedByNnixError(
        [FieldIssue(where, f"platform {platform!r} ({_UNSUPPORTED_PLATFORMS[platform]}) is not supported by nnix",
                    "supported: " + ", ".join(sorted(_PLATFORMS)))]
    )


# --------------------------------------------------------------------------------------------------
# Field declarations


class _Nested:
    """Default of a nested config object: a fresh one per instance (a placeholder until touched)."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self.factory = factory


class _ListOf:
    """Default of a list of config objects: a fresh empty list; dicts given in it become ``cls``."""

    def __init__(self, cls: type[ConfigBase]) -> None:
        self.cls = cls


class _Dict:
    """Default of a mapping field (``class_args``): a fresh empty dict."""


def _copy_default(default: Any) -> Any:
    if isinstance(default, _Nested):
        return default.factory()
    if isinstance(default, _ListOf):
        return []
    if isinstance(default, _Dict):
        return {}
    return default


class ConfigBase:
    """Fields are the class's annotated attributes (their class values are NNI's defaults), plus those of
    the nnix model named by ``_native`` that the class does not declare (with nnix's defaults)."""

    _native: ClassVar[type[BaseModel] | None] = None
    _fields: ClassVar[dict[str, Any]] = {}
    _index: ClassVar[dict[str, str]] = {}
    _set: set[str]
    """The fields given or assigned (they go into the config; the others take nnix's defaults)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            for name in vars(klass).get("__annotations__", {}):
                if name.startswith("_"):
                    continue
                fields[name] = vars(klass).get(name, fields.get(name))
        model = getattr(cls, "_native", None)
        if model is not None:
            for name, info in model.model_fields.items():
                if name not in fields and name != "platform":
                    default = None if info.is_required() else info.get_default(call_default_factory=True)
                    if isinstance(default, list):
                        default = default or _ListOf(ConfigBase)
                    elif isinstance(default, dict):
                        default = default or _Dict()
                    elif isinstance(default, Path):
                        default = str(default)
                    fields[name] = default
        cls._fields = fields
        cls._index = {norm_key(name): name for name in fields}

    def __init__(self, **kwargs: Any) -> None:
        object.__setattr__(self, "_set", set())
        for name, default in self._fields.items():
            object.__setattr__(self, name, _copy_default(default))
        unknown: list[str] = []
        for key, value in kwargs.items():
            found = self._index.get(norm_key(key))
            if found is None:
                unknown.append(key)
            else:
                setattr(self, found, value)
        if unknown:
            raise self._unknown(unknown)

    # --- attribute access ------------------------------------------------------------------------
    def _unknown(self, keys: list[str]) -> UnknownFieldError:
        issues = []
        for key in keys:
            close = difflib.get_close_matches(key, list(self._fields), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else "fields: " + ", ".join(self._fields)
            issues.append(FieldIssue("", f"{type(self).__name__} has no field {key!r}", hint))
        return UnknownFieldError(issues)

    def __setattr__(self, key: str, value: Any) -> None:
        name = self._index.get(norm_key(key))
        if name is None or key.startswith("_"):
            raise self._unknown([key])
        object.__setattr__(self, name, self._convert(name, value))
        self._set.add(name)

    def __getattr__(self, key: str) -> Any:  # only called when normal lookup failed: camelCase spellings
        if key.startswith("_"):
            raise AttributeError(key)
        name = type(self)._index.get(norm_key(key))
        if name is None or name == key:
            raise self._unknown([key])
        return getattr(self, name)

    def _convert(self, name: str, value: Any) -> Any:
        """A dict given for a nested object becomes that object (lists of them too)."""
        default = self._fields.get(name)
        if isinstance(default, _Nested) and isinstance(value, dict):
            template = default.factory()
            if isinstance(template, ConfigBase):
                return type(template)(**value)
        if isinstance(default, _ListOf) and default.cls is not ConfigBase and isinstance(value, list):
            return [default.cls(**v) if isinstance(v, dict) else v for v in value]
        return value

    # --- serialisation ---------------------------------------------------------------------------
    def _is_placeholder(self) -> bool:
        return False

    def _items(self) -> Iterator[tuple[str, Any]]:
        for name, default in self._fields.items():
            value = getattr(self, name)
            if value is None:
                continue  # None is the same as not set (NNI)
            if name in self._set or value != _copy_default(default):
                yield name, value

    def _to_data(self) -> dict[str, Any]:
        """The fields set (or changed in place), snake_case, as an NNI v2 config mapping."""
        out: dict[str, Any] = {}
        for name, value in self._items():
            if isinstance(value, ConfigBase) and value._is_placeholder() and name not in self._set:
                continue
            out[name] = _data(value)
        return out

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({fields})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self._fields)

    __hash__ = None  # type: ignore[assignment]  # mutable, like NNI's dataclasses


def _data(value: Any) -> Any:
    if isinstance(value, ConfigBase):
        return value._to_data()
    if isinstance(value, (list, tuple)):
        return [_data(v) for v in value]
    if isinstance(value, dict):
        return {k: _data(v) for k, v in value.items()}
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


# --------------------------------------------------------------------------------------------------
# Algorithms


class AlgorithmConfig(ConfigBase):
    """A built-in tuner or assessor by ``name`` (or a custom one by ``class_name``)."""

    _native = native.AlgorithmConfig
    name: str | None = None
    class_name: str | None = None
    code_directory: str | None = None
    class_args: dict[str, Any] = _Dict()  # type: ignore[assignment]

    def _is_placeholder(self) -> bool:
        return not self._set and not self.class_args


class CustomAlgorithmConfig(AlgorithmConfig):
    """A custom tuner or assessor: ``class_name`` (``module.Class``) found in ``code_directory``."""

    code_directory: str | None = "."

    def _to_data(self) -> dict[str, Any]:
        out = super()._to_data()
        out.setdefault("code_directory", self.code_directory)
        return out


# --------------------------------------------------------------------------------------------------
# Training services


class TrainingServiceConfig(ConfigBase):
    """Fields every platform has; they may also be set on the experiment (NNI's shortcuts)."""

    platform: str | None = None
    trial_command: str | None = None
    trial_code_directory: str | None = None
    trial_gpu_number: int | None = None
    nni_manager_ip: str | None = None
    debug: bool | None = None

    _platform: ClassVar[str] = ""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        given = self.platform
        if given is not None and given != self._platform:
            raise NniConfigError([FieldIssue("platform", f"{type(self).__name__} is platform {self._platform!r}, "
                                             f"not {given!r}")])
        object.__setattr__(self, "platform", self._platform)
        self._set.add("platform")


class LocalConfig(TrainingServiceConfig):
    _platform = "local"
    _native = native.LocalConfig
    use_active_gpu: bool | None = None
    max_trial_number_per_gpu: int = 1
    gpu_indices: list[int] | int | str | None = None
    reuse_mode: bool = False


class RemoteMachineConfig(ConfigBase):
    _native = native.RemoteMachineConfig
    host: str | None = None
    port: int = 22
    user: str | None = None
    password: str | None = None
    ssh_key_file: str | None = "~/.ssh/id_rsa"
    ssh_passphrase: str | None = None
    use_active_gpu: bool = False
    max_trial_number_per_gpu: int = 1
    gpu_indices: list[int] | int | str | None = None
    python_path: str | None = None



class RemoteConfig(TrainingServiceConfig):
    _platform = "remote"
    _native = native.RemoteConfig
    machine_list: list[RemoteMachineConfig] = _ListOf(RemoteMachineConfig)  # type: ignore[assignment]
    reuse_mode: bool = True  # nnix: one agent per machine runs many trials (NNI 3.0: False); see README


class FrameworkAttemptCompletionPolicy(ConfigBase):
    _native = native.FrameworkAttemptCompletionPolicy
    min_failed_task_count: int | None = None
    min_succeed_task_count: int | None = None


class K8sStorageConfig(ConfigBase):
    _native = native.K8sStorageConfig
    storage_type: str | None = None


class K8sNfsConfig(K8sStorageConfig):
    storage_type: str | None = "nfs"
    server: str | None = None
    path: str | None = None

    def _to_data(self) -> dict[str, Any]:
        return {"storage_type": self.storage_type, **super()._to_data()}


class K8sAzureStorageConfig(K8sStorageConfig):
    storage_type: str | None = "azureStorage"
    azure_account: str | None = None
    azure_share: str | None = None
    key_vault_name: str | None = None
    key_vault_key: str | None = None

    def _to_data(self) -> dict[str, Any]:
        return {"storage_type": self.storage_type, **super()._to_data()}


class KubeflowRoleConfig(ConfigBase):
    _native = native.KubeflowRoleConfig
    replicas: int | None = None
    command: str | None = None
    gpu_number: int | None = 0
    cpu_number: int | None = None
    memory_size: str | int | None = None
    docker_image: str = "msranni/nni:latest"
    code_directory: str | None = None


class KubeflowConfig(TrainingServiceConfig):
    _platform = "kubeflow"
    _native = native.KubeflowConfig
    operator: str | None = None
    api_version: str | None = None
    storage: K8sStorageConfig | None = None
    worker: KubeflowRoleConfig | None = None
    ps: KubeflowRoleConfig | None = None
    master: KubeflowRoleConfig | None = None
    reuse_mode: bool = True
    namespace: str = "default"


class FrameworkControllerRoleConfig(ConfigBase):
    _native = native.FrameworkControllerRoleConfig
    name: str | None = None
    docker_image: str = "msranni/nni:latest"
    task_number: int | None = None
    command: str | None = None
    gpu_number: int | None = None
    cpu_number: int | None = None
    memory_size: str | int | None = None
    framework_attempt_completion_policy: FrameworkAttemptCompletionPolicy | None = None


class FrameworkControllerConfig(TrainingServiceConfig):
    _platform = "frameworkcontroller"
    _native = native.FrameworkControllerConfig
    storage: K8sStorageConfig | None = None
    service_account_name: str | None = None
    task_roles: list[FrameworkControllerRoleConfig] = _ListOf(FrameworkControllerRoleConfig)  # type: ignore[assignment]
    reuse_mode: bool = True
    namespace: str = "default"


class OpenpaiConfig(TrainingServiceConfig):
    _platform = "openpai"
    _native = native.OpenpaiConfig
    host: str | None = None
    username: str | None = None
    token: str | None = None
    trial_cpu_number: int | None = None
    trial_memory_size: str | int | None = None
    storage_config_name: str | None = None
    docker_image: str = "msranni/nni:latest"
    virtual_cluster: str | None = None
    local_storage_mount_point: str | None = None
    container_storage_mount_point: str | None = None
    reuse_mode: bool = True
    openpai_config: dict[str, Any] | None = None
    openpai_config_file: str | None = None


class SlurmConfig(TrainingServiceConfig):
    """nnix's ``platform: slurm`` (not in NNI): fields as in nnix's YAML, snake_case."""

    _platform = "slurm"
    _native = native.SlurmConfig


class RayConfig(TrainingServiceConfig):
    """nnix's ``platform: ray`` (not in NNI)."""

    _platform = "ray"
    _native = native.RayConfig


class KubernetesConfig(TrainingServiceConfig):
    """nnix's ``platform: kubernetes`` (plain pods; not in NNI)."""

    _platform = "kubernetes"
    _native = native.KubernetesConfig


class _Unsupported(TrainingServiceConfig):
    """A platform NNI has and nnix does not: constructing it says so."""

    def __init__(self, **kwargs: Any) -> None:
        raise _unsupported_platform(self._platform, f"{type(self).__name__}")


class AmlConfig(_Unsupported):
    _platform = "aml"


class DlcConfig(_Unsupported):
    _platform = "dlc"


class SharedStorageConfig(ConfigBase):
    """NNI's ``sharedStorage`` (reuse mode): not supported by nnix; setting it is refused at validation."""

    storage_type: str | None = None
    local_mount_point: str | None = None
    remote_mount_point: str | None = None
    local_mounted: str | None = None


class NfsConfig(SharedStorageConfig):
    storage_type: str | None = "NFS"
    nfs_server: str | None = None
    exported_directory: str | None = None


class AzureBlobConfig(SharedStorageConfig):
    storage_type: str | None = "AzureBlob"
    storage_account_name: str | None = None
    storage_account_key: str | None = None
    container_name: str | None = None


_PLATFORMS: dict[str, type[TrainingServiceConfig]] = {
    c._platform: c
    for c in (LocalConfig, RemoteConfig, OpenpaiConfig, KubeflowConfig, FrameworkControllerConfig, SlurmConfig,
              RayConfig, KubernetesConfig)
}


def training_service_config(platform: Any) -> TrainingServiceConfig:
    """An empty config object of ``platform`` (NNI's ``ExperimentConfig('remote')``), or a clear error."""
    if not isinstance(platform, str):
        raise NniConfigError([FieldIssue("training_service", f"a platform name is a string, got {platform!r}",
                                         "e.g. 'local', or a list such as ['local', 'remote']")])
    key = platform.lower()
    if key in _UNSUPPORTED_PLATFORMS:
        raise _unsupported_platform(key)
    cls = _PLATFORMS.get(key)
    if cls is None:
        close = difflib.get_close_matches(key, list(_PLATFORMS), n=1)
        hint = (f"did you mean {close[0]!r}? " if close else "") + "supported: " + ", ".join(sorted(_PLATFORMS))
        if key == "hybrid":
            hint = "give a list of platforms instead, e.g. ExperimentConfig(['local', 'remote'])"
        if key.endswith((".yml", ".yaml", ".json")):
            hint = (f"{platform!r} looks like a config file: nnix.Experiment({platform!r}).run() runs a YAML "
                    "config; Experiment() here takes a platform name or an ExperimentConfig")
        raise NniConfigError([FieldIssue("training_service.platform", f"unknown platform {platform!r}", hint)])
    return cls()


def _service(value: Any) -> Any:
    if isinstance(value, dict):
        platform = next((v for k, v in value.items() if norm_key(k) == "platform"), None)
        config = training_service_config(platform)
        for k, v in value.items():
            if norm_key(k) != "platform":
                setattr(config, k, v)
        return config
    if isinstance(value, str):
        return training_service_config(value)
    if isinstance(value, (list, tuple)):
        return [_service(v) for v in value]
    return value


# --------------------------------------------------------------------------------------------------
# The experiment


class ExperimentConfig(ConfigBase):
    """An HPO experiment's config. ``ExperimentConfig('local')`` (or a list of platforms, NNI's hybrid mode)
    creates the training service object(s); ``tuner``, ``assessor`` and ``advisor`` are placeholders that
    count only once a field of theirs is set. Relative paths are relative to the current directory when the
    config is validated (``Experiment.start``/``run``, :meth:`validate`)."""

    _native = native.ExperimentConfig
    experiment_name: str | None = None
    search_space_file: str | None = None
    search_space: Any = None
    trial_command: str | None = None
    trial_code_directory: str = "."
    trial_concurrency: int | None = None
    trial_gpu_number: int | None = None
    max_experiment_duration: str | int | None = None
    max_trial_number: int | None = None
    max_trial_duration: str | int | None = None
    nni_manager_ip: str | None = None
    use_annotation: bool = False
    debug: bool = False
    log_level: str | None = None
    experiment_working_directory: str = "~/nni-experiments"
    tuner_gpu_indices: list[int] | int | str | None = None
    tuner: AlgorithmConfig | None = _Nested(AlgorithmConfig)  # type: ignore[assignment]
    assessor: AlgorithmConfig | None = _Nested(AlgorithmConfig)  # type: ignore[assignment]
    advisor: AlgorithmConfig | None = _Nested(AlgorithmConfig)  # type: ignore[assignment]
    training_service: TrainingServiceConfig | list[TrainingServiceConfig] | None = None
    shared_storage: SharedStorageConfig | None = None
    experiment_type: str = "hpo"

    def __init__(self, training_service_platform: str | list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if training_service_platform is not None:
            if "training_service" in self._set:
                raise NniConfigError([FieldIssue("training_service", "given twice: as the platform argument and "
                                                 "as training_service=", "keep one of them")])
            setattr(self, "training_service", training_service_platform)  # noqa: B010

    def _convert(self, name: str, value: Any) -> Any:
        if name == "training_service":
            return _service(value)
        if name == "experiment_type" and isinstance(value, str) and value.lower() == "nas":
            raise NotSupportedByNnixError([FieldIssue("experiment_type", "NAS experiments are not supported by nnix",
                                                      "nnix runs hyper-parameter tuning (experiment_type 'hpo')")])
        return super()._convert(name, value)

    def _items(self) -> Iterator[tuple[str, Any]]:
        for name, value in super()._items():
            if name == "experiment_type" and value == "hpo":
                continue
            yield name, value

    def to_nni_dict(self) -> dict[str, Any]:
        """The NNI v2 config mapping (snake_case keys) of the fields set; not validated."""
        return self._to_data()

    def validate(self, base_dir: str | os.PathLike[str] | None = None) -> LoadedConfig:
        """Validate with nnix's schema (the YAML path's rules and messages); relative paths resolve against
        ``base_dir`` (default: the current directory). Raises :class:`NniConfigError` listing every problem."""
        return self._load(base_dir=base_dir)

    def _load(self, debug: bool = False, base_dir: str | os.PathLike[str] | None = None) -> LoadedConfig:
        data = self.to_nni_dict()
        if debug:
            data["debug"] = True
        try:
            return parse_config(data, Path(base_dir if base_dir is not None else os.getcwd()), style="snake")
        except ConfigError as e:
            raise NniConfigError(e.issues) from None

    def json(self) -> dict[str, Any]:
        """The validated config as NNI's canonical camelCase JSON (nnix's, with its defaults filled in)."""
        return self.validate().config.to_json()

    @classmethod
    def from_native(cls, config: native.ExperimentConfig) -> ExperimentConfig:
        """An object of this class holding a stored (native) config, e.g. for ``load_checkpoint``."""
        data = config.model_dump(mode="json", exclude_none=True)
        service = data.pop("training_service")
        if service.get("platform") == "hybrid":
            service = service["services"]
        out = cls(**data)
        setattr(out, "training_service", service)  # noqa: B010
        return out
