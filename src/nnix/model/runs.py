"""What a training service and the manager say to each other about trials: the spec of a trial to run, and the
events that come back (started, metrics, exited, output, requeued). Services, agents and the manager all speak
these words; they are leaf data (no I/O), here so that no layer imports a process runner to name them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Exited", "Metrics", "Output", "Requeued", "RunnerEvent", "Started", "TrialSpec"]


@dataclass(frozen=True)
class TrialSpec:
    """Everything needed to run one trial in an environment."""

    trial_id: str
    command: str
    code_dir: Path
    output_dir: Path
    record: dict[str, Any]  # NNI's parameter record: parameter_id, parameter_source, parameters, ...
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Started:
    trial_id: str
    pid: int
    pid_start: str | None
    output_dir: str
    gpus: tuple[int, ...] | None = None
    environment_id: str = "local-env"


@dataclass(frozen=True)
class Metrics:
    trial_id: str
    items: list[tuple[int, dict[str, Any]]]  # (line index in the channel, message)
    # lines of the channel that were not recorded: a sample of (line index, reason), how many, the last index
    rejected: list[tuple[int, str]] = field(default_factory=list)
    rejected_count: int = 0
    rejected_last: int = -1
    # what is wrong with one of the trial's files (its channel a FIFO, its stderr a link...): a warning on the
    # trial, given once; "" when nothing is (a message may carry only this)
    notice: str = ""

    @property
    def last_line(self) -> int:
        """The highest channel line this message accounts for (-1: none)."""
        return max([self.rejected_last, *(i for i, _ in self.items)])


@dataclass(frozen=True)
class Exited:
    trial_id: str
    exit_code: int | None  # None: unknown (killed, or vanished while nobody watched)
    signal: int | None = None
    stderr_tail: str = ""  # the end of trial.stderr (at most reason.TAIL_BYTES), when it did not exit 0
    message: str = ""  # why, when the environment knows better than an exit code (e.g. "host h lost")
    leftovers: int = 0  # processes of the trial still there after it ended (or outside it when killed): killed


@dataclass(frozen=True)
class Output:
    """New bytes of a trial's ``trial.stdout`` / ``trial.stderr`` at byte ``offset`` (base64 in ``data``),
    streamed by an agent while the trial runs so that the manager keeps a copy of files it cannot read.
    Writing a chunk at its offset is idempotent: a chunk sent twice changes nothing."""

    trial_id: str
    stream: str  # "stdout" | "stderr"
    offset: int
    data: str


@dataclass(frozen=True)
class Requeued:
    """Emitted by a service (never by the runner): the trial's environment was lost and the trial
    should run again elsewhere, from scratch. The manager puts it back to WAITING."""

    trial_id: str
    reason: str


RunnerEvent = Started | Metrics | Exited | Requeued | Output
