"""The nnix trial SDK: what a trial calls to get its hyper-parameters and report metrics.

The API matches ``import nni`` (``get_next_parameter``, ``report_intermediate_result``,
``report_final_result``, ...); inside a trial launched by nnix, ``import nni`` resolves to a small
shim (see :func:`shim_path`) that re-exports these functions.

How a trial talks to nnix: the environment variable ``NNIX_TRIAL_CHANNEL`` names a channel directory.
The agent writes ``parameter.json`` there before the trial starts; the trial appends one JSON line per
report to ``metrics.jsonl``. Nothing connects the trial to the manager process, so a trial keeps working
(and its results are kept) while the manager restarts.

This module is stdlib-only and cheap to import: it may also be loaded by file path, under another name,
by a Python interpreter that does not have nnix installed. ``json`` and ``warnings`` are imported only
when first needed. Without ``NNIX_TRIAL_CHANNEL`` the trial runs standalone (``python3 trial.py`` by hand):
``get_next_parameter()`` returns ``{}`` -- or the parameters given by ``NNIX_PARAMETERS`` /
``NNIX_PARAMETERS_FILE`` -- with a one-line ``RuntimeWarning`` that no experiment is running, and reports are
printed to stdout.

Environment variables read here:

* ``NNIX_TRIAL_CHANNEL``: the channel directory (absent: standalone).
* ``NNIX_NAN_POLICY``: ``error`` (default) rejects NaN/±Infinity metrics; ``allow`` records them.
* ``NNIX_PARAMETER_TIMEOUT``: seconds ``get_next_parameter()`` waits for ``parameter.json`` (default 60).
* ``NNIX_PARAMETERS`` (a JSON object) or ``NNIX_PARAMETERS_FILE`` (a JSON file holding one): standalone only,
  the parameters ``get_next_parameter()`` returns (an NNI parameter record's ``parameters`` are taken too).
* ``NNI_EXP_ID``, ``NNI_TRIAL_JOB_ID``, ``NNI_TRIAL_SEQ_ID``: the ids returned by the ``get_*_id`` functions.
* ``NNI_OUTPUT_DIR``: when set, each report is also logged to ``$NNI_OUTPUT_DIR/trial.log``.
"""

from __future__ import annotations

import _thread
import os
import sys
import time

# Not ``typing.TYPE_CHECKING``: importing ``typing`` would cost more than this whole module.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

__all__ = [
    "CHANNEL_ENV",
    "METRICS_FILE",
    "PARAMETER_FILE",
    "NoMoreTrialError",
    "get_current_parameter",
    "get_experiment_id",
    "get_next_parameter",
    "get_next_parameters",
    "get_sequence_id",
    "get_trial_id",
    "report_final_result",
    "report_intermediate_result",
    "shim_path",
]

CHANNEL_ENV = "NNIX_TRIAL_CHANNEL"
NAN_POLICY_ENV = "NNIX_NAN_POLICY"
PARAMETER_TIMEOUT_ENV = "NNIX_PARAMETER_TIMEOUT"
PARAMETERS_ENV = "NNIX_PARAMETERS"
PARAMETERS_FILE_ENV = "NNIX_PARAMETERS_FILE"
PARAMETER_FILE = "parameter.json"
METRICS_FILE = "metrics.jsonl"
TRIAL_LOG_FILE = "trial.log"
MAX_METRIC_BYTES = 1_000_000
DEFAULT_PARAMETER_TIMEOUT = 60.0

_ACCEPTED = (
    "an int or a float (not a bool), a numpy/torch scalar, "
    "or a dict whose 'default' key is such a number"
)


class NoMoreTrialError(Exception):
    """Raised by a tuner when it has no more hyper-parameters to give (NNI compatible)."""


