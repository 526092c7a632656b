"""``nnix algo list|register|unregister|show``: the tuners and assessors configs can name.

Built-ins come from entry points (``nnix.tuners``, ``nnix.assessors``); ``register`` adds the algorithms of
an NNI meta file (``algoType``, ``builtinName``, ``className``, optional ``alias``, ``classArgsValidator``,
``acceptClassArgs``, ``isAdvisor``; nnix also reads ``codeDirectory``, the directory to import the class
from, relative to the meta file) to ``$NNIX_HOME/.nnix/algorithms.json``, after importing each class to
check it. A registered name never shadows a built-in one, nnix's or NNI's."""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nnix.errors import NnixError
from nnix.registry import (
    Kind,
    algo_kind,
    available,
    builtin,
    meta_names,
    user_algorithms,
    user_algorithms_file,
)

__all__ = ["algo_list", "register", "show", "source_of", "unregister"]

KINDS: tuple[Kind, ...] = ("tuner", "assessor")
# NNI 3.0's built-in names and aliases (nni-spec.md 3.1): never taken by a registered algorithm
NNI_BUILTINS = frozenset(n.lower() for n in (
    "TPE", "TPE_legacy", "Random", "Anneal", "Evolution", "SMAC", "Batch", "BatchTuner", "GridSearch",
    "NetworkMorphism", "Metis", "MetisTuner", "GP", "GPTuner", "PBT", "PBTTuner", "RegularizedEvolutionTuner",
    "DNGO", "DNGOTuner", "PPO", "PPOTuner", "Hyperband", "BOHB", "Medianstop", "Curvefitting"))
META_FIELDS = {"algoType", "builtinName", "className", "classArgsValidator", "alias", "acceptClassArgs",
               "isAdvisor", "codeDirectory", "classArgs"}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$")


def algo_list() -> list[tuple[str, Kind, str]]:
    """``(name, kind, "module:Class")`` for every algorithm configs can name, tuners first, by name."""
    return [(name, kind, value) for kind in KINDS for name, value in sorted(available(kind).items())]


def source_of(value: str) -> str:
    """``"nnix"`` for a built-in (a class in the nnix package), ``"user"`` otherwise (as NNI's nni/user)."""
    return "nnix" if value.startswith("nnix.") else "user"


def _taken(name: str) -> str | None:
    low = name.lower()
    if low in NNI_BUILTINS:
        return "an NNI built-in name"
    for kind in KINDS:
        if low in builtin(kind):
            return f"a built-in nnix {kind}"
    return None


def _read_meta(path: Path) -> list[dict[str, Any]]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise NnixError(f"cannot read {path}: {e}") from e
    except yaml.YAMLError as e:
        raise NnixError(f"{path} is not valid YAML: {e}") from e
    items = data.get("algorithms", [data]) if isinstance(data, dict) else data
    if not isinstance(items, list) or not items:
        raise NnixError(f"{path}: a meta file is one algorithm (a mapping) or `algorithms: [...]`",
                        "e.g. builtinName: MyTuner, className: my_pkg.my_tuner.MyTuner, algoType: tuner")
    out = []
    for i, item in enumerate(items):
        where = f"{path}" + (f" [{i}]" if len(items) > 1 else "")
        if not isinstance(item, dict):
            raise NnixError(f"{where}: an algorithm is a mapping, not {type(item).__name__}")
        unknown = sorted(set(item) - META_FIELDS)
        if unknown:
            raise NnixError(f"{where}: unknown field(s) {', '.join(unknown)}",
                            f"known: {', '.join(sorted(META_FIELDS))}")
        name, cls, kind = item.get("builtinName"), item.get("className"), item.get("algoType", "tuner")
        if not isinstance(name, str) or not _NAME.match(name):
            raise NnixError(f"{where}: builtinName must be a name (letters, digits, _ or -), got {name!r}")
        if kind not in ("tuner", "assessor", "advisor"):
            raise NnixError(f"{where}: algoType must be tuner, assessor or advisor, got {kind!r}")
        if not isinstance(cls, str) or "." not in cls.strip(".") or any(not p.isidentifier() for p in cls.split(".")):
            raise NnixError(f"{where}: className must be 'module.Class', got {cls!r}", "e.g. my_pkg.tuners.MyTuner")
        alias = item.get("alias")
        if alias is not None and (not isinstance(alias, str) or not _NAME.match(alias)):
            raise NnixError(f"{where}: alias must be a name, got {alias!r}")
        meta = dict(item)
        meta["algoType"] = kind
        if "codeDirectory" in meta:
            code = Path(str(meta["codeDirectory"])).expanduser()
            code = code if code.is_absolute() else path.parent / code
            if not code.is_dir():
                raise NnixError(f"{where}: codeDirectory {code} is not a directory")
            meta["codeDirectory"] = os.path.realpath(code)
        out.append(meta)
    return out


