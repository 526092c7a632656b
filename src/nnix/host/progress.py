"""The foreground output of a manager run (first line, live progress, failure reasons, final summary), how a
run ended (:class:`RunOutcome`) and its exit codes; the progress line is also what ``nnix top`` and
``experiment status`` print."""

from __future__ import annotations

import json
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nnix.core.state import ExperimentState
from nnix.model.status import ExperimentStatus, TrialStatus
from nnix.query import Query

if TYPE_CHECKING:
    from nnix.core.manager import ExperimentManager


# --- exit codes of `create/resume --foreground` and `Experiment.run()` (README "Using it") ---------
EXIT_OK = 0  # the experiment ended normally and at least one trial succeeded
EXIT_ERROR = 3  # the experiment ended in ERROR (its reason is printed)
EXIT_NO_SUCCESS = 4  # the experiment ended but no trial succeeded (every one failed or was stopped)
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT): trials canceled, the experiment is STOPPED and resumable
EXIT_STOPPED = 143  # stopped from elsewhere (SIGTERM, `nnix stop`, the web UI's stop)


@dataclass
class RunOutcome:
    """How a manager run ended: the final state and the signal that stopped it, if any."""

    state: ExperimentState
    stop_signal: int | None = None

    @property
    def status(self) -> ExperimentStatus:
        return self.state.status

    @property
    def exit_code(self) -> int:
        st = self.state.status
        if st is ExperimentStatus.ERROR:
            return EXIT_ERROR
        if st in (ExperimentStatus.STOPPED, ExperimentStatus.STOPPING):
            return EXIT_INTERRUPTED if self.stop_signal == signal.SIGINT else EXIT_STOPPED
        q = Query(self.state)
        if len(q) and not q.count(TrialStatus.SUCCEEDED):
            return EXIT_NO_SUCCESS
        return EXIT_OK