def shim_path() -> str:
    """The absolute path of the directory to put on a trial's PYTHONPATH so ``import nni`` works."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_shim")


# --------------------------------------------------------------------------------------------------
# Public API


def get_next_parameter() -> Any:
    """Return this trial's hyper-parameters (the ``parameters`` of the record the agent wrote).

    Waits for ``parameter.json`` to appear in the channel directory (up to ``NNIX_PARAMETER_TIMEOUT``
    seconds, 60 by default), then raises :class:`RuntimeError`. Later calls return the same object.
    Standalone (no ``NNIX_TRIAL_CHANNEL``): returns ``{}`` and warns once.
    """
    return _get_state().next_parameter()


get_next_parameters = get_next_parameter


def get_current_parameter(tag: str | None = None) -> Any:
    """The parameters last returned by :func:`get_next_parameter` (or their ``tag`` key); None before."""
    params = _get_state().parameters
    if params is None or tag is None:
        return params
    return params[tag]


def report_intermediate_result(metric: Any) -> None:
    """Report an intermediate (periodical) metric: a number, or a dict with a numeric ``default``."""
    _get_state().report("PERIODICAL", metric)


def report_final_result(metric: Any) -> None:
    """Report the trial's final metric: a number, or a dict with a numeric ``default``."""
    _get_state().report("FINAL", metric)


def get_experiment_id() -> str:
    """``NNI_EXP_ID``, or ``"STANDALONE"`` outside an experiment."""
    return os.environ.get("NNI_EXP_ID") or "STANDALONE"


def get_trial_id() -> str:
    """``NNI_TRIAL_JOB_ID``, or ``"STANDALONE"`` outside an experiment."""
    return os.environ.get("NNI_TRIAL_JOB_ID") or "STANDALONE"


def get_sequence_id() -> int:
    """``NNI_TRIAL_SEQ_ID`` as an int (the trial number), or 0 when unset or not an integer."""
    try:
        return int(os.environ.get("NNI_TRIAL_SEQ_ID", "0"))
    except ValueError:
        return 0


# --------------------------------------------------------------------------------------------------
# State: one object per process, created on first use.


class _TrialState:
    def __init__(self, channel: str | None) -> None:
        self.channel = os.path.abspath(channel) if channel else None
        self.record: Any = None
        self.parameters: Any = None
        self.fetched = False
        self.intermediate_seq = 0
        self.warned_standalone = False
        self.lock = _thread.allocate_lock()  # sequence numbers stay unique when threads report

    def next_parameter(self) -> Any:
        if self.channel is None:
            if not self.fetched:
                self.parameters, source = _standalone_parameters()
                self.fetched = True
                if not self.warned_standalone:
                    self.warned_standalone = True
                    import warnings

                    warnings.warn(
                        f"no nnix/NNI experiment is running ({CHANNEL_ENV} is not set): get_next_parameter() "
                        f"returns {source}; results are printed, not recorded.",
                        RuntimeWarning,
                        stacklevel=3,
                    )
            return self.parameters
        if not self.fetched:
            self.record = _read_parameter_record(self.channel)
            self.parameters = self.record.get("parameters")
            self.fetched = True
        return self.parameters

    def report(self, kind: str, metric: Any) -> None:
        function = "report_final_result" if kind == "FINAL" else "report_intermediate_result"
        if self.channel is not None and not self.fetched:
            raise RuntimeError(
                f"{function}() was called before get_next_parameter(). "
                "A trial must call get_next_parameter() (or nni.get_next_parameter()) first."
            )
        value = _normalize_metric(metric, _nan_policy())
        json = _json()
        text = json.dumps(value)
        with self.lock:
            sequence = self.intermediate_seq if kind == "PERIODICAL" else 0
            record = {"type": kind, "sequence": sequence, "value": value, "ts": time.time()}
            data = (json.dumps(record) + "\n").encode("utf-8")
            if len(data) > MAX_METRIC_BYTES:
                raise ValueError(
                    f"{function}(): the encoded metric is {len(data):,} bytes; the limit is "
                    f"{MAX_METRIC_BYTES:,} bytes. Report fewer or smaller values."
                )
            if self.channel is not None:
                _append(os.path.join(self.channel, METRICS_FILE), data)
            if kind == "PERIODICAL":
                self.intermediate_seq += 1
        message = f"Final result: {text}"
        if kind == "PERIODICAL":
            message = f"Intermediate result: {text} (index {sequence})"
        if self.channel is None:
            sys.stdout.write(f"[nnix] {message}\n")
            sys.stdout.flush()
        _log_to_trial_log(message)


