"""NNI's experiment YAML shapes, translated to the native schema (:mod:`nnix.config`).

The schema is an argument (the loader passes :class:`nnix.config.ExperimentConfig`), so this module
imports nothing else of :mod:`nnix.config` at module level: the loader imports it, not the reverse.

Two steps, both pure functions of the parsed YAML:

* :func:`translate_v1` turns a legacy v1 config (detected by a top-level ``trainingServicePlatform``)
  into the v2 shape, with a warning for each field that has no effect.
* :func:`normalize_v2` maps v2 keys to the schema's snake_case field names. Like NNI, keys match
  ignoring case and underscores (``trial_concurrency``, ``trialConcurrency``, ``TRIALCONCURRENCY``),
  at every level of the schema but never inside user data (``searchSpace``, ``classArgs``).

:func:`translate` does both and never raises: it collects every issue, and its :class:`Translation`
turns a schema location (``("training_service", "gpu_indices")``) back into the path the user wrote
(``trainingService.gpuIndices``, or ``localConfig.gpuIndices`` in a v1 file).
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import PurePosixPath
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.alias_generators import to_camel, to_snake
from pydantic.fields import FieldInfo

from nnix.errors import ConfigError, FieldIssue
from nnix.limits import brief

__all__ = [
    "NNI_PLATFORMS",
    "KeyMap",
    "Loc",
    "Translation",
    "format_path",
    "is_v1",
    "norm_key",
    "normalize_v2",
    "translate",
    "translate_v1",
]

Loc = tuple[str | int, ...]
KeyMap = dict[Loc, Loc]
"""Schema location (snake_case field names) → the location as the user wrote it."""

NNI_PLATFORMS = frozenset(
    {"local", "remote", "openpai", "pai", "aml", "dlc", "kubeflow", "frameworkcontroller", "adl", "dlts", "hybrid"}
)
"""Every training-service platform NNI knew (v1 and v2 spellings)."""

# Training-service fields NNI lets a config give at top level or inside ``trainingService``.
_SHORTCUTS = ("trial_command", "trial_code_directory", "trial_gpu_number", "nni_manager_ip", "debug")

_DROP = object()  # a value() result meaning "leave this field out"


def norm_key(key: str) -> str:
    """NNI's key matching: case-insensitive, underscores ignored."""
    return key.replace("_", "").lower()


def format_path(loc: Loc) -> str:
    """``("trainingService", "machineList", 0, "host")`` → ``trainingService.machineList[0].host``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + (part if len(part) <= 80 else part[:77] + "...")
    return out


def _remap(loc: Loc, table: KeyMap) -> Loc:
    for n in range(len(loc), 0, -1):
        hit = table.get(loc[:n])
        if hit is not None:
            return hit + loc[n:]
    return loc


# --------------------------------------------------------------------------------------------------
# Schema introspection


def _default_schema() -> type[BaseModel]:
    """The native schema, for direct calls without one (the loader always gives it)."""
    from nnix.config.experiment import ExperimentConfig

    return ExperimentConfig


@cache
def _field_index(cls: type[BaseModel]) -> dict[str, str]:
    return {norm_key(name): name for name in cls.model_fields}


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a field holds directly (``M``, ``M | None``, ``Union[A, B]``)."""
    if get_origin(annotation) is None:
        return [annotation] if isinstance(annotation, type) and issubclass(annotation, BaseModel) else []
    if get_origin(annotation) in (Union, types.UnionType):
        return [m for a in get_args(annotation) for m in _models_in(a)]
    return []


def _choices(info: FieldInfo) -> tuple[list[type[BaseModel]], str | None]:
    """The models a field holds directly, and the key that picks one of them (None: not a tagged union).

    A field whose models are only known at run time (nnix's training services, from entry points) carries
    in its ``Annotated`` metadata an object with ``models()`` and ``discriminator``.
    """
    for meta in info.metadata:
        models = getattr(meta, "models", None)
        discriminator = getattr(meta, "discriminator", None)
        if callable(models) and isinstance(discriminator, str):
            return list(models()), discriminator
    return _models_in(info.annotation), info.discriminator if isinstance(info.discriminator, str) else None


