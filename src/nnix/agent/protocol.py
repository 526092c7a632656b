"""The agent protocol: versioned JSON messages between the manager and the agents in environments.

Small on purpose. Every engine (local, SSH, Slurm, Ray, Kubernetes, OpenPAI) speaks it; a service
only starts and stops environments that run ``python -m nnix.agent``.

Envelope: ``{"v": PROTOCOL, "seq": n, "type": "<name>", "body": {...}}``. ``seq`` counts messages
per direction and per agent, so a message re-sent after a network cut is recognised and applied
once. Types:

agent → manager   ``hello`` (version, environment, resources, trials it still runs),
                  ``started``, ``metrics``, ``exited`` (the runner's events), ``heartbeat``,
                  ``output`` (a chunk of a trial's stdout/stderr at a byte offset, streamed while it
                  runs; agents started with ``--no-output-stream`` send none)
manager → agent   ``run`` (a :class:`~nnix.model.runs.TrialSpec`), ``attach`` (watch a trial that
                  an earlier agent started: it outlived that agent), ``kill``, ``shutdown``

``hello`` opens (and, after a network cut, re-opens) a session; it is not part of the numbered stream
(its ``seq`` is 0). Its ``instance`` is a nonce of the agent process: a restarted agent is a new
instance and starts its numbering again. Commands are idempotent (``run`` of a trial the agent already
runs, ``attach`` of one it already watches, a second ``kill`` or ``shutdown``: no effect), so a command
delivered twice across a reconnect does no harm.

Version rule: manager and agent must agree on (major, minor) of the nnix version, compared as
integers (so 0.10 is not 0.1 — NNI compared strings and got two-digit minors wrong).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nnix.agent.channel import REJECT_SAMPLE
from nnix.model.runs import Exited, Metrics, Output, Started, TrialSpec

PROTOCOL = 1


@dataclass(frozen=True)
class Hello:
    environment_id: str
    version: str
    resources: dict[str, Any] = field(default_factory=dict)  # {"cpus": n, "gpus": [{index, util, ...}]}
    running: list[str] = field(default_factory=list)  # trials it runs or has not yet reported the exit of
    instance: str = ""


@dataclass(frozen=True)
class Heartbeat:
    resources: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Run:
    spec: TrialSpec


@dataclass(frozen=True)
class Attach:
    """Watch a trial started by an earlier agent (its process group outlived that agent): report the
    metrics after channel line ``after_index`` and its exit."""

    trial_id: str
    output_dir: str
    pid: int | None
    pid_start: str | None
    after_index: int = -1


@dataclass(frozen=True)
class Kill:
    trial_id: str


@dataclass(frozen=True)
class Shutdown:
    reason: str = ""
    kill_trials: bool = False  # False: the agent exits and its trials run on (a later agent can attach)


Message = Hello | Heartbeat | Started | Metrics | Exited | Output | Run | Attach | Kill | Shutdown

_TYPES: dict[str, type[Any]] = {
    "hello": Hello,
    "heartbeat": Heartbeat,
    "started": Started,
    "metrics": Metrics,
    "exited": Exited,
    "output": Output,
    "run": Run,
    "attach": Attach,
    "kill": Kill,
    "shutdown": Shutdown,
}
_NAMES = {cls: name for name, cls in _TYPES.items()}


class ProtocolError(ValueError):
    """A message that does not follow the protocol (wrong version, unknown type, bad body)."""


def _plain(obj: Any) -> Any:
    if isinstance(obj, TrialSpec):
        body = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
        body["code_dir"], body["output_dir"] = str(obj.code_dir), str(obj.output_dir)
        return body
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple):
        return [_plain(x) for x in obj]
    if isinstance(obj, list):
        return [_plain(x) for x in obj]
    return obj


def encode(message: Message, seq: int) -> dict[str, Any]:
    return {"v": PROTOCOL, "seq": seq, "type": _NAMES[type(message)], "body": _plain(message)}


def decode(envelope: Any) -> tuple[int, Message]:
    """``(seq, message)`` from an envelope; raises :class:`ProtocolError` with a clear reason."""
    if not isinstance(envelope, dict):
        raise ProtocolError("a message must be a JSON object")
    if envelope.get("v") != PROTOCOL:
        raise ProtocolError(f"protocol version {envelope.get('v')!r} is not {PROTOCOL}: upgrade nnix on both sides")
    cls = _TYPES.get(str(envelope.get("type")))
    if cls is None:
        raise ProtocolError(f"unknown message type {envelope.get('type')!r}")
    body = envelope.get("body")
    seq = envelope.get("seq")
    if not isinstance(body, dict) or not isinstance(seq, int):
        raise ProtocolError("a message needs an integer 'seq' and an object 'body'")
    try:
        if cls is Run:
            spec = dict(body["spec"])
            spec["code_dir"], spec["output_dir"] = Path(spec["code_dir"]), Path(spec["output_dir"])
            return seq, Run(TrialSpec(**spec))
        if cls is Metrics:  # the records are checked by the manager (nnix.agent.channel.metric_problem)
            rejected = body.get("rejected") or []
            return seq, Metrics(
                str(body["trial_id"]),
                [(_line_index(i), m) for i, m in body["items"]],
                [(_line_index(i), str(why)[:300]) for i, why in rejected[:REJECT_SAMPLE]],
                _count(body.get("rejected_count", 0)),
                _line_index(body.get("rejected_last", -1), allow_none=True),
                str(body.get("notice") or "")[:300],
            )
        if cls is Exited and "leftovers" in body:
            body = {**body, "leftovers": _count(body["leftovers"])}
        if cls is Started and body.get("gpus") is not None:
            body = {**body, "gpus": tuple(body["gpus"])}
        message: Message = cls(**body)
    except (KeyError, TypeError, ValueError, OverflowError) as e:
        raise ProtocolError(f"bad {envelope.get('type')} message: {e}") from e
    return seq, message


def _line_index(value: Any, allow_none: bool = False) -> int:
    """A channel line number: an integer in [0, 2**53) (-1 where ``allow_none``)."""
    if isinstance(value, bool) or not isinstance(value, int) or not (-1 if allow_none else 0) <= value < 2**53:
        raise ValueError(f"a line index must be an integer in [0, 2**53), not {str(value)[:40]}")
    return value


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**53:
        raise ValueError(f"a count must be a non-negative integer, not {str(value)[:40]}")
    return value


def versions_compatible(manager: str, agent: str) -> bool:
    """Same (major, minor), compared as integers."""

    def key(v: str) -> tuple[int, int]:
        parts = ([*v.split("."), "0", "0"])[:2]
        try:
            return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
        except ValueError:
            return (-1, -1)

    return key(manager) == key(agent) and key(manager) != (-1, -1)
