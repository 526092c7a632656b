"""Bounds on what users hand nnix: one place, used by the config model, the REST API, the CLI and the
readers of config and search-space files (:mod:`nnix.documents`).

Every bound is far above what a real experiment needs and low enough that nothing the manager does with
a value at the bound can hang, overflow or exhaust memory. The numbers are documented in the README
("Using it").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# --- documents (config files, search-space files, search spaces given inline or over REST) ---------

MAX_FILE_BYTES = 32 * 1024 * 1024
"""Largest config or search-space file read (32 MiB)."""

MAX_DEPTH = 100
"""Deepest nesting of mappings and lists in a config or search space."""

MAX_VALUES = 2_000_000
"""Most values (scalars, lists, mappings) in one document, YAML aliases counted as expanded."""

MAX_CHOICE_OPTIONS = 1_000_000
"""Most options of one ``choice``."""

MAX_CHOICE_NESTING = 16
"""Most levels of nested choices (a choice inside an option of a choice ...)."""

MAX_INT_DIGITS = 4000
"""Longest integer literal (Python refuses to convert longer ones from text)."""

# --- the REST API ---------------------------------------------------------------------------------

MAX_REQUEST_BYTES = 8 * 1024 * 1024
"""Largest request body the manager's REST API reads (8 MiB; 413 above it), and so the most the CLI sends in
one request (an ``experiment import`` included)."""

# --- experiment archives (``nnix experiment load``) --------------------------------------------------

MAX_ARCHIVE_MEMBERS = 1_000_000
"""Most members (files and folders) of one archive."""

MAX_ARCHIVE_BYTES = 1024**4
"""Most bytes an archive may hold uncompressed, all members together (1 TiB), checked against the members'
headers before anything is extracted (and the bytes counted while extracting); the file system must moreover
have room for them."""

MAX_ARCHIVE_RATIO = 200
"""Largest compression ratio (uncompressed / compressed) of a member larger than :data:`ARCHIVE_RATIO_FLOOR`:
experiment data (stores, logs, checkpoints) stays far below it; a zip bomb's members are near deflate's ~1000."""

ARCHIVE_RATIO_FLOOR = 1024 * 1024
"""Members up to this size (1 MiB) are not held to :data:`MAX_ARCHIVE_RATIO` (a small file of zeros may
compress better, and costs nothing)."""

MAX_MANIFEST_BYTES = 1024 * 1024
"""Largest ``nnix-archive.json`` read from an archive."""

# --- experiment limits (config file, ``nnix update``, REST) ---------------------------------------

MAX_TRIAL_CONCURRENCY = 10_000
MAX_TRIAL_NUMBER = 999_999_999
MAX_TRIAL_GPU_NUMBER = 1024
MAX_DURATION_SECONDS = 3650 * 86400
"""Longest duration (ten years): ``maxExperimentDuration``, ``maxTrialDuration`` and every timeout."""


@dataclass(frozen=True)
class Bound:
    """The allowed range of one integer setting, and how to say that it was missed."""

    name: str
    low: int
    high: int
    unit: str = ""

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is out of bounds (a message without the field name), or None if it is fine."""
        if isinstance(value, bool) or not isinstance(value, int):
            return f"must be an integer{' number of seconds' if self.unit else ''}, got {brief(value)}"
        if value < self.low:
            return f"must be at least {self.low}{self.unit}, got {brief(value)}{self.unit}"
        if value > self.high:
            return f"must be at most {self.high}{self.unit}, got {brief(value)}{self.unit}"
        return None

    @property
    def hint(self) -> str:
        high = f"{self.high // 86400}d" if self.unit and self.high % 86400 == 0 else f"{self.high}{self.unit}"
        return f"nnix accepts {self.name} from {self.low}{self.unit} to {high}"