def _list_model(annotation: Any) -> type[BaseModel] | None:
    """``M`` when the field is ``list[M]`` (optionally ``| None``)."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        for arg in get_args(annotation):
            found = _list_model(arg)
            if found is not None:
                return found
        return None
    if origin is list:
        models = _models_in(get_args(annotation)[0])
        return models[0] if len(models) == 1 else None
    return None


def _tags(models: list[type[BaseModel]], discriminator: str) -> dict[Any, type[BaseModel]]:
    table: dict[Any, type[BaseModel]] = {}
    for model in models:
        for tag in get_args(model.model_fields[discriminator].annotation):
            table[tag] = model
    return table


@cache
def _schema_field_names(schema: type[BaseModel]) -> frozenset[str]:
    names: set[str] = set()
    todo: list[type[BaseModel]] = [schema]
    seen: set[type[BaseModel]] = set()
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, info in model.model_fields.items():
            names.add(name)
            todo += _choices(info)[0]
            nested = _list_model(info.annotation)
            if nested is not None:
                todo.append(nested)
    return frozenset(names)


def _spell(name: str, snake: bool) -> str:
    return name if snake else to_camel(name)


def _did_you_mean(key: str, candidates: list[str]) -> str | None:
    if len(key) > 64:
        return None  # difflib is quadratic: no guessing on absurd keys
    lowered = {c.lower(): c for c in candidates}
    close = difflib.get_close_matches(key.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[close[0]] if close else None


# --------------------------------------------------------------------------------------------------
# Result


@dataclass
class Translation:
    """A config translated to schema field names, with what is needed to report errors in user terms."""

    data: dict[str, Any]
    format: Literal["v1", "v2"] = "v2"
    key_map: KeyMap = field(default_factory=dict)
    origins: KeyMap = field(default_factory=dict)
    """v1 only: v2 location (camelCase) → the v1 location it came from."""
    style: Literal["camel", "snake"] = "camel"
    warnings: list[str] = field(default_factory=list)
    issues: list[FieldIssue] = field(default_factory=list)
    suggested: set[Loc] = field(default_factory=set)
    """Schema locations an "unknown key, did you mean" issue points at (their "missing" is noise)."""
    schema: type[BaseModel] | None = None
    """The native schema translated to (default :class:`nnix.config.ExperimentConfig`)."""

    def user_loc(self, loc: Loc) -> Loc:
        """The location ``loc`` (schema field names) as the user spelled it."""
        names = _schema_field_names(self.schema or _default_schema())
        snake = self.style == "snake"

        def styled(parts: Loc) -> Loc:
            return tuple(_spell(p, snake) if isinstance(p, str) and p in names else p for p in parts)

        for n in range(len(loc), 0, -1):
            hit = self.key_map.get(loc[:n])
            if hit is not None:
                out = hit + styled(loc[n:])
                break
        else:
            out = styled(loc)
        return _remap(out, self.origins)

    def path(self, loc: Loc) -> str:
        """:meth:`user_loc` as a dotted path."""
        return format_path(self.user_loc(loc))


# --------------------------------------------------------------------------------------------------
# v2: key normalisation


class _Normalizer:
    def __init__(self, schema: type[BaseModel]) -> None:
        self.schema = schema
        self.key_map: KeyMap = {}
        self.issues: list[tuple[Loc, str, str | None]] = []
        self.warnings: list[str] = []
        self.suggested: set[Loc] = set()
        self.lifted: list[tuple[str, Any, Loc]] = []
        self.votes = {"camel": 0, "snake": 0}

    def issue(self, loc: Loc, message: str, hint: str | None = None) -> None:
        self.issues.append((loc, message, hint))

    @property
    def style(self) -> Literal["camel", "snake"]:
        return "snake" if self.votes["snake"] > self.votes["camel"] else "camel"

    def top(self, data: Mapping[str, Any]) -> dict[str, Any]:
        body: dict[Any, Any] = {}
        renames: dict[str, str] = {}
        advisor: tuple[str, Any] | None = None
        for key, value in data.items():
            if not isinstance(key, str):
                body[key] = value
                continue
            n = norm_key(key)
            if n == "advisor":
                advisor = (key, value)
            elif n == "experimenttype":
                if value is not None and str(value).lower() != "hpo":
                    self.issue(
                        (key,),
                        f"experimentType {brief(value)} is not supported: nnix runs hyper-parameter tuning only",
                        "remove experimentType (the default is hpo)",
                    )
            elif n == "useannotation":
                if value is True:
                    self.issue(
                        (key,),
                        "code annotations are not supported (NNI removed them in v3.0 too)",
                        "write the search space in searchSpace or searchSpaceFile, and set useAnnotation: false",
                    )
                elif value not in (None, False):
                    self.issue((key,), f"must be true or false, got {brief(value)}")
            elif n == "sharedstorage":
                if value is not None:
                    self.issue((key,), "sharedStorage is not supported by nnix", "remove sharedStorage")
            else:
                body[key] = value
        if advisor is not None and advisor[1] is not None:
            key, value = advisor
            if any(isinstance(k, str) and norm_key(k) == "tuner" and v is not None for k, v in body.items()):
                self.issue(
                    (key,),
                    "set either tuner or advisor, not both",
                    "advisor is NNI's deprecated name for a tuner; keep only tuner",
                )
            else:
                body[key] = value
                renames[key] = "tuner"
                self.warnings.append(f"{key} is deprecated in NNI; nnix treats it as the tuner")
        out = self.model(body, self.schema, (), (), renames)
        if not isinstance(out, dict):  # pragma: no cover - body is a dict
            return {}
        for name, value, user in self.lifted:
            if name in out and out[name] != value:
                self.warnings.append(
                    f"{format_path(user)} overrides {format_path(self.key_map[(name,)])} "
                    "(a training service's own value wins)"
                )
            out[name] = value
            self.key_map[(name,)] = user
        return out

    def model(
        self,
        obj: Any,
        cls: type[BaseModel],
        native: Loc,
        user: Loc,
        renames: Mapping[str, str] | None = None,
    ) -> Any:
        if not isinstance(obj, Mapping):
            return obj  # the schema reports the type
        index = _field_index(cls)
        out: dict[str, Any] = {}
        written: dict[str, str] = {}
        for key, value in obj.items():
            if not isinstance(key, str):
                self.issue((*user, str(key)), f"a key must be a string, got {brief(key)}")
                continue
            name = (renames or {}).get(key) or index.get(norm_key(key))
            if name is None:
                self.unknown(key, cls, native, user)
                continue
            if value is None:
                continue  # null is the same as leaving the key out
            if name in written:
                self.issue(
                    (*user, key),
                    f"same field as {brief(written[name])} (keys match ignoring case and underscores)",
                    "keep only one of them",
                )
                continue
            written[name] = key
            if "_" in key:
                self.votes["snake"] += 1
            elif key != key.lower():
                self.votes["camel"] += 1
            self.key_map[(*native, name)] = (*user, key)
            result = self.value(value, cls.model_fields[name], (*native, name), (*user, key))
            if result is not _DROP:
                out[name] = result
        return out

    def value(self, value: Any, info: FieldInfo, native: Loc, user: Loc) -> Any:
        if native == ("training_service",):
            return self.service(value, info, user)
        models, discriminator = _choices(info)
        if models and discriminator is not None:
            return self.tagged(value, models, discriminator, native, user)
        if models:
            return self.model(value, models[0], native, user)
        item_model = _list_model(info.annotation)
        if item_model is not None and isinstance(value, list):
            items = []
            for i, item in enumerate(value):
                self.key_map[(*native, i)] = (*user, i)
                items.append(self.model(item, item_model, (*native, i), (*user, i)))
            return items
        return value

    def tagged(self, value: Any, models: list[type[BaseModel]], discriminator: str, native: Loc, user: Loc) -> Any:
        if not isinstance(value, Mapping):
            return value
        cls = self.pick(value, models, discriminator)
        if cls is not None:
            return self.model(value, cls, native, user)
        # Unknown or missing tag: the schema reports it; nothing else here can be checked.
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if isinstance(key, str) and norm_key(key) == norm_key(discriminator):
                out[discriminator] = item
                self.key_map[(*native, discriminator)] = (*user, key)
            else:
                out[key] = item
        return out

    @staticmethod
    def pick(value: Mapping[Any, Any], models: list[type[BaseModel]], discriminator: str) -> type[BaseModel] | None:
        tags = _tags(models, discriminator)
        for key, item in value.items():
            if isinstance(key, str) and norm_key(key) == norm_key(discriminator) and isinstance(item, str):
                return tags.get(item)
        return None

    def service(self, value: Any, info: FieldInfo, user: Loc) -> Any:
        native: Loc = ("training_service",)
        choices, tag_key = _choices(info)
        discriminator = tag_key or "platform"
        models = [m for m in choices if "hybrid" not in _tags([m], discriminator)]
        if isinstance(value, list):
            if len(value) == 1:
                self.warnings.append(f"{format_path(user)} is a list of one training service; using it")
                value, user = value[0], (*user, 0)
                self.key_map[native] = user
            else:  # NNI's hybrid mode: every item is one service, errors name it by its position
                self.key_map[native] = user
                items = []
                for i, item in enumerate(value):
                    self.key_map[(*native, i)] = (*user, i)
                    items.append(self.one_service(item, models, discriminator, (*native, i), (*user, i)))
                return {"platform": "hybrid", "services": items}
        return self.one_service(value, models, discriminator, native, user)

    def one_service(self, value: Any, models: list[type[BaseModel]], discriminator: str, native: Loc,
                    user: Loc) -> Any:
        if not isinstance(value, Mapping):
            return value
        cls = self.pick(value, models, discriminator)
        own: dict[Any, Any] = {}
        shortcuts = {norm_key(name): name for name in _SHORTCUTS}
        for key, item in value.items():
            name = shortcuts.get(norm_key(key)) if isinstance(key, str) else None
            if name is not None and (cls is None or name not in cls.model_fields):
                if item is not None:
                    self.lifted.append((name, item, (*user, key)))
            else:
                own[key] = item
        if cls is not None:
            return self.model(own, cls, native, user)
        return self.tagged(own, models, discriminator, native, user)

    def unknown(self, key: str, cls: type[BaseModel], native: Loc, user: Loc) -> None:
        snake = "_" in key
        spelled = {_spell(name, snake): name for name in cls.model_fields}
        hint = None
        if cls is self.schema:
            hint = _top_level_hint(key, snake, self.schema)
        if hint is None:
            match = _did_you_mean(key, list(spelled))
            if match is not None:
                hint = f"did you mean {match!r}?"
                self.suggested.add((*native, spelled[match]))
        if hint is None and len(spelled) <= 12:
            hint = "known keys: " + ", ".join(spelled)
        self.issue((*user, key), "unknown key", hint)


def _top_level_hint(key: str, snake: bool, schema: type[BaseModel]) -> str | None:
    """A hint for a top-level key that belongs elsewhere (a nested section, or a v1 name)."""
    n = norm_key(key)
    if n in _V1_TOP_RENAMED and norm_key(_V1_TOP_RENAMED[n]) != n:
        return f"{brief(key)} is the v1 (legacy) name; use {_spell(to_snake(_V1_TOP_RENAMED[n]), snake)!r}"
    for name, info in schema.model_fields.items():
        for model in _choices(info)[0]:
            if n in _field_index(model):
                return f"{brief(key)} belongs under {_spell(name, snake)!r}"
    return None


def normalize_v2(
    data: Mapping[str, Any], schema: type[BaseModel] | None = None
) -> tuple[dict[str, Any], KeyMap, list[str]]:
    """A v2 config with schema field names, the key map for error paths, and warnings.

    Raises :class:`ConfigError` on keys that are unknown, repeated, or unsupported.
    """
    normalizer = _Normalizer(schema or _default_schema())
    out = normalizer.top(data)
    if normalizer.issues:
        raise ConfigError([FieldIssue(format_path(loc), m, h) for loc, m, h in normalizer.issues])
    return out, normalizer.key_map, normalizer.warnings


# --------------------------------------------------------------------------------------------------
# v1 → v2

# v1 top-level key (normalised) → v2 key
_V1_TOP_RENAMED = {
    "experimentname": "experimentName",
    "trialconcurrency": "trialConcurrency",
    "maxexecduration": "maxExperimentDuration",
    "maxtrialduration": "maxTrialDuration",
    "maxtrialnum": "maxTrialNumber",
    "searchspacepath": "searchSpaceFile",
    "nnimanagerip": "nniManagerIp",
    "logdir": "experimentWorkingDirectory",
    "debug": "debug",
    "loglevel": "logLevel",
    "useannotation": "useAnnotation",
    "sharedstorage": "sharedStorage",
}
_V1_TOP_DROPPED = {"authorname", "description", "multithread", "versioncheck", "logcollection"}
_V1_SECTION_PLATFORM = {
    "localconfig": "local",
    "remoteconfig": "remote",
    "machinelist": "remote",
    "paiconfig": "pai",
    "kubeflowconfig": "kubeflow",
    "frameworkcontrollerconfig": "frameworkcontroller",
    "amlconfig": "aml",
    "dltsconfig": "dlts",
    "hybridconfig": "hybrid",
}
_V1_SECTION_KEYS = {  # where a v1 file keeps each platform's settings
    "localConfig": "local",
    "remoteConfig": "remote",
    "paiConfig": "pai",
    "kubeflowConfig": "kubeflow",
    "frameworkcontrollerConfig": "frameworkcontroller",
    "amlConfig": "aml",
    "dltsConfig": "dlts",
    "hybridConfig": "hybrid",
}
_V1_TOP_KEYS = [
    "authorName", "experimentName", "description", "trialConcurrency", "maxExecDuration", "maxTrialDuration",
    "maxTrialNum", "trainingServicePlatform", "searchSpacePath", "useAnnotation", "multiPhase", "multiThread",
    "nniManagerIp", "logDir", "debug", "versionCheck", "logLevel", "logCollection", "tuner", "assessor",
    "advisor", "trial", "localConfig", "remoteConfig", "machineList", "paiConfig", "kubeflowConfig",
    "frameworkcontrollerConfig", "amlConfig", "dltsConfig", "hybridConfig", "sharedStorage",
]  # fmt: skip
_V1_LOCAL = {"gpuindices": "gpuIndices", "maxtrialnumpergpu": "maxTrialNumberPerGpu", "useactivegpu": "useActiveGpu"}
_V1_MACHINE = {
    "ip": "host",
    "port": "port",
    "username": "user",
    "passwd": "password",
    "sshkeypath": "sshKeyFile",
    "passphrase": "sshPassphrase",  # NNI's converter wrote `passphrase`, which its v2 schema rejects
    "gpuindices": "gpuIndices",
    "maxtrialnumpergpu": "maxTrialNumberPerGpu",
    "useactivegpu": "useActiveGpu",
    "pythonpath": "pythonPath",
}
_V1_MACHINE_KEYS = ["ip", "port", "username", "passwd", "sshKeyPath", "passphrase", "gpuIndices",
                    "maxTrialNumPerGpu", "useActiveGpu", "pythonPath"]  # fmt: skip
_V1_PAI_TRIAL = {
    "nnimanagernfsmountpath": "localStorageMountPoint",
    "containernfsmountpath": "containerStorageMountPoint",
    "cpunum": "trialCpuNumber",
    "memorymb": "trialMemorySize",
    "image": "dockerImage",
    "virtualcluster": "virtualCluster",
    "paistorageconfigname": "storageConfigName",
    "paiconfigpath": "openpaiConfigFile",
}
_V1_PAI_CONFIG = {
    "username": "username",
    "token": "token",
    "host": "host",
    "reuse": "reuseMode",
    "cpunum": "trialCpuNumber",
    "memorymb": "trialMemorySize",
}
_V1_ROLE = {"gpunum": "gpuNumber", "cpunum": "cpuNumber", "memorymb": "memorySize", "image": "dockerImage",
            "tasknum": "taskNumber"}
_V1_K8S_STORAGE = {  # kubeflowConfig / frameworkcontrollerConfig storage keys -> storage fields
    "storage": {},
    "localmountpoint": {},  # nnix: where the manager sees the storage
    "containermountpoint": {},
    "nfs": {"server": "server", "path": "path"},
    "keyvault": {"vaultname": "keyVaultName", "name": "keyVaultKey"},
    "azurestorage": {"accountname": "azureAccount", "azureshare": "azureShare"},
    "pvc": {"path": "path"},
}
# Defaults for paths of fields the user did not write (e.g. "missing required field").
_V1_DEFAULT_ORIGINS: KeyMap = {
    ("trialCommand",): ("trial", "command"),
    ("trialCodeDirectory",): ("trial", "codeDir"),
    ("trialGpuNumber",): ("trial", "gpuNum"),
    ("maxExperimentDuration",): ("maxExecDuration",),
    ("maxTrialNumber",): ("maxTrialNum",),
    ("searchSpaceFile",): ("searchSpacePath",),
    ("searchSpace",): ("searchSpacePath",),
    ("experimentWorkingDirectory",): ("logDir",),
    ("trainingService", "platform"): ("trainingServicePlatform",),
}


class _V1:
    def __init__(self, schema: type[BaseModel]) -> None:
        self.schema = schema
        self.out: dict[str, Any] = {}
        self.origins: KeyMap = dict(_V1_DEFAULT_ORIGINS)
        self.warnings: list[str] = ["legacy v1 config format (trainingServicePlatform): translated to v2"]
        self.issues: list[FieldIssue] = []
        self.suggested: set[Loc] = set()

    def put(self, v2: Loc, value: Any, v1: Loc) -> None:
        if value is None:
            return
        target: Any = self.out
        for part in v2[:-1]:
            target = target.setdefault(part, {}) if isinstance(target, dict) else target[part]
        target[v2[-1]] = value
        self.origins[v2] = v1

    def drop(self, v1: Loc) -> None:
        self.warnings.append(f"{format_path(v1)} has no effect in nnix; ignored")

    def unknown(self, loc: Loc, known: list[str]) -> None:
        key = str(loc[-1])
        match = _did_you_mean(key, known)
        hint = f"did you mean {match!r}?" if match else None
        if hint is None and len(loc) == 1 and norm_key(key) in _field_index(self.schema):
            hint = (
                f"{brief(key)} is a v2 key, but this file is read as v1 because it has trainingServicePlatform; "
                "write trainingService: {platform: ...} instead to use the v2 format"
            )
        if match and len(loc) == 1 and norm_key(match) in _V1_TOP_RENAMED:
            self.suggested.add((to_snake(_V1_TOP_RENAMED[norm_key(match)]),))
        self.issues.append(FieldIssue(format_path(loc), "unknown key (v1 format)", hint))

    def mapping(self, value: Any, loc: Loc, example: str) -> bool:
        if isinstance(value, Mapping):
            return True
        self.issues.append(FieldIssue(format_path(loc), f"must be a mapping, got {brief(value)}", f"e.g. {example}"))
        return False

    def run(self, data: Mapping[str, Any]) -> dict[str, Any]:
        platform_key = next(k for k in data if isinstance(k, str) and norm_key(k) == "trainingserviceplatform")
        platform = data[platform_key]
        self.out["trainingService"] = {}
        section = {v: k for k, v in _V1_SECTION_KEYS.items()}.get(str(platform), platform_key)
        self.origins[("trainingService",)] = (section,)
        self.put(("trainingService", "platform"), "openpai" if platform == "pai" else platform, (platform_key,))
        for key, value in data.items():
            if not isinstance(key, str):
                self.issues.append(FieldIssue(str(key), f"a key must be a string, got {brief(key)}"))
                continue
            n = norm_key(key)
            if n == "trainingserviceplatform":
                continue
            if n in _V1_TOP_DROPPED:
                self.drop((key,))
            elif n in _V1_TOP_RENAMED:
                self.put((_V1_TOP_RENAMED[n],), value, (key,))
            elif n == "multiphase":
                if value:
                    self.issues.append(
                        FieldIssue(key, "multiPhase is not supported (NNI removed it too)", "remove multiPhase")
                    )
                else:
                    self.drop((key,))
            elif n in ("tuner", "assessor", "advisor"):
                self.algorithm(n, key, value)
            elif n == "trial":
                self.trial(key, value, platform)
            elif n in _V1_SECTION_PLATFORM:
                if _V1_SECTION_PLATFORM[n] != platform:
                    self.warnings.append(f"{key} ignored: trainingServicePlatform is {brief(platform)}")
                else:
                    self.section(n, key, value)
            else:
                self.unknown((key,), _V1_TOP_KEYS)
        self.finish()
        return self.out

    def trial(self, key: str, value: Any, platform: Any) -> None:
        if value is None or not self.mapping(value, (key,), "trial: {command: python3 main.py, codeDir: .}"):
            return
        common = {"command": "trialCommand", "codedir": "trialCodeDirectory", "gpunum": "trialGpuNumber"}
        for k, v in value.items():
            n = norm_key(str(k))
            if n in common:
                self.put((common[n],), v, (key, k))
            elif n == "nasmode":
                self.drop((key, k))
            elif platform == "pai" and n in _V1_PAI_TRIAL:
                self.put(("trainingService", _V1_PAI_TRIAL[n]), v, (key, k))
            elif platform in ("local", "remote"):
                self.unknown((key, k), ["command", "codeDir", "gpuNum", "nasMode"])
            elif n in ("privateregistryauthpath",):
                self.drop((key, k))
            elif platform == "kubeflow" and n in ("worker", "ps", "master") and isinstance(v, Mapping):
                self.role(("trainingService", n), v, (key, k))
            elif platform == "frameworkcontroller" and n == "taskroles" and isinstance(v, list):
                self.origins[("trainingService", "taskRoles")] = (key, k)
                self.out["trainingService"]["taskRoles"] = [{} for _ in v]
                for i, role in enumerate(v):
                    if self.mapping(role, (key, k, i), "{name: worker, taskNum: 1, command: python3 main.py}"):
                        self.role(("trainingService", "taskRoles", i), role, (key, k, i))
            else:  # the platform's own trial fields: kept for its schema
                self.put(("trainingService", str(k)), v, (key, k))

    def role(self, v2: Loc, value: Mapping[Any, Any], v1: Loc) -> None:
        """A kubeflow / frameworkcontroller role (``gpuNum`` -> ``gpuNumber``...)."""
        self.origins[v2] = v1
        target: Any = self.out
        for part in v2:
            target = target.setdefault(part, {}) if isinstance(target, dict) else target[part]
        for k, v in value.items():
            n = norm_key(str(k))
            if n == "privateregistryauthpath":
                self.drop((*v1, k))
            elif n == "frameworkattemptcompletionpolicy" and isinstance(v, Mapping):
                policy = {("minSucceedTaskCount" if norm_key(str(pk)) == "minsucceededtaskcount" else pk): pv
                          for pk, pv in v.items()}
                self.put((*v2, "frameworkAttemptCompletionPolicy"), policy, (*v1, k))
            else:
                self.put((*v2, _V1_ROLE.get(n, str(k))), v, (*v1, k))

    def algorithm(self, kind: str, key: str, value: Any) -> None:
        if value is None:
            return
        if not isinstance(value, Mapping):
            self.put((kind,), value, (key,))  # the schema reports the type
            return
        name_key = {"tuner": "builtinTunerName", "assessor": "builtinAssessorName", "advisor": "builtinAdvisorName"}
        known = [name_key[kind], "codeDir", "classFileName", "className", "classArgs"]
        if kind != "assessor":
            known += ["gpuIndices", "includeIntermediateResults"]
        self.out[kind] = {}
        self.origins[(kind,)] = (key,)
        found: dict[str, tuple[Any, Any]] = {}
        for k, v in value.items():
            n = norm_key(str(k))
            if n == norm_key(name_key[kind]):
                self.put((kind, "name"), v, (key, k))
            elif n == "classargs":
                self.put((kind, "classArgs"), v, (key, k))
            elif n in ("codedir", "classfilename", "classname"):
                found[n] = (k, v)
            elif n == "gpuindices" and kind != "assessor":
                self.put(("tunerGpuIndices",), v, (key, k))
            elif n == "includeintermediateresults" and kind != "assessor":
                self.drop((key, k))
            else:
                self.unknown((key, k), known)
        code_dir = found.get("codedir")
        if "classname" in found:
            cls_key, cls = found["classname"]
            if "classfilename" not in found:
                self.issues.append(
                    FieldIssue(
                        format_path((key, cls_key)),
                        "in the v1 format className needs classFileName",
                        "add classFileName: my_tuner.py (or write className: my_tuner.MyTuner in a v2 config)",
                    )
                )
                return
            file_key, file = found["classfilename"]
            if not isinstance(file, str) or not isinstance(cls, str):
                self.issues.append(
                    FieldIssue(format_path((key, file_key)), "classFileName and className must be strings")
                )
                return
            path = PurePosixPath(file.replace("\\", "/"))
            self.put((kind, "className"), f"{path.stem}.{cls}", (key, cls_key))
            directory: Any = code_dir[1] if code_dir is not None else None
            if str(path.parent) != ".":  # classFileName: sub/my_tuner.py
                directory = str(PurePosixPath(str(directory or ".")) / path.parent)
            origin = (key, code_dir[0]) if code_dir is not None else (key, file_key)
            self.put((kind, "codeDirectory"), directory, origin)
        elif "classfilename" in found:
            self.issues.append(
                FieldIssue(format_path((key, found["classfilename"][0])), "classFileName needs className")
            )
        elif code_dir is not None:
            self.put((kind, "codeDirectory"), code_dir[1], (key, code_dir[0]))

    def section(self, n: str, key: str, value: Any) -> None:
        if value is None:
            return
        if n == "machinelist":
            if not isinstance(value, list):
                self.issues.append(FieldIssue(key, "must be a list of machines", "e.g. machineList: [{ip: ...}]"))
                return
            self.out["trainingService"]["machineList"] = [{} for _ in value]
            self.origins[("trainingService", "machineList")] = (key,)
            for i, machine in enumerate(value):
                self.origins[("trainingService", "machineList", i)] = (key, i)
                if not self.mapping(machine, (key, i), "{ip: 10.0.0.2, username: me, sshKeyPath: ~/.ssh/id_rsa}"):
                    continue
                for k, v in machine.items():
                    m = _V1_MACHINE.get(norm_key(str(k)))
                    if m is None:
                        self.unknown((key, i, k), _V1_MACHINE_KEYS)
                    else:
                        self.put(("trainingService", "machineList", i, m), v, (key, i, k))
            return
        if not self.mapping(value, (key,), f"{key}: {{...}}"):
            return
        self.origins[("trainingService",)] = (key,)
        for k, v in value.items():
            m = norm_key(str(k))
            loc = (key, k)
            if n == "localconfig":
                if m in _V1_LOCAL:
                    self.put(("trainingService", _V1_LOCAL[m]), v, loc)
                else:
                    self.unknown(loc, ["gpuIndices", "maxTrialNumPerGpu", "useActiveGpu"])
            elif n == "remoteconfig":
                if m == "reuse":
                    self.put(("trainingService", "reuseMode"), v, loc)
                else:
                    self.unknown(loc, ["reuse"])
            elif n == "paiconfig" and m in _V1_PAI_CONFIG:
                self.put(("trainingService", _V1_PAI_CONFIG[m]), v, loc)
            elif n == "paiconfig" and m == "gpunum":
                self.put(("trialGpuNumber",), v, loc)
            elif m in ("password", "uploadretrycount") or (
                n == "paiconfig" and m in ("maxtrialnumpergpu", "useactivegpu")
            ):
                self.drop(loc)
            elif n in ("kubeflowconfig", "frameworkcontrollerconfig") and m in _V1_K8S_STORAGE:
                self.k8s_storage(m, v, loc)
            elif n in ("kubeflowconfig", "frameworkcontrollerconfig") and m == "configpath":
                self.issues.append(FieldIssue(format_path(loc), "a Framework template (configPath) is not supported",
                                              "describe the task roles in trial.taskRoles"))
            elif m == "reuse":
                self.put(("trainingService", "reuseMode"), v, loc)
            elif m == "maxtrialnumpergpu":
                self.put(("trainingService", "maxTrialNumberPerGpu"), v, loc)
            else:  # the platform's own fields: kept for its schema
                self.put(("trainingService", str(k)), v, loc)


    def k8s_storage(self, m: str, value: Any, loc: Loc) -> None:
        base = ("trainingService", "storage")
        self.origins.setdefault(base, loc)
        if m in ("storage", "localmountpoint", "containermountpoint"):
            name = {"storage": "storageType", "localmountpoint": "localMountPoint",
                    "containermountpoint": "containerMountPoint"}[m]
            self.put((*base, name), value, loc)
            return
        if not self.mapping(value, loc, "nfs: {server: 10.0.0.5, path: /export}"):
            return
        for k, v in value.items():
            field_name = _V1_K8S_STORAGE[m].get(norm_key(str(k)))
            if field_name is None:
                self.unknown((*loc, k), list(_V1_K8S_STORAGE[m]))
            else:
                self.put((*base, field_name), v, (*loc, k))

    def finish(self) -> None:
        """NNI's converter: a kubeflow / frameworkcontroller config without ``trial.command`` runs the primary
        role's command (frameworkcontroller: the last task role's)."""
        ts = self.out.get("trainingService") or {}
        if "trialCommand" in self.out or not isinstance(ts, dict):
            return
        command, origin = None, None
        if ts.get("platform") == "kubeflow":
            role = "master" if ts.get("operator") == "pytorch-operator" else "worker"
            if isinstance(ts.get(role), dict):
                command, origin = ts[role].get("command"), self.origins.get(("trainingService", role, "command"))
        elif ts.get("platform") == "frameworkcontroller" and isinstance(ts.get("taskRoles"), list) and ts["taskRoles"]:
            last = len(ts["taskRoles"]) - 1
            if isinstance(ts["taskRoles"][last], dict):
                command = ts["taskRoles"][last].get("command")
                origin = self.origins.get(("trainingService", "taskRoles", last, "command"))
        if command:
            self.put(("trialCommand",), command, origin or ("trial",))


def is_v1(data: Mapping[str, Any]) -> bool:
    """NNI's rule: a config with a top-level ``trainingServicePlatform`` is v1."""
    return any(isinstance(k, str) and norm_key(k) == "trainingserviceplatform" for k in data)


