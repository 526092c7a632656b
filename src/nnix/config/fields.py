"""Field validators and value types shared by every part of the config schema.

Value parsers usable on their own (:func:`parse_duration`, :func:`parse_gpu_indices`), the annotated
types the models use (``Duration``, ``GpuIndices``, ``AbsPath``, ``NonEmpty``...), the base model
(``extra="forbid"``, camelCase aliases) and :class:`Problem`, a cross-field rule's finding. Imports no
other part of :mod:`nnix.config`.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Annotated, Any, NamedTuple

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from nnix import limits
from nnix.errors import FieldIssue
from nnix.limits import brief

__all__ = [
    "AbsPath",
    "BadValue",
    "Duration",
    "ExistingDir",
    "GpuIndices",
    "NonEmpty",
    "NonNegativeInt",
    "Port",
    "PositiveInt",
    "Problem",
    "StrictBool",
    "parse_duration",
    "parse_gpu_indices",
    "resolve_path",
]

# Validation-context keys. ``base_dir``: what relative paths resolve against. ``_LOADER``: the loader
# runs the cross-field and search-space checks itself (to report them with exact paths, all at once).
_BASE_DIR = "base_dir"
_LOADER = "nnix_loader"

DURATION_HINT = "use a number plus one of d, h, m, s, e.g. 2h"
GPU_INDICES_HINT = 'a GPU index, a list of them, or a comma-separated string, e.g. [0, 1] or "0,1"'


class Problem(NamedTuple):
    """A cross-field problem found on a validated model; ``loc`` is relative to that model (snake_case).

    ``message`` and ``hint`` may name fields as ``{path}`` (the field at ``loc``) or ``{field_name}``
    (a top-level field); :meth:`render` spells them as the user did.
    """

    loc: tuple[str | int, ...]
    message: str
    hint: str | None = None

    def render(self, loc: tuple[str | int, ...], path_of: Callable[[tuple[str | int, ...]], str]) -> FieldIssue:
        """The issue at ``loc`` (this problem's full location), with field names spelled by ``path_of``."""
        names = _FieldNames(path_of, loc)
        hint = self.hint.format_map(names) if self.hint else None
        return FieldIssue(path_of(loc), self.message.format_map(names), hint)


class _FieldNames(dict[str, str]):
    def __init__(self, path_of: Callable[[tuple[str | int, ...]], str], loc: tuple[str | int, ...]) -> None:
        super().__init__()
        self.path_of = path_of
        self.loc = loc

    def __missing__(self, key: str) -> str:
        return self.path_of(self.loc if key == "path" else (key,))


# --------------------------------------------------------------------------------------------------
# Value parsers (also usable on their own)


class BadValue(ValueError):
    """A value that cannot be parsed, with a hint for fixing it."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([dhms]?)\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: Any) -> int:
    """Seconds in an NNI duration: ``number + unit`` (d/h/m/s, any case, float allowed), rounded up.

    A bare number is seconds. Raises :class:`ValueError` on anything else.
    """
    if isinstance(value, bool):
        raise ValueError(f"invalid duration {brief(value)}")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"invalid duration {brief(value)}")
        amount, unit = Decimal(repr(value)), ""
    elif isinstance(value, str):
        match = _DURATION_RE.match(value)
        if match is None:
            raise ValueError(f"invalid duration {brief(value)}")
        try:
            amount = Decimal(match.group(1))
        except InvalidOperation as e:  # pragma: no cover - the regex admits only decimals
            raise ValueError(f"invalid duration {brief(value)}") from e
        unit = match.group(2).lower()
    else:
        raise ValueError(f"invalid duration {brief(value)}")
    return math.ceil(amount * _UNIT_SECONDS[unit])


def parse_gpu_indices(value: Any) -> list[int]:
    """NNI's GPU index forms (``1``, ``[0, 1]``, ``"0,1"``) as a list; negatives and duplicates rejected."""
    items: list[Any]
    if isinstance(value, bool):
        raise ValueError(f"expected GPU indices, got {brief(value)}")
    if isinstance(value, int):
        items = [value]
    elif isinstance(value, str):
        parts = [p.strip() for p in value.split(",")]
        items = []
        for part in parts:
            if not re.fullmatch(r"-?\d+", part):
                raise ValueError(f"{brief(part)} in {brief(value)} is not a GPU index")
            items.append(int(part))
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise ValueError(f"expected GPU indices, got {brief(value)}")
    seen: set[int] = set()
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int):
            raise ValueError(f"{brief(item)} is not a GPU index")
        if item < 0:
            raise BadValue(f"GPU index {item} is negative", "GPU indices start at 0")
        if item in seen:
            raise BadValue(f"GPU index {item} is listed twice", "list each GPU once")
        seen.add(item)
    return items


