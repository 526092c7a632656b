"""What ``nnix algo list`` shows: every registered tuner and assessor (entry points ``nnix.tuners``
and ``nnix.assessors``), without importing any of them."""

from __future__ import annotations

from nnix.registry import Kind, available

__all__ = ["algo_list", "source_of"]

KINDS: tuple[Kind, ...] = ("tuner", "assessor")


def algo_list() -> list[tuple[str, Kind, str]]:
    """``(name, kind, "module:Class")`` for every registered algorithm, tuners first, by name."""
    return [(name, kind, value) for kind in KINDS for name, value in sorted(available(kind).items())]


def source_of(value: str) -> str:
    """``"nnix"`` for a built-in (a class in the nnix package), ``"user"`` otherwise (as NNI's nni/user)."""
    return "nnix" if value.startswith("nnix.") else "user"