_state: _TrialState | None = None


def _get_state() -> _TrialState:
    global _state
    if _state is None:
        _state = _TrialState(os.environ.get(CHANNEL_ENV) or None)
    return _state


# --------------------------------------------------------------------------------------------------
# Helpers


def _json() -> ModuleType:
    import json

    return json


def _standalone_parameters() -> tuple[Any, str]:
    """The parameters of a trial run by hand, and where they came from (for the warning)."""
    raw = os.environ.get(PARAMETERS_ENV)
    source = PARAMETERS_ENV
    if not raw:
        path = os.environ.get(PARAMETERS_FILE_ENV)
        if not path:
            return {}, f"{{}} (to try values: {PARAMETERS_ENV}='{{\"lr\": 0.1}}' or {PARAMETERS_FILE_ENV}=p.json)"
        source = f"{PARAMETERS_FILE_ENV}={path}"
        try:
            with open(path, encoding="utf-8") as f:
                raw = f.read()
        except OSError as e:
            raise ValueError(f"{PARAMETERS_FILE_ENV}: cannot read {path}: {e.strerror or e}") from None
    try:
        value = _json().loads(raw)
    except ValueError as e:
        raise ValueError(f"{source} is not valid JSON: {e}") from None
    if isinstance(value, dict) and "parameters" in value and "parameter_id" in value:  # an NNI parameter record
        value = value["parameters"]
    if not isinstance(value, dict):
        raise ValueError(f"{source} must be a JSON object of parameters, e.g. {{\"lr\": 0.1}}; got {raw[:80]!r}")
    return value, f"the parameters of {source}"


def _parameter_timeout() -> float:
    raw = os.environ.get(PARAMETER_TIMEOUT_ENV)
    if not raw:
        return DEFAULT_PARAMETER_TIMEOUT
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{PARAMETER_TIMEOUT_ENV} must be a number of seconds, got {raw!r}") from None


def _read_parameter_record(channel: str) -> dict[str, Any]:
    path = os.path.join(channel, PARAMETER_FILE)
    timeout = _parameter_timeout()
    deadline = time.monotonic() + timeout
    delay = 0.02
    problem = "the file does not exist"
    json = _json()
    while True:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            problem = "the file does not exist"
            if not os.path.isdir(channel):
                problem += " (nor does the channel directory)"
        else:
            try:
                record = json.loads(data)
            except ValueError as e:
                problem = f"the file is not valid JSON ({e})"
            else:
                if isinstance(record, dict) and "parameters" in record:
                    return record
                problem = "the file has no 'parameters' field"
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RuntimeError(
                f"get_next_parameter(): no hyper-parameters after waiting {timeout:g} s for {path}: "
                f"{problem}. The trial was started through {CHANNEL_ENV}={channel} but the nnix agent "
                f"did not provide its parameters (set {PARAMETER_TIMEOUT_ENV} to wait longer)."
            )
        time.sleep(min(delay, remaining))
        delay = min(delay * 2, 0.5)


def _nan_policy() -> str:
    raw = os.environ.get(NAN_POLICY_ENV) or "error"
    policy = raw.strip().lower()
    if policy not in ("error", "allow"):
        raise ValueError(f"{NAN_POLICY_ENV} must be 'error' or 'allow', got {raw!r}")
    return policy


def _type_name(value: object) -> str:
    cls = type(value)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _describe(value: object) -> str:
    try:
        text = repr(value)
    except Exception:
        text = "<unprintable>"
    if len(text) > 80:
        text = text[:77] + "..."
    desc = f"{text} of type {_type_name(value)}"
    shape = getattr(value, "shape", None)
    if shape is not None and getattr(value, "ndim", 0) != 0:
        desc += f" with shape {tuple(shape)!r} (only single values are accepted; use .item() on a scalar)"
    return desc