def translate_v1(data: Mapping[str, Any], schema: type[BaseModel] | None = None) -> tuple[dict[str, Any], list[str]]:
    """A v1 config in the v2 shape (camelCase keys), with a warning per ignored field.

    Raises :class:`ConfigError` on unknown v1 keys and unsupported v1 features.
    """
    v1 = _V1(schema or _default_schema())
    out = v1.run(data)
    if v1.issues:
        raise ConfigError(v1.issues)
    return out, v1.warnings


def translate(data: Mapping[str, Any], schema: type[BaseModel] | None = None) -> Translation:
    """Any NNI config (v1, or v2 in any key spelling) → field names of ``schema`` (default
    :class:`nnix.config.ExperimentConfig`). Never raises."""
    schema = schema or _default_schema()
    fmt: Literal["v1", "v2"] = "v2"
    v1: _V1 | None = None
    if is_v1(data):
        fmt = "v1"
        v1 = _V1(schema)
        data = v1.run(data)
    normalizer = _Normalizer(schema)
    native = normalizer.top(data)
    origins = v1.origins if v1 is not None else {}
    issues = list(v1.issues) if v1 is not None else []
    issues += [FieldIssue(format_path(_remap(loc, origins)), m, h) for loc, m, h in normalizer.issues]
    return Translation(
        data=native,
        format=fmt,
        key_map=normalizer.key_map,
        origins=origins,
        style="camel" if v1 is not None else normalizer.style,
        warnings=(v1.warnings if v1 is not None else []) + normalizer.warnings,
        issues=issues,
        suggested=normalizer.suggested | (v1.suggested if v1 is not None else set()),
        schema=schema,
    )