BOUNDS: dict[str, Bound] = {
    "trial_concurrency": Bound("trialConcurrency", 1, MAX_TRIAL_CONCURRENCY),
    "max_trial_number": Bound("maxTrialNumber", 1, MAX_TRIAL_NUMBER),
    "trial_gpu_number": Bound("trialGpuNumber", 0, MAX_TRIAL_GPU_NUMBER),
    "max_experiment_duration": Bound("maxExperimentDuration", 1, MAX_DURATION_SECONDS, "s"),
    "max_trial_duration": Bound("maxTrialDuration", 1, MAX_DURATION_SECONDS, "s"),
    "duration": Bound("a duration", 1, MAX_DURATION_SECONDS, "s"),
}
"""By snake_case field name. Used by :class:`nnix.config.ExperimentConfig` and the REST updates."""


# --- showing user values in messages ---------------------------------------------------------------

BRIEF_WIDTH = 80


def brief(value: Any, width: int = BRIEF_WIDTH) -> str:
    """``repr(value)`` cut to about ``width`` characters, built without ever making the full repr:
    safe on huge strings, integers too long for ``str()``, and (aliased) structures of any size."""
    out: list[str] = []
    _brief(value, out, [width], 0)
    text = "".join(out)
    return text if len(text) <= width else text[: max(width - 3, 1)] + "..."


def _brief(value: Any, out: list[str], budget: list[int], depth: int) -> None:
    def put(text: str) -> None:
        out.append(text)
        budget[0] -= len(text)

    if budget[0] <= 0:
        return
    if isinstance(value, str):
        head = value[: budget[0] + 1]
        put(repr(head) if len(head) == len(value) else repr(head)[:-1] + "...")
    elif isinstance(value, bool) or value is None:
        put(repr(value))
    elif isinstance(value, int):
        digits = int(value.bit_length() * math.log10(2)) + 1
        put(repr(value) if digits <= 200 else f"<an integer of about {digits} digits>")
    elif isinstance(value, float):
        put(repr(value))
    elif isinstance(value, (bytes, bytearray)):
        raw = bytes(value[: budget[0] + 1])
        put(repr(raw) if len(raw) == len(value) else repr(raw)[:-1] + "...")
    elif isinstance(value, (list, tuple, Mapping)):
        is_map = isinstance(value, Mapping)
        opening, closing = ("{", "}") if is_map else (("[", "]") if isinstance(value, list) else ("(", ")"))
        put(opening)
        if depth >= 20:
            put("...")
        items: Any = value.items() if isinstance(value, Mapping) else value
        for i, item in enumerate(items):
            if budget[0] <= 0 or depth >= 20:
                break
            if i:
                put(", ")
            if is_map:
                k, v = item
                _brief(k, out, budget, depth + 1)
                put(": ")
                _brief(v, out, budget, depth + 1)
            else:
                _brief(item, out, budget, depth + 1)
        if isinstance(value, tuple) and len(value) == 1:
            put(",")
        put(closing)
    else:
        put(f"<{type(value).__name__}>")


# --- the shape of parsed documents -----------------------------------------------------------------


def shape_problem(value: Any, *, max_depth: int = MAX_DEPTH, max_values: int = MAX_VALUES) -> tuple[str, str] | None:
    """``(path, message)`` if ``value`` (parsed JSON/YAML) nests deeper than ``max_depth`` or holds more
    than ``max_values`` values; None if it is within bounds. Iterative, and it stops at the first bound
    crossed, so it is cheap on anything, including structures that share parts (YAML aliases)."""
    stack: list[tuple[Any, int, tuple[str | int, ...]]] = [(value, 0, ())]
    count = 0
    while stack:
        node, depth, path = stack.pop()
        count += 1
        if count > max_values:
            return "", f"holds more than {max_values:,} values"
        if isinstance(node, Mapping):
            children: Any = node.items()
        elif isinstance(node, (list, tuple)):
            children = enumerate(node)
        else:
            continue
        if depth >= max_depth:
            return dotted(path), f"nested deeper than {max_depth} levels"
        for k, child in children:
            if isinstance(child, (Mapping, list, tuple)):
                stack.append((child, depth + 1, (*path, k if isinstance(k, int) else brief(k, 40).strip("'"))))
            else:
                count += 1
                if count > max_values:
                    return "", f"holds more than {max_values:,} values"
    return None


def dotted(path: tuple[str | int, ...]) -> str:
    """``("a", 0, "b")`` → ``a[0].b``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
