"""Run NNI-style custom tuners and assessors, unchanged, behind nnix's pure protocols.

An NNI custom tuner is a stateful object (NNI section 3.6): ``update_search_space(space)``,
``generate_parameters(parameter_id, **kwargs)``, ``receive_trial_result(parameter_id, parameters,
value, **kwargs)``, and optionally ``generate_multiple_parameters(ids, **kwargs)``,
``trial_end(parameter_id, success, **kwargs)`` and ``import_data(data)``. A custom assessor has
``assess_trial(trial_job_id, trial_history)`` (returning ``AssessResult.Good/Bad`` or a bool) and
optionally ``trial_end(trial_job_id, success)``. Such classes have no ``Args`` model: they are built
as ``cls(**classArgs)``.

:class:`NniTunerAdapter` keeps one live instance and the facts it has told it. On each ``suggest``
it checks that ``ctx.history`` *continues* what the instance saw (every trial it proposed is there
with the same parameters, every result it was given is unchanged); then it only feeds what is new:
``receive_trial_result`` once per final result, ``trial_end`` once per ended trial (``success`` iff
SUCCEEDED), ``import_data`` for newly imported records. Otherwise (a resume, another experiment's
history) it builds a fresh instance and replays the history into it: ``update_search_space``,
``import_data`` of the imported records, ``generate_parameters`` once per past proposal in id
order (outputs discarded, so sequence-based tuners continue where they were), then every result
and every end, once. An exception class named ``NoMoreTrialError`` (NNI's, the ``nni`` shim's, or
the user's own) becomes :class:`~nnix.errors.NoMoreTrialsError`; proposals made before it in the
same request are kept, as NNI's ``generate_multiple_parameters`` does.

:class:`NniAssessorAdapter` does the same for assessors: before judging a trial it tells the
instance about trials that ended since (an ``assess_trial`` with their whole history first if it
never saw them, then ``trial_end``). The trial job id it passes is the record's ``trial_id`` when
records carry one, else the parameter id as a string.

Differences from NNI: results are passed as the scalar the manager extracted (the ``default`` of a
dict metric), not the raw dict; ``generate_multiple_parameters`` gets no ``st_callback`` (deferred
proposals are not supported); an assessor returning ``None`` counts as Good, with a warning (NNI's
dispatcher dies).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from nnix.assessors.base import AssessorContext, Decision
from nnix.errors import NoMoreTrialsError, TunerError
from nnix.model.status import TrialStatus
from nnix.model.trials import Direction, TrialRecord
from nnix.space import Params, SearchSpace, key
from nnix.tuners.base import TunerArgs, TunerContext

__all__ = ["NniAssessorAdapter", "NniTunerAdapter", "adapt", "is_no_more_trial_error"]

log = logging.getLogger("nnix.tuners.nni_adapter")


def is_no_more_trial_error(e: BaseException) -> bool:
    """Whether ``e`` is some ``NoMoreTrialError`` (matched by class name anywhere in its MRO)."""
    return any(c.__name__ == "NoMoreTrialError" for c in type(e).__mro__)


def _direction(class_args: Mapping[str, Any]) -> Direction:
    mode = class_args.get("optimize_mode")
    return Direction(mode) if mode in ("maximize", "minimize") else Direction.MAXIMIZE


def _construct(cls: type[Any], class_args: Mapping[str, Any], kind: str) -> Any:
    try:
        return cls(**class_args)
    except Exception as e:
        raise TunerError(
            f"cannot build the custom {kind} {cls.__name__}({', '.join(map(str, class_args))}): "
            f"{type(e).__name__}: {e}",
            f"check the {kind}'s classArgs against {cls.__name__}.__init__",
        ) from e


def _defines(cls: type[Any], name: str) -> bool:
    """Whether ``cls`` itself (or a user base class) defines ``name``, not only an NNI base class."""
    for c in cls.__mro__:
        if name in vars(c):
            module = getattr(c, "__module__", "") or ""
            return not (module == "nni" or module.startswith(("nni.", "nnix.")))
    return False


def _own_records(history: Sequence[TrialRecord]) -> list[TrialRecord]:
    return sorted((r for r in history if r.parameter_id >= 0), key=lambda r: r.parameter_id)


class NniTunerAdapter:
    """An NNI-style custom tuner class, run as an nnix :class:`~nnix.tuners.base.Tuner`."""

    Args: ClassVar[type[TunerArgs]] = TunerArgs  # not used: the wrapped class takes classArgs itself
    heavy: ClassVar[bool] = True  # user code of unknown cost: the manager calls it in a worker thread

    def __init__(self, cls: type[Any], class_args: Mapping[str, Any] | None = None) -> None:
        self.cls = cls
        self.class_args = dict(class_args or {})
        self.direction = _direction(self.class_args)
        self.instance: Any = _construct(cls, self.class_args, "tuner")
        self._fresh = True  # the instance has been told nothing yet
        self._reset_facts()

    def _reset_facts(self) -> None:
        self._space_key: str | None = None
        self._generated: dict[int, str] = {}  # parameter id -> key of the parameters it had
        self._results: dict[int, float] = {}  # parameter id -> value given to receive_trial_result
        self._ended: set[int] = set()  # parameter ids given to trial_end
        self._imported: list[str] = []  # keys of the imported records given to import_data, in order

    # -- the protocol --------------------------------------------------------------------------------

    def suggest(self, ctx: TunerContext, parameter_ids: Sequence[int]) -> list[Params]:
        if not self._continues(ctx.history, parameter_ids):
            self._rebuild(ctx)
        else:
            self._sync_space(ctx.space)
            self._feed(ctx.history)
        return self._generate(parameter_ids)

    # -- continuation and replay ---------------------------------------------------------------------

    def _continues(self, history: Sequence[TrialRecord], parameter_ids: Sequence[int]) -> bool:
        if self._fresh:
            return not history
        first_new = min(parameter_ids, default=0)
        by_pid = {r.parameter_id: r for r in history if r.parameter_id >= 0}
        for pid, r in by_pid.items():
            if self._generated.get(pid) != key(r.params):
                return False
        for pid in list(self._generated):
            if pid not in by_pid:
                if pid < first_new:
                    return False
                del self._generated[pid]  # proposed, never created: the manager asks for that id again
        for pid, value in self._results.items():
            if pid not in by_pid or by_pid[pid].value != value:
                return False
        if any(pid not in by_pid or not by_pid[pid].status.is_terminal for pid in self._ended):
            return False
        imported = [key(r.params) for r in history if r.parameter_id < 0]
        return imported[: len(self._imported)] == self._imported

    def _rebuild(self, ctx: TunerContext) -> None:
        if not self._fresh:
            log.info("custom tuner %s: rebuilding its state from %d records", self.cls.__name__, len(ctx.history))
            self.instance = _construct(self.cls, self.class_args, "tuner")
        self._fresh = False
        self._reset_facts()
        self._sync_space(ctx.space)
        self._feed_imported(ctx.history)
        for r in _own_records(ctx.history):
            self._generated[r.parameter_id] = key(r.params)
        exhausted = False
        for pid in sorted(self._generated):
            if exhausted:
                break
            try:
                self.instance.generate_parameters(pid)
            except Exception as e:
                if not is_no_more_trial_error(e):
                    raise self._failure("generate_parameters (replaying the history)", e) from e
                exhausted = True
        self._feed(ctx.history)

    def _sync_space(self, space: SearchSpace) -> None:
        k = key(dict(space.raw))
        if k != self._space_key:
            self._call("update_search_space", copy.deepcopy(dict(space.raw)))
            self._space_key = k
        self._fresh = False

    def _feed_imported(self, history: Sequence[TrialRecord]) -> None:
        imported = [r for r in history if r.parameter_id < 0]
        new = imported[len(self._imported) :]
        if not new:
            return
        if callable(getattr(self.instance, "import_data", None)):
            data = [{"parameter": copy.deepcopy(r.params), "value": r.value} for r in new if r.value is not None]
            if data:
                self._call("import_data", data)
        self._imported.extend(key(r.params) for r in new)

    def _feed(self, history: Sequence[TrialRecord]) -> None:
        self._feed_imported(history)
        has_end = callable(getattr(self.instance, "trial_end", None))
        for r in _own_records(history):
            pid = r.parameter_id
            if r.value is not None and pid not in self._results:
                self._call("receive_trial_result", pid, copy.deepcopy(r.params), r.value, customized=False)
                self._results[pid] = r.value
            if r.status.is_terminal and pid not in self._ended:
                if has_end:
                    self._call("trial_end", pid, r.status is TrialStatus.SUCCEEDED)
                self._ended.add(pid)

    # -- generation ----------------------------------------------------------------------------------

    def _generate(self, parameter_ids: Sequence[int]) -> list[Params]:
        ids = list(parameter_ids)
        out: list[Params] = []
        if not ids:
            return out
        if _defines(self.cls, "generate_multiple_parameters"):
            try:
                produced = list(self.instance.generate_multiple_parameters(ids))
            except Exception as e:
                if is_no_more_trial_error(e):
                    raise self._no_more(e) from e
                raise self._failure("generate_multiple_parameters", e) from e
            for pid, params in zip(ids, produced, strict=False):
                out.append(self._accept(pid, params))
        else:
            for pid in ids:
                try:
                    params = self.instance.generate_parameters(pid)
                except Exception as e:
                    if not is_no_more_trial_error(e):
                        raise self._failure("generate_parameters", e) from e
                    if not out:
                        raise self._no_more(e) from e
                    break
                out.append(self._accept(pid, params))
        return out

    def _accept(self, pid: int, params: Any) -> Params:
        if not isinstance(params, dict):
            raise TunerError(
                f"custom tuner {self.cls.__name__}.generate_parameters({pid}) returned {type(params).__name__}, "
                "not a dict",
                "return the trial's parameters as a dict of name -> value",
            )
        out = copy.deepcopy(params)
        self._generated[pid] = key(out)
        return out

    # -- helpers -------------------------------------------------------------------------------------

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return getattr(self.instance, method)(*args, **kwargs)
        except Exception as e:
            raise self._failure(method, e) from e

    def _failure(self, method: str, e: BaseException) -> TunerError:
        return TunerError(
            f"custom tuner {self.cls.__name__}.{method} raised {type(e).__name__}: {e}",
            "the error is in the custom tuner's code (see the manager log for the traceback)",
        )

    def _no_more(self, e: BaseException) -> NoMoreTrialsError:
        return NoMoreTrialsError(f"custom tuner {self.cls.__name__}: {str(e) or 'no more trials'}")


def _trial_job_id(record: TrialRecord) -> str:
    tid = getattr(record, "trial_id", None)
    return tid if isinstance(tid, str) and tid else str(record.parameter_id)


def decision_of(result: Any, where: str) -> Decision:
    """Read an ``assess_trial`` answer: ``AssessResult.Good/Bad``, a bool, or a :class:`Decision`."""
    if isinstance(result, Decision):
        return result
    if result is None:
        log.warning("%s returned None; taken as Good", where)
        return Decision.GOOD
    name = getattr(result, "name", None)
    if name in ("Good", "Bad"):
        return Decision.GOOD if name == "Good" else Decision.BAD
    value = getattr(result, "value", result)
    if isinstance(value, bool) or type(value).__name__ in ("bool", "bool_"):
        return Decision.GOOD if bool(value) else Decision.BAD
    raise TunerError(
        f"{where} returned {result!r}",
        "return AssessResult.Good / AssessResult.Bad (or True / False)",
    )


class NniAssessorAdapter:
    """An NNI-style custom assessor class, run as an nnix :class:`~nnix.assessors.base.Assessor`."""

    Args: ClassVar[type[TunerArgs]] = TunerArgs

    def __init__(self, cls: type[Any], class_args: Mapping[str, Any] | None = None) -> None:
        self.cls = cls
        self.class_args = dict(class_args or {})
        self.direction = _direction(self.class_args)
        self.instance: Any = _construct(cls, self.class_args, "assessor")
        self._seen: set[int] = set()  # parameter ids whose history the instance has been shown
        self._ended: set[int] = set()

    def assess(self, ctx: AssessorContext, trial: TrialRecord) -> Decision:
        by_pid = {r.parameter_id: r for r in ctx.history}
        if any(
            pid not in by_pid or (pid in self._ended and not by_pid[pid].status.is_terminal)
            for pid in self._seen | self._ended
        ):
            log.info("custom assessor %s: rebuilding its state from the history", self.cls.__name__)
            self.instance = _construct(self.cls, self.class_args, "assessor")
            self._seen, self._ended = set(), set()
        has_end = callable(getattr(self.instance, "trial_end", None))
        for r in sorted(ctx.history, key=lambda r: r.parameter_id):
            if r.parameter_id == trial.parameter_id or not r.status.is_terminal or r.parameter_id in self._ended:
                continue
            if not r.intermediate:
                continue  # NNI tells assessors only about trials that reported something
            if r.parameter_id not in self._seen:
                self._call("assess_trial", _trial_job_id(r), list(r.intermediate))
                self._seen.add(r.parameter_id)
            if has_end:
                self._call("trial_end", _trial_job_id(r), r.status is TrialStatus.SUCCEEDED)
            self._ended.add(r.parameter_id)
        result = self._call("assess_trial", _trial_job_id(trial), list(trial.intermediate))
        self._seen.add(trial.parameter_id)
        return decision_of(result, f"custom assessor {self.cls.__name__}.assess_trial")

    def _call(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self.instance, method)(*args)
        except Exception as e:
            raise TunerError(
                f"custom assessor {self.cls.__name__}.{method} raised {type(e).__name__}: {e}",
                "the error is in the custom assessor's code (see the manager log for the traceback)",
            ) from e


def adapt(kind: str, cls: type[Any], class_args: Mapping[str, Any]) -> tuple[Any, Direction] | None:
    """The adapter for an NNI-style class without an ``Args`` model, with its direction; None if
    ``cls`` is not one (no ``generate_parameters`` for a tuner, no ``assess_trial`` for an assessor)."""
    if kind == "tuner" and callable(getattr(cls, "generate_parameters", None)):
        tuner = NniTunerAdapter(cls, class_args)
        return tuner, tuner.direction
    if kind == "assessor" and callable(getattr(cls, "assess_trial", None)):
        assessor = NniAssessorAdapter(cls, class_args)
        return assessor, assessor.direction
    return None