def _check_class(meta: dict[str, Any]) -> str:
    """Import the class as the manager will; say what it is (nnix-style or NNI-style)."""
    module_name, _, attr = meta["className"].rpartition(".")
    code = str(meta.get("codeDirectory") or "")
    added = bool(code) and code not in sys.path
    if added:
        sys.path.insert(0, code)
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise NnixError(f"cannot import {meta['className']}: {e}",
                        "install its package in this Python, or set codeDirectory in the meta file") from e
    finally:
        if added:
            sys.path.remove(code)
    kind = algo_kind(meta)
    if hasattr(cls, "Args") and (hasattr(cls, "suggest") or hasattr(cls, "assess")):
        return "nnix"
    needed = "assess_trial" if kind == "assessor" else "generate_parameters"
    if not isinstance(cls, type) or not hasattr(cls, needed):
        raise NnixError(f"{meta['className']} is not a {kind}: it has no {needed}() (NNI) nor Args + "
                        f"{'assess' if kind == 'assessor' else 'suggest'}() (nnix)")
    return "NNI"


@contextlib.contextmanager
def _locked_file() -> Iterator[dict[str, Any]]:
    path = user_algorithms_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = {"algorithms": user_algorithms()}
        yield data
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)


def register(meta_path: Path) -> list[str]:
    """Register every algorithm of an NNI meta file; returns lines saying what was registered."""
    metas = _read_meta(meta_path)
    lines = []
    with _locked_file() as data:
        registered = {n: m["builtinName"] for m in data["algorithms"] for n in meta_names(m)}
        for meta in metas:
            for name in meta_names(meta):
                why = _taken(name)
                if why is not None:
                    raise NnixError(f"cannot register {name!r}: it is {why}",
                                    "choose another builtinName/alias (built-ins cannot be overwritten)")
                if name in registered:
                    raise NnixError(f"{name!r} is already registered (by {registered[name]})",
                                    f"nnix algo unregister {registered[name]} first")
            style = _check_class(meta)
            data["algorithms"].append(meta)
            for name in meta_names(meta):
                registered[name] = meta["builtinName"]
            kind = algo_kind(meta)
            lines.append(f"registered {kind} {meta['builtinName']} ({meta['className']}, {style}-style)"
                         + (f", alias {meta['alias']}" if meta.get("alias") else ""))
    return lines


def _find(name: str) -> dict[str, Any] | None:
    low = name.lower()
    for meta in user_algorithms():
        if low in meta_names(meta):
            return meta
    return None


def unregister(name: str) -> str:
    if _find(name) is None:
        for kind in KINDS:
            if name.lower() in builtin(kind):
                raise NnixError(f"{name!r} is a built-in {kind}: it cannot be unregistered")
        raise NnixError(f"no registered algorithm {name!r}", "nnix algo list shows them (source: user)")
    with _locked_file() as data:
        data["algorithms"] = [m for m in data["algorithms"] if name.lower() not in meta_names(m)]
    return f"unregistered {name}"


def show(name: str) -> dict[str, Any]:
    meta = _find(name)
    if meta is not None:
        return {**meta, "source": "user"}
    for kind in KINDS:
        value = builtin(kind).get(name.lower())
        if value is not None:
            module, _, attr = value.partition(":")
            return {"builtinName": name, "algoType": kind, "className": f"{module}.{attr}", "source": "nnix"}
    from nnix.registry import NAS_HINT, NAS_ONLY

    if name.lower() in NAS_ONLY:
        raise NnixError(f"{name!r} is not supported: NAS (neural architecture search)", NAS_HINT)
    raise NnixError(f"no algorithm {name!r}", "nnix algo list shows them")