def _as_number(value: object) -> int | float | None:
    """``value`` as an int or float when it is a (numpy/torch-like) real scalar, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, (str, bytes, bytearray, complex)):
        return None
    if not hasattr(type(value), "__float__"):
        return None
    ndim = getattr(value, "ndim", 0)
    if isinstance(ndim, int) and ndim != 0:
        return None
    dtype = getattr(value, "dtype", None)
    if dtype is not None:
        kind = getattr(dtype, "kind", None)
        name = str(dtype)
        if kind in ("b", "c") or "bool" in name or "complex" in name:
            return None
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None


def _check_finite(number: int | float, where: str, policy: str) -> None:
    if policy == "allow" or isinstance(number, int) or number - number == 0:
        return
    raise ValueError(
        f"The metric {where} is {number!r}, which is not a finite number. Report a finite number, or "
        f"set `nanPolicy: allow` in the experiment config (or {NAN_POLICY_ENV}=allow) to record it."
    )


def _normalize_metric(metric: object, policy: str) -> Any:
    number = _as_number(metric)
    if number is not None:
        _check_finite(number, "value", policy)
        return number
    if isinstance(metric, dict):
        if "default" not in metric:
            keys = ", ".join(repr(k) for k in list(metric)[:10])
            raise TypeError(
                f"A dict metric needs a numeric 'default' key; got a dict with keys [{keys}]. "
                f"Accepted: {_ACCEPTED}."
            )
        out: dict[str, Any] = {}
        for key, item in metric.items():
            if not isinstance(key, str):
                raise TypeError(
                    f"Metric dict keys must be strings; got key {key!r} of type {_type_name(key)}."
                )
            if key == "default":
                default = _as_number(item)
                if default is None:
                    raise TypeError(
                        f"The metric's 'default' must be a number; got {_describe(item)}. "
                        f"Accepted: {_ACCEPTED}."
                    )
                _check_finite(default, "['default']", policy)
                out[key] = default
            else:
                out[key] = _normalize_extra(item, f"[{key!r}]", policy)
        return out
    raise TypeError(f"A metric must be {_ACCEPTED}; got {_describe(metric)}.")


def _normalize_extra(value: object, where: str, policy: str) -> Any:
    """An extra (non-default) value of a dict metric: JSON data, numbers possibly numpy/torch scalars."""
    if value is None or isinstance(value, (str, bool)):
        return value
    number = _as_number(value)
    if number is not None:
        _check_finite(number, where, policy)
        return number
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(
                    f"Metric dict keys must be strings; got key {key!r} of type {_type_name(key)} in {where}."
                )
            out[key] = _normalize_extra(item, f"{where}[{key!r}]", policy)
        return out
    if isinstance(value, (list, tuple)):
        return [_normalize_extra(item, f"{where}[{i}]", policy) for i, item in enumerate(value)]
    raise TypeError(
        f"The metric {where} is {_describe(value)}, which cannot be recorded. Values besides 'default' "
        "may be numbers, strings, booleans, None, or lists/dicts of those."
    )


def _open_append(path: str) -> int:
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    flags |= getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    return os.open(path, flags, 0o644)


def _append(path: str, data: bytes) -> None:
    """Append ``data`` with a single ``os.write`` (O_APPEND: concurrent lines never interleave)."""
    fd = _open_append(path)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
    finally:
        os.close(fd)


def _log_to_trial_log(message: str) -> None:
    output_dir = os.environ.get("NNI_OUTPUT_DIR")
    if not output_dir:
        return
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    try:
        _append(os.path.join(output_dir, TRIAL_LOG_FILE), f"[{stamp}] INFO {message}\n".encode())
    except OSError:
        return  # the human log is best effort; the metric itself went to the channel
