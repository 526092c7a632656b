"""The nnix error tree.

Every error nnix raises on purpose is an :class:`NnixError`: a message for the user and a ``hint``
that says how to fix it. Foreign exceptions are translated at the boundary with ``raise ... from e``.
Only the CLI prints errors and chooses exit codes.
"""

from __future__ import annotations

from dataclasses import dataclass


class NnixError(Exception):
    """Base of all nnix errors. ``exit_code`` is what the CLI exits with."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}\n  hint: {self.hint}"
        return self.message


@dataclass(frozen=True)
class FieldIssue:
    """One problem in user input: where (a dotted path like ``trainingService.gpuIndices``), what, how to fix."""

    path: str
    message: str
    hint: str | None = None

    def render(self) -> str:
        text = f"{self.path}: {self.message}" if self.path else self.message
        if self.hint:
            text += f" (hint: {self.hint})"
        return text


class InputError(NnixError):
    """Bad user input, reported all at once. The CLI exits with 2."""

    exit_code = 2
    title = "invalid input"

    def __init__(self, issues: list[FieldIssue], source: str | None = None) -> None:
        self.issues = list(issues)
        self.source = source
        head = f"{self.title}" + (f" in {source}" if source else "")
        body = "\n".join(f"  - {i.render()}" for i in self.issues)
        super().__init__(f"{head} ({len(self.issues)} problem{'s' if len(self.issues) != 1 else ''}):\n{body}")


class ConfigError(InputError):
    """The experiment configuration is invalid."""

    title = "invalid experiment config"


class SearchSpaceError(InputError):
    """The search space is invalid."""

    title = "invalid search space"


class NoMoreTrialsError(NnixError):
    """A tuner has nothing left to propose (e.g. the grid is exhausted)."""


class TunerError(NnixError):
    """A tuner or assessor failed or was misconfigured."""


class StoreError(NnixError):
    """The experiment store could not be read or written."""


class StoreFullError(StoreError):
    """A write of the manager failed for lack of space (SQLite "database or disk is full", ENOSPC, EDQUOT).
    The manager stops without killing its trials; ``nnix resume`` continues once space is back."""


class StoreCorruptError(StoreError):
    """An experiment's store file exists but is not a readable nnix store (0 bytes, garbage, truncated)."""


class ServiceError(NnixError):
    """A training service could not start or manage an environment or a trial."""


class ServiceUnavailableError(ServiceError):
    """No host or environment of the training service could run a trial for its give-up time (see
    :mod:`nnix.services.health`): the experiment stops (ERROR) without failing the trials that wait."""


class GpuUnavailableError(ServiceError):
    """The GPU request can never be satisfied on this host (not merely busy now)."""


class ExperimentNotFoundError(NnixError):
    """No experiment with the given id is known."""


class ManagerUnreachableError(NnixError):
    """The experiment's manager process does not answer."""


class ExperimentBusyError(NnixError):
    """Another manager process owns the experiment (it holds the experiment's manager lock)."""
