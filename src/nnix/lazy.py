"""Lazy public names for a package: ``from nnix.tuners import TPETuner`` imports ``nnix.tuners.tpe`` only then,
so importing a package (or one module of it: the trial SDK, the agent, ``nnix --help``) costs nothing extra."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, modules: Mapping[str, tuple[str, ...]], aliases: Mapping[str, str] | None = None
) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """``__all__``, a module ``__getattr__`` and ``__dir__`` for ``package``, whose public names are ``modules``
    (module path -> the names it defines), each imported on first use and then kept; ``aliases`` (another
    spelling -> a public name) resolve to the same objects but stay out of ``__all__``."""
    where = {name: module for module, names in modules.items() for name in names}
    spelled = dict(aliases or {})

    def getattr_(name: str) -> Any:
        target = spelled.get(name, name)
        module = where.get(target)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), target)
        vars(importlib.import_module(package))[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(vars(importlib.import_module(package))) | set(where) | set(spelled))

    return sorted(where), getattr_, dir_
