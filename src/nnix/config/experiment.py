"""The experiment model: :class:`ExperimentConfig` (with its algorithms), and its secrets.

Secrets (``SecretStr`` fields, e.g. SSH passwords) are masked wherever a config is shown or stored;
:func:`config_secrets` lists them and :func:`restore_secrets` puts them back into a stored config.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from nnix.config.fields import (
    AbsPath,
    ExistingDir,
    GpuIndices,
    NonNegativeInt,
    PositiveInt,
    StrictBool,
    _AnyDuration,
    _base_dir,
    _bounded,
    _camel_path,
    _default_home,
    _from_loader,
    _host_name,
    _lower,
    _Model,
    _non_empty,
)
from nnix.config.services import TrainingServiceConfig, cross_check, hybrid_loc
from nnix.registry import AlgorithmRef

__all__ = ["AlgorithmConfig", "ExperimentConfig", "config_secrets", "restore_secrets"]



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
# The experiment


class ExperimentConfig(_Model):
    """One HPO experiment. Durations are seconds; paths are absolute."""

    model_config = ConfigDict(defer_build=True)  # the training-service union is read from entry points when used

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
        problems = cross_check(self.training_service, self.trial_gpu_number)
        lines = [p.render(hybrid_loc(("training_service", *p.loc)), _camel_path).render() for p in problems]
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


