"""Lazy public names for a package: ``from nnix.tuners import TPETuner`` imports ``nnix.tuners.tpe`` only then,
so importing a package (or one module of it: the trial SDK, the agent, ``nnix --help``) costs nothing extra."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, table: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module ``__getattr__`` and ``__dir__`` for ``package`` that import ``table[name]`` (a module path, or
    ``module:attribute`` where the attribute has another name) on first use and keep the value."""

    def getattr_(name: str) -> Any:
        where = table.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = where.partition(":")
        value = getattr(importlib.import_module(module), attribute or name)
        vars(importlib.import_module(package))[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(vars(importlib.import_module(package))) | set(table))

    return getattr_, dir_
