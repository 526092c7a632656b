"""Events: every fact of an experiment, appended to the store before anything acts on it.

Events are frozen dataclasses. On disk each is one row ``(seq, ts, kind, trial_id, body)`` where
``body`` is the JSON of the event's fields. ``kind`` is the class name. Adding a field with a
default keeps old logs readable; never rename or remove one.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from nnix.model.status import CancelReason, ExperimentStatus, MetricType, TrialStatus


@dataclass(frozen=True)
class Event:
    """Base class. ``trial_id`` is indexed in the store; empty for experiment-level events."""

    KINDS: ClassVar[dict[str, type[Event]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        Event.KINDS[cls.__name__] = cls

    @property
    def kind(self) -> str:
        return type(self).__name__

    @property
    def trial_ref(self) -> str | None:
        value = getattr(self, "trial_id", None)
        return value if isinstance(value, str) else None


@dataclass(frozen=True)
class ExperimentCreated(Event):
    """The first event of every log. ``config`` is the native config as JSON (snake_case)."""

    experiment_id: str
    config: dict[str, Any]
    seed: int
    direction: str = ""  # the tuner's optimize_mode, its default included ("" in logs of nnix 0.1.0)


@dataclass(frozen=True)
class ManagerStarted(Event):
    """A manager process took charge (create, resume or view)."""

    pid: int
    action: str  # "create" | "resume" | "view"
    port: int | None = None
    host: str = "127.0.0.1"


@dataclass(frozen=True)
class ManagerHeartbeat(Event):
    """Written periodically so elapsed experiment time survives a crash (NNI persists every 10 s)."""


@dataclass(frozen=True)
class StatusChanged(Event):
    status: ExperimentStatus
    message: str = ""


@dataclass(frozen=True)
class LimitsUpdated(Event):
    """A runtime change of ``trial_concurrency``, ``max_trial_number``, ``max_experiment_duration``
    (seconds) or ``search_space``; ``value`` None removes a limit."""

    field: str
    value: Any


@dataclass(frozen=True)
class TrialCreated(Event):
    trial_id: str
    sequence_id: int
    parameter_id: int | None
    params: dict[str, Any]
    source: str = "algorithm"  # "algorithm" | "customized"


@dataclass(frozen=True)
class TrialStarted(Event):
    trial_id: str
    environment_id: str
    output_dir: str
    pid: int | None = None
    pid_start: str | None = None  # process start time token, to detect pid reuse on re-attach
    gpus: tuple[int, ...] | None = None


@dataclass(frozen=True)
class MetricReported(Event):
    """``index`` is the metric's line number in the trial's channel: (trial_id, index) is unique."""

    trial_id: str
    type: MetricType
    sequence: int
    value: Any
    index: int
    parameter_id: int | None = None


@dataclass(frozen=True)
class TrialCancelRequested(Event):
    trial_id: str
    reason: CancelReason


@dataclass(frozen=True)
class TrialEnded(Event):
    trial_id: str
    status: TrialStatus
    exit_code: int | None = None
    message: str = ""


@dataclass(frozen=True)
class TrialRequeued(Event):
    """The trial's environment was lost and the trial goes back to WAITING, to run again from scratch
    elsewhere (a remote service's ``lostHostPolicy: requeue``). Its earlier metrics are dropped from the
    state (they stay in the log) and it keeps its id, sequence id and parameters."""

    trial_id: str
    reason: str = ""


@dataclass(frozen=True)
class TrialWarning(Event):
    """Something went wrong around a trial without stopping it; shown with the trial (``trial ls``, REST,
    web UI). ``topic`` "metrics": ``count`` lines of its metric channel were not recorded (malformed, too
    long, NaN under ``nanPolicy: error``...), the highest being line ``index`` (a re-reading of the channel
    after a resume does not report them again); "processes": ``count`` processes of the trial were still
    there when it ended (or outside its process group when it was killed) and were killed."""

    trial_id: str
    topic: str
    message: str
    count: int = 1
    index: int = -1


@dataclass(frozen=True)
class DataImported(Event):
    """Prior results fed to the tuner (``experiment import``): a list of ``{parameter, value}``."""

    records: list[dict[str, Any]] = field(default_factory=list)


# --- (de)serialisation -------------------------------------------------------------------------


def _json_default(obj: Any) -> Any:
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def encode(event: Event) -> str:
    if type(event) is MetricReported:  # the hot event (millions in big experiments): a compact row
        return json.dumps(metric_row(event), separators=(",", ":"), allow_nan=True)
    body = {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
    return json.dumps(body, default=_json_default, separators=(",", ":"), allow_nan=True)


def metric_row(e: MetricReported) -> list[Any]:
    """``[trial_id, type, sequence, index, parameter_id, value]``: how a metric is stored."""
    return [e.trial_id, e.type.value, e.sequence, e.index, e.parameter_id, e.value]




_ENUM_TYPES: tuple[type[Any], ...] = (TrialStatus, ExperimentStatus, MetricType, CancelReason)


@functools.cache
def _decoder(kind: str) -> tuple[frozenset[str], tuple[tuple[str, Callable[[Any], Any]], ...]]:
    """Per event kind, once: its field names and the converters JSON values need (enums, tuples)."""
    cls = Event.KINDS[kind]
    names = frozenset(f.name for f in dataclasses.fields(cls))
    converters: list[tuple[str, Callable[[Any], Any]]] = []
    for f in dataclasses.fields(cls):
        text = str(f.type)
        for enum in _ENUM_TYPES:
            if enum.__name__ in text:
                converters.append((f.name, enum))
                break
        else:
            if text.startswith("tuple"):
                converters.append((f.name, tuple))
    return names, tuple(converters)


def decode(kind: str, body: str) -> Event:
    cls = Event.KINDS.get(kind)
    if cls is None:
        raise ValueError(f"unknown event kind {kind!r}")
    data = json.loads(body)
    if isinstance(data, list):  # a compact metric row
        tid, mtype, sequence, index, parameter_id, value = data
        return MetricReported(tid, MetricType(mtype), sequence, value, index, parameter_id)
    names, converters = _decoder(kind)
    for name, convert in converters:
        value = data.get(name)
        if value is not None:
            data[name] = convert(value)
    if len(data) != len(names) or not names.issuperset(data):
        data = {k: v for k, v in data.items() if k in names}  # written by a newer nnix: ignore new fields
    return cls(**data)


def is_finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
