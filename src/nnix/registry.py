"""One registry for pluggable algorithms, by entry points, plus the ones users registered.

Groups: ``nnix.tuners`` and ``nnix.assessors``. Names are case-insensitive; an alias is simply a
second entry point pointing at the same class. Nothing here imports an algorithm until it is used.

``nnix algo register -m META`` (NNI's ``nnictl algo register`` and its meta file) adds algorithms to
``$NNIX_HOME/.nnix/algorithms.json``; :func:`available` lists them after the entry points, which they
never shadow. NNI's NAS-only tuners are refused by name with a clear error.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import sys
from dataclasses import dataclass
from importlib.metadata import EntryPoints, entry_points
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from nnix.errors import FieldIssue, TunerError
from nnix.limits import brief

Kind = Literal["tuner", "assessor"]
GROUPS: dict[str, str] = {"tuner": "nnix.tuners", "assessor": "nnix.assessors"}


@dataclass(frozen=True)
class AlgorithmRef:
    """Where an algorithm comes from: a registered name, or ``module.Class`` in a code directory."""

    name: str | None = None
    class_name: str | None = None
    code_directory: Path | None = None


# NNI tuners that search neural architectures, not hyper-parameters (nni-spec.md 3.1)
NAS_ONLY = frozenset({"networkmorphism", "networkmorphismtuner", "ppo", "ppotuner"})
NAS_HINT = ("nnix runs hyper-parameter tuning only (NNI's NAS is not part of it); pick an HPO tuner "
            "(`nnix algo list`), e.g. TPE, Evolution or RegularizedEvolutionTuner")


def builtin(kind: Kind) -> dict[str, str]:
    """Names (lower-case) of ``kind`` installed by entry point, mapped to ``module:Class``."""
    return dict(_installed(GROUPS[kind]))


@functools.cache
def _every_entry_point() -> Any:  # EntryPoints (Python 3.12) or SelectableGroups (3.10, 3.11): both .select()
    # scanning every installed distribution takes tens of milliseconds: once per process for all groups (what
    # is installed does not change under a running nnix; `nnix algo register` keeps its own file)
    return entry_points()


def entry_point_group(group: str) -> EntryPoints:
    """The installed entry points of ``group`` (tuners, assessors, training services), from one scan of the
    installed distributions per process."""
    found: EntryPoints = _every_entry_point().select(group=group)
    return found


@functools.cache
def _installed(group: str) -> tuple[tuple[str, str], ...]:
    return tuple((ep.name.lower(), ep.value) for ep in entry_point_group(group))


def user_algorithms_file() -> Path:
    """Where ``nnix algo register`` keeps what it registered (beside the registry of experiments)."""
    from nnix.paths import home

    return home() / ".nnix" / "algorithms.json"


def user_algorithms() -> list[dict[str, Any]]:
    """The registered algorithms' meta records (NNI's fields: ``builtinName``, ``algoType``, ``className``,
    optional ``alias``, ``classArgsValidator``, ``acceptClassArgs``, ``isAdvisor``; nnix's ``codeDirectory``)."""
    import json

    try:
        data = json.loads(user_algorithms_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    items = data.get("algorithms") if isinstance(data, dict) else None
    return [a for a in items if isinstance(a, dict)] if isinstance(items, list) else []


def algo_kind(meta: dict[str, Any]) -> Kind:
    """An NNI advisor is a tuner here (nnix has no separate advisor role)."""
    return "assessor" if meta.get("algoType") == "assessor" else "tuner"


def meta_names(meta: dict[str, Any]) -> list[str]:
    names = [str(meta.get("builtinName", ""))]
    if isinstance(meta.get("alias"), str) and meta["alias"]:
        names.append(meta["alias"])
    return [n.lower() for n in names if n]


def _value_of(meta: dict[str, Any]) -> str:
    module, _, attr = str(meta.get("className", "")).rpartition(".")
    return f"{module}:{attr}"


def available(kind: Kind) -> dict[str, str]:
    """Names (lower-case) of ``kind`` mapped to ``module:Class``: entry points, then registered ones."""
    table = builtin(kind)
    for meta in user_algorithms():
        if algo_kind(meta) == kind:
            for name in meta_names(meta):
                table.setdefault(name, _value_of(meta))
    return table


def _user_code_directory(kind: Kind, name: str) -> str | None:
    for meta in user_algorithms():
        if algo_kind(meta) == kind and name in meta_names(meta) and isinstance(meta.get("codeDirectory"), str):
            return str(meta["codeDirectory"])
    return None


def _import_value(value: str) -> type[Any]:
    module_name, _, attr = value.partition(":")
    module = importlib.import_module(module_name)
    obj: type[Any] = getattr(module, attr)
    return obj


def resolve(kind: Kind, ref: AlgorithmRef) -> type[Any]:
    """Import the class ``ref`` names. Raises :class:`TunerError` with a hint when it cannot."""
    if ref.name is not None:
        table = available(kind)
        value = table.get(ref.name.lower())
        if value is None and ref.name.lower() in NAS_ONLY:
            raise TunerError(f"{kind} {ref.name!r} is not supported: NAS (neural architecture search)", NAS_HINT)
        if value is None:
            close = difflib.get_close_matches(ref.name.lower(), list(table), n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known {kind}s: {', '.join(sorted(table))}"
            raise TunerError(f"unknown {kind} {brief(ref.name)}", hint)
        code_dir = _user_code_directory(kind, ref.name.lower()) if ref.name.lower() not in builtin(kind) else None
        if code_dir is not None and code_dir not in sys.path:
            sys.path.insert(0, code_dir)
        try:
            return _import_value(value)
        except (ImportError, AttributeError) as e:
            raise TunerError(
                f"{kind} {brief(ref.name)} cannot be imported: {e}",
                "install the extra it needs, e.g. pip install 'nnix[smac]'",
            ) from e
    if ref.class_name is None:
        raise TunerError(f"{kind}: neither name nor className is set", "set `name` (built-in) or `className`")
    module_name, _, attr = ref.class_name.rpartition(".")
    if not module_name:
        raise TunerError(f"className {brief(ref.class_name)} must be 'module.Class'", "e.g. my_tuner.MyTuner")
    if ref.code_directory is not None and str(ref.code_directory) not in sys.path:
        sys.path.insert(0, str(ref.code_directory))
    try:
        module = importlib.import_module(module_name)
        cls: type[Any] = getattr(module, attr)
    except (ImportError, AttributeError) as e:
        raise TunerError(
            f"cannot import {brief(ref.class_name)}: {e}", f"check codeDirectory ({ref.code_directory}) and className"
        ) from e
    return cls


def validate_args(cls: type[Any], class_args: dict[str, Any], path: str) -> list[FieldIssue]:
    """Check ``class_args`` against the class: its ``Args`` model if it has one, else its constructor."""
    args_model = getattr(cls, "Args", None)
    if isinstance(args_model, type) and issubclass(args_model, BaseModel):
        try:
            args_model.model_validate(class_args)
        except ValidationError as e:
            issues = []
            known = list(args_model.model_fields)
            for err in e.errors():
                loc = ".".join(str(p) for p in err["loc"])
                hint = None
                if err["type"] == "extra_forbidden":
                    close = difflib.get_close_matches(str(err["loc"][-1]), known, n=1)
                    hint = f"did you mean {close[0]!r}?" if close else f"accepted: {', '.join(known) or 'none'}"
                    issues.append(FieldIssue(f"{path}.{loc}", "unknown argument", hint))
                else:
                    issues.append(FieldIssue(f"{path}.{loc}", err["msg"], hint))
            return issues
        return []
    try:
        sig = inspect.signature(cls)
    except (TypeError, ValueError):
        return []
    params = sig.parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return []
    issues = []
    for key in class_args:
        if key not in params:
            close = difflib.get_close_matches(key, list(params), n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"accepted: {', '.join(params) or 'none'}"
            issues.append(FieldIssue(f"{path}.{key}", "unknown argument", hint))
    return issues


def algorithm_issues(kind: Kind, ref: AlgorithmRef, class_args: dict[str, Any], path: str) -> list[FieldIssue]:
    """Every problem with one ``tuner``/``assessor`` section, as field issues under ``path``."""
    try:
        cls = resolve(kind, ref)
    except TunerError as e:
        field = "name" if ref.name is not None else "className"
        return [FieldIssue(f"{path}.{field}", e.message, e.hint)]
    return validate_args(cls, class_args, f"{path}.classArgs")