def _elapsed(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def summary_line(state: ExperimentState, now: float | None, status: str | None = None, left: bool = False) -> str:
    """The full progress line (logs, `experiment status`, `top`): every count, never shortened. ``status``: the
    word to show instead of the recorded status (e.g. STOPPED for an experiment whose manager is gone);
    ``left``: no manager drives the experiment, so its trials recorded RUNNING or WAITING were left as they
    were ("left running", "left waiting": nothing records them until a resume). ``now`` None: the elapsed
    time up to the last recorded event."""
    return progress_line(state, now, None, status, left)


def progress_line(state: ExperimentState, now: float | None, width: int | None, status: str | None = None,
                  left: bool = False) -> str:
    """One progress line; with a ``width``, the most readable form that fits in ``width - 1`` columns
    (the last column is left free so that no terminal wraps it), cut with an ellipsis as a last resort.
    ``status`` and ``left``: see :func:`summary_line`."""
    was = "left " if left else ""
    q = Query(state)
    counts = [
        (q.count(TrialStatus.SUCCEEDED), "succeeded", "ok"),
        (q.count(TrialStatus.RUNNING), f"{was}running", f"{was}run"),
        (q.count(TrialStatus.WAITING), f"{was}waiting", f"{was}wait"),
        (q.count(TrialStatus.FAILED), "failed", "fail"),
        (q.count(TrialStatus.EARLY_STOPPED, TrialStatus.USER_CANCELED, TrialStatus.SYS_CANCELED), "stopped",
         "stop"),
    ]
    best = q.best()
    value = f"{best.final_value:.6g}" if best is not None and best.final_value is not None else None
    max_n = state.limits["max_trial_number"]
    total = f"{len(q)}/{max_n}" if max_n else str(len(q))
    elapsed = _elapsed(state.elapsed(now))
    status = status or state.status.value
    full = (
        f"{status:<13} trials {total}: " + ", ".join(f"{n} {long}" for n, long, _ in counts)
        + f" | best {f'{value} (trial {best.trial_id})' if best and value else '-'} | elapsed {elapsed}"
    )
    if width is None or len(full) < width:
        return full
    seconds = int(state.elapsed(now))
    elapsed = f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else elapsed
    shown = [c for i, c in enumerate(counts) if c[0] or i == 0]
    best_short = f"{value} ({best.trial_id})" if best and value else "-"
    forms = [
        f"{status} trials {total}: " + ", ".join(f"{n} {long}" for n, long, _ in shown)
        + f" | best {best_short} | {elapsed}",
        f"{status} {total}: " + ", ".join(f"{n} {short}" for n, _, short in shown)
        + f" | best {best_short} | {elapsed}",
        f"{status} {total}: " + " ".join(f"{n} {short}" for n, _, short in shown)
        + f" | best {value or '-'} | {elapsed}",
        f"{status} {total}: " + " ".join(f"{n} {short}" for n, _, short in shown) + f" | best {value or '-'}",
        f"{status} {len(q)}: " + " ".join(f"{n} {short}" for n, _, short in shown)
        + f" | best {value or '-'}",
    ]
    for line in forms:
        if len(line) < width:
            return line
    return forms[-1][: max(1, width - 2)] + "…"


def fit(text: str, width: int | None) -> str:
    """``text`` on one line of at most ``width - 1`` columns (an ellipsis marks a cut)."""
    text = " " * (len(text) - len(text.lstrip(" "))) + " ".join(text.split())
    if width is None or len(text) < width:
        return text
    return text[: max(1, width - 2)] + "…"


# the trial outcomes whose reason the foreground output reports (an assessor's early stop is routine)
REPORTED = (TrialStatus.FAILED, TrialStatus.SYS_CANCELED)


def failure_reasons(state: ExperimentState) -> list[tuple[str, int, str]]:
    """Distinct reasons of failed trials, most frequent first: (reason, count, first trial id)."""
    seen: dict[str, list[Any]] = {}
    for t in Query(state).trials(series=False):
        if t.status in REPORTED:
            reason = t.message or f"{t.status.value} (no reason recorded)"
            entry = seen.setdefault(reason, [0, t.trial_id])
            entry[0] += 1
    return sorted(((r, n, first) for r, (n, first) in seen.items()), key=lambda x: -x[1])


class Progress:
    """The foreground output. First line: the experiment id and the web UI's address. Then a progress
    line (live, fitted to the terminal's width; throttled plain lines when stdout is not a terminal), a
    line for each distinct failure reason as it first appears, the ERROR reason at once, and a final
    summary. Nothing when not ``enabled`` (daemons, the Python API)."""

    def __init__(self, manager: ExperimentManager, live: bool, url: str = "", notes: tuple[str, ...] = ()) -> None:
        self.manager = manager
        self.enabled = live
        self.url = url
        self.notes = notes
        self._last = ""
        self._last_t = 0.0
        self._last_scan = 0.0
        self._live: Any = None
        self._console: Any = None
        # what _scan looks at: the trials not ended at its last look, and those created since (by their number)
        self._watch: list[str] = []
        self._seen = 0
        self._reasons: dict[str, int] = {}
        self._error_shown = ""
        self.stop_signal: int | None = None

    @property
    def exp_id(self) -> str:
        return self.manager.experiment_id

    def start(self) -> None:
        if not self.enabled:
            return
        print(f"Experiment {self.exp_id}  web UI: {self.url}", flush=True)
        print(f"Ctrl-C stops it; `nnix resume {self.exp_id}` continues it.", flush=True)
        for note in self.notes:
            print(note, flush=True)
        state = self.manager.state  # a resumed experiment: report only what happens now
        self._watch, self._seen = list(state.live), len(Query(state))
        if sys.stdout.isatty():
            from rich.console import Console
            from rich.live import Live

            # the console first: the first render already has its width (a render without one is the full,
            # uncut line, which the terminal would show until the first refresh, or mixed with later output)
            self._console = Console(highlight=False)
            # rendered only from here and tick() (the run loop's thread): rich's refresh thread raced the lines
            # printed above the live line (a failure reason could land on the progress line's end)
            self._live = Live(self._render(), console=self._console, auto_refresh=False, transient=False)
            self._live.start(refresh=True)

    def _width(self) -> int | None:
        return int(self._console.width) if self._console is not None else None

    def _render(self) -> Any:
        from rich.text import Text

        width = self._width()
        text = Text(progress_line(self.manager.state, time.time(), width), no_wrap=True, overflow="ellipsis")
        top = sorted(self._reasons.items(), key=lambda kv: -kv[1])[:3]
        if not top:
            return text
        from rich.console import Group

        # the failure reasons seen so far, with their counts, under the progress line
        return Group(text, *(Text(fit(f"  {n}x {reason.splitlines()[0]}", width), no_wrap=True, overflow="ellipsis")
                             for reason, n in top))

    def _emit(self, line: str) -> None:
        if self._live is not None:
            from rich.text import Text

            self._live.console.print(Text(fit(line, self._width()), no_wrap=True, overflow="ellipsis"))
        else:
            print(line, flush=True)

    def _scan(self) -> None:
        """Report new failure reasons and a new ERROR reason."""
        state = self.manager.state
        q = Query(state)
        new = q.ids(self._seen)  # (in creation order)
        look, self._watch, self._seen = self._watch + new, list(state.live), len(q)
        for tid in look:
            t = q.trial(tid)
            if t is None or not t.status.is_terminal or t.status not in REPORTED:
                continue
            reason = t.message or f"{t.status.value} (no reason recorded)"
            n = self._reasons.get(reason, 0) + 1
            self._reasons[reason] = n
            if n == 1:  # a new reason: say it once, in full (later ones are counted in the summary)
                first, *rest = reason.splitlines() or [reason]
                self._emit(f"trial {t.trial_id} {t.status.value}: {first}")
                for line in rest:
                    self._emit(f"  {line.strip()}")
                if t.output_dir:  # (a trial that never started has no output to show)
                    self._emit(f"  its output: nnix log trial {self.exp_id} -T {t.trial_id}")
        if state.status is ExperimentStatus.ERROR and state.message and state.message != self._error_shown:
            self._error_shown = state.message
            running = Query(state).count(TrialStatus.RUNNING)
            then = "it starts no more trials" + (
                f"; waiting for {running} running trial(s) to end (Ctrl-C stops them)" if running else "")
            if state.message in self._reasons:
                self._emit(f"ERROR: experiment {self.exp_id} is in ERROR for the reason above: {then}")
            else:
                first, *rest = state.message.splitlines()
                self._emit(f"ERROR: {first}")
                for line in rest:
                    self._emit(f"  {line.strip()}")
                self._emit(f"  experiment {self.exp_id} is in ERROR: {then}")

    def on_signal(self, signum: int) -> None:
        if self.stop_signal is None:
            self.stop_signal = signum
            if self.enabled:
                name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
                self._emit(f"{name}: stopping experiment {self.exp_id} (canceling its trials) ...")

    def tick(self) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last_scan < 0.2:  # the run loop ticks twice a second too: nothing is missed
            return
        self._last_scan = now
        self._scan()
        if self._live is not None:
            self._live.update(self._render(), refresh=True)
            return
        line = summary_line(self.manager.state, time.time())
        key = line.rsplit("|", 1)[0]
        if key != self._last and now - self._last_t >= 1.0:
            print(line, flush=True)
            self._last, self._last_t = key, now

    def stop(self) -> None:
        if not self.enabled:
            return
        self._scan()
        if self._live is not None:
            self._live.update(self._render(), refresh=True)
            self._live.stop()
        else:
            print(summary_line(self.manager.state, time.time()), flush=True)

    def summary(self, outcome: RunOutcome) -> None:
        """The final summary: counts, best trial, top failure reasons, where the files are, what next."""
        if not self.enabled:
            return
        for line in summary_lines(outcome, self.manager.exp_dir):
            print(line, flush=True)


def any_started(state: ExperimentState) -> bool:
    """Whether a trial of the experiment ever started (has output to show)."""
    if Query(state).count(TrialStatus.SUCCEEDED, TrialStatus.RUNNING, TrialStatus.EARLY_STOPPED):
        return True  # (only a started trial gets these statuses: no trial is looked at)
    return any(t.output_dir for t in Query(state).trials(series=False))


def failure_report(state: ExperimentState, top: int = 3) -> list[str]:
    """The ``top`` distinct reasons of failed trials, most frequent first (``2x reason  (e.g. trial ID)``), and
    how many more there are: the summary's failures, and what the Python launchers log when a run ends."""
    reasons = failure_reasons(state)
    out = [f"{n}x {reason.splitlines()[0] if reason else reason}  (e.g. trial {first})"
           for reason, n, first in reasons[:top]]
    if len(reasons) > top:
        out.append(f"... {len(reasons) - top} more distinct reasons: nnix trial ls {state.experiment_id}")
    return out


def summary_lines(outcome: RunOutcome, exp_dir: Path) -> list[str]:
    st = outcome.state
    eid = st.experiment_id
    q = Query(st)
    counts = {s: n for s in TrialStatus if (n := q.count(s))}
    out = [f"--- experiment {eid} ---"]
    out.append(f"trials:   {len(q)} in {_elapsed(st.elapsed())}"
               + (": " + ", ".join(f"{counts[s]} {s.value}" for s in counts) if counts else ""))
    best = q.best()
    if best is not None and best.final_value is not None:
        out.append(f"best:     {best.final_value:.6g} ({st.direction}), trial {best.trial_id} (#{best.sequence_id}): "
                   f"{json.dumps(best.params)}")
    else:
        out.append("best:     - (no trial reported a final result)")
    for i, line in enumerate(failure_report(st)):
        out.append(f"{'failures:' if i == 0 else '':<10}{line}")
    out.append(f"files:    {exp_dir}  (log/manager.log" + (f"; a trial's output: nnix log trial {eid} -T TRIAL)"
                                                            if any_started(st) else ")"))
    code = outcome.exit_code
    if code in (EXIT_INTERRUPTED, EXIT_STOPPED, EXIT_ERROR) or (
        st.status is not ExperimentStatus.DONE and st.status is not ExperimentStatus.ERROR
    ):
        out.append(f"next:     nnix resume {eid}  (continue where it stopped)  |  nnix view {eid}  (web UI)")
    else:
        out.append(f"next:     nnix view {eid}  (web UI)  |  nnix trial ls {eid}  |  "
                   f"nnix experiment export {eid} -t csv -f out.csv")
    verdict = {
        EXIT_OK: "",
        EXIT_ERROR: "",
        EXIT_NO_SUCCESS: ", but no trial succeeded",
        EXIT_INTERRUPTED: f" by Ctrl-C; resume it: nnix resume {eid}",
        EXIT_STOPPED: " (stopped from outside)",
    }[code]
    out.append(f"experiment {eid}: {st.status.value}{verdict} (exit code {code})")
    if code == EXIT_ERROR and st.message:
        first, *rest = st.message.splitlines()
        out[-1] += f": {first}"
        out += [f"  {line.strip()}" for line in rest]
    return out
