"""The loader: a config file (or parsed data) in any of NNI's dialects → a validated :class:`ExperimentConfig`.

:func:`load_config` / :func:`parse_config` report every problem of a file at once as a
:class:`~nnix.errors.ConfigError`, each issue with the path the user wrote (``trainingService.gpuIndices``,
``trial.command`` for a v1 file) and a hint. NNI's YAML shapes are translated to the native schema by
:mod:`nnix.config.nni`; this is the only module of :mod:`nnix.config` that imports it.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, TypeAdapter, ValidationError

from nnix.config.experiment import AlgorithmConfig, ExperimentConfig
from nnix.config.fields import _BASE_DIR, _LOADER, resolve_path
from nnix.config.nni import NNI_PLATFORMS, Loc, Translation, _remap, format_path, translate
from nnix.config.services import (
    TrainingServiceConfig,
    cross_check,
    hybrid_loc,
    platform_problems,
    training_service_platforms,
)
from nnix.documents import DocumentError, load_json, load_yaml, read_text
from nnix.errors import ConfigError, FieldIssue
from nnix.limits import brief
from nnix.registry import Kind, algorithm_issues

__all__ = ["LoadedConfig", "load_config", "parse_config"]



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
    if not isinstance(data, dict):
        raise ConfigError(
            [FieldIssue("", f"a config is a mapping of keys to values, not a {type(data).__name__}")],
            source=source,
        )
    base_dir = Path(os.path.realpath(Path(base_dir).expanduser()))
    tr = translate(data, ExperimentConfig)
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
        key = format_path(_remap(tr.key_map.get(("tuner_gpu_indices",), ("tunerGpuIndices",)), tr.origins))
        warnings.append(
            f"{key} has no effect in nnix: the tuner runs in the manager process and nnix's tuners compute on "
            "the CPU (NNI set CUDA_VISIBLE_DEVICES of its tuner process); a custom tuner that uses a GPU "
            "chooses its device itself")
    warnings += _direction_warnings(model, tr)
    return LoadedConfig(model, warnings, tr.format)


def _direction_warnings(model: ExperimentConfig, tr: Translation) -> list[str]:
    """The tuner's and the assessor's ``optimize_mode`` must agree, or the assessor stops the trials the tuner looks
    for. Both set and different: a warning. Only the assessor's set, and the tuner's default differs: the tuner is
    given the assessor's (it is the only direction the config states; NNI's web UI ranks by it too, though NNI's
    tuner would run at its default), with a warning. Both paths are named as written."""
    assessor = model.assessor
    wanted = assessor.class_args.get("optimize_mode") if assessor is not None else None
    if wanted not in ("maximize", "minimize"):
        return []
    tuner_path = tr.path(("tuner", "class_args", "optimize_mode"))
    assessor_path = tr.path(("assessor", "class_args", "optimize_mode"))
    stated = model.tuner.class_args.get("optimize_mode")
    if stated is not None:
        if stated == wanted:
            return []
        return [f"{assessor_path} is {wanted} but {tuner_path} is {stated}: the assessor would stop early the trials "
                "the tuner looks for; make them agree"]
    accepts, default = _optimize_mode_of(model.tuner)
    if default == wanted:
        return []  # e.g. TPE minimizes by default: they agree
    if not accepts:
        return [f"{assessor_path} is {wanted} but the tuner takes no optimize_mode: the experiment ranks trials as "
                f"{default} (the tuner's default); choose an assessor optimize_mode of {default}, or a tuner that "
                "takes one"]
    model.tuner.class_args["optimize_mode"] = wanted
    return [f"{tuner_path} is not set and {assessor_path} is {wanted}: the tuner uses {wanted} too, not its default "
            f"{default} (NNI would run it at {default}, against the assessor); set {tuner_path} to silence this"]


def _optimize_mode_of(tuner: AlgorithmConfig) -> tuple[bool, str]:
    """Whether the tuner's class takes ``optimize_mode``, and its default direction (``maximize`` where it has
    none, as the experiment's direction is then)."""
    import inspect

    from nnix.registry import resolve

    try:
        cls = resolve("tuner", tuner.ref())
    except Exception:  # reported with the config's issues already; never fail over a warning
        return False, "maximize"
    args_model = getattr(cls, "Args", None)
    if isinstance(args_model, type) and issubclass(args_model, BaseModel):
        info = args_model.model_fields.get("optimize_mode")
        if info is None:
            return False, "maximize"
        default = info.default
        return True, default if default in ("maximize", "minimize") else "maximize"
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False, "maximize"
    param = params.get("optimize_mode")
    if param is None:
        return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()), "maximize"
    return True, param.default if param.default in ("maximize", "minimize") else "maximize"


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
    return hybrid_loc(loc)


def _issue_from_error(err: Any, loc: Loc, tr: Translation) -> FieldIssue:
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
        broken = platform_problems().get(tag)
        if broken is not None:
            what = f"platform {brief(tag)} is installed but cannot be used: {broken}"
        elif tag in NNI_PLATFORMS:
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


@cache
def _service_adapter() -> TypeAdapter[Any]:
    return TypeAdapter(TrainingServiceConfig)


def _cross_issues(native: dict[str, Any], tr: Translation, context: dict[str, Any]) -> list[FieldIssue]:
    """Rules spanning the experiment and its training service, checked when both parts are well-formed."""
    gpus = native.get("trial_gpu_number")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0):
        return []
    try:
        service = _service_adapter().validate_python(native.get("training_service"), context=context)
    except ValidationError:
        return []
    return [p.render(hybrid_loc(("training_service", *p.loc)), tr.path) for p in cross_check(service, gpus)]