def _parsed(parse: Callable[[Any], Any], kind: str, hint: str) -> Callable[[Any], Any]:
    """A before-validator: ``parse``'s value (None passes); its ValueError as a ``kind`` error whose hint is the
    :class:`BadValue`'s own, else ``hint``."""

    def check(value: Any) -> Any:
        if value is None:
            return None
        try:
            return parse(value)
        except ValueError as e:
            raise PydanticCustomError(kind, str(e), {"hint": e.hint if isinstance(e, BadValue) else hint}) from None

    return check


_duration = _parsed(parse_duration, "duration", DURATION_HINT)
_gpu_indices = _parsed(parse_gpu_indices, "gpu_indices", GPU_INDICES_HINT)


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def _base_dir(info: ValidationInfo) -> Path:
    ctx = info.context
    if isinstance(ctx, dict) and ctx.get(_BASE_DIR) is not None:
        return Path(ctx[_BASE_DIR])
    return Path.cwd()


def _from_loader(info: ValidationInfo) -> bool:
    ctx = info.context
    return isinstance(ctx, dict) and bool(ctx.get(_LOADER))


def resolve_path(value: str | Path, base_dir: Path) -> Path:
    """``~`` expanded, relative to ``base_dir``, absolute and normalised (symlinks resolved)."""
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = base_dir / path
    return Path(os.path.realpath(path))


def _resolve(value: Path, info: ValidationInfo) -> Path:
    return resolve_path(value, _base_dir(info))


def _existing_dir(value: Path) -> Path:
    if not value.exists():
        raise PydanticCustomError("path_missing", "directory {path} does not exist", {"path": str(value)})
    if not value.is_dir():
        raise PydanticCustomError("path_not_dir", "{path} is not a directory", {"path": str(value)})
    return value


def _non_empty(value: str) -> str:
    if not value.strip():
        raise PydanticCustomError("empty", "must not be empty", {"hint": "e.g. python3 train.py"})
    return value


def _default_home() -> Path:
    env = os.environ.get("NNIX_HOME")
    if env:
        return Path(os.path.realpath(Path(env).expanduser()))
    return Path.home() / "nni-experiments"


def ip_address_of(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def check_host_name(name: str) -> str:
    """``name`` as an entry of ``allowedHosts`` (a host name, an IP address or ``*``), or ValueError."""
    value = name.strip().lower().rstrip(".")
    if value == "*" or ip_address_of(value.strip("[]")) is not None:
        return value.strip("[]")
    labels = value.split(".")
    if not value or len(value) > 253 or not all(
            0 < len(label) <= 63 and label.replace("-", "").replace("_", "").isalnum() and label.isascii()
            for label in labels):
        raise ValueError(f"{name!r} is not a host name (give a name such as `myhost.lan`, an IP address, or `*`; "
                         "no scheme, port or path)")
    return value


def _host_name(value: str) -> str:
    try:
        return check_host_name(value)
    except ValueError as e:
        hint = "e.g. allowedHosts: [myhost.lan]"
        raise PydanticCustomError("host_name", "{why}", {"why": str(e), "hint": hint}) from e


AbsPath = Annotated[Path, AfterValidator(_resolve)]
ExistingDir = Annotated[Path, AfterValidator(_resolve), AfterValidator(_existing_dir)]


def _bounded(name: str) -> Callable[[int], int]:
    """An after-validator holding an int to ``nnix.limits.BOUNDS[name]`` (the bounds REST uses too)."""
    bound = limits.BOUNDS[name]

    def check(value: int) -> int:
        problem = bound.problem(value)
        if problem is not None:
            raise PydanticCustomError("bound", problem, {"hint": bound.hint})
        return value

    return check


_AnyDuration = Annotated[int, BeforeValidator(_duration), Field(strict=True, gt=0)]
Duration = Annotated[_AnyDuration, AfterValidator(_bounded("duration"))]
GpuIndices = Annotated[list[int], BeforeValidator(_gpu_indices)]
PositiveInt = Annotated[int, Field(strict=True, gt=0)]
NonNegativeInt = Annotated[int, Field(strict=True, ge=0)]
StrictBool = Annotated[bool, Field(strict=True)]


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        loc_by_alias=False,
    )



def _non_empty_text(value: str) -> str:
    if not value.strip():
        raise PydanticCustomError("empty", "must not be empty")
    return value


Port = Annotated[int, Field(strict=True, ge=1, le=65535)]
NonEmpty = Annotated[str, AfterValidator(_non_empty_text)]


def _camel_path(loc: tuple[str | int, ...]) -> str:
    return ".".join(to_camel(p) if isinstance(p, str) else str(p) for p in loc)


