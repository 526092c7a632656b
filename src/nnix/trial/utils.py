"""Trial-side helpers, NNI compatible (``nni.utils.merge_parameter``). Stdlib only, import-light."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, TypeVar

    _Base = TypeVar("_Base")

__all__ = ["merge_parameter"]


def merge_parameter(base: _Base, override: Mapping[str, Any] | None) -> _Base:
    """Update ``base`` in place with the values of ``override`` (typically the tuner's parameters).

    ``base`` is a dict or an object with attributes such as an ``argparse.Namespace``. Every key of
    ``override`` must already exist in ``base``. A value replaces the old one when the old one is None or
    the new one is an instance of the old one's type; an int replacing a float is converted to float.
    Anything else raises :class:`ValueError`. ``override`` None leaves ``base`` alone. Returns ``base``.
    """
    if override is None:
        return base
    if isinstance(base, dict):
        values: dict[Any, Any] = base
    elif hasattr(base, "__dict__"):
        values = vars(base)
    else:
        raise TypeError(
            f"merge_parameter(): base must be a dict or an object with attributes (such as an "
            f"argparse.Namespace), got {type(base).__name__}."
        )
    updates: dict[Any, Any] = {}
    for key, new in override.items():
        if key not in values:
            raise ValueError(f"merge_parameter(): key {key!r} is not among the base parameters.")
        old = values[key]
        if old is None or isinstance(new, type(old)):
            updates[key] = new
        elif isinstance(old, float) and isinstance(new, int):
            updates[key] = float(new)
        else:
            raise ValueError(
                f"merge_parameter(): key {key!r} holds a {type(old).__name__} in the base parameters "
                f"but the new value {new!r} is a {type(new).__name__}."
            )
    if isinstance(base, dict):
        base.update(updates)
    else:
        for key, new in updates.items():
            setattr(base, key, new)
    return base
